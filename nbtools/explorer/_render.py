"""HTML for the explorer: a page as GRPO group blocks, one record with its tags highlighted, the step summary.

Why: pure functions of the data layer's objects, so the same HTML is what the widget shows, what the browser test
reads (stable class names and ``data-*`` attributes) and what a saved notebook keeps as its static snapshot.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from nbtools._escape import html as _h
from nbtools._html import inline_styles, segments_html
from nbtools.explorer._query import Page
from nbtools.explorer._record import RecordView
from nbtools.rewards import tag_segments

__all__ = ["inline_styles", "page_html", "record_html", "summary_html", "compare_html", "segments_html"]

def _num(x, fmt: str = ".3g") -> str:
    try:
        return "" if x is None or (isinstance(x, float) and math.isnan(x)) else format(float(x), fmt)
    except (TypeError, ValueError):
        return _h(str(x))


def _verdict(correct) -> str:
    return {True: "correct", False: "incorrect"}.get(correct, "—")


def page_html(page: Page, *, think_tag: str = "think", answer_tag: str = "answer", pattern=None,
              text_limit: int = 400, selected: tuple[int, int] | None = None) -> str:
    """One page as a table: a header row per GRPO group (id, prompt, baseline, reward spread), then its samples."""
    q = page.query
    scope = f"step {q.step}" if q.step is not None else "the run"
    note = (f"<div class='note nbx-note' data-total='{page.total}' data-first='{page.first}' data-last='{page.last}' "
            f"data-page='{page.number + 1}' data-pages='{page.pages}'>records <b>{page.first}–{page.last}</b> of "
            f"<b>{page.total}</b> matching ({page.in_scope} in {scope}) · page {page.number + 1} of {page.pages}</div>")
    head = ("<colgroup><col style='width:5%'><col style='width:5%'><col style='width:7%'><col style='width:7%'>"
            "<col style='width:6%'><col style='width:9%'><col style='width:10%'><col style='width:51%'></colgroup>"
            "<tr><th>step</th><th>idx</th><th>reward</th><th>advantage</th><th>gen len</th><th>verdict</th>"
            "<th>answer (parsed)</th><th>response (&lt;think&gt; / &lt;answer&gt; as the rewards parse them)</th></tr>")
    body, last_group = [], None
    for r in page.rows.itertuples(index=False):
        key = (r.step, r.group)
        if key != last_group:
            flat = " · <b>no signal</b> (all rewards equal)" if r.no_signal else ""
            prompt = segments_html(tag_segments(r.prompt, think_tag="", answer_tag="", pattern=pattern), 300)
            body.append(f"<tr class='nbx-group' data-step='{_h(r.step)}' data-group='{_h(r.group)}'><td colspan='8'>"
                        f"step {_h(r.step)} · group {_h(r.group)} · {_h(r.group_size)} samples · baseline (group mean reward) "
                        f"{_num(r.baseline)}{flat}<div class='txt' style='font-weight:400'>{prompt}</div></td></tr>")
            last_group = key
        cls = {True: "ok", False: "bad"}.get(r.correct, "")
        sel = " style='outline:2px solid #8a3ffc'" if selected == (r.step, r.idx) else ""
        resp = segments_html(tag_segments(r.response, think_tag=think_tag, answer_tag=answer_tag, pattern=pattern),
                             text_limit)
        body.append(f"<tr class='nbx-row {cls}' data-step='{_h(r.step)}' data-idx='{_h(r.idx)}'{sel}>"
                    f"<td class='num'>{_h(r.step)}</td><td class='num'>{_h(r.idx)}</td><td class='num'>{_num(r.reward)}</td>"
                    f"<td class='num'>{_num(r.advantage)}</td><td class='num'>{_num(r.generation_length, '.0f')}</td>"
                    f"<td>{_verdict(r.correct)}</td><td class='txt'>{_h(str(r.answer)) if r.answer is not None else '<span class=muted>none</span>'}</td>"
                    f"<td class='txt'>{resp}</td></tr>")
    if not body:
        body.append("<tr><td colspan='8' class='muted'>no record matches</td></tr>")
    return inline_styles(f"<div class='nbx'>{note}<table class='nbx-table'>{head}{''.join(body)}</table></div>")


def _frame_html(df: pd.DataFrame, cls: str) -> str:
    return df.to_html(index=False, classes=cls, border=0, na_rep="—", float_format=lambda v: f"{v:.4g}")


def record_html(view: RecordView, *, tokens: int = 256) -> str:
    """The record panel: prompt, raw response with tags highlighted, reward by function, token view."""
    facts = (f"step {_h(view.step)} · idx {_h(view.idx)} · group {_h(view.group if view.group is not None else '—')} · reward "
             f"<b>{_num(view.reward)}</b> · advantage {_num(view.advantage)} · baseline {_num(view.baseline)} · "
             f"generation length {_num(view.generation_length, '.0f')} · env_observation: "
             f"{_h(str(view.env_observation or '—'))}")
    parts = [f"<div class='note nbx-record' data-step='{_h(view.step)}' data-idx='{_h(view.idx)}'>{facts}</div>",
             "<table><colgroup><col style='width:12%'><col></colgroup>",
             f"<tr><th>prompt</th><td class='txt'>{segments_html(view.prompt_segments)}</td></tr>",
             f"<tr><th>response<br><span class='think'>think</span> <span class='answer'>answer</span> "
             f"<span class='tag'>&lt;tag&gt;</span></th><td class='txt nbx-response'>{segments_html(view.segments)}</td></tr>",
             f"<tr><th>parsed</th><td class='txt'>think: {_h(repr(view.think))}<br>answer: "
             f"{_h(repr(view.answer))}</td></tr></table>"]
    if view.rewards is not None:
        total, stored = view.rewards.attrs.get("total"), view.rewards.attrs.get("stored")
        again = (f"recomputed {_num(total)}" if total is not None and not math.isnan(total) else
                 "the ground truth is not known here: pass explore(..., ground_truth=prompt -> answer)")
        parts.append(f"<div class='note'><b>reward by function</b> ({again}; stored {_num(stored)})</div>"
                     + _frame_html(view.rewards, "nbx-rewards"))
    if view.tokens is not None:
        t = view.tokens
        gen = t[t["mask"] > 0] if t["mask"].notna().any() else t
        chips = []
        for r in gen.head(tokens).itertuples(index=False):
            p = math.exp(r.logprob) if np.isfinite(r.logprob) else None  # token_table makes it a float
            shade = "#eee" if p is None else f"rgba(76,114,176,{0.15 + 0.85 * p:.2f})"
            text = getattr(r, "text", None)  # decoded when the explorer has the run's tokenizer
            chips.append(f"<span class='tok' style='background:{shade};white-space:pre' title='pos {_h(r.position)} · "
                         f"id {_h(r.token_id)} · logprob {_num(r.logprob)} · prev {_num(r.prev_logprob)} · advantage "
                         f"{_num(r.advantage)}'>{_h(text if isinstance(text, str) else r.token_id)}</span>")
        parts.append(f"<div class='note nbx-tokens'><b>tokens</b>: {len(t)} in all, {int(np.nansum(t['mask']))} "
                     f"generated (mask = 1; shade = probability under the policy; hover for log-probs)</div>"
                     f"<div>{''.join(chips)}</div>")
    return inline_styles(f"<div class='nbx'>{''.join(parts)}</div>")


def compare_html(left: list[RecordView], right: list[RecordView], steps: tuple[int, int], elsewhere: list[int]) -> str:
    """The same prompt at two steps, side by side (one column per step)."""
    def col(views: list[RecordView], step: int) -> str:
        if not views:
            where = _h(", ".join(map(str, elsewhere[:20])) or "no other step")
            return (f"<div><b>step {_h(step)}</b><div class='muted'>this prompt is not in step {_h(step)}; it appears "
                    f"at: {where}</div></div>")
        rows = "".join(f"<tr><td class='num'>{_h(v.idx)}</td><td class='num'>{_num(v.reward)}</td>"
                       f"<td class='txt'>{segments_html(v.segments, 300)}</td></tr>" for v in views)
        return (f"<div><b>step {_h(step)}</b> · mean reward {_num(np.mean([v.reward for v in views]))}<table>"
                f"<colgroup><col style='width:10%'><col style='width:12%'><col></colgroup>"
                f"<tr><th>idx</th><th>reward</th><th>response</th></tr>{rows}</table></div>")
    return inline_styles(f"<div class='nbx nbx-compare'><table class='side'><tr><td style='width:50%;border:0'>"
                         f"{col(left, steps[0])}</td><td style='width:50%;border:0'>{col(right, steps[1])}</td></tr>"
                         "</table></div>")


def summary_html(df: pd.DataFrame, label: str) -> str:
    """Counts, mean reward, correct share, groups with no signal, and a reward histogram with labelled axes."""
    if df.empty:
        return inline_styles(f"<div class='nbx'><b>{_h(label)}</b>: no samples (yet)</div>")
    groups = df.drop_duplicates(["step", "group"])
    known = df["correct"].dropna()
    correct = f"{known.astype(bool).mean():.0%}" if len(known) else "n/a"
    dist = df["reward"].round(3).value_counts().sort_index()
    if len(dist) > 12:  # many distinct rewards: 12 equal bins
        counts, edges = np.histogram(df["reward"].dropna(), bins=12)
        dist = pd.Series(counts, index=[f"{a:.3g}…{b:.3g}" for a, b in zip(edges, edges[1:], strict=False)])
    top = max(int(dist.max()), 1)
    bars = "".join(f"<tr><td class='num'>{k if isinstance(k, str) else f'{k:g}'}</td><td><div class='bar' "
                   f"style='width:{int(220 * n / top)}px'></div></td><td class='num'>{n}</td></tr>"
                   for k, n in dist.items())
    return inline_styles(f"<div class='nbx nbx-summary'><b>{_h(label)}</b>: {len(df)} samples in {len(groups)} groups · "
            f"mean reward {df['reward'].mean():.3f} · correct {correct} · <b>groups with no signal "
            f"{groups['no_signal'].mean():.0%}</b> · mean generation length {df['generation_length'].mean():.1f}"
            f"<table style='width:auto'><tr><th>reward</th><th>samples (bar)</th><th>count</th></tr>{bars}</table></div>")
