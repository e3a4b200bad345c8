"""nbtools.launch through Ray's Jobs API on real local Ray heads.

NeMo-RL itself cannot run here, so its entry point is a clearly named test double: a ``nemo-rl`` checkout in a temp
dir whose ``examples/run_grpo.py`` loads the real v0.7.0 config files (``defaults:`` inheritance), applies the
command's overrides with Hydra's rules (``key=value`` only for existing keys, ``+key=value`` only for new ones; the
same error texts), checks the secrets reached the driver, and prints NeMo-RL's stdout lines while writing
``exp_NNN/`` and ``step_N/`` under the configured absolute dirs. GPUs cannot be used either, so the ``ray``-backend
head advertises 16 (``ray start --num-gpus 16``); nothing runs on them.

What is real: both Ray heads, the Jobs API (submit, re-attach, follow, stop), the working_dir upload and what the
dashboard returns for a job. Notebook 03 on the ``ray`` branch (its exact command shown, ``STOP``, no token in its
outputs) is checked where the suite executes it anyway: tests/integration/test_ray_hidden_notebooks.py.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import sys
import urllib.error
import urllib.request
from pathlib import Path

import pytest

import nbtools
from nbtools.config import from_dict, load
from nbtools.errors import LintError, NotFoundError
from nbtools.launch import recipes

pytestmark = pytest.mark.ray

ROOT = Path(__file__).resolve().parents[2]
NEMO_RL_CONFIGS = Path(__file__).resolve().parents[1] / "assets" / "nemo-rl" / "v0.7.0" / "examples" / "configs"

DOUBLE = r'''
"""TEST DOUBLE of NeMo-RL v0.7.0 examples/run_grpo.py (see tests/launch/test_ray.py)."""
import argparse, hashlib, json, os, sys, time
from pathlib import Path
import yaml

def load(p):
    p = Path(p); d = yaml.safe_load(p.read_text()) or {}
    parents = d.pop("defaults", None)
    if parents is None:
        return d
    base = {}
    for rel in [parents] if isinstance(parents, str) else parents:
        base = merge(base, load(p.parent / rel))
    return merge(base, d)

def merge(a, b):
    out = dict(a)
    for k, v in b.items():
        out[k] = merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out

def lookup(t, key):
    for part in key.split("."):
        if not isinstance(t, dict) or part not in t:
            return False, None
        t = t[part]
    return True, t

def put(t, key, value):
    parts = key.split(".")
    for part in parts[:-1]:
        if not isinstance(t.get(part), dict):
            t[part] = {}
        t = t[part]
    t[parts[-1]] = yaml.safe_load(value) if value else value

ap = argparse.ArgumentParser(); ap.add_argument("--config", required=True)
args, overrides = ap.parse_known_args()
cfg = load(args.config)
for ov in overrides:
    add = ov.startswith("+") and not ov.startswith("++")
    key, _, value = ov.lstrip("+").partition("=")
    exists, current = lookup(cfg, key)
    if not add and not ov.startswith("++") and not exists:
        sys.exit(f"Could not override '{key}'.\nTo append to your config use +{ov}")
    if add and exists and current is not None:
        sys.exit(f"Could not append to config. An item is already at '{key}'.")
    put(cfg, key, value)
token = os.environ.get("HF_TOKEN")
if not token:
    sys.exit("HF_TOKEN missing in the driver environment")
print("HF_TOKEN sha256 " + hashlib.sha256(token.encode()).hexdigest()[:16], flush=True)
job_dir = os.environ.get("OLDPWD", "/nonexistent")  # the job's working_dir, before `cd <checkout>`
print(f"secrets file left behind: {os.path.exists(os.path.join(job_dir, '.nbtools_env'))} in {job_dir}", flush=True)
log_dir = Path(cfg["logger"]["log_dir"]); exp = log_dir / "exp_001"
(exp / "tensorboard").mkdir(parents=True, exist_ok=True)
if cfg["logger"].get("tensorboard_enabled"):  # NeMo-RL's TensorboardLogger opens its event file at start-up
    from tensorboard.summary.writer.event_file_writer import EventFileWriter
    EventFileWriter(str(exp / "tensorboard")).close()
print(f"\U0001F4CA Using log directory: {exp}", flush=True)
print("validation dataset: " + str((cfg["data"].get("validation") or {}).get("dataset_name")), flush=True)
n = int(cfg["grpo"]["max_num_steps"])
for k in range(1, n + 1):
    print(f"========================= Step {k}/{n} =========================", flush=True)
    (exp / f"train_data_step{k}.jsonl").write_text(json.dumps({"idx": [0]}) + "\n")
    time.sleep(float(os.environ.get("DOUBLE_STEP_SECONDS", "0.2")))
ck = Path(cfg["checkpointing"]["checkpoint_dir"]) / f"step_{n}"
ck.mkdir(parents=True, exist_ok=True)
(ck / "config.yaml").write_text(yaml.safe_dump(cfg))
print(f"Saving checkpoint for step {n}...", flush=True)
'''


@pytest.fixture(scope="module")
def gpu_head(tmp_path_factory):
    """A second real local Ray head that advertises 16 GPUs: the plain Ray address of the ``ray`` backend."""
    from nbtools.backends import _head as local
    from tests.conftest import free_port

    runs = tmp_path_factory.mktemp("gpuhead")
    cfg = load(
        ROOT / "experiments" / "local.yaml", backend="local",
        overrides={"ray.port": free_port(), "ray.dashboard_port": free_port(), "ray.num_cpus": 2},
    )
    old = os.environ.get("NBTOOLS_RUNS_DIR")
    os.environ["NBTOOLS_RUNS_DIR"] = str(runs)
    # hermetic: a token file some other tool left in ~/.ray would otherwise switch this head to token auth
    mp = pytest.MonkeyPatch()
    mp.setenv("RAY_AUTH_MODE", "disabled")
    try:
        handle = local.up(cfg, timeout=600, progress=False, extra_args=("--num-gpus", "16"))
    except BaseException:
        local.stop_all_under(runs)  # a head that did not come up in time is still ours to stop
        raise
    finally:
        mp.undo()
        if old is None:
            os.environ.pop("NBTOOLS_RUNS_DIR", None)
        else:
            os.environ["NBTOOLS_RUNS_DIR"] = old
    try:
        yield handle
    finally:
        local.stop_all_under(runs)


@pytest.fixture(scope="module")
def nemo_rl_double(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("opt") / "nemo-rl"
    shutil.copytree(NEMO_RL_CONFIGS, root / "examples" / "configs")
    (root / "examples" / "run_grpo.py").write_text(DOUBLE)
    return root


@pytest.fixture
def token(monkeypatch) -> str:
    value = "hf_" + secrets.token_hex(16)
    monkeypatch.setenv("HF_TOKEN", value)
    return value


def _experiment(tmp_path: Path, address: str, code_dir: Path, name: str, **changes) -> dict:
    data = json.loads(json.dumps(recipes.RECIPES["tutorial-003-qwen3-1.7b-deepscaler"]))
    shared = tmp_path / "shared"
    data.update(name=name, backend="ray")
    data["ray"] = {"address": address}
    data["images"] = {"nemo_rl_version": "v0.7.0"}
    data["data"] = {**data["data"], "validation": "AIME2024"}  # v0.7.0 has a data.validation section (v0.5.0 not)
    data["storage"] = {"kind": "gcsfuse", "mount_path": str(shared)}
    data["trainer"] = {"recipe": "examples/configs/grpo_math_1B.yaml", "code_dir": str(code_dir), "python": sys.executable}
    data["checkpointing"] = {**data["checkpointing"], "checkpoint_dir": str(shared / name / "checkpoints")}
    data["logging"] = {"log_dir": str(shared / name / "logs"), "tensorboard": True}
    data["grpo"] = {**data["grpo"], "max_num_steps": 3}
    for key, value in changes.items():
        cur = data
        parts = key.split(".")
        for p in parts[:-1]:
            cur = cur.setdefault(p, {})
        cur[parts[-1]] = value
    return data


def _dashboard_json(address: str, path: str) -> str:
    """What the dashboard's HTTP API answers for ``path`` (error bodies included: they are shown too)."""
    try:
        with urllib.request.urlopen(address.rstrip("/") + path, timeout=30) as r:
            return f"{r.status} " + r.read().decode()
    except urllib.error.HTTPError as e:
        return f"{e.code} " + e.read().decode()


