"""Issue 27, "every reader, every path form, on every storage": each reader (library and CLI) gets each path form of
one real run, on disk and at a ``gs://`` URL (tests/doubles/gcs_emulator.py: fake-gcs-server, a GCS API STAND-IN that gcsfs
talks to), and must answer the same: the same data, or the same typed error with the same message.

The run is a copy of the session's shared real rehearsal (tests/conftest.py: ``python -m nbtools.rehearsal``, 2 GRPO
steps, validation at the start and after each step, checkpoints at 1 and 2), plus what an evaluation leaves: NeMo-RL's ``eval.save_path`` (written by tests/doubles/run_eval_double.py, the
stand-in for ``examples/run_eval.py``) and an ``EvalResult.save`` directory. Everything is uploaded once to the
emulator as ``gs://readers/run/…``.
"""

from __future__ import annotations

import json
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
from run_eval_double import FAKE_RUN_EVAL

from nbtools import checkpoints, evals, health, metrics, trajectories

BUCKET = "readers"
URL = f"gs://{BUCKET}/run"

FORMS = {
    "log_dir": "logs",
    "exp_dir": "logs/exp_001",
    "tensorboard_dir": "logs/exp_001/tensorboard",
    "checkpoint_dir": "checkpoints",
    "step_dir": "checkpoints/step_2",
    "weights_dir": "checkpoints/step_2/policy/weights",
    "eval_save_path": "eval/math500",
    "eval_result_dir": "eval/result",
    "missing": "no/such/dir",
}


def _frame(df) -> list:
    return json.loads(df.to_json(orient="records", double_precision=10))


def _trajectories(p):
    run = trajectories.open_run(p)
    df = run.read()
    last = run.record(run.steps[-1], 0) if run.steps else None
    return {"steps": run.steps, "val_steps": run.val_steps, "records": len(df), "reward_sum": round(float(df.reward.sum()), 6),
            "segments": [s.rsplit("/", 1)[-1] for s in run.segments], "overlap": run.overlap,
            "last_response": last and last["response"]}


def _checkpoint_list(p):
    df = checkpoints.list_checkpoints(p)
    return {"rows": _frame(df), "in_progress": df.attrs["in_progress"], "status": df.attrs["status"]}


READERS = {
    "trajectories.open_run": _trajectories,
    "metrics.read_tensorboard": lambda p: _frame(metrics.read_tensorboard(p)),
    "health.check": lambda p: health.check(p).to_dict(),
    "checkpoints.list_checkpoints": _checkpoint_list,
    "checkpoints.best": lambda p: str(checkpoints.best(p, "val:accuracy")),
    "checkpoints.latest": lambda p: str(checkpoints.latest(p)),
    "checkpoints.in_progress": lambda p: checkpoints.in_progress(p),
    "checkpoints.detect_layout": lambda p: checkpoints.detect_layout(p),
    "checkpoints.read_training_info": lambda p: checkpoints.read_training_info(p),
    "evals.load_evaluation_data": lambda p: _frame(evals.load_evaluation_data(p)),
    "evals.load_eval_config": lambda p: evals.load_eval_config(p),
    "evals.EvalResult.load": lambda p: {**evals.EvalResult.load(p).summary(), "path": str(evals.EvalResult.load(p).path)},
}

# what each reader is for: these pairs must answer with data (the rest may refuse, alike on both storages)
WORKS = {
    "trajectories.open_run": {"log_dir", "exp_dir"},
    "metrics.read_tensorboard": {"log_dir", "exp_dir", "tensorboard_dir"},
    "health.check": {"log_dir", "exp_dir"},
    "checkpoints.list_checkpoints": {"checkpoint_dir"},
    "checkpoints.best": {"checkpoint_dir"},
    "checkpoints.latest": {"checkpoint_dir"},
    "checkpoints.in_progress": set(FORMS),
    "checkpoints.detect_layout": {"step_dir", "weights_dir"},
    "checkpoints.read_training_info": {"step_dir"},
    "evals.load_evaluation_data": {"eval_save_path"},
    "evals.load_eval_config": {"eval_save_path"},
    "evals.EvalResult.load": {"eval_result_dir"},
}


