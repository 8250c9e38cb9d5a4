"""A Binance venue on loopback (websocket + REST) that replays a real capture, with faults on
demand: `engine venue binance CAPTURE` (app/cli/venue_cmd.py), and the tests' venue.

    with BinanceVenue(capture_path, market="spot", speed=0.0, **faults) as v:
        v.ws_url    # ws://127.0.0.1:PORT    /stream?streams=btcusdt@depth@100ms/btcusdt@trade
        v.rest_url  # http://127.0.0.1:PORT  /api/v3/depth, /fapi/v1/exchangeInfo, ...
        v.uri       # binance-live://spot?symbols=BTCUSDT&ws=...&rest=...

The capture is the `<receive ns> <json>` file feeds/binance/capture.py reads (max_lines=N: its first N
lines only). Every websocket text frame is a capture line's JSON byte for byte, sent to the
connections that subscribed its "stream" (in the URL, or by a live SUBSCRIBE; UNSUBSCRIBE and
LIST_SUBSCRIPTIONS too). A stream name that is not `<symbol>@<known type>` (lower case) gets
{"error": {"code": 2, ...}, "id": N} from SUBSCRIBE, HTTP 400 in the URL. Streams the capture lacks
stay quiet.

The market is ONE position in the capture (market.py) shared by all connections, as a real venue:
it starts when the first connection has subscribed something, and a connection that joins later
gets the market from where it is then. speed > 0 plays at the capture's receive-time spacing
divided by speed; speed = 0 plays flat out but never runs ahead of the connections: each
connection has a queue (QUEUE_FRAMES), the market awaits room in it, and its writer awaits the
socket (TCP back-pressure), so a flat-out client gets every line. At speed 0 the market also waits
while no connection can take data (none yet, or all silent / half-open), so a client that
reconnects after a fault loses only what was queued for the old connection. At speed > 0 it keeps
real time and a connection that is away misses what was played meanwhile.

The server keeps its own book at the market position (the capture's snapshot, then every played
depth diff newer than it, including those received before the snapshot line, applied by exact
decimal string; qty 0 removes), and answers REST depth from it: lastUpdateId = the last applied
diff's u, bids descending, asks ascending, `limit` levels (default 100 spot / 500 futures, as
Binance; capped at 5000 / 1000), futures also "E"/"T" of that diff. A depth request that arrives
before the market reached the capture's snapshot line waits for it and gets the recorded snapshot
(its bytes as recorded when `limit` covers it), so a client that connects at the start and asks at
once sees what the capture saw. Diffs are parsed only when a depth reply needs them.

exchangeInfo (symbol=X, symbols=["X",...] or neither) describes the capture's symbol(s) with
Binance's filters (SYMBOLS); any other symbol, there or in depth, is HTTP 400 -1121. Every REST
reply carries X-MBX-USED-WEIGHT-1M: the weight used in the current wall-clock minute (depth by
limit as Binance documents it, exchangeInfo 20 spot / 1 futures). The server pings every ping_s
(default 20 s spot, 180 s futures), answers client pings, counts pongs, and closes (1008) a
connection that leaves a ping unanswered for pong_timeout_s.

Faults (constructor keywords; each applies to the first websocket connection only unless
fault_every_connection=True). k counts the capture frames sent on a connection from 1 (a
duplicated diff counts; the injected malformed/oversized frames do not):
  drop_after=k        abort the TCP connection after the k-th frame (no close frame)
  close_after=k       close frame 1001 after the k-th frame
  silence_after=k     no data frames for silence_s seconds (pings still answered), then resume;
                      what the market plays meanwhile is lost to it (at speed 0 the market waits
                      if no other connection takes data)
  half_open_after=k   send nothing more (no data, no pings), answer no pings, no close reply:
                      the socket stays open until the client drops it
  skip_diffs={i}      never send the capture's i-th depth diff (from 1): a missing diff
  dup_diffs={i}       send the i-th depth diff twice
  malformed_at={k}    a text frame that is not JSON just before the k-th frame
  oversized_at={k}    a 2 MiB JSON text frame (stream "oversized@pad") just before the k-th frame
  stale_snapshot      the first depth reply's lastUpdateId is 1000 lower (same levels)
  rest_delay_s        every REST reply waits that long (then answers from the market of that time)
  rest_status=[...]   the first REST calls answer these HTTP statuses, in order, with Retry-After
                      (retry_after seconds) and Binance's error body (429/418: code -1003)
  max_conn_s          close every connection (frame 1001) that many seconds after it opened, as
                      the venue's 24-hour close (except a half-open one: it sends nothing)

Hostile faults (a broken or hostile venue; attributes too, read when a connection opens or a
request comes, so a driver can change them as it goes): ws_fault applies to every connection
opened while it is set, after its ws_fault_after-th frame; it then sends no more market data and
streams its attack (never more than hostile_budget bytes a connection: hostile_spent counts the
connections that sent all of it, i.e. the client never dropped them):
  "fragments"   a text frame without FIN, then 64 KiB continuation frames for ever
  "big_pings"   1 MiB pings for ever; reads nothing more from the client
  "ping_flood"  125-byte pings for ever; reads nothing more (the client's pongs pile up)
  "trickle"     a 1000-byte text frame a byte every trickle_s (the frame never completes)
  "close"       a close frame (1000, its reason venue_text): a connection that dies young
rest_fault maps an endpoint ("depth", "exchangeInfo") to the reply every call gets:
  "retry_after_0" / "retry_after_huge"  429 with Retry-After 0 / 1e23
  "garbage"     200, an HTML body          "bad_json"  200, JSON cut short after its '{'
  "stale"       the book's reply with lastUpdateId 10^7 lower (every reply, older than any diff)
  "huge"        200, a chunked body that never ends (up to hostile_budget)
  "never"       no reply at all (the request waits until the server stops)
  "list"        200, a JSON list           "not_objects"  200, {"symbols": [1, "x", null]}
  "nested"      200, {"symbols": [[[...]]]} nested 100,000 deep
  "refused"     400, {"code": -1121, "msg": venue_text} (Binance's refusal, in the venue's words)
ws_refuse (an attribute, read as an upgrade comes): refuse every new websocket connection (HTTP 503,
Binance's overloaded body; counted in ws_refused), as a venue under maintenance does.
venue_text is what a hostile venue says in its own words (default a plain "Invalid symbol."): a
control sequence or a newline in it tries to forge the client's log.

Counters (read from any thread): connections (accepted), conn_times (monotonic s of each accept),
rest_times [(monotonic s, path)] of every REST request as it arrives, hostile_sent (bytes of
attacks), hostile_spent, live_connections (open sockets),
frames_sent (capture frames, all connections), rest_calls [(path, decoded query string, status)],
pongs, pings_sent, closed_reasons [(connection number, reason)] with reason one of client,
drop_after, close_after, half_open_after (recorded when it goes half-open; "client" follows when
the peer drops it), pong_timeout, max_conn_s, send_error, server_stop, kick (kick()), close
(ws_fault "close"); frames_by_conn {connection number: k}, position (capture lines played),
rest_waiting (depth requests waiting for the capture's snapshot), done (threading.Event: every
line played and every live connection's queue written).
"""
from .capture import Capture, CaptureError
from .server import BinanceVenue
from .tables import MARKETS

__all__ = ["BinanceVenue", "Capture", "CaptureError", "MARKETS"]
