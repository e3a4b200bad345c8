"""The training half of the verl TEST DOUBLE (``verl/trainer/main_ppo.py`` here): the resolved config becomes a run of
nbtools' miniature GRPO (the local backend's rehearsal) in verl's layout, and the files land where the release puts
them.

NOT verl. What the config says is what trains: batch size, samples per prompt, steps, validation period and
validation before training, learning rate, the KL loss (``actor.kl_loss_coef`` only with ``actor.use_kl_loss``),
temperature, checkpoint dir, period and ``max_actor_ckpt_to_keep``. Where files go follows ``verl_releases.py``:
checkpoints in ``trainer.default_local_dir``, training and validation dumps only when ``trainer.rollout_data_dir`` /
``trainer.validation_data_dir`` are set (null by default: none), TensorBoard only with ``tensorboard`` in
``trainer.logger``, at ``TENSORBOARD_DIR`` or else ``tensorboard_log/<project>/<experiment>`` under the working
directory. ``actor_rollout_ref.model.path`` is the model verl would download; the double trains the simulated image's
tiny model (``sim_gke.json`` beside the checkout names the baked rehearsal config) and, like the rehearsal, saves its
warm start at ``<experiment dir>/baseline_hf`` (the stand-in Hub's copy of that model).

Rewards as verl v0.7.0 scores them (``verl/workers/reward_manager/naive.py`` over ``verl/utils/reward_score/__init__.py``
``default_compute_score``): the training parquet's ``data.reward_fn_key`` column (``data_source``) picks the rule, here
the double's own GSM8K rule (``verl/utils/reward_score/gsm8k.py`` of this checkout), applied to the response text and
the ground truth; the rehearsal writes its answers as GSM8K's ``#### N`` (``rehearsal.answer_format=gsm8k``) and trains
on, dumps and logs exactly those scores. A ``custom_reward_function.path`` is refused (the double loads no user code).
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

CHECKOUT = Path(__file__).resolve().parent

# verl config key -> nbtools experiment key of the rehearsal
TO_REHEARSAL = {
    "data.train_batch_size": "grpo.num_prompts_per_step",
    "actor_rollout_ref.rollout.n": "grpo.num_generations_per_prompt",
    "trainer.total_training_steps": "grpo.max_num_steps",
    "trainer.test_freq": "grpo.val_period",
    "trainer.val_before_train": "grpo.val_at_start",
    "actor_rollout_ref.actor.optim.lr": "grpo.learning_rate",
    "actor_rollout_ref.rollout.temperature": "grpo.temperature",
    "trainer.save_freq": "checkpointing.save_period",
    "trainer.max_actor_ckpt_to_keep": "checkpointing.keep_top_k",
}
# the rehearsal's verl layout inside its log_dir (nbtools._layout.VERL_*_DIR)
_DUMPS = {"rollouts": "rollout_data", "validation": "validation_data", "tensorboard": "tensorboard"}


def _sim() -> dict:
    path = CHECKOUT / "sim_gke.json"
    if not path.is_file():
        sys.exit("(verl test double) this checkout has no sim_gke.json naming the image's rehearsal config, so it can "
                 "only check a command (VERL_SIM_CONFIG_ONLY=1); write it with sim_verl_checkout.write_verl_checkout("
                 "..., rehearsal_config=...)")
    return json.loads(path.read_text())


def _move(src: Path, dest: Path | None) -> None:
    """Put the rehearsal's ``src`` where the release writes it (``dest``), or drop it where the release writes none."""
    if not src.exists() or (dest is not None and src.resolve() == dest.resolve()):
        return
    if dest is None:
        shutil.rmtree(src)
        return
    dest.parent.mkdir(parents=True, exist_ok=True)
    shutil.rmtree(dest, ignore_errors=True)
    shutil.move(str(src), str(dest))


REWARD = "sim_verl.default_compute_score"  # the name the double's rule has in the rehearsal's reward registry


