"""Compare two evaluations: accuracy with CIs, a paired test when per-problem results exist, a verdict.

Why: two printed scores (0.402 → 0.464) are not evidence. With per-problem results the right test is paired
(McNemar exact on the problems that flipped, bootstrap CI of the delta); with totals only, an unpaired
two-proportion test is all one can do, and it is labelled as the weaker one.

Example:
    >>> cmp = nbtools.evals.compare(baseline, tuned, names=("baseline", "fine-tuned"))
    >>> cmp.verdict
    'fine-tuned is better than baseline: 0.955 vs 0.120 (+0.835, 95% CI ...); McNemar exact p = ...'
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from nbtools.errors import ConfigError
from nbtools.evals import stats
from nbtools.evals.parse import ScoreBlock
from nbtools.evals.result import EvalResult

__all__ = ["Comparison", "compare", "as_result"]


@dataclass
class Comparison:
    """The outcome of :func:`compare` (B relative to A: delta = acc_b - acc_a)."""

    name_a: str
    name_b: str
    acc_a: float
    acc_b: float
    ci_a: tuple[float, float]
    ci_b: tuple[float, float]
    n_problems: int
    test: str
    p_value: float
    delta: float
    ci_low: float | None
    ci_high: float | None
    paired: bool
    alpha: float
    verdict: str
    flips: dict[str, int] | None = None
    pass_at_k: list[dict[str, float]] | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def significant(self) -> bool:
        """p < alpha."""
        return self.p_value < self.alpha

    def flip_table(self) -> pd.DataFrame:
        """The 2×2 table (rows: A correct?, columns: B correct?) of paired single-sample results.

        Example:
            >>> cmp.flip_table()
        """
        if self.flips is None:
            raise ConfigError("flip_table needs a paired comparison of one sample per problem (both n == 1)")
        f = self.flips
        return pd.DataFrame(
            [[f["both"], f["broken"]], [f["fixed"], f["neither"]]],
            index=pd.Index([f"{self.name_a} correct", f"{self.name_a} wrong"], name=""),
            columns=[f"{self.name_b} correct", f"{self.name_b} wrong"],
        )

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict of every field."""
        d = asdict(self)
        d["ci_a"], d["ci_b"] = list(self.ci_a), list(self.ci_b)
        d["significant"] = self.significant
        return d

    def save(self, path: str | os.PathLike) -> Path:
        """Write the comparison as JSON (temp file + rename).

        Example:
            >>> cmp.save(cfg.run_dir / "eval" / "comparison.json")
        """
        p = Path(path)
        p.parent.mkdir(parents=True, exist_ok=True)
        tmp = p.with_name(f".{p.name}.tmp-{os.getpid()}")
        tmp.write_text(json.dumps(self.to_dict(), indent=2, default=float))
        tmp.replace(p)
        return p

    def _repr_html_(self) -> str:
        import html

        ci = f"[{self.ci_low:+.3f}, {self.ci_high:+.3f}]" if self.ci_low is not None else "n/a"
        kind = "paired" if self.paired else "<span style='color:#b45309'>unpaired (weaker)</span>"
        rows = [
            (self.name_a, f"{self.acc_a:.3f}", f"{self.ci_a[0]:.3f}–{self.ci_a[1]:.3f}"),
            (self.name_b, f"{self.acc_b:.3f}", f"{self.ci_b[0]:.3f}–{self.ci_b[1]:.3f}"),
        ]
        body = "".join(f"<tr><td>{html.escape(a)}</td><td>{b}</td><td>{c}</td></tr>" for a, b, c in rows)
        flips = ""
        if self.flips:
            f = self.flips
            flips = (f"<br>flips: fixed <b>{f['fixed']}</b>, broken <b>{f['broken']}</b>, "
                     f"both right {f['both']}, both wrong {f['neither']}")
        pk = ""
        if self.pass_at_k:
            pk = "<br>" + ", ".join(f"pass@{int(r['k'])}: {r['a']:.3f} → {r['b']:.3f}" for r in self.pass_at_k)
        colour = "#15803d" if self.significant and self.delta > 0 else ("#b91c1c" if self.significant else "#374151")
        return (
            f"<table><tr><th>model</th><th>accuracy</th><th>95% Wilson CI</th></tr>{body}</table>"
            f"Δ = <b>{self.delta:+.3f}</b>, 95% CI {ci}; {html.escape(self.test)} ({kind}), "
            f"p = <b>{self.p_value:.3g}</b> on {self.n_problems} problems{flips}{pk}"
            f"<p style='color:{colour}'><b>{html.escape(self.verdict)}</b></p>"
        )


