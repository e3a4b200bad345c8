"""What counts as evidence: the three rules every health check obeys, applied in one place (:func:`judge`).

Why: a gate that CI or the supervisor trusts must never call a run healthy for want of data (issue #41).

1. **Non-finite is evidence, never health.** A NaN or ±inf value in anything a check reads (a scalar it decides on,
   a record's reward) inside its recent window makes the check "unhealthy" — the run diverged or its reward is
   broken — whatever the threshold and before any warm-up. Non-finite values only before finite ones make it at
   least a "warning". The readers keep such values (a NaN reward is a value, not a missing line).
2. **No data is not health.** A check with nothing to decide on is "unknown" (cannot judge), not "ok"; a report
   whose checks are all unknown is "unknown" overall (``nbtools health`` exits 3, the supervisor keeps waiting).
3. **Warm-up for stop conditions.** A threshold finding on fewer than ``warmup`` training steps is a "warning",
   not "unhealthy": a base model learns the answer format in ~10 steps, so deciding on step 1 stops good runs.
   ``nbtools.launch.supervise`` passes ``warmup=WARMUP_STEPS``; a one-off ``check()`` shows what it sees (0).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
import pandas as pd

from nbtools.health._report import CheckResult

__all__ = ["WARMUP_STEPS", "NonFinite", "nonfinite", "judge", "unknown"]

WARMUP_STEPS = 10  # steps a run gets before a threshold finding may stop it (supervise's default)

_FIX = ("find the first non-finite step (`nbtools metrics RUN`, the explorer), then lower the learning rate, or fix "
        "the reward function that returns NaN or a non-number; resume from the last checkpoint before it")
_KEYS = ("grpo.learning_rate", "trainer.reward_functions", "rehearsal.reward_functions")


@dataclass(frozen=True)
class NonFinite:
    """Non-finite values of one source: how many of its recent steps, the first of them, and whether it persists."""

    source: str
    first_step: int
    bad_steps: int
    recent_steps: int
    in_window: bool

    def message(self) -> str:
        where = f"at {self.bad_steps} of its last {self.recent_steps} step(s)" if self.in_window else \
            f"at {self.bad_steps} earlier step(s), finite since"
        return f"{self.source} is NaN/inf {where} (first at step {self.first_step}): the run diverged or its " \
               "reward is broken; a non-finite value is never healthy"


def _scan(source: str, steps, values, window: int) -> NonFinite | None:
    """``steps``/``values`` aligned: each logged value and its step."""
    bad = ~np.isfinite(np.asarray(values, dtype="float64"))
    if not bad.any():
        return None
    per = pd.Series(bad).groupby(np.asarray(steps)).any().sort_index()
    recent = per.iloc[-window:]
    in_window = bool(recent.any())
    vals = per.to_numpy()
    k = len(vals) - 1
    if vals[-1]:  # the run of non-finite steps that reaches the end: from where it started
        while k > 0 and vals[k - 1]:
            k -= 1
    else:
        shown = recent if in_window else per
        k = len(vals) - len(shown) + int(np.argmax(shown.to_numpy()))
    return NonFinite(source, int(per.index[k]), int((recent if in_window else per).sum()), len(recent), in_window)


def nonfinite(data, sources: set[str], window: int) -> NonFinite | None:
    """The worst non-finite finding among ``sources`` (scalar tags, or ``"reward"`` for the records' rewards)."""
    found = []
    if "reward" in sources and len(data.records):
        r = pd.to_numeric(data.records["reward"], errors="coerce")
        found.append(_scan("the records' reward", data.records["step"], r, window))
    for tag in sorted(sources - {"reward"}):
        rows = data.logged(tag)
        if len(rows):
            found.append(_scan(tag, rows["step"], rows["value"], window))
    found = [f for f in found if f is not None]
    return max(found, key=lambda f: (f.in_window, f.bad_steps), default=None)


def unknown(result: CheckResult) -> bool:
    return result.status == "unknown"


def judge(result: CheckResult, bad: NonFinite | None, steps: int, warmup: int) -> CheckResult:
    """Apply the rules to one check's own result: non-finite first, then warm-up (``steps``: training steps read)."""
    if bad is not None and bad.in_window:
        return replace(result, status="unhealthy", first_step=bad.first_step, value=None, message=bad.message(),
                       fix=f"{_FIX} (config: {', '.join(f'`{k}`' for k in _KEYS)})", keys=_KEYS, examples=())
    if bad is not None:  # recovered: judged on the finite values, and never better than a warning
        status = "warning" if result.status in ("ok", "solved", "unknown") else result.status
        first = result.first_step if result.first_step is not None else bad.first_step
        return replace(result, status=status, first_step=first, message=f"{result.message}; {bad.message()}")
    if result.status == "unhealthy" and steps < warmup:
        return replace(result, status="warning",
                       message=f"{result.message} (warm-up: {steps} of {warmup} steps; not yet a reason to stop)")
    return result
