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
    ("ts_recv", "<i8"),     # receive time, ns: a file's own (kept when it is replayed: the ring
                            # header's clock says when it was due); live feeds stamp their arrival
                            # on CLOCK_MONOTONIC (engine/tickring.py origin)
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
    ("ts_recv", "<i8"),     # that tick's receive time (CLOCK_MONOTONIC ns from a live source)
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
    ("flags", "<u4"),       # 0 for a signal as decided; SIGNAL_FLAG_* (below): a conflation mark, or
                            # what the risk gate did to it, its rules' bits from SIGNAL_RULES_SHIFT
    ("decision", "<u8"),    # the decision it belongs to: the seq of that decision's first signal. A
                            # decision moves one instrument (decision == seq) or, from a UNIVERSE
                            # strategy's decide, several at once (a pair's legs: consecutive seqs,
                            # one decision), which a consumer acts on together
    ("wanted", "<i8"),      # the target the strategy decided, before the risk gate (engine/risk.py)
    ("reserved", "<i8", (2,)),
])

# A conflation mark (flags & SIGNAL_FLAG_MARK) travels with the signals of a live run that conflated
# (engine/host_template.py): it is not a decision. tick_seq = the last tick folded before a flush,
# ts_event = the seq of the first tick of that window (the field holds a seq here), folded = ticks
# folded in the window. The signal file keeps marks so `engine backtest --conflate-as-recorded` can
# replay the same flush points; readers of signals (signal_log.read_signals, zmq) leave them out.
SIGNAL_FLAG_MARK = 1
# The risk gate (engine/risk.py) between decide and the signal: CLIPPED, the target went out cut
# down (position < wanted in size); REFUSED, nothing went out (position == prev_position: a record
# of the decision the gate stopped, once per wanted target); KILLED, the run was killed (a kill
# switch's flattening signal, or a decision cut because of it). Bits SIGNAL_RULES_SHIFT.. hold the
# mask of the rules that cut it (1 << engine.risk.R_*). Flags 0: a signal as the strategy decided it.
SIGNAL_FLAG_CLIPPED, SIGNAL_FLAG_REFUSED, SIGNAL_FLAG_KILLED = 2, 4, 8
SIGNAL_RULES_SHIFT = 8
# A kill mark (flags MARK | KILLED) travels with the signals when the kill switch moves (a kill, or a
# resume): position = the reason (engine.risk.KILL_REASONS index; 0: resumed), tick_seq = the tick
# the kill's flattening signals name, ts_event = the seq of the first tick the loop took after it
# (a seq here, as a conflation mark's). It goes before the flattening signals; `engine backtest
# --conflate-as-recorded` replays the kill at the same place (signal_log.read_kills); readers of
# signals leave it out as every mark.
SIGNAL_FLAGS_KILL_MARK = SIGNAL_FLAG_MARK | SIGNAL_FLAG_KILLED
# A pause mark (flags MARK | PAUSED) travels with the signals when `engine ctl pause/resume` moves the
# loop: position = 1 paused, 0 resumed; tick_seq = the last tick taken before it, ts_event = the seq
# of the first tick taken after it (as a kill mark's). A paused loop reads ticks and keeps its
# features but decides nothing; `engine backtest --conflate-as-recorded` pauses at the same place
# (signal_log.read_pauses), so a recording that spans a pause still gives the run's signals.
SIGNAL_FLAG_PAUSED = 16
SIGNAL_FLAGS_PAUSE_MARK = SIGNAL_FLAG_MARK | SIGNAL_FLAG_PAUSED

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
 SW_SCORE_MARGIN, SW_GEN_INST_SIDES, SW_FOLDED_FLAGS, SW_DECISION, SW_WANTED) = range(14)

# --- the fields inside the int64 words: this module is the only place that shifts or masks a word ---
# (tests/test_records_owner.py checks that no other module does.) Each position below is read off
# the dtypes above, so the words and the dtypes cannot disagree.


def _place(dtype, name):
    """(word, shift, mask) of a field of `dtype` packed in its little-endian int64 words."""
    sub, off = dtype.fields[name][:2]
    return off // 8, (off % 8) * 8, (1 << (8 * sub.itemsize)) - 1


_LO32 = 0xFFFFFFFF
# tick word 6 = size | bid_sz << 32; word 7 = ask_sz | instrument << 32 | kind << 48 | side << 56
_, _BIDSZ_SHIFT, _ = _place(TICK_DTYPE, "bid_sz")
_, _INST_SHIFT, _INST_MASK = _place(TICK_DTYPE, "instrument")
_, _KIND_SHIFT, _KIND_MASK = _place(TICK_DTYPE, "kind")
_, _SIDE_SHIFT, _SIDE_MASK = _place(TICK_DTYPE, "side")
# signal word 9 = score bits | margin bits << 32; word 10 = model_gen | instrument << 32 | side << 48 |
# prev_side << 56 (the sides' low bytes); word 11 = folded | flags << 32
_, _MARGIN_SHIFT, _ = _place(SIGNAL_DTYPE, "margin")
_, _SINST_SHIFT, _SINST_MASK = _place(SIGNAL_DTYPE, "instrument")
_, _SSIDE_SHIFT, _SSIDE_MASK = _place(SIGNAL_DTYPE, "side")
_, _SPREV_SHIFT, _ = _place(SIGNAL_DTYPE, "prev_side")
_, _FLAGS_SHIFT, _ = _place(SIGNAL_DTYPE, "flags")
assert ((_INST_SHIFT, _KIND_SHIFT, _SIDE_SHIFT), (_SINST_SHIFT, _SSIDE_SHIFT, _SPREV_SHIFT, _FLAGS_SHIFT)) == \
    ((32, 48, 56), (32, 48, 56, 32)), "a record field moved: every reader and writer goes through here"

