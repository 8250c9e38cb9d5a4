"""Cross-process tick transport: our shared-memory ring vs multiprocessing.Queue, pyzmq ipc and
iceoryx2 (its Python bindings, when installed: the `peers` extra).

Throughput: the producer publishes as fast as it can, the consumer counts (ticks/s from first to
last tick received). Latency: the producer paces at the same rate for all four and stamps
CLOCK_MONOTONIC in each message; the consumer subtracts on receipt (one-way latency). The producer
runs on one core and the consumer on the other. Every message is 64 bytes.

iceoryx2 peer: an Ipc publish-subscribe service of a 64-byte ctypes struct (the stamp, then
padding), lossless (safe overflow off, the publisher's backpressure RetryUntilDelivered, a
4096-sample subscriber buffer). The producer loans a sample, writes the stamp into the shared
memory in place and sends it (zero-copy: loan_uninit / assume_init / send); the consumer busy-polls
Subscriber.receive() and reads the stamp in place through Sample.payload(). Polling, like our
ring's consumer (Queue and zmq block in the kernel instead); unlike ours, both sides are Python
calling the bindings per message, so the figures include the bindings' per-call cost, not the
Rust core alone. Its producer sleeps between paced messages like the other peers.
"""
import ctypes
import multiprocessing as mp
import os
import struct
import sys
import time

import _common  # noqa: F401  (sets sys.path)
import numpy as np
from numba import njit

from engine import shm
from engine.intrinsics import cpu_pause, monotonic_ns
from engine.tickring import POLL_EMPTY, POLL_TICK, TickConsumer, TickRing
from engine.tickring import poll as ring_poll
from engine.realtime import set_timer_slack
from feeds.core.publisher import publish_all, publish_paced

try:
    import iceoryx2 as iox2
except ImportError:  # the `peers` extra is not installed
    iox2 = None

CORES = sorted(os.sched_getaffinity(0))
PROD_CORE, CONS_CORE = CORES[0], CORES[-1]


def _ring_producer(name, n, interval_ns, ready, spin=False):
    os.sched_setaffinity(0, {PROD_CORE})
    buf = np.zeros((n, 8), np.int64)
    for i in range(0, n, 8):  # touch the buffer and compile before the consumer waits on us
        buf[i, 1] = i
    publish_paced(np.zeros(shm.HEADER_WORDS, np.int64), np.zeros(64, np.int64), 7, buf[:4], 0, 4, 0, 0)
    ring = TickRing(name, 1 << 22)
    ready.set()
    while ring.consumers() < 1:
        time.sleep(0.001)
    set_timer_slack(1000)
    if spin:  # a feed handler with a core of its own: never sleeps
        i, due = 0, time.monotonic_ns()
        while i < n:
            i, due = publish_paced(ring.hdr, ring.data, ring.mask, buf, i, n, due, interval_ns)
    else:
        publish_all(ring, buf, n, time.monotonic_ns(), interval_ns)
    ring.set_state(shm.STATE_FINISHED)
    while ring.consumers():
        time.sleep(0.01)
    ring.unlink()


@njit(nogil=True, cache=True)
def _ring_consume(hdr, data, mask, slot_base, out, n, lat, timed):
    """Read n seqs; with `timed`, stamp each tick's one-way latency (a clock read per tick,
    so throughput runs leave it off)."""
    got = 0
    lost = 0
    t_first = 0
    while got + lost < n:
        st = ring_poll(hdr, data, mask, slot_base, out)
        if st == POLL_EMPTY:
            cpu_pause()
            continue
        if st != POLL_TICK:
            lost += out[3]
            continue
        if timed:
            now = monotonic_ns()
            lat[got] = now - out[2]
        if got == 0:
            t_first = monotonic_ns()
        got += 1
    return got, lost, t_first, monotonic_ns()


def _compile_consumer():
    """JIT the consumer before it attaches: a consumer compiling while attached gets lapped."""
    hdr = np.zeros(shm.HEADER_WORDS, np.int64)
    hdr[shm.H_WRITE] = 0
    for timed in (True, False):
        _ring_consume(hdr, np.zeros(64, np.int64), 7, shm.H_CONSUMERS, np.zeros(8, np.int64), 0,
                      np.zeros(1, np.int64), timed)


def bench_ring(n, interval_ns, spin=False):
    _compile_consumer()
    name = f"bench-ring-{os.getpid()}"
    ready = mp.Event()
    p = mp.Process(target=_ring_producer, args=(name, n, interval_ns, ready, spin))
    p.start()
    ready.wait()
    os.sched_setaffinity(0, {CONS_CORE})
    c = TickConsumer(name, start="oldest")
    timed = interval_ns > 0
    lat = np.zeros(n if timed else 1, np.int64)
    got, lost, t0, t1 = _ring_consume(c.hdr, c.data, c.mask, c.slot_base, c.out, n, lat, timed)
    c.close()
    p.join()
    os.sched_setaffinity(0, set(CORES))
    return got, lost, (got - 1) / ((t1 - t0) / 1e9), lat[:got] if timed else lat[:0]


