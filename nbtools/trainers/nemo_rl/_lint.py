"""Lint rules that read the targeted NeMo-RL release's config tree: override keys, Gemma-3 block size,
consolidated safetensors, sequence lengths."""

from __future__ import annotations

import difflib
import re
from typing import Any

import nbtools.trainers.nemo_rl._command as nemo_rl
from nbtools.config import Experiment
from nbtools.errors import Fix
from nbtools.trainers import _tree
from nbtools.trainers._findings import Finding, LintReport
from nbtools.trainers.nemo_rl._releases import NEMO_RL

__all__ = ["check_nemo_rl"]


def check_nemo_rl(cfg: Experiment, r: LintReport) -> None:
    """Run every NeMo-RL rule on ``cfg``, appending to ``r``."""
    tree = _keys(cfg, r)
    _added_keys(cfg, r, tree)
    _gemma(cfg, r, tree)
    _consolidated(cfg, r)
    _lengths(cfg, r, tree)
    _release_artifacts(cfg, r)


def _effective(cfg: Experiment, key: str, default: Any) -> Any:
    """A NeMo-RL key's value as the job will see it: a user override wins over the derived one."""
    for text in reversed(cfg.trainer.overrides):
        prefix, k, value = nemo_rl.parse_override(text)
        if k == key and value is not None and prefix != "~":
            return value.strip("'\"")
    return default


def _keys(cfg: Experiment, r: LintReport) -> dict[str, Any]:
    r.checked.append("override-keys")
    version = cfg.images.nemo_rl_version
    recipe = cfg.trainer.recipe or nemo_rl.DEFAULT_RECIPE
    tree = nemo_rl.recipe_tree(cfg)
    if tree is None:
        known = _tree.known_configs(version)
        near = difflib.get_close_matches(recipe, known, n=1, cutoff=0.5)
        other = [v for v in NEMO_RL if v != version and _tree.config_tree(v, recipe) is not None]
        r.findings.append(Finding(
            "blocking", "override-keys", "trainer.recipe",
            f"{recipe!r} is not a config file of NeMo-RL {version}" + (f" (it exists in {', '.join(other)})" if other else ""),
            (f"did you mean `{near[0]}`?" if near else f"pick one of: {', '.join(known)}")
            + " Or point `trainer.recipe` at a local YAML to upload it.",
        ))
        tree = _tree.config_tree(version, nemo_rl.DEFAULT_RECIPE) or {}
    for i, text in enumerate(cfg.trainer.overrides):
        prefix, key, _ = nemo_rl.parse_override(text)
        exists = _tree.has_key(tree, key)
        if prefix == "" and not exists:
            near = _tree.closest_keys(tree, key)
            r.findings.append(Finding(
                "blocking", "override-keys", f"trainer.overrides[{i}]",
                f"`{key}` does not exist in NeMo-RL {version}'s {recipe.rsplit('/', 1)[-1]} (Hydra: 'Could not override')",
                (f"did you mean `{near[0]}`? " if near else "") + f"To add a new key write `+{text}`",
            ))
        elif prefix == "+" and exists and _tree.get_value(tree, key) is not None:
            r.findings.append(Finding(
                "blocking", "override-keys", f"trainer.overrides[{i}]",
                f"`{key}` already exists in {recipe.rsplit('/', 1)[-1]}; Hydra refuses `+` for it ('Could not append')",
                f"write `{text[1:]}` (or `+{text}` to add-or-override)",
            ))
    known_vllm = _tree.get_value(tree, "policy.generation.vllm_cfg", {}) or {}
    for key in cfg.trainer.vllm_cfg:
        if key not in known_vllm and key != "block_size":
            near = difflib.get_close_matches(key, list(known_vllm), n=1)
            r.findings.append(Finding(
                "warning", "override-keys", f"trainer.vllm_cfg.{key}",
                f"`{key}` is not a vllm_cfg key in NeMo-RL {version}; NeMo-RL does not pass unknown vllm_cfg keys to vLLM",
                (f"did you mean `{near[0]}`? " if near else "") + f"engine arguments go in `trainer.vllm_kwargs.{key}`",
            ))
    if version.startswith("v0.5") and cfg.data.validation and not (
        cfg.data.dataset == "DeepScaler" and cfg.data.validation in ("AIME2024", "aime2024", "AIME24")
    ):
        r.findings.append(Finding(
            "warning", "override-keys", "data.validation",
            f"NeMo-RL {version} has the flat data schema (data.dataset_name) with no separate validation dataset key; "
            f"{cfg.data.validation!r} is ignored",
            "target `images.nemo_rl_version: v0.7.0` (nested data.train / data.validation) or drop `data.validation`",
        ))
    return tree


