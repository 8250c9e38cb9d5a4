"""The argparse type= validators the commands share, and the run's own option strings
(app/exec_options.py: --paper-exec, --gate-exec) too: a bad value is one line naming the option
(argparse adds "argument --NAME:"), before any work starts."""
import argparse
import math
import os


def positive_float(s):
    v = float(s)
    if not (v > 0 and v != float("inf")):  # (nan and inf too: a --duration nan would never end)
        raise argparse.ArgumentTypeError(f"must be a finite number > 0, got {s}")
    return v


def nonneg_float(s):
    v = float(s)
    if not (v >= 0 and v != float("inf")):
        raise argparse.ArgumentTypeError(f"must be a finite number >= 0, got {s}")
    return v


def pow2(s):
    v = int(s)
    if v < 2 or v & (v - 1):
        raise argparse.ArgumentTypeError(f"must be a power of two >= 2, got {s}")
    return v


def integer(s):
    try:
        return int(s)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {s!r}") from None


def positive_int(s):
    v = integer(s)
    if v < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {s}")
    return v


def nonneg_int(s):
    v = integer(s)
    if v < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {s}")
    return v


def int_range(lo, hi):
    def check(s):
        v = integer(s)
        if not lo <= v <= hi:
            raise argparse.ArgumentTypeError(f"must be {lo}..{hi}, got {s}")
        return v
    return check


def existing_file(s):
    """A readable regular file (a directory, a missing or unreadable path is refused by name)."""
    import stat
    try:
        st = os.stat(s)
    except OSError as e:
        raise argparse.ArgumentTypeError(f"{s}: {e.strerror}") from None
    if stat.S_ISDIR(st.st_mode):
        raise argparse.ArgumentTypeError(f"{s}: is a directory, not a file")
    if not os.access(s, os.R_OK):
        raise argparse.ArgumentTypeError(f"{s}: permission denied")
    return s


def finite_float(s):
    """A finite number (a fee may be negative: a rebate). NaN or infinity is refused: a NaN fee
    makes every PnL NaN, and no loss limit (--kill-loss) fires on NaN."""
    try:
        v = float(s)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {s!r}") from None
    if not math.isfinite(v):
        raise argparse.ArgumentTypeError(f"must be a finite number, got {s}")
    return v
