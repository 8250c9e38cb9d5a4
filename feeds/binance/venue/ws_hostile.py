"""A hostile venue's websocket attacks (ws_fault): once a connection's ws_fault_after-th frame is
sent, it gets no more market data, only the attack, until the client drops it or the venue has
spent hostile_budget bytes on it."""
import asyncio

from .frames import raw_frame, text_frame
from .tables import HOSTILE


async def attack(v, c):
    """c's hostile fault, streamed."""
    fault = c.fault
    if fault == "close":
        await v.close_conn(c, 1000, "close", v.venue_text.encode()[:123])
        return
    c.state = HOSTILE
    v.update_consumers()
    tr, protocol = c.request.transport, c.ws._writer.protocol
    if fault in ("big_pings", "ping_flood"):
        tr.pause_reading()  # (the client's pongs go unread)
    chunks = _chunks(fault)
    sent, i = 0, 0
    try:
        while c.state == HOSTILE and not tr.is_closing():
            b = chunks[i % len(chunks)] if fault == "trickle" else chunks[min(i, len(chunks) - 1)]
            if sent + len(b) > v.hostile_budget:
                v.hostile_spent += 1
                return
            tr.write(b)
            sent += len(b)
            v.hostile_sent += len(b)
            i += 1
            if fault == "trickle":
                await asyncio.sleep(v.trickle_s)
            elif protocol._paused:
                await protocol._drain_helper()
            else:
                await asyncio.sleep(0)
    except (ConnectionError, RuntimeError):  # the client dropped it
        pass


def _chunks(fault):
    """What the attack writes: its first chunks once each, then the last for ever (trickle: all of
    them in turn)."""
    if fault == "fragments":
        return [raw_frame(0x1, b'{"stream":"btcusdt@trade","data":{"p":"'), raw_frame(0x0, b"x" * (64 << 10))]
    if fault == "big_pings":
        return [raw_frame(0x9, b"p" * (1 << 20))]
    if fault == "ping_flood":
        return [raw_frame(0x9, b"p" * 125) * 512]
    whole = text_frame(b'{"stream":"btcusdt@trade","data":{"p":"' + b"1" * 1000)  # trickle: a byte at a time
    return [whole[i:i + 1] for i in range(len(whole))]
