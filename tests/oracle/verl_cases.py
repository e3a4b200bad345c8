"""The verl oracle's inputs, shared by tests/oracle/test_verl_oracle.py (which asserts on what verl made of them) and
tests/oracle/conftest.py (which runs them in the same verl process per release as the checkpoint oracle's job)."""

from __future__ import annotations

from pathlib import Path

from nbtools import config
from nbtools.trainers import verl

ROOT = Path(__file__).resolve().parents[2]
REF = {"0.7.0": "v0.7.0", "0.9.1": "v0.9.0"}  # nbtools' release facts each PyPI release is checked against
N = 4
PROMPTS = ["Natalia sold 48 clips . How many ?", "Weng earns 12 an hour . How much ?",
           "Betty needs 100 dollars . How much more ?", "James writes 3 pages . How many ?"]
MICRO = ["actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=4",
         "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=8",
         "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=8"]
SCORES = [("72", "48 + 24 = 72 #### 72"), ("72", "so \\boxed{72}"), ("10", "#### 1,0"), ("10", "#### 10.0"),
          ("3", "#### 3 then #### 4"), ("5", "x" * 400 + " #### 5"), ("5", "#### 5 " + "y" * 400), ("-2", "#### -2")]


def rows():
    out = []
    for p, prompt in enumerate(PROMPTS):
        for k in range(N):
            score = 1.0 if p == 3 else float(k % 2 == 0)  # prompt 3: no signal
            out.append({"prompt": prompt, "response": " ".join(["step"] * (3 + (p * 5 + k * 3) % 7)) + f" #### {p}",
                        "gt": str(p), "score": score})
    return out


def cfg(ref, overrides=None, **over):
    c = config.load(ROOT / "experiments" / "gke-b200-verl.yaml", backend="gke", overrides={"trainer.verl_ref": ref})
    if overrides is not None:
        over["trainer.overrides"] = overrides
    return c.replace(**over) if over else c


def cases(ref):
    """name -> experiment; verl and the lint must agree on each."""
    return {
        "experiment": cfg(ref),
        "small-batch-default-mini": cfg(ref, MICRO, **{"grpo.num_prompts_per_step": 64}),
        "small-batch-own-mini": cfg(ref, [*MICRO, "actor_rollout_ref.actor.ppo_mini_batch_size=64"],
                                    **{"grpo.num_prompts_per_step": 64}),
        "no-micro-batches": cfg(ref, ["actor_rollout_ref.actor.ppo_mini_batch_size=256"]),
        "gpus-do-not-divide": cfg(ref, [*MICRO, "actor_rollout_ref.actor.ppo_mini_batch_size=8"],
                                  **{"grpo.num_prompts_per_step": 9}),
        "every-field-set": cfg(ref, **{"grpo.temperature": 0.7, "grpo.seed": 7, "grpo.normalize_rewards": False,
                                       "grpo.max_val_samples": 64, "checkpointing.keep_top_k": 2,
                                       "checkpointing.save_optimizer": False, "checkpointing.save_consolidated": True}),
    }


# the checkpoint oracle's job (tests/oracle/verl_checkpoint.py)
STRATEGIES = ("fsdp2", "fsdp")
STEPS, KEEP = [1, 2, 3], 2


def dump_job(version: str, out: Path) -> dict:
    """tests/oracle/verl_oracle.py's job for ``version``: the rollouts to dump into ``out``, the scores, the cases."""
    return {"out": str(out), "step": 1, "n": N, "norm_adv": True, "rows": rows(),
            "scores": [["openai/gsm8k", sol, gt] for gt, sol in SCORES],
            "validate": [{"name": k, "overrides": verl.overrides(c)} for k, c in cases(REF[version]).items()]}
