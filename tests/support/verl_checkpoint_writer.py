"""Test helper: write real verl v0.7.0 FSDP checkpoints (``global_step_N/actor/``) with torch.distributed on CPU,
through nbtools' one writer of verl's layout (``nbtools.trainers.verl.files``, which the rehearsal uses too).

SOURCE: verl v0.7.0 (github.com/volcengine/verl, tag v0.7.0, Apache-2.0), read, not copied:
- ``verl/utils/checkpoint/fsdp_checkpoint_manager.py`` ``save_checkpoint``: every rank ``torch.save``s
  ``model.state_dict()`` (FSDP2: DTensors, ``Shard(0)`` on a 1-D ``("fsdp",)`` mesh) to
  ``model_world_size_{W}_rank_{R}.pt``, its optimizer state to ``optim_world_size_{W}_rank_{R}.pt`` and
  ``{"lr_scheduler", "rng"}`` to ``extra_state_world_size_{W}_rank_{R}.pt``; rank 0 writes ``huggingface/`` (config
  and tokenizer) and ``fsdp_config.json`` ``{"FSDP_version", "world_size"}``;
- ``verl/workers/fsdp_workers.py`` / ``verl/utils/fsdp_utils.py`` ``apply_fsdp2``: ``fully_shard`` per decoder layer,
  then the root, on ``init_device_mesh(..., mesh_dim_names=["fsdp"])``;
- ``verl/trainer/ppo/ray_trainer.py`` ``_save_checkpoint``: ``{default_local_dir}/global_step_{N}/actor``, the
  dataloader state in ``global_step_{N}/data.pt``, then ``latest_checkpointed_iteration.txt`` holding ``N``.

Ranks are forked (gloo over a FileStore), as in tests/support/checkpoint_writer.py.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import torch
import torch.distributed as dist
from checkpoint_writer import tiny_tokenizer

from nbtools.trainers.verl import files as verl_layout


def verl_shard_placement(world: int):
    """verl's FSDP2 placement rule (v0.7.0 and v0.9.x ``verl/utils/fsdp_utils.py`` ``get_shard_placement_fn``, passed
    as ``shard_placement_fn`` by ``fsdp_workers.py`` and the FSDP engine): the first dim the FSDP size divides, else
    dim 0. A vocabulary of 103 over 2 ranks is therefore sharded on dim 1 (the hidden size)."""
    from torch.distributed.tensor import Shard

    def placement(param):
        return Shard(next((i for i, n in enumerate(param.shape) if n % world == 0), 0))

    return placement


def _rank_main(rank: int, world: int, store_file: str, run_dir: str, steps: list[int], config, state_dict,
               train: bool, verl_placement: bool = False, buffer: bool = False) -> None:
    os.environ["OMP_NUM_THREADS"] = "1"
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{store_file}", rank=rank, world_size=world)
    try:
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import fully_shard
        from transformers import AutoModelForCausalLM

        mesh = init_device_mesh("cpu", (world,), mesh_dim_names=("fsdp",))
        model = AutoModelForCausalLM.from_config(config)
        model.load_state_dict(state_dict)
        kw = {"shard_placement_fn": verl_shard_placement(world)} if verl_placement else {}
        if buffer:  # a persistent buffer, which FSDP leaves a plain tensor on every rank (not a Llama key)
            model.model.register_buffer("probe", torch.arange(6, dtype=torch.float32) / 8)
        for layer in model.model.layers:
            fully_shard(layer, mesh=mesh, **kw)
        fully_shard(model, mesh=mesh, **kw)
        optim = torch.optim.AdamW(model.parameters(), lr=1e-3)
        for step in steps:
            if train:
                ids = torch.arange(8).reshape(1, 8) % config.vocab_size
                model(input_ids=ids, labels=ids).loss.backward()
                optim.step()
                optim.zero_grad()
            actor = verl_layout.step_dir(run_dir, step) / "actor"
            verl_layout.save_actor(actor, model, optim, rank=rank, world=world,
                                   tokenizer=tiny_tokenizer(config.vocab_size) if rank == 0 else None)
            if rank == 0:
                verl_layout.finish_step(run_dir, step, {"_sampler_iter_yielded": step})
            dist.barrier()
    finally:
        dist.destroy_process_group()


def write_verl_run(run_dir: Path, config, state_dict: dict[str, torch.Tensor], steps: list[int],
                   world_size: int = 2, train: bool = True, verl_placement: bool = False, buffer: bool = False) -> None:
    """Save a verl checkpoint at each of ``steps`` (forked gloo ranks), after one AdamW step each when ``train``;
    ``verl_placement``: shard as verl's workers do (:func:`verl_shard_placement`), else every parameter on dim 0;
    ``buffer``: add a persistent buffer ``model.probe`` (a plain tensor in every rank file)."""
    import torch.multiprocessing as mp

    with tempfile.TemporaryDirectory() as tmp:
        mp.start_processes(_rank_main, args=(world_size, os.path.join(tmp, "store"), str(run_dir), steps, config,
                                             state_dict, train, verl_placement, buffer), nprocs=world_size, join=True, start_method="fork")


def tiny_config(tied: bool = False):
    """A 2-layer Llama whose vocabulary (103) does not divide by 2 ranks: uneven FSDP shards."""
    from transformers import LlamaConfig

    return LlamaConfig(vocab_size=103, hidden_size=32, intermediate_size=72, num_hidden_layers=2, num_attention_heads=4,
                       num_key_value_heads=2, max_position_embeddings=64, tie_word_embeddings=tied,
                       bos_token_id=1, eos_token_id=2, pad_token_id=0, architectures=["LlamaForCausalLM"])


def exact_state_dict(config) -> dict[str, torch.Tensor]:
    """Weights that are exact in float32 on every platform (k/1024 for small integers k), so that the bfloat16
    checksums of verl's merger output (tests/assets/verl) hold wherever the test runs."""
    from transformers import AutoModelForCausalLM

    with torch.device("meta"):
        names = {k: v.shape for k, v in AutoModelForCausalLM.from_config(config).state_dict().items()}
    out, salt = {}, 0
    for name, shape in names.items():
        n = int(torch.Size(shape).numel())
        k = (torch.arange(n, dtype=torch.int64) * 7919 + salt) % 1009 - 504
        out[name] = (k.to(torch.float32) / 1024).reshape(shape)
        salt += 101
    return out


def full_state_dicts(run_dir: Path, step: int, world_size: int = 2) -> dict[str, torch.Tensor]:
    """The trained full-precision weights, gathered from the shards with torch itself (the test's ground truth)."""
    shards = [torch.load(Path(run_dir) / f"global_step_{step}" / "actor" / f"model_world_size_{world_size}_rank_{r}.pt",
                         weights_only=False) for r in range(world_size)]
    return {k: torch.cat([s[k].to_local() for s in shards], dim=s0[k].placements[0].dim)
            if hasattr(s0[k], "to_local") else s0[k] for s0 in shards[:1] for k in s0}
