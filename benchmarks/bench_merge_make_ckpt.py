"""Checkpoint generator for bench_merge.py: a Llama-style bf16 model saved by N ranks with FSDP2 + DCP.

Run with ``python -m torch.distributed.run --standalone --nproc_per_node=4 benchmarks/bench_merge_make_ckpt.py
OUT_WEIGHTS_DIR --hidden 2048 --intermediate 5632 --layers 22 --heads 32 --vocab 32000`` (``--tiny``: a 2-layer model
of hidden size 64, what ``bench_merge.py --tiny`` writes).
The model is a plain module tree with HF Llama parameter names (no transformers import per rank), built on the
meta device, ``fully_shard`` per layer and root, ``to_empty`` on CPU, seeded init of each local shard, then
``dcp.save({"model": get_model_state_dict(m)}, FileSystemWriter(dir))`` - NeMo-RL's DTensor v1 layout.
``--verl-actor DIR`` also writes the same weights as verl v0.7.0 does (``fsdp_checkpoint_manager.py``: each rank
``torch.save``s ``model.state_dict()``, DTensors, to ``model_world_size_{W}_rank_{R}.pt``; rank 0 writes
``fsdp_config.json``), for bench_ckpt_read.py.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch import nn

TINY = {"hidden": 64, "intermediate": 128, "layers": 2, "heads": 4, "vocab": 256}  # seconds end to end (tests)


def llama_shapes(hidden: int, inter: int, layers: int, heads: int, kv_heads: int, vocab: int) -> dict[str, tuple]:
    head_dim = hidden // heads
    shapes = {"model.embed_tokens.weight": (vocab, hidden)}
    for i in range(layers):
        p = f"model.layers.{i}."
        shapes |= {
            p + "self_attn.q_proj.weight": (hidden, hidden),
            p + "self_attn.k_proj.weight": (kv_heads * head_dim, hidden),
            p + "self_attn.v_proj.weight": (kv_heads * head_dim, hidden),
            p + "self_attn.o_proj.weight": (hidden, hidden),
            p + "mlp.gate_proj.weight": (inter, hidden),
            p + "mlp.up_proj.weight": (inter, hidden),
            p + "mlp.down_proj.weight": (hidden, inter),
            p + "input_layernorm.weight": (hidden,),
            p + "post_attention_layernorm.weight": (hidden,),
        }
    return shapes | {"model.norm.weight": (hidden,), "lm_head.weight": (vocab, hidden)}


def build(shapes: dict[str, tuple], dtype: torch.dtype) -> nn.Module:
    root = nn.Module()
    with torch.device("meta"):
        for name, shape in shapes.items():
            *path, leaf = name.split(".")
            mod = root
            for part in path:
                if not hasattr(mod, part):
                    mod.add_module(part, nn.Module())
                mod = getattr(mod, part)
            mod.register_parameter(leaf, nn.Parameter(torch.empty(shape, dtype=dtype)))
    return root


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--hidden", type=int, default=2048)
    ap.add_argument("--intermediate", type=int, default=5632)
    ap.add_argument("--layers", type=int, default=22)
    ap.add_argument("--heads", type=int, default=32)
    ap.add_argument("--vocab", type=int, default=32000)
    ap.add_argument("--verl-actor", help="also write verl's global_step_N/actor rank files of these weights here")
    ap.add_argument("--tiny", action="store_true", help="the dims of bench_merge.py's tiny model (overrides the others)")
    a = ap.parse_args()
    if a.tiny:
        a.hidden, a.intermediate, a.layers, a.heads, a.vocab = (TINY[k] for k in ("hidden", "intermediate", "layers",
                                                                                   "heads", "vocab"))
    dist.init_process_group("gloo")
    from torch.distributed.checkpoint.state_dict import get_model_state_dict
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    t0 = time.perf_counter()
    rank = dist.get_rank()
    mesh = init_device_mesh("cpu", (dist.get_world_size(),))
    model = build(llama_shapes(a.hidden, a.intermediate, a.layers, a.heads, a.heads, a.vocab), torch.bfloat16)
    for layer in model.model.layers.children():
        fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
    model.to_empty(device="cpu")
    g = torch.Generator().manual_seed(1234 + rank)
    with torch.no_grad():
        for p in model.parameters():
            p.to_local().normal_(0, 0.02, generator=g)
    dcp.save({"model": get_model_state_dict(model)}, storage_writer=dcp.FileSystemWriter(a.out))
    if a.verl_actor:
        actor, world = Path(a.verl_actor), dist.get_world_size()
        actor.mkdir(parents=True, exist_ok=True)
        torch.save(model.state_dict(), actor / f"model_world_size_{world}_rank_{rank}.pt")
        if rank == 0:
            (actor / "fsdp_config.json").write_text(json.dumps({"FSDP_version": 2, "world_size": world}, indent=4))
    dist.barrier()
    if rank == 0:
        print(f"wrote {a.out} in {time.perf_counter() - t0:.1f} s", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
