"""Cut a DBN file (zstd or plain) to its first records, for a fixture:

  python tests/data/cut_dbn.py SOURCE.dbn.zst RECORDS OUT.dbn.zst

The cut ends with the first record that ends an exchange event (flag F_LAST) at or after RECORDS
records, so no event is left half-written. The metadata header is kept byte for byte but for its
`limit`, set to the number of records kept: what Databento writes for a request with that limit
(start, end, symbology stay those of the source). Records are copied unchanged."""
import struct
import sys

import zstandard

F_LAST = 0x80
LIMIT_AT = 8 + 16 + 2 + 8 + 8  # "DBN", version, length; dataset, schema, start, end (DBN v1-v3)
MBO_FLAGS = 36                  # flags byte of an MBO record (the records F_LAST is looked for in)
RT_MBO = 0xA0


def cut(raw, records):
    if raw[:3] != b"DBN":
        raise SystemExit("not a DBN stream")
    pos = head = 8 + struct.unpack_from("<I", raw, 4)[0]
    n = 0
    while pos < len(raw):
        length = raw[pos] * 4
        ends_event = raw[pos + 1] != RT_MBO or raw[pos + MBO_FLAGS] & F_LAST
        pos += length
        n += 1
        if n >= records and ends_event:
            break
    meta = bytearray(raw[:head])
    struct.pack_into("<Q", meta, LIMIT_AT, n)
    return bytes(meta) + raw[head:pos], n


def main(src, records, out):
    with open(src, "rb") as f:
        data = f.read()
    if data[:4] == b"\x28\xb5\x2f\xfd":
        data = zstandard.ZstdDecompressor().stream_reader(data).read()
    body, n = cut(data, int(records))
    with open(out, "wb") as f:
        f.write(zstandard.ZstdCompressor(level=19).compress(body))
    print(f"{out}: {n} records")


if __name__ == "__main__":
    main(*sys.argv[1:])
