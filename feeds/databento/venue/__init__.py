"""A Databento live gateway on loopback: the live protocol as the official `databento` client
speaks it, replaying a DBN MBO file as a live session. `engine venue databento FILE`
(app/cli/venue_cmd.py), and the tests' gateway.

Per connection (session.py): greeting (`lsg_version=`), CRAM challenge, the client's `auth=` line
checked against the key we were given (cram.py; key None: every key fails), `success=1` (or
`success=0|error=...` and close), subscription lines until `start_session`, then the DBN stream:
metadata (version 3, no symbology, as live), a SymbolMappingMsg per subscribed symbol (an ErrorMsg
for a symbol the file does not have), with snapshot=1 the book at the current point (per
instrument an R record, then an add per resting order, F_SNAPSHOT | F_BAD_TS_RECV, the
instrument's last one with F_LAST), then the file's records from the current point: flat out
(speed=0) or at the recorded ts_recv spacing / speed. When the records run out the session stays
open with heartbeats (SystemMsg, every heartbeat_interval_s the client asked, default 30), as a
real gateway would, or closes (at_end="close").

The "market" moves on across connections: a new session continues where the last one stopped
(plus `skip_on_reconnect` records that pass while nobody listens: they move the book, which the
snapshot then shows, but are never sent); resume=False replays from the start for every session
(independent clients, bench/_live_dbn.py). speed > 0 paces by ts_recv (not with repeat > 1).

Faults, per session number (0 = the first connection), as constructor options:
  key            the valid key: a client with another one fails authentication
  auth_error     what the refusal says (default "Authentication failed.", as Databento's)
  drop_after     {session: N}: close the TCP connection after N records
  silent_after   {session: N}: after N records send nothing at all (no heartbeats) and never close:
                 what a half-open connection looks like to the client
  error_after    {session: N}: send an ErrorMsg (error_text) after N records, then go on
  refuse         sessions closed as soon as they connect (before the greeting): failed attempts
  inject         {session: [(N, bytes), ...]}: send these bytes after N records, then go on: a
                 hostile gateway's records, made by hostile.py (floods of error and system
                 messages carrying ANSI escapes and newlines, mappings of symbols never
                 subscribed, a second id for a subscribed symbol, records of any id)
Records count only the file's records (not mappings, snapshot, heartbeats or injected bytes).
A gateway's bad prices are the file's records altered (`recs`, then `body = recs.tobytes()`,
before the first session; hostile.spoil).

`sessions` holds per connection: auth (the client's auth line's fields), subscriptions,
records, snapshot_records, heartbeats, closed_by (refused, auth failure, bad dataset, drop,
silent, end, client ...).
"""
from .gateway import DEMO_KEY, DatabentoVenue
from .hostile import BAD_PRICES, error_records, mapping_records, spoil, system_records, with_id
from .records import DbnFileError, load

__all__ = ["DEMO_KEY", "DatabentoVenue", "BAD_PRICES", "error_records", "mapping_records", "spoil", "system_records",
           "with_id", "DbnFileError", "load"]
