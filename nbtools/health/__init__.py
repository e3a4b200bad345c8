"""Is the run learning? Checks over a run's trajectories and metrics, before and while it trains.

Why: the most expensive GRPO failure is silent — the job runs, the GPUs bill, nothing learns: rewards that are 0 on
every sample, groups whose samples all got the same reward, answers cut at the generation limit, a train/inference
log-probability mismatch, lengths collapsing or running away, KL running away, reward stalled, validation falling
while training reward rises. Every record and every TensorBoard scalar is already read by ``nbtools.trajectories``
and ``nbtools.metrics``; here each failure is a check with a stable name (``CHECKS``), thresholds a user can change,
the first step it held, its value, a few example records (step, idx) and the fix in words and config keys.

Before the launch, :func:`reward_contract` (the ``reward-contract`` lint rule of ``nbtools.launch.lint``) checks
that the reward functions parse what the prompt asks for. The panel for notebook 04 lives in the display module
``nbtools.health.display`` (loaded on first use).

Example:
    >>> report = nbtools.health.check(cfg.logs_url, config=cfg)
    >>> report.status, report.to_dict()["checks"][0]["check"]
    ('healthy', 'zero-reward')
"""

from __future__ import annotations

import importlib

from nbtools.health._checks import run_checks
from nbtools.health._contract import (
    SAMPLE_PROBLEMS,
    ContractResult,
    ResponseFormat,
    format_asked_by,
    nemo_rl_prompt,
    parse_targets,
    reward_contract,
)
from nbtools.health._data import RunData, generation_limit, load
from nbtools.health._evidence import WARMUP_STEPS
from nbtools.health._report import CheckResult, Example, HealthReport, worst
from nbtools.health._specs import CHECKS, CheckSpec

__all__ = ["check", "CHECKS", "CheckSpec", "CheckResult", "Example", "HealthReport", "RunData", "load",
           "generation_limit", "reward_contract", "ContractResult", "ResponseFormat", "format_asked_by",
           "nemo_rl_prompt", "parse_targets", "SAMPLE_PROBLEMS", "overall", "WARMUP_STEPS"]


def overall(statuses) -> str:
    """The run's status from its checks' statuses: "healthy", "solved" (healthy, and a check found the task solved),
    "warning", "unhealthy", or "unknown" when no check could judge (no evidence is not health:
    ``nbtools.health._evidence``)."""
    statuses = list(statuses)
    w = worst(statuses)
    if w == "ok":
        return "solved" if "solved" in statuses else "healthy"
    return w


def check(run, *, config=None, thresholds: dict | None = None, checks=None, window: int = 5, examples: int = 5,
          warmup: int = 0, cache: bool = True) -> HealthReport:
    """Run every health check (or ``checks``) on a run and return the report.

    Args:
        run: an ``exp_NNN`` dir or a log_dir (its latest ``exp_NNN`` with the attempts it resumed), a local path or a
            ``gs://`` URL; an ``Experiment`` (its ``logs_url``); or an open ``nbtools.trajectories.Run``.
        config: the experiment (``nbtools.config.load``): adds the reward functions (what they parse), the
            generation limit and the answer tags. Without it the checks use what the run itself says.
        thresholds: ``{check: unhealthy level}``, ``{check: (warning, unhealthy)}`` or ``{check: {"warning": x}}``
            replacing ``CHECKS``' defaults (None for a level that should never be reached).
        checks: names of the checks to run (default: all of ``CHECKS``).
        window: the recent steps each check decides on.
        examples: example records (step, idx) per finding.
        warmup: training steps before a threshold finding is "unhealthy" (a warning until then); non-finite values
            are unhealthy at once. ``nbtools.launch.supervise`` passes ``WARMUP_STEPS`` (a stop condition).

    Raises:
        NotFoundError: no trajectory dumps and no TensorBoard scalars at ``run``.
        ConfigError: an unknown check name or a malformed threshold.

    Example:
        >>> report = nbtools.health.check(cfg.logs_url, config=cfg, thresholds={"truncation": 0.3})
        >>> report["truncation"].status
        'ok'
    """
    data = load(run, config=config, cache=cache)
    results = run_checks(data, thresholds=thresholds, checks=checks, window=window, examples=examples, warmup=warmup)
    steps = data.steps
    span = (steps[0], steps[-1]) if steps else (None, None)
    return HealthReport(data.label, overall(r.status for r in results), span, tuple(results))


def __getattr__(name: str):
    if name == "display":  # display layer: imported on demand, never by the data code above
        return importlib.import_module("nbtools.health.display")
    raise AttributeError(f"module 'nbtools.health' has no attribute {name!r}")
