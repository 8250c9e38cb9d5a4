"""Databento's live gateway protocol, up to the DBN stream (as Databento's docs and official client
define it; what follows start_session is feeds/databento/live_stream.py's).

The gateway greets (`lsg_version=`) and sends a CRAM challenge (`cram=`); we answer
`auth=<sha256 of "challenge|key">-<last 5 characters of the key: its bucket id>` with the
dataset, encoding=dbn and the heartbeat interval; it answers `success=1|session_id=...` (or
`success=0|error=...`: Refused, never showing the key). We send the subscription lines (symbols
in batches of 500, `is_last` on the final one) and `start_session`. Every line is
`key=value|key=value\\n`.
"""
import hashlib
from dataclasses import dataclass

from feeds.core.venue_text import escape
from feeds.databento.gateway_link import Dropped

DEFAULT_PORT = 13000
BUCKET_ID_LENGTH = 5   # the API key's last characters: its bucket id, sent in clear after the CRAM hash
SYMBOL_BATCH = 500     # symbols a subscription line carries
CLIENT = "signal-engine dbn-live"


@dataclass(frozen=True)
class Subscription:
    """What a session asks the gateway for."""
    dataset: str
    schema: str
    symbols: tuple       # raw symbols (stype_in=raw_symbol)
    heartbeat_s: int     # the heartbeat interval asked of the gateway
    start: object = None  # ns since the epoch: an intraday replay from then
    snapshot: bool = False  # a book snapshot (mbo) at the start of the session


class Refused(Exception):
    """The gateway refused our authentication; the message is its reason, escaped."""


def control_line(**fields):
    """`key=value|key=value\\n`, fields in the order given, None left out."""
    return ("|".join(f"{k}={v}" for k, v in fields.items() if v is not None) + "\n").encode()


def parse_control(line):
    return dict(t.partition("=")[::2] for t in line.decode("utf-8", "replace").strip().split("|"))


def cram_response(challenge, key):
    """The answer to the gateway's CRAM challenge: sha256("challenge|key") and the key's bucket id."""
    return hashlib.sha256(f"{challenge}|{key}".encode()).hexdigest() + "-" + key[-BUCKET_ID_LENGTH:]


def auth_line(challenge, key, dataset, heartbeat_s):
    return control_line(auth=cram_response(challenge, key), dataset=dataset, encoding="dbn", ts_out=0,
                        compression="none", heartbeat_interval_s=heartbeat_s, client=CLIENT)


def subscription_lines(schema, symbols, start=None, snapshot=False):
    """One line per SYMBOL_BATCH symbols (raw symbols), the last one marked is_last; start (ns)
    only when given."""
    out = []
    for i in range(0, len(symbols), SYMBOL_BATCH):
        out.append(control_line(schema=schema, stype_in="raw_symbol", symbols=",".join(symbols[i:i + SYMBOL_BATCH]),
                                start=start, snapshot=int(snapshot), is_last=int(i + SYMBOL_BATCH >= len(symbols))))
    return out


def default_gateway(dataset):
    """(host, port) of a dataset's gateway, as the official client computes it."""
    return f"{dataset.lower().replace('.', '-')}.lsg.databento.com", DEFAULT_PORT


def handshake(link, key, sub, replay=True):
    """Greeting, CRAM, the subscription (a Subscription; its start only if `replay`),
    start_session over a connected link (feeds/databento/gateway_link.py; a generator: it yields
    while it waits). Dropped when the peer does not speak the protocol, Refused when it refuses
    the key."""
    greet = parse_control((yield from link.read_line("greeting")))
    if "lsg_version" not in greet:
        raise Dropped(f"{link.where} did not greet as a Databento gateway")
    challenge = parse_control((yield from link.read_line("authentication")))
    if "cram" not in challenge:
        raise Dropped(f"{link.where} sent no CRAM challenge")
    link.send(auth_line(challenge["cram"], key, sub.dataset, sub.heartbeat_s))
    reply = parse_control((yield from link.read_line("authentication")))
    if reply.get("success") != "1":
        raise Refused(escape(reply.get("error") or "no reason given"))
    lines = subscription_lines(sub.schema, sub.symbols, sub.start if replay else None, sub.snapshot)
    link.send(b"".join(lines) + control_line(start_session=0))