@pytest.mark.slow  # a second Ray head, with GPUs
def test_ray_backend_job_runs_reattaches_and_never_shows_the_token(gpu_head, nemo_rl_double, token, tmp_path):
    from ray.job_submission import JobSubmissionClient

    address = gpu_head.dashboard_url
    mine = tmp_path / "my_recipes"  # a recipe of one's own: uploaded in working_dir with the parent it names
    mine.mkdir()
    shutil.copy(NEMO_RL_CONFIGS / "grpo_math_1B.yaml", mine / "grpo_math_1B.yaml")
    (mine / "mine.yaml").write_text("defaults: grpo_math_1B.yaml\ngrpo:\n  max_num_steps: 50\n")
    cfg = from_dict(_experiment(tmp_path, address, nemo_rl_double, "ray-backend-double",
                                **{"trainer.recipe": str(mine / "mine.yaml")}))
    spec = nbtools.launch.build(cfg)
    assert "+data.validation.dataset_name=AIME2024" in spec.entrypoint and spec.secret_names == ("HF_TOKEN",)
    assert '--config "$WD"/nemo_rl_configs/mine.yaml' in spec.entrypoint
    assert set(spec.files) == {"nemo_rl_configs/mine.yaml", "nemo_rl_configs/grpo_math_1B.yaml"}

    job = nbtools.launch.submit(cfg)  # GPUs counted from the head (16), like a real cluster
    assert job.id == cfg.submission_id
    status = nbtools.jobs.follow_with_progress(job, total_steps=3, timeout=180)
    assert status.value == "SUCCEEDED"
    again = nbtools.launch.submit(cfg)
    assert again.id == job.id
    assert list(nbtools.jobs.list_jobs(address)["submission_id"]).count(job.id) == 1

    log = job.logs()
    import hashlib

    assert "HF_TOKEN sha256 " + hashlib.sha256(token.encode()).hexdigest()[:16] in log  # it reached the driver
    assert re.search(r"secrets file left behind: False in \S*_ray_pkg_", log), log
    assert "Step 3/3" in log and "validation dataset: AIME2024" in log

    details = JobSubmissionClient(address).get_job_info(job.id)
    assert details.runtime_env["working_dir"].startswith("gcs://_ray_pkg_")
    assert details.runtime_env["env_vars"]["HF_HOME"] == f"{tmp_path}/shared/huggingface_cache"
    pkg = details.runtime_env["working_dir"].removeprefix("gcs://")
    shown = [
        json.dumps({"entrypoint": details.entrypoint, "metadata": details.metadata, "runtime_env": details.runtime_env,
                    "message": details.message}),
        _dashboard_json(address, "/api/jobs/"), _dashboard_json(address, f"/api/jobs/{job.id}"),
        _dashboard_json(address, f"/api/packages/gcs/{pkg}"), log, repr(spec), spec._repr_html_(),
    ]
    for text in shown:
        assert token not in text
    assert shown[1].startswith("200 ") and job.id in shown[1] and shown[2].startswith("200 ")

    out = nbtools.launch.outputs(cfg, job)
    assert out.ok and out.exp_dir.endswith("exp_001") and out.train_dumps == 3 and out.checkpoints[-1].endswith("step_3")