def as_result(x: Any) -> EvalResult:
    """Accept an EvalResult, a ScoreBlock, a results table, a saved directory or a (successes, total) tuple.

    Example:
        >>> as_result((201, 500)).accuracy
        0.402
    """
    if isinstance(x, EvalResult):
        return x
    if isinstance(x, ScoreBlock):
        return EvalResult(table=pd.DataFrame(), model=x.model_name, score_block=x)
    if isinstance(x, pd.DataFrame):
        missing = {"problem_id", "correct"} - set(x.columns)
        if missing:
            raise ConfigError(f"a results table needs columns problem_id and correct; missing {sorted(missing)}")
        return EvalResult(table=x)
    if isinstance(x, (str, os.PathLike)):
        return EvalResult.load(x)
    if isinstance(x, tuple) and len(x) == 2:
        num, den = x
        block = ScoreBlock(model_name="", dataset_name="", max_new_tokens=0, temperature=0.0, top_p=1.0, top_k=-1,
                           seed=0, metric="pass@1", num_tests_per_prompt=1, score=num / den, numerator=float(num),
                           denominator=int(den))
        return EvalResult(table=pd.DataFrame(), score_block=block)
    raise ConfigError(f"cannot compare a {type(x).__name__}; pass an EvalResult, ScoreBlock, DataFrame, "
                      f"saved results directory or (successes, total)")


# What NeMo-RL prints about how a score was produced; two scores compare only when these agree (a MATH-500 score at
# max_model_len 2048 is not the tutorial's at 8192: long solutions are cut, and cut answers are wrong).
_SETTINGS = ("dataset_name", "max_new_tokens", "temperature", "top_p", "top_k", "num_tests_per_prompt", "metric")


def _settings(ra: EvalResult, rb: EvalResult) -> list[str]:
    """A note per generation setting that differs between two printed NeMo-RL score blocks."""
    a, b = ra.score_block, rb.score_block
    if a is None or b is None or not (a.dataset_name and b.dataset_name):  # totals-only inputs carry no settings
        return []
    diff = [f"{k} {getattr(a, k)!r} vs {getattr(b, k)!r}" for k in _SETTINGS if getattr(a, k) != getattr(b, k)]
    if not diff:
        return []
    return ["scores are comparable only at equal settings, and these differ: " + "; ".join(diff)
            + " (max_new_tokens is run_eval.py's generation.vllm_cfg.max_model_len: pass the same max_model_len "
            "to both evaluations)"]


def _paired(ra: EvalResult, rb: EvalResult, notes: list[str]) -> tuple[pd.DataFrame, pd.DataFrame] | None:
    if not (ra.has_samples and rb.has_samples):
        return None
    pa, pb = ra.per_problem().set_index("problem_id"), rb.per_problem().set_index("problem_id")
    common = [i for i in pa.index if i in pb.index]
    if not common:
        notes.append("the two evaluations share no problem ids, so they cannot be paired")
        return None
    if len(common) < max(len(pa), len(pb)):
        notes.append(f"paired on the {len(common)} problems both evaluations contain "
                     f"({len(pa)} and {len(pb)} evaluated)")
    return pa.loc[common], pb.loc[common]


