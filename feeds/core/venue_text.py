"""Text a venue sends (a gateway's error and system messages, the reason it refuses a login), made
safe for our log: escaped, cut short and rate-limited.

Why: the text is the venue's, not ours. Printed as sent, an ESC sequence recolours or clears the
operator's terminal and an embedded newline forges a log line of our own; a gateway that sends
millions of messages a second would fill the disk with stderr. So every character that is not
printable (control codes, Unicode line and format characters) and the backslash are written as
Python escapes (`\\x1b`, `\\n`, `\\u202e`, `\\\\`): one message is one line, and what it says is
still readable. At most LINES messages are printed per PER_S seconds; the others are counted and
their number said once, when the interval ends.
"""
import time

CAP = 240                 # characters of one message shown (after escaping); the rest is cut, said so
LINES, PER_S = 10, 10.0   # messages printed per interval, the interval


def escape(text, cap=CAP):
    """`text` as one printable line of at most about `cap` characters (see the module's doc)."""
    out = "".join(c if c.isprintable() and c != "\\" else repr(c)[1:-1] for c in text[:cap])
    if len(text) <= cap and len(out) <= cap:
        return out
    return out[:cap] + f"... [{len(text)} characters, cut]"


class Limit:
    """Say a message only while fewer than `lines` were said in the current interval of `per_s`
    seconds; count the others (`held`, `suppressed` in all) and say how many once the interval is
    over: at the next message, or at `tick()` (call it from a loop: a flood that stops is still
    said), or `flush()` at the end."""

    def __init__(self, say, what, lines=LINES, per_s=PER_S, clock=time.monotonic):
        self.say, self.what, self.lines, self.per_s, self.clock = say, what, lines, per_s, clock
        self.start = None
        self.shown = 0
        self.held = 0
        self.suppressed = 0

    def allow(self):
        """May one more message be said now? (False: it is counted.) Build the text only then."""
        now = self.clock()
        if self.start is None or now - self.start >= self.per_s:
            self.flush()
            self.start, self.shown = now, 0
        if self.shown < self.lines:
            self.shown += 1
            return True
        self.held += 1
        self.suppressed += 1
        return False

    def tick(self):
        if self.held and self.clock() - self.start >= self.per_s:
            self.flush()

    def flush(self):
        if self.held:
            self.say(f"{self.held} more {self.what} not shown (at most {self.lines} every {self.per_s:g} s)")
            self.held = 0
