"""The Binance scanner's state layout: the keys it reads, the columns of its per-instrument,
global and counter arrays, the held-event table, its return statuses and errors.

The state S (feeds/binance/capture.py Scanner.state) is a tuple: S[0] instruments I[inst, .],
S[1] globals G[.], S[2] counters C[.], S[3] level scratch V (price, quantity pairs), S[4] symbols
SYM[inst, :SYM_LEN] (bytes; SYM[inst, SYM_LEN] their length), S[5] held entries H[k, .], S[6] the
held lines' bytes, S[7..10] four parsed-field tables F[key, .] (feeds/binance/message.py).
"""
from engine.jit import njit

# keys we read; any other key's value is skipped
KEYS = ("e", "E", "s", "U", "u", "b", "a", "B", "A", "p", "q", "T", "m", "pu", "data", "lastUpdateId", "bids",
        "asks", "t")
(K_e, K_E, K_s, K_U, K_u, K_b, K_a, K_B, K_A, K_p, K_q, K_T, K_m, K_pu, K_data, K_last, K_bids, K_asks,
 K_t) = range(19)
NK = len(KEYS)

# per-instrument state I[inst, .]
(I_SYNCED, I_SID, I_LAST, I_BOOKU, I_OVU, I_OVBP, I_OVBQ, I_OVAP, I_OVAQ, I_HELD, I_HFIRST, I_TS, I_TID) = range(13)
NI = 13
# globals G[.]
(G_NSYM, G_LINENO, G_RP_INST, G_RP_CUR, G_RP_END, G_RP_RECV, G_ERR, G_ERR_KEY, G_ERR_LINE, G_NEED, G_HN,
 G_HBYTES, G_STRICT, G_QUOTE, G_SIZE_DIV, G_HOLD_MAX, G_LAST_SYM) = range(17)
NG = 20
# counters C[.]
STATS = ("lines", "depth_events", "depth_applied", "depth_dropped_old", "snapshots", "resyncs", "gaps", "trades",
         "quotes", "book_tickers", "ticker_checked", "ticker_agree", "ticker_disagree", "bad_lines",
         "other_messages", "size_saturated", "crossed_quotes", "held_overflow", "ticker_quotes",
         "ticker_dropped_old", "ticker_no_book", "depth_duplicates", "trade_duplicates", "stream_gaps",
         "trade_bad_price", "trade_bad_size", "ticker_bad_price", "ticker_bad_size", "depth_bad_levels")
(C_LINES, C_DEPTH_EVENTS, C_DEPTH_APPLIED, C_DROPPED_OLD, C_SNAPSHOTS, C_RESYNCS, C_GAPS, C_TRADES, C_QUOTES,
 C_TICKERS, C_CHECKED, C_AGREE, C_DISAGREE, C_BAD, C_OTHER, C_SAT, C_CROSSED, C_HELD_OVERFLOW, C_TK_QUOTES,
 C_TK_OLD, C_TK_NO_BOOK, C_DEPTH_DUP, C_TRADE_DUP, C_STREAM_GAPS, C_TRADE_BAD_PRICE, C_TRADE_BAD_SIZE,
 C_TK_BAD_PRICE, C_TK_BAD_SIZE, C_BAD_LEVELS) = range(len(STATS))

# returns of scan (and of one step)
R_DONE, R_OUT, R_ROOM, R_VALS, R_HOLD, R_ERR, R_FATAL, R_DEEP = range(8)
OK, AGAIN = 100, 101  # a step's own: done; run the line again (a new symbol was registered)
# errors (G_ERR); G_ERR_KEY names the field where one is concerned
(E_FORMAT, E_JSON, E_NOTOBJ, E_MISSING, E_INT, E_DEC, E_LEVEL, E_BOOL, E_SYMBOL, E_TOO_MANY_SYMBOLS,
 E_SNAPSHOT_SYMBOLS) = range(1, 12)
FATAL = (E_TOO_MANY_SYMBOLS, E_SNAPSHOT_SYMBOLS)
MAX_SYMBOLS = 256
SYM_LEN = 64
# held-event entries H[k, .]: owner (instrument, or the tags below), start and length in the
# arena, line number
H_OWNER, H_START, H_LEN, H_LINENO = range(4)
DEAD, ORPHAN = -1, -2   # a consumed entry; the snapshot that came before any symbol
REPLAY = -10            # owner REPLAY - inst: detached for replay against inst's new snapshot


def errors_text(code, key, strict_line):
    """The message for error `code` (Python side)."""
    k = KEYS[key] if 0 <= key < NK else "?"
    return {E_FORMAT: "expected '<receive ns> <json>'",
            E_JSON: "the message is not valid JSON",
            E_NOTOBJ: "the message is not a JSON object",
            E_MISSING: f"missing field '{k}'",
            E_INT: f"field '{k}' is not an unsigned integer",
            E_DEC: f"field '{k}' is not a decimal string within the fixed point (1e-9 prices, 1e-8 quantities)",
            E_LEVEL: 'a price level is not ["price", "quantity"] in decimals',
            E_BOOL: f"field '{k}' is not true or false",
            E_SYMBOL: f"the symbol is not a string of 1..{SYM_LEN} bytes",
            E_TOO_MANY_SYMBOLS: f"more than {MAX_SYMBOLS} symbols in one capture",
            E_SNAPSHOT_SYMBOLS: "a depth snapshot carries no symbol and this capture has several, so it cannot be "
                                "placed"}[code]


@njit(nogil=True, inline="always", cache=True)
def fail(G, code, key):
    """Error `code` (about field `key`, or -1) recorded in G; the step's status for it."""
    G[G_ERR] = code
    G[G_ERR_KEY] = key
    return R_FATAL if code == E_TOO_MANY_SYMBOLS or code == E_SNAPSHOT_SYMBOLS else R_ERR