@pytest.mark.slow  # a second Ray head, with GPUs
def test_stop_then_resubmit_reattaches_to_the_stopped_job(gpu_head, nemo_rl_double, token, tmp_path, monkeypatch):
    address = gpu_head.dashboard_url
    cfg = from_dict(_experiment(tmp_path, address, nemo_rl_double, "ray-backend-stop", **{"grpo.max_num_steps": 400}))
    job = nbtools.launch.submit(cfg)
    for line in job.follow(timeout=120):
        if "Step 2/400" in line:
            break
    assert job.stop().value == "STOPPED"
    again = nbtools.launch.submit(cfg)
    assert again.id == job.id and again.status().value == "STOPPED"
    assert nbtools.launch.outputs(cfg, again).ok  # stopped on purpose is not a failure


def test_blocking_findings_refuse_and_submit_nothing(ray_head, nemo_rl_double, token, tmp_path):
    address = ray_head.dashboard_url  # the session head has no GPUs at all
    cfg = from_dict(_experiment(tmp_path, address, nemo_rl_double, "ray-backend-refused",
                                **{"trainer.overrides": ["grpo.max_num_step=3"]}))
    with pytest.raises(LintError, match="did you mean `grpo.max_num_steps`") as err:
        nbtools.launch.submit(cfg)
    assert "the cluster has 0" in str(err.value) and "apply each finding's fix" in str(err.value)
    with pytest.raises(NotFoundError):
        nbtools.jobs.attach(address, cfg.submission_id)
