"""One escaping layer per output format: HTML, Markdown, YAML, CSV and POSIX shell (imports nothing from nbtools).

Why: run data (model and dataset names from a job log, tensor names from model files, prompts, comparison file
names, data paths) reaches notebook HTML, the model card's Markdown and YAML, spreadsheets and the shell commands
nbtools builds (job entry points, plan scripts, eval jobs). Every renderer passes such
values through the one function for its format here, so one test of this module covers them all.

Example:
    >>> html("<img src=x onerror=alert(1)>")
    '&lt;img src=x onerror=alert(1)&gt;'
    >>> csv_cell("=cmd|' /C calc'!A0")
    "'=cmd|' /C calc'!A0"
"""

from __future__ import annotations

import html as _html
import re
import shlex
from typing import Any

import yaml

__all__ = ["html", "md", "md_code", "yaml_dump", "csv_cell", "csv_frame", "is_hub_id", "sh", "sh_join", "sh_echo"]

# what can start markup inside a line: no link/image without [ ], no heading/list since a value never starts a line,
# and _ inside a word never emphasises (CommonMark 0.31 §6.2)
_MD_SPECIAL = re.compile(r"([\\`*\[\]|~]|(?<![A-Za-z0-9])_|_(?![A-Za-z0-9]))")
_MD_LEAD = re.compile(r"^(\d+[.)](?=\s|$)|[#+=-])")  # what opens a block at the start of a list item
_PLAIN_CODE = re.compile(r"[\w./:@+=,~ -]*")
_NUMBER = re.compile(r"[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?")
_HUB_ID = re.compile(r"[A-Za-z0-9][\w.-]{0,95}(/[A-Za-z0-9][\w.-]{0,95})?")


def sh(x: Any) -> str:
    """One shell word that stands for exactly ``x`` (single-quoted when it needs to be), in bash and sh."""
    return shlex.quote(str(x))


def sh_join(argv) -> str:
    """A command line whose words are exactly ``argv``."""
    return " ".join(sh(a) for a in argv)


def sh_echo(text: Any, *, stderr: bool = False) -> str:
    """A command that prints exactly ``text`` and a newline: ``printf`` (sh's ``echo`` expands backslashes), the
    text one quoted word (a message naming user paths or names is never pasted into quotes by hand)."""
    return f"printf '%s\\n' {sh(text)}" + (" >&2" if stderr else "")


def html(x: Any) -> str:
    """Text for an HTML element or attribute value: ``& < > " '`` become entities."""
    return _html.escape(str(x), quote=True)


def md(x: Any) -> str:
    """Inline Markdown text that renders as exactly these characters on one line (no markup, no raw HTML).

    Line breaks and runs of spaces become one space (a value cannot start a heading, list or table row), ``& < >``
    become entities (no tag, no ``<!--`` that hides the rest of the page), the punctuation that opens inline markup
    (code, emphasis, links, table cells, strikethrough) is backslash-escaped, and so is a leading ``# + = -`` or
    ``1.`` (a block, where the value starts a list item).
    """
    one_line = re.sub(r"[\r\n\u2028\u2029\x00-\x08\x0b\x0c\x0e-\x1f\x7f]+", " ", str(x))
    text = _MD_SPECIAL.sub(r"\\\1", _html.escape(" ".join(one_line.split()), quote=False))
    return _MD_LEAD.sub(lambda m: m[0][:-1] + "\\" + m[0][-1], text, count=1)


def md_code(x: Any) -> str:
    """A value shown as inline code when that is safe (plain identifier-like text), else as escaped text.

    Inside a code span neither backslash escapes nor entities work, so only text that cannot end the span or
    carry markup is put there.
    """
    s = str(x)
    return f"`{s}`" if s and _PLAIN_CODE.fullmatch(s) else md(s)


def yaml_dump(data: Any) -> str:
    """YAML through the serializer (``yaml.safe_dump``, key order kept): never built from strings.

    Non-ASCII stays escaped: with ``allow_unicode`` PyYAML 6 writes U+0085 raw, which reads back as a line break.
    """
    return yaml.safe_dump(data, sort_keys=False)


def csv_cell(x: Any) -> Any:
    """A cell a spreadsheet will not run: text starting with ``= + - @``, tab or CR gets a leading ``'`` (OWASP).

    Numbers stay numbers, and text that is just a number (``-0.5``) stays as it is.
    """
    if not isinstance(x, str) or not x or x[0] not in "=+-@\t\r" or _NUMBER.fullmatch(x):
        return x
    return "'" + x


def csv_frame(df: Any) -> Any:
    """A copy of a DataFrame with every text cell passed through :func:`csv_cell` (and text column names)."""
    import pandas as pd

    out = df.copy()
    for col in out.columns:
        if out[col].dtype == object or pd.api.types.is_string_dtype(out[col].dtype):
            out[col] = out[col].map(csv_cell)
    return out.rename(columns=lambda c: csv_cell(c) if isinstance(c, str) else c)


def is_hub_id(x: Any) -> bool:
    """Whether ``x`` can stand in Hub metadata as a repo id (``name`` or ``org/name``)."""
    return isinstance(x, str) and bool(_HUB_ID.fullmatch(x)) and ".." not in x and not x.endswith(".")

