"""verl's start-up validation, refused by the lint first, naming the key (issue 40: ``train_batch_size`` below
``ppo_mini_batch_size`` was accepted by the lint and refused by verl after the cluster started).

The rules are verl's (``verl/utils/config.py`` validate_config, ``verl/workers/config/actor.py``,
``verl/workers/fsdp_workers.py`` at v0.7.0 and v0.9.1); tests/oracle runs verl's own validate_config on the same
composed configs.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from nbtools import config
from nbtools.launch.lint import lint

ROOT = Path(__file__).resolve().parents[2]


def _cfg(release="v0.7.0", overrides=None, **over):
    cfg = config.load(ROOT / "experiments" / "gke-b200-verl.yaml", backend="gke",
                      overrides={"trainer.verl_ref": release})
    if overrides is not None:
        over["trainer.overrides"] = overrides
    return cfg.replace(**over) if over else cfg


def _hits(cfg):
    return [f for f in lint(cfg).findings if f.rule == "verl-validation"]


MICRO = ["actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=4",
         "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=8",
         "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=8"]


@pytest.mark.parametrize("release", ["v0.7.0", "v0.9.0"])
def test_the_experiment_passes(release):
    assert _hits(_cfg(release)) == []


@pytest.mark.parametrize("release", ["v0.7.0", "v0.9.0"])
def test_train_batch_below_verls_default_mini_batch(release):
    hits = _hits(_cfg(release, MICRO, **{"grpo.num_prompts_per_step": 64}))
    assert len(hits) == 1 and hits[0].severity == "blocking" and hits[0].key == "grpo.num_prompts_per_step"
    assert "actor_rollout_ref.actor.ppo_mini_batch_size (256, verl's default)" in hits[0].message
    assert "actor_rollout_ref.actor.ppo_mini_batch_size=64" in hits[0].fix
    ok = _cfg(release, [*MICRO, "actor_rollout_ref.actor.ppo_mini_batch_size=64"], **{"grpo.num_prompts_per_step": 64})
    assert _hits(ok) == []


def test_micro_batches_missing_and_divisibility():
    hits = _hits(_cfg(overrides=["actor_rollout_ref.actor.ppo_mini_batch_size=256"]))
    assert {h.message.split(" nor ")[0] for h in hits} == {
        "neither actor_rollout_ref.actor.ppo_micro_batch_size", "neither actor_rollout_ref.rollout.log_prob_micro_batch_size",
        "neither actor_rollout_ref.ref.log_prob_micro_batch_size"}
    odd = _hits(_cfg(overrides=[*MICRO[1:], "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=48"]))
    assert len(odd) == 1 and odd[0].key == "trainer.overrides[2]" and "divisible" in odd[0].message
    gpus = _hits(_cfg(overrides=[*MICRO, "actor_rollout_ref.actor.ppo_mini_batch_size=8"],
                      **{"grpo.num_prompts_per_step": 9}))
    assert any("not divisible by the 16 GPUs" in h.message for h in gpus)
