"""Reading capture files in chunks, compressed or not, with errors that name the file."""
import gzip
import os
import zlib

from .uri import FeedError

CHUNK = 1 << 22
GZIP_MAGIC = b"\x1f\x8b"
ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"


def check_readable(path):
    """Fail now, with the file's name, rather than in a feed process later."""
    import stat
    try:
        with open(path, "rb") as f:
            st = os.fstat(f.fileno())
            empty = stat.S_ISREG(st.st_mode) and st.st_size == 0  # (a pipe or device has no size to judge)
    except OSError as e:
        raise FeedError(f"{path}: {e.strerror}") from None
    if empty:
        raise FeedError(f"{path}: empty file (no messages)")


def _open(path):
    try:
        f = open(path, "rb")
    except OSError as e:
        raise FeedError(f"{path}: {e.strerror}") from None
    head = f.read(4)
    f.seek(0)
    if head[:2] == GZIP_MAGIC:
        return gzip.GzipFile(fileobj=f), "gzip"
    if head == ZSTD_MAGIC:
        import zstandard
        return zstandard.ZstdDecompressor().stream_reader(f, read_across_frames=True), "zstd"
    return f, None


def chunks(path, size=CHUNK):
    """Yield the file's decompressed bytes in chunks; corrupt or cut-off compression is a
    FeedError naming the file (never a partial chunk passed off as the end of the data)."""
    f, comp = _open(path)
    with f:
        while True:
            try:
                b = f.read(size)
            except (OSError, EOFError, zlib.error) as e:
                raise FeedError(f"{path}: corrupted {comp or 'file'} data: {e}") from None
            except Exception as e:  # zstandard.ZstdError is not an OSError
                if type(e).__name__ == "ZstdError":
                    raise FeedError(f"{path}: corrupted zstd data: {e}") from None
                raise
            if not b:
                return
            yield b