MAX_INSTRUMENTS = _INST_MASK + 1  # every index the instrument field holds (0..65535)


# --- numba accessors: a tick's fields from its eight int64 words (the strategy contract's readers,
# engine/strategy_api.py hands them to strategies under their short names) ---
from .jit import njit  # noqa: E402


@njit(nogil=True, inline="always", cache=True)
def w_lo32(x):
    return x & _LO32


@njit(nogil=True, inline="always", cache=True)
def w_hi32(x):
    return (x >> 32) & _LO32


def _tick_reader(name, doc=None):
    """The numba accessor tick_NAME: field `name` read from a tick's int64 words where TICK_DTYPE
    puts it (a whole word, or its bits of a packed one)."""
    word, shift, mask = _place(TICK_DTYPE, name)
    if mask == (1 << 64) - 1:
        def read(tick):
            return tick[word]
    else:
        def read(tick):
            return (tick[word] >> shift) & mask
    read.__name__ = read.__qualname__ = "tick_" + name  # (also numba's cache file's name)
    read.__doc__ = doc
    return njit(nogil=True, inline="always", cache=True)(read)


tick_seq = _tick_reader("seq")
tick_ts_event = _tick_reader("ts_event", "Exchange time, ns since the Unix epoch.")
tick_ts_recv = _tick_reader("ts_recv", "Receive time, ns (CLOCK_MONOTONIC when live; the capture's time in files).")
tick_price = _tick_reader("price", "Trade price (trade), level price (level), 1e-9 fixed point.")
tick_bid_px = _tick_reader("bid_px", "Best bid after the event (quote, trade, book ticks), 1e-9; 0 when the side is "
                                     "empty.")
tick_ask_px = _tick_reader("ask_px")
tick_size = _tick_reader("size", "Trade size (trade), the level's new size (level), in the instrument's size units.")
tick_bid_sz = _tick_reader("bid_sz")
tick_ask_sz = _tick_reader("ask_sz")
tick_instrument = _tick_reader("instrument")
tick_kind = _tick_reader("kind", "KIND_QUOTE, KIND_TRADE, KIND_BOOK, KIND_STATUS (the kinds on_tick sees).")
tick_side = _tick_reader("side", "Trade aggressor: SIDE_BUY, SIDE_SELL or SIDE_NONE (a level tick: its book side).")

# --- numba packers ---


@njit(nogil=True, inline="always", cache=True)
def tick_word7(ask_sz, instrument, kind, side):
    """A tick's word 7 from its fields."""
    return ((ask_sz & _LO32) | ((instrument & _INST_MASK) << _INST_SHIFT) | ((kind & _KIND_MASK) << _KIND_SHIFT)
            | ((side & _SIDE_MASK) << _SIDE_SHIFT))


@njit(nogil=True, inline="always", cache=True)
def pack_tick_tail(words, size, bid_sz, ask_sz, instrument, kind, side):
    """Set words 6 and 7 (sizes, instrument, kind, side) of a tick."""
    words[6] = (size & _LO32) | ((bid_sz & _LO32) << _BIDSZ_SHIFT)
    words[7] = tick_word7(ask_sz, instrument, kind, side)


@njit(nogil=True, inline="always", cache=True)
def signal_word_scores(score_bits, margin_bits):
    """A signal's word SW_SCORE_MARGIN from the float32 bits of its score and margin."""
    return score_bits | (margin_bits << _MARGIN_SHIFT)


@njit(nogil=True, inline="always", cache=True)
def signal_word_ids(gen, instrument, side, prev_side):
    """A signal's word SW_GEN_INST_SIDES: model generation, instrument, the signs of position and
    prev_position (-1, 0, 1)."""
    return ((gen & _LO32) | ((instrument & _SINST_MASK) << _SINST_SHIFT) | ((side & _SSIDE_MASK) << _SSIDE_SHIFT)
            | ((prev_side & _SSIDE_MASK) << _SPREV_SHIFT))


@njit(nogil=True, inline="always", cache=True)
def signal_word_folded(folded, flags):
    """A signal's word SW_FOLDED_FLAGS: ticks folded into its score, its flags (SIGNAL_FLAG_MARK)."""
    return (folded & _LO32) | ((flags & _LO32) << _FLAGS_SHIFT)


# a conflation mark's flag as it sits in word SW_FOLDED_FLAGS (SIGNAL_FLAG_MARK in the int64 words)
SIGNAL_MARK_WORD = np.int64(signal_word_folded.py_func(0, SIGNAL_FLAG_MARK))


# --- numpy column readers over int64 words: [n, 8] ticks or [n, 16] signals (or one record) ---


def tick_instruments(words):
    return (words[..., 7] >> _INST_SHIFT) & _INST_MASK


def tick_kinds(words):
    return (words[..., 7] >> _KIND_SHIFT) & _KIND_MASK


def set_tick_instruments(words, instrument):
    """Rewrite the instrument field of every tick in `words` (in place)."""
    words[..., 7] = (words[..., 7] & ~(_INST_MASK << _INST_SHIFT)) | ((instrument & _INST_MASK) << _INST_SHIFT)


def signal_instruments(words):
    return (words[..., SW_GEN_INST_SIDES] >> _SINST_SHIFT) & _SINST_MASK


def signal_flags(words):
    return (words[..., SW_FOLDED_FLAGS] >> _FLAGS_SHIFT) & _LO32
