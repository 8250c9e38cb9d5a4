"""The strategy contract: what a user's strategy file defines, and what the engine hands it.

A strategy is one Python file. The engine imports it by path (`--strategy FILE`) or by a
built-in name (`--strategy microstructure`, `--strategy depth_imbalance`: the files in
strategies/), and compiles its functions into the live loop, the backtest loop and data-set
building, so one file is trained, backtested and traded bit for bit the same.

The file defines:

    FEATURES = ("name", ...)   the model's feature row, float32, in this order (NaN = missing)
    DEPTH = 10                 book levels per side the strategy reads (0 = touch only; <= 32)
    STATE = 16                 float64 state columns per instrument
    PARAMS = {"alpha": 0.1}    name -> float default; `--param alpha=0.2` or [strategy.params]
                               in the TOML config overrides it for a run
    SCORE = "probability"      (optional) the score decide expects, SCORE_KINDS:
                                 "probability"  the probability of an up move, in (0, 1): a
                                                binary:logistic model (`engine train`'s default
                                                --labels binary), the engine applies the sigmoid
                                 "margin"       the model's raw output: a regression model
                                                (--labels ternary: reg:squarederror)
                                 "any"          decide does not read the score, or handles both
                               Default "probability". Without decide, the hysteresis rule compares
                               the score with its thresholds, so SCORE is "probability" (thresholds
                               in (0, 1)) or "margin" (then PARAMS defines all four thresholds).
                               A model whose score is of the other kind is refused with both named
                               wherever one is loaded for the strategy (engine train, run, backtest,
                               sweep, reload), as a model trained for another strategy is.

    @njit
    def on_tick(state, book, tick, row, params) -> bool
        Fold one tick into its instrument's state and, when the instrument should be scored,
        fill `row` and return True.
          state   float64[STATE], this instrument's columns (zero at start and after a gap)
          book    Book(bid_px, bid_sz, ask_px, ask_sz): this instrument's book as of this
                  tick, int64 arrays of length DEPTH, best level first, 0 where a level is
                  empty; prices at 1e-9 (PRICE_SCALE), sizes in the tick record's size units;
                  read-only (the engine's own book)
          tick    int64[8], the 64-byte tick record (engine/records.py), read-only in every
                  loop (a backtest reads it from the mapped file); read it with the
                  accessors this module exports (kind(tick), price(tick), bid_px(tick), ...:
                  engine/records.py's tick_kind, tick_price, ... by their short names)
          row     float32[len(FEATURES)], the feature row to fill
          params  a namedtuple whose fields are the PARAMS names: params.alpha

    @njit
    def decide(state, score, position, params) -> int        (optional)
        The instrument's target position in signed units, given the model's score (float32,
        of the kind SCORE declares: a probability, or the raw margin of a regression model)
        and the current target. A change of target is a signal (it carries old and new position).
        Without `decide`, the engine's hysteresis rule applies (`hysteresis` below) with its
        thresholds taken from PARAMS enter_long, exit_long, enter_short, exit_short (added
        with the defaults DEFAULT_THRESHOLDS when the file does not define them).

Which ticks reach on_tick. Every tick of the stream is a quote (the touch changed), a trade, a
level (one book level changed), a book (the end of a book event that changed levels but not
the touch), a gap or a status tick (engine/records.py says what each carries). The engine
keeps every instrument's book from the level ticks itself, resets every instrument's state
and book on a gap, and calls on_tick for:
  - every quote, trade and status tick;
  - a book tick only when DEPTH > 0 and one of the strategy's DEPTH levels changed since the
    instrument's last quote or book tick (so a strategy's calls do not depend on how many
    levels the source carried, as long as it carried at least DEPTH).
Level ticks never reach on_tick: their effect is in `book`, already applied when the quote,
trade or book tick that ends their event arrives. The touch in a quote tick equals level 0 of
`book`.

Strategies across instruments (optional). A strategy that reads other instruments' books names
them, and then on_tick takes a sixth argument:

    UNIVERSE = ("BINANCE-F:BTCUSDT", "BINANCE:BTCUSDT")
                               the members, in this order (member 0, 1, ...): an instrument's name
                               as the run names it (VENUE:SYMBOL; a bare SYMBOL matches any venue)
                               or an fnmatch pattern; each must match exactly one instrument
    UNIVERSE = {"lead": "BINANCE-F:BTCUSDT", "lag": None}
                               the same with roles: `--universe lag=BINANCE:BTCUSDT` (run, backtest,
                               features, train) binds or rebinds a role; None must be bound
    SHARED = 4                 (optional) float64 columns shared by all members (u.shared)

    @njit
    def on_tick(state, book, tick, row, params, u) -> int
        As above for the tick's own instrument (state, book), called for every member's ticks
        (ticks of instruments outside the universe only update their books). Returns the member
        whose row was filled and should be scored (decide then runs with that member's state
        and position, and a signal is that member's), or -1.
          u       Universe: u.me (the tick's member), u.n (members), u.shared (float64[SHARED],
                  zero at start and after a gap), and, read-only, every member's book and last
                  trade through member_book(u, m), member_bid(u, m), member_ask(u, m),
                  member_trade_px(u, m), member_trade_sz(u, m), member_ts_recv(u, m),
                  member_ts_event(u, m) (0 before its first tick or after a gap)

    @njit
    def decide(state, score, targets, params, u)            (optional, with a UNIVERSE)
        A decision over the members at once (a pair: long one, short the other): targets is
        int64[len(UNIVERSE)], every member's current target position; change those to move. Each
        member whose target changed is a signal (in member order, on the scored tick), and the
        signals of one decision share its id (the signal record's `decision`: the seq of its first
        signal), so a consumer can act on a pair's legs together. Nothing it returns is read.
        With decide(state, score, position, params) instead, decisions are per scored member.

A member that no source provides, a role left unbound or a pattern matching several instruments
is an error naming it before the run starts; a model records the universe it was trained on and
is refused for another. With several inputs (`engine run --feed A --feed B`, or `--merge` of tick
files in backtest, features and train) the ticks are taken in receive-time order, and a run's
recording (`--record`) keeps the order it read them in, so its backtest gives its signals.

Names inside the file are the user's own; functions it calls must be numba-compilable (they
run on the pinned real-time thread: no Python objects, no allocation per tick is the goal).
"""
import math
from collections import namedtuple

