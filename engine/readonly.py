"""A read-only view for a numba call: numba compiles a writable array and a read-only one as two
types, so every path into one compiled function (a parser fed from a file's bytes or a live
socket's buffer, a backtest fed from a mapped file or a shadow's buffer) passes read-only, and it
is compiled once."""


def read_only(a):
    """a itself when it is read-only, else a read-only view of it (the same memory)."""
    if not a.flags.writeable:
        return a
    v = a.view()
    v.flags.writeable = False
    return v
