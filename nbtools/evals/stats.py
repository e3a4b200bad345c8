"""Statistics for comparing two models' accuracy: intervals, paired and unpaired tests, pass@k.

Why: "0.402 → 0.464" says nothing on its own; these functions say how sure we are, using scipy.stats where it
has the test and short closed forms (checked against scipy in the tests) where it does not.

Example:
    >>> from nbtools.evals import stats
    >>> stats.wilson_ci(201, 500)
    (0.359..., 0.446...)
    >>> stats.mcnemar_exact(fixed=40, broken=9).p_value
    1.1...e-05
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

__all__ = [
    "TestResult",
    "wilson_ci",
    "mcnemar_exact",
    "paired_bootstrap",
    "wilcoxon_paired",
    "two_proportion_ztest",
    "fisher_exact",
    "pass_at_k",
    "verdict",
]


@dataclass(frozen=True)
class TestResult:
    """One test's outcome: its name, the statistic (if any) and the two-sided p-value."""

    test: str
    p_value: float
    statistic: float | None = None


def _scipy_stats():
    """scipy.stats, imported on first use: it costs ~1.3 s of CPU, which every process that imports nbtools.evals
    (an evaluation job, ``nbtools eval-parse``) would pay without computing a test."""
    from scipy import stats

    return stats


def _z(confidence: float) -> float:
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be in (0, 1), got {confidence!r}")
    return float(_scipy_stats().norm.ppf(0.5 + confidence / 2.0))


def wilson_ci(successes: float, n: float, confidence: float = 0.95) -> tuple[float, float]:
    """Wilson score interval for a proportion (fractional successes allowed, e.g. NeMo-RL's pass@k sums).

    Args:
        successes: number of successes (may be fractional).
        n: number of trials (> 0).
        confidence: two-sided coverage.

    Returns:
        (low, high), clipped to [0, 1].

    Example:
        >>> wilson_ci(8, 10)
        (0.490..., 0.943...)
    """
    if n <= 0:
        raise ValueError(f"wilson_ci needs n > 0 trials, got n={n!r}")
    if not 0 <= successes <= n:
        raise ValueError(f"wilson_ci needs 0 <= successes <= n, got successes={successes!r}, n={n!r}")
    z = _z(confidence)
    p = successes / n
    denom = 1.0 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    low = 0.0 if successes == 0 else max(0.0, centre - half)
    high = 1.0 if successes == n else min(1.0, centre + half)
    return low, min(max(low, high), 1.0)


def mcnemar_exact(*, fixed: int, broken: int) -> TestResult:
    """McNemar's exact test on the discordant pairs (binomial test of fixed vs broken at p = 1/2).

    Args:
        fixed: problems the baseline got wrong and the new model got right.
        broken: problems the baseline got right and the new model got wrong.

    Example:
        >>> mcnemar_exact(fixed=10, broken=2).p_value
        0.0385...
    """
    fixed, broken = int(fixed), int(broken)
    if fixed < 0 or broken < 0:
        raise ValueError(f"counts must be >= 0, got fixed={fixed}, broken={broken}")
    m = fixed + broken
    if m == 0:
        return TestResult("McNemar exact", 1.0, 0.0)
    p = _scipy_stats().binomtest(fixed, m, 0.5, alternative="two-sided").pvalue
    return TestResult("McNemar exact", float(min(1.0, p)), float(min(fixed, broken)))


