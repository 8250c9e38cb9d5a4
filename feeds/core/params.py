"""Source declarations: each source kind is declared once (its scheme, what follows it, and each
parameter's type, default, unit and help), and everything else is made from that declaration:
the checked, typed value a URI parses to (`Kind.parse`), the URI a value is written back as (what
crosses the process hop to a feed: `Kind.uri`), the commands' help (`usage`) and the reference
page (`reference`). A parameter shared by several kinds is one `Param` object here, so one name
means one thing in every source (tests/test_source_params.py keeps that true).

Declarations import nothing heavy: help and the reference never import a parser or a live client."""
import dataclasses
from dataclasses import dataclass
from urllib.parse import quote

from feeds.core import uri as U, venues
from feeds.core.uri import FeedError


@dataclass(frozen=True)
class Param:
    """One parameter: `cast` turns the URI's text into the value (ValueError says the rule),
    `what` is the type as the reference shows it."""
    name: str
    cast: object
    default: object
    what: str
    help: str
    unit: str = ""
    choices: tuple = ()  # (a closed set of words: cast and `what` follow from it)
    write: object = None  # value -> its URI text, where str() is not it (a parsed HOST:PORT, a time)
    why_not: tuple = ()   # (choice, why this kind does not take it): said when it is given
    pace: tuple = ()      # a pace, not what the ticks are: (its value for "flat out", what bounds the
    #                       source instead); the commands that read flat out refuse another (app/source_params.py)

    def read(self, u, text):
        try:
            v = self.cast(text)
        except (ValueError, TypeError) as e:
            raise FeedError(f"{u}: {self.name}={text!r}: {e}") from None
        if self.choices and v not in self.choices:
            why = dict(self.why_not).get(v)
            raise FeedError(f"{u}: {self.name} must be one of {', '.join(self.choices)}, got {text!r}"
                            + (f" ({why})" if why else ""))
        return v

    def only(self, *choices, why_not=()):
        """This parameter for a kind that takes some of its choices only (same name, same meaning);
        why_not: (choice, why) for a choice it refuses."""
        assert set(choices) <= set(self.choices), (self.name, choices)
        return dataclasses.replace(self, choices=choices, default=choices[0], what="|".join(choices),
                                   why_not=why_not)

    def with_default(self, default):
        """This parameter with another default for one kind (same name, same meaning)."""
        return dataclasses.replace(self, default=default)

    def text(self, v):
        """The value as a URI writes it (None: not written)."""
        if v is None:
            return None
        if self.write is not None:
            return self.write(v)
        if isinstance(v, tuple):
            return ",".join(v)
        if isinstance(v, float):
            return repr(v).removesuffix(".0")  # (exact: it parses back to the same float)
        return str(v)


def choice(name, choices, help, default=None):
    return Param(name, str, choices[0] if default is None else default, "|".join(choices), help, choices=choices)


