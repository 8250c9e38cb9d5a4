"""Checked templates: the one mechanism that writes generated code (the host loop's header here,
engine/strategy_build.py; the flat C kernel, models/flat.py; HLS C++ and Verilog, fpga/).

Each generated file has a template file next to its generator (engine/templates/,
models/templates/, fpga/templates/) holding its text as written; only `${name}` placeholders differ
per strategy or model, and small functions in the generator compute them. Only the braced form is
a placeholder: a bare `$` (Verilog's $readmemh, a shell's $VAR) is text. A placeholder alone on
its line that fills with nothing leaves no line behind (an empty block of declarations adds no
blank line). Every placeholder must be given a value, and every value must have a placeholder, so
a template and its generator cannot drift apart silently.
"""
import re
import string
from functools import lru_cache
from pathlib import Path


class CodeTemplate(string.Template):
    """string.Template where only ${name} is a placeholder."""
    pattern = r"""
    \$(?:
      (?P<escaped>(?!))                 |  # no escape needed: a bare $ is text
      (?P<named>(?!))                   |  # no unbraced form
      {(?P<braced>[_a-z][_a-z0-9]*)}    |
      (?P<invalid>(?!))
    )
    """


_ALONE = re.compile(r"^\$\{([_a-z][_a-z0-9]*)\}\n", re.M | re.I)


class TemplateError(ValueError):
    """A template and the values given for it do not match."""


@lru_cache(maxsize=None)
def _read(path):
    return Path(path).read_text()


def placeholders(text):
    return {m.group("braced") for m in CodeTemplate.pattern.finditer(text) if m.group("braced")}


def render(path, /, **fields):
    """The text of template file `path` with every ${name} replaced by str(fields[name])."""
    text = _read(str(path))
    want = placeholders(text)
    if want != set(fields):
        raise TemplateError(f"{path}: placeholders {sorted(want - set(fields))} have no value; values "
                            f"{sorted(set(fields) - want)} have no placeholder")
    values = {k: str(v) for k, v in fields.items()}
    text = _ALONE.sub(lambda m: "" if values[m.group(1)] == "" else m.group(0), text)
    return CodeTemplate(text).substitute(values)
