"""Write NeMo-RL v0.7 ``policy/weights`` checkpoints with NeMo-Automodel's own ``Checkpointer`` on 2 gloo CPU ranks;
runs inside the venv of tools/automodel_venv.sh, not a test module.

Reads a job (JSON) on stdin: ``{"out": DIR, "formats": ["torch_save", "safetensors"], "step": 3}``; writes
``DIR/base`` (a tiny Llama built in code, saved with ``save_pretrained``: nothing is downloaded) and, per format,
``DIR/<format>/step_<step>/policy/weights``; prints a JSON summary (the files written, relative to each step).

What runs: ``nemo_automodel.components.checkpoint.checkpointing.Checkpointer(CheckpointingConfig(...)).save_model(
model, weights_path=step_N/policy/weights)``, as NeMo-RL v0.7's ``nemo_rl/models/automodel/checkpoint.py``
``AutomodelCheckpointManager`` calls it (``model_repo_id`` = the policy's model path; ``model_save_format`` and
``save_consolidated`` from the policy's checkpointing config), on a ``LlamaForCausalLM`` loaded with
``from_pretrained`` and sharded with FSDP2 ``fully_shard`` per decoder layer and the root on a 1-D CPU mesh (as
Automodel's FSDP2 parallelizer does; the parallelizer itself is not run). Each rank adds ``1/1024`` to its shards
first, so the saved weights are not the base model's. The ranks are forked from this process after it imported
Automodel's checkpointer and transformers once; rank 0 writes ``DIR/base`` after the fork (no torch op before it).

Not as NeMo-RL runs it: NeMo-RL saves with ``is_async=True`` (then ``async_wait()``); on CPU the async stager cannot
be built (``Checkpointer.__init__`` -> torch's ``DefaultStager()``: ``AssertionError: Non-blocking copy requires that
the current accelerator is available.``, torch 2.13.0+cpu), so this saves synchronously: the same files, async only
moves the writing off the training step.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import traceback

import torch
import torch.distributed as dist
from tiny_llama import base_model  # noqa: E402 - the sibling module (this script's folder is on sys.path)


def _rank(rank: int, world: int, store: str, base: str, out: str, formats: list[str], step: int) -> None:
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=world)
    try:
        if rank == 0:  # here, not in the parent: no torch op runs before the fork
            base_model(base)
        dist.barrier()
        from nemo_automodel.components.checkpoint.checkpointing import Checkpointer, CheckpointingConfig
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import fully_shard
        from transformers import AutoModelForCausalLM

        mesh = init_device_mesh("cpu", (world,), mesh_dim_names=("dp",))
        for fmt in formats:
            model = AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32)
            for layer in model.model.layers:
                fully_shard(layer, mesh=mesh)
            fully_shard(model, mesh=mesh)
            with torch.no_grad():
                for p in model.parameters():
                    p.add_(1 / 1024)
            cfg = CheckpointingConfig(enabled=True, checkpoint_dir=os.path.join(out, fmt), model_save_format=fmt,
                                      model_repo_id=base, model_cache_dir=None, save_consolidated=False,
                                      is_peft=False, is_async=False)  # NeMo-RL: True (see the docstring)
            ckpt = Checkpointer(cfg, dp_rank=rank, tp_rank=0, pp_rank=0)
            ckpt.save_model(model, weights_path=os.path.join(out, fmt, f"step_{step}", "policy", "weights"))
            ckpt.close()
            dist.barrier()
    except BaseException:
        traceback.print_exc()
        raise
    finally:
        dist.destroy_process_group()


def main() -> None:
    import torch.multiprocessing as mp

    job = json.load(sys.stdin)
    summary = os.fdopen(os.dup(1), "w")  # the ranks' prints go to stderr, the summary here
    os.dup2(2, 1)
    out, step = job["out"], job["step"]
    base = os.path.join(out, "base")
    # imported once here, inherited by the forked ranks (spawned ones imported all of it again: most of the CPU)
    from nemo_automodel.components.checkpoint.checkpointing import Checkpointer  # noqa: F401
    from torch.distributed.fsdp import fully_shard  # noqa: F401
    from transformers import AutoModelForCausalLM, LlamaForCausalLM  # noqa: F401

    with tempfile.TemporaryDirectory() as tmp:
        mp.start_processes(_rank, args=(2, os.path.join(tmp, "store"), base, out, job["formats"], step), nprocs=2,
                           join=True, start_method="fork")
    files = {}
    for fmt in job["formats"]:
        root = os.path.join(out, fmt, f"step_{step}")
        files[fmt] = sorted(os.path.relpath(os.path.join(d, f), root) for d, _, fs in os.walk(root) for f in fs)
    from importlib.metadata import version

    with summary:
        json.dump({"nemo_automodel": version("nemo-automodel"), "files": files}, summary)


if __name__ == "__main__":
    try:
        main()
    except BaseException:  # noqa: BLE001 - a failed rank can leave this process waiting on its threads: exit now
        traceback.print_exc()
        sys.stderr.flush()
        os._exit(1)
