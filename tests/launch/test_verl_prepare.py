"""`nbtools prepare`: verl's data-preparation and weights-staging jobs, idempotent, and the blocking data lint.

The jobs run here, in a shell, against test doubles of what the cluster has:

- a verl checkout whose ``examples/data_preprocess/gsm8k.py`` does what verl v0.7.0's does (github.com/volcengine/verl,
  tag v0.7.0, examples/data_preprocess/gsm8k.py: ``--local_save_dir DIR``; rows ``data_source``, ``prompt`` (one user
  message: question + the "####" instruction), ``ability``, ``reward_model`` {style, ground_truth}, ``extra_info``
  {split, index, answer, question}; ``train.parquet`` and ``test.parquet``) but reads GSM8K-shaped rows generated in
  code instead of downloading ``openai/gsm8k``; ``FAIL_AFTER_TRAIN=1`` makes it die after writing train.parquet;
- a ``huggingface_hub`` whose ``snapshot_download`` records its call and the ``HF_HOME`` it ran with.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pandas as pd
import pytest

from nbtools import config, launch
from nbtools.launch import _prepare
from nbtools.trainers import LintReport
from nbtools.trainers.verl import prepare as vp

ROOT = Path(__file__).resolve().parents[2]
EXPERIMENT = ROOT / "experiments" / "gke-b200-verl.yaml"

GSM8K_DOUBLE = textwrap.dedent('''
    import argparse, os, re
    import pandas as pd

    def extract_solution(s):
        return re.search("#### (\\\\-?[0-9\\\\.\\\\,]+)", s).group(0).split("#### ")[1].replace(",", "")

    ap = argparse.ArgumentParser()
    ap.add_argument("--local_save_dir", default="~/data/gsm8k")
    args = ap.parse_args()
    with open(os.environ["RUNS_FILE"], "a") as f:
        f.write("run\\n")
    raw = {"train": [{"question": f"Q{i}: 2+{i}?", "answer": f"2+{i}={2 + i} #### {2 + i:,}"} for i in range(5)],
           "test": [{"question": "Q: 1000+234?", "answer": "#### 1,234"}]}
    inst = 'Let\\'s think step by step and output the final answer after "####".'
    for split in ("train", "test"):
        rows = [{"data_source": "openai/gsm8k", "prompt": [{"role": "user", "content": ex["question"] + " " + inst}],
                 "ability": "math", "reward_model": {"style": "rule", "ground_truth": extract_solution(ex["answer"])},
                 "extra_info": {"split": split, "index": i, "answer": ex["answer"], "question": ex["question"]}}
                for i, ex in enumerate(raw[split])]
        pd.DataFrame(rows).to_parquet(os.path.join(args.local_save_dir, f"{split}.parquet"))
        if os.environ.get("FAIL_AFTER_TRAIN"):
            raise SystemExit("killed")
''')

HUB_DOUBLE = textwrap.dedent('''
    import json, os
    def snapshot_download(repo_id, **kw):
        with open(os.environ["HUB_CALLS"], "a") as f:
            f.write(json.dumps({"repo_id": repo_id, "HF_HOME": os.environ.get("HF_HOME"), **kw}) + "\\n")
        return os.path.join(os.environ["HF_HOME"], "hub", "models--" + repo_id.replace("/", "--"))
''')


@pytest.fixture()
def cfg(tmp_path):
    code = tmp_path / "verl"
    (code / "examples" / "data_preprocess").mkdir(parents=True)
    (code / "examples" / "data_preprocess" / "gsm8k.py").write_text(GSM8K_DOUBLE)
    return config.load(EXPERIMENT, overrides={"trainer.code_dir": str(code), "data.data_dir": str(tmp_path / "gsm8k"),
                                              "trainer.python": sys.executable})


def _job(cfg, role: str):
    """The preparation job of ``role`` as submitted (``nbtools.launch.prepare_jobs``: verl's, from its folder)."""
    return next(s for s in launch.prepare_jobs(cfg) if s.metadata["nbtools.role"] == role)


def _run(spec, tmp_path, **env) -> subprocess.CompletedProcess:
    e = {k: v for k, v in os.environ.items() if k != "HF_TOKEN"}
    e.update(spec.runtime_env["env_vars"], RUNS_FILE=str(tmp_path / "runs"), PATH=os.environ["PATH"],
             LD_LIBRARY_PATH=os.environ.get("LD_LIBRARY_PATH", ""), **env)
    e["PYTHONPATH"] = os.pathsep.join([str(tmp_path / "site"), e.get("PYTHONPATH", "")])
    return subprocess.run(["sh", "-c", spec.entrypoint], capture_output=True, text=True, env=e, timeout=300)


def test_data_job_writes_verls_parquet_once(cfg, tmp_path, monkeypatch):
    monkeypatch.delenv("HF_TOKEN", raising=False)
    spec = _job(cfg, "prepare")
    d = tmp_path / "gsm8k"
    assert vp.data_files(cfg) == [str(d / "train.parquet"), str(d / "test.parquet")]
    r = _run(spec, tmp_path)
    assert r.returncode == 0, r.stderr
    train, test = pd.read_parquet(d / "train.parquet"), pd.read_parquet(d / "test.parquet")
    assert list(train.columns) == ["data_source", "prompt", "ability", "reward_model", "extra_info"]
    assert len(train) == 5 and test.loc[0, "reward_model"]["ground_truth"] == "1234"
    assert train.loc[3, "prompt"][0]["content"].startswith("Q3: 2+3? Let's think step by step")
    assert sorted(p.name for p in d.iterdir()) == ["test.parquet", "train.parquet"]  # no partial dir left
    again = _run(spec, tmp_path)
    assert again.returncode == 0 and "already exist; nothing to do" in again.stdout
    assert (tmp_path / "runs").read_text().count("run") == 1


@pytest.mark.parametrize("name", ["it's data", "a\\b $HOME `x` \"q\""])
def test_a_data_dir_with_quotes_runs_and_writes_there(cfg, tmp_path, monkeypatch, name):
    """#41: a data dir with ``'`` made a job that was a bash syntax error (Hydra-escaped paths pasted unquoted into
    ``echo '…'``) and the quoted parts named a directory with a literal backslash."""
    monkeypatch.delenv("HF_TOKEN", raising=False)
    d = tmp_path / name
    cfg = cfg.replace(**{"data.data_dir": str(d)})
    assert vp.data_files(cfg) == [str(d / "train.parquet"), str(d / "test.parquet")]
    spec = _job(cfg, "prepare")
    assert subprocess.run(["bash", "-n", "-c", spec.entrypoint]).returncode == 0
    r = _run(spec, tmp_path)
    assert r.returncode == 0, r.stderr
    assert sorted(p.name for p in d.iterdir()) == ["test.parquet", "train.parquet"], list(tmp_path.iterdir())
    assert f"nbtools prepare: wrote {d / 'train.parquet'} and {d / 'test.parquet'}" in r.stdout
    again = _run(spec, tmp_path)
    assert again.returncode == 0 and f"{d / 'train.parquet'} and" in again.stdout and "nothing to do" in again.stdout


def test_killed_job_leaves_nothing_that_looks_done_and_lint_blocks(cfg, tmp_path, monkeypatch):
    monkeypatch.delenv("HF_TOKEN", raising=False)
    d = tmp_path / "gsm8k"
    r = _run(_job(cfg, "prepare"), tmp_path, FAIL_AFTER_TRAIN="1")
    assert r.returncode != 0 and not (d / "train.parquet").exists() and not (d / "test.parquet").exists()
    exists = lambda p: Path(p).exists()  # noqa: E731 - the cluster path is this machine's path here
    rep = LintReport()
    vp.check_data(cfg, rep, exists=exists)
    assert [(f.severity, f.rule) for f in rep.findings] == [("blocking", "verl-data")]
    assert "nbtools prepare" in rep.findings[0].fix and str(d / "train.parquet") in rep.findings[0].message
    assert _run(_job(cfg, "prepare"), tmp_path).returncode == 0  # the next run starts clean and completes
    rep = LintReport()
    vp.check_data(cfg, rep, exists=exists)
    assert rep.findings == [] and rep.checked == ["verl-data"]


def test_lint_runs_the_rule_and_unknown_is_not_absent(monkeypatch):
    from nbtools import launch

    cfg = config.load(EXPERIMENT)  # /data/gsm8k in a bucket this machine cannot read: not checked, not blocking
    assert set(vp.data_present(cfg).values()) == {None}
    report = launch.lint(cfg, cluster_gpus=16)
    assert {"verl-data", "verl-weights"} <= set(report.checked)
    assert not [f for f in report.findings if f.rule in ("verl-data", "verl-weights")]


def test_weights_job_stages_into_the_shared_cache(cfg, tmp_path, monkeypatch):
    monkeypatch.delenv("HF_TOKEN", raising=False)
    (tmp_path / "site" / "huggingface_hub").mkdir(parents=True)
    (tmp_path / "site" / "huggingface_hub" / "__init__.py").write_text(HUB_DOUBLE)
    spec = _job(cfg, "stage-weights")
    assert spec.runtime_env["env_vars"]["HF_HOME"] == "/data/huggingface_cache" and spec.metadata["nbtools.role"] == "stage-weights"
    r = _run(spec, tmp_path, HUB_CALLS=str(tmp_path / "calls"), HF_HOME=str(tmp_path / "hf"))
    assert r.returncode == 0, r.stderr
    call = json.loads((tmp_path / "calls").read_text())
    assert call == {"repo_id": "Qwen/Qwen2.5-32B-Instruct", "HF_HOME": str(tmp_path / "hf")}
    assert "nbtools prepare: weights in" in r.stdout
    local = config.load(EXPERIMENT, overrides={"model.name": "/data/models/qwen"})
    assert vp.weights_job(local) is None and [s.metadata["nbtools.role"] for s in launch.prepare_jobs(local)] == ["prepare"]


def test_cli_dry_run(capfd):
    from nbtools.cli import main

    assert main(["prepare", str(EXPERIMENT), "--json"]) == 0
    out = json.loads(capfd.readouterr().out)
    assert [j["role"] for j in out["jobs"]] == ["prepare", "stage-weights"] and out["submitted"] is False
    assert out["data_files"] == {"/data/gsm8k/train.parquet": None, "/data/gsm8k/test.parquet": None}


def test_weights_lint_warns_only_when_known_unstaged(cfg):
    assert vp.weights_dir(cfg) == "/data/huggingface_cache/hub/models--Qwen--Qwen2.5-32B-Instruct"
    for present, want in ((False, [("warning", "verl-weights")]), (True, [])):
        rep = LintReport()
        vp.check_weights(cfg, rep, exists=lambda p, present=present: present and p.endswith("/snapshots"))
        assert [(f.severity, f.rule) for f in rep.findings] == want
    rep = LintReport()
    vp.check_weights(cfg, rep)  # the bucket is not readable from here: unknown, no finding
    assert rep.findings == [] and rep.checked == ["verl-weights"]


@pytest.mark.parametrize("name", ["local.yaml", "local-verl.yaml", "gke-b200-gemma3-1b.yaml"])
def test_notebook_03s_prepare_is_a_no_op_where_no_job_prepares(name, monkeypatch):
    """NeMo-RL and the local rehearsal (of a verl experiment too) need no preparation: nothing submitted, and it says so."""
    import nbtools

    monkeypatch.setattr(_prepare, "send", lambda *a: pytest.fail(f"{name}: a preparation job was submitted"))
    prep = nbtools.launch.prepare(config.load(ROOT / "experiments" / name))
    assert prep.ok and prep.jobs == () and prep.data_files == {} and "needs no preparation job" in prep.note, prep
    assert "nothing submitted" in prep._repr_html_()
