"""The NeMo-RL GRPO command for the targeted release, with Hydra overrides decided against its real config tree.

Why: ``key=value`` only works for keys that exist in the recipe (after ``defaults:`` inheritance) and ``+key=value``
only for keys that do not; getting it wrong fails the job after the container starts. The tree of every known
recipe ships with the package (``nbtools/data/nemo_rl_keys_<version>.json``), so the choice is made here, before
submit, and the command shown is exactly what runs.

Example:
    >>> cfg = nbtools.config.load("../experiments/gke-b200-gemma3-1b.yaml")
    >>> print(nemo_rl.command(cfg))
    cd /opt/nemo-rl && python -u examples/run_grpo.py --config examples/configs/recipes/llm/... cluster.num_nodes=1 ...
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from nbtools._escape import sh
from nbtools.config import Experiment
from nbtools.rewards import ENTRY_MODULE, reward_overrides
from nbtools.trainers import _tree
from nbtools.trainers.nemo_rl._releases import NEMO_RL

__all__ = [
    "Override",
    "DEFAULT_RECIPE",
    "DEFAULT_CODE_DIR",
    "entry_script",
    "recipe_path",
    "local_recipe",
    "recipe_tree",
    "overrides",
    "command",
    "command_lines",
    "hydra_value",
    "parse_override",
]

DEFAULT_RECIPE = "examples/configs/grpo_math_1B.yaml"
DEFAULT_CODE_DIR = "/opt/nemo-rl"
UPLOAD_DIR = "nemo_rl_configs"  # where uploaded recipe YAMLs sit inside the job's working_dir
# PyTorch's caching allocator on the training (DTensor policy) workers only: expandable segments strand no freed
# blocks (the fit check's stranded band; issue 42). Not job-wide: colocated vLLM's CuMemAllocator asserts when the
# variable holds expandable_segments:True (NeMo-RL v0.7.0 infra/nrl_k8s/README.md, "GPU OOM in colocated mode"), and
# NeMo-RL v0.5/v0.7 lm_policy.py gives policy.dtensor_cfg.env_vars to the policy workers alone. Any
# trainer.env_vars.PYTORCH_CUDA_ALLOC_CONF (e.g. "expandable_segments:False") or a recipe's own value turns it off.
POLICY_ALLOC_KEY = "policy.dtensor_cfg.env_vars.PYTORCH_CUDA_ALLOC_CONF"
EXPANDABLE = "expandable_segments:True"
_UNQUOTED = re.compile(r"^[A-Za-z0-9_/\-+.:@%*?|$\\]+$")


@dataclass(frozen=True)
class Override:
    """One Hydra override: ``key=value`` (key exists in the recipe) or ``+key=value`` (key is added)."""

    key: str
    value: Any
    add: bool = False
    source: str = ""  # the experiment field it comes from, e.g. "grpo.max_num_steps"

    def render(self) -> str:
        return f"{'+' if self.add else ''}{self.key}={hydra_value(self.value)}"

    def __str__(self) -> str:
        return self.render()


def hydra_value(value: Any) -> str:
    """A Python value in Hydra's override grammar (``true``, ``null``, ``[a,b]``, quoted strings when needed)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return repr(value) if math.isfinite(value) else ("nan" if value != value else ("inf" if value > 0 else "-inf"))
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(hydra_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ",".join(f"{k}:{hydra_value(v)}" for k, v in value.items()) + "}"
    s = str(value)
    if s and _UNQUOTED.match(s):
        return s
    return "'" + s.replace("\\", "\\\\").replace("'", "\\'") + "'"


def hydra_unquote(text: str) -> str:
    """The string a Hydra value stands for: a quoted one unquoted and unescaped (the inverse of :func:`hydra_value`)."""
    s = text.strip()
    if len(s) >= 2 and s[0] == s[-1] and s[0] in "'\"":
        return re.sub(r"\\(.)", r"\1", s[1:-1])
    return s


def parse_override(text: str) -> tuple[str, str, str | None]:
    """Split a Hydra override into (prefix, key, value): prefix is '', '+', '++' or '~'."""
    prefix = ""
    for p in ("++", "+", "~"):
        if text.startswith(p):
            prefix, text = p, text[len(p):]
            break
    key, sep, value = text.partition("=")
    return prefix, key.strip(), (value if sep else None)


def entry_script(cfg: Experiment) -> str:
    """The release's GRPO script (``trainers.nemo_rl.NEMO_RL``); with a reward mix, the one that honours it.

    With ``trainer.reward_functions`` the script must build its environment by name: v0.5.0's ``run_grpo_math.py``
    hard-codes the math environment and would train on the math reward without a word.
    """
    release = NEMO_RL[cfg.images.nemo_rl_version]
    if reward_overrides(cfg) and release.reward_entrypoint:
        return release.reward_entrypoint
    return release.entrypoint


def local_recipe(cfg: Experiment) -> Path | None:
    """The recipe as a local file to upload in the job's working_dir, or None when it lives in the checkout."""
    recipe = cfg.trainer.recipe
    if not recipe:
        return None
    p = Path(recipe).expanduser()
    candidates = [p] if p.is_absolute() else ([Path(cfg.source).parent / p] if cfg.source else []) + [Path.cwd() / p]
    for c in candidates:
        if c.is_file() and _tree.config_tree(cfg.images.nemo_rl_version, recipe) is None:
            return c.resolve()
    return None


def recipe_path(cfg: Experiment) -> str:
    """The ``--config`` argument as the job sees it (relative to the checkout, or inside the uploaded working_dir)."""
    local = local_recipe(cfg)
    if local is not None:
        return f"{UPLOAD_DIR}/{local.name}"
    return (cfg.trainer.recipe or DEFAULT_RECIPE).removeprefix("./")


def recipe_files(cfg: Experiment) -> dict[str, bytes]:
    """The uploaded recipe and the parents it names in ``defaults:`` that sit next to it (same relative layout)."""
    local = local_recipe(cfg)
    if local is None:
        return {}
    root = local.parent
    files: dict[str, bytes] = {}
    todo = [local]
    while todo:
        p = todo.pop()
        rel = p.relative_to(root).as_posix()
        if rel in files:
            continue
        files[rel] = p.read_bytes()
        defaults = (yaml.safe_load(p.read_text()) or {}).get("defaults")
        for d in [defaults] if isinstance(defaults, str) else (defaults or []):
            q = (p.parent / d).resolve()
            if q.is_file() and q.is_relative_to(root):
                todo.append(q)
    return {f"{UPLOAD_DIR}/{k}": v for k, v in files.items()}


def recipe_tree(cfg: Experiment) -> dict[str, Any] | None:
    """The resolved config tree the job will start from (known recipe or uploaded file); None when unknown."""
    local = local_recipe(cfg)
    if local is not None:
        try:
            return _tree.load_yaml_tree(local)
        except (OSError, ValueError):
            return None
    return _tree.config_tree(cfg.images.nemo_rl_version, cfg.trainer.recipe or DEFAULT_RECIPE)


def recipe_value(cfg: Experiment, *keys: str) -> Any:
    """The first of ``keys`` (dotted) the job's recipe sets; None when none is set or the recipe is unknown here."""
    tree = recipe_tree(cfg) or {}
    for key in keys:
        value = _tree.get_value(tree, key)
        if value is not None:
            return value
    return None


def _leaves(prefix: str, value: Any) -> list[tuple[str, Any]]:
    if isinstance(value, dict) and value:
        out: list[tuple[str, Any]] = []
        for k, v in value.items():
            out.extend(_leaves(f"{prefix}.{k}", v))
        return out
    return [(prefix, value)]


def _desired(cfg: Experiment, tree: dict[str, Any]) -> list[tuple[str, Any, str, str]]:
    """(key, value, mode, source) in command order.

    Modes: ``always`` (emitted even when equal to the recipe), ``set`` (emitted when the experiment sets a non-default
    value that differs from the recipe: defaults never override a recipe's tuned values), ``derived`` (emitted when it
    differs from the recipe).
    """
    g, m, t, c, lg = cfg.grpo, cfg.model, cfg.trainer, cfg.checkpointing, cfg.logging
    v05 = cfg.images.nemo_rl_version.startswith("v0.5")
    megatron = bool(_tree.get_value(tree, "policy.megatron_cfg.enabled", False))
    out: list[tuple[str, Any, str, str]] = [
        ("cluster.num_nodes", cfg.cluster.worker_replicas, "always", "cluster.worker_replicas"),
        ("cluster.gpus_per_node", cfg.cluster.gpus_per_node, "always", "cluster.gpus_per_node"),
        ("grpo.num_prompts_per_step", g.num_prompts_per_step, "always", "grpo.num_prompts_per_step"),
        ("grpo.num_generations_per_prompt", g.num_generations_per_prompt, "always", "grpo.num_generations_per_prompt"),
        ("grpo.max_num_steps", g.max_num_steps, "always", "grpo.max_num_steps"),
        ("grpo.val_period", g.val_period, "set", "grpo.val_period"),
        ("grpo.val_at_start", g.val_at_start, "set", "grpo.val_at_start"),
        ("grpo.max_val_samples", g.max_val_samples, "set", "grpo.max_val_samples"),
        ("grpo.seed", g.seed, "set", "grpo.seed"),
        ("grpo.use_leave_one_out_baseline", g.use_leave_one_out_baseline, "set", "grpo.use_leave_one_out_baseline"),
        ("grpo.normalize_rewards", g.normalize_rewards, "set", "grpo.normalize_rewards"),
        ("loss_fn.reference_policy_kl_penalty", g.kl_penalty, "set", "grpo.kl_penalty"),
        ("policy.model_name", m.name, "always", "model.name"),
        ("policy.tokenizer.name", m.name, "derived", "model.name"),
        ("policy.max_total_sequence_length", m.max_total_sequence_length, "set", "model.max_total_sequence_length"),
    ]
    if megatron:
        out += [
            ("policy.megatron_cfg.tensor_model_parallel_size", m.tensor_parallel_size, "set", "model.tensor_parallel_size"),
            ("policy.megatron_cfg.optimizer.lr", g.learning_rate, "set", "grpo.learning_rate"),
        ]
    else:
        out += [
            ("policy.dtensor_cfg.tensor_parallel_size", m.tensor_parallel_size, "set", "model.tensor_parallel_size"),
            ("policy.optimizer.kwargs.lr", g.learning_rate, "set", "grpo.learning_rate"),
            ("policy.dtensor_cfg._v2", c.dtensor_v2, "derived", "checkpointing.dtensor_v2"),
        ]
        if "PYTORCH_CUDA_ALLOC_CONF" not in t.env_vars and _tree.get_value(tree, POLICY_ALLOC_KEY) is None:
            out.append((POLICY_ALLOC_KEY, EXPANDABLE, "derived", "trainer.env_vars"))
    for k, v in _leaves("policy.tokenizer.chat_template_kwargs", dict(m.chat_template_kwargs)) if m.chat_template_kwargs else []:
        out.append((k, v, "derived", "model.chat_template_kwargs"))
    out.append(("policy.generation.temperature", g.temperature, "set", "grpo.temperature"))
    if g.max_new_tokens is not None:
        out.append(("policy.generation.max_new_tokens", g.max_new_tokens, "set", "grpo.max_new_tokens"))
    out.append(("policy.generation.colocated.enabled", t.colocated, "set", "trainer.colocated"))
    if not t.colocated:
        if t.generation_nodes is not None:
            out.append(("policy.generation.colocated.resources.num_nodes", t.generation_nodes, "derived", "trainer.generation_nodes"))
            gpn = t.generation_gpus_per_node if t.generation_gpus_per_node is not None else cfg.cluster.gpus_per_node
            out.append(("policy.generation.colocated.resources.gpus_per_node", gpn, "derived", "trainer.generation_gpus_per_node"))
        else:
            out.append(("policy.generation.colocated.resources.gpus_per_node", t.generation_gpus_per_node, "derived", "trainer.generation_gpus_per_node"))
    for k, v in _leaves("policy.generation.vllm_cfg", dict(t.vllm_cfg)) if t.vllm_cfg else []:
        out.append((k, v, "derived", "trainer.vllm_cfg"))
    for k, v in _leaves("policy.generation.vllm_kwargs", dict(t.vllm_kwargs)) if t.vllm_kwargs else []:
        out.append((k, v, "derived", "trainer.vllm_kwargs"))
    d = cfg.data
    if v05:
        out.append(("data.dataset_name", d.dataset, "set", "data.dataset"))
        if d.prompt_file:
            out.append(("data.prompt_file", d.prompt_file, "set", "data.prompt_file"))
    else:
        out.append(("data.train.dataset_name", d.dataset, "set", "data.dataset"))
        if d.validation:
            out.append(("data.validation.dataset_name", d.validation, "set", "data.validation"))
        if d.prompt_file:
            out.append(("data.default.prompt_file", d.prompt_file, "set", "data.prompt_file"))
    shipped = reward_overrides(cfg)  # the nbtools reward environment (nbtools.rewards.nemo_rl_env)
    for k, v in shipped:
        out.append((k, v, "always", "trainer.reward_functions"))
    for k in ("data.train.env_name", "data.validation.env_name") if shipped and not v05 else ():
        if _tree.get_value(tree, k) is not None:  # a recipe's per-dataset env_name beats data.default's
            out.append((k, shipped[0][1], "always", "trainer.reward_functions"))
    out += [
        ("checkpointing.enabled", c.enabled, "set", "checkpointing.enabled"),
        ("checkpointing.checkpoint_dir", cfg.checkpoint_dir, "always", "checkpointing.checkpoint_dir"),
        ("checkpointing.save_period", c.save_period, "set", "checkpointing.save_period"),
        ("checkpointing.keep_top_k", c.keep_top_k, "set", "checkpointing.keep_top_k"),
        ("checkpointing.metric_name", c.metric_name, "set", "checkpointing.metric_name"),
        ("checkpointing.higher_is_better", c.higher_is_better, "set", "checkpointing.higher_is_better"),
        ("checkpointing.model_save_format", c.model_save_format, "derived", "checkpointing.model_save_format"),
        ("checkpointing.save_consolidated", c.save_consolidated, "set", "checkpointing.save_consolidated"),
        ("checkpointing.save_optimizer", c.save_optimizer, "set", "checkpointing.save_optimizer"),
        ("logger.log_dir", cfg.log_dir, "always", "logging.log_dir"),
        ("logger.tensorboard_enabled", lg.tensorboard, "always", "logging.tensorboard"),
        ("logger.wandb_enabled", lg.wandb, "always", "logging.wandb"),
    ]
    if lg.wandb:
        if lg.wandb_project:
            out.append(("logger.wandb.project", lg.wandb_project, "set", "logging.wandb_project"))
        out.append(("logger.wandb.name", cfg.name, "derived", "name"))
    return out


def overrides(cfg: Experiment, tree: dict[str, Any] | None = None) -> list[Override]:
    """The overrides for ``cfg`` against the recipe's tree: always the sizes, dirs and logger; otherwise only what differs.

    A field left at the experiment default never overrides the recipe's value. Keys set again in
    ``trainer.overrides`` are left to the user's override (appended last, verbatim).
    """
    tree = recipe_tree(cfg) if tree is None else tree
    if tree is None:
        tree = _tree.config_tree(cfg.images.nemo_rl_version, DEFAULT_RECIPE) or {}
    user_keys = {parse_override(o)[1] for o in cfg.trainer.overrides}
    out: list[Override] = []
    seen: set[str] = set()
    for key, value, mode, source in _desired(cfg, tree):
        if key in user_keys or key in seen:
            continue
        if mode == "set" and _same(_default(source), value):
            continue
        exists = _tree.has_key(tree, key)
        if mode != "always" and exists and _same(_tree.get_value(tree, key), value):
            continue
        if mode != "always" and not exists and value is None:
            continue
        seen.add(key)
        out.append(Override(key, value, add=not exists, source=source))
    for i, text in enumerate(cfg.trainer.overrides):
        prefix, key, value = parse_override(text)
        out.append(_Verbatim(key, value, add=prefix.startswith("+"), source=f"trainer.overrides[{i}]", text=text))
    return out


@dataclass(frozen=True)
class _Verbatim(Override):
    text: str = ""

    def render(self) -> str:
        return self.text


_DEFAULTS = Experiment(name="defaults")


def _default(source: str) -> Any:
    """The experiment's own default for a dotted field (``grpo.learning_rate`` -> 5e-6)."""
    obj: Any = _DEFAULTS
    for part in source.split("."):
        obj = getattr(obj, part, None)
    return obj


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, bool) or isinstance(b, bool):
        return a is b or (isinstance(a, bool) and isinstance(b, bool) and a == b)
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return float(a) == float(b)
    if isinstance(a, str) and isinstance(b, (int, float)) or isinstance(b, str) and isinstance(a, (int, float)):
        try:
            return float(a) == float(b)
        except ValueError:
            return False
    return a == b


