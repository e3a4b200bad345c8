"""What the card states, gathered as data: the setup, the training record, the merged checkpoint, rewards, licence.

Why: every number in the card comes from the run's own files (TensorBoard events, ``training_info.json``, the
merge's ``checksums.json``) or the experiment config, never from memory; what cannot be read is said, not guessed.

Example:
    >>> facts = gather(cfg, "runs/local-rehearsal/merged_hf")
    >>> facts.merged.step, facts.training.steps
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd
import yaml

import nbtools.card._io as _io
from nbtools import storage

__all__ = ["Setup", "Training", "Merged", "Facts", "gather", "merged_from", "fingerprint", "KNOWN_LICENSES", "HUB_DATASETS", "hub_dataset"]

# base model -> licence id on the Hub (checked on each model's page); only used when the base model's own
# README is not on this machine. nbtools' rehearsal model is built in code by this Apache-2.0 project.
KNOWN_LICENSES: dict[str, str] = {
    "nbtools/tiny-llama-max3": "apache-2.0",
    "Qwen/Qwen2.5-1.5B": "apache-2.0",
    "Qwen/Qwen2.5-1.5B-Instruct": "apache-2.0",
    "Qwen/Qwen2.5-Math-1.5B-Instruct": "apache-2.0",
    "Qwen/Qwen2.5-7B-Instruct": "apache-2.0",
    "Qwen/Qwen2.5-32B-Instruct": "apache-2.0",
    "Qwen/Qwen3-1.7B-Base": "apache-2.0",
    "Qwen/Qwen3-1.7B": "apache-2.0",
    "Qwen/Qwen3-8B": "apache-2.0",
    "google/gemma-3-1b-it": "gemma",
    "google/gemma-3-27b-it": "gemma",
    "meta-llama/Llama-3.1-8B-Instruct": "llama3.1",
    "meta-llama/Llama-3.2-1B": "llama3.2",
    "meta-llama/Llama-3.2-1B-Instruct": "llama3.2",
    "deepseek-ai/DeepSeek-R1-Distill-Qwen-1.5B": "mit",
}

# NeMo-RL / verl dataset names -> (Hub dataset id, pretty name, split), as their loaders call load_dataset
HUB_DATASETS: dict[str, tuple[str, str, str | None]] = {
    "openmathinstruct-2": ("nvidia/OpenMathInstruct-2", "OpenMathInstruct-2", "train"),
    "deepscaler": ("agentica-org/DeepScaleR-Preview-Dataset", "DeepScaleR-Preview", "train"),
    "aime2024": ("HuggingFaceH4/aime_2024", "AIME 2024", "train"),
    "math500": ("HuggingFaceH4/MATH-500", "MATH-500", "test"),
    "gsm8k": ("openai/gsm8k", "GSM8K", "test"),
    "dapomath17k": ("BytedTsinghua-SIA/DAPO-Math-17k", "DAPO-Math-17k", "train"),
}


def hub_dataset(name: str | None) -> tuple[str, str, str | None] | None:
    """(Hub id, pretty name, split) of a trainer's dataset name; an ``org/name`` id stands for itself; else None."""
    if not name:
        return None
    if name.lower() in HUB_DATASETS:
        return HUB_DATASETS[name.lower()]
    if re.fullmatch(r"[\w.-]+/[\w.-]+", name):
        return name, name.split("/")[-1], None
    return None


@dataclass(frozen=True)
class Setup:
    """The experiment as the card's first table states it."""

    name: str
    config_hash: str
    backend: str
    trainer: str
    trainer_version: str
    image: str
    cluster: str
    gpus: int | None
    base_model: str
    dataset: str
    validation: str | None
    grpo: dict[str, Any]
    rewards: list[dict[str, Any]]
    rewards_source: str
    example: tuple[str, int]  # a prompt for the loading snippet, and its max_new_tokens
    rehearsal: bool = False  # trained by nbtools' local miniature GRPO (no image, no GPUs)
    tag: str = "nbtools-rehearsal"  # the trainer's tag in the card's metadata


@dataclass(frozen=True)
class Training:
    """The run's record from its TensorBoard events (empty when they cannot be read from here)."""

    log_dir: str | None
    steps: int | None
    wall_seconds: float | None
    gpu_hours: float | None
    last: dict[str, tuple[int, float]]  # friendly metric -> (step, value) of its last logged point
    first_reward: tuple[int, float] | None
    best_accuracy: tuple[int, float] | None
    frame: pd.DataFrame = field(repr=False, compare=False, default_factory=pd.DataFrame)


@dataclass(frozen=True)
class Merged:
    """The checkpoint that became this model, and why it was the one."""

    step: int | None
    info: dict[str, Any]
    metric_name: str | None
    higher_is_better: bool
    keep_top_k: int | None
    kept: list[dict[str, Any]]  # every step_N still on disk: step, metric value
    best_step: int | None
    layout: str | None
    tensors: int | None
    weight_files: int
    fingerprint: str | None  # sha256 over the weight files' digests (checksums.json); None without a manifest


