"""The strategy loop's lease (engine/control.py CTL_LEASE_NS): renewed by the control plane's drain
thread, and from the moment the loop runs until that thread takes over by a bridge of its own."""
import threading
import time

from engine import control as C
from engine import shm

BRIDGE_MAX_S = 60.0               # the lease is renewed for a control plane that is starting at most this long


def renew_lease(ctl, sring_hdr, lease_ns):
    """The loop's lease renewed, the control block's and signal ring's heartbeats beaten (we own
    these two files)."""
    now = time.monotonic_ns()
    ctl[C.CTL_LEASE_NS] = now + lease_ns
    ctl[shm.H_HEARTBEAT_NS] = sring_hdr[shm.H_HEARTBEAT_NS] = now


class LeaseBridge:
    """Renews the loop's lease from the moment the loop runs until the control plane's drain
    thread takes over. Starting the plane (the zmq keys, aiohttp, the HTTP server) took 4.9 s on a
    2-core machine loaded by six busy processes, longer than the lease: the loop stopped itself
    before anyone had stopped watching it. Bounded: a plane that has not started in BRIDGE_MAX_S
    lets the lease lapse, as a hung control thread should."""

    def __init__(self, ctl, sring_hdr, lease_ns, period, loop_thread):
        self.done = threading.Event()
        args = (ctl, sring_hdr, lease_ns, period, loop_thread)
        self.thread = threading.Thread(target=self._run, args=args, name="engine-lease-bridge", daemon=True)
        self.thread.start()

    def _run(self, ctl, sring_hdr, lease_ns, period, loop_thread):
        end = time.monotonic() + BRIDGE_MAX_S
        while not self.done.wait(period) and loop_thread.is_alive() and time.monotonic() < end:
            renew_lease(ctl, sring_hdr, lease_ns)

    def stop(self):
        self.done.set()