def command_lines(cfg: Experiment, *, overrides_list: list[Override] | None = None) -> list[str]:
    """The command as display lines: ``cd ... && python -u <script> --config <recipe>``, then one override per line."""
    code_dir = cfg.trainer.code_dir or DEFAULT_CODE_DIR
    python = cfg.trainer.python or "python"
    ovs = overrides(cfg) if overrides_list is None else overrides_list
    uploaded = local_recipe(cfg) is not None
    config_arg = f'"$WD"/{sh(recipe_path(cfg))}' if uploaded else sh(recipe_path(cfg))
    prefix = 'WD="$PWD" && ' if uploaded else ""
    # with custom rewards, NeMo-RL's own entry script runs under nbtools' wrapper, which registers the environment first
    wrapper = f"-m {ENTRY_MODULE} " if reward_overrides(cfg) else ""
    head = (f"{prefix}cd {sh(code_dir)} && {sh(python)} -u {wrapper}{sh(entry_script(cfg))} "
            f"--config {config_arg}")
    return [head] + [sh(o.render()) for o in ovs]


def command(cfg: Experiment, *, overrides_list: list[Override] | None = None) -> str:
    """The shell command the job runs (one line, every override shell-quoted).

    Example:
        >>> nemo_rl.command(cfg)
        'cd /opt/nemo-rl && python -u examples/run_grpo_math.py --config examples/configs/grpo_math_1B.yaml ...'
    """
    return " ".join(command_lines(cfg, overrides_list=overrides_list))


def resolved(cfg: Experiment, tree: dict[str, Any], key: str) -> Any:
    """A key's value in the job: the recipe's, with the command's overrides applied, interpolations followed."""
    merged = _tree.merge(tree, {})
    for o in overrides(cfg, tree):
        value = o.value
        if isinstance(value, str):
            try:
                value = int(value)
            except ValueError:
                pass
        cur = merged
        parts = o.key.split(".")
        for part in parts[:-1]:
            if not isinstance(cur.get(part), dict):
                cur[part] = {}
            cur = cur[part]
        cur[parts[-1]] = value
    return _tree.get_value(merged, key)
