"""The two 64-byte records that cross every ring and file: ticks and signals.

Both are exactly one cache line. Prices are int64 fixed point at 1e-9 (the DBN
convention); a float never holds a price. Field order keeps every field
naturally aligned.
"""
import numpy as np

PRICE_SCALE = 1_000_000_000  # 1.0 in price units == 1e9 in the record

# Tick kinds
KIND_QUOTE = 1   # top of book changed: bid/ask price and size are the new touch
KIND_TRADE = 2   # a trade: price/size/side; bid/ask carry the touch after it
KIND_STATUS = 3  # instrument or session status change (reserved for feeds)
KIND_GAP = 4     # ticks were lost: `price` holds how many (seq = first lost)

# Trade aggressor side
SIDE_NONE = 0
SIDE_BUY = 1
SIDE_SELL = 2

TICK_DTYPE = np.dtype([
    ("seq", "<u8"),         # ring/file sequence number, dense from 0; also the slot's publish word
    ("ts_event", "<i8"),    # exchange time, ns since the Unix epoch
    ("ts_recv", "<i8"),     # receive time, ns; live feeds stamp CLOCK_MONOTONIC at publish,
                            # so the strategy loop measures the ring hop on the same clock
    ("price", "<i8"),       # trade price (1e-9 fixed point); for KIND_GAP the count of lost ticks
    ("bid_px", "<i8"),      # best bid price after this event (1e-9), 0 when the side is empty;
                            # for a trade, the touch once the trade has taken liquidity
    ("ask_px", "<i8"),      # best ask price after this event (1e-9), 0 when the side is empty
    ("size", "<u4"),        # trade size in the instrument's lots
    ("bid_sz", "<u4"),      # size at the best bid, lots
    ("ask_sz", "<u4"),      # size at the best ask, lots
    ("instrument", "<u2"),  # dense instrument index (0..N-1) into the feed's instrument table
    ("kind", "u1"),         # KIND_*
    ("side", "u1"),         # SIDE_* (trade aggressor), SIDE_NONE for quotes
])

# Signal sides (what the strategy now wants)
SIGNAL_FLAT = 0
SIGNAL_LONG = 1
SIGNAL_SHORT = -1

SIGNAL_DTYPE = np.dtype([
    ("seq", "<u8"),         # signal sequence number, dense from 0 per run
    ("tick_seq", "<u8"),    # seq of the tick that triggered it
    ("ts_event", "<i8"),    # that tick's exchange time, ns since epoch
    ("ts_recv", "<i8"),     # that tick's receive time (CLOCK_MONOTONIC ns when live)
    ("ts_signal", "<i8"),   # CLOCK_MONOTONIC ns when the signal was written
    ("mid_px", "<i8"),      # mid price at the decision, 1e-9 fixed point (rounded down)
    ("score", "<f4"),       # model probability of an up move, float32
    ("margin", "<f4"),      # raw model margin (log-odds), float32, bit-exact with XGBoost
    ("instrument", "<u2"),  # dense instrument index
    ("side", "i1"),         # SIGNAL_LONG / SIGNAL_SHORT / SIGNAL_FLAT: the new position
    ("prev_side", "i1"),    # the position it replaces
    ("model_gen", "<u4"),   # generation of the model that scored it (bumps on hot swap)
])

assert TICK_DTYPE.itemsize == 64, TICK_DTYPE.itemsize
assert SIGNAL_DTYPE.itemsize == 64, SIGNAL_DTYPE.itemsize
RECORD_WORDS = 8  # 64 bytes as int64 words: how rings copy a record


# --- numba decoders over a record's eight int64 words (little-endian layout above) ---
from numba import njit  # noqa: E402


@njit(nogil=True, inline="always", cache=True)
def w_lo32(x):
    return x & 0xFFFFFFFF


@njit(nogil=True, inline="always", cache=True)
def w_hi32(x):
    return (x >> 32) & 0xFFFFFFFF


@njit(nogil=True, inline="always", cache=True)
def tick_instrument(w):
    return (w[7] >> 32) & 0xFFFF


@njit(nogil=True, inline="always", cache=True)
def tick_kind(w):
    return (w[7] >> 48) & 0xFF


@njit(nogil=True, inline="always", cache=True)
def tick_side(w):
    return (w[7] >> 56) & 0xFF


@njit(nogil=True, inline="always", cache=True)
def pack_tick_tail(words, size, bid_sz, ask_sz, instrument, kind, side):
    """Set words 6 and 7 (sizes, instrument, kind, side) of a tick."""
    words[6] = (size & 0xFFFFFFFF) | ((bid_sz & 0xFFFFFFFF) << 32)
    words[7] = (ask_sz & 0xFFFFFFFF) | ((instrument & 0xFFFF) << 32) | ((kind & 0xFF) << 48) | ((side & 0xFF) << 56)
