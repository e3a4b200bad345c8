"""The pure parts of stall detection: stack parsing and phases, progress from files, the verdict, the bundle's scrub.

The stack texts are the real formats: a ``py-spy dump --subprocesses`` of a rehearsal job (captured through Ray's
dashboard from this project's rehearsal with a hang injected), faulthandler's dump of an aborted rank, and the
traceback torch.multiprocessing prints for a rank that raised.
"""

from __future__ import annotations

import io
import json
import os
import tarfile
import time

import pytest

from nbtools.config import load
from nbtools.launch._evidence import write_bundle
from nbtools.launch._stacks import Frame, RankStack, parse_log_stacks, parse_py_spy, phase_of
from nbtools.launch._stall import Progress, judge, progress

PY_SPY = """\
Process 2001: /venv/bin/python -m nbtools.rehearsal --config local.yaml --runs-dir runs
Python v3.11.7 (/venv/bin/python3.11)

Thread 2001 (idle): "MainThread"
    _poll (multiprocessing/popen_fork.py:27)
    join (torch/multiprocessing/spawn.py:150)
    main (nbtools/rehearsal/_launch.py:40)

Process 2002: /venv/bin/python -m nbtools.rehearsal --config local.yaml --runs-dir runs
Python v3.11.7 (/venv/bin/python3.11)

Thread 2002 (idle): "rank 0"
    all_reduce (torch/distributed/distributed_c10d.py:2806)
    wrapper (torch/distributed/c10d_logger.py:81)
    _Run._train (nbtools/rehearsal/trainer.py:262)
    step (nbtools/rehearsal/trainer.py:222)
    train (nbtools/rehearsal/trainer.py:190)
    run_rank (nbtools/rehearsal/trainer.py:85)
    _wrap (torch/multiprocessing/spawn.py:90)
Thread 2010 (idle): "Thread-1 (_pin)"
    wait (threading.py:331)

Process 2003: /venv/bin/python -m nbtools.rehearsal --config local.yaml --runs-dir runs
Python v3.11.7 (/venv/bin/python3.11)

Thread 2003 (idle): "rank 1"
    wait (threading.py:331)
    wait (threading.py:629)
    Injector.at (nbtools/rehearsal/_faults.py:38)
    _Run.refit (nbtools/rehearsal/trainer.py:285)
    _rollout (nbtools/rehearsal/trainer.py:292)
    step (nbtools/rehearsal/trainer.py:211)
    train (nbtools/rehearsal/trainer.py:190)
    run_rank (nbtools/rehearsal/trainer.py:85)
"""

FAULTHANDLER = """\
========================= Step 2/6 =========================
Fatal Python error: Aborted

Current thread 0x00007f2a5c1b7740 (most recent call first):
  File "/repo/nbtools/rehearsal/_faults.py", line 42 in at
  File "/repo/nbtools/rehearsal/trainer.py", line 318 in _generate
  File "/repo/nbtools/rehearsal/trainer.py", line 296 in _rollout
  File "/repo/nbtools/rehearsal/trainer.py", line 211 in step
  File "/repo/nbtools/rehearsal/trainer.py", line 190 in train
  File "/repo/nbtools/rehearsal/trainer.py", line 85 in run_rank

Extension modules: numpy.core._multiarray_umath, torch._C (total: 12)
rehearsal rank exited abnormally: process 1 terminated with signal SIGABRT
"""

TRACEBACK = """\
rehearsal failed in a rank:

-- Process 0 terminated with the following error:
Traceback (most recent call last):
  File "/venv/lib/python3.11/site-packages/torch/multiprocessing/spawn.py", line 90, in _wrap
    fn(i, *args)
  File "/repo/nbtools/rehearsal/trainer.py", line 85, in run_rank
    _Run(load_config(config, overrides, runs_dir), rank, world).train()
  File "/repo/nbtools/rehearsal/trainer.py", line 265, in _train
    self.faults.at(self.cur, "train")
  File "/repo/nbtools/rehearsal/_faults.py", line 47, in at
    raise torch.OutOfMemoryError(
torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.
"""


