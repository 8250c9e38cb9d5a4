"""The market clock: ONE position in the capture shared by every connection, as a real venue.

It starts when the first connection has subscribed something. speed > 0 plays at the capture's
receive-time spacing divided by speed; speed 0 plays flat out but never runs ahead of the
connections: each has a queue (QUEUE_FRAMES) the market awaits room in, and while no connection
can take data (none yet, or all silent or half-open) the market waits too."""
import asyncio

from .tables import LIVE, SILENT


async def play(v):
    """Play venue v's capture to its end, then set v.done once every live queue is written."""
    cap, loop = v.cap, asyncio.get_running_loop()
    await v.started.wait()
    t0, ns0 = loop.time(), cap.ns[0]
    for i in range(len(cap.ns)):
        if v.speed > 0:
            delay = t0 + (cap.ns[i] - ns0) / 1e9 / v.speed - loop.time()
            if delay > 0:
                await asyncio.sleep(delay)
        elif not v.consumers.is_set():
            await v.consumers.wait()
        stream = cap.stream[i]
        if stream is None:
            if i == cap.snapshot_at:
                v.position = i + 1
                v.snap_reached.set()
            continue
        for c in tuple(v.subs.get(stream, ())):
            if c.state == LIVE:
                if c.queue.full():
                    await c.queue.put(i)
                else:
                    c.queue.put_nowait(i)
        v.position = i + 1
    while any(c.state in (LIVE, SILENT) and c.queue._unfinished_tasks for c in v.conns.values()):
        await asyncio.sleep(0.001)
    v.done.set()
