"""Readers on a resumed run (issue #16 item 4): attempt 1 wrote steps 1..7 in exp_001 and died after its step_5
checkpoint; attempt 2 resumed in exp_002 and wrote 6..10. Steps 6 and 7 are shown once, from attempt 2, and the
overlap is reported, on disk and from a bucket (GCS emulator); a run that starts over is never spliced in."""

from __future__ import annotations

import json

import pytest

from nbtools import metrics, storage, trajectories
from nbtools._layout import resumed_chain
from nbtools.rehearsal.artifacts import MetricsLogger

BUCKET = "resume-bucket"
PER = 4


def _line(step: int, i: int, reward: float) -> str:
    prompt = f"<|user|> max {i % 10} {step % 10} 3 <|assistant|>"
    return json.dumps({"content": [[prompt, f"<think> x </think> <answer> {i} </answer>", "Environment: correct"]],
                       "rewards": [reward], "idx": [i], "input_lengths": [7],
                       "token_loss_mask": [[0, 0, 1, 1, 1]], "advantages": [[0.0, 0.0, reward, reward, reward]]})


def _exp(logs, n: int, steps, attempt: int) -> None:
    """One exp dir: dumps and TensorBoard scalars whose reward encodes the attempt (attempt * 10 + step / 100)."""
    exp = logs / f"exp_{n:03d}"
    exp.mkdir(parents=True)
    log = MetricsLogger(exp, flush_secs=1)
    for s in steps:
        r = attempt * 10 + s / 100
        (exp / f"train_data_step{s}.jsonl").write_text("".join(_line(s, i, r) + "\n" for i in range(PER)))
        log.log_metrics({"reward": r}, s, "train")
    log.close()


@pytest.fixture
def logs(tmp_path):
    logs = tmp_path / "logs"
    _exp(logs, 1, range(1, 8), 1)
    _exp(logs, 2, range(6, 11), 2)
    return logs


def test_resumed_chain_follows_resumes_and_stops_at_a_fresh_start(tmp_path):
    names = {"a": ["train_data_step1.jsonl", "train_data_step2.jsonl", "train_data_step3.jsonl"],
             "empty": ["tensorboard"],  # an attempt that died while starting
             "b": ["train_data_step3.jsonl", "train_data_step4.jsonl"], "c": ["train_data_step5.jsonl"],
             "fresh": ["train_data_step1.jsonl"], "gap": ["train_data_step9.jsonl"]}
    chain = lambda *ds: resumed_chain(list(enumerate(ds)), names.__getitem__)  # noqa: E731
    assert chain("a", "empty", "b", "c") == ["a", "b", "c"]
    assert chain("a", "b", "fresh") == ["fresh"]  # starts over at step 1: another run
    assert chain("a", "gap") == ["gap"]  # resumed from step_8, which no earlier dir reached
    assert chain("a", "empty") == ["empty"] and chain() == []


def test_trajectories_show_each_step_once_newest_wins(logs):
    run = trajectories.open_run(logs)
    assert [p.rsplit("/", 1)[-1] for p in run.segments] == ["exp_001", "exp_002"]
    assert run.steps == list(range(1, 11)) and run.overlap["train"] == [6, 7]
    df = run.read()
    assert df.groupby("step").size().to_dict() == dict.fromkeys(range(1, 11), PER)
    by_step = df.groupby("step").reward.first()
    assert by_step[5] == pytest.approx(10.05) and by_step[6] == pytest.approx(20.06) and by_step[7] == pytest.approx(20.07)
    assert df.attrs["overlap_steps"] == [6, 7] and run.read(range(1, 5)).attrs["overlap_steps"] == []
    assert run.record(6, 0)["reward"] == pytest.approx(20.06) and run.record(2, 1)["reward"] == pytest.approx(10.02)
    assert run.read(arrays=True).groupby("step").reward.first()[7] == pytest.approx(20.07)
    assert "exp_001 + " in run._repr_html_() and "6, 7" in run._repr_html_()
    only = trajectories.open_run(logs / "exp_002")  # an exp dir named explicitly is read alone
    assert only.steps == list(range(6, 11)) and only.overlap["train"] == []


def test_metrics_show_each_step_once_newest_wins(logs):
    df = metrics.read_tensorboard(logs)
    r = metrics.select(df, "reward")
    assert list(r.step) == list(range(1, 11)) and set(r.run) == {"exp_002"}
    assert r.set_index("step").value[5] == pytest.approx(10.05) and r.set_index("step").value[7] == pytest.approx(20.07)
    assert df.attrs["overlap_steps"] == [6, 7]
    assert [s.rsplit("/", 1)[-1] for s in df.attrs["segments"]] == ["exp_001", "exp_002"]
    alone = metrics.read_tensorboard(logs / "exp_001")
    assert list(metrics.select(alone, "reward").step) == list(range(1, 8)) and alone.attrs["overlap_steps"] == []


def test_a_fresh_run_in_the_same_log_dir_is_not_spliced(logs):
    _exp(logs, 3, range(1, 4), 3)
    run = trajectories.open_run(logs)
    assert run.steps == [1, 2, 3] and len(run.segments) == 1 and run.overlap["train"] == []
    r = metrics.select(metrics.read_tensorboard(logs), "reward")
    assert list(r.step) == [1, 2, 3] and r.value.iloc[0] == pytest.approx(30.01)


def test_a_resumed_run_in_a_bucket_reads_like_on_disk(logs, gcs, storage_cache):
    gcs.fs.put(str(logs), f"{BUCKET}/run/logs", recursive=True)
    url = f"gs://{BUCKET}/run/logs"
    remote, local = trajectories.open_run(url), trajectories.open_run(logs)
    assert remote.steps == local.steps and remote.overlap == local.overlap == {"train": [6, 7], "val": []}
    a, b = remote.read(), local.read()
    assert a.reward.tolist() == b.reward.tolist() and a.attrs["overlap_steps"] == [6, 7]
    assert remote.record(6, 0)["reward"] == pytest.approx(20.06) and remote.record(3, 0)["reward"] == pytest.approx(10.03)
    storage.evict(f"{url}/exp_001")
    assert remote.record(3, 1)["reward"] == pytest.approx(10.03)
    df = metrics.read_tensorboard(url)
    assert list(metrics.select(df, "reward").step) == list(range(1, 11)) and df.attrs["overlap_steps"] == [6, 7]


def test_cli_trajectories_reports_the_resumed_run(logs, capfd):
    from nbtools import cli

    capfd.readouterr()
    assert cli.main(["trajectories", str(logs), "--json"]) == 0
    data = json.loads(capfd.readouterr().out)
    assert data["steps"] == list(range(1, 11)) and data["records"] == 10 * PER and data["overlap_steps"] == [6, 7]
    assert cli.main(["trajectories", str(logs)]) == 0
    assert "steps written twice (newest shown): 6, 7" in capfd.readouterr().out