@dataclass(frozen=True)
class Kind:
    """A source kind: `scheme:TARGET?params` (or scheme://TARGET?params). `parse` gives a frozen
    value with one attribute per parameter, plus `target`."""
    scheme: str
    target: str          # what follows the scheme: FILE, MARKET, DATASET, HOST:PORT, or "" (none)
    title: str           # a few words (the commands' help)
    summary: str         # what it is (the reference)
    params: tuple
    example: str
    slashes: bool = False  # written scheme://TARGET (a place), not scheme:TARGET (a file)
    notes: str = ""      # what the reference says below the table

    def __post_init__(self):
        names = [p.name for p in self.params]
        assert len(names) == len(set(names)), f"{self.scheme}: a parameter declared twice"
        fields = [("target", str)] + [(p.name, object) for p in self.params]
        object.__setattr__(self, "value_type", dataclasses.make_dataclass(
            _class_name(self.scheme), fields, frozen=True, namespace={"kind": self}))

    def param(self, name):
        return next(p for p in self.params if p.name == name)

    def parse(self, u, target, params):
        """The typed value of a URI's target and parameters; FeedError (one line) naming the URI
        and the parameter for an unknown name or a value its rule refuses."""
        known = {p.name: p for p in self.params}
        for key in params:
            if key not in known:
                raise FeedError(f"{u}: unknown parameter {key!r} (known: {', '.join(known) or 'none'})")
        vals = {p.name: p.read(u, params[p.name]) if p.name in params else p.default for p in self.params}
        return self.value_type(target=target, **vals)

    def uri(self, value, full=False):
        """The URI of a value (it parses back to the same value): what differs from the defaults,
        or (full) every parameter that has a value."""
        q = []
        for p in self.params:
            v = getattr(value, p.name)
            if (full or v != p.default) and p.text(v) is not None:
                q.append(f"{p.name}={quote(p.text(v), safe=',:/.@-_')}")
        sep = "://" if self.slashes else ":"
        return f"{self.scheme}{sep}{value.target}" + (f"?{'&'.join(q)}" if q else "")

    def write(self, target, **params):
        """The URI of `target` with these parameters (each as a URI writes it), checked by the
        declaration as a parsed URI is: what a program that hands out a URI (engine venue) writes."""
        sep = "://" if self.slashes else ":"
        u = f"{self.scheme}{sep}{target}"
        return self.uri(self.parse(u, target, {k: str(v) for k, v in params.items()}))

    def usage(self):
        """The URI's shape: scheme:TARGET?PARAMS."""
        sep = "://" if self.slashes else ":"
        return f"{self.scheme}{sep}{self.target}" + ("?PARAMS" if self.params else "")

    def reference(self):
        """The kind's section of the source reference (markdown)."""
        sep = "://" if self.slashes else ":"
        out = [f"## `{self.scheme}{sep}{self.target}`", "", self.summary, "", f"    {self.example}", ""]
        if self.params:
            out += ["| parameter | value | default | meaning |", "|---|---|---|---|"]
            for p in self.params:
                d = p.text(p.default)
                d = "–" if d in (None, "") else f"`{d}`"
                unit = f" ({p.unit})" if p.unit else ""
                what = p.what.replace("|", " \\| ")  # (a table cell: | is escaped)
                out.append(f"| `{p.name}` | {what}{unit} | {d} | {p.help} |")
            out.append("")
        if self.notes:
            out += [self.notes, ""]
        return "\n".join(out)


def _class_name(scheme):
    return "".join(w.capitalize() for w in scheme.replace("-", " ").split()) + "Source"


# ---- parameters several kinds share: one object each, so one meaning ----

SYMBOLS = Param("symbols", U.symbols, (), "NAME,NAME,..", "the instruments to keep, by the venue's symbol (none: all)")
DEPTH = Param("depth", U.depth, U.DEFAULT_DEPTH, f"0..{U.MAX_DEPTH}",
              "book levels a side sent as level ticks (0: none; capped by what the data has)", unit="levels")
ON_ERROR = choice("on_error", ("stop", "skip"),
                  "a malformed record: stop with an error naming where it is, or skip it and count it")
IDLE_S = Param("idle_s", U.finite_nonneg, 0.0, "number >= 0", "stop after this long without data (0: never)",
               unit="s")
BACKOFF_S = Param("backoff_s", U.finite_pos, 0.1, "number > 0", "the first wait before a reconnect; it doubles "
                  "with each failure in a row", unit="s")
BACKOFF_MAX_S = Param("backoff_max_s", U.finite_pos, 30.0, "number > 0", "the longest wait before a reconnect "
                      "(at least backoff_s)", unit="s")
BOOK_TICKER = choice("book_ticker", ("quote", "check", "off"),
                     "Binance bookTicker messages: quote (publish them as quotes), check (compare them with "
                     "the book built from depth diffs and count the differences) or off (not subscribed)")
SIZE_UNIT = Param("size_unit", U.finite_pos, venues.BINANCE_SIZE_UNIT, "number > 0",
                  "the size of one lot: sizes are published as whole lots of it")


def check_backoff(u, v):
    if v.backoff_max_s < v.backoff_s:
        raise FeedError(f"{u}: backoff_max_s={v.backoff_max_s:g} is below backoff_s={v.backoff_s:g}")


TICKFILE = Kind("tickfile", "FILE", "an engine tick file", "An engine tick file (written by engine convert and engine record); a plain "
                "path of one is taken as this.", (), "tickfile:day.ticks")
