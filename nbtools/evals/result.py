"""`EvalResult`: one model's per-sample evaluation table, its accuracy, pass@k, and atomic save/load.

Why: every way of evaluating (local transformers, NeMo-RL's run_eval.py on a cluster) ends in the same table,
so comparisons and plots never care where the numbers came from.

Example:
    >>> res = nbtools.evals.EvalResult.load(cfg.run_dir / "eval" / "baseline_greedy")
    >>> res.accuracy, res.pass_at_k(1)
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from nbtools import _atomic, _paths
from nbtools._escape import csv_frame
from nbtools._escape import html as _h
from nbtools.errors import Fix, NotFoundError
from nbtools.evals.stats import pass_at_k, wilson_ci

__all__ = ["EvalResult", "TABLE_COLUMNS"]

TABLE_COLUMNS = ["problem_id", "sample", "prompt", "response", "extracted_answer", "correct"]


@_paths.tidy_reprs
@dataclass
class EvalResult:
    """Per-sample results of one model on one problem set.

    Attributes:
        table: one row per (problem_id, sample): problem_id, sample, prompt, response, extracted_answer,
            correct (+ reward, ground_truth and any per-problem fields such as level/subject).
        model: model dir or HF id that was evaluated.
        params: how it was generated (n, temperature, max_new_tokens, seed, ...).
        score_block: the NeMo-RL printed block, for cluster evaluations.
        path: where it was saved, if it was.
    """

    table: pd.DataFrame
    model: str = ""
    params: dict[str, Any] = field(default_factory=dict)
    score_block: Any = None
    path: Path | None = None

    # -- numbers ------------------------------------------------------------------------------------------
    @property
    def has_samples(self) -> bool:
        """True when per-sample rows exist (paired comparisons need them); False for a totals-only score block."""
        return len(self.table) > 0

    @property
    def num_problems(self) -> int:
        """Distinct problems evaluated."""
        if not self.has_samples:
            return int(self.score_block.denominator) if self.score_block is not None else 0
        return int(self.table["problem_id"].nunique())

    @property
    def n(self) -> int:
        """Samples per problem (the smallest, if they differ)."""
        if not self.has_samples:
            return int(self.score_block.num_tests_per_prompt) if self.score_block is not None else 0
        return int(self.table.groupby("problem_id").size().min())

    @property
    def accuracy(self) -> float:
        """Mean correctness over problems (each problem weighted once) = unbiased pass@1."""
        if not self.has_samples:
            return float(self.score_block.accuracy) if self.score_block is not None else float("nan")
        return float(self.per_problem()["accuracy"].mean())

    @property
    def ci(self) -> tuple[float, float]:
        """Wilson 95% interval of the accuracy, over problems (fractional successes when n > 1)."""
        return wilson_ci(self.accuracy * self.num_problems, self.num_problems)

    def per_problem(self) -> pd.DataFrame:
        """One row per problem: problem_id, n, correct (count), accuracy (= correct / n), in first-seen order."""
        g = self.table.groupby("problem_id", sort=False)["correct"]
        out = pd.DataFrame({"n": g.size(), "correct": g.sum().astype(int)})
        out["accuracy"] = out["correct"] / out["n"]
        return out.reset_index()

    def pass_at_k(self, k: int) -> float:
        """Unbiased pass@k averaged over problems (needs k <= samples per problem).

        Example:
            >>> sampled.pass_at_k(4)
        """
        pp = self.per_problem()
        return float(np.mean(pass_at_k(pp["n"].to_numpy(), pp["correct"].to_numpy(), k)))

    def pass_at_k_table(self) -> pd.DataFrame:
        """pass@k for k = 1, 2, 4, ... up to n, as a DataFrame (k, pass_at_k)."""
        ks = [k for k in (1, 2, 4, 8, 16, 32, 64, 128, 256) if k <= max(self.n, 1)]
        if self.n and self.n not in ks:
            ks.append(self.n)
        return pd.DataFrame({"k": ks, "pass_at_k": [self.pass_at_k(k) for k in ks]})

    def summary(self) -> dict[str, Any]:
        """JSON-ready summary: model, problems, samples, accuracy, Wilson CI, pass@k, params."""
        low, high = self.ci if self.num_problems else (float("nan"), float("nan"))
        out = {
            "model": self.model,
            "num_problems": self.num_problems,
            "samples_per_problem": self.n,
            "num_samples": len(self.table),
            "accuracy": self.accuracy,
            "ci_low": low,
            "ci_high": high,
            "pass_at_k": {int(r.k): float(r.pass_at_k) for r in self.pass_at_k_table().itertuples()} if self.has_samples else {},
            "params": self.params,
        }
        if self.score_block is not None:
            out["score_block"] = self.score_block.to_dict()
        return out

    # -- persistence --------------------------------------------------------------------------------------
    def save(self, path: str | os.PathLike) -> Path:
        """Write `results.parquet`, `results.csv` and `summary.json` into directory `path`, atomically.

        ``results.csv`` is for spreadsheets: text that a spreadsheet would run as a formula starts with ``'``;
        ``results.parquet`` keeps every value as it is (what :meth:`load` reads).

        The directory is built under a temporary name and renamed, so an interrupted save never leaves a
        directory that looks complete.

        Example:
            >>> res.save(cfg.run_dir / "eval" / "baseline_greedy")
        """
        out = Path(path).expanduser().resolve()
        with _atomic.atomic_dir(out, overwrite=True) as tmp:
            self.table.to_parquet(tmp / "results.parquet", index=False)
            csv_frame(self.table).to_csv(tmp / "results.csv", index=False)  # for spreadsheets: no formula cells
            (tmp / "summary.json").write_text(json.dumps(self.summary(), indent=2, default=str))
        self.path = out
        return out

    @classmethod
    def load(cls, path: str | os.PathLike) -> EvalResult:
        """Read a directory written by :meth:`save`.

        Example:
            >>> EvalResult.load(cfg.run_dir / "eval" / "baseline_greedy").accuracy
        """
        from nbtools import storage
        from nbtools.evals.parse import ScoreBlock

        text = os.fspath(path)  # a directory on disk or a URL (gs://…): read the same way, through storage
        names = _children(text)
        if names is None or not {"results.parquet", "summary.json"} <= names:
            raise NotFoundError(
                f"expected an evaluation directory with results.parquet and summary.json at {text}, found "
                f"{sorted(n for n in names if not n.startswith('.')) if names is not None else 'nothing'}",
                fix=Fix("run nbtools.evals.evaluate_local(..., out_dir=...) or EvalResult.save(path) first",
                        cli="evaluate first (notebook 07 saves the results dir), or pass evaluation_data.json or a "
                            "score block"),
            )
        local = storage.mirror(text, include=lambda rel: rel in ("results.parquet", "summary.json"))
        summary = json.loads((local / "summary.json").read_text())
        block = summary.get("score_block")
        return cls(
            table=pd.read_parquet(local / "results.parquet"),
            model=summary.get("model", ""),
            params=summary.get("params", {}),
            score_block=ScoreBlock(**block) if block else None,
            path=_paths.Url(text.rstrip("/")) if storage.is_remote(text) else Path(text),
        )

    # -- display ------------------------------------------------------------------------------------------
    def _repr_html_(self) -> str:
        if not self.num_problems:
            return f"<b>EvalResult</b> {_h(self.model)}: no samples"
        low, high = self.ci
        p = self.params
        how = "greedy" if not p.get("temperature") else f"sampled T={_h(p.get('temperature'))}"
        rows = "".join(
            f"<tr><td>pass@{int(r.k)}</td><td>{r.pass_at_k:.3f}</td></tr>" for r in self.pass_at_k_table().itertuples()
        ) if self.has_samples else "<tr><td>totals only (no per-sample file)</td></tr>"
        where = f"<br>saved to <code>{_h(self.path)}</code>" if self.path else ""
        return (
            f"<b>EvalResult</b> <code>{_h(Path(self.model).name or self.model)}</code> — {how}, "
            f"{self.num_problems} problems × {self.n} sample(s)<br>accuracy <b>{self.accuracy:.3f}</b> "
            f"(95% Wilson CI {low:.3f}–{high:.3f})<table>{rows}</table>{where}"
        )

    def __repr__(self) -> str:
        acc = f"{self.accuracy:.3f}" if self.num_problems else "n/a"
        return f"EvalResult(model={self.model!r}, problems={self.num_problems}, n={self.n}, accuracy={acc})"


def _children(url: str) -> set[str] | None:
    """Names in a directory (None when it is not one), on any storage."""
    from nbtools import storage

    try:
        return {e.name for e in storage.ls(url)}
    except NotFoundError:
        return None
