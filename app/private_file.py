"""Opening a file that must be this user's and nobody else's (a runtime file, a key file) for a
reader that says in one line, naming the file, why it cannot use it."""
from engine.outputs import NotPrivate, open_own


def open_private(path, what, fix, error=RuntimeError):
    """A read-only fd on `path`, checked on the opened file (engine/outputs.py open_own), or None
    if there is none. `error` "WHAT PATH: ..." when it cannot be opened (a link is never followed)
    and "WHAT PATH is refused: WHY" then `fix` when it is not private."""
    try:
        return open_own(path)
    except OSError as e:
        raise error(f"{what} {path}: {e.strerror} (a link is never followed)") from None
    except NotPrivate as why:
        raise error(f"{what} {path} is refused: {why}{fix}") from None
