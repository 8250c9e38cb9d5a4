"""The backtest report's plotting process: forked when `engine backtest` starts, it imports
matplotlib while the parent loads the strategy and the model, draws the loop's plots (scores,
compute time) while the parent evaluates, and half the market plots while the parent writes the
rest of the report. Drawing is otherwise ~1 s of a 3 s command on one core.

Requests go down a pipe as pickles (plot names, directory, series, summary); the child answers
each with the names it drew. A child that cannot start, fails or takes too long is not fatal:
whatever it did not draw is drawn in the parent (`finish`). Only a single-threaded process forks
(a thread holding a lock would leave the child stuck); the child ignores SIGINT and ends when the
pipe closes, so it never outlives the command.
"""
import os
import pickle
import select
import signal
import struct
import threading
import time

TIMEOUT_S = 60.0
_LEN = struct.Struct("<Q")


def _read_exact(fd, n):
    buf = bytearray()
    while len(buf) < n:
        b = os.read(fd, n - len(buf))
        if not b:
            raise EOFError
        buf += b
    return bytes(buf)


def _send(fd, obj):
    data = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    view = memoryview(_LEN.pack(len(data)) + data)
    while view:
        view = view[os.write(fd, view):]


def _recv(fd):
    return pickle.loads(_read_exact(fd, _LEN.unpack(_read_exact(fd, _LEN.size))[0]))


def _serve(rd, wr):
    from . import report
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    report.preload()
    while True:
        try:
            names, out_dir, series, summary = _recv(rd)
        except EOFError:
            return
        done = []
        for name in names:
            try:
                report.PLOTS[name](out_dir, series, summary)
                done.append(name)
            except Exception:  # the parent draws it again and reports the error itself
                pass
        _send(wr, done)


class Plotter:
    """Draws named report plots (replay/report.py PLOTS) in a forked process, or here."""

    def __init__(self, fork=True):
        self.pid = -1
        self.pending = []  # ((names, out_dir, series, summary), send future) not answered yet
        self.sender = None
        if fork and threading.active_count() == 1:
            r1, w1 = os.pipe()
            r2, w2 = os.pipe()
            try:
                self.pid = os.fork()
            except OSError:
                self.pid = -1
            if self.pid == 0:
                code = 1
                try:
                    os.close(w1)
                    os.close(r2)
                    _serve(r1, w2)
                    code = 0
                finally:
                    os._exit(code)
            os.close(r1)
            os.close(w2)
            if self.pid < 0:
                os.close(w1)
                os.close(r2)
            else:
                self.wr, self.rd = w1, r2

    def draw(self, names, out_dir, series, summary):
        """Start drawing `names` into out_dir (in the child when there is one)."""
        req = (list(names), out_dir, series, summary)
        if self.pid > 0:
            # sent from a thread: the pipe holds 64 KB and the child may still be drawing, and
            # this process has its own work to go on with meanwhile (requests stay in order)
            if self.sender is None:
                from concurrent.futures import ThreadPoolExecutor
                self.sender = ThreadPoolExecutor(1, thread_name_prefix="plot-requests")
            self.pending.append((req, self.sender.submit(_send, self.wr, req)))
            return
        self._draw_here(*req)

    def finish(self):
        """Wait for every request; draw here what the child did not."""
        deadline = time.monotonic() + TIMEOUT_S
        while self.pending:
            req, sent = self.pending[0]
            done = None
            try:
                sent.result(max(0.0, deadline - time.monotonic()))
            except Exception:  # (a broken pipe or a timeout: the child is not answering)
                self._stop()
            if self.pid > 0:
                ready, _, _ = select.select([self.rd], [], [], max(0.0, deadline - time.monotonic()))
                if ready:
                    try:
                        done = _recv(self.rd)
                    except (EOFError, OSError, pickle.UnpicklingError):
                        done = None
            if done is None:  # the child died or hung: it answers nothing more
                self._stop()
                for r, _ in self.pending:
                    self._draw_here(*r)
                self.pending = []
                break
            self.pending.pop(0)
            self._draw_here([n for n in req[0] if n not in done], *req[1:])

    @staticmethod
    def _draw_here(names, out_dir, series, summary):
        from . import report
        for name in names:
            report.PLOTS[name](out_dir, series, summary)

    def _stop(self):
        if self.pid > 0:
            os.kill(self.pid, signal.SIGKILL)  # (first: a sender blocked on the pipe then fails)
            os.waitpid(self.pid, 0)
            self.pid = -1
            self._join_sender()
            os.close(self.wr)
            os.close(self.rd)

    def _join_sender(self):
        if self.sender is not None:
            self.sender.shutdown(wait=True)
            self.sender = None

    def close(self):
        """End the child (it exits when its pipe closes) and reap it."""
        if self.pid > 0:
            if self.pending:  # (an error on the way: nothing more is wanted of it)
                os.kill(self.pid, signal.SIGKILL)
            self._join_sender()
            os.close(self.wr)
            os.close(self.rd)
            try:
                os.waitpid(self.pid, 0)
            except ChildProcessError:
                pass
            self.pid = -1
