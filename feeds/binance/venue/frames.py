"""Server-to-client websocket frames built by hand (RFC 6455 5.2, unmasked): the writer batches
them into one socket write, and the hostile faults send frames aiohttp would not."""
import struct


def raw_frame(op, payload, fin=None):
    """A frame with opcode op (FIN set unless op starts a fragmented message: 0x1 here always
    begins one, a continuation 0x0 never ends it)."""
    fin = op not in (0x0, 0x1) if fin is None else fin
    n = len(payload)
    b0 = (0x80 if fin else 0) | op
    if n < 126:
        return bytes((b0, n)) + payload
    if n < 65536:
        return struct.pack("!BBH", b0, 126, n) + payload
    return struct.pack("!BBQ", b0, 127, n) + payload


def text_frame(payload):
    """A whole text frame."""
    n = len(payload)
    if n < 126:
        return bytes((0x81, n)) + payload
    if n < 65536:
        return struct.pack("!BBH", 0x81, 126, n) + payload
    return struct.pack("!BBQ", 0x81, 127, n) + payload