def _pace(i, t0, interval_ns):
    """Sleep (releasing the GIL, so a queue's feeder thread can run) until message i is due."""
    if interval_ns:
        ahead = t0 + i * interval_ns - time.monotonic_ns()
        if ahead > 0:
            time.sleep(ahead / 1e9)


def _mpq_producer(q, n, interval_ns):
    os.sched_setaffinity(0, {PROD_CORE})
    set_timer_slack(1000)
    pad = b"x" * 56
    t0 = time.monotonic_ns()
    for i in range(n):
        _pace(i, t0, interval_ns)
        q.put(struct.pack("<q", time.monotonic_ns()) + pad)
    q.put(None)


def _stamp_of(m):
    return struct.unpack_from("<q", m)[0]


def _consume_peer(recv, n, producer, stamp=_stamp_of):
    """Receive stamped messages until an empty one; returns (got, lost, msgs/s, latencies)."""
    os.sched_setaffinity(0, {CONS_CORE})
    producer.start()
    lat = np.zeros(n, np.int64)
    got, t_first, t_last = 0, 0, 0
    while True:
        m = recv()
        now = time.monotonic_ns()
        if not m:
            break
        if got == 0:
            t_first = now
        lat[got] = now - stamp(m)
        got += 1
        t_last = now
    producer.join()
    os.sched_setaffinity(0, set(CORES))
    return got, n - got, (got - 1) / ((t_last - t_first) / 1e9), lat[:got]


def bench_mp_queue(n, interval_ns):
    q = mp.Queue(maxsize=1 << 16)
    return _consume_peer(q.get, n, mp.Process(target=_mpq_producer, args=(q, n, interval_ns)))


def _zmq_producer(addr, n, interval_ns):
    import zmq
    os.sched_setaffinity(0, {PROD_CORE})
    set_timer_slack(1000)
    ctx = zmq.Context()
    s = ctx.socket(zmq.PUSH)
    s.setsockopt(zmq.SNDHWM, 0)
    s.connect(addr)
    pad = b"x" * 56
    time.sleep(0.2)
    t0 = time.monotonic_ns()
    for i in range(n):
        _pace(i, t0, interval_ns)
        s.send(struct.pack("<q", time.monotonic_ns()) + pad)
    s.send(b"")
    s.close(linger=-1)
    ctx.term()


def bench_zmq(n, interval_ns):
    import zmq
    addr = f"ipc:///tmp/bench-zmq-{os.getpid()}"
    ctx = zmq.Context()
    s = ctx.socket(zmq.PULL)
    s.setsockopt(zmq.RCVHWM, 0)
    s.bind(addr)
    try:
        return _consume_peer(s.recv, n, mp.Process(target=_zmq_producer, args=(addr, n, interval_ns)))
    finally:
        s.close()
        ctx.term()


class _Tick64(ctypes.Structure):
    """iceoryx2 payload: the CLOCK_MONOTONIC stamp and padding to 64 bytes (0 = end of stream)."""
    _fields_ = [("stamp", ctypes.c_int64), ("pad", ctypes.c_int64 * 7)]


IOX_BUFFER = 4096  # subscriber queue depth; the publisher retries (spins) while it is full


def _iox_service(name):
    node = (iox2.NodeBuilder.new().signal_handling_mode(iox2.SignalHandlingMode.Disabled)
            .create(iox2.ServiceType.Ipc))
    service = (node.service_builder(iox2.ServiceName.new(name)).publish_subscribe(_Tick64)
               .enable_safe_overflow(False).subscriber_max_buffer_size(IOX_BUFFER).history_size(0)
               .max_publishers(1).max_subscribers(1).open_or_create())
    return node, service


def _iox_producer(name, n, interval_ns):
    os.sched_setaffinity(0, {PROD_CORE})
    set_timer_slack(1000)
    node, service = _iox_service(name)
    pub = service.publisher_builder().backpressure_strategy(iox2.BackpressureStrategy.RetryUntilDelivered).create()
    while service.dynamic_config.number_of_subscribers < 1:
        time.sleep(0.001)
    t0 = time.monotonic_ns()
    for i in range(n):
        _pace(i, t0, interval_ns)
        sample = pub.loan_uninit()
        sample.payload().contents.stamp = time.monotonic_ns()  # written in place in shared memory
        sample.assume_init().send()
    sample = pub.loan_uninit()
    sample.payload().contents.stamp = 0
    sample.assume_init().send()
    while service.dynamic_config.number_of_subscribers:  # our data segment holds what is unread
        time.sleep(0.01)


