"""Trajectories read from a bucket: tests/doubles/gcs_emulator.py (fake-gcs-server, a GCS API STAND-IN) through gcsfs.
The same dumps read locally and from gs:// give the same frames; rewritten objects are read again; evicted copies
are read by byte range through the kept index."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from nbtools import storage, trajectories
from nbtools.trainers import verl

BUCKET = "traj-bucket"
pytestmark = pytest.mark.usefixtures("storage_cache")  # the gcs fixture: tests/conftest.py


def _line(step: int, i: int, reward: float) -> str:
    prompt = f"<|user|> max {i % 10} {step % 10} 3 <|assistant|>"
    return json.dumps({"content": [[prompt, f"<think> x </think> <answer> {i} </answer>", "Environment: correct"]],
                       "rewards": [reward], "idx": [i], "input_lengths": [7],
                       "token_loss_mask": [[0, 0, 1, 1, 1]], "advantages": [[0.0, 0.0, reward, reward, reward]]})


def _write_run(root, steps=3, per=8):
    exp = root / "logs" / "exp_001"
    exp.mkdir(parents=True)
    for s in range(1, steps + 1):
        (exp / f"train_data_step{s}.jsonl").write_text("".join(_line(s, i, i / per) + "\n" for i in range(per)))
    return root / "logs"


def _upload(gcs, local, prefix):
    gcs.fs.put(str(local), f"{BUCKET}/{prefix}", recursive=True)
    return f"gs://{BUCKET}/{prefix}"


def test_a_bucket_run_reads_like_the_same_run_on_disk(gcs, tmp_path):
    logs = _write_run(tmp_path)
    url = _upload(gcs, logs, "run1/logs")
    local, remote = trajectories.open_run(logs), trajectories.open_run(url)
    assert remote.remote == f"{url}/exp_001" and remote.steps == local.steps == [1, 2, 3]
    pd.testing.assert_frame_equal(remote.read(), local.read())
    pd.testing.assert_frame_equal(remote.read(arrays=True).drop(columns=["token_loss_mask", "advantages"]),
                                  local.read(arrays=True).drop(columns=["token_loss_mask", "advantages"]))
    assert remote.record(2, 5)["response"] == local.record(2, 5)["response"]
    assert len(remote.summary()) == 3 and remote.skipped == 0


def test_a_rewritten_step_object_is_read_again_and_a_new_one_fetched_once(gcs, tmp_path):
    logs = _write_run(tmp_path)
    url = _upload(gcs, logs, "run2/logs")
    run = trajectories.open_run(url)
    assert len(run.read()) == 24
    copy = run.path / "train_data_step3.jsonl"
    stamp = copy.stat().st_mtime_ns
    gcs.fs.pipe(f"{BUCKET}/run2/logs/exp_001/train_data_step2.jsonl", (_line(2, 0, 0.99) + "\n").encode())  # restart
    gcs.fs.pipe(f"{BUCKET}/run2/logs/exp_001/train_data_step4.jsonl", (_line(4, 0, 0.5) + "\n").encode())   # new step
    df = run.read()
    assert run.steps == [1, 2, 3, 4] and len(df) == 8 + 1 + 8 + 1
    assert df[df.step == 2].reward.tolist() == [0.99] and run.record(2, 0)["reward"] == 0.99
    assert copy.stat().st_mtime_ns == stamp  # unchanged objects are not fetched again


def test_evicted_copies_are_read_by_byte_range_through_the_kept_index(gcs, tmp_path, monkeypatch):
    logs = _write_run(tmp_path, steps=2, per=50)
    url = _upload(gcs, logs, "run3/logs")
    run = trajectories.open_run(url)
    want = run.record(2, 37)
    assert storage.evict(url) > 0 and not (run.path / "train_data_step2.jsonl").exists()
    ranges = []
    real = storage.read_bytes

    def spy(u, start=None, end=None, **kw):
        ranges.append((u, start, end))
        return real(u, start, end, **kw)

    monkeypatch.setattr(storage, "read_bytes", spy)
    again = trajectories.open_run(url).record(2, 37)
    assert again["response"] == want["response"] and again["reward"] == want["reward"]
    assert len(ranges) == 1 and ranges[0][1] > 0 and ranges[0][2] - ranges[0][1] < 1000  # one line, not the file
    assert not (run.path / "train_data_step2.jsonl").exists()


def test_a_ranged_read_after_evict_and_rewrite_never_mixes_generations(gcs, tmp_path):
    """#31: the index of the old object must not be used on the new one's bytes: pinned, re-listed, re-indexed."""
    from nbtools.errors import NotFoundError

    logs = _write_run(tmp_path, steps=2, per=8)
    url = _upload(gcs, logs, "run5/logs")
    run = trajectories.open_run(url)
    assert run.record(1, 2)["idx"] == 2
    assert storage.evict(url) > 0
    new = [_line(1, 100 + i, 0.25) for i in range(2)]  # the restarted run wrote 2 longer lines
    gcs.fs.pipe(f"{BUCKET}/run5/logs/exp_001/train_data_step1.jsonl", "".join(x + "\n" for x in new).encode())
    with pytest.raises(NotFoundError, match=r"expected idx in 0\.\.1 for step 1, got 2"):
        run.record(1, 2)
    assert run.record(1, 1)["idx"] == 101 and run.record(1, 0)["response"] == json.loads(new[0])["content"][0][1]
    assert trajectories.open_run(url).record(1, 1)["idx"] == 101  # a fresh reader agrees


