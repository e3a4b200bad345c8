"""The notebook HTML look shared by the trajectory explorer and the rewards' re-scoring view.

Why: both show responses with the tags the reward saw shaded, in HTML that must survive JupyterLab's sanitiser;
the look lives once, below both packages, so the rewards' display needs nothing of the explorer (layers, issue 43).
"""

from __future__ import annotations

import re
from typing import Protocol

from nbtools._escape import html as _h

__all__ = ["inline_styles", "segments_html"]


class _Segment(Protocol):  # nbtools.rewards.Segment
    text: str
    kinds: frozenset[str]


# Inline styles, not a <style> block: JupyterLab's sanitiser (untrusted output: every notebook a user did not run)
# strips <style> and <script> but keeps ``style=`` attributes whose properties and values it allows (jupyterlab,
# packages/apputils/src/sanitizer.ts: allowedStyles): plain colours (hex, rgba), lengths, no var(), no flex gap.
_CELL = "border:1px solid #d0d7de;padding:4px 6px;text-align:left;vertical-align:top;overflow-wrap:break-word"
_TAG_STYLES = {
    "table": "border-collapse:collapse;table-layout:fixed;width:100%",
    "th": f"{_CELL};background-color:#f3f5f7;font-weight:600",
    "td": _CELL,
    "mark": "background-color:#ffe066;padding:0",
}
_CLASS_STYLES = {
    "nbx": "font-family:sans-serif;font-size:12px;color:#222222;background-color:#ffffff",
    "txt": "white-space:pre-wrap;text-align:left;margin:0;font-family:monospace;font-size:11px",
    "think": "background-color:#fff4d6", "answer": "background-color:#dcf0ff", "tag": "color:#8a3ffc;font-weight:700",
    "muted": "color:#888888", "num": "text-align:right", "note": "margin:4px 0",
    "bar": "background-color:#4c72b0;height:10px",
    "tok": "display:inline-block;margin:1px;padding:0 3px;border-radius:3px;font-size:10px",
}
_ROW_CELL_STYLES = {  # a cell's background and rule from its row's class
    "nbx-group": "background-color:#eef2f8;border-top:2px solid #6b7fa8;font-weight:600",
    "ok": "background-color:#f1f9f3", "bad": "background-color:#fdf3f2",
}
_OPEN_TAG = re.compile(r"<([a-z][a-z0-9]*)\b((?:[^>'\"]|'[^']*'|\"[^\"]*\")*)>")
_CLASS = re.compile(r"""\sclass=(?:'([^']*)'|"([^"]*)"|([\w-]+))""")
_STYLE_ATTR = re.compile(r"""\sstyle=(?:'([^']*)'|"([^"]*)")""")


def inline_styles(markup: str) -> str:
    """``markup`` (HTML made with this module's class names) with each element's look as an inline ``style=`` attribute.

    The element's own ``style=`` comes last, so it wins (a selected row's outline, a histogram bar's width).
    """
    row: set[str] = set()

    def one(m: re.Match) -> str:
        nonlocal row
        tag, attrs = m.group(1), m.group(2)
        c = _CLASS.search(attrs)
        classes = set(next(g for g in c.groups() if g is not None).split()) if c else set()
        if tag == "tr":
            row = classes
        rules = [_TAG_STYLES.get(tag, "")] + [_CLASS_STYLES[k] for k in sorted(classes) if k in _CLASS_STYLES]
        if tag in ("td", "th"):
            rules += [_ROW_CELL_STYLES[k] for k in sorted(row) if k in _ROW_CELL_STYLES]
        own = _STYLE_ATTR.search(attrs)
        if own:
            rules.append(next(g for g in own.groups() if g is not None))
            attrs = attrs[:own.start()] + attrs[own.end():]
        style = ";".join(r.strip(";") for r in rules if r)
        return f"<{tag}{attrs} style='{style}'>" if style else m.group(0)

    return _OPEN_TAG.sub(one, markup)


def segments_html(segments: list[_Segment], limit: int | None = None) -> str:
    """Segments as HTML: think/answer content shaded, tags bold, search hits marked; cut after ``limit`` chars."""
    out, used = [], 0
    for s in segments:
        text = s.text
        if limit is not None and used + len(text) > limit:
            text = text[: max(0, limit - used)]
        used += len(text)
        body = _h(text)
        if "match" in s.kinds:
            body = f"<mark>{body}</mark>"
        cls = " ".join(k for k in ("think", "answer", "tag") if k in s.kinds)
        out.append(f"<span class='{cls}'>{body}</span>" if cls else body)
        if limit is not None and used >= limit:
            total = sum(len(x.text) for x in segments)
            if total > limit:
                out.append(f"<span class='muted'>… ({total:,} chars)</span>")
            break
    return "".join(out) or "<span class='muted'>—</span>"