def _data_source(config: DictConfig) -> str:
    """The training rows' data source (``data.reward_fn_key``); the rehearsal's problems stand in for one source."""
    import pyarrow.parquet as pq

    key = OmegaConf.select(config, "data.reward_fn_key") or "data_source"
    files = OmegaConf.select(config, "data.train_files")
    sources = set()
    for f in [files] if isinstance(files, str) else list(files):
        sources |= {str(v) for v in pq.read_table(f, columns=[key]).column(key).to_pylist()}
    if len(sources) != 1:
        sys.exit(f"(verl test double) data.train_files hold data sources {sorted(sources)}; the double trains one "
                 "task, so it scores with one rule: give it files of one data source")
    return sources.pop()


def _register_reward(data_source: str, nbtools_rewards) -> None:
    """The double's verl rule as the rehearsal's reward (``fn(ground_truth, response) -> (score, correct)``)."""
    from verl.utils.reward_score import default_compute_score

    def verl_rule(ground_truth: str, response: str) -> tuple[float, bool]:
        score = default_compute_score(data_source, response, ground_truth)
        score = float(score["score"]) if isinstance(score, dict) else score
        return score, score >= 1.0

    nbtools_rewards.register(REWARD, verl_rule)


def train(config: DictConfig, row: dict, outputs: dict) -> None:
    sel = lambda k: OmegaConf.select(config, k)  # noqa: E731
    ckpt = sel("trainer.default_local_dir")
    if not str(ckpt).startswith("/"):
        sys.exit(f"(verl test double) trainer.default_local_dir={ckpt} is relative: it would land in the checkout; "
                 "pass an absolute path on the shared mount")
    if sel("custom_reward_function.path"):
        sys.exit(f"(verl test double) custom_reward_function.path={sel('custom_reward_function.path')}: the double "
                 "scores with verl's default_compute_score only; leave it unset")
    if sel("trainer.total_training_steps") is None:
        sys.exit("(verl test double) trainer.total_training_steps is null: verl would derive it from "
                 "data.train_files x trainer.total_epochs; the double needs it set")
    exp = Path(ckpt).parent
    given = {k: Path(v) if v and Path(v).is_absolute() else (Path.cwd() / v if v else None) for k, v in outputs.items()
             if k != "checkpoints"}
    anchor = next((p for p in (given["rollouts"], given["validation"], given["tensorboard"]) if p is not None), None)
    log_dir = anchor.parent if anchor is not None else exp / ".verl-double-logs"
    kl = float(sel("actor_rollout_ref.actor.kl_loss_coef") or 0.0) if sel("actor_rollout_ref.actor.use_kl_loss") else 0.0
    over = [f"name={json.dumps(exp.name)}", f"checkpointing.checkpoint_dir={json.dumps(str(ckpt))}",
            f"logging.log_dir={json.dumps(str(log_dir))}", f"grpo.kl_penalty={kl}", "logging.tensorboard=true"]
    over += [f"{dst}={json.dumps(sel(src))}" for src, dst in TO_REHEARSAL.items() if sel(src) is not None]
    over += ["rehearsal.answer_format=gsm8k", f"rehearsal.reward_functions={json.dumps([{'name': REWARD, 'weight': 1.0}])}"]
    print(f"(verl test double) verl's config -> nbtools rehearsal ({' '.join(over)})", flush=True)
    sim = _sim()
    if sim["nbtools_root"] not in sys.path:
        sys.path.insert(0, sim["nbtools_root"])
    import nbtools.rewards
    from nbtools.rehearsal._launch import main as rehearse

    if str(CHECKOUT) not in sys.path:
        sys.path.insert(0, str(CHECKOUT))
    _register_reward(_data_source(config), nbtools.rewards)  # before the ranks fork: they inherit the registry

    rc = rehearse(["--config", sim["rehearsal_config"], "--runs-dir", str(exp.parent), *over])
    for key, name in _DUMPS.items():
        _move(log_dir / name, given[key])
    if anchor is None:
        shutil.rmtree(log_dir, ignore_errors=True)
    if rc:
        sys.exit(rc)