def test_py_spy_dump_gives_each_rank_its_phase_and_collective():
    ranks = parse_py_spy(PY_SPY)
    assert [(r.rank, r.pid) for r in ranks] == [(None, 2001), (0, 2002), (1, 2003)]  # the launcher, then the ranks
    r0, r1 = ranks[1], ranks[2]
    assert (r0.phase, r0.collective) == ("train fwd/bwd", "all_reduce")
    assert (r1.phase, r1.collective) == ("weight refit", None)  # threading's wait is not a collective
    assert r1.summary().startswith("wait (") and "_Run.refit (rehearsal/trainer.py:285)" in r1.summary()


@pytest.mark.parametrize("funcs, phase", [
    (["generate", "generate_sequences", "run"], "generation"),
    (["all_gather", "_save_state_dict", "save_checkpoint"], "checkpoint save"),
    (["broadcast", "update_weights_from_collective", "refit_policy_generation"], "weight refit"),
    (["forward", "get_logprobs", "train_loop"], "logprob"),
    (["__next__", "grpo_train"], "data loading"),
    (["all_reduce", "grpo_train"], "collective wait"),
    (["sleep", "main"], "unknown"),
])
def test_phase_rules(funcs, phase):
    files = {"all_gather": "torch/distributed/distributed_c10d.py", "broadcast": "torch/distributed/distributed_c10d.py",
             "all_reduce": "torch/distributed/distributed_c10d.py"}
    assert phase_of([Frame(f, files.get(f, "x/worker.py")) for f in funcs]) == phase


def test_log_stacks_from_faulthandler_and_torch_tracebacks():
    [dead] = parse_log_stacks(FAULTHANDLER)
    assert (dead.rank, dead.phase, dead.source, dead.error) == (1, "generation", "faulthandler", "Fatal Python error: Aborted")
    assert dead.frames[0].func == "at" and dead.frames[1].func == "_generate"
    [oom] = parse_log_stacks(TRACEBACK)
    assert (oom.rank, oom.phase, oom.source) == (0, "train fwd/bwd", "traceback")
    assert oom.error.startswith("torch.OutOfMemoryError: CUDA out of memory")


def _prog(steps: int, gap: float, last: float) -> Progress:
    return Progress(last, {i: last - (steps - i) * gap for i in range(1, steps + 1)})


def test_threshold_is_k_median_with_a_floor_and_a_startup_allowance():
    now = 10_000.0
    kw = dict(experiment="e", submission_id="e-1", job_status="RUNNING", k=5.0, floor_s=15.0, startup_s=600.0,
              log_stacks=[], dead_actors=[], now=now, started_at=now - 3600)
    quiet = judge(prog=_prog(5, 2.0, now - 14), samples=[], **kw)
    assert (quiet.status, quiet.threshold_s) == ("running", 15.0)  # 5 x 2 s < the floor
    slow = judge(prog=_prog(5, 60.0, now - 290), samples=[], **kw)
    assert (slow.status, slow.threshold_s) == ("running", 300.0)  # 5 x median 60 s
    assert judge(prog=_prog(5, 60.0, now - 301), samples=[], **kw).status == "stalled"
    starting = judge(prog=Progress(None, {}), samples=[], **{**kw, "started_at": now - 500})
    assert starting.status == "running" and starting.threshold_s == 600.0  # before the first step: startup_s


def test_verdict_names_the_straggler_only_when_it_lags_in_every_sample():
    ranks = parse_py_spy(PY_SPY)[1:]
    now = 10_000.0
    kw = dict(experiment="e", submission_id="e-1", job_status="RUNNING", k=5.0, floor_s=15.0, startup_s=600.0,
              log_stacks=[], dead_actors=[], now=now, started_at=now - 3600, prog=_prog(3, 1.0, now - 40))
    v = judge(samples=[ranks, ranks, ranks], **kw)
    assert (v.status, v.cause, v.stragglers) == ("stalled", "hang", [1])
    assert "rank 1 is in weight refit" in v.headline() and "rank(s) 0 wait in all_reduce" in v.headline()
    assert "weight refit" in v.fix and "NCCL" in v.fix
    d = v.to_dict()
    assert {"status", "stalled_for_s", "ranks", "stragglers", "cause", "fix", "bundle"} <= set(d)
    assert d["ranks"][1] == {**d["ranks"][1], "rank": 1, "phase": "weight refit"} and "refit" in d["ranks"][1]["stack"]
    busy = [RankStack(1, 3, [Frame("matmul", "x/worker.py"), Frame("_train", "x/trainer.py")])]
    assert judge(samples=[ranks, [ranks[0]] + busy], **kw).stragglers == [1]
    both_wait = [ranks[0], RankStack(1, 9, ranks[0].frames)]
    w = judge(samples=[both_wait], **kw)
    assert (w.cause, w.stragglers) == ("deadlock", [])
    healthy = judge(samples=[ranks], **{**kw, "prog": _prog(3, 1.0, now - 2)})
    assert healthy.status == "running" and healthy.cause == "running"


