"""Test helper: write real NeMo-RL-style ``step_N`` checkpoints with torch.distributed.checkpoint.

``write_checkpoints(jobs, world_size)`` forks ``world_size`` ranks with ``torch.multiprocessing`` (gloo over a
FileStore, CPU device mesh). Forking the test process that already imported torch keeps this to ~1 s per
launch on a busy 2-core machine, instead of ~20 s for ``torch.distributed.run`` with fresh interpreters.
Each job shards a given full state dict (the test's seeded LlamaForCausalLM) and saves it as NeMo-RL does:

- sharding ``fsdp``: FSDP2 ``fully_shard`` per ``model.layers.N`` and the root (dim-0 shards, uneven when the
  size does not divide the world size); ``tp``: DTensor ``distribute_tensor`` with a TP-style plan
  (``Shard(1)`` on o_proj/down_proj, ``Shard(0)`` on column-parallel weights and embeddings, the rest replicated)
- layout ``v1``: ``dcp.save({"model": sd}, policy/weights)`` -> keys prefixed ``model.``
- ``v2_torch_save``: ``dcp.save(sd, policy/weights/model)``, flat HF keys
- ``v2_safetensors``: ``HuggingFaceStorageWriter(save_distributed=True)`` -> per-rank
  ``shard-0000R-model-00001-of-00001.safetensors`` with DCP_SHARDING_INFO, plus ``.hf_metadata/`` (written
  by :func:`write_step_files`)
"""

from __future__ import annotations

import json
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch import nn


@dataclass
class Job:
    step_dir: Path
    layout: str  # v1 | v2_torch_save | v2_safetensors
    state_dict: dict[str, torch.Tensor] = field(repr=False)
    sharding: str = "fsdp"  # fsdp | tp


def _module_tree(sd: dict[str, torch.Tensor]) -> nn.Module:
    """A plain module tree whose parameter names are exactly the state-dict keys (no transformers needed)."""
    root = nn.Module()
    for name, t in sd.items():
        *path, leaf = name.split(".")
        mod = root
        for p in path:
            if not hasattr(mod, p):
                mod.add_module(p, nn.Module())
            mod = getattr(mod, p)
        mod.register_parameter(leaf, nn.Parameter(t.detach().clone(), requires_grad=False))
    return root


def _tp_placement(name: str):
    from torch.distributed.tensor import Replicate, Shard

    if name.endswith(("o_proj.weight", "down_proj.weight")):
        return [Shard(1)]
    if name.endswith(("proj.weight", "embed_tokens.weight", "lm_head.weight")):
        return [Shard(0)]
    return [Replicate()]


def _rank_main(rank: int, world: int, store_file: str, jobs: list[Job]) -> None:
    os.environ["OMP_NUM_THREADS"] = "1"
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{store_file}", rank=rank, world_size=world)
    try:
        from torch.distributed.checkpoint import HuggingFaceStorageWriter
        from torch.distributed.checkpoint.state_dict import get_model_state_dict
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import fully_shard
        from torch.distributed.tensor import distribute_tensor

        mesh = init_device_mesh("cpu", (world,))
        for job in jobs:
            if job.sharding == "fsdp":
                model = _module_tree(job.state_dict)
                layers = getattr(getattr(model, "model", model), "layers", None)
                for layer in layers.children() if layers is not None else []:
                    fully_shard(layer, mesh=mesh)
                fully_shard(model, mesh=mesh)
                sd = get_model_state_dict(model)
            else:
                sd = {k: distribute_tensor(v.detach().clone(), mesh, _tp_placement(k)) for k, v in job.state_dict.items()}
            weights = Path(job.step_dir) / "policy" / "weights"
            if job.layout == "v1":
                dcp.save({"model": sd}, checkpoint_id=str(weights))
            elif job.layout == "v2_torch_save":
                dcp.save(sd, checkpoint_id=str(weights / "model"))
            elif job.layout == "v2_safetensors":
                dcp.save(sd, storage_writer=HuggingFaceStorageWriter(path=str(weights / "model"), save_distributed=True))
            else:
                raise ValueError(job.layout)
            dist.barrier()
    finally:
        dist.destroy_process_group()


def write_checkpoints(jobs: list[Job], world_size: int) -> None:
    """Save every job with ``world_size`` forked gloo ranks (one launch for all jobs)."""
    import torch.multiprocessing as mp

    with tempfile.TemporaryDirectory() as tmp:
        mp.start_processes(_rank_main, args=(world_size, os.path.join(tmp, "store"), jobs), nprocs=world_size,
                           join=True, start_method="fork")


def tiny_tokenizer(vocab: int):
    """A tiny WordLevel tokenizer built in code (no hub download)."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    words = {"<pad>": 0, "<s>": 1, "</s>": 2, "<unk>": 3} | {f"w{i}": i for i in range(4, vocab)}
    tok = Tokenizer(models.WordLevel(vocab=words, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    return PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", bos_token="<s>", eos_token="</s>",
                                   unk_token="<unk>")


def write_tokenizer(path: Path, vocab: int) -> None:
    """:func:`tiny_tokenizer` saved to ``path``."""
    tiny_tokenizer(vocab).save_pretrained(str(path))


def write_step_files(step_dir: Path, layout: str, config, *, step: int, metric: float | None = None,
                     model_name: str = "nbtools/not-on-the-hub") -> None:
    """The non-weight files NeMo-RL writes next to the weights (rank 0 only in NeMo-RL)."""
    from transformers import GenerationConfig

    step_dir = Path(step_dir)
    if layout == "v2_safetensors":
        meta = step_dir / "policy" / "weights" / "model" / ".hf_metadata"
        meta.mkdir(parents=True, exist_ok=True)
        config.save_pretrained(str(meta))
        GenerationConfig(bos_token_id=1, eos_token_id=2, pad_token_id=0).save_pretrained(str(meta))
    write_tokenizer(step_dir / "policy" / "tokenizer", config.vocab_size)
    info = {"consumed_samples": 16 * step, "current_step": step, "current_epoch": 0, "total_steps": step,
            "total_valid_tokens": 100 * step}
    if metric is not None:
        info["val:accuracy"] = metric
        info["val_reward"] = metric
    (step_dir / "training_info.json").write_text(json.dumps(info))
    (step_dir / "config.yaml").write_text(f"policy:\n  model_name: {model_name}\n")
