"""GRPO groups of verl dumps in the order each release writes them, and the dump lines that must not kill a read.

The orders, as verl writes them (checked against the releases' source; ``tests/oracle`` runs verl's own code):
- v0.7.0 (``verl/trainer/ppo/ray_trainer.py`` ``fit``): ``batch.repeat(rollout.n, interleave=True)`` then, with the
  default ``trainer.balance_batch: true``, ``_balance_batch`` reorders the rows by sequence length across DP ranks
  before ``_log_rollout_data`` dumps them without any uid: a prompt's samples are scattered;
- 0.9.x V1 (``verl/trainer/ppo/v1/trainer_base.py`` ``_log_rollout_data`` at v0.9.1): rows sorted by their key
  ``{sample}_{rollout}_{output}``, dumped as ``uid``: one uid per sample, the group is its sample part.

Before this fix nbtools grouped "runs of consecutive equal prompts" (v0.7.0: 4 prompts x 4 samples became ~13 groups)
and factorized the whole uid (0.9.x: every sample its own group, "no signal" everywhere).
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from nbtools import rewards
from nbtools import trajectories as tj
from nbtools.trainers.verl.files import dump_generations

PROMPTS = ["q0 what is 1+1", "q1 what is 2+2", "q2 what is 3+3", "q3 what is 4+4"]
N = 4
# v0.7.0's _balance_batch on 16 rows over 2 DP ranks moves rows like this (a permutation where no two rows of a
# group are neighbours; the oracle tests run the real function)
BALANCED = [0, 5, 10, 15, 4, 9, 14, 3, 8, 13, 2, 7, 12, 1, 6, 11]


def _rows():
    rows = []
    for p, prompt in enumerate(PROMPTS):
        for k in range(N):
            score = float(k == 0) if p < 3 else 1.0  # prompt 3: every sample right -> no signal
            rows.append((prompt, f"resp {p}.{k} #### {p}", str(p), score))
    return rows


def _dump(d, order, uid=False):
    rows = [_rows()[i] for i in order]
    extra = {"uid": [f"6f1c-{i // N}a_{i % N}_0" for i in order]} if uid else {}
    dump_generations(d, 1, inputs=[r[0] for r in rows], outputs=[r[1] for r in rows], gts=[r[2] for r in rows],
                     scores=[r[3] for r in rows], extra=extra)


def test_v070_balanced_order_rebuilds_the_prompt_groups(tmp_path):
    _dump(tmp_path, BALANCED)
    run = tj.open_run(tmp_path)
    df = run.read(1)
    assert df.groupby("group")["prompt"].nunique().eq(1).all()
    assert df.groupby("group").size().tolist() == [N] * 4
    s = run.summary(1).iloc[0]
    assert s["groups"] == 4 and s["no_signal_share"] == 0.25


def test_v09_uid_groups_by_the_sample_part(tmp_path):
    order = sorted(range(16), key=lambda i: (f"s{i // N}", i % N))  # verl sorts by (sample, rollout, output)
    _dump(tmp_path, order, uid=True)
    df = tj.open_run(tmp_path).read(1)
    assert df["uid"].nunique() == 16 and df["group"].nunique() == 4
    assert df.groupby("group")["prompt"].nunique().eq(1).all()
    assert tj.uid_sample("6f1c-2a_0_3") == "6f1c-2a" and tj.uid_sample("my_uid") == "my_uid"


def test_rescore_uses_the_groups_and_verls_baseline(tmp_path):
    """verl's GRPO baseline is the whole group's mean (core_algos.py compute_grpo_outcome_advantage), not NeMo-RL's
    leave-one-out, whatever grpo.use_leave_one_out_baseline says."""
    from pathlib import Path

    from nbtools import config

    _dump(tmp_path, BALANCED)
    df = tj.open_run(tmp_path).read(1)
    cfg = config.load(Path(__file__).resolve().parents[2] / "experiments" / "gke-b200-verl.yaml")
    result = rewards.rescore(df, [{"name": "verl_gsm8k", "weight": 1.0}], cfg=cfg, progress=False)
    assert result.baseline == "verl_group_mean" and len(result.groups) == 4
    assert result.groups["old_signal"].tolist() == [True, True, True, False]
    s = result.samples
    one = s[s["prompt"] == PROMPTS[0]].sort_values("old_reward")
    r = np.array([0.0, 0.0, 0.0, 1.0])
    expect = (r - r.mean()) / (r.std(ddof=1) + 1e-6)
    assert one["old_advantage"].to_numpy() == pytest.approx(expect)
    nemo = rewards.rescore(df, [{"name": "verl_gsm8k", "weight": 1.0}], leave_one_out=True, progress=False)
    assert nemo.baseline == "leave_one_out" and len(nemo.groups) == 4


def test_verl_advantages_single_sample_and_flat_groups():
    adv = rewards.verl_grpo_advantages(np.array([2.0, 1.0, 1.0, 0.5]), np.array([0, 1, 1, 2]), normalize=True)
    assert adv[0] == pytest.approx(2.0 / (1 + 1e-6)) and adv[1] == adv[2] == 0.0  # verl: mean 0, std 1 for one
    assert rewards.verl_grpo_advantages(np.array([2.0]), np.array([0]), normalize=False)[0] == 2.0


def test_explorer_groups_a_balanced_dump(tmp_path):
    from nbtools.explorer._query import ExplorerData, Query

    _dump(tmp_path, BALANCED)
    data = ExplorerData(tj.open_run(tmp_path))
    page = data.page(Query(step=1, show="groups with no signal"), size=32)
    assert page.total == N and (page.rows["prompt"] == PROMPTS[3]).all()
    assert set(data.table(1)["group_size"]) == {N}


def test_damaged_lines_are_skipped_and_listed(tmp_path):
    """issue 41: a JSON-array line cut mid-UTF-8 in its first 80 bytes, non-UTF-8 bytes in an array line, and a uid
    that is a list or dict each killed the whole read (UnicodeDecodeError, unhashable type)."""
    good = [json.dumps({"input": "p", "output": f"o{i}", "gts": "1", "score": 1.0, "step": 1, "uid": f"u_{i}_0"})
            for i in range(2)]
    cut = json.dumps(["x" + "é" * 100], ensure_ascii=False).encode()  # valid JSON; byte 80 splits an é
    assert cut[79:80] == b"\xc3"
    lines = [good[0].encode(), cut, b'["\xff\xfe not utf-8"]',
             json.dumps({"input": "p", "output": "x", "score": 0.0, "uid": ["a"]}).encode(),
             json.dumps({"input": "p", "output": "y", "score": 0.0, "uid": {"a": 1}}).encode(), good[1].encode()]
    (tmp_path / "1.jsonl").write_bytes(b"\n".join(lines) + b"\n")
    run = tj.open_run(tmp_path)
    df = run.read(1)
    assert df["response"].tolist() == ["o0", "o1"] and run.skipped == 4
    assert sorted(run.problems["line"].tolist()) == [2, 3, 4, 5]
    assert run.problems["message"].str.contains("uid is a JSON").sum() == 2