@pytest.fixture(scope="module")
def run(rehearsal_run, tmp_path_factory, gcs) -> Path:
    """A copy of the shared rehearsal's run dir (logs, checkpoints) with an eval dir added, uploaded to
    ``gs://readers/run``."""
    d = rehearsal_run.copy(tmp_path_factory.mktemp("readers"))
    save = d / "eval" / "math500"
    r = subprocess.run([sys.executable, "-c", FAKE_RUN_EVAL, f"generation.model_name={d / 'merged_hf'}",
                        "data.dataset_name=math500", "eval.num_tests_per_prompt=2", f"eval.save_path={save}",
                        "generation.temperature=0.0"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    evals.EvalResult(table=evals.load_evaluation_data(save), model="merged_hf").save(d / "eval" / "result")
    for part in ("logs", "checkpoints", "eval"):
        gcs.fs.put(str(d / part), f"{BUCKET}/run/{part}", recursive=True)
    return d


@pytest.fixture(scope="module", autouse=True)
def _cache(tmp_path_factory):
    """One cache of remote copies for the module (what a notebook session keeps between calls)."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("NBTOOLS_CACHE_DIR", str(tmp_path_factory.mktemp("cache")))
        yield


def _answer(fn, root: str, rel: str, run: Path):
    """``fn``'s answer on ``root/rel`` as JSON text with the run's roots written ``<run>``: data, or the error's kind
    and text. Both roots: a file may name where it was written (the eval config names the model's path on disk)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            out = ["ok", fn(f"{root}/{rel}")]
        except Exception as e:  # the kind and the words are what is compared
            out = ["error", type(e).__name__, str(e)]
    return json.dumps(out, default=str, sort_keys=True).replace(URL, "<run>").replace(str(run), "<run>")


@pytest.mark.parametrize("form", list(FORMS))
@pytest.mark.parametrize("reader", list(READERS))
def test_each_reader_answers_the_same_on_disk_and_in_a_bucket(run, reader, form):
    disk = _answer(READERS[reader], str(run), FORMS[form], run)
    bucket = _answer(READERS[reader], URL, FORMS[form], run)
    assert bucket == disk
    if form in WORKS[reader]:
        assert json.loads(disk)[0] == "ok", disk
    elif form == "missing":  # refused as not found, or an empty answer (nothing in progress, no training_info)
        assert json.loads(disk)[:2] == ["error", "NotFoundError"] or json.loads(disk) in (["ok", []], ["ok", {}]), disk


def test_the_answers_are_the_runs_own(run):
    """The matrix compares answers; here they are checked against what the rehearsal wrote."""
    t = json.loads(_answer(READERS["trajectories.open_run"], URL, "logs", run))[1]
    assert t["steps"] == [1, 2] and t["val_steps"] == [0, 1, 2] and t["records"] > 0
    assert checkpoints.best(f"{URL}/checkpoints").endswith(("/step_1", "/step_2"))
    assert [r["step"] for r in _checkpoint_list(f"{URL}/checkpoints")["rows"]] == [1, 2]
    assert checkpoints.detect_layout(f"{URL}/checkpoints/step_2/policy/weights") == "v2_safetensors"
    assert evals.EvalResult.load(f"{URL}/eval/result").accuracy == pytest.approx(0.75)  # the double's 30/40
    assert len(evals.load_evaluation_data(f"{URL}/eval/math500")) == 80  # 40 problems x 2 samples


CLI = {
    "trajectories": ["trajectories"],
    "metrics": ["metrics"],
    "checkpoints": ["checkpoints"],
    "health": ["health"],
    "eval-parse": ["eval-parse"],
    "compare": ["compare", "--allow-mismatch", "201/500"],
}


@pytest.mark.parametrize("form", list(FORMS))
@pytest.mark.parametrize("command", list(CLI))
def test_each_cli_command_answers_the_same_on_disk_and_in_a_bucket(run, command, form, capfd):
    from nbtools import cli

    def one(root: str) -> str:
        capfd.readouterr()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            code = cli.main([*CLI[command], f"{root}/{FORMS[form]}", "--json"])
        out = json.dumps([code, json.loads(capfd.readouterr().out)], sort_keys=True)
        return out.replace(URL, "<run>").replace(str(run), "<run>")

    disk, bucket = one(str(run)), one(URL)
    assert bucket == disk
    works = {"trajectories": {"log_dir", "exp_dir"}, "metrics": {"log_dir", "exp_dir", "tensorboard_dir"},
             "checkpoints": {"checkpoint_dir"}, "health": {"log_dir", "exp_dir"}, "compare": {"eval_save_path", "eval_result_dir"}}
    if form in works.get(command, ()):
        code, answer = json.loads(disk)
        # health answers with its report and exits 1 when the run is unhealthy (the shared run's 2 steps after a
        # 5-step warm start are: no <answer> yet)
        assert code == (1 if command == "health" and answer["status"] == "unhealthy" else 0) and "error" not in answer, disk
