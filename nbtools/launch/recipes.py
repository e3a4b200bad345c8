"""The tutorials' GRPO runs as experiment configs, so each can be linted, built and launched from a notebook.

Why: every tutorial hides its run in a shell heredoc with hard-coded keys; as configs they get the same command
builder, lint and secrets handling as any other experiment. Where a tutorial hit a known trap the recipe carries the
fix (noted per recipe): Gemma-3 gets ``vllm_kwargs.block_size: 32``, checkpoints go to absolute dirs on the shared
mount in ``torch_save`` format, and keys come from the environment / Kubernetes Secrets.

Example:
    >>> cfg = recipes.get("tutorial-004-qwen2.5-1.5b")
    >>> print(nbtools.launch.build(cfg).entrypoint)
"""

from __future__ import annotations

import copy
from typing import Any

import yaml

from nbtools.config import Experiment, from_dict

__all__ = ["RECIPES", "NOTES", "names", "get", "to_yaml"]

_HF = {"env": "HF_TOKEN", "k8s_secret": "hf-secret", "key": "hf_api_token"}
_WANDB = {"env": "WANDB_API_KEY", "k8s_secret": "wandb-secret", "key": "api_key"}
_GCP = {"project": "my-gcp-project", "region": "us-central1", "zone": "us-central1-b"}


def _dirs(name: str, mount: str = "/data") -> tuple[dict[str, str], dict[str, str]]:
    return {"checkpoint_dir": f"{mount}/nemo-rl/{name}/checkpoints"}, {"log_dir": f"{mount}/nemo-rl/{name}/logs"}


def _gke(name: str, gpu: str, nodes: int) -> dict[str, Any]:
    return {
        "name": name,
        "backend": "gke",
        "gcp": dict(_GCP),
        "cluster": {"name": "nbtools-" + ("b200" if gpu == "nvidia-b200" else "h200"), "gpu_type": gpu, "worker_replicas": nodes, "gpus_per_node": 8},
        "storage": {"kind": "gcsfuse", "bucket": "my-gcp-project-nemo-rl", "mount_path": "/data"},
    }


def _recipe(base: dict[str, Any], **sections: Any) -> dict[str, Any]:
    out = copy.deepcopy(base)
    for k, v in sections.items():
        out[k] = {**out.get(k, {}), **v} if isinstance(v, dict) else v
    return out


_ck000, _lg000 = _dirs("gemma3-1b-it-b200")
_ck001, _lg001 = _dirs("gemma3-27b-it-gsm8k")
_ck003, _lg003 = _dirs("grpo-math-deepscaler", "/nemo-workspace")
_ck004a, _lg004a = _dirs("llama3-1-8b-grpo-4nodes")
_ck004b, _lg004b = _dirs("qwen2-5-1-5b-grpo")
_ck002, _lg002 = _dirs("verl-qwen2-5-32b-gsm8k")

