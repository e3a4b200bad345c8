"""`nbtools health RUN [--experiment EXPERIMENT.yaml] [--json]`: is the run learning?

Why: scripts and CI gate on it. With ``--json`` stdout is one document::

    {"status": "healthy" | "solved" | "warning" | "unhealthy" | "unknown", "steps": [first, last],
     "checks": [{"check", "status", "first_step", "value", "threshold", "message", "fix", "examples": [{"step", "idx"}]}]}

Exit 0 when healthy, solved (the task is learned: a result, not a problem) or with warnings only, 1 when a check is unhealthy, 3 when no check could judge the run (no
evidence is not health: a gate must not pass a run that wrote nothing it can read).

Example:
    $ nbtools health runs/local-rehearsal/logs --json
    $ nbtools health gs://my-bucket/nemo-rl/gemma3-1b-b200/logs --experiment experiments/gke-b200-gemma3-1b.yaml
    $ nbtools health experiments/local.yaml          # the experiment's own logs dir
"""

from __future__ import annotations

import sys

from nbtools.cli._out import Out

__all__ = ["register_health", "cmd_health"]


def register_health(sub) -> None:
    """Add the ``health`` subcommand to the ``nbtools`` parser."""
    what = ("is the run learning? zero rewards, groups without signal, unparseable answers, truncation, log-prob "
            "mismatch, length collapse/runaway, KL runaway, stalled reward, validation divergence")
    p = sub.add_parser("health", help=what, description=what + ". Exit 0 healthy, solved or warnings only, 1 unhealthy, 3 cannot judge (no "
                                                          "data any check can read).")
    p.set_defaults(func=cmd_health)
    p.add_argument("--json", action="store_true", help="print one JSON document on stdout and nothing else there")
    p.add_argument("run", metavar="RUN", help="the run's logs dir or an exp_NNN dir, local or gs:// (a run dir or an "
                   "experiment file: their logs dir)")
    p.add_argument("--experiment", metavar="EXPERIMENT.yaml", default=None,
                   help="the experiment: its reward functions, generation limit and answer tags (default: what the "
                        "run itself shows, or RUN itself when RUN is the experiment file)")
    p.add_argument("--config", metavar="EXPERIMENT.yaml", default=None, help="deprecated spelling of --experiment")
    p.add_argument("--threshold", action="append", default=[], metavar="CHECK=LEVEL",
                   help="change a check's unhealthy level, e.g. --threshold truncation=0.3 (repeatable)")
    p.add_argument("--window", type=int, default=5, help="recent steps each check decides on (default 5)")


def _thresholds(items: list[str]) -> dict[str, float]:
    from nbtools.errors import ConfigError

    out, bad = {}, []
    for item in items:
        name, _, value = item.partition("=")
        try:
            out[name.strip()] = float(value)
        except ValueError:
            bad.append(f"--threshold {item!r}: expected CHECK=NUMBER, e.g. truncation=0.3")
    if bad:
        raise ConfigError(bad)
    return out


def cmd_health(a) -> Out:
    from nbtools import config, health
    from nbtools.cli._kinds import resolve

    if a.config:
        print("nbtools health: --config is deprecated; use --experiment (the flag every command takes for the "
              "experiment)", file=sys.stderr)
    found = resolve(a.run, want="logs", flag="RUN", command="health")
    chosen = a.experiment or a.config
    cfg = config.load(chosen) if chosen else found.experiment
    report = health.check(found.path, config=cfg, thresholds=_thresholds(a.threshold) or None, window=a.window)
    bad = report.unhealthy
    code = 1 if bad else (3 if report.status == "unknown" else 0)
    error = fix = None
    if bad:
        error = f"unhealthy: {', '.join(f'{c.check} from step {c.first_step}' for c in bad)}"
        fix = "; ".join(f"{c.check}: {c.fix}" for c in bad)
    elif code == 3:
        error = f"cannot judge {a.run}: none of the {len(report.checks)} checks found data to decide on"
        fix = ("wait for the run's first steps (trajectory dumps or TensorBoard scalars), or pass the run's log_dir or "
               "one exp_NNN dir that holds them")
    return Out(report.to_dict(), str(report), code=code, error=error, fix=fix, exact=True)