# Sub-trees whose keys NeMo-RL hands on without a schema (engine kwargs, chat-template kwargs, HF config overrides, env
# vars, per-environment and per-dataset options, logger backends): a `+key` there is not "unknown".
_OPEN = ("policy.generation.vllm_kwargs.", "policy.tokenizer.chat_template_kwargs.", "policy.hf_config_overrides.",
         "policy.dtensor_cfg.automodel_kwargs.", "policy.dtensor_cfg.env_vars.", "policy.megatron_cfg.env_vars.",
         "policy.env_vars.", "env.", "data.", "logger.wandb.", "logger.mlflow.", "logger.tensorboard.",
         "logger.swanlab.")
# Chat templates that read `enable_thinking`: Qwen3's ends `{%- if enable_thinking is defined and enable_thinking is
# false %}{{- '<think>\n\n</think>\n\n' }}` (Qwen/Qwen3-* tokenizer_config.json); Gemma-3's never mentions it.
_READS_ENABLE_THINKING = re.compile(r"qwen3", re.I)


def _added_keys(cfg: Experiment, r: LintReport, tree: dict[str, Any]) -> None:
    """`+key` overrides the release has no key for (Hydra adds them, nothing reads them), and known no-ops."""
    r.checked.append("unknown-added-keys")
    version = cfg.images.nemo_rl_version
    known = _tree.version_keys(version)
    other = [v for v in NEMO_RL if v != version]
    for o in nemo_rl.overrides(cfg, tree):
        if not o.add or o.key in known or o.key.startswith(_OPEN):
            continue
        where = f" (it is one in {', '.join(v for v in other if o.key in _tree.version_keys(v))})" if any(
            o.key in _tree.version_keys(v) for v in other) else ""
        r.findings.append(Finding(
            "warning", "unknown-added-keys", o.source or "trainer.overrides",
            f"`+{o.key}` is not a key of NeMo-RL {version}{where}: no config of that release has it, so Hydra adds it "
            "and nothing reads it (the run behaves as if it were not set)",
            (f"drop `{o.source}` for {version}" if o.source and not o.source.startswith("trainer.overrides") else
             "remove the override") + (f", or target `images.nemo_rl_version: {other[-1]}`" if where else ""),
        ))
    value = _effective(cfg, "policy.tokenizer.chat_template_kwargs.enable_thinking",
                       cfg.model.chat_template_kwargs.get("enable_thinking"))
    if value is not None and not _READS_ENABLE_THINKING.search(cfg.model.name):
        r.findings.append(Finding(
            "warning", "unknown-added-keys", "model.chat_template_kwargs.enable_thinking",
            f"enable_thinking={value} changes nothing for {cfg.model.name}: only chat templates that read it (Qwen3's) "
            "switch thinking on or off; this model's template ignores the variable",
            "remove it, and ask for reasoning in the prompt (data.prompt_file) instead",
        ))


def _gemma(cfg: Experiment, r: LintReport, tree: dict[str, Any]) -> None:
    r.checked.append("gemma3-block-size")
    if not re.search(r"gemma[-_]?3", cfg.model.name, re.I):
        return
    if _tree.get_value(tree, "policy.generation.backend", "vllm") != "vllm":
        return
    if "block_size" in cfg.trainer.vllm_cfg or any("vllm_cfg.block_size" in o for o in cfg.trainer.overrides):
        r.findings.append(Finding(
            "blocking", "gemma3-block-size", "trainer.vllm_cfg.block_size",
            "block_size is set in vllm_cfg, which NeMo-RL does not hand to the vLLM engine; Gemma-3 (head size 256) still "
            "crashes with FlashInfer's default block size 16",
            "move it: `trainer.vllm_kwargs: {block_size: 32}` (-> policy.generation.vllm_kwargs.block_size=32)",
        ))
        return
    key = "policy.generation.vllm_kwargs.block_size"
    value = _effective(cfg, key, cfg.trainer.vllm_kwargs.get("block_size", _tree.get_value(tree, key)))
    if str(value) != "32":
        r.findings.append(Finding(
            "blocking", "gemma3-block-size", "trainer.vllm_kwargs.block_size",
            f"Gemma-3 with vLLM needs block_size 32 (FlashInfer fails for head size 256 with the default 16); got {value!r}",
            "set `trainer.vllm_kwargs: {block_size: 32}` (-> +policy.generation.vllm_kwargs.block_size=32; not in vllm_cfg)",
        ))