@dataclass(frozen=True)
class Facts:
    """Everything the card renders, plus what could not be filled and why."""

    setup: Setup
    training: Training
    merged: Merged
    license: str | None
    license_source: str
    chat_template: bool
    notes: list[str]
    procedure: dict[str, str] = field(default_factory=dict)  # precision, sequence length, optimizer, LR schedule
    region: str | None = None  # where a cloud run trained (GCS-stored runs: the experiment's GCP region)


def _first_dir(candidates: list[Any]) -> str | None:
    """The first candidate (a local path or a URL) that exists."""
    for c in candidates:
        if c and _io.exists(c):
            return str(c)
    return None


def _here(cfg: Any, cluster_path: Any) -> str | None:
    """Where this machine reads a path the cluster wrote (None when it cannot: outside the shared storage)."""
    from nbtools.errors import NotFoundError

    if not cluster_path:
        return None
    try:
        return cfg.url(str(cluster_path))
    except NotFoundError:
        return None


def _yaml(path: Path | None) -> dict[str, Any]:
    text = _io.read_text(path) if path is not None else None
    try:
        data = yaml.safe_load(text) if text else None
    except yaml.YAMLError:
        data = None
    return data if isinstance(data, dict) else {}


def _setup(cfg: Any) -> Setup:
    from nbtools import trainers

    t = trainers.get(cfg)
    trainer, version = t.label, t.version()
    hw = t.hardware()  # image, cluster, GPUs and an example prompt, as the trainer ran
    g = cfg.grpo
    grpo = {"prompts per step": g.num_prompts_per_step, "generations per prompt": g.num_generations_per_prompt,
            "max steps": g.max_num_steps, "learning rate": g.learning_rate, "KL penalty": g.kl_penalty,
            "temperature": g.temperature, "seed": g.seed}
    rewards, source = _rewards(t)
    return Setup(cfg.name, cfg.config_hash(), cfg.backend, trainer, version, hw.image, hw.cluster, hw.gpus, cfg.model.name,
                 cfg.data.dataset, cfg.data.validation, grpo, rewards, source, hw.example, hw.rehearsal, t.hub_tag())


def _rewards(trainer: Any) -> tuple[list[dict[str, Any]], str]:
    """(name, weight, normalized, kwargs) per reward of the run's trainer, and where the list came from."""
    spec, source = trainer.rewards()
    total = sum(float(x.get("weight", 0)) for x in spec) or 1.0
    return [{"name": str(x.get("name")), "weight": float(x.get("weight", 0)),
             "normalized": float(x.get("weight", 0)) / total, "kwargs": dict(x.get("kwargs") or {})} for x in spec], source


def _training(log_dir: Path | None, gpus: int | None, notes: list[str]) -> Training:
    from nbtools import metrics

    empty = Training(None if log_dir is None else str(log_dir), None, None, None, {}, None, None)
    if log_dir is None:
        notes.append("no TensorBoard log_dir visible from here: steps, wall time and curves are left out")
        return empty
    df = metrics.read_tensorboard(log_dir)
    if df.empty:
        notes.append(f"no TensorBoard scalars under {storage.name_of(log_dir)}: steps, wall time and curves are left out")
        return empty
    last = {r.metric: (int(r.step), float(r.value)) for r in metrics.latest(df, ("reward", "accuracy",
            "generation_length", "kl")).itertuples()}
    reward = metrics.select(df, "reward").sort_values("step")
    acc = metrics.select(df, "accuracy")
    best = acc.loc[acc["value"].idxmax()] if not acc.empty else None
    steps = int(reward["step"].max()) if not reward.empty else int(df["step"].max())
    walls = df["wall_time"].dropna()
    wall = float(walls.max() - walls.min()) if len(walls) > 1 else None
    gpu_hours = wall / 3600 * gpus if wall is not None and gpus else None
    return Training(str(log_dir), steps, wall, gpu_hours, last,
                    (int(reward.iloc[0]["step"]), float(reward.iloc[0]["value"])) if not reward.empty else None,
                    (int(best["step"]), float(best["value"])) if best is not None else None, df)


def _manifest(model_dir: Path) -> dict[str, Any]:
    text = _io.read_text(model_dir / "checksums.json")
    try:
        return json.loads(text) if text else {}
    except json.JSONDecodeError:
        return {}


def merged_from(model_dir: str | Path) -> str | None:
    """The checkpoint (``step_N`` path, as seen by the merge) named in the model's ``checksums.json``, or None."""
    return _manifest(Path(model_dir)).get("source")


def fingerprint(model_dir: str | Path) -> str | None:
    """sha256 over the weight files' own digests (from the merge's checksums.json): same weights, same value."""
    manifest = _manifest(Path(model_dir))
    algorithm = manifest.get("algorithm", "sha256")
    files = manifest.get("files") or {}
    weights = {k: v.get(algorithm) for k, v in files.items() if k.endswith(".safetensors") and isinstance(v, dict)}
    if not weights or None in weights.values():
        return None  # no digest to tell the weights apart: an unknown fingerprint never matches a stored one
    return hashlib.sha256(json.dumps([algorithm, weights], sort_keys=True).encode()).hexdigest()[:16]


