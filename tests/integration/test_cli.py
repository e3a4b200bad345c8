"""Tests for the `nbtools` console script: every subcommand run as a real subprocess (success, bad usage, failure).

The artifacts are real: the session's shared shrunk local rehearsal (2 GRPO steps on 2 gloo ranks, real DCP
checkpoints, real TensorBoard files, real trajectory dumps; tests/conftest.py), started in the background after
collection and awaited by the tests that read it. up/jobs/launch use the session's real local Ray head
(tests/conftest.py); `demo` runs real papermill on tiny notebooks written here. Nothing here reads files outside the repository.

The GKE side cannot run here: plan/manifests/up/down on gke experiments are exercised in their dry-run form only
(no API server or gcloud project is contacted).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from tests.conftest import REHEARSAL_OVERRIDES

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent / "nbtools"
LOCAL = ROOT / "experiments" / "local.yaml"
GKE = ROOT / "experiments" / "gke-b200-gemma3-1b.yaml"
TINY = list(REHEARSAL_OVERRIDES)  # what the session's shared rehearsal run ran with (tests/conftest.py)
ROW_KEYS = {"step", "idx", "prompt", "response", "reward", "generation_length"}
MERGE_KEYS = {"out", "tensors", "bytes", "seconds", "layout", "verified", "step", "in_cluster"}
BLOCK = """(EvalActor pid=77) ============================================================
(EvalActor pid=77) model_name='{model}' dataset_name='math500'
(EvalActor pid=77) max_new_tokens=2048 temperature=0.0 top_p=1.0 top_k=-1 seed=42
(EvalActor pid=77)
(EvalActor pid=77) metric=pass@1 num_tests_per_prompt=1
(EvalActor pid=77)
(EvalActor pid=77) score={score:.4f} ({num}/500)
(EvalActor pid=77) ============================================================
"""


def nb(*args, env: dict | None = None, code: int = 0, timeout: float = 300) -> subprocess.CompletedProcess:
    """Run the installed console script; assert its exit status (stderr shown on mismatch)."""
    r = subprocess.run([str(BIN), *map(str, args)], capture_output=True, text=True, timeout=timeout, cwd=ROOT,
                       env={**os.environ, **(env or {})})
    assert r.returncode == code, f"exit {r.returncode} != {code}\nstdout:\n{r.stdout[-2000:]}\nstderr:\n{r.stderr[-3000:]}"
    return r


def doc(r: subprocess.CompletedProcess):
    """stdout must be exactly one JSON document."""
    return json.loads(r.stdout)


def failed(r: subprocess.CompletedProcess, *needles: str) -> None:
    """A failure: the error and its fix on stderr; stdout empty, or with --json one document naming both."""
    if "--json" in r.args:
        d = json.loads(r.stdout)
        assert d["error"] and d["fix"] and d["exit"] == r.returncode, d
    else:
        assert r.stdout == "", r.stdout
    assert "fix" in r.stderr, r.stderr
    for n in needles:
        assert n in r.stderr, r.stderr


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """NBTOOLS_RUNS_DIR for every call: nothing is written into the repository."""
    return tmp_path_factory.mktemp("cli-runs")


@pytest.fixture
def run_dir(rehearsal_run, tmp_path) -> Path:
    """<runs>/local-rehearsal: this test's copy of the session's shared rehearsal run (logs/exp_001,
    checkpoints/step_1..2), since the readers write their index beside the logs (``.nbtools/``)."""
    return rehearsal_run.copy(tmp_path / "shared-run")


# -- help and usage ---------------------------------------------------------------------------------------------

COMMANDS = ["plan", "manifests", "up", "down", "launch", "prepare", "jobs", "trajectories", "metrics", "checkpoints", "merge",
            "eval-parse", "compare", "demo"]


def test_console_script_installed_and_every_subcommand_has_help(capsys):
    from nbtools.cli import main

    assert BIN.is_file(), f"{BIN} missing: pip install -e . installs the console script"
    top = nb("--help")
    for c in COMMANDS:  # the console script's own parser, called here: one interpreter, not one per subcommand
        assert c in top.stdout
        with pytest.raises(SystemExit) as exit_:
            main([c, "--help"])
        assert exit_.value.code == 0 and f"usage: nbtools {c}" in capsys.readouterr().out
    r = nb(code=2)
    assert "required" in r.stderr and r.stdout == ""
    assert "invalid choice" in nb("frobnicate", code=2).stderr


# -- plan / manifests (gke experiments, rendered only) -----------------------------------------------------------


def test_plan(runs):
    env = {"NBTOOLS_RUNS_DIR": str(runs)}
    d = doc(nb("plan", GKE, "gcp.project=other-project", "--json", env=env))  # NeMo-RL-style overrides
    assert d["experiment"] == "gemma3-1b-b200" and d["kind"] == "provision" and len(d["steps"]) > 10
    assert all(s["command"] and s["status"] == "pending" for s in d["steps"])
    assert all("--project=my-gcp-project" not in s["command"] for s in d["steps"])
    assert any("--project=other-project" in s["command"] for s in d["steps"])
    script = nb("plan", GKE, "--destroy", "--script", env=env).stdout
    assert script.startswith("#!/usr/bin/env bash") and "destroy plan" in script
    assert "gcloud container clusters delete" in script
    ref = doc(nb("plan", LOCAL, "--json", env=env))  # local: what GKE would need, shown and never applied
    assert ref["applicable"] is False and "nothing to provision" in ref["note"] and len(ref["steps"]) > 10
    assert "KEY=VALUE" in nb("plan", GKE, "not-an-override", code=2).stderr
    nb("plan", code=2)


def test_manifests(runs, tmp_path):
    env = {"NBTOOLS_RUNS_DIR": str(runs)}
    objs = [o for o in yaml.safe_load_all(nb("manifests", GKE, env=env).stdout) if o]
    assert objs[-1]["kind"] == "RayCluster" and objs[-1]["metadata"]["name"] == "nbtools-b200"
    d = doc(nb("manifests", GKE, "--out", tmp_path, "--json", env=env))
    assert Path(d["out"]).read_text().count("kind: RayCluster") == 1 and d["objects"][-1]["kind"] == "RayCluster"
    assert d["objects"] == [{"kind": o["kind"], "name": o["metadata"]["name"]} for o in objs]
    ref = doc(nb("manifests", LOCAL, "--json", env=env))  # a local experiment: the objects it would need on GKE
    assert ref["experiment"] == "local-rehearsal" and ref["objects"][-1]["kind"] == "RayCluster"
    nb("manifests", GKE, "--out", code=2)


# -- eval-parse / compare ----------------------------------------------------------------------------------------


def _noisy_log(path: Path) -> Path:
    noise = "INFO 11-22 vllm engine started\nrandom line with score=3 but no block\n\x1b[32mcolour\x1b[0m\n"
    path.write_text(noise + BLOCK.format(model="Qwen2.5-Math-1.5B-Instruct", score=0.402, num="201.0") + noise
                    + BLOCK.format(model="merged_hf", score=0.464, num="232.0") + "done\n")
    return path


def test_eval_parse(tmp_path):
    log = _noisy_log(tmp_path / "eval.log")
    blocks = doc(nb("eval-parse", log, "--json"))["blocks"]
    assert [b["model_name"] for b in blocks] == ["Qwen2.5-Math-1.5B-Instruct", "merged_hf"]
    for b, (score, correct) in zip(blocks, [(0.402, 201), (0.464, 232)], strict=True):
        assert {"model_name", "dataset_name", "metric", "num_tests_per_prompt", "score", "correct", "total"} <= set(b)
        assert (b["score"], b["correct"], b["total"], b["metric"], b["num_tests_per_prompt"]) == (score, correct, 500, "pass@1", 1)
    (tmp_path / "empty.log").write_text("the job is still loading the model\n")
    failed(nb("eval-parse", tmp_path / "empty.log", "--json", code=1), "score block")
    nb("eval-parse", code=2)


def test_compare(tmp_path):
    import numpy as np
    import pandas as pd

    rng = np.random.default_rng(0)
    ids = [f"p{i}" for i in range(80)]
    a = pd.DataFrame({"problem_id": ids, "sample": 0, "correct": rng.random(80) < 0.25})
    b = pd.DataFrame({"problem_id": ids, "sample": 0, "correct": a["correct"] | (rng.random(80) < 0.6)})
    a.to_csv(tmp_path / "a.csv", index=False)
    b.to_parquet(tmp_path / "b.parquet", index=False)
    d = doc(nb("compare", tmp_path / "a.csv", tmp_path / "b.parquet", "--json"))
    assert {"test", "p_value", "delta", "ci_low", "ci_high", "paired", "acc_a", "acc_b", "ci_a", "ci_b", "verdict"} <= set(d)
    assert d["paired"] is True and d["test"].startswith("McNemar")
    assert d["delta"] == pytest.approx(b["correct"].mean() - a["correct"].mean())
    assert d["ci_low"] < d["delta"] < d["ci_high"] and d["p_value"] < 0.01 and "better" in d["verdict"]
    assert d["flips"]["broken"] == 0 and d["flips"]["fixed"] == int((~a["correct"] & b["correct"]).sum())
    # score blocks from a log: totals only, so the unpaired test, labelled as such
    log = _noisy_log(tmp_path / "eval.log")
    u = doc(nb("compare", f"{log}#1", log, "--json"))  # no #N: the last block
    assert u["paired"] is False and "unpaired" in u["test"] and u["delta"] == pytest.approx(0.062)
    failed(nb("compare", f"{log}#3", log, "--json", code=1), "#1 … #2")
    nb("compare", tmp_path / "a.csv", code=2)


# -- cluster: up / down / jobs / launch on the session's real local Ray head ------------------------------------


def _point(ray_head) -> list[str]:
    return [f"ray.port={ray_head.extra['port']}", f"ray.dashboard_port={ray_head.extra['dashboard_port']}"]


def test_up_reattaches_and_down_is_a_dry_run_by_default(ray_head, ray_head_runs_dir, runs):
    env = {"NBTOOLS_RUNS_DIR": str(ray_head_runs_dir)}
    dry = doc(nb("up", LOCAL, *_point(ray_head), "--json", env=env))
    assert dry["dry_run"] is True and "re-attach" in dry["would"]
    d = doc(nb("up", LOCAL, *_point(ray_head), "--apply", "--json", env=env))
    assert d["dry_run"] is False and d["reattached"] is True and d["dashboard_url"] == ray_head.dashboard_url
    assert d["resources"]["nodes"] == 1 and d["resources"]["cpus"] == 4
    # the head runs on other ports than asked: refused, with the fix
    failed(nb("up", LOCAL, f"ray.port={ray_head.extra['port']}", "ray.dashboard_port=1", "--apply", env=env, code=1),
           "nbtools down EXPERIMENT.yaml --apply")
    # down: dry run names the head it would stop, and leaves it running
    assert str(ray_head_runs_dir) in doc(nb("down", LOCAL, *_point(ray_head), "--json", env=env))["would"]
    import nbtools

    nbtools.jobs.list_jobs(ray_head.dashboard_url)  # still answering: the dry run stopped nothing
    g = doc(nb("down", GKE, "--json", env={"NBTOOLS_RUNS_DIR": str(runs)}))
    assert g["dry_run"] is True and g["objects"][0]["kind"] == "RayCluster"
    # --apply on a runs dir with no head: nothing to stop, and says so
    s = doc(nb("down", LOCAL, "--apply", "--json", env={"NBTOOLS_RUNS_DIR": str(runs)}))
    assert s["stopped"] is False and "nothing to stop" in s["message"]
    failed(nb("down", ROOT / "experiments" / "nope.yaml", code=1), "does not exist")
    nb("down", LOCAL, "--aply", code=2)
    nb("up", code=2)


def test_jobs(ray_head, runs):
    import nbtools

    job = nbtools.jobs.submit(ray_head.dashboard_url, entrypoint="python -c \"print('hello from the cli test')\"",
                              submission_id=f"cli-test-{time.time_ns()}")
    job.wait(timeout=120)
    env = {"NBTOOLS_RUNS_DIR": str(runs)}
    listed = doc(nb("jobs", "list", LOCAL, *_point(ray_head), "--json", env=env))["jobs"]
    row = next(j for j in listed if j["submission_id"] == job.id)
    assert row["status"] == "SUCCEEDED" and set(row) >= {"entrypoint", "start_time", "end_time", "message"}
    st = doc(nb("jobs", "status", LOCAL, *_point(ray_head), "--id", job.id, "--json", env=env))
    assert (st["submission_id"], st["status"]) == (job.id, "SUCCEEDED")
    assert "hello from the cli test" in nb("jobs", "logs", LOCAL, *_point(ray_head), "--id", job.id, env=env).stdout
    failed(nb("jobs", "status", LOCAL, *_point(ray_head), "--id", "no-such-job", env=env, code=1), "known ids")
    failed(nb("jobs", "list", LOCAL, "ray.dashboard_port=9", env=env, code=1), "cluster")
    nb("jobs", "frobnicate", LOCAL, code=2)


def test_launch_lint_only(run_dir, runs):
    fresh = doc(nb("launch", LOCAL, *TINY, "--lint-only", "--json", env={"NBTOOLS_RUNS_DIR": str(runs)}))
    assert fresh["ok"] is True and "-m nbtools.rehearsal" in fresh["entrypoint"]
    assert fresh["submission_id"].startswith("local-rehearsal-") and "grpo.max_num_steps=2" in fresh["entrypoint"]
    # the rehearsal's runs dir already holds step_2: NeMo-RL would silently resume, so lint refuses (exit 1)
    env = {"NBTOOLS_RUNS_DIR": str(run_dir.parent)}
    r = nb("launch", LOCAL, *TINY, "--lint-only", "--json", env=env, code=1)
    d = doc(r)
    assert d["ok"] is False and d["findings"][0]["rule"] == "existing-checkpoints" and "step_2" in d["findings"][0]["message"]
    assert "fix" in r.stderr
    assert doc(nb("launch", LOCAL, *TINY, "--lint-only", "--resume", "--json", env=env))["ok"] is True
    nb("launch", "--follow", code=2)


# -- run artifacts: trajectories / metrics / checkpoints / merge -------------------------------------------------


def test_trajectories(run_dir, tmp_path):
    d = doc(nb("trajectories", run_dir / "logs", "--json"))
    assert d == {"steps": [1, 2], "records": 32, "skipped_lines": 0}
    one = doc(nb("trajectories", run_dir / "logs" / "exp_001", "--step", 2, "--json"))
    assert len(one["rows"]) == 16 and all(set(r) == ROW_KEYS and r["step"] == 2 for r in one["rows"])
    assert [r["idx"] for r in one["rows"]] == list(range(16)) and all(0 <= r["generation_length"] <= 12 for r in one["rows"])
    # a malformed line (a crashed writer) is skipped and counted, not fatal
    exp = tmp_path / "exp_001"
    exp.mkdir()
    for f in (run_dir / "logs" / "exp_001").glob("train_data_step*.jsonl"):
        (exp / f.name).write_bytes(f.read_bytes() + (b"{not json\n" if f.name.endswith("step1.jsonl") else b""))
    assert doc(nb("trajectories", exp, "--json"))["skipped_lines"] == 1
    assert "step 1: 16 records" in nb("trajectories", exp, "--step", 1).stdout
    failed(nb("trajectories", tmp_path / "missing", code=1), "log_dir")
    nb("trajectories", run_dir / "logs", "--step", "two", code=2)


def test_metrics(run_dir, tmp_path):
    csv = nb("metrics", run_dir / "logs", "--csv").stdout
    assert csv.splitlines()[0] == "run,tag,step,value,wall_time"
    d = doc(nb("metrics", run_dir / "logs" / "exp_001", "--json"))
    assert d["source"] == "tensorboard" and set(d["rows"][0]) == {"run", "tag", "step", "value", "wall_time"}
    assert {r["step"] for r in d["rows"] if r["tag"] == "train/reward"} == {1, 2}
    verl = tmp_path / "verl.log"
    verl.write_text("noise\nstep:1 - critic/score/mean:0.25 - response_length/mean:512.5\nstep:2 - critic/score/mean:0.5\n")
    v = doc(nb("metrics", verl, "--json"))
    assert v["source"] == "verl" and [r["value"] for r in v["rows"] if r["tag"] == "critic/score/mean"] == [0.25, 0.5]
    failed(nb("metrics", tmp_path / "missing", code=1), "log_dir")
    nb("metrics", code=2)


def test_checkpoints_and_merge(run_dir, tmp_path):
    ckpts = run_dir / "checkpoints"
    d = doc(nb("checkpoints", ckpts, "--json"))
    rows = d["checkpoints"]
    assert [r["step"] for r in rows] == [1, 2] and {r["layout"] for r in rows} == {"v2_safetensors"}
    assert all("val:accuracy" in r and r["current_step"] == r["step"] for r in rows)
    failed(nb("checkpoints", tmp_path / "none", code=1), "checkpoint_dir")
    nb("checkpoints", code=2)

    out = tmp_path / "merged"
    m = doc(nb("merge", ckpts / "step_2", out, "--json"))
    assert set(m) == MERGE_KEYS and m["verified"] is True and m["layout"] == "v2_safetensors" and m["tensors"] > 0
    from safetensors.torch import load_file

    tensors = {k: v for f in out.glob("*.safetensors") for k, v in load_file(f).items()}
    assert m["out"] == str(out) and m["tensors"] == len(tensors)
    assert m["bytes"] == sum(t.numel() * t.element_size() for t in tensors.values())
    # a different step into the same dir: refused, existing output kept
    failed(nb("merge", ckpts / "step_1", out, "--json", code=1), "overwrite")
    assert (out / "config.json").is_file()
    nb("merge", ckpts / "step_2", code=2)


# -- demo: real papermill on tiny notebooks ----------------------------------------------------------------------


def _notebook(path: Path, source: str) -> None:
    import nbformat

    nb_ = nbformat.v4.new_notebook()
    nb_.cells = [nbformat.v4.new_code_cell(source)]
    nb_.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(nb_, path)


@pytest.mark.slow  # papermill kernels
def test_demo(tmp_path):
    good, bad = tmp_path / "good", tmp_path / "bad"
    good.mkdir()
    bad.mkdir()
    _notebook(good / "01_hello.ipynb", "import os\nassert BACKEND == 'local'\n"
              "open(os.path.join(os.environ['NBTOOLS_RUNS_DIR'], 'marker.txt'), 'w').write('ran')")
    _notebook(bad / "01_hello.ipynb", "x = 1")
    _notebook(bad / "02_broken.ipynb", "raise RuntimeError('deliberately broken')")
    out = tmp_path / "out"
    d = doc(nb("demo", "--notebooks-dir", good, "--out", out, "--json"))
    assert d["ok"] is True and list(d["timings"]) == ["01_hello.ipynb"] and d["out_dir"] == str(out)
    assert (out / "marker.txt").read_text() == "ran" and (out / "notebooks" / "01_hello.ipynb").is_file()
    r = nb("demo", "--notebooks-dir", bad, "--out", tmp_path / "out2", code=1)
    assert "FAILED at 02_broken.ipynb" in r.stdout and "02_broken.ipynb" in r.stderr and "fix" in r.stderr
    nb("demo", "--timeout", "soon", code=2)
