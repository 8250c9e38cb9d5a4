"""Tick files: a header, then the ring's 64-byte tick records, then (once complete) an index.

Layout (little-endian):

    0     magic "ENGTICK1"
    8     u32 version (1)              12  u32 header size H (multiple of 4096: records are page aligned)
    16    u32 record size (64)         20  u32 flags (bit 0: complete; bit 1: checked, below)
    24    u64 layout hash              32  i64 created (ns since the epoch)
    40    u64 records (when complete)  48  u64 index offset (when complete; 0 while written)
    56    u32 metadata length          60  u32 CRC32 of bytes 0..59 and the metadata
    64    metadata: JSON {"source", "instruments": [names by index], "specs": {a record per
          instrument, engine/instruments.py pack()}, "fields": [...], "depth", "stopped"} (depth: levels
          a side of the depth window the ticks carry, engine/records.py; a file without it is read
          as depth 0. specs: what each instrument is (multiplier, currency, calendar, tick and lot
          size); a file without them has only names, described from its source by readers above
          the core. stopped: {"records", "reason"}, written when the writer stopped on an error,
          e.g. a full disk)
    With flag bit 1 (every file this engine writes; files without it, from before, are read as
    they were), the header also holds, at places that follow from H alone:
    S = (H - CRC_AREA) / 2: a spare copy of bytes 0 .. 64 + metadata length. The header is
          rewritten while the file is written (the instrument table as the feed finds
          instruments, a stop, the complete flag): the spare first, then the one at 0, so a
          writer killed in between leaves one whole copy. A reader takes the spare (and says
          so) when the checksum at 0 fails.
    H - CRC_AREA: running block checksums, CRC_ENTRIES entries of 8 bytes: u32 CRC32 of block
          b's BLOCK records, u32 its complement. Entry b is written as block b fills, after its
          records, so a killed writer leaves them; an entry of zeros: the block has not filled.
          (Blocks past CRC_ENTRIES, 268M records into a file, are checked by the index only.)
          Sizes: each header copy S bytes (64 + the metadata + HEADER_RESERVE for the table to grow
          into, page-rounded), CRC_AREA 512 KiB; written as a hole, so they take disk only as
          they are written. The version stays 1: an older engine reads these files as before.
    H     records, each a TICK_DTYPE (engine/records.py)
    index offset: blocks of BLOCK records, each int64 [first record, min ts_event, max ts_event,
          CRC32 of its bytes]; then "ENGTIDX1", u64 blocks, u32 CRC32 of the index

A record's seq is its record number in the file (a ring's gaps are in the file as gap ticks,
with their lost counts). A file is memory-mapped and its records read with no copy.

A complete file is checked against its index: a block whose CRC differs, a count that disagrees
with the size, or a damaged header is an error naming the file, never a silent misread. A file
without the complete flag (being written, or its writer was killed or stopped on an error) is
checked block by block against its running checksums: a mismatch is an error naming the file,
the block and its records (never a shorter read); the records past the last checked block are
read, must carry their own record numbers (else an error), and are reported in `warnings` ("N
records past the last checked block are unchecked"), which every command that reads the file
prints in its summary; a torn last record is not read (and reported).
"""
import errno as _errno
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
BLOCK = 4096  # records per index entry and per running checksum
PAGE = 4096
F_COMPLETE = 1
F_CHECKED = 2  # running block checksums and a spare header (see the layout)
HEADER_RESERVE = 1 << 18  # bytes kept for the instrument table, in each header copy: ~20k symbols
CRC_ENTRIES = 1 << 16
CRC_AREA = 8 * CRC_ENTRIES
_HEAD = struct.Struct("<8sIIIIQqQQI")  # up to the metadata length: 60 bytes
FIELDS = list(TICK_DTYPE.names)


class TickFileError(ValueError):
    """A tick file that cannot be read as one: the message names the file and what is wrong."""


class _Completed(Exception):
    """The file was completed while we read it: read it again."""