def compare(
    a: Any,
    b: Any,
    *,
    names: tuple[str, str] = ("baseline", "fine-tuned"),
    alpha: float = 0.05,
    n_boot: int = 10_000,
    seed: int = 0,
) -> Comparison:
    """Compare model B against model A; paired when both have per-problem results on the same problems.

    Tests: both one sample per problem → McNemar exact (scipy binomtest on fixed vs broken) + flip table;
    several samples per problem → Wilcoxon signed-rank on per-problem accuracy, plus unbiased pass@k; both
    with a paired bootstrap CI of the delta (fixed seed). Totals only → two-proportion z-test, labelled unpaired.

    Args:
        a: baseline (EvalResult, ScoreBlock, table, saved dir or (successes, total)).
        b: the model being judged, same kinds.
        names: display names of a and b.
        alpha: significance level used by the verdict.
        n_boot: bootstrap replicates.
        seed: bootstrap seed.

    Returns:
        Comparison with .test, .p_value, .delta, .ci_low, .ci_high, .paired, .verdict, .to_dict().

    Example:
        >>> compare(base_greedy, tuned_greedy).p_value < 0.01
        True
        >>> compare((201, 500), (232, 500)).test
        'two-proportion z-test (unpaired)'
    """
    ra, rb = as_result(a), as_result(b)
    if not (ra.num_problems and rb.num_problems):
        raise ConfigError(f"both evaluations need at least one problem; got {ra.num_problems} and {rb.num_problems}")
    notes: list[str] = _settings(ra, rb)
    pair = _paired(ra, rb, notes)
    flips = pass_k = None
    if pair is not None:
        pa, pb = pair
        sa, sb = pa["accuracy"].to_numpy(), pb["accuracy"].to_numpy()
        n_probs = len(sa)
        acc_a, acc_b = float(sa.mean()), float(sb.mean())
        delta, low, high = stats.paired_bootstrap(sa, sb, n_boot=n_boot, seed=seed)
        if int(pa["n"].max()) == 1 and int(pb["n"].max()) == 1:
            ca, cb = sa.astype(bool), sb.astype(bool)
            flips = {"fixed": int((~ca & cb).sum()), "broken": int((ca & ~cb).sum()),
                     "both": int((ca & cb).sum()), "neither": int((~ca & ~cb).sum())}
            t = stats.mcnemar_exact(fixed=flips["fixed"], broken=flips["broken"])
        else:
            t = stats.wilcoxon_paired(sa, sb)
            k_max = int(min(pa["n"].min(), pb["n"].min()))
            ks = [k for k in (1, 2, 4, 8, 16, 32, 64, 128) if k <= k_max] + ([k_max] if k_max not in (1, 2, 4, 8, 16, 32, 64, 128) else [])
            pass_k = [{"k": k,
                       "a": float(np.mean(stats.pass_at_k(pa["n"].to_numpy(), pa["correct"].to_numpy(), k))),
                       "b": float(np.mean(stats.pass_at_k(pb["n"].to_numpy(), pb["correct"].to_numpy(), k)))}
                      for k in ks]
        ci_a = stats.wilson_ci(acc_a * n_probs, n_probs)
        ci_b = stats.wilson_ci(acc_b * n_probs, n_probs)
    else:
        na, nb = ra.num_problems, rb.num_problems
        acc_a, acc_b = ra.accuracy, rb.accuracy
        xa, xb = acc_a * na, acc_b * nb
        t = stats.two_proportion_ztest(xa, na, xb, nb)
        delta = acc_b - acc_a
        half = stats._z(0.95) * math.sqrt(acc_a * (1 - acc_a) / na + acc_b * (1 - acc_b) / nb)
        low, high = delta - half, delta + half
        n_probs = min(na, nb)
        ci_a, ci_b = stats.wilson_ci(xa, na), stats.wilson_ci(xb, nb)
        notes.append("only totals (or unpairable results) were available: the unpaired test ignores which problems "
                     "each model solved and is weaker than a paired test; keep per-sample results "
                     "(eval.save_path) to get one")
    text = stats.verdict(name_a=names[0], name_b=names[1], acc_a=acc_a, acc_b=acc_b, delta=delta, ci_low=low,
                         ci_high=high, test=t.test, p_value=t.p_value, n=n_probs, paired=pair is not None, alpha=alpha)
    if flips:
        text += f" Flips: {flips['fixed']} fixed, {flips['broken']} broken."
    return Comparison(name_a=names[0], name_b=names[1], acc_a=acc_a, acc_b=acc_b, ci_a=ci_a, ci_b=ci_b,
                      n_problems=n_probs, test=t.test, p_value=t.p_value, delta=delta, ci_low=low, ci_high=high,
                      paired=pair is not None, alpha=alpha, verdict=text, flips=flips, pass_at_k=pass_k, notes=notes)