def _consolidated(cfg: Experiment, r: LintReport) -> None:
    r.checked.append("save-consolidated")
    c = cfg.checkpointing
    consolidated = str(_effective(cfg, "checkpointing.save_consolidated", c.save_consolidated)).lower() == "true"
    fmt = str(_effective(cfg, "checkpointing.model_save_format", c.model_save_format))
    if consolidated and fmt == "safetensors":
        r.findings.append(Finding(
            "blocking", "save-consolidated", "checkpointing.save_consolidated",
            "save_consolidated: true with safetensors has produced corrupted FSDP merges (shards not concatenated; "
            "vLLM asserts at load)",
            Fix("set `checkpointing.model_save_format: torch_save` and `save_consolidated: false`, then merge with "
                "nbtools.checkpoints.merge(step_dir, out_dir) (notebook 06)",
                cli="set `checkpointing.model_save_format: torch_save` and `save_consolidated: false`, then merge with "
                    "`nbtools merge STEP_DIR OUT_DIR`"),
        ))


def _lengths(cfg: Experiment, r: LintReport, tree: dict[str, Any]) -> None:
    r.checked.append("sequence-lengths")
    total = nemo_rl.resolved(cfg, tree, "policy.max_total_sequence_length")
    model_len = nemo_rl.resolved(cfg, tree, "policy.generation.vllm_cfg.max_model_len")
    if isinstance(total, int) and isinstance(model_len, int) and model_len < total:
        r.findings.append(Finding(
            "warning", "sequence-lengths", "trainer.vllm_cfg.max_model_len",
            f"vLLM's max_model_len {model_len} (fixed in the recipe) is below policy.max_total_sequence_length {total}; "
            "generations are cut at the shorter length",
            f"set `trainer.vllm_cfg: {{max_model_len: {total}}}`",
        ))
    # NeMo-RL: prompts longer than data.max_input_seq_length are masked out of training, generations stop at
    # policy.generation.max_new_tokens (and at vLLM's max_model_len for prompt + generation); both default to
    # ${policy.max_total_sequence_length} in grpo_math_1B.yaml, but recipes pin them (gemma3-1b: 512 and 512).
    prompt = nemo_rl.resolved(cfg, tree, "data.max_input_seq_length")
    new = nemo_rl.resolved(cfg, tree, "policy.generation.max_new_tokens")
    if not all(isinstance(v, int) for v in (total, prompt, new)):
        return
    if prompt + new < total:
        r.findings.append(Finding(
            "warning", "sequence-lengths", "grpo.max_new_tokens",
            f"policy.max_total_sequence_length {total} is never reached: prompts are at most data.max_input_seq_length "
            f"{prompt} tokens and generations at most max_new_tokens {new} ({prompt + new} in all), so reasoning is cut at "
            f"{new} tokens whatever the total allows",
            f"set `grpo.max_new_tokens: {total - prompt}` (prompt + generation = {total})",
        ))
    if isinstance(model_len, int) and new > model_len:
        r.findings.append(Finding(
            "warning", "sequence-lengths", "grpo.max_new_tokens",
            f"max_new_tokens {new} exceeds vLLM's max_model_len {model_len}, which bounds prompt + generation: "
            f"generations stop at {model_len} minus the prompt",
            f"set `grpo.max_new_tokens: {max(1, model_len - prompt)}` or raise `trainer.vllm_cfg.max_model_len`",
        ))


def _release_artifacts(cfg: Experiment, r: LintReport) -> None:
    """What the release does not have: a validation section (v0.5.0 would drop it) and the files nbtools reads."""
    r.checked.append("release-artifacts")
    version = cfg.images.nemo_rl_version
    has = NEMO_RL[version]
    if cfg.data.validation and not has.data_validation:
        r.findings.append(Finding(
            "blocking", "release-artifacts", "data.validation",
            f"NeMo-RL {version}'s data config has no validation section: {cfg.data.validation!r} would be dropped "
            f"and the run would validate on {cfg.data.dataset!r}'s own split",
            "remove data.validation (validation then uses the dataset's split), or add the file through "
            "`trainer.overrides: ['data.dataset_name=ResponseDataset', '+data.val_data_path=...']`, or target "
            "images.nemo_rl_version: v0.7.0",
        ))
    missing = [what for key, what in (("val_dumps", "no val_data_step*.jsonl (validation trajectories: notebook 05)"),
                                      ("baseline_reward", "no train/baseline_reward/* (metrics' no_signal column)"))
               if not getattr(has, key)]
    if missing and cfg.grpo.val_period:
        r.findings.append(Finding(
            "warning", "release-artifacts", "images.nemo_rl_version",
            f"NeMo-RL {version} writes {' and '.join(missing)}; those views stay empty for this run",
            "nothing to change for training (validation metrics are still logged); use v0.7.0 for the dumps",
        ))