import numpy as np
from .jit import njit

from .records import (KIND_BOOK, KIND_GAP, KIND_LEVEL, KIND_QUOTE, KIND_STATUS, KIND_TRADE,  # noqa: F401
                      PRICE_SCALE, SIDE_BUY, SIDE_NONE, SIDE_SELL)
# reading a tick (int64[8], TICK_DTYPE's words): engine/records.py's accessors under their short names
# (their docstrings there say what each field holds for each kind of tick)
from .records import tick_ask_px as ask_px, tick_ask_sz as ask_sz, tick_bid_px as bid_px  # noqa: F401
from .records import tick_bid_sz as bid_sz, tick_instrument as instrument, tick_kind as kind  # noqa: F401
from .records import tick_price as price, tick_seq as seq, tick_side as side, tick_size as size  # noqa: F401
from .records import tick_ts_event as ts_event, tick_ts_recv as ts_recv  # noqa: F401

Book = namedtuple("Book", ["bid_px", "bid_sz", "ask_px", "ask_sz"])
# what a UNIVERSE strategy's on_tick gets as `u` (the host builds it per call; read it through the
# member_* functions below): ids, the members' run instrument ids; books, ist: the host's arrays
# (read-only views); depth: DEPTH
Universe = namedtuple("Universe", ["me", "n", "ids", "books", "ist", "shared", "depth"])
# the host's per-instrument columns the member_* functions read (engine/host_template.py's ist)
IST_BID, IST_ASK, IST_TRADE_PX, IST_TRADE_SZ, IST_TS_EVENT, IST_TS_RECV = 2, 3, 10, 11, 12, 13

MAX_DEPTH = 32
MAX_STATE = 4096
THRESHOLD_NAMES = ("enter_long", "exit_long", "enter_short", "exit_short")
DEFAULT_THRESHOLDS = {"enter_long": 0.65, "exit_long": 0.55, "enter_short": 0.35, "exit_short": 0.45}
SCORE_KINDS = ("probability", "margin", "any")
DEFAULT_SCORE = "probability"  # what hysteresis' default thresholds are, and what most decide rules read

# --- the engine's default decision --------------------------------------------------------------


@njit(nogil=True, inline="always", cache=True)
def hysteresis(position, score, enter_long, exit_long, enter_short, exit_short):
    """Enter beyond the outer thresholds, leave only inside the inner ones; +-1 unit."""
    if score >= enter_long:
        return 1
    if score <= enter_short:
        return -1
    if position > 0 and score < exit_long:
        return 0
    if position < 0 and score > exit_short:
        return 0
    return position


def check_thresholds(values, probability):
    """The hysteresis thresholds must nest; for a probability score they lie in (0, 1)."""
    el, xl, es, xs = (values[k] for k in THRESHOLD_NAMES)
    if not es <= xs < xl <= el:
        raise ValueError("thresholds must satisfy enter_short <= exit_short < exit_long <= enter_long "
                         f"(got {es}, {xs}, {xl}, {el})")
    if probability and not (0 < es and el < 1):
        raise ValueError("thresholds must satisfy 0 < enter_short <= exit_short < exit_long <= enter_long < 1 "
                         f"for a probability score (got {es}, {xs}, {xl}, {el})")


@njit(nogil=True, inline="always", cache=True)
def sigmoid32(margin):
    return np.float32(1.0 / (1.0 + math.exp(-np.float64(margin))))


# --- reading a universe member (on_tick's `u`) -----------------------------------------------------


@njit(nogil=True, inline="always", cache=True)
def member_book(u, m):
    """Member m's book (its DEPTH levels a side, best first, 0 where empty), as `book` is for the tick's own."""
    i = u.ids[m]
    return Book(u.books[i, 0, 0, :u.depth], u.books[i, 0, 1, :u.depth], u.books[i, 1, 0, :u.depth],
                u.books[i, 1, 1, :u.depth])


def _member_reader(name, column, doc=None):
    """The numba function NAME(u, m): member m's value in the host's per-instrument column `column`."""
    def read(u, m):
        return u.ist[u.ids[m], column]
    read.__name__ = read.__qualname__ = name  # (also numba's cache file's name)
    read.__doc__ = doc
    return njit(nogil=True, inline="always", cache=True)(read)


member_bid = _member_reader("member_bid", IST_BID, "Member m's best bid price (1e-9 units) as of its last quote, "
                                                  "trade or book tick; 0 if none.")
member_ask = _member_reader("member_ask", IST_ASK)
member_trade_px = _member_reader("member_trade_px", IST_TRADE_PX,
                                 "Member m's last trade price (1e-9 units); 0 before its first trade or after a gap.")
member_trade_sz = _member_reader("member_trade_sz", IST_TRADE_SZ)
member_ts_recv = _member_reader("member_ts_recv", IST_TS_RECV,
                                "Receive time (ns) of member m's last tick; 0 before its first or after a gap.")
member_ts_event = _member_reader("member_ts_event", IST_TS_EVENT,
                                 "Exchange time (ns) of member m's last tick; 0 before its first or after a gap.")
