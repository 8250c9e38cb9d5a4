"""A run's progress lines on stderr (`[engine] ...`), one owner for the daemon, the zmq publisher and
the run itself; --quiet (set_quiet) keeps only the warnings and errors among them."""
import sys
import threading

QUIET = threading.Event()
KEPT = ("warning", "error", "reload refused")  # (what --quiet still prints)


def set_quiet(on):
    (QUIET.set if on else QUIET.clear)()


def log(msg):
    if QUIET.is_set() and not msg.startswith(KEPT):
        return
    print(f"[engine] {msg}", file=sys.stderr, flush=True)
