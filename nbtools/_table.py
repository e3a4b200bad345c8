"""DataFrames shown the way ``kubectl get`` and ``gcloud … list`` print: left-aligned, one line when empty.

Why: JupyterLab's stylesheet right-aligns every table cell, so a frame of names, states and paths reads ragged; and a
table with headers and no rows says less than a sentence. A :class:`Table` is a DataFrame (every pandas operation
works on it and keeps the look, through ``_constructor``) whose HTML carries ``text-align:left`` inline, which
JupyterLab's sanitiser keeps in untrusted notebooks (a ``<style>`` block it drops), and whose reprs are
``attrs["when_empty"]`` when it has no rows.

Example:
    >>> table(pd.DataFrame(columns=["file", "line"]), when_empty="every line was read")
    every line was read
"""

from __future__ import annotations

import re

import pandas as pd

from nbtools._escape import html as _h

__all__ = ["Table", "table"]

_CELL = re.compile(r"<(td|th)(?=[\s>])")


class Table(pd.DataFrame):
    """A DataFrame that reads like ``kubectl get``: left-aligned cells; ``attrs["when_empty"]`` instead of no rows."""

    @property
    def _constructor(self):
        return Table

    def __finalize__(self, other, method=None, **kwargs):
        out = super().__finalize__(other, method=method, **kwargs)
        if out is not other:  # a filter or a slice of the table: the verdict described the whole, not this part
            out.attrs.pop("when_empty", None)
        return out

    def _verdict(self) -> str | None:
        return self.attrs.get("when_empty") if len(self) == 0 else None

    def _repr_html_(self) -> str | None:
        if (v := self._verdict()) is not None:
            return f"<p>{_h(v)}</p>"
        markup = super()._repr_html_()
        if markup is None:
            return None
        markup = markup.replace("text-align: right;", "text-align: left;")  # pandas' header row and <style>
        return _CELL.sub(r'<\1 style="text-align:left"', markup)

    def __repr__(self) -> str:
        v = self._verdict()
        return v if v is not None else super().__repr__()


def table(df: pd.DataFrame, *, when_empty: str | None = None) -> Table:
    """``df`` as a :class:`Table` (the same data); ``when_empty`` is what it says when it has no rows."""
    out = Table(df)
    if when_empty:
        out.attrs["when_empty"] = when_empty
    return out