def paired_bootstrap(
    a: np.ndarray, b: np.ndarray, *, n_boot: int = 10_000, seed: int = 0, confidence: float = 0.95
) -> tuple[float, float, float]:
    """Percentile bootstrap CI of mean(b) - mean(a), resampling problems (the pairs) together.

    Args:
        a: per-problem scores of model A (0/1, or mean accuracy over samples).
        b: per-problem scores of model B, same problems in the same order.
        n_boot: bootstrap replicates.
        seed: fixed seed, so the interval is reproducible.
        confidence: two-sided coverage.

    Returns:
        (delta, low, high).

    Example:
        >>> paired_bootstrap([0, 0, 1, 1], [1, 1, 1, 1])
        (0.5, 0.0, 1.0)
    """
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if a.shape != b.shape or a.ndim != 1 or a.size == 0:
        raise ValueError(f"paired_bootstrap needs two 1-D arrays of the same non-zero length, got {a.shape} and {b.shape}")
    _z(confidence)
    d = b - a
    rng = np.random.default_rng(seed)
    means = np.empty(n_boot)
    chunk = max(1, 2_000_000 // d.size)
    for start in range(0, n_boot, chunk):  # bounded memory for big eval sets
        stop = min(n_boot, start + chunk)
        idx = rng.integers(0, d.size, size=(stop - start, d.size))
        means[start:stop] = d[idx].mean(axis=1)
    tail = (1.0 - confidence) / 2.0
    low, high = np.quantile(means, [tail, 1.0 - tail])
    return float(d.mean()), float(low), float(high)


def wilcoxon_paired(a: np.ndarray, b: np.ndarray) -> TestResult:
    """Wilcoxon signed-rank test on per-problem accuracies (for n > 1 samples per problem; zeros dropped).

    Example:
        >>> wilcoxon_paired([0.0, 0.25, 0.5], [0.0, 0.25, 0.5]).p_value
        1.0
    """
    d = np.asarray(b, dtype=float) - np.asarray(a, dtype=float)
    if not np.any(d != 0):
        return TestResult("Wilcoxon signed-rank (per-problem accuracy)", 1.0, 0.0)
    res = _scipy_stats().wilcoxon(d, zero_method="wilcox", alternative="two-sided")
    return TestResult("Wilcoxon signed-rank (per-problem accuracy)", float(res.pvalue), float(res.statistic))


def two_proportion_ztest(x1: float, n1: float, x2: float, n2: float) -> TestResult:
    """Unpaired pooled two-proportion z-test. Weaker than a paired test: use it only when totals are all you have.

    Example:
        >>> round(two_proportion_ztest(201, 500, 232, 500).p_value, 4)
        0.0479
    """
    if not (n1 > 0 and n2 > 0):
        raise ValueError(f"two_proportion_ztest needs n1, n2 > 0, got {n1!r}, {n2!r}")
    if not (0 <= x1 <= n1 and 0 <= x2 <= n2):
        raise ValueError(f"two_proportion_ztest needs 0 <= x <= n, got {x1!r}/{n1!r} and {x2!r}/{n2!r}")
    p1, p2 = x1 / n1, x2 / n2
    pooled = (x1 + x2) / (n1 + n2)
    se = math.sqrt(pooled * (1 - pooled) * (1 / n1 + 1 / n2))
    if se == 0:
        return TestResult("two-proportion z-test (unpaired)", 1.0, 0.0)
    z = (p2 - p1) / se
    return TestResult("two-proportion z-test (unpaired)", float(2 * _scipy_stats().norm.sf(abs(z))), float(z))


def fisher_exact(x1: int, n1: int, x2: int, n2: int) -> TestResult:
    """Fisher's exact test on the 2×2 table of totals (unpaired; integer counts only).

    Example:
        >>> fisher_exact(1, 10, 9, 10).p_value < 0.01
        True
    """
    if not (0 <= x1 <= n1 and 0 <= x2 <= n2):
        raise ValueError(f"fisher_exact needs 0 <= x <= n, got {x1!r}/{n1!r} and {x2!r}/{n2!r}")
    table = [[int(x1), int(n1 - x1)], [int(x2), int(n2 - x2)]]
    res = _scipy_stats().fisher_exact(table, alternative="two-sided")
    return TestResult("Fisher exact (unpaired)", float(res.pvalue), float(res.statistic))


def pass_at_k(n: np.ndarray | int, c: np.ndarray | int, k: int) -> np.ndarray | float:
    """Unbiased pass@k per problem: 1 - C(n-c, k) / C(n, k) (Chen et al., 2021), computed stably.

    Args:
        n: samples per problem.
        c: correct samples per problem.
        k: k <= n.

    Example:
        >>> pass_at_k(4, 1, 2)
        0.5
    """
    scalar = np.ndim(n) == 0 and np.ndim(c) == 0
    n_arr = np.atleast_1d(np.asarray(n, dtype=int))
    c_arr = np.atleast_1d(np.asarray(c, dtype=int))
    n_arr, c_arr = np.broadcast_arrays(n_arr, c_arr)
    if k < 1 or np.any(n_arr < k):
        raise ValueError(f"pass@{k} needs k >= 1 and at least k samples per problem, got min n={int(n_arr.min())}")
    if np.any(c_arr < 0) or np.any(c_arr > n_arr):
        raise ValueError("pass_at_k needs 0 <= c <= n")
    out = np.empty(n_arr.shape, dtype=float)
    for i, (ni, ci) in enumerate(zip(n_arr.ravel(), c_arr.ravel(), strict=True)):
        if ni - ci < k:
            out.flat[i] = 1.0
        else:  # prod_{j=n-c+1}^{n} (1 - k/j) == C(n-c, k) / C(n, k)
            out.flat[i] = 1.0 - float(np.prod(1.0 - k / np.arange(ni - ci + 1, ni + 1)))
    return float(out[0]) if scalar else out


def _fmt_p(p: float) -> str:
    return f"{p:.2g}" if p < 0.001 else f"{p:.3f}"


def verdict(
    *,
    name_a: str,
    name_b: str,
    acc_a: float,
    acc_b: float,
    delta: float,
    ci_low: float | None,
    ci_high: float | None,
    test: str,
    p_value: float,
    n: int,
    paired: bool,
    alpha: float = 0.05,
) -> str:
    """One plain-language sentence a reviewer can read: direction, size, interval, test, p, significance.

    Example:
        >>> verdict(name_a="base", name_b="tuned", acc_a=0.4, acc_b=0.5, delta=0.1, ci_low=0.05, ci_high=0.15,
        ...         test="McNemar exact", p_value=0.001, n=500, paired=True)[:45]
        'tuned is better than base: 0.500 vs 0.400 (+'
    """
    if not 0 < alpha < 1:
        raise ValueError(f"alpha must be in (0, 1), got {alpha!r}")
    ci = f", 95% CI {ci_low:+.3f} to {ci_high:+.3f}" if ci_low is not None and ci_high is not None else ""
    basis = f"{n} paired problems" if paired else f"totals of {n} problems each (unpaired, weaker than a paired test)"
    stats_txt = f"{acc_b:.3f} vs {acc_a:.3f} ({delta:+.3f}{ci}); {test} p = {_fmt_p(p_value)} on {basis}"
    if p_value < alpha:
        direction = "better" if delta > 0 else "worse"
        return f"{name_b} is {direction} than {name_a}: {stats_txt}. The difference is statistically significant at α = {alpha:g}."
    return (
        f"No significant difference between {name_b} and {name_a}: {stats_txt}. "
        f"At α = {alpha:g} these results cannot tell the two models apart; evaluate more problems or samples "
        f"before claiming a gain."
    )
