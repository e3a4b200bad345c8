"""Issue 27 item 7: NeMo-RL main finalises checkpoints in a background thread (``CheckpointManager.begin_finalization``
renames ``tmp_step_N`` to ``step_N`` after async writes finish) and writes ``latest_checkpoint_status.json`` at the
checkpoint root as the finalisation *starts* (``nemo_rl/algorithms/grpo.py`` ``_write_latest_checkpoint_status``,
NVIDIA-NeMo/RL main at 7ea279ab). A lingering ``tmp_step_N`` is in progress, never a checkpoint, on disk and in GCS.
"""

from __future__ import annotations

import json

import pytest

from nbtools import checkpoints as ck
from nbtools.errors import NotFoundError

BUCKET = "sim-bucket"
pytestmark = pytest.mark.usefixtures("storage_cache")  # the gcs fixture: tests/conftest.py


def _layout(put) -> None:
    """step_1, step_2 done; tmp_step_3 lingering with a better metric and weights; the status file names step 3."""
    for n, acc in ((1, 0.2), (2, 0.5), (3, 0.99)):
        d = f"{'tmp_' if n == 3 else ''}step_{n}"
        put(f"{d}/training_info.json", json.dumps({"step": n, "total_steps": n, "val:accuracy": acc}))
        put(f"{d}/policy/weights/.metadata", "x")
    put("latest_checkpoint_status.json", json.dumps({"last_successful_ckpt_save_completion": 1795600800.0,
                                                     "last_checkpoint_step": 3}))


@pytest.fixture(params=["disk", "gcs"])
def root(request, tmp_path):
    if request.param == "disk":
        def put(rel, text):
            p = tmp_path / "ckpt" / rel
            p.parent.mkdir(parents=True, exist_ok=True)
            p.write_text(text)
        _layout(put)
        return tmp_path / "ckpt"
    g = request.getfixturevalue("gcs")
    prefix = f"ckpt-{tmp_path.name}"
    _layout(lambda rel, text: g.fs.pipe(f"{BUCKET}/{prefix}/{rel}", text.encode()))
    return f"gs://{BUCKET}/{prefix}"


def _name(p) -> str:
    return str(p).rstrip("/").rsplit("/", 1)[-1]


def test_a_lingering_tmp_step_is_in_progress_never_a_checkpoint(root):
    df = ck.list_checkpoints(root)
    assert list(df["step"]) == [1, 2]
    assert df.attrs["in_progress"] == [3] and ck.in_progress(root) == [3]
    assert df.attrs["status"]["last_checkpoint_step"] == 3  # the status file may name a step still being finalised
    assert _name(ck.best(root, metric="val:accuracy")) == "step_2"
    assert _name(ck.latest(root)) == "step_2"


def test_only_a_tmp_step_says_it_is_being_finalised(tmp_path):
    (tmp_path / "ckpt" / "tmp_step_1" / "policy").mkdir(parents=True)
    with pytest.raises(NotFoundError, match=r"tmp_step_1 is still being written or finalised") as e:
        ck.best(tmp_path / "ckpt")
    assert "never use a tmp_step_N" in str(e.value)
    (tmp_path / "ckpt" / "step_1").mkdir()  # renamed (the tmp dir may still be there for a moment): done
    assert ck.in_progress(tmp_path / "ckpt") == [] and _name(ck.latest(tmp_path / "ckpt")) == "step_1"
    assert ck.checkpoint_status(tmp_path / "ckpt") is None  # v0.5.0 / v0.7.0 write no status file


def test_at_step_picks_the_named_step_never_a_tmp_one(root):
    """Issue 42 item 3: 06 and the CLI merge the step the user names (tutorial 000 scores step 30), on disk and in GCS."""
    assert _name(ck.at_step(root, 1)) == "step_1" and _name(ck.at_step(root, 2)) == "step_2"
    with pytest.raises(NotFoundError, match=r"no complete checkpoint of step 3 .*\(complete steps: 1, 2\)"):
        ck.at_step(root, 3)  # tmp_step_3 is being written: not a checkpoint yet
    with pytest.raises(Exception, match="step must be a checkpoint's step number"):
        ck.at_step(root, "2")
