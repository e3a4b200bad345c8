"""verl's own code as the oracle, per release: what nbtools derives, reads and recomputes must be what verl does.

Each release runs in its own venv (``tools/verl_oracle_venv.sh``: verl from PyPI with ``--no-deps``, beside the project
venv's torch 2.13.0+cpu; cached under the git-ignored ``.venv-verl/<version>``). ``tests/oracle/verl_oracle.py`` runs
one GRPO step's batch through that release's code (see its docstring) in one subprocess per release; the tests
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
- checkpoints: verl's FSDP checkpoint manager and model merger are not run here (not attempted in this change); the
  merge tests use the project's writer of verl's layout (tests/checkpoints).

``NBTOOLS_VERL_ORACLE`` picks the releases (default ``0.7.0 0.9.1``); which ran is printed at the end of the run.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from nbtools import config, rewards, trajectories
from nbtools.launch.lint import lint
from nbtools.trainers import verl

ROOT = Path(__file__).resolve().parents[2]
SLOW_FIXTURES = ("oracle",)  # a venv per release and verl's imports: `make test`, not the inner loop
RELEASES = os.environ.get("NBTOOLS_VERL_ORACLE", "0.7.0 0.9.1").split()
REF = {"0.7.0": "v0.7.0", "0.9.1": "v0.9.0"}  # nbtools' release facts each PyPI release is checked against
N = 4
PROMPTS = ["Natalia sold 48 clips . How many ?", "Weng earns 12 an hour . How much ?",
           "Betty needs 100 dollars . How much more ?", "James writes 3 pages . How many ?"]
MICRO = ["actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=4",
         "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=8",
         "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=8"]
SCORES = [("72", "48 + 24 = 72 #### 72"), ("72", "so \\boxed{72}"), ("10", "#### 1,0"), ("10", "#### 10.0"),
          ("3", "#### 3 then #### 4"), ("5", "x" * 400 + " #### 5"), ("5", "#### 5 " + "y" * 400), ("-2", "#### -2")]


def _rows():
    rows = []
    for p, prompt in enumerate(PROMPTS):
        for k in range(N):
            score = 1.0 if p == 3 else float(k % 2 == 0)  # prompt 3: no signal
            rows.append({"prompt": prompt, "response": " ".join(["step"] * (3 + (p * 5 + k * 3) % 7)) + f" #### {p}",
                         "gt": str(p), "score": score})
    return rows


def _cfg(ref, overrides=None, **over):
    cfg = config.load(ROOT / "experiments" / "gke-b200-verl.yaml", backend="gke", overrides={"trainer.verl_ref": ref})
    if overrides is not None:
        over["trainer.overrides"] = overrides
    return cfg.replace(**over) if over else cfg


def _cases(ref):
    """name -> experiment; verl and the lint must agree on each."""
    return {
        "experiment": _cfg(ref),
        "small-batch-default-mini": _cfg(ref, MICRO, **{"grpo.num_prompts_per_step": 64}),
        "small-batch-own-mini": _cfg(ref, [*MICRO, "actor_rollout_ref.actor.ppo_mini_batch_size=64"],
                                     **{"grpo.num_prompts_per_step": 64}),
        "no-micro-batches": _cfg(ref, ["actor_rollout_ref.actor.ppo_mini_batch_size=256"]),
        "gpus-do-not-divide": _cfg(ref, [*MICRO, "actor_rollout_ref.actor.ppo_mini_batch_size=8"],
                                   **{"grpo.num_prompts_per_step": 9}),
        "every-field-set": _cfg(ref, **{"grpo.temperature": 0.7, "grpo.seed": 7, "grpo.normalize_rewards": False,
                                        "grpo.max_val_samples": 64, "checkpointing.keep_top_k": 2,
                                        "checkpointing.save_optimizer": False, "checkpointing.save_consolidated": True}),
    }


@pytest.fixture(scope="module", params=RELEASES)
def oracle(request, tmp_path_factory):
    version = request.param
    t0 = time.monotonic()
    venv = ROOT / ".venv-verl" / version
    built = subprocess.run(["bash", str(ROOT / "tools" / "verl_oracle_venv.sh"), sys.executable, str(venv), version],
                           capture_output=True, text=True)
    assert built.returncode == 0, f"building the verl {version} venv failed:\n{built.stderr[-3000:]}"
    t1 = time.monotonic()
    python = built.stdout.strip().splitlines()[-1]
    out = tmp_path_factory.mktemp(f"verl-{version}")
    ref = REF[version]
    job = {"out": str(out / "rollout_data"), "step": 1, "n": N, "norm_adv": True, "rows": _rows(),
           "scores": [["openai/gsm8k", sol, gt] for gt, sol in SCORES],
           "validate": [{"name": k, "overrides": verl.overrides(c)} for k, c in _cases(ref).items()]}
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}
    ran = subprocess.run([python, str(Path(__file__).with_name("verl_oracle.py"))], input=json.dumps(job),
                         capture_output=True, text=True, env=env)
    assert ran.returncode == 0, f"verl {version}'s code failed:\n{ran.stderr[-4000:]}"
    result = json.loads(ran.stdout.strip().splitlines()[-1])
    assert result["verl"] == version
    runs = os.environ.get("NBTOOLS_RUNS_DIR")
    if runs:  # the session's summary lists the releases that ran (tests/oracle/conftest.py)
        Path(runs).mkdir(parents=True, exist_ok=True)
        with open(Path(runs) / "verl-oracle-releases.txt", "a") as f:
            f.write(f"verl {version}: venv {t1 - t0:.0f} s, verl's code {time.monotonic() - t1:.0f} s\n")
    return version, ref, out / "rollout_data", result


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
