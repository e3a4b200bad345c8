"""verl rollout / validation dumps read through nbtools.trajectories with NeMo-RL's columns.

The dumps are written by :func:`dump_generations`, which does what verl v0.7.0's
``RayPPOTrainer._dump_generations`` does (verl/trainer/ppo/ray_trainer.py at tag v0.7.0): ``{step}.jsonl`` with
``input``/``output``/``gts``/``score``/``step`` plus every reward-extra-info list of the batch's length, one
``json.dumps(entry, ensure_ascii=False)`` per line, ``"\\n".join(lines) + "\\n"``, written in one go.
"""

from __future__ import annotations

import json
import math
import os

import pytest

from nbtools import trajectories as tj
from nbtools.errors import ConfigError, NotFoundError
from nbtools.trainers import verl


def dump_generations(dump_path, step, inputs, outputs, gts, scores, reward_extra_infos_dict):
    os.makedirs(dump_path, exist_ok=True)
    n = len(inputs)
    base = {"input": inputs, "output": outputs, "gts": gts, "score": scores, "step": [step] * n}
    for k, v in reward_extra_infos_dict.items():
        if len(v) == n:
            base[k] = v
    lines = [json.dumps({k: v[i] for k, v in base.items()}, ensure_ascii=False) for i in range(n)]
    with open(os.path.join(dump_path, f"{step}.jsonl"), "w") as f:
        f.write("\n".join(lines) + "\n")


def _rollouts(d, step, n=4):
    """Two GSM8K-style prompts, each repeated n times interleaved (verl's batch.repeat(interleave=True))."""
    prompts = ["Natalia sold clips… How many? Let's think step by step", "Weng earns $12 an hour… ünïcode"]
    inputs = [p for p in prompts for _ in range(n)]
    outputs = [f"<think>work {step}.{i}</think><answer>{i % 3}</answer> #### {i % 3}" for i in range(2 * n)]
    acc = [i % 3 == 0 for i in range(2 * n)]
    scores = [1.0 if a else 0.0 for a in acc]
    if step == 2:  # the second prompt's group: all correct -> no signal
        scores[n:] = [1.0] * n
        acc[n:] = [True] * n
    dump_generations(d, step, inputs, outputs, ["72"] * n + ["10"] * n, scores,
                     {"acc": acc, "pred": [str(i % 3) for i in range(2 * n)], "short": [1]})


@pytest.fixture()
def run_dirs(tmp_path):
    roll, val = tmp_path / "rollouts", tmp_path / "validation"
    for s in (1, 2, 3):
        _rollouts(roll, s)
    dump_generations(val, 0, ["q1", "q2"], ["a", "b"], ["1", "2"], [1.0, 0.0], {})
    return roll, val


def test_read_columns_groups_and_summary(run_dirs):
    roll, val = run_dirs
    run = tj.open_run(roll)
    assert isinstance(run, verl.VerlRun) and run.steps == [1, 2, 3]
    df = run.read(2)
    assert list(df.columns[:9]) == list(tj.COLUMNS)
    assert len(df) == 8 and df["idx"].tolist() == list(range(8)) and (df["step"] == 2).all()
    assert df["group"].tolist() == [0] * 4 + [1] * 4
    assert df["prompt"].iloc[5].endswith("ünïcode") and df["answer"].iloc[3] == "0" and df["think"].iloc[0] == "work 2.0"
    assert df["ground_truth"].tolist() == ["72"] * 4 + ["10"] * 4 and df["pred"].iloc[4] == "1"
    assert "short" not in df  # a reward-extra list of another length is not dumped by verl
    assert math.isnan(df["generation_length"].iloc[0]) and math.isnan(df["advantage"].iloc[0])
    assert df["env_observation"].tolist()[:4] == ["correct", "incorrect", "incorrect", "correct"]
    s = run.summary(2).iloc[0]
    assert s["samples"] == 8 and s["groups"] == 2 and s["no_signal_share"] == 0.5
    assert s["reward_mean"] == pytest.approx(sum(df["reward"]) / 8) and s["correct_share"] == pytest.approx(6 / 8)
    groups = tj.group_table(df, group_by="group")
    assert groups["no_signal"].tolist() == [False, True]
    assert len(run.read()) == 24 and run.read(range(1, 3))["step"].unique().tolist() == [1, 2]


def test_validation_record_and_search(run_dirs):
    roll, val = run_dirs
    run = verl.open_verl_run(roll, val)
    assert run.val_steps == [0]
    assert run.read(0, kind="val")["reward"].tolist() == [1.0, 0.0]
    rec = run.record(3, 6)
    assert rec["response"].startswith("<think>work 3.6") and rec["group"] == 1 and rec["reward"] == 1.0
    hits = run.search("WENG", step=1)
    assert len(hits) == 4 and (hits["group"] == 1).all()
    assert len(run.search(r"answer>0<", regex=True)) == 9  # i % 3 == 0 for i in 0..7, three steps
    with pytest.raises(ConfigError, match="regex"):
        run.search("(", regex=True)
    with pytest.raises(NotFoundError, match="the run has steps 1..3"):
        run.read(9)
    with pytest.raises(NotFoundError, match="idx 99"):
        run.record(1, 99)


def test_live_and_damaged_lines(run_dirs):
    roll, _ = run_dirs
    good = (roll / "1.jsonl").read_bytes()
    (roll / "4.jsonl").write_bytes(good.replace(b"\n", b"\n{not json\n", 1) + b'{"input": "half-writ')
    run = tj.open_run(roll)
    df = run.read(4)
    assert len(df) == 8 and run.skipped == 1 and run.pending == {"4.jsonl": len(b'{"input": "half-writ')}
    p = run.problems.iloc[0]
    assert (p["file"], p["line"], p["kind"]) == ("4.jsonl", 2, "malformed")
    assert df["idx"].tolist() == [0, *range(2, 9)]  # idx counts lines, as for NeMo-RL dumps


def test_uid_groups_and_cli(run_dirs, tmp_path, capfd):
    d = tmp_path / "uid"
    dump_generations(d, 7, ["p", "p", "p", "p"], ["a", "b", "c", "d"], [None] * 4, [1.0, 0.0, 1.0, 1.0],
                     {"uid": ["u1", "u2", "u1", "u2"]})
    df = tj.open_run(d).read(7)
    assert df["group"].tolist() == [0, 1, 0, 1]
    from nbtools.cli import main

    assert main(["trajectories", str(run_dirs[0]), "--step", "2", "--json"]) == 0
    out = json.loads(capfd.readouterr().out)
    assert out["steps"] == [1, 2, 3] and out["records"] == 24 and len(out["rows"]) == 8


def test_explorer_reads_a_verl_run(run_dirs):
    from nbtools.explorer._query import ExplorerData, Query

    data = ExplorerData(tj.open_run(run_dirs[0]))
    assert data.steps == [1, 2, 3]
    page = data.page(Query(step=2, show="groups with no signal"), size=16)
    assert page.total == 4 and page.rows["response"].str.startswith("<think>work 2.").all()
    assert data.page(Query(step=1, search="weng"), size=16).total == 4


def test_verls_reader_lives_in_its_trainers_folder():
    """nbtools.trajectories names no trainer: open_run reaches verl's reader through its layout, and the names that
    moved to nbtools.trainers.verl say where they went."""
    with pytest.raises(AttributeError, match=r"moved to nbtools\.trainers\.verl\.open_verl_run"):
        tj.open_verl_run  # noqa: B018
    assert verl.LAYOUT.open_trajectories is not None and verl.VerlRun.__module__ == "nbtools.trainers.verl._trajectories"
