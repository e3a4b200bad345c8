"""What each verl release does with a command line: the ONE table the verl test double behaves by.

TEST DATA, not nbtools: every fact names where it was read (verl-project/verl at the tag, the path), so the stand-in
built on it refuses or ignores what the real release would, and a launch that relies on something the release does
not do fails in the tests as it would on the cluster. nbtools keeps its own table (``nbtools/trainers/verl/_releases.py``);
tests compare the two, they never share one.

Tags: v0.7.0 = commit f9c855f7cf04d603c9546bc01776c74806a879c1, v0.9.0 = commit 483b8a009ba3a97563edee3a19887e4862b8094a.
"""

from __future__ import annotations

from typing import Any

__all__ = ["RELEASES", "facts", "release_of"]

_COMMON: dict[str, Any] = {
    # @hydra.main(config_path="config", config_name="ppo_trainer", version_base=None): a struct config, so Hydra
    # refuses `key=value` for a key it lacks and `+key=value` for one it has. The stand-in's config is the tag's
    # verl/trainer/config/_generated_ppo_trainer.yaml (ppo_trainer.yaml with its defaults composed).
    "config": "verl/trainer/config/_generated_ppo_trainer.yaml",
    # ray_trainer.py _save_checkpoint: <default_local_dir>/global_step_{N}/actor, global_step_{N}/data.pt, then
    # <default_local_dir>/latest_checkpointed_iteration.txt holding N (v1/trainer_base.py the same at v0.9.0)
    "checkpoint_dir_key": "trainer.default_local_dir",
    "step_dir": "global_step_{step}",
    "tracker": "latest_checkpointed_iteration.txt",
    # _dump_generations: os.path.join(dump_path, f"{global_steps}.jsonl"), only when trainer.rollout_data_dir /
    # trainer.validation_data_dir is set (both null in ppo_trainer.yaml)
    "rollout_dir_key": "trainer.rollout_data_dir",
    "validation_dir_key": "trainer.validation_data_dir",
    "dump_name": "{step}.jsonl",
    # verl/utils/tracking.py: os.environ.get("TENSORBOARD_DIR", f"tensorboard_log/{project_name}/{experiment_name}"),
    # used only when "tensorboard" is in trainer.logger
    "tensorboard_env": "TENSORBOARD_DIR",
    "tensorboard_default": "tensorboard_log/{project}/{experiment}",
    # data/rl_dataset.py reads data.train_files / data.val_files as parquet with the columns verl's
    # examples/data_preprocess/gsm8k.py writes
    "parquet_columns": ("data_source", "prompt", "ability", "reward_model", "extra_info"),
}

RELEASES: dict[str, dict[str, Any]] = {
    "v0.7.0": {
        **_COMMON,
        # the `if __name__ == "__main__"` modules under verl/trainer/ (git grep at the tag)
        "entry_points": ("verl.trainer.main_ppo", "verl.trainer.main_generation", "verl.trainer.main_eval"),
        "entry_source": ("v0.7.0", "verl/trainer/main_ppo.py"),
        # main_ppo.py runs TaskRunner (RayPPOTrainer); there is no trainer.use_v1 key
        "v1_key": None,
        "v1_imports": (),
        "legacy_warning": None,
    },
    "v0.9.0": {
        **_COMMON,
        # main_ppo_sync.py (v0.8.0's replacement) is gone again; main_generation.py is gone
        "entry_points": ("verl.trainer.main_ppo", "verl.trainer.main_generation_server", "verl.trainer.main_eval"),
        "entry_source": ("v0.9.0", "verl/trainer/main_ppo.py"),
        # main(): `if config.trainer.use_v1: run_ppo(config, task_runner_class=TaskRunnerV1)` (ppo_trainer.yaml:
        # use_v1: true); TaskRunnerV1.run does `import transfer_queue as tq` (requirements.txt TransferQueue==0.1.8)
        "v1_key": "trainer.use_v1",
        "v1_imports": ("transfer_queue",),
        # else: logger.warning(...) then run_ppo(config, task_runner_class=TaskRunner) from main_ppo_v0.py
        "legacy_warning": ("Legacy trainer `main_ppo_v0.py` is deprecated, and wil be removed in v0.9.0."
                           "Please set `trainer.use_v1=True` in config to use V1 trainer."),
    },
}


def facts(release: str) -> dict[str, Any]:
    """The row of ``release``; an unknown release is an error (the double only knows what was read at a tag)."""
    if release not in RELEASES:
        raise KeyError(f"no facts for verl {release!r}: add a row read from the release's source ({sorted(RELEASES)})")
    return RELEASES[release]


def release_of(version_file_text: str) -> str:
    """The tag of a checkout from its ``verl/version/version`` (``0.9.0`` -> ``v0.9.0``), as verl reads its version."""
    return "v" + version_file_text.strip()
