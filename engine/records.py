"""The records that cross every ring and file: ticks (64 bytes) and signals (128 bytes).

A tick is exactly one cache line, a signal two. Prices are int64 fixed point at 1e-9 (the
DBN convention); a float never holds a price. Field order keeps every field naturally
aligned.

Depth (book levels below the touch) travels in the tick stream itself, so a tick file
replays the same book the live loop saw. A source opened with `depth=N` (N > 0) keeps, per
instrument and side, the top N price levels it last published: the *window*. At the end of
every book event (an ITCH message, a DBN event ending in F_LAST, a Binance depth event or
snapshot, a simulator step) it compares the book's top N with the published window and emits,
in this order:
  1. KIND_LEVEL ticks for the differences: first a size-0 tick for every price that left the
     window, then one per price that entered it or changed size (size = the level's new
     aggregate size, in the same units as the touch sizes);
  2. the event's trades (KIND_TRADE, carrying the touch after the event);
  3. KIND_QUOTE if the touch changed, else KIND_BOOK if any level tick was emitted.
So a reader that applies the level ticks in order (insert/replace at the price, remove on
size 0, clear an instrument on a clear tick, clear everything on a gap) holds exactly the
source's window after each event, never more than N levels a side, and level 0 equals the
touch every quote tick carries. The window's width is in the tick file header and the ring
header (`depth`); nothing in the records depends on it.
"""
import numpy as np

PRICE_SCALE = 1_000_000_000  # 1.0 in price units == 1e9 in the record

# Tick kinds
KIND_QUOTE = 1   # top of book changed: bid/ask price and size are the new touch
KIND_TRADE = 2   # a trade: price/size/side; bid/ask carry the touch after it
KIND_STATUS = 3  # instrument or session status change (reserved for feeds)
KIND_GAP = 4     # ticks were lost: `price` holds how many (seq = first lost); every book is void
KIND_LEVEL = 5   # a book level in the depth window changed: side (SIDE_BUY = bid, SIDE_SELL = ask),
                 # price, size = new aggregate size (0 = it left the window); bid/ask fields 0.
                 # side SIDE_NONE (price 0, size 0): clear this instrument's book, both sides
KIND_BOOK = 6    # end of a book event that changed levels in the window but not the touch;
                 # bid/ask fields carry the (unchanged) touch
KIND_NAMES = {KIND_QUOTE: "quote", KIND_TRADE: "trade", KIND_STATUS: "status", KIND_GAP: "gap",
              KIND_LEVEL: "level", KIND_BOOK: "book"}

# Trade aggressor side (KIND_TRADE); book side for KIND_LEVEL (buy = bid, sell = ask)
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

# Signal sides: the sign of a target position
SIGNAL_FLAT = 0
SIGNAL_LONG = 1
SIGNAL_SHORT = -1

# A signal is a change of the strategy's target position for one instrument.
SIGNAL_DTYPE = np.dtype([
    ("seq", "<u8"),         # signal sequence number, dense from 0 per run
    ("tick_seq", "<u8"),    # seq of the tick that triggered it
    ("ts_event", "<i8"),    # that tick's exchange time, ns since epoch
    ("ts_recv", "<i8"),     # that tick's receive time (CLOCK_MONOTONIC ns when live)
    ("ts_signal", "<i8"),   # CLOCK_MONOTONIC ns when the signal was written (backtests: ts_recv)
    ("ts_wall", "<i8"),     # CLOCK_REALTIME ns when the signal was written (backtests: 0)
    ("mid_px", "<i8"),      # mid price at the decision, 1e-9 fixed point (rounded down)
    ("position", "<i8"),    # the new target position, signed units of the instrument
    ("prev_position", "<i8"),  # the position it replaces
    ("score", "<f4"),       # the score the decision saw: sigmoid(margin) for logistic models, else margin
    ("margin", "<f4"),      # raw model margin, float32, bit-exact with XGBoost
    ("model_gen", "<u4"),   # generation of the model that scored it (bumps on hot swap)
    ("instrument", "<u2"),  # dense instrument index
    ("side", "i1"),         # sign of position: SIGNAL_LONG / SIGNAL_SHORT / SIGNAL_FLAT
    ("prev_side", "i1"),    # sign of prev_position
    ("folded", "<u4"),      # scoreable ticks of this instrument folded into this score (1 = none conflated)
    ("flags", "<u4"),       # 0 for a signal; SIGNAL_FLAG_MARK: a conflation mark (below)
    ("reserved", "<i8", (4,)),
])

# A conflation mark (flags & SIGNAL_FLAG_MARK) travels with the signals of a live run that conflated
# (engine/host_template.py): it is not a decision. tick_seq = the last tick folded before a flush,
# ts_event = the seq of the first tick of that window (the field holds a seq here), folded = ticks
# folded in the window. The signal file keeps marks so `engine backtest --conflate-as-recorded` can
# replay the same flush points; readers of signals (signal_log.read_signals, zmq) leave them out.
SIGNAL_FLAG_MARK = 1

assert TICK_DTYPE.itemsize == 64, TICK_DTYPE.itemsize
assert SIGNAL_DTYPE.itemsize == 128, SIGNAL_DTYPE.itemsize
SIGNAL_FIELDS = tuple(n for n in SIGNAL_DTYPE.names if n != "reserved")  # what tools print


def symbols(names, top=0):
    """Symbol per instrument index (object array): a source's or file's instrument table, then
    the index as text for indices at or past its end, up to `top`."""
    names = list(names or [])
    return np.array(names + [str(i) for i in range(len(names), top)], dtype=object)


def symbol_column(names, inst):
    """The symbol of every record's instrument index (object array, for tables)."""
    inst = np.asarray(inst, np.int64)
    return symbols(names, int(inst.max()) + 1 if len(inst) else 0)[inst]


def table_metadata(tables, **more):
    """What every Parquet output says of its numbers (schema metadata, bytes): the price scale
    (an int64 price of PRICE_SCALE is 1.0) and the instrument tables of its inputs (`tables`: one
    list of names per input, index order). `engine.symbols` when the inputs share one table; else
    `engine.symbols_by_input`, the tables in input order (a table's `file`/`source` column), as an
    instrument index means another name in each."""
    import json
    tables = [list(t or []) for t in tables] or [[]]
    meta = {"engine.price_scale": str(PRICE_SCALE)}
    if all(t == tables[0] for t in tables):
        meta["engine.symbols"] = json.dumps(tables[0])
    else:
        meta["engine.symbols_by_input"] = json.dumps(tables)
    meta.update({k: str(v) for k, v in more.items()})
    return {k.encode(): v.encode() for k, v in meta.items()}


def signal_dict(r):
    """One signal record as a dict of Python numbers (JSON lines, tools)."""
    return {k: r[k].item() for k in SIGNAL_FIELDS}
RECORD_WORDS = 8  # a tick as int64 words: how rings copy a record
SIGNAL_WORDS = 16  # a signal as int64 words
# word offsets of signal fields (numba writes signals as int64 words)
(SW_SEQ, SW_TICK_SEQ, SW_TS_EVENT, SW_TS_RECV, SW_TS_SIGNAL, SW_TS_WALL, SW_MID, SW_POS, SW_PREV_POS,
 SW_SCORE_MARGIN, SW_GEN_INST_SIDES, SW_FOLDED_FLAGS) = range(12)


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
