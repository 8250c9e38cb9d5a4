"""A hostile or broken gateway's records, for the `inject` fault and altered replays: floods of
error and system messages (any text: escapes, newlines), mappings of symbols never subscribed,
records of any instrument id, and bad prices and sizes."""
import numpy as np

from .records import UNDEF_PRICE

BAD_PRICES = (0, -4800 * 10**9, 2**63 - 2, -1, 2**62 + 1)  # none a tick can carry (feeds/books/ticks.py price_ok)


def error_records(n, text):
    """n ErrorMsg records saying `text`."""
    import databento_dbn as dbn
    return bytes(dbn.ErrorMsg(0, text, code=dbn.ErrorCode.INTERNAL_ERROR)) * n


def system_records(n, text):
    """n SystemMsg records that are not heartbeats (a slow-reader warning's code) saying `text`."""
    import databento_dbn as dbn
    return bytes(dbn.SystemMsg(0, text, code=dbn.SystemCode.SLOW_READER_WARNING)) * n


def mapping_records(pairs):
    """A SymbolMappingMsg per (instrument id, raw symbol)."""
    import databento_dbn as dbn
    return b"".join(bytes(dbn.SymbolMappingMsg(1, iid, 0, dbn.SType.RAW_SYMBOL, sym, dbn.SType.RAW_SYMBOL, sym, 0,
                                               UNDEF_PRICE)) for iid, sym in pairs)


def with_id(recs, iid):
    """A copy of MBO records as instrument `iid`'s."""
    out = recs.copy()
    out["instrument_id"] = iid
    return out


def spoil(recs, every=400):
    """A gateway's bad values in MBO records: every `every`-th add, modify and trade gets a price
    from BAD_PRICES or (some adds and trades) a size of 0. Returns (the spoilt records, the same
    with each spoilt record made an N (none) record: what a parser that rejects them applies, event
    ends included; how many bad prices, how many bad sizes)."""
    bad, ref = recs.copy(), recs.copy()
    n_price = n_size = 0
    for act in b"AMT":
        at = np.nonzero(recs["action"] == act)[0][every // 2::every]
        for j, i in enumerate(at):
            if act != ord("M") and j % 3 == 2:
                bad["size"][i] = 0
                n_size += 1
            else:
                bad["price"][i] = BAD_PRICES[j % len(BAD_PRICES)]
                n_price += 1
        ref["action"][at] = ord("N")
    return bad, ref, n_price, n_size
