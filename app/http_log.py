"""The HTTP side's logger: a malformed request is counted and said in one line at most every
LOG_EVERY_S (never a traceback); an error of ours keeps its traceback; chatter is dropped."""
import logging
import os
import sys
import time

from .progress import log

LOG_EVERY_S = 10.0                # at most one line per kind of HTTP trouble this often (the rest are counted)


class HttpLog(logging.Logger):
    """aiohttp's request-handler logger. A malformed request (the parser's 4xx) is counted
    (engine_http_bad_requests_total) and costs at most one line every LOG_EVERY_S, never a
    traceback; an error of ours keeps its traceback (as rate-limited); chatter is dropped."""

    def __init__(self):
        super().__init__("engine.http", logging.DEBUG)
        self.bad = 0
        self._at, self._unlogged = {}, {}

    def line(self, kind, text):
        """One line of this kind at most every LOG_EVERY_S; the ones between are counted, said with the next."""
        now = time.monotonic()
        if now - self._at.get(kind, -1e9) < LOG_EVERY_S:
            self._unlogged[kind] = self._unlogged.get(kind, 0) + 1
            return
        n = self._unlogged.pop(kind, 0)
        self._at[kind] = now
        log(text + (f" (and {n} more since the last such line)" if n else ""))

    def _log(self, level, msg, args, exc_info=None, **kw):
        from aiohttp.http_exceptions import HttpProcessingError
        exc = sys.exc_info()[1] if exc_info is True else exc_info[1] if isinstance(exc_info, tuple) else exc_info
        if isinstance(exc, HttpProcessingError):
            self.bad += 1
            what = " ".join(str(getattr(exc, "message", "") or type(exc).__name__).split())  # one line
            what = what[:160].encode("ascii", "backslashreplace").decode()
            peer = str(args[0]) if args else "?"
            self.line("bad", f"http: {getattr(exc, 'code', 400)} to {peer}: {what} ({self.bad} malformed "
                              "requests so far, engine_http_bad_requests_total)")
        elif level >= logging.WARNING:
            try:
                text = str(msg) % args if args else str(msg)
            except (TypeError, ValueError):
                text = str(msg)
            if isinstance(exc, BaseException) and _ours(exc):
                import traceback
                text += "\n" + "".join(traceback.format_exception(type(exc), exc, exc.__traceback__)).rstrip()
            elif isinstance(exc, BaseException):  # aiohttp's own, on a connection closing as we stop
                text += f" in aiohttp: {type(exc).__name__}: {' '.join(str(exc).split())[:160]}"  # under a flood
            self.line("error", "http: " + text)


def _ours(exc):
    """Did the exception pass through this package's code (else it is the HTTP library's own)?"""
    import traceback
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # (the project: app/http_log.py)
    return any(f.filename.startswith(here + os.sep) and "site-packages" not in f.filename
               for f in traceback.extract_tb(exc.__traceback__))

