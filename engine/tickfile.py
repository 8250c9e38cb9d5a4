"""Tick files: a header, then the ring's 64-byte tick records, then (once complete) an index.

Layout (little-endian):

    0     magic "ENGTICK1"
    8     u32 version (1)              12  u32 header size (multiple of 4096: records are page aligned)
    16    u32 record size (64)         20  u32 flags (bit 0: complete)
    24    u64 layout hash              32  i64 created (ns since the epoch)
    40    u64 records (when complete)  48  u64 index offset (when complete; 0 while written)
    56    u32 metadata length          60  u32 CRC32 of bytes 0..59 and the metadata
    64    metadata: JSON {"source", "instruments": [names by index], "fields": [...], "depth"}
          (depth: levels a side of the depth window the ticks carry, engine/records.py; a file
          without it is read as depth 0)
    header size: records, each a TICK_DTYPE (engine/records.py)
    index offset: blocks of BLOCK records, each int64 [first record, min ts_event, max ts_event,
          CRC32 of its bytes]; then "ENGTIDX1", u64 blocks, u32 CRC32 of the index

A record's seq is its record number in the file (a ring's gaps are in the file as gap ticks,
with their lost counts). A file is memory-mapped and its records read with no copy. While it is
being written (flag clear), it is readable up to its last complete record: records must carry
their own record number, so a torn tail is not read. A complete
file is checked against its index: a block whose CRC differs, a count that disagrees with the
size, or a damaged header is an error naming the file, never a silent misread.
"""
import json
import mmap
import os
import struct
import time
import zlib

import numpy as np

from .records import TICK_DTYPE

MAGIC = b"ENGTICK1"
INDEX_MAGIC = b"ENGTIDX1"
VERSION = 1
RECORD = 64
BLOCK = 4096  # records per index entry
PAGE = 4096
F_COMPLETE = 1
HEADER_RESERVE = 1 << 17  # bytes kept for the instrument table: ~10k symbols
_HEAD = struct.Struct("<8sIIIIQqQQI")  # up to the metadata length: 60 bytes
FIELDS = list(TICK_DTYPE.names)


class TickFileError(ValueError):
    """A tick file that cannot be read as one: the message names the file and what is wrong."""


def layout_hash():
    desc = json.dumps([(n, TICK_DTYPE.fields[n][0].str, TICK_DTYPE.fields[n][1]) for n in TICK_DTYPE.names])
    return int.from_bytes(zlib.crc32(desc.encode()).to_bytes(4, "little") + b"\0\0\0\0", "little") | (RECORD << 32)


