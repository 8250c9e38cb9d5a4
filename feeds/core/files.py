"""Reading capture files in chunks, compressed or not, with errors that name the file."""
import gzip
import os
import zlib

from feeds.core.uri import FeedError

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
    if head == ZSTD_MAGIC or (head[1:] == b"\x2a\x4d\x18" and head[0] & 0xF0 == 0x50):  # or a skippable frame
        import zstandard
        try:
            _check_zstd_frames(f, path)
        except BaseException:
            f.close()
            raise
        return zstandard.ZstdDecompressor().stream_reader(f, read_across_frames=True), "zstd"
    return f, None


def _check_zstd_frames(f, path):
    """Walk the zstd frames' headers and block headers (RFC 8878) to the end of the file: a cut-off
    frame is an error naming the file. zstandard's stream reader ends quietly at the end of its
    input wherever it is (half a capture passed off as all of it), so this is checked first; it
    reads a few bytes a block, not the data."""
    end = os.fstat(f.fileno()).st_size
    pos = frames = 0

    def need(n, what):
        b = os.pread(f.fileno(), n, pos)
        if len(b) < n:  # (past the end already: the data before this was cut)
            raise FeedError(f"{path}: truncated zstd data: the file ends ({end:,} bytes) inside frame {frames + 1}'s "
                            f"{what if pos <= end else 'data'} (an incomplete copy or download?)")
        return b

    while pos < end:
        magic = int.from_bytes(need(4, "magic number"), "little")
        if magic & 0xFFFFFFF0 == 0x184D2A50:  # a skippable frame: its size, then that many bytes
            pos += 4
            pos += 4 + int.from_bytes(need(4, "size"), "little")
        elif magic == 0xFD2FB528:
            pos += 4
            fhd = need(1, "header")[0]
            single = fhd >> 5 & 1
            fcs = (1 if single else 0, 2, 4, 8)[fhd >> 6]
            pos += 1 + (0 if single else 1) + (0, 1, 2, 4)[fhd & 3] + fcs
            while True:
                h = int.from_bytes(need(3, "block header"), "little")
                kind, size = h >> 1 & 3, h >> 3
                if kind == 3:
                    raise FeedError(f"{path}: corrupted zstd data: reserved block type at byte {pos}")
                pos += 3 + (1 if kind == 1 else size)  # an RLE block stores one byte
                if h & 1:
                    break
            pos += 4 if fhd >> 2 & 1 else 0  # the content checksum
        else:
            raise FeedError(f"{path}: corrupted zstd data: no frame at byte {pos}")
        frames += 1
    if pos > end:
        raise FeedError(f"{path}: truncated zstd data: frame {frames} ends at byte {pos:,} but the file has "
                        f"{end:,} bytes (an incomplete copy or download?)")


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
