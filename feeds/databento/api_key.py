"""The Databento API key: from key_file (a file of ours no one else can read) or $DATABENTO_API_KEY.
Errors name the URI and the file, never the key."""
import os
import stat

from feeds.core import uri as U
from feeds.databento.gateway_protocol import BUCKET_ID_LENGTH


def read_key(u, key_file):
    """The API key for URI u (FeedError, one line, when there is none fit to send)."""
    if key_file:
        try:
            fd = os.open(key_file, os.O_RDONLY | os.O_NOFOLLOW)
        except OSError as e:
            raise U.FeedError(f"{u}: key_file {key_file}: {e.strerror}") from None
        try:
            st = os.fstat(fd)
            if st.st_uid != os.getuid() or st.st_mode & 0o077 or not stat.S_ISREG(st.st_mode):
                raise U.FeedError(f"{u}: key_file {key_file} must be a file owned by you with mode 0600 "
                                  f"(it is {stat.S_IMODE(st.st_mode):04o}, owner uid {st.st_uid}): "
                                  f"chmod 600 {key_file}")
            key = os.read(fd, 4096).decode("ascii", "replace").strip()
        finally:
            os.close(fd)
        where = f"key_file {key_file}"
    else:
        key = os.environ.get("DATABENTO_API_KEY", "").strip()
        where = "DATABENTO_API_KEY"
        if not key:
            raise U.FeedError(f"{u}: no API key: set DATABENTO_API_KEY or give key_file=PATH")
    if len(key) <= BUCKET_ID_LENGTH or not key.isascii() or not key.isprintable() or "|" in key:
        raise U.FeedError(f"{u}: the API key in {where} is not a Databento key (printable ASCII, no '|')")
    return key
