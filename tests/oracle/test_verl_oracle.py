"""verl's own code as the oracle, per release: what nbtools derives, reads and recomputes must be what verl does.

Each release runs in its own venv (``tools/verl_oracle_venv.sh``: verl from PyPI with ``--no-deps``, beside the project
venv's torch 2.13.0+cpu; cached under the git-ignored ``.venv-verl/<version>``). ``tests/oracle/verl_oracle.py`` runs
one GRPO step's batch through that release's code (see its docstring), in the one verl process per release that
also writes the checkpoint oracle's checkpoints (tests/oracle/conftest.py); the tests
compare:

- groups: nbtools' groups of verl's own dump equal the prompts' (v0.7.0: after ``_balance_batch`` reordered them;
  0.9.1: the V1 trainer's uid sort);
- advantages: ``rewards.rescore(..., cfg=<a verl experiment>)`` recomputes ``compute_grpo_outcome_advantage``'s (0.7.0)
  and ``compute_advantage_for_multi_trajectories``' (0.9.1) on those groups;
- scores: ``rewards.verl_gsm8k`` equals ``default_compute_score("openai/gsm8k", ...)``;
- validation: nbtools' overrides compose in verl's own Hydra config, and what verl's ``validate_config`` refuses,
  the lint refuses first (blocking ``verl-validation``), and the reverse.

Doubles kept, and why (verl at these releases cannot run them on this CPU machine, or not within the CI budget):
- the trainer objects: ``RayPPOTrainer.__init__`` / the V1 ``PPOTrainer`` start Ray worker groups and vLLM; the
  methods run unbound on a namespace, and 0.9.1's TransferQueue read (``tq.kv_batch_get``) is answered from memory;
- ``verl/workers/fsdp_workers.py``'s per-GPU mini-batch check runs in ``ActorRolloutRefWorker.__init__`` after
  ``torch.distributed`` and a device mesh exist: the lint's rule for it is checked by
  tests/trainers/test_verl_validation.py against the facts (tag and path in ``nbtools/trainers/verl/_validate.py``);
- checkpoints: verl's own worker, checkpoint manager, trainer save and model merger run in
  tests/oracle/test_verl_checkpoint_oracle.py (with the CPU shims its script names).

``NBTOOLS_VERL_ORACLE`` picks the releases (default ``0.7.0 0.9.1``); which ran is printed at the end of the run.
"""

from __future__ import annotations

import os

import numpy as np
import pytest

from nbtools import rewards, trajectories
from nbtools.launch.lint import lint
from tests.oracle.verl_cases import PROMPTS, REF, SCORES, N
from tests.oracle.verl_cases import cases as _cases
from tests.oracle.verl_cases import cfg as _cfg

SLOW_FIXTURES = ("oracle",)  # a venv per release and verl's imports: `make test`, not the inner loop
RELEASES = os.environ.get("NBTOOLS_VERL_ORACLE", "0.7.0 0.9.1").split()


@pytest.fixture(scope="module", params=RELEASES)
def oracle(request, verl_release):
    """verl's dump, validation and scores for a release (run with the checkpoint oracle's job: tests/oracle/conftest.py)."""
    version = request.param
    out, result = verl_release(version)
    return version, REF[version], out / "rollout_data", result["oracle"]


def test_groups_of_verls_own_dump(oracle):
    version, _, dump, result = oracle
    df = trajectories.open_run(dump).read(1)
    assert len(df) == N * len(PROMPTS) and df.groupby("group")["prompt"].nunique().eq(1).all()
    assert sorted(df.groupby("group").size()) == [N] * len(PROMPTS)
    if version.startswith("0.7"):  # the balanced order scatters a prompt's samples; nbtools still finds them
        rows = result["dump"]["rows"]
        assert rows != sorted(rows), "verl's _balance_batch left the order as it was: the test proves nothing"
        assert [r // N for r in rows] == [PROMPTS.index(p) for p in df["prompt"]]
    else:
        assert df["uid"].nunique() == N * len(PROMPTS)
        assert df.groupby("group")["uid"].apply(lambda u: u.str.rsplit("_", n=2).str[0].nunique()).eq(1).all()
    assert trajectories.open_run(dump).summary(1).iloc[0]["no_signal_share"] == 0.25


def test_rescored_advantages_are_verls(oracle):
    version, ref, dump, result = oracle
    df = trajectories.open_run(dump).read(1)
    res = rewards.rescore(df, [{"name": "verl_gsm8k", "weight": 1.0}], cfg=_cfg(ref), progress=False)
    assert res.baseline == "verl_group_mean"
    mine = res.samples.sort_values("idx")["old_advantage"].to_numpy()
    if version.startswith("0.7"):
        theirs = np.array(result["dump"]["advantages"])  # in the dump's (balanced) order
    else:
        theirs = np.array([result["dump"]["advantages_by_uid"][u] for u in df.sort_values("idx")["uid"]])
    assert mine == pytest.approx(theirs, abs=1e-5)
    nemo = rewards.rescore(df, [{"name": "verl_gsm8k", "weight": 1.0}], leave_one_out=True, progress=False)
    assert not np.allclose(nemo.samples.sort_values("idx")["old_advantage"].to_numpy(), theirs, atol=1e-3)


def test_scores_are_default_compute_score(oracle):
    _, _, _, result = oracle
    mine = [rewards.verl_gsm8k(gt, sol)[0] for gt, sol in SCORES]
    assert mine == result["scores"]


def test_lint_refuses_what_verl_refuses(oracle):
    version, ref, _, result = oracle
    verdicts = result["validate"]
    for name, cfg in _cases(ref).items():
        # the rules about the config itself (keys, validation); verl-image is about the cluster's image, not the config
        blocking = [f for f in lint(cfg).findings if f.severity == "blocking" and f.rule in ("verl-keys", "verl-validation")]
        verl_ok = verdicts[name] == "ok"
        assert verl_ok == (not blocking), f"verl {version} says {verdicts[name]!r}; lint says {blocking}"
    assert verdicts["experiment"] == "ok" and verdicts["every-field-set"] == "ok"
    assert "ppo_mini_batch_size" in verdicts["small-batch-default-mini"]
