"""Issue 45, "no wrong answer": every command that takes a path is fed every kind of path a user has at hand — the
experiment file, the run dir, its logs dir, one exp_NNN dir, the checkpoint dir, one step, a job's log, nothing —
and either reads the right thing (following a run dir or an experiment file to what it holds, with a note) or
refuses with exit 1, what it was given and the fix. Before: ``health <run dir>`` checked the scalars only,
``metrics experiments/local.yaml`` printed an empty table, ``diagnose --log <a successful job's log>`` said
"unknown / job status FAILED" — each answering, two of them with exit 0.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from nbtools.cli import main

ROOT = Path(__file__).resolve().parents[2]
KINDS = ["experiment", "run", "logs", "exp", "checkpoints", "step", "log", "missing"]

# (command, kind) -> exit status and a text stderr/stdout must hold; kinds not listed must be refused with exit 1
# and name what they got ("found a(n) <kind>") or that nothing is there
READS = {
    ("health", "experiment"): (None, "answer-format"), ("health", "run"): (None, "answer-format"),
    ("health", "logs"): (None, "answer-format"), ("health", "exp"): (None, "answer-format"),
    ("metrics", "experiment"): (0, "train/reward"), ("metrics", "run"): (0, "train/reward"),
    ("metrics", "logs"): (0, "train/reward"), ("metrics", "exp"): (0, "train/reward"),
    ("trajectories", "experiment"): (0, "2 steps"), ("trajectories", "run"): (0, "2 steps"),
    ("trajectories", "logs"): (0, "2 steps"), ("trajectories", "exp"): (0, "2 steps"),
    ("checkpoints", "experiment"): (0, "step_2"), ("checkpoints", "run"): (0, "step_2"),
    ("checkpoints", "checkpoints"): (0, "step_2"),
    **{("explore", k): (0, "step 2 · page 1/") for k in ("experiment", "run", "logs", "exp")},
    **{("rescore", k): (0, "0 rewards changed") for k in ("experiment", "run", "logs", "exp")},
}
FIXES = {  # a refusal that can name the right path names it
    ("merge", "checkpoints"): "the newest: {run}/checkpoints/step_2",
    ("checkpoints", "step"): "its parent {run}/checkpoints",
    ("diagnose", "log"): "--status SUCCEEDED",
}


@pytest.fixture(scope="module")
def paths(rehearsal_run, tmp_path_factory):
    """Every kind of path, on a private copy of the session's rehearsal (the readers index beside the logs)."""
    base = tmp_path_factory.mktemp("kinds")
    run = rehearsal_run.copy(base / "runs")
    experiment = base / "experiment.yaml"
    shutil.copy(ROOT / "experiments" / "local.yaml", experiment)
    log = base / "job.log"
    log.write_text(rehearsal_run.output)  # a successful job's whole output
    return {"experiment": experiment, "run": run, "logs": run / "logs", "exp": run / "logs" / "exp_001",
            "checkpoints": run / "checkpoints", "step": run / "checkpoints" / "step_2", "log": log,
            "missing": base / "nothing-here"}


def _argv(command: str, path: Path, tmp: Path, experiment: Path) -> list[str]:
    if command == "rescore":  # the run's own mix: the re-scoring reproduces every stored reward
        return ["rescore", str(path), "--experiment", str(experiment)]
    if command == "merge":
        return ["merge", str(path), str(tmp / "merged")]
    if command == "diagnose":
        return ["diagnose", "--log", str(path)]
    return [command, str(path)]


# merge on a step dir, its one right kind, is a real merge: tests/checkpoints and tests/integration/test_cli.py run it
CASES = [(c, k) for c in ("health", "metrics", "trajectories", "checkpoints", "merge", "diagnose", "explore", "rescore")
         for k in KINDS
         if (c, k) != ("merge", "step")]


@pytest.mark.parametrize(("command", "kind"), CASES, ids=[f"{c}-{k}" for c, k in CASES])
def test_every_command_reads_the_right_thing_or_refuses_with_the_fix(command, kind, paths, tmp_path, capfd,
                                                                     monkeypatch):
    monkeypatch.setenv("NBTOOLS_RUNS_DIR", str(paths["run"].parent))  # the experiment file's runs are the copy's
    code = main(_argv(command, paths[kind], tmp_path, paths["experiment"]))
    out, err = capfd.readouterr()
    if (command, kind) in READS:
        want_code, text = READS[command, kind]
        assert code == (want_code if want_code is not None else code) and code in (0, 1), err
        assert text in out, (out[-2000:], err[-2000:])
        if kind in ("experiment", "run"):
            assert "note:" in err, err  # what it read instead, said once on stderr
        return
    assert code == 1, f"nbtools {command} on a {kind} answered with exit {code}:\n{out[-1500:]}"
    assert "fix:" in err and err.count("fix:") == 1, err
    said = ("found a", "no such file", "found nothing", "does not exist", "nothing there", "shows no failure",
            "no verl metric line")  # what it was given, in the error
    assert any(s in err for s in said), err
    if (command, kind) in FIXES:
        assert FIXES[command, kind].format(run=paths["run"]) in err, err


def test_health_of_the_run_dir_checks_the_trajectories_too(paths, capfd, monkeypatch):
    """The issue's case: given the run dir, health read only the scalars (answer-format "ok" with value None)."""
    assert main(["health", str(paths["run"]), "--json"]) in (0, 1)
    checks = {c["check"]: c for c in json.loads(capfd.readouterr().out)["checks"]}
    assert checks["answer-format"]["value"] is not None, checks["answer-format"]


def test_health_config_is_a_deprecated_alias_of_experiment(paths, capfd, monkeypatch):
    monkeypatch.setenv("NBTOOLS_RUNS_DIR", str(paths["run"].parent))
    main(["health", str(paths["logs"]), "--config", str(paths["experiment"])])
    assert "--config is deprecated; use --experiment" in capfd.readouterr().err


def test_diagnose_a_successful_log_with_its_status(paths, capfd):
    assert main(["diagnose", "--log", str(paths["log"]), "--status", "succeeded"]) == 0
    assert "succeeded" in capfd.readouterr().out


def test_version(capfd):
    from nbtools import __version__

    assert main(["--version"]) == 0 and capfd.readouterr().out == f"nbtools {__version__} (distribution nbtools-grpo)\n"


def test_a_step_that_does_not_exist_names_the_steps_that_do(paths, capfd):
    """Before: `trajectories --step 9999` listed only the five steps nearest to it."""
    assert main(["trajectories", str(paths["logs"]), "--step", "9999"]) == 1
    err = capfd.readouterr().err
    assert "the run has steps 1..2" in err and "fix: pass --step with one of those steps" in err, err


@pytest.mark.parametrize(("command", "kind"), [("plan", "run"), ("up", "log"), ("fit", "logs"), ("launch", "step")])
def test_an_experiment_argument_that_is_no_experiment_says_what_it_is(command, kind, paths, capfd):
    assert main([command, str(paths[kind])]) == 1
    err = capfd.readouterr().err
    assert "expected an experiment file, found a" in err and err.count("fix:") == 1, err
