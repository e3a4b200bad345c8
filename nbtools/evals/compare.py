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

import math
import os
import warnings
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

import nbtools.evals.stats as stats
from nbtools import _atomic
from nbtools._escape import html as _h
from nbtools.errors import ConfigError, Fix
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
        return _atomic.write_json(path, self.to_dict(), default=float)

    def _repr_html_(self) -> str:
        ci = f"[{self.ci_low:+.3f}, {self.ci_high:+.3f}]" if self.ci_low is not None else "n/a"
        kind = "paired" if self.paired else "<span style='color:#b45309'>unpaired (weaker)</span>"
        rows = [
            (self.name_a, f"{self.acc_a:.3f}", f"{self.ci_a[0]:.3f}–{self.ci_a[1]:.3f}"),
            (self.name_b, f"{self.acc_b:.3f}", f"{self.ci_b[0]:.3f}–{self.ci_b[1]:.3f}"),
        ]
        body = "".join(f"<tr><td>{_h(a)}</td><td>{b}</td><td>{c}</td></tr>" for a, b, c in rows)
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
            f"Δ = <b>{self.delta:+.3f}</b>, 95% CI {ci}; {_h(self.test)} ({kind}), "
            f"p = <b>{self.p_value:.3g}</b> on {self.n_problems} problems{flips}{pk}"
            f"<p style='color:{colour}'><b>{_h(self.verdict)}</b></p>"
        )


def as_result(x: Any) -> EvalResult:
    """Accept an EvalResult, a ScoreBlock, a results table, a saved directory or a (successes, total) tuple.

    Raises:
        ConfigError: impossible numbers (``(0, 0)``, more successes than problems, a score outside [0, 1]) or a
            table whose ``correct`` column is not 0/1.

    Example:
        >>> as_result((201, 500)).accuracy
        0.402
    """
    if isinstance(x, EvalResult):
        res = x
    elif isinstance(x, ScoreBlock):
        res = EvalResult(table=pd.DataFrame(), model=x.model_name, score_block=x)
    elif isinstance(x, pd.DataFrame):
        missing = {"problem_id", "correct"} - set(x.columns)
        if missing:
            raise ConfigError(f"a results table needs columns problem_id and correct; missing {sorted(missing)}; "
                              "fix: one row per (problem, sample) with problem_id and a true/false `correct`")
        res = EvalResult(table=x)
    elif isinstance(x, (str, os.PathLike)):
        res = EvalResult.load(x)
    elif isinstance(x, tuple) and len(x) == 2:
        res = _totals(*x)
    else:
        raise ConfigError(f"cannot compare a {type(x).__name__}; fix: pass an EvalResult, ScoreBlock, DataFrame, "
                          f"saved results directory or (successes, total)")
    _check(res)
    return res


def _totals(num: Any, den: Any) -> EvalResult:
    """(successes, total) as a totals-only result; refuses what no evaluation can produce."""
    problems = []
    ok_num = isinstance(num, (int, float, np.integer, np.floating)) and not isinstance(num, bool) and math.isfinite(num)
    ok_den = (isinstance(den, (int, np.integer)) and not isinstance(den, bool)) or (
        isinstance(den, (float, np.floating)) and math.isfinite(den) and float(den).is_integer())
    if not ok_den or den < 1:
        problems.append(f"total {den!r} is not a number of problems (a whole number >= 1)")
    if not ok_num or num < 0:
        problems.append(f"successes {num!r} is not a count (a number >= 0)")
    elif ok_den and den >= 1 and num > den:
        problems.append(f"successes {num!r} exceed the total {den!r}")
    if problems:
        raise ConfigError([f"totals {num!r}/{den!r}: {p}" for p in problems]
                          + ["fix: pass (correct, total) as printed by run_eval.py, e.g. (201, 500)"])
    block = ScoreBlock(model_name="", dataset_name="", max_new_tokens=0, temperature=0.0, top_p=1.0, top_k=-1,
                       seed=0, metric="pass@1", num_tests_per_prompt=1, score=float(num) / int(den),
                       numerator=float(num), denominator=int(den))
    return EvalResult(table=pd.DataFrame(), score_block=block, params={"totals_only": True})


def _check(res: EvalResult) -> None:
    if res.has_samples:
        correct = res.table["correct"]
        bad = ~correct.isin([0, 1, True, False])
        if bad.any() or res.table["problem_id"].isna().any():
            shown = correct[bad].head(3).tolist()
            raise ConfigError(f"the results table of {res.model or 'an evaluation'} has {int(bad.sum())} `correct` value(s) "
                              f"that are not true/false (e.g. {shown}) or empty problem ids; fix: one row per sample, "
                              "`correct` true/false (or 1/0)")
    elif res.score_block is not None and (bad := res.score_block.problems()):
        raise ConfigError([f"score block of {res.score_block.model_name or 'an evaluation'}: {p}" for p in bad]
                          + ["fix: pass the block exactly as NeMo-RL printed it (nbtools eval-parse LOG lists them)"])


_SETTINGS = ("temperature", "top_p", "top_k", "max_new_tokens", "samples_per_prompt")


