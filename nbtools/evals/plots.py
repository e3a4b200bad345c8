"""Display layer for evaluations: accuracy with CIs, the flip matrix, per-difficulty/subject breakdowns.

Why: a reviewer reads a bar with its interval faster than a table; each function takes the data objects from
`nbtools.evals`, draws with matplotlib, optionally saves a PNG, and returns the Figure.

Example:
    >>> nbtools.evals.plots.accuracy({"baseline": base, "fine-tuned": tuned}, save=cfg.run_dir / "figures" / "eval.png")
"""

from __future__ import annotations

import os
from typing import Any

import pandas as pd

from nbtools import _table
from nbtools.errors import ConfigError
from nbtools.evals.compare import Comparison, as_result
from nbtools.evals.stats import wilson_ci

__all__ = ["model_color", "BREAKDOWN_FIELDS", "breakdown_field", "accuracy_table", "breakdown_table", "accuracy", "flip_matrix", "breakdown"]


def accuracy_table(results: dict[str, Any]) -> pd.DataFrame:
    """model, problems, samples_per_problem, accuracy, ci_low, ci_high for each named result, then the settings it
    was generated with as far as they are known (dataset, temperature, max_new_tokens and where that length came
    from: the caller, the benchmark's published length, the experiment's), so the table says what was used.

    Example:
        >>> accuracy_table({"baseline": base, "fine-tuned": tuned})
    """
    from nbtools.evals.compare import _settings

    rows = []
    for name, r in results.items():
        res = as_result(r)
        low, high = res.ci
        known = _settings(res)
        rows.append({"model": name, "problems": res.num_problems, "samples_per_problem": res.n,
                     "accuracy": res.accuracy, "ci_low": low, "ci_high": high,
                     **{k: known[k] for k in ("dataset", "temperature", "max_new_tokens") if k in known},
                     **({"length_from": res.params["length_from"]} if res.params.get("length_from") else {})})
    return _table.table(pd.DataFrame(rows))


BREAKDOWN_FIELDS = ("level", "subject", "difficulty", "ground_truth")


def breakdown_field(results: dict[str, Any]) -> str:
    """The first of level, subject, difficulty, ground_truth that every result has (MATH-500 has level/subject)."""
    tables = [as_result(r).table for r in results.values()]
    for f in BREAKDOWN_FIELDS:
        if all(f in t.columns for t in tables):
            return f
    raise ConfigError(f"no breakdown field: none of {list(BREAKDOWN_FIELDS)} is in every result; pass by=<column>")


def breakdown_table(results: dict[str, Any], by: str | None = None) -> pd.DataFrame:
    """Accuracy with Wilson CIs per value of a per-problem field (e.g. MATH-500's `level` or `subject`).

    `by=None` picks the first field of BREAKDOWN_FIELDS that all results have.

    Raises:
        ConfigError: a result has no such column (the message lists the columns it has).

    Example:
        >>> breakdown_table({"baseline": base, "fine-tuned": tuned}, by="level")
    """
    by = by or breakdown_field(results)
    rows = []
    for name, r in results.items():
        res = as_result(r)
        if by not in res.table.columns:
            raise ConfigError(f"breakdown by {by!r}: result {name!r} has no such field; it has "
                              f"{[c for c in res.table.columns]}; MATH-500 provides 'level' and 'subject'")
        per = res.table.groupby(["problem_id", by], sort=False)["correct"].mean().reset_index()
        for value, grp in per.groupby(by, sort=True):
            low, high = wilson_ci(float(grp["correct"].sum()), len(grp))
            rows.append({"model": name, by: value, "problems": len(grp), "accuracy": float(grp["correct"].mean()),
                         "ci_low": low, "ci_high": high})
    return pd.DataFrame(rows)


def _save(fig, save: str | os.PathLike | None):
    if save is not None:
        from nbtools import _figure

        _figure.save(fig, save)
    return fig


def _message(text: str, save):
    from nbtools import _figure

    fig, ax = _figure.new(figsize=(5.5, 1.4))
    ax.axis("off")
    ax.text(0.0, 0.5, text, ha="left", va="center", wrap=True, fontsize=9)
    return _save(fig, save)


# One colour per model in every figure: the baseline grey, the fine-tuned model blue, other names after them;
# a sampled evaluation is the same colour, hatched.
_MODEL_COLORS = (("baseline", "0.55"), ("fine-tuned", "C0"), ("finetuned", "C0"), ("tuned", "C0"))


def model_color(name: str, others: list[str] | None = None) -> str:
    """The colour of ``name`` (a model, or "model greedy/sampled") in every evaluation figure."""
    low = str(name).lower()
    for key, color in _MODEL_COLORS:
        if low.startswith(key):
            return color
    rest = [o for o in (others or [name]) if not any(str(o).lower().startswith(k) for k, _ in _MODEL_COLORS)]
    return f"C{1 + (rest.index(name) if name in rest else 0) % 9}"


