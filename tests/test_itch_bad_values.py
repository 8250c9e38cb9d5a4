"""ITCH 5.0 values no tick can carry: adds and replaces at price 0 (feeds/nasdaq/itch.py)."""
from feeds.nasdaq.itch_writer import message, preamble

from tests.helpers.feedutil import check_book_consistent, read_all
from tests.test_itch import _day, add, be, write


def test_adds_and_replaces_at_price_zero_are_rejected_and_counted(tmp_path):
    """A level at price 0 is no level a tick can carry (0 is an empty side): an add (A, F) at 0 is
    not applied, a replace to 0 leaves the old order; each counted in bad_price. The day's ticks
    are those of the day without them."""
    zero = (add(1, 50, b"B", 10, b"AAPL", 0) + add(1, 51, b"S", 10, b"AAPL", 0, b"F")
            + message(b"U", 1, 1500, be(1, 8) + be(52, 8) + be(70, 4) + be(0, 4))
            + message(b"X", 1, 1600, be(50, 8) + be(5, 4)))  # a cancel of the refused add: unknown
    day = _day()
    at = len(preamble(["AAPL", "MSFT"])) + len(add(1, 1, b"B", 100, b"AAPL", 100_000))
    q = "?symbols=AAPL&date=2024-01-02"
    a, src = read_all("itch:" + write(tmp_path, day[:at] + zero + day[at:], "zero.itch") + q)
    b, ref = read_all("itch:" + write(tmp_path, day) + q)
    assert a.tobytes() == b.tobytes()
    st, want = src.stats(), ref.stats()
    assert st["bad_price"] == 3 and want["bad_price"] == 0 and st["unknown_order"] == want["unknown_order"] + 1
    check_book_consistent(src.books.ladders, src.books.orders)
