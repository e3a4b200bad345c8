"""What a health check returns: one result per check, and the report that collects them (the CLI's JSON shape)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Literal

import pandas as pd

from nbtools import _paths
from nbtools._escape import html as _h

__all__ = ["Status", "Example", "CheckResult", "HealthReport", "worst"]

# unknown: the check had nothing to decide on; solved: the run learned what its prompts teach (nothing is broken:
# move on, or make the task harder), ranked with ok so it is never a warning
Status = Literal["ok", "solved", "warning", "unhealthy", "unknown"]
_RANK = {"unknown": -1, "ok": 0, "solved": 0, "warning": 1, "unhealthy": 2}


def worst(statuses) -> Status:
    """The most severe of ``statuses``; "unknown" when none was judged (no evidence is not health)."""
    return max(statuses, key=_RANK.__getitem__, default="unknown")


@dataclass(frozen=True)
class Example:
    """One record that shows a finding: ``run.record(step, idx)`` opens it (notebook 05's explorer jumps to it)."""

    step: int
    idx: int


@dataclass(frozen=True)
class CheckResult:
    """One check on one run: its status, the first step it held, the value against its threshold, and the fix.

    ``keys`` are the config keys the fix changes (they are also named in ``fix``); ``series`` is the per-step value
    the decision was made from (empty where the check did not run), for a panel to draw.
    """

    check: str
    status: Status
    first_step: int | None
    value: float | None
    threshold: float | None
    message: str
    fix: str
    keys: tuple[str, ...] = ()
    examples: tuple[Example, ...] = ()
    series: pd.Series | None = field(default=None, repr=False, compare=False)

    def to_dict(self) -> dict[str, Any]:
        """The CLI's entry: check, status, first_step, value, threshold, message, fix, examples."""
        return {"check": self.check, "status": self.status, "first_step": self.first_step,
                "value": _num(self.value), "threshold": _num(self.threshold), "message": self.message,
                "fix": self.fix, "examples": [{"step": e.step, "idx": e.idx} for e in self.examples]}


def _num(x: float | None) -> float | None:
    if x is None:
        return None
    x = float(x)
    return None if math.isnan(x) or math.isinf(x) else round(x, 6)


@dataclass(frozen=True)
class HealthReport:
    """Every check on one run: ``status`` is the worst of them; ``steps`` the first and last training step read.

    Example:
        >>> report = nbtools.health.check(cfg.logs_url, config=cfg)
        >>> report.status, [c.check for c in report.unhealthy]
    """

    run: str
    status: Literal["healthy", "solved", "warning", "unhealthy", "unknown"]  # unknown: no check could judge the run
    steps: tuple[int | None, int | None]
    checks: tuple[CheckResult, ...]

    @property
    def unhealthy(self) -> list[CheckResult]:
        return [c for c in self.checks if c.status == "unhealthy"]

    @property
    def solved(self) -> list[CheckResult]:
        """Checks that found the task solved (a result, not a problem)."""
        return [c for c in self.checks if c.status == "solved"]

    @property
    def warnings(self) -> list[CheckResult]:
        return [c for c in self.checks if c.status == "warning"]

    @property
    def findings(self) -> list[CheckResult]:
        """Checks that did not pass, worst first (checks that could not judge are not findings)."""
        return sorted((c for c in self.checks if _RANK[c.status] > 0), key=lambda c: -_RANK[c.status])

    @property
    def judged(self) -> list[CheckResult]:
        """Checks that had data to decide on (the others are "unknown")."""
        return [c for c in self.checks if c.status != "unknown"]

    def __getitem__(self, name: str) -> CheckResult:
        for c in self.checks:
            if c.check == name:
                return c
        raise KeyError(f"no check named {name!r}; the checks are {[c.check for c in self.checks]}")

    def to_dict(self) -> dict[str, Any]:
        """``{"status", "steps": [first, last], "checks": [...]}`` — the shape ``nbtools health --json`` prints."""
        return {"status": self.status, "steps": list(self.steps), "checks": [c.to_dict() for c in self.checks]}

    def to_frame(self) -> pd.DataFrame:
        """One row per check (check, status, first_step, value, threshold, message, fix, examples)."""
        rows = [{**c.to_dict(), "examples": [(e.step, e.idx) for e in c.examples]} for c in self.checks]
        return pd.DataFrame(rows, columns=["check", "status", "first_step", "value", "threshold", "message", "fix",
                                           "examples"])

    def summary(self) -> str:
        """One line: the status and the checks that did not pass."""
        bad = ", ".join(f"{c.check} ({c.status}, from step {c.first_step})" for c in self.findings)
        span = f"steps {self.steps[0]}..{self.steps[1]}" if self.steps[0] is not None else "no steps yet"
        span += f", {len(self.judged)} of {len(self.checks)} checks judged"
        done = "; solved: " + ", ".join(f"{c.check} ({c.message})" for c in self.solved) if self.solved else ""
        return f"{self.status} ({span})" + (f": {bad}" if bad else "") + done

    def __str__(self) -> str:
        lines = [f"{_paths.shown(str(self.run))}: {self.summary()}"]
        for c in self.findings:
            ex = ", ".join(f"({e.step}, {e.idx})" for e in c.examples[:3])
            lines.append(f"  [{c.status}] {c.check}: {c.message}" + (f" e.g. records {ex}" if ex else ""))
            lines.append(f"      fix: {c.fix}")
        return "\n".join(lines)

    __repr__ = __str__

    def _repr_html_(self) -> str:
        color = {"ok": "#2e7d32", "healthy": "#2e7d32", "solved": "#1565c0", "warning": "#ef6c00", "unhealthy": "#c62828",
                 "unknown": "#757575"}
        rows = "".join(
            f"<tr><td style='color:{color[c.status]}'><b>{c.status}</b></td><td><code>{_h(c.check)}</code></td>"
            f"<td>{'' if c.first_step is None else c.first_step}</td>"
            f"<td>{'' if c.value is None else f'{c.value:.3g}'}</td>"
            f"<td>{'' if c.threshold is None else f'{c.threshold:.3g}'}</td>"
            f"<td style='text-align:left'>{_h(c.message)}</td>"
            f"<td style='text-align:left'>{_h(c.fix) if c.status != 'ok' else ''}</td>"
            f"<td>{', '.join(f'({e.step}, {e.idx})' for e in c.examples[:3])}</td></tr>"
            for c in sorted(self.checks, key=lambda c: -_RANK[c.status]))
        head = (f"<b>run health: <span style='color:{color[self.status]}'>{self.status}</span></b> "
                f"<small>({_h(_paths.shown(str(self.run)))}, steps {self.steps[0]}..{self.steps[1]})</small>")
        return (f"{head}<table><tr><th>status</th><th>check</th><th>first step</th><th>value</th><th>threshold</th>"
                f"<th>what</th><th>fix</th><th>examples (step, idx)</th></tr>{rows}</table>")