RECIPES: dict[str, dict[str, Any]] = {
    "tutorial-000-gemma3-1b-it": _recipe(
        _gke("gemma3-1b-it-b200", "nvidia-b200", 1),
        images={"nemo_rl_version": "v0.5.0"},
        trainer={
            "recipe": "examples/configs/recipes/llm/grpo-gemma3-1b-it-1n8g-fsdp2tp1.yaml",
            "vllm_cfg": {"max_model_len": 2048, "enforce_eager": True},
            "vllm_kwargs": {"block_size": 32},
        },
        model={"name": "google/gemma-3-1b-it", "chat_template_kwargs": {"enable_thinking": True}, "max_total_sequence_length": 2048},
        data={"dataset": "OpenMathInstruct-2"},
        grpo={"max_num_steps": 30, "val_period": 5, "val_at_start": True, "max_new_tokens": 1024},  # scored at step 30
        checkpointing={**_ck000, "model_save_format": "torch_save", "save_consolidated": False, "save_optimizer": False},
        logging={**_lg000, "tensorboard": True, "wandb": False},
        secrets={"hf_token": dict(_HF)},
    ),
    "tutorial-001-gemma3-27b-it": _recipe(
        _gke("gemma3-27b-it-gsm8k", "nvidia-b200", 3),  # 2 training nodes (its step_10 has 16 DCP shards) + 1 vLLM node
        images={"nemo_rl_version": "v0.7.0"},
        trainer={
            "recipe": "examples/configs/recipes/llm/grpo-gemma3-27b-it-8n4g-fsdp2tp4-actckpt-long.yaml",
            "colocated": False,
            "generation_nodes": 1,
            "vllm_cfg": {"tensor_parallel_size": 8, "gpu_memory_utilization": 0.9},
            "vllm_kwargs": {"block_size": 32},
        },
        model={"name": "google/gemma-3-27b-it", "max_total_sequence_length": 16384, "tensor_parallel_size": 8},
        data={"dataset": "GSM8K"},
        grpo={"num_prompts_per_step": 16, "num_generations_per_prompt": 64, "max_num_steps": 10},  # 16 x 64, as 001
        checkpointing={**_ck001, "model_save_format": "torch_save"},
        # W&B as the tutorial, and TensorBoard too: notebook 04 reads the event files
        logging={**_lg001, "tensorboard": True, "wandb": True, "wandb_project": "nemo-rl"},
        secrets={"hf_token": dict(_HF), "wandb_api_key": dict(_WANDB)},
    ),
    "tutorial-003-qwen3-1.7b-deepscaler": {
        "name": "grpo-math-deepscaler",
        "backend": "ray",
        "cluster": {"gpu_type": "nvidia-h200-141gb", "worker_replicas": 2, "gpus_per_node": 8},
        "storage": {"kind": "gcsfuse", "mount_path": "/nemo-workspace"},
        "images": {"nemo_rl_version": "v0.5.0"},
        "trainer": {"recipe": "examples/configs/grpo_math_1B.yaml"},
        "model": {"name": "Qwen/Qwen3-1.7B-Base", "max_total_sequence_length": 4096},
        # v0.5.0 has no data.validation: DeepScalerDataset validates on HuggingFaceH4/aime_2024 by itself
        # (NVIDIA-NeMo/RL v0.5.0 nemo_rl/data/datasets/response_datasets/deepscaler.py)
        "data": {"dataset": "DeepScaler"},
        "grpo": {"num_prompts_per_step": 64, "num_generations_per_prompt": 16, "max_num_steps": 200, "val_period": 10},
        "checkpointing": {**_ck003, "save_period": 10, "keep_top_k": 10, "model_save_format": "torch_save"},
        "logging": {**_lg003, "tensorboard": True},
        "ray": {"address": "http://nemo-rl-head.lepton.example:8265"},
        "secrets": {"hf_token": {"env": "HF_TOKEN"}},
    },
    "tutorial-004-llama3.1-8b": _recipe(
        _gke("llama3-1-8b-grpo-4nodes", "nvidia-b200", 4),
        images={"nemo_rl_version": "v0.5.0"},
        trainer={"recipe": "examples/configs/grpo_math_8B.yaml"},
        model={"name": "meta-llama/Llama-3.1-8B-Instruct", "max_total_sequence_length": 4096},
        grpo={"num_prompts_per_step": 64, "num_generations_per_prompt": 32, "max_num_steps": 100},
        checkpointing=dict(_ck004a),
        logging={**_lg004a, "tensorboard": True, "wandb": True},  # + TensorBoard, for notebook 04's curves
        secrets={"hf_token": dict(_HF), "wandb_api_key": dict(_WANDB)},
    ),
    "tutorial-004-qwen2.5-1.5b": _recipe(
        _gke("qwen2-5-1-5b-grpo", "nvidia-b200", 1),
        images={"nemo_rl_version": "v0.5.0"},
        trainer={"recipe": "examples/configs/grpo_math_1B.yaml"},
        model={"name": "Qwen/Qwen2.5-1.5B", "max_total_sequence_length": 512},
        grpo={"max_num_steps": 100},
        checkpointing=dict(_ck004b),
        logging={**_lg004b, "tensorboard": True},
        secrets={"hf_token": dict(_HF)},
    ),
    "tutorial-002-verl-qwen2.5-32b": _recipe(
        _gke("verl-qwen2-5-32b-gsm8k", "nvidia-b200", 2),
        images={"image": "verlai/verl:vllm011.latest", "ray_version": "2.47.0"},
        trainer={
            "kind": "verl",
            "overrides": [
                "data.max_prompt_length=512",
                "data.max_response_length=512",
                "actor_rollout_ref.actor.ppo_mini_batch_size=256",
                "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=64",
                "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=8",
                "actor_rollout_ref.rollout.gpu_memory_utilization=0.6",
                "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=4",
                "actor_rollout_ref.actor.strategy=fsdp2",
                "trainer.total_epochs=2",
            ],
        },
        model={"name": "Qwen/Qwen2.5-32B-Instruct", "tensor_parallel_size": 8},
        data={"dataset": "gsm8k", "data_dir": "/data/gsm8k"},
        grpo={"num_prompts_per_step": 256, "num_generations_per_prompt": 8, "max_num_steps": 58, "val_period": 10,
              "learning_rate": 1.0e-5, "kl_penalty": 0.001},
        checkpointing={**_ck002, "save_period": 10},
        logging={**_lg002, "tensorboard": False},
        secrets={"hf_token": dict(_HF)},
    ),
}