def bench_iceoryx2(n, interval_ns):
    name = f"bench-ring/iceoryx2/{os.getpid()}/{n}/{interval_ns}"
    node, service = _iox_service(name)
    sub = service.subscriber_builder().buffer_size(IOX_BUFFER).create()
    producer = mp.Process(target=_iox_producer, args=(name, n, interval_ns))

    def recv():
        """Busy-poll for the next sample; its stamp, read in place (0 at the end or if the producer died)."""
        idle = 0
        while True:
            sample = sub.receive()
            if sample is not None:
                st = sample.payload().contents.stamp
                sample.delete()  # hand the slot back to the publisher
                if not st:
                    sub.delete()  # detach: lets the producer exit
                return st
            idle += 1
            if idle & 0xFFFFF == 0 and not producer.is_alive():
                sub.delete()
                return 0

    try:
        return _consume_peer(recv, n, producer, stamp=int)
    finally:
        del service, node


def main():
    a = _common.args(__doc__)
    n_tput = 2_000_000 if a.quick else 10_000_000
    n_peer_tput = 200_000 if a.quick else 1_000_000
    rate = 20_000  # every transport can sustain it: latency without queueing
    n_lat = 40_000 if a.quick else 200_000
    interval = int(1e9 / rate)
    mp.set_start_method("fork")
    res, notes = {}, {}
    runs = [("ring", bench_ring, n_tput), ("mp_queue", bench_mp_queue, n_peer_tput), ("zmq_ipc", bench_zmq, n_peer_tput)]
    if iox2 is not None:
        iox2.set_log_level(iox2.LogLevel.Error)  # not the "no config file, using defaults" line
        runs.append(("iceoryx2", bench_iceoryx2, n_peer_tput))
    else:
        notes["iceoryx2"] = "skipped: the iceoryx2 package is not installed (pip install -e '.[peers]')"
        print(f"iceoryx2: {notes['iceoryx2']}", flush=True)
    for label, fn, nt in runs:
        print(f"{label}: throughput over {nt:,} messages ...", file=sys.stderr, flush=True)
        got, lost, tput, _ = fn(nt, 0)
        print(f"{label}: latency over {n_lat:,} messages at {rate:,}/s ...", file=sys.stderr, flush=True)
        got_l, lost_l, _, lat = fn(n_lat, interval)
        res[label] = {"ticks_per_s": round(tput), **_common.pct(lat), "lost": int(lost + lost_l)}
    if res["ring"]["lost"]:
        sys.exit(f"the ring consumer was lapped ({res['ring']['lost']} lost): throughput figures are void")
    # ours with a producer that spins (a feed handler owning its core), at 20k/s and 1M/s
    _, lost_s, _, lat_s = bench_ring(n_lat, interval, spin=True)
    _, lost, _, lat = bench_ring(n_lat * 5, 1000, spin=True)
    metrics = {**res["ring"], "paced_rate_per_s": rate,
               "spinning_producer_at_20k_per_s": {**_common.pct(lat_s), "lost": int(lost_s)},
               "spinning_producer_at_1m_per_s": {**_common.pct(lat), "lost": int(lost)}}
    peers = {k: v for k, v in res.items() if k != "ring"}
    ratios = {}
    for peer in peers:
        ratios[f"ring_vs_{peer}_ticks_per_s"] = _common.ratio(res["ring"]["ticks_per_s"], res[peer]["ticks_per_s"], True)
        for q in ("p50", "p99", "p999"):
            ratios[f"ring_vs_{peer}_{q}"] = _common.ratio(res["ring"][f"one_way_{q}_ns"], res[peer][f"one_way_{q}_ns"], False)
    cols = ["ticks_per_s", "one_way_p50_ns", "one_way_p99_ns", "one_way_p999_ns", "one_way_p9999_ns", "one_way_max_ns"]
    _common.table(f"cross-process transport (latency paced at {rate:,}/s; producer core {PROD_CORE}, "
                  f"consumer core {CONS_CORE})", cols,
                  [("ring (ours)", res["ring"]), ("multiprocessing.Queue", res["mp_queue"]),
                   ("pyzmq ipc PUSH/PULL", res["zmq_ipc"])]
                  + ([("iceoryx2 pub/sub (loan, poll)", res["iceoryx2"])] if "iceoryx2" in res else [])
                  + [("ring, spinning producer 20k/s", metrics["spinning_producer_at_20k_per_s"]),
                     ("ring, spinning producer 1M/s", metrics["spinning_producer_at_1m_per_s"])])
    print("  (all producers above the last two sleep between messages; ours wakes cold, which costs ~300 ns)")
    _common.save("ring", metrics, peers, ratios, notes or None)


if __name__ == "__main__":
    main()