def _bars(ax, table: pd.DataFrame, x_labels: list[str], group_col: str | None):
    import numpy as np

    models = list(dict.fromkeys(table["model"]))
    width = 0.8 / len(models)
    x = np.arange(len(x_labels))
    for i, m in enumerate(models):
        sub = table[table["model"] == m]
        if group_col:
            sub = sub.set_index(group_col).reindex(x_labels).reset_index()
        acc = sub["accuracy"].to_numpy(dtype=float)
        err = np.clip([acc - sub["ci_low"].to_numpy(dtype=float), sub["ci_high"].to_numpy(dtype=float) - acc], 0, None)
        pos = x + (i - (len(models) - 1) / 2) * width if group_col else x[i : i + 1]
        sampled = "sampled" in str(m).lower()
        ax.bar(pos, acc, width=width if group_col else 0.6, yerr=err, capsize=4, label=m, color=model_color(m, models),
               hatch="//" if sampled else None, edgecolor="white" if sampled else None, linewidth=0)
        # the value and the problems behind it, above the interval: an empty bar then reads "0.00, n=1"
        for px, a, top, n in zip(pos, acc, acc + err[1], sub["problems"].to_numpy(), strict=True):
            if a == a:  # not NaN
                label = f"{a:.2f}" if not group_col else f"{a:.2f}\nn={int(n)}"
                ax.text(px, min(top + 0.02, 1.04), label, ha="center", va="bottom", fontsize=7 if group_col else 8)
    ax.set_ylim(0, 1.18 if group_col else 1.1)
    ax.set_ylabel("accuracy (95% Wilson CI)")


def accuracy(results: dict[str, Any], *, title: str = "Accuracy", save: str | os.PathLike | None = None):
    """Bar per model with its Wilson 95% interval.

    Example:
        >>> accuracy({"baseline": base, "fine-tuned": tuned}, save=cfg.run_dir / "figures" / "eval_accuracy.png")
    """
    from nbtools import _figure

    table = accuracy_table(results)
    fig, ax = _figure.new(figsize=(1.6 + 1.3 * len(table), 3.6))
    _bars(ax, table, list(table["model"]), None)
    ax.set_xticks(range(len(table)), [f"{m}\n{p} problems × {n}" for m, p, n in
                                      zip(table["model"], table["problems"], table["samples_per_problem"], strict=True)],
                  fontsize=8)
    ax.set_title(title)
    fig.tight_layout()
    return _save(fig, save)


def flip_matrix(comparison: Comparison, *, save: str | os.PathLike | None = None):
    """The 2×2 paired table as a heatmap: fixed (wrong → right) and broken (right → wrong) stand out.

    Example:
        >>> flip_matrix(cmp, save=cfg.run_dir / "figures" / "eval_flips.png")
    """
    from nbtools import _figure

    if comparison.flips is None:  # totals only, or several samples per problem: say so instead of failing
        return _message(f"No flip table: {comparison.test} compared "
                        f"{'per-problem accuracies over several samples' if comparison.paired else 'totals only'}.\n"
                        "Keep one sample per problem with per-sample results (eval.save_path) for a flip table.", save)
    t = comparison.flip_table()
    fig, ax = _figure.new(figsize=(4.4, 3.6))
    ax.imshow(t.to_numpy(), cmap="Blues")
    labels = [["both right", "broken"], ["fixed", "both wrong"]]
    for i in range(2):
        for j in range(2):
            ax.text(j, i, f"{labels[i][j]}\n{int(t.iat[i, j])}", ha="center", va="center", fontsize=10,
                    color="black", bbox={"facecolor": "white", "alpha": 0.7, "edgecolor": "none"})
    ax.set_xticks([0, 1], list(t.columns))
    ax.set_yticks([0, 1], list(t.index))
    ax.set_title(f"{comparison.test}: p = {comparison.p_value:.3g}", fontsize=10)
    fig.tight_layout()
    return _save(fig, save)


def breakdown(results: dict[str, Any], by: str | None = None, *, save: str | os.PathLike | None = None):
    """Grouped bars of accuracy per value of `by` (e.g. MATH-500 `level` or `subject`), with Wilson CIs.

    Example:
        >>> breakdown({"baseline": base, "fine-tuned": tuned}, by="subject")
    """
    from nbtools import _figure

    if not all(as_result(r).has_samples for r in results.values()):
        return _message("No breakdown: some results have totals only (no per-sample evaluation_data.json).", save)
    by = by or breakdown_field(results)
    table = breakdown_table(results, by)
    values = sorted(table[by].unique(), key=lambda v: (str(type(v)), v))
    fig, ax = _figure.new(figsize=(2.0 + 0.9 * len(values) * max(1, table["model"].nunique()) / 2, 3.8))
    _bars(ax, table, values, by)
    long = max(len(str(v)) for v in values) > 4
    ax.set_xticks(range(len(values)), [str(v) for v in values], rotation=30 if long else 0, ha="right" if long else "center")
    ax.set_xlabel(by)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.0, 1.0), frameon=False)  # clear of bars and title
    ax.set_title(f"Accuracy by {by} (n = problems per group)")
    fig.tight_layout()
    return _save(fig, save)
