"""What the market queued for a connection, written to its socket, with the connection's faults
(drop, close, silence, half-open, skipped and duplicated diffs, malformed and oversized frames)."""
import asyncio

from .frames import text_frame
from .tables import HALF_OPEN, LIVE, OVERSIZED_BYTES, SILENT, WRITE_BATCH
from .ws_hostile import attack


async def write(v, c):
    """The frames of a batch go to the socket in one write (headers built here), then the writer
    waits while the socket is paused (TCP back-pressure, as aiohttp's own send does). Pings and
    control replies go through aiohttp's writer onto the same transport, unbuffered, so the order
    on the wire is the order written."""
    q = c.queue
    transport, protocol = c.request.transport, c.ws._writer.protocol
    parts = []
    actions = {v.drop_after, v.close_after, v.half_open_after, v.silence_after} - {None} if c.faulted else set()
    if c.fault is not None:
        actions.add(c.fault_after)

    def flush():
        if parts:
            transport.write(b"".join(parts))
            parts.clear()

    try:
        while True:
            batch = [await q.get()]
            while len(batch) < WRITE_BATCH and not q.empty():
                batch.append(q.get_nowait())
            try:
                if await _write_batch(v, c, batch, transport, parts, actions, flush):
                    return
                flush()
                v.frames_by_conn[c.no] = c.k
                if protocol._paused:
                    await protocol._drain_helper()
            finally:
                for _ in batch:
                    q.task_done()
    except asyncio.CancelledError:
        raise
    except Exception:  # the peer is gone
        v.mark_closed(c, "send_error")
    finally:
        v.frames_by_conn[c.no] = c.k
        while not q.empty():
            q.get_nowait()
            q.task_done()


async def _write_batch(v, c, batch, transport, parts, actions, flush):
    """Frames of capture lines `batch` into parts; True: stop writing (the connection ended or a
    fault took it over)."""
    cap = v.cap
    skip, dup = (v.skip_diffs, v.dup_diffs) if c.faulted else (set(), set())
    inject = (v.oversized_at | v.malformed_at) if c.faulted else set()
    for i in batch:
        if c.state == SILENT:
            flush()
            await c.resume.wait()
        if c.state not in (LIVE, SILENT) or transport.is_closing():
            flush()
            return True
        n = cap.diff_no[i]
        if n and n in skip:
            continue
        for _ in range(2 if n and n in dup else 1):
            k = c.k + 1
            if k in inject:
                if k in v.oversized_at:
                    head = b'{"stream":"oversized@pad","data":{"p":"'
                    parts.append(text_frame(head + b"x" * (OVERSIZED_BYTES - len(head) - 3) + b'"}}'))
                if k in v.malformed_at:
                    parts.append(text_frame(b'{"stream":"' + cap.stream[i].encode() + b'","data":{"e":"depthUpd'))
            parts.append(text_frame(cap.body[i]))
            c.k = k
            v.frames_sent += 1
            if k in actions:
                flush()
                v.frames_by_conn[c.no] = k
                if await _after_frame(v, c, k):
                    return True
    return False


async def _after_frame(v, c, k):
    """The per-connection faults that fire after the k-th frame; True: stop writing."""
    if c.fault is not None and k == c.fault_after:
        await attack(v, c)
        return True
    if not c.faulted:
        return False
    if k == v.drop_after:
        v.mark_closed(c, "drop_after")
        v.abort(c)
        return True
    if k == v.close_after:
        await v.close_conn(c, 1001, "close_after")
        return True
    if k == v.half_open_after:
        c.state = HALF_OPEN
        v.closed_reasons.append((c.no, "half_open_after"))
        v.update_consumers()
        return True
    if k == v.silence_after:
        c.state = SILENT
        c.resume.clear()
        v.update_consumers()
        asyncio.get_running_loop().call_later(v.silence_s, _unsilence, v, c)
    return False


def _unsilence(v, c):
    if c.state == SILENT:
        c.state = LIVE
        c.resume.set()
        v.update_consumers()
