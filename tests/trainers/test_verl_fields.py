"""Every experiment field reaches verl or is refused: the key it becomes per release, or a lint finding naming what to
set instead (issue 40: checkpointing.enabled / keep_top_k, grpo.temperature / seed and the baseline never reached
verl, silently).

The keys are verl's at each tag (verl/trainer/config/_generated_ppo_trainer.yaml at v0.7.0 and v0.9.x, carried as
nbtools/data/verl_keys_<tag>.json); the oracle tests (tests/oracle) compose them into verl's own Hydra config.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from nbtools import config
from nbtools.launch.lint import lint
from nbtools.trainers import _tree, verl
from nbtools.trainers.verl._tree import verl_tree

ROOT = Path(__file__).resolve().parents[2]
RELEASES = ["v0.7.0", "v0.9.0"]

# field -> (non-default value, {release: {verl key: rendered value}})
MAPPED = {
    "grpo.num_prompts_per_step": (512, {"*": {"data.train_batch_size": "512"}}),
    "grpo.num_generations_per_prompt": (4, {"*": {"actor_rollout_ref.rollout.n": "4"}}),
    "grpo.max_num_steps": (7, {"*": {"trainer.total_training_steps": "7"}}),
    "grpo.val_period": (3, {"*": {"trainer.test_freq": "3"}}),
    "grpo.val_at_start": (True, {"*": {"trainer.val_before_train": "true"}}),
    "grpo.max_val_samples": (64, {"*": {"data.val_max_samples": "64"}}),
    "grpo.seed": (7, {"v0.7.0": {"data.seed": "7", "actor_rollout_ref.actor.data_loader_seed": "7"},
                      "v0.9.0": {"data.seed": "7", "actor_rollout_ref.actor.data_loader_seed": "7",
                                 "actor_rollout_ref.rollout.seed": "7"}}),
    "grpo.normalize_rewards": (False, {"*": {"algorithm.norm_adv_by_std_in_grpo": "false"}}),
    "grpo.learning_rate": (3e-6, {"*": {"actor_rollout_ref.actor.optim.lr": "3e-06"}}),
    "grpo.temperature": (0.7, {"*": {"actor_rollout_ref.rollout.temperature": "0.7"}}),
    "grpo.max_new_tokens": (256, {"*": {"data.max_response_length": "256"}}),
    "model.name": ("Qwen/Qwen3-8B", {"*": {"actor_rollout_ref.model.path": "Qwen/Qwen3-8B"}}),
    "checkpointing.enabled": (False, {"*": {"trainer.save_freq": "-1"}}),
    "checkpointing.save_period": (5, {"*": {"trainer.save_freq": "5"}}),
    "checkpointing.keep_top_k": (2, {"*": {"trainer.max_actor_ckpt_to_keep": "2"}}),
    "checkpointing.save_optimizer": (False, {"*": {"actor_rollout_ref.actor.checkpoint.save_contents": "[model,extra]"}}),
    "checkpointing.save_consolidated": (True, {"*": {"actor_rollout_ref.actor.checkpoint.save_contents":
                                                     "[model,optimizer,extra,hf_model]"}}),
    "logging.tensorboard": (False, {"*": {"trainer.logger": "console"}}),
    "logging.wandb": (True, {"*": {"trainer.logger": "[console,tensorboard,wandb]"}}),
    "logging.wandb_project": ("proj", {"*": {"trainer.project_name": "proj"}}),
}
# non-default values for the fields verl does not read (the lint must name each)
IGNORED_VALUES = {
    "grpo.use_leave_one_out_baseline": True, "checkpointing.metric_name": "val:loss",
    "checkpointing.higher_is_better": False, "checkpointing.dtensor_v2": False, "checkpointing.model_save_format": "torch_save",
    "model.max_total_sequence_length": 4096, "model.chat_template_kwargs": {"enable_thinking": False},
    "data.validation": "gsm8k-test", "data.prompt_file": "p.txt", "trainer.recipe": "examples/configs/grpo_math_1B.yaml",
    "trainer.colocated": False, "trainer.generation_nodes": 1, "trainer.generation_gpus_per_node": 8,
    "trainer.vllm_cfg": {"gpu_memory_utilization": 0.5}, "trainer.vllm_kwargs": {"enforce_eager": True},
}

COMPANIONS = {"checkpointing.dtensor_v2": {"checkpointing.model_save_format": None},
              "trainer.colocated": {"trainer.generation_gpus_per_node": 8},
              "trainer.generation_nodes": {"trainer.colocated": False},
              "trainer.generation_gpus_per_node": {"trainer.colocated": False}}  # what config.load requires with it


def _leaves(obj, prefix=""):
    for f in dataclasses.fields(obj):
        if f.name == "source" and not prefix:
            yield "source"
            continue
        value, name = getattr(obj, f.name), f"{prefix}{f.name}"
        if dataclasses.is_dataclass(value):
            yield from _leaves(value, name + ".")
        else:
            yield name


def _cfg(release, **over):
    cfg = config.load(ROOT / "experiments" / "gke-b200-verl.yaml", backend="gke",
                      overrides={"trainer.verl_ref": release})
    return cfg.replace(**over) if over else cfg


def test_every_field_is_mapped_ignored_or_nbtools_own():
    cfg = _cfg("v0.7.0")
    unclassified = [f for f in _leaves(cfg) if f not in MAPPED and f not in verl.IGNORED and f not in verl.REFUSED
                    and not any(f == p or f.startswith(p + ".") for p in verl.NBTOOLS_ONLY)]
    assert unclassified == [], "decide for each: a verl key (verl.fields), verl.IGNORED or verl.NBTOOLS_ONLY"
    assert set(IGNORED_VALUES) == set(verl.IGNORED)


@pytest.mark.parametrize("release", RELEASES)
@pytest.mark.parametrize("field", sorted(MAPPED))
def test_mapped_field_becomes_the_release_key(release, field):
    value, keys = MAPPED[field]
    want = keys.get(release) or keys["*"]
    base = _cfg(release)
    kept = [o for o in base.trainer.overrides if o.split("=", 1)[0] not in want]  # the experiment's own overrides win
    cfg = _cfg(release, **{field: value, "trainer.overrides": kept})
    eff = verl.effective(cfg)
    tree = verl_tree(release)
    for key, rendered in want.items():
        assert _tree.has_key(tree, key), f"{key} is not a key of verl {release}"
        assert eff.get(key) == rendered, (field, key, eff.get(key))
    assert not [f for f in lint(cfg).findings if f.rule == "verl-fields" and f.key == field]


@pytest.mark.parametrize("release", RELEASES)
@pytest.mark.parametrize("field", sorted(IGNORED_VALUES))
def test_ignored_field_is_named_by_the_lint(release, field):
    cfg = _cfg(release, **{field: IGNORED_VALUES[field], **COMPANIONS.get(field, {})})
    hits = [f for f in lint(cfg).findings if f.rule == "verl-fields" and f.key == field]
    assert len(hits) == 1 and hits[0].fix, field
    assert not [f for f in lint(_cfg(release)).findings if f.rule == "verl-fields"]


def test_keep_top_k_reaches_verl_by_default():
    """verl's trainer.max_actor_ckpt_to_keep defaults to null (keep every checkpoint); the experiment's keep_top_k 3
    must be sent, not only where it differs from nbtools' default."""
    assert verl.effective(_cfg("v0.7.0"))["trainer.max_actor_ckpt_to_keep"] == "3"


def test_a_field_overridden_by_trainer_overrides_is_named():
    """grpo.max_new_tokens says 256, trainer.overrides says data.max_response_length=512: the override wins and the
    lint says the field did not reach verl."""
    cfg = _cfg("v0.7.0", **{"grpo.max_new_tokens": 256})
    assert verl.effective(cfg)["data.max_response_length"] == "512"
    hits = [f for f in lint(cfg).findings if f.rule == "verl-fields" and f.key == "grpo.max_new_tokens"]
    assert len(hits) == 1 and "trainer.overrides[1]" in hits[0].message


@pytest.mark.parametrize("field", ["trainer.reward_functions", "trainer.reward_module"])
def test_refused_fields_stop_config_load(field):
    from nbtools.errors import ConfigError

    value = [{"name": "format", "weight": 1.0}] if field == "trainer.reward_functions" else "my_rewards.py"
    with pytest.raises(ConfigError, match=field.split(".")[1] if field.endswith("module") else "reward_functions"):
        _cfg("v0.7.0", **{field: value})