def test_dead_actor_while_running_is_a_stall():
    now = 10_000.0
    v = judge(experiment="e", submission_id="e-1", job_status="RUNNING", prog=_prog(3, 1.0, now - 1), started_at=None,
              k=5, floor_s=15, startup_s=60, samples=[], log_stacks=[], now=now,
              dead_actors=["DTensorPolicyWorker 0123: {'actor_died_error_context': 'node died'}"])
    assert (v.status, v.cause) == ("stalled", "lost-node") and "DTensorPolicyWorker" in v.evidence


def test_progress_reads_step_files_and_ignores_bundles(tmp_path):
    logs = tmp_path / "logs" / "exp_001"
    logs.mkdir(parents=True)
    t = time.time() - 100
    for step in (1, 2, 3):
        p = logs / f"train_data_step{step}.jsonl"
        p.write_text("{}\n")
        os.utime(p, (t + 10 * step, t + 10 * step))
    (tmp_path / "ckpt" / "step_2").mkdir(parents=True)
    os.utime(tmp_path / "ckpt" / "step_2", (t + 21, t + 21))
    os.utime(tmp_path / "ckpt", (t + 21, t + 21))
    bundle = tmp_path / "logs" / "nbtools-diagnosis"
    bundle.mkdir()
    (bundle / "x.md").write_text("later")
    os.utime(tmp_path / "logs", (t, t))
    os.utime(logs, (t + 30, t + 30))
    p = progress([str(tmp_path / "logs"), str(tmp_path / "ckpt"), str(tmp_path / "missing")])
    assert p.last_step == 3 and p.median_step_s == pytest.approx(10.0, abs=0.01)
    assert p.newest == pytest.approx(t + 30, abs=0.01)  # not the bundle written just now


def test_bundle_holds_no_secret(tmp_path, monkeypatch):
    secret = "hf_" + "Sentinel0Secret1Value2Abc3"
    monkeypatch.setenv("NBTOOLS_RUNS_DIR", str(tmp_path))
    monkeypatch.setenv("HF_TOKEN", secret)
    monkeypatch.setenv("MY_SERVICE_PASSWORD", "p4ssw0rd-sentinel-xyz")
    cfg = load("experiments/local.yaml")
    now = time.time()
    v = judge(experiment=cfg.name, submission_id="local-1", job_status="RUNNING", prog=_prog(3, 1.0, now - 40),
              started_at=None, k=5, floor_s=15, startup_s=60, samples=[parse_py_spy(PY_SPY)[1:]], log_stacks=[],
              dead_actors=[], now=now)
    files = {"logs/driver.log": f"loading with token {secret}\nwandb key sk-{'A1b2C3d4' * 4} and p4ssw0rd-sentinel-xyz",
             "env.json": json.dumps({"NCCL_DEBUG": "INFO", "HF_TOKEN_COPY": secret})}
    archive, summary = write_bundle(cfg, v, files)
    assert archive.startswith(cfg.logs_url) and "nbtools-diagnosis" in archive
    with tarfile.open(fileobj=io.BytesIO(open(archive, "rb").read())) as tar:
        texts = [tar.extractfile(m).read().decode() for m in tar.getmembers() if m.isfile()]
    everything = "\n".join(texts) + open(summary).read()
    for s in (secret, "p4ssw0rd-sentinel-xyz", "A1b2C3d4A1b2C3d4"):
        assert s not in everything
    assert "<value of $HF_TOKEN>" in everything and "NCCL_DEBUG" in everything
    assert "rank 1 is in weight refit" in open(summary).read()