def _merged(cfg: Any, model_dir: Path, merge: Any, notes: list[str]) -> tuple[Merged, Path | None]:
    from nbtools import checkpoints

    manifest = _manifest(model_dir)
    source = getattr(merge, "source", None) or manifest.get("source")
    name = storage.name_of(str(source)) if source else None
    m = re.fullmatch(r"(?:global_)?step_(\d+)", name or "")  # NeMo-RL's step_N, verl's global_step_N
    step = int(m.group(1)) if m else None
    ckpt_dir = _first_dir([_here(cfg, storage.parent_of(str(source))) if source else None, cfg.checkpoints_url,
                           storage.join(storage.parent_of(str(model_dir)), "checkpoints")])
    step_dir = _first_dir([_here(cfg, source), storage.join(ckpt_dir, name) if ckpt_dir and name else None])
    c = cfg.checkpointing
    info = checkpoints.read_training_info(step_dir) if step_dir else {}
    kept, best_step = [], None
    if ckpt_dir is not None:
        table = checkpoints.list_checkpoints(ckpt_dir)
        kept = [{"step": int(r["step"]), "value": _num(r.get(c.metric_name)) if c.metric_name else None}
                for r in table.to_dict("records")]
        if kept:
            best_step = int(storage.name_of(checkpoints.best(ckpt_dir, c.metric_name, c.higher_is_better)).rsplit("_", 1)[1])
    if step is None:
        notes.append("this directory has no merge manifest (checksums.json) naming its checkpoint: merged step unknown")
    elif not info:
        notes.append(f"{name}/training_info.json is not visible from here: the merge metric is left out")
    files = manifest.get("files") or {}
    weights = sum(1 for k in files if k.endswith(".safetensors"))
    return Merged(step, info, c.metric_name, c.higher_is_better, c.keep_top_k, kept, best_step,
                  getattr(merge, "layout", None) or manifest.get("layout"),
                  getattr(merge, "tensors", None) or manifest.get("tensors"), weights, fingerprint(model_dir)), step_dir


def _num(v: Any) -> float | None:
    return float(v) if isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(float(v)) else None


def _license(base: str, dirs: list[Path | None]) -> tuple[str | None, str]:
    """The base model's licence: its own README front matter when on this machine, else the known table."""
    from huggingface_hub import ModelCard

    for d in dirs:
        text = _io.read_text(d / "README.md") if d is not None else None
        if text:
            try:
                lic = ModelCard(text, ignore_metadata_errors=True).data.get("license")
            except ValueError:
                lic = None
            if isinstance(lic, str) and re.fullmatch(r"[a-z0-9][a-z0-9.+-]{0,63}", lic):  # a Hub licence id
                return lic, "the base model's README.md"
    if base in KNOWN_LICENSES:
        return KNOWN_LICENSES[base], "nbtools' table of known base models"
    return None, "unknown"


def gather(cfg: Any, model_dir: str | Path, *, merge: Any = None) -> Facts:
    """All facts for one merged model: setup from ``cfg``, the rest from the run's files (see module docstring)."""
    model_dir = Path(model_dir)
    notes: list[str] = []
    setup = _setup(cfg)
    merged, step_dir = _merged(cfg, model_dir, merge, notes)
    step_cfg = _yaml(storage.join(step_dir, "config.yaml") if step_dir else None)
    step_log = ((step_cfg.get("logger") or {}).get("log_dir")) if step_cfg else None
    log_dir = _first_dir([cfg.logs_url, _here(cfg, step_log), storage.join(storage.parent_of(str(model_dir)), "logs")])
    training = _training(log_dir, setup.gpus, notes)
    if setup.gpus is None:
        notes.append("GPU-hours: not applicable (the local rehearsal trains on CPU ranks)")
    policy_model = (step_cfg.get("policy") or {}).get("model_name") if step_cfg else None
    base_dirs = [Path(p) for p in (policy_model, cfg.model.name) if p and Path(str(p)).is_absolute()]
    lic, lic_source = _license(cfg.model.name, base_dirs)
    if lic is None:
        notes.append(f"licence of {cfg.model.name} unknown: set `license:` in the card before publishing")
    tok_cfg = _io.read_text(model_dir / "tokenizer_config.json") or ""
    chat = _io.exists(model_dir / "chat_template.jinja") or '"chat_template"' in tok_cfg
    from nbtools.card._template import procedure

    region = cfg.gcp.region if str(cfg.logs_url).startswith("gs://") else None
    notes.append("Developed by: the experiment does not name its authors; fill it in before publishing")
    return Facts(setup, training, merged, lic, lic_source, chat, notes,
                 procedure(cfg, step_cfg, setup.rehearsal), region)