NOTES: dict[str, str] = {
    "tutorial-000-gemma3-1b-it": "sunbc0120/b200-nemo-rl job config on the v0.5.0 image; checkpoint_dir made absolute "
    "on the bucket (the original was relative, i.e. pod-local).",
    "tutorial-001-gemma3-27b-it": "GKE samples gemma3-27b-gsm8k.sh: 16 x 64, non-colocated; 2 training nodes (its step_10 has 16 "
    "DCP shards) + one vLLM node; TensorBoard kept on beside W&B; v0.7.0's registered GSM8K "
    "dataset replaces the sed-patched ResponseDataset (whose worked-solution answers gave reward 0); block_size 32 added.",
    "tutorial-003-qwen3-1.7b-deepscaler": "DGX Cloud Lepton RayCluster (backend ray); torch_save instead of the "
    "tutorial's consolidated safetensors (known corrupt merges); v0.5.0's DeepScaler brings AIME-2024 validation.",
    "tutorial-004-llama3.1-8b": "gpu-recipes submit_llama3.1-8b.sh: grpo_math_8B.yaml on 4 x 8 with W&B.",
    "tutorial-004-qwen2.5-1.5b": "gpu-recipes submit_qwen2.5-1.5b.sh: grpo_math_1B.yaml on 1 x 8.",
    "tutorial-002-verl-qwen2.5-32b": "verl on GKE (esaaren): main_ppo with algorithm.adv_estimator=grpo on 2 x 8 B200; "
    "checkpoints to the bucket (trainer.default_local_dir) and an explicit step budget added.",
}


def names() -> list[str]:
    """The recipe names, in tutorial order."""
    return sorted(RECIPES)


def get(name: str, *, backend: str | None = None, **changes: Any) -> Experiment:
    """A recipe as a validated :class:`~nbtools.config.Experiment`; ``changes`` are dotted keys (``grpo.max_num_steps``).

    Example:
        >>> cfg = recipes.get("tutorial-000-gemma3-1b-it", **{"grpo.max_num_steps": 5})
    """
    if name not in RECIPES:
        import difflib

        from nbtools.errors import NotFoundError

        near = difflib.get_close_matches(name, names(), n=1)
        raise NotFoundError(
            f"no recipe named {name!r}; known: {', '.join(names())}",
            fix=f"use {near[0]!r}" if near else f"pick one of {', '.join(names())}",
        )
    data = copy.deepcopy(RECIPES[name])
    if backend is not None:
        data["backend"] = backend
    cfg = from_dict(data)
    return cfg.replace(**changes) if changes else cfg


def to_yaml(name: str) -> str:
    """The recipe as an experiment YAML (``experiments/<name>.yaml`` is exactly this; save a copy to edit it)."""
    nb = "03_launch_grpo" if RECIPES[name].get("backend") == "ray" else "01_provision_gke"
    head = (f"# {name}: {NOTES.get(name, '')}\n"
            f"# Run it:  nbtools launch experiments/{name}.yaml --lint-only; then notebooks/{nb}.ipynb with "
            f"BACKEND=\"{RECIPES[name].get('backend', 'gke')}\", CONFIG=\"../experiments/{name}.yaml\"\n")
    return head + yaml.safe_dump(RECIPES[name], sort_keys=False)