def _header(meta, flags=0, records=0, index_off=0, created=None, size=None):
    mj = json.dumps(meta, separators=(",", ":")).encode()
    need = -(-(64 + len(mj)) // PAGE) * PAGE
    size = size or need
    if need > size:
        raise TickFileError(f"the instrument table ({len(meta.get('instruments', []))} names) outgrew "
                            f"the header's {size} bytes")
    head = _HEAD.pack(MAGIC, VERSION, size, RECORD, flags, layout_hash(), created or time.time_ns(), records,
                      index_off, len(mj))
    crc = zlib.crc32(head + mj)
    return (head + struct.pack("<I", crc) + mj).ljust(size, b"\0")


class TickFileWriter:
    """Append ticks to a new tick file; `close()` writes the index and marks it complete.
    Readers may map the file while it is written."""

    def __init__(self, path, instruments=(), source="", depth=0):
        self.path = str(path)
        self.meta = {"source": source, "instruments": list(instruments), "fields": FIELDS, "depth": int(depth)}
        self.created = time.time_ns()
        self.f = open(self.path, "wb")
        # room for an instrument table that grows as a feed finds instruments (set_instruments)
        self.head = _header(self.meta, created=self.created,
                            size=-(-(len(json.dumps(self.meta)) + HEADER_RESERVE) // PAGE) * PAGE)
        self.f.write(self.head)
        self.f.flush()
        self.n = 0
        self.blocks = []          # [first, min ts, max ts, crc]
        self._crc = 0
        self._bmin, self._bmax = None, None

    def set_instruments(self, names):
        """The instrument table may grow as a feed discovers instruments; it is rewritten at close
        (the header keeps its size, so the table must fit: it is checked)."""
        self.meta["instruments"] = list(names)

    def append(self, words):
        """Append int64[n, 8] tick words (or a TICK_DTYPE array)."""
        w = np.array(words, copy=True).view(np.int64).reshape(-1, 8)
        w[:, 0] = np.arange(self.n, self.n + len(w))  # seq = record number
        i = 0
        while i < len(w):  # per index block: CRC and time range
            room = BLOCK - self.n % BLOCK
            part = w[i:i + room]
            if self.n % BLOCK == 0:
                self._crc, self._bmin, self._bmax = 0, None, None
            self._crc = zlib.crc32(part.tobytes(), self._crc)
            lo, hi = int(part[:, 1].min()), int(part[:, 1].max())
            self._bmin = lo if self._bmin is None else min(self._bmin, lo)
            self._bmax = hi if self._bmax is None else max(self._bmax, hi)
            self.f.write(part.tobytes())
            self.n += len(part)
            i += len(part)
            if self.n % BLOCK == 0:
                self.blocks.append((self.n - BLOCK, self._bmin, self._bmax, self._crc))
        self.f.flush()

    def close(self, fsync=True):
        if self.f is None:
            return
        if self.n % BLOCK:
            self.blocks.append((self.n - self.n % BLOCK, self._bmin, self._bmax, self._crc))
        index_off = len(self.head) + self.n * RECORD
        idx = np.array(self.blocks, np.int64).reshape(-1, 4).tobytes()
        self.f.write(idx + INDEX_MAGIC + struct.pack("<QI", len(self.blocks), zlib.crc32(idx)))
        head = _header(self.meta, F_COMPLETE, self.n, index_off, self.created, size=len(self.head))
        self.f.seek(0)
        self.f.write(head)
        self.f.flush()
        if fsync:
            os.fsync(self.f.fileno())
        self.f.close()
        self.f = None


class TickFile:
    """A mapped tick file: `.words` (int64[n, 8]) and `.ticks` (TICK_DTYPE) views, no copy."""

    def __init__(self, path, verify=True):
        self.path = str(path)
        try:
            fd = os.open(self.path, os.O_RDONLY)
        except OSError as e:
            raise TickFileError(f"{self.path}: {e.strerror}") from None
        try:
            size = os.fstat(fd).st_size
            head = os.pread(fd, 64, 0)
            if len(head) < 64 or head[:8] != MAGIC:
                raise TickFileError(f"{self.path}: not a tick file (no {MAGIC.decode()} signature)")
            (_, version, hsize, rsize, flags, lhash, created, records, index_off, mlen) = _HEAD.unpack_from(head)
            (crc,) = struct.unpack_from("<I", head, 60)
            if version != VERSION:
                raise TickFileError(f"{self.path}: tick file version {version}, this engine reads {VERSION}")
            if rsize != RECORD or lhash != layout_hash():
                raise TickFileError(f"{self.path}: written with another record layout than this engine's")
            if hsize % PAGE or hsize < 64 + mlen or hsize > size:
                raise TickFileError(f"{self.path}: damaged header (size {hsize})")
            mj = os.pread(fd, mlen, 64)
            if zlib.crc32(head[:60] + mj) != crc:
                raise TickFileError(f"{self.path}: damaged header (checksum)")
            try:
                self.meta = json.loads(mj)
            except ValueError:
                raise TickFileError(f"{self.path}: damaged header (metadata)") from None
            self.created_ns = created
            self.complete = bool(flags & F_COMPLETE)
            self.header_size = hsize
            if self.complete:
                end = hsize + records * RECORD
                if index_off != end or size < end + 20:
                    raise TickFileError(f"{self.path}: truncated or damaged: {records} records and an index "
                                        f"at byte {index_off} do not fit its {size} bytes")
                n = records
            else:
                n = (size - hsize) // RECORD  # a partial last record is not read
            self._mm = mmap.mmap(fd, size, mmap.MAP_SHARED, mmap.PROT_READ) if size else None
        finally:
            os.close(fd)
        self.words = np.frombuffer(self._mm, np.int64, n * 8, hsize).reshape(n, 8) if n else np.zeros((0, 8), np.int64)
        self.index = np.zeros((0, 4), np.int64)
        if self.complete:
            self.index = self._read_index(index_off, size)
            if verify:
                self.verify()
        else:
            self.words = self.words[:self._continuous_prefix()]

    @property
    def ticks(self):
        return self.words.view(TICK_DTYPE).reshape(-1)

    @property
    def instruments(self):
        return list(self.meta.get("instruments", []))

    @property
    def source(self):
        return self.meta.get("source", "")

    @property
    def depth(self):
        """Levels a side of the depth window in the ticks (0: none, or a file from before depth)."""
        return int(self.meta.get("depth", 0))

    def __len__(self):
        return len(self.words)

    def _read_index(self, off, size):
        tail = self._mm[size - 20:size]
        if tail[:8] != INDEX_MAGIC:
            raise TickFileError(f"{self.path}: truncated or damaged: no index at its end")
        nb, crc = struct.unpack_from("<QI", tail, 8)
        if off + nb * 32 + 20 != size:
            raise TickFileError(f"{self.path}: damaged index ({nb} blocks do not fit)")
        raw = self._mm[off:off + nb * 32]
        if zlib.crc32(raw) != crc:
            raise TickFileError(f"{self.path}: damaged index (checksum)")
        idx = np.frombuffer(raw, np.int64).reshape(-1, 4)
        if nb != -(-len(self.words) // BLOCK):
            raise TickFileError(f"{self.path}: damaged index ({nb} blocks for {len(self.words)} records)")
        return idx

    def verify(self):
        """Check every block's CRC (about a second per few GB)."""
        for b, (first, _, _, crc) in enumerate(self.index):
            blk = self.words[first:first + BLOCK]
            if zlib.crc32(blk) != (crc & 0xFFFFFFFF):
                raise TickFileError(f"{self.path}: corrupted records {first}..{first + len(blk) - 1} "
                                    f"(block {b} checksum)")

    def _continuous_prefix(self):
        """How many records, from the start, carry their own record number (the rest is being
        written, or was torn)."""
        bad = np.nonzero(self.words[:, 0] != np.arange(len(self.words)))[0]
        return int(bad[0]) if len(bad) else len(self.words)

    def seek(self, ts_event):
        """Index of the first record with ts_event >= ts_event (len(self) if none)."""
        w = self.words
        if self.complete and len(self.index):
            blocks = np.nonzero(self.index[:, 2] >= ts_event)[0]
            if not len(blocks):
                return len(w)
            first = int(self.index[blocks[0], 0])
        else:
            first = 0
        hit = np.nonzero(w[first:, 1] >= ts_event)[0]
        return first + int(hit[0]) if len(hit) else len(w)

    def close(self):
        self.words = None
        if self._mm is not None:
            try:
                self._mm.close()
            except BufferError:
                pass  # a view is still alive somewhere: the mapping goes with it