def _settings(r: EvalResult) -> dict[str, Any]:
    """What an evaluation was run on and with, as far as it is known (unknown keys are absent)."""
    if r.params.get("totals_only"):
        return {}
    p = r.params
    out: dict[str, Any] = {}
    b = r.score_block
    if b is not None:
        out.update(dataset=b.dataset_name or None, temperature=b.temperature, top_p=b.top_p, top_k=b.top_k,
                   max_new_tokens=b.max_new_tokens or None, samples_per_prompt=b.num_tests_per_prompt)
    for key, names in (("dataset", ("dataset_name", "dataset")), ("temperature", ("temperature",)),
                       ("top_p", ("top_p",)), ("top_k", ("top_k",)), ("max_new_tokens", ("max_new_tokens",)),
                       ("samples_per_prompt", ("num_tests_per_prompt", "n"))):
        for name in names:
            if p.get(name) is not None and out.get(key) is None:
                out[key] = p[name]
    if r.has_samples:
        out["samples_per_prompt"] = r.n
    return {k: v for k, v in out.items() if v is not None}


def _same(x: Any, y: Any) -> bool:
    if isinstance(x, (int, float)) and isinstance(y, (int, float)):
        return math.isclose(float(x), float(y), rel_tol=1e-9, abs_tol=1e-12)
    return x == y


def _check_match(ra: EvalResult, rb: EvalResult, names: tuple[str, str], allow_mismatch: bool, notes: list[str]) -> None:
    """Different datasets or problem sets: refused unless allowed; different sampling settings: a loud note."""
    sa, sb = _settings(ra), _settings(rb)
    refuse = []
    if "dataset" in sa and "dataset" in sb and sa["dataset"] != sb["dataset"]:
        refuse.append(f"different datasets: {names[0]} on {sa['dataset']!r}, {names[1]} on {sb['dataset']!r}")
    if ra.has_samples and rb.has_samples:
        ia, ib = set(ra.table["problem_id"]), set(rb.table["problem_id"])
        if ia != ib:
            refuse.append(f"different problem sets: {len(ia)} and {len(ib)} problems, {len(ia & ib)} in common")
        refuse.extend(_same_problems(ra.table, rb.table, names))
    elif ra.num_problems != rb.num_problems:
        refuse.append(f"different problem counts: {ra.num_problems} ({names[0]}) vs {rb.num_problems} ({names[1]})")
    if refuse and not allow_mismatch:
        raise ConfigError(refuse, fix=Fix("evaluate both models on the same problems (same dataset and split); to "
                                          "compare anyway, pass allow_mismatch=True (the comparison then says so in its "
                                          "notes)", cli="evaluate both models on the same problems (same dataset and "
                                          "split); to compare anyway, pass --allow-mismatch (the notes then say so)"))
    diffs = [f"{k} {sa[k]} vs {sb[k]}" for k in _SETTINGS if k in sa and k in sb and not _same(sa[k], sb[k])]
    loud = [f"MISMATCH (allowed): {r}; the statistics below compare different problems" for r in refuse]
    if diffs:
        loud.append(f"MISMATCH: the two evaluations used different settings ({'; '.join(diffs)}); the difference "
                    "mixes the models with the settings, so evaluate both with the same settings before claiming a gain")
    for text in loud:
        warnings.warn(text, UserWarning, stacklevel=3)
    notes.extend(loud)


def _same_problems(ta: pd.DataFrame, tb: pd.DataFrame, names: tuple[str, str]) -> list[str]:
    """Shared ids must be the same problems: where both tables carry prompts (or ground truths), they must agree."""
    out = []
    for col, what in (("prompt", "prompt"), ("ground_truth", "ground truth")):
        if col not in ta.columns or col not in tb.columns:
            continue
        fa = ta.dropna(subset=[col]).groupby("problem_id", sort=False)[col].first().astype(str).str.strip()
        fb = tb.dropna(subset=[col]).groupby("problem_id", sort=False)[col].first().astype(str).str.strip()
        common = fa.index.intersection(fb.index)
        if not len(common):
            continue
        differ = common[(fa.loc[common] != fb.loc[common]).to_numpy()]
        if len(differ):
            out.append(f"same problem ids, different problems: {len(differ)} of the {len(common)} shared ids have a "
                       f"different {what} in {names[0]} and {names[1]} (e.g. {', '.join(map(str, differ[:3]))})")
    return out


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
    allow_mismatch: bool = False,
) -> Comparison:
    """Compare model B against model A; paired when both have per-problem results on the same problems.

    The two must be evaluations of the same problems: different datasets or problem sets are refused (unless
    ``allow_mismatch=True``, which compares anyway and says so in ``notes``). Different sampling settings
    (temperature, top_p, top_k, max_new_tokens, samples per prompt) are allowed but put a ``MISMATCH`` note in
    ``notes`` and raise a ``UserWarning``: the difference then mixes the models with the settings.

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
        allow_mismatch: compare evaluations of different datasets or problem sets anyway (noted loudly).

    Returns:
        Comparison with .test, .p_value, .delta, .ci_low, .ci_high, .paired, .verdict, .to_dict().

    Raises:
        ConfigError: alpha outside (0, 1), impossible totals, or mismatched problems without ``allow_mismatch``.

    Example:
        >>> compare(base_greedy, tuned_greedy).p_value < 0.01
        True
        >>> compare((201, 500), (232, 500)).test
        'two-proportion z-test (unpaired)'
    """
    if isinstance(alpha, bool) or not isinstance(alpha, (int, float)) or not 0 < alpha < 1:
        raise ConfigError(f"alpha={alpha!r} is not a significance level; allowed: a number strictly between 0 and 1",
                          fix=Fix("e.g. alpha=0.05", cli="e.g. --alpha 0.05"))
    ra, rb = as_result(a), as_result(b)
    if not (ra.num_problems and rb.num_problems):
        raise ConfigError(f"both evaluations need at least one problem; got {ra.num_problems} and {rb.num_problems}; "
                          "fix: pass evaluations that ran on at least one problem")
    notes: list[str] = []
    _check_match(ra, rb, names, allow_mismatch, notes)
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