def test_a_step_deleted_between_listing_and_download_loses_only_that_step(gcs, tmp_path, monkeypatch):
    """#31: the error names step 2 (not the first file of the batch) and the other steps are read."""
    logs = _write_run(tmp_path, steps=3, per=4)
    url = _upload(gcs, logs, "run6/logs")
    run = trajectories.open_run(url)
    real, deleted = storage.ls, []

    def ls_then_delete(u):
        out = real(u)
        if not deleted and any(e.name == "train_data_step2.jsonl" for e in out):
            gcs.fs.rm(f"{BUCKET}/run6/logs/exp_001/train_data_step2.jsonl")
            deleted.append(1)
        return out

    monkeypatch.setattr(storage, "ls", ls_then_delete)
    with pytest.warns(UserWarning, match=r"cannot read train_data_step2\.jsonl .*the other steps were read"):
        df = run.read()
    assert deleted and sorted(set(df.step)) == [1, 3] and len(df) == 8
    assert df.attrs["unreadable_steps"] == [2]
    assert any("train_data_step2.jsonl" in str(p) for p in run.problems.to_dict("records"))
    from nbtools.errors import NotFoundError

    one, two = (f"{url}/exp_001/train_data_step{k}.jsonl" for k in (1, 2))
    storage.evict(url)
    with pytest.raises(NotFoundError, match=r"expected \S*train_data_step2\.jsonl to exist \(listed moments ago\)"):
        storage.fetch_many([(one, storage.info(one)), (two, storage.Entry(two, two.rsplit("/", 1)[1], 10, "1", False))])


def test_missing_bucket_paths_name_the_fix(gcs):
    from nbtools.errors import NotFoundError

    with pytest.raises(NotFoundError, match="found nothing there"):
        trajectories.open_run(f"gs://{BUCKET}/no/such/logs")


def test_tensorboard_scalars_from_a_bucket_equal_the_local_ones(gcs, tmp_path):
    from torch.utils.tensorboard import SummaryWriter

    from nbtools import metrics

    logs = tmp_path / "tb" / "logs"
    w = SummaryWriter(str(logs / "exp_001" / "tensorboard"))
    for i in range(20):
        w.add_scalar("train/reward", i / 20, i)
    w.close()
    url = _upload(gcs, logs, "run4/logs")
    remote, local = metrics.read_tensorboard(url), metrics.read_tensorboard(logs)
    pd.testing.assert_frame_equal(remote, local)
    assert len(metrics.select(remote, "reward")) == 20