def layout_hash():
    desc = json.dumps([(n, TICK_DTYPE.fields[n][0].str, TICK_DTYPE.fields[n][1]) for n in TICK_DTYPE.names])
    return int.from_bytes(zlib.crc32(desc.encode()).to_bytes(4, "little") + b"\0\0\0\0", "little") | (RECORD << 32)


def _pages(n):
    return -(-n // PAGE) * PAGE


def _header(meta, flags=0, records=0, index_off=0, created=None, size=None, room=None):
    """The header's first 64 bytes and the metadata (`room`: the bytes they may take)."""
    mj = json.dumps(meta, separators=(",", ":")).encode()
    size = size or _pages(64 + len(mj))
    if 64 + len(mj) > (room or size):
        raise TickFileError(f"the instrument table ({len(meta.get('instruments', []))} names) outgrew "
                            f"the header's {room or size} bytes")
    head = _HEAD.pack(MAGIC, VERSION, size, RECORD, flags, layout_hash(), created or time.time_ns(), records,
                      index_off, len(mj))
    crc = zlib.crc32(head + mj)
    return head + struct.pack("<I", crc) + mj


def _specs(names, specs):
    """The records of `names` (engine/instruments.py) as the header stores them, checked."""
    from .instruments import pack, table
    return pack(table(list(names), list(specs)))


def _pwrite_all(fd, data, off):
    mv = memoryview(data).cast("B")
    while len(mv):
        k = os.pwrite(fd, mv, off)
        if k <= 0:
            raise OSError(_errno.ENOSPC, os.strerror(_errno.ENOSPC))
        mv, off = mv[k:], off + k


class TickFileWriter:
    """Append ticks to a new tick file; `close()` writes the index and marks it complete.
    Readers may map the file while it is written. A write that fails (a full disk) is an
    OutputError naming the file; the file is then left readable, incomplete, with its whole
    records, its checked blocks and the reason (metadata "stopped")."""

    def __init__(self, path, instruments=(), source="", depth=0, specs=None):
        from .outputs import OutputError, open_private, reason
        self.path = str(path)
        self.meta = {"source": source, "instruments": list(instruments), "fields": FIELDS, "depth": int(depth)}
        if specs is not None:
            self.meta["specs"] = _specs(instruments, specs)
        self.created = time.time_ns()
        # each header copy has room for an instrument table that grows as a feed finds instruments
        self.slot = _pages(len(json.dumps(self.meta)) + HEADER_RESERVE)
        self.header_size = 2 * self.slot + CRC_AREA
        self.n = 0
        self.blocks = []          # [first, min ts, max ts, crc]
        self._crc = 0
        self._bmin, self._bmax = None, None
        self.error = None
        self.fd = None
        try:
            self.fd = open_private(self.path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)  # (0600, never through a link)
            os.ftruncate(self.fd, self.header_size)  # a hole: the spare header and checksums take no space yet
            self._write_header(0)
        except OSError as e:
            if self.fd is not None:
                os.close(self.fd)
                self.fd = None
                try:
                    os.unlink(self.path)  # nothing in it yet
                except OSError:
                    pass
            raise OutputError(self.path, "ticks", reason(e), e.errno) from None

    def _write_header(self, flags, records=0, index_off=0):
        h = _header(self.meta, flags | F_CHECKED, records, index_off, self.created, size=self.header_size,
                    room=self.slot)
        _pwrite_all(self.fd, h, self.slot)  # the spare first: a kill between the two leaves one whole copy
        _pwrite_all(self.fd, h, 0)

    def _fail(self, e):
        """A write failed: keep the whole records, mark the file stopped (with why), raise."""
        from .outputs import OutputError, reason
        self.error = OutputError(self.path, "ticks", reason(e), getattr(e, "errno", None))
        try:
            os.ftruncate(self.fd, self.header_size + self.n * RECORD)  # a batch written in part goes
        except OSError:
            pass
        self.meta["stopped"] = {"records": self.n, "reason": reason(e)}
        try:
            self._write_header(0)
        except (OSError, TickFileError):
            pass  # the flag still says incomplete; only the reason is missing
        raise self.error from None

    def set_instruments(self, names, specs=None):
        """The instrument table may grow as a feed discovers instruments: the header is rewritten
        (both copies) at once when it changes, so a killed writer leaves the names it had (the
        header keeps its size, so the table must fit: it is checked). specs: their records
        (engine/instruments.py), when the source has them."""
        names = list(names)
        specs = _specs(names, specs) if specs is not None else self.meta.get("specs")
        if names == self.meta["instruments"] and specs == self.meta.get("specs"):
            return
        self.meta["instruments"] = names
        if specs is not None:
            self.meta["specs"] = specs
        if self.fd is None:
            return
        try:
            self._write_header(0)
        except OSError as e:
            if self.error is None:
                self._fail(e)

    def append(self, words):
        """Append int64[n, 8] tick words (or a TICK_DTYPE array)."""
        if self.error is not None:
            raise self.error
        w = np.array(words, copy=True).view(np.int64).reshape(-1, 8)
        w[:, 0] = np.arange(self.n, self.n + len(w))  # seq = record number
        i = 0
        while i < len(w):  # per block: CRC and time range
            room = BLOCK - self.n % BLOCK
            part = w[i:i + room]
            fresh = self.n % BLOCK == 0
            crc = zlib.crc32(part.tobytes(), 0 if fresh else self._crc)
            lo, hi = int(part[:, 1].min()), int(part[:, 1].max())
            try:
                _pwrite_all(self.fd, part.tobytes(), self.header_size + self.n * RECORD)
            except OSError as e:
                self._fail(e)
            self._crc = crc
            self._bmin = lo if fresh else min(self._bmin, lo)
            self._bmax = hi if fresh else max(self._bmax, hi)
            self.n += len(part)
            i += len(part)
            if self.n % BLOCK == 0:
                b = self.n // BLOCK - 1
                self.blocks.append((self.n - BLOCK, self._bmin, self._bmax, self._crc))
                if b < CRC_ENTRIES:  # after its records: an entry always covers records in the file
                    try:
                        _pwrite_all(self.fd, struct.pack("<II", self._crc, self._crc ^ 0xFFFFFFFF),
                                    self.header_size - CRC_AREA + 8 * b)
                    except OSError as e:
                        self._fail(e)

    def close(self, fsync=True):
        """Write the index and mark the file complete (nothing more when a write failed: the file
        stays incomplete, as it is marked)."""
        if self.fd is None:
            return
        try:
            if self.error is None:
                blocks = self.blocks + ([(self.n - self.n % BLOCK, self._bmin, self._bmax, self._crc)]
                                        if self.n % BLOCK else [])
                index_off = self.header_size + self.n * RECORD
                idx = np.array(blocks, np.int64).reshape(-1, 4).tobytes()
                try:
                    _pwrite_all(self.fd, idx + INDEX_MAGIC + struct.pack("<QI", len(blocks), zlib.crc32(idx)),
                                index_off)
                    if fsync:
                        os.fsync(self.fd)  # the index is durable before the flag says it is there
                    self._write_header(F_COMPLETE, self.n, index_off)
                    if fsync:
                        os.fsync(self.fd)
                except OSError as e:
                    self._fail(e)
        finally:
            os.close(self.fd)
            self.fd = None


class TickFile:
    """A mapped tick file: `.words` (int64[n, 8]) and `.ticks` (TICK_DTYPE) views, no copy.
    `.warnings`: what a reader must be told (an incomplete file, its unchecked records)."""

    def __init__(self, path, verify=True):
        self.path = str(path)
        self._mm = None
        for _ in range(3):
            try:
                self._open(verify)
                return
            except _Completed:
                self.close()
        raise TickFileError(f"{self.path}: it changed while being read, three times (a writer at work?)")

    def _read_header(self, fd):
        """(fixed fields, metadata) from the header at 0, or from the spare copy when that one is
        damaged."""
        head = os.pread(fd, 64, 0)
        if len(head) < 64 or head[:8] != MAGIC:
            raise TickFileError(f"{self.path}: not a tick file (no {MAGIC.decode()} signature)")
        f0 = _HEAD.unpack_from(head)
        (_, version, hsize, rsize, flags, lhash) = f0[:6]
        if version != VERSION:
            raise TickFileError(f"{self.path}: tick file version {version}, this engine reads {VERSION}")
        if rsize != RECORD or lhash != layout_hash():
            raise TickFileError(f"{self.path}: written with another record layout than this engine's")
        why = self._check_slot(fd, head, 0)
        if why is not None:  # (a writer rewriting it right now: a moment later it is whole)
            time.sleep(0.001)
            head = os.pread(fd, 64, 0)
            why = self._check_slot(fd, head, 0) if head[:8] == MAGIC else why
            f0 = _HEAD.unpack_from(head) if why is None else f0
        if why is None:
            return f0, self._meta
        spare = (hsize - CRC_AREA) // 2
        if flags & F_CHECKED and hsize > CRC_AREA and (hsize - CRC_AREA) % (2 * PAGE) == 0:
            h1 = os.pread(fd, 64, spare)
            if len(h1) == 64 and h1[:8] == MAGIC and self._check_slot(fd, h1, spare) is None:
                f1 = _HEAD.unpack_from(h1)
                if f1[2] == hsize:
                    self.warnings.append(f"{self.path}: its header is damaged (a writer killed while rewriting "
                                         "it?): read from its spare copy")
                    return f1, self._meta
        raise TickFileError(f"{self.path}: damaged header ({why})")

    def _check_slot(self, fd, head, off):
        """None when the header copy at `off` is whole (its metadata then in self._meta), else why not."""
        (_, _, hsize, _, _, _, _, _, _, mlen) = _HEAD.unpack_from(head)
        size = os.fstat(fd).st_size
        if hsize % PAGE or hsize < 64 + mlen or hsize > size or (off and off + 64 + mlen > hsize):
            return f"size {hsize}"
        mj = os.pread(fd, mlen, off + 64)
        if zlib.crc32(head[:60] + mj) != struct.unpack_from("<I", head, 60)[0]:
            return "checksum"
        try:
            self._meta = json.loads(mj)
        except ValueError:
            return "metadata"
        return None

    def _running_crcs(self, fd, hsize):
        """The running checksums of the blocks filled so far (uint32)."""
        raw = os.pread(fd, CRC_AREA, hsize - CRC_AREA)
        e = np.frombuffer(raw.ljust(CRC_AREA, b"\0"), "<u4").reshape(-1, 2)
        valid = e[:, 1] == ~e[:, 0]
        k = int(np.argmin(valid)) if not valid.all() else len(e)
        later = np.nonzero((e[k:, 0] | e[k:, 1]) != 0)[0]
        if len(later):
            b = k + int(later[0])
            raise TickFileError(f"{self.path}: damaged block checksums (entry of block {b}, records "
                                f"{b * BLOCK}..{(b + 1) * BLOCK - 1})")
        return e[:k, 0].copy()

    def _open(self, verify):
        self.warnings = []
        try:
            fd = os.open(self.path, os.O_RDONLY)
        except OSError as e:
            raise TickFileError(f"{self.path}: {e.strerror}") from None
        try:
            fields, self.meta = self._read_header(fd)
            (_, _, hsize, _, flags, _, created, records, index_off, _) = fields
            self.created_ns = created
            self.complete = bool(flags & F_COMPLETE)
            self.checked = bool(flags & F_CHECKED)
            self.header_size = hsize
            crcs = None
            if not self.complete and self.checked:
                # before the size: an entry is written after its records, so they are in the file
                crcs = self._running_crcs(fd, hsize)
            size = os.fstat(fd).st_size
            partial = 0
            if self.complete:
                end = hsize + records * RECORD
                if index_off != end or size < end + 20:
                    raise TickFileError(f"{self.path}: truncated or damaged: {records} records and an index "
                                        f"at byte {index_off} do not fit its {size} bytes")
                n = records
            else:
                n, partial = divmod(size - hsize, RECORD)
            self._mm = mmap.mmap(fd, size, mmap.MAP_SHARED, mmap.PROT_READ) if size else None
            self.words = np.frombuffer(self._mm, np.int64, n * 8, hsize).reshape(n, 8) if n else \
                np.zeros((0, 8), np.int64)
            self.index = np.zeros((0, 4), np.int64)
            self.block_crcs = np.zeros(0, np.uint32)
            if self.complete:
                self.index = self._read_index(index_off, size)
                self.checked_records = n
            else:
                self._incomplete(fd, crcs, n, partial)
        finally:
            os.close(fd)
        if verify:
            self.verify()

    def _incomplete(self, fd, crcs, n, partial):
        path = self.path
        nck = 0
        if crcs is not None:
            nck = len(crcs) * BLOCK
            if nck > n:
                raise TickFileError(f"{path}: truncated or damaged: checksums of {len(crcs)} blocks "
                                    f"({nck:,} records) but {n:,} records in the file")
            self.block_crcs = crcs
        self.checked_records = nck
        tail = self.words[nck:, 0]
        bad = np.nonzero(tail != np.arange(nck, n))[0]
        if len(bad):
            flags = struct.unpack("<I", os.pread(fd, 4, 20))[0]
            if flags & F_COMPLETE:
                raise _Completed()  # it was completed as we read it (its index is past the records)
            r = nck + int(bad[0])
            raise TickFileError(f"{path}: damaged: record {r:,} (past the last checked block, records "
                                f"{nck:,}..{n - 1:,}) does not carry its record number")
        stopped = self.meta.get("stopped")
        why = (f"its writer stopped at record {int(stopped.get('records', n)):,}: {stopped.get('reason', '?')}"
               if isinstance(stopped, dict) else "no end mark: its writer was killed, or is still writing")
        if crcs is not None:
            msg = f"{path}: incomplete ({why}): {n:,} records, {nck:,} of them in checked blocks"
            if n > nck:
                msg += f"; {n - nck:,} records past the last checked block are unchecked"
        else:
            msg = f"{path}: incomplete ({why}), written before running block checksums: its {n:,} records are unchecked"
        if partial:
            msg += f"; a torn last record ({partial} bytes) is not read"
        self.warnings.append(msg)

    @property
    def ticks(self):
        return self.words.view(TICK_DTYPE).reshape(-1)

    @property
    def instruments(self):
        return list(self.meta.get("instruments", []))

    @property
    def specs(self):
        """A record per instrument (engine/instruments.py), or None for a file that carries names
        only (written before records existed, or by a writer that had none)."""
        raw = self.meta.get("specs")
        if raw is None:
            return None
        from .instruments import InstrumentError, unpack
        try:
            return unpack(self.instruments, raw)
        except InstrumentError as e:
            raise TickFileError(f"{self.path}: bad instrument table in the header: {e}") from None

    @property
    def source(self):
        return self.meta.get("source", "")

    @property
    def depth(self):
        """Levels a side of the depth window in the ticks (0: none, or a file from before depth)."""
        return int(self.meta.get("depth", 0))

    @property
    def unchecked(self):
        """Records no checksum covers (past the last filled block of an incomplete file)."""
        return len(self.words) - self.checked_records

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
        """Check every block's CRC (about a second per few GB): the index's of a complete file,
        the running checksums of an incomplete one."""
        crcs = self.index[:, 3] if self.complete else self.block_crcs
        for b, crc in enumerate(crcs):
            first = b * BLOCK
            blk = self.words[first:first + BLOCK]
            if zlib.crc32(blk) != (int(crc) & 0xFFFFFFFF):
                raise TickFileError(f"{self.path}: corrupted records {first}..{first + len(blk) - 1} "
                                    f"(block {b} checksum)")

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
            self._mm = None