def test_checkpoints_are_listed_and_ranked_in_a_bucket_without_reading_weights(gcs, tmp_path, monkeypatch):
    from nbtools import checkpoints

    root = tmp_path / "ck" / "checkpoints"
    for step, acc in ((10, 0.5), (20, 0.9), (30, 0.7)):
        d = root / f"step_{step}" / "policy" / "weights" / "model"
        d.mkdir(parents=True)
        (d / "shard-00001-model-00001-of-00001.safetensors").write_bytes(b"\0" * 1024)
        (root / f"step_{step}" / "training_info.json").write_text(json.dumps({"step": step, "val:accuracy": acc}))
    (root / "tmp_step_40").mkdir()
    url = _upload(gcs, root, "run5/checkpoints")
    fetched = []
    real = storage.read_bytes
    monkeypatch.setattr(storage, "read_bytes", lambda u, *a: fetched.append(u) or real(u, *a))
    df = checkpoints.list_checkpoints(url)
    assert list(df.step) == [10, 20, 30] and set(df.layout) == {"v2_safetensors"} and df.problem.isna().all()
    assert checkpoints.best(url, "val:accuracy") == f"{url}/step_20" and checkpoints.latest(url) == f"{url}/step_30"
    # never a weight file: each step's training_info.json, and NeMo-RL main's status file at the root (absent here)
    assert fetched and all(u.endswith(("training_info.json", "latest_checkpoint_status.json")) for u in fetched)


def _verl_logs(root):
    """A verl run's log dir as nbtools points verl there: ``rollout_data/{step}.jsonl`` (two GRPO groups of 4 per
    step, verl's interleaved repeat), ``validation_data/0.jsonl``, and a TensorBoard dir."""
    from nbtools.trainers.verl.files import dump_generations

    logs = root / "logs"
    for step in (1, 2, 3):
        inputs = [p for p in ("max 1 2 3", "max 4 5 6") for _ in range(4)]
        outputs = [f"<think>s{step}</think> <answer>{i % 7}</answer>" for i in range(8)]
        dump_generations(logs / "rollout_data", step, inputs=inputs, outputs=outputs, gts=["3"] * 4 + ["6"] * 4,
                         scores=[float(i % 2) for i in range(8)], extra={"acc": [i % 2 == 1 for i in range(8)]})
    dump_generations(logs / "validation_data", 0, inputs=["max 7 8 9"], outputs=["<answer>9</answer>"], gts=["9"],
                     scores=[1.0])
    (logs / "tensorboard").mkdir()
    (logs / "tensorboard" / "events.out.tfevents.1.host").write_bytes(b"")
    return logs


def test_a_verl_run_in_a_bucket_reads_like_the_same_run_on_disk(gcs, tmp_path):
    logs = _verl_logs(tmp_path)
    url = _upload(gcs, logs, "verl1/logs")
    local, remote = trajectories.open_run(logs), trajectories.open_run(url)
    assert isinstance(remote, verl.VerlRun) and remote.remote == url
    assert remote.steps == local.steps == [1, 2, 3] and remote.val_steps == local.val_steps == [0]
    pd.testing.assert_frame_equal(remote.read(), local.read())
    assert remote.record(2, 5)["response"] == local.record(2, 5)["response"] and remote.read(2)["group"].nunique() == 2
    assert len(remote.summary()) == 3 and remote.skipped == 0
    dumps = trajectories.open_run(f"{url}/rollout_data")  # verl's trainer.rollout_data_dir itself
    assert isinstance(dumps, verl.VerlRun) and dumps.steps == [1, 2, 3]


def test_a_verl_step_written_after_opening_is_read_when_opened_again(gcs, tmp_path):
    logs = _verl_logs(tmp_path)
    url = _upload(gcs, logs, "verl2/logs")
    assert trajectories.open_run(url).steps == [1, 2, 3]
    line = json.dumps({"input": "max 1 1 1", "output": "<answer>1</answer>", "gts": "1", "score": 1.0, "step": 4})
    gcs.fs.pipe(f"{BUCKET}/verl2/logs/rollout_data/4.jsonl", (line + "\n").encode())
    gcs.fs.rm(f"{BUCKET}/verl2/logs/rollout_data/1.jsonl")
    again = trajectories.open_run(url)
    assert again.steps == [2, 3, 4] and again.record(4, 0)["reward"] == 1.0
