"""Write verl checkpoints with verl's own worker and trainer code on 2 gloo CPU ranks, then merge one with verl's own
model merger; runs inside a verl venv (tools/verl_oracle_venv.sh), not a test module.

Reads a job (JSON) on stdin: ``{"out": DIR, "strategies": ["fsdp2", "fsdp"], "steps": [1, 2, 3], "keep": 2}`` and
optionally ``"oracle": <verl_oracle.py's job>``, run here once the ranks are done (tests/oracle/conftest.py); writes
``DIR/base`` (a tiny Llama built in code and its WordLevel tokenizer: nothing is downloaded), and per strategy
``DIR/<strategy>/run`` (``trainer.default_local_dir``) and ``DIR/<strategy>/verl_merged``; prints a JSON summary.

What runs is verl's own code, at the release installed:
- the actor: ``ActorRolloutRefWorker(config.actor_rollout_ref, role="actor")`` with ``init_model()`` (0.7.x
  ``verl/workers/fsdp_workers.py``, the default ``use_legacy_worker_impl: auto``; 0.9.x ``verl/workers/engine_workers.py``
  with its FSDP engine ``verl/workers/engine/fsdp/transformer_impl.py``), the config composed from verl's own
  ``ppo_trainer`` Hydra config; role ``actor`` builds no rollout (vLLM);
- each save: rank 0 runs the trainer's ``_save_checkpoint`` (0.7.x ``RayPPOTrainer``, 0.9.x the V1 ``PPOTrainer``) unbound
  on a namespace whose ``actor_rollout_wg.save_checkpoint`` is its worker's, while rank 1 makes the same worker call,
  as the ``ONE_TO_ALL`` dispatch does: the worker's ``FSDPCheckpointManager`` writes ``global_step_N/actor``, the
  trainer writes ``data.pt`` (a torchdata ``StatefulDataLoader``'s state) and ``latest_checkpointed_iteration.txt``,
  and ``trainer.max_actor_ckpt_to_keep`` removes older ``actor/`` directories;
- the merge: ``python -m verl.model_merger merge --backend fsdp --local_dir .../actor --target_dir ...`` (the command
  verl's docs give users).

Between saves each rank adds ``step / 1024`` to its local shards, so every step holds other weights.

The two ranks are forked from this process after it imported verl's worker, trainer and transformers modules once
(``_preload``), and rank 0 writes ``DIR/base`` after the fork: no torch op runs before it (spawned ranks imported all
of it again, most of the oracle's CPU).

What this environment supplies, because verl at these releases does not run on CPU as shipped (each in ``_cpu()``):
- 0.9.x: verl picks its device through ``verl/plugin/platform`` and ships no CPU platform (registered: nvidia, huawei,
  amd; without a GPU it falls back to nvidia and the FSDP engine's ``init_device_mesh("cuda")`` fails with
  ``AttributeError: module 'torch._C' has no attribute '_cuda_setDevice'``): a CPU platform is registered through
  verl's own ``PlatformRegistry.register`` and chosen with ``VERL_PLATFORM=cpu``, the extension point that module
  documents; its FSDP engine is registered for devices cuda and npu only (``ValueError: No engine registered for
  device='cpu', vendor='cpu', model_type='language_model', backend='fsdp2'``): ``VERL_ENGINE_DEVICE=cuda``, verl's
  own override (``verl/workers/engine/base.py`` ``EngineRegistry.get_engine_cls``), picks that same engine class; the
  platform's device module is ``torch.cpu`` plus zero answers to the memory queries ``verl/utils/memory_utils.py``
  makes (``AttributeError: module 'torch.cpu' has no attribute 'memory_reserved'``), and its device id is
  :class:`_CpuId`;
- 0.7.x: ``verl/utils/fsdp_utils.py`` ``init_fn`` calls ``get_torch_device().empty_cache()``, and ``torch.cpu`` has
  none (``AttributeError: module 'torch.cpu' has no attribute 'empty_cache'``): a no-op is set;
- strategy ``fsdp`` (FSDP1, verl's default): ``fsdp_workers.py`` wraps with ``sync_module_states=True``, which torch
  refuses for CPU parameters (``ValueError: The module has CPU parameters or buffers when `sync_module_states=True`,
  which requires them to be on GPU. Please specify the `device_id` argument or move the module to GPU before passing
  it to FSDP.``); torch's check (``torch/distributed/fsdp/_init_utils.py``
  ``_check_module_states_for_sync_module_states``) is skipped, and the broadcast it guards runs over gloo;
- FlashAttention 2 (verl's default ``attn_implementation``) needs CUDA: ``override_config.attn_implementation=eager``.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import traceback
import types

import torch
import torch.distributed as dist
from tiny_llama import base_model  # noqa: E402 - the sibling module (this script's folder is on sys.path)


class _CpuId(str):
    """0.9.x uses ``get_device_id()`` both as a device (``module.to(device=...)``, ``fsdp2_load_full_state_dict``) and
    as an index (``torch.device(f"{get_device_name()}:{device_id}")``, ``load_fsdp_model_to_gpu``): on CPU it is
    ``"cpu"`` as a device and formats as ``0`` (``0`` itself would mean cuda:0, ``"cpu"`` gives ``"cpu:cpu"``)."""

    def __format__(self, spec: str) -> str:
        return format(0, spec)


def _cpu(strategies: list[str]) -> None:
    """What verl lacks to run on CPU (see the module docstring); nothing here changes what verl writes."""
    import verl

    if not hasattr(torch.cpu, "empty_cache"):
        torch.cpu.empty_cache = lambda: None
    if "fsdp" in strategies:
        import torch.distributed.fsdp._init_utils as init_utils

        init_utils._check_module_states_for_sync_module_states = lambda states: None
    if verl.__version__.startswith("0.7"):
        return
    from contextlib import nullcontext

    from verl.plugin.platform.platform_base import PlatformBase
    from verl.plugin.platform.platform_manager import PlatformRegistry

    # torch.cpu plus the memory queries verl's workers make of the device module (memory_utils.py), all zero on CPU
    device = types.ModuleType("torch_cpu_for_verl")
    device.__dict__.update({n: getattr(torch.cpu, n) for n in dir(torch.cpu) if not n.startswith("_")})
    zero = lambda *args, **kwargs: 0  # noqa: E731
    device.__dict__.update(is_available=lambda: True, current_device=lambda: "cpu", empty_cache=lambda: None,
                           memory_reserved=zero, memory_allocated=zero, max_memory_allocated=zero,
                           max_memory_reserved=zero, reset_peak_memory_stats=lambda *a, **k: None,
                           mem_get_info=lambda *a, **k: (0, 0))

    @PlatformRegistry.register(platform="cpu")
    class PlatformCPU(PlatformBase):
        device_name = "cpu"
        vendor_name = "cpu"
        device_module = device

        def is_available(self):
            return True

        def current_device(self):
            return _CpuId("cpu")

        def device_count(self):
            return 1

        def set_device(self, device_index):
            pass

        def synchronize(self, device_index=None):
            pass

        def manual_seed(self, seed):
            torch.manual_seed(seed)

        def manual_seed_all(self, seed):
            torch.manual_seed(seed)

        def set_allocator_settings(self, settings):
            pass

        def empty_cache(self):
            pass

        def get_device_capability(self, device_index=0):
            return None, None

        def communication_backend_name(self):
            return "gloo"

        def visible_devices_envvar(self):
            return "CUDA_VISIBLE_DEVICES"

        def nvtx_range(self, msg):
            return nullcontext()

        def profiler_start(self):
            pass

        def profiler_stop(self):
            pass

        def ray_resource_name(self):
            return "CPU"

        def ray_noset_envvars(self):
            return []

        def is_ipc_supported(self):
            return False

        def cudart(self):
            return None


def _config(base: str, run: str, strategy: str, keep: int):
    import verl.trainer.main_ppo as main_ppo
    from hydra import compose, initialize_config_dir

    overrides = [f"actor_rollout_ref.model.path={base}", f"actor_rollout_ref.actor.strategy={strategy}",
                 "+actor_rollout_ref.model.override_config.attn_implementation=eager",
                 "actor_rollout_ref.model.use_remove_padding=False", "data.train_batch_size=2",
                 "actor_rollout_ref.actor.ppo_mini_batch_size=2", "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=1",
                 "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=1", "actor_rollout_ref.rollout.n=1",
                 f"trainer.default_local_dir={run}", f"trainer.max_actor_ckpt_to_keep={keep}"]
    with initialize_config_dir(config_dir=os.path.join(os.path.dirname(main_ppo.__file__), "config"), version_base=None):
        return compose(config_name="ppo_trainer", overrides=overrides)


def _rank(rank: int, world: int, store: str, base: str, out: str, strategies: list[str], steps: list[int],
          keep: int) -> None:
    # verl's Worker reads these (the file store below is what connects the ranks)
    os.environ.update(RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK=str(rank), VERL_PLATFORM="cpu",
                      VERL_ENGINE_DEVICE="cuda", MASTER_ADDR="127.0.0.1", MASTER_PORT="1")
    torch.set_num_threads(1)  # _cpu() ran in the parent, before verl's modules were imported: the forked ranks have it
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=world)
    try:
        if rank == 0:  # here, not in the parent: no torch op runs before the fork
            base_model(base)
        dist.barrier()
        import verl

        v07 = verl.__version__.startswith("0.7")
        if v07:
            from verl.trainer.ppo.ray_trainer import RayPPOTrainer as Trainer
            from verl.workers.fsdp_workers import ActorRolloutRefWorker
        else:
            from verl.trainer.ppo.checkpoint_callback import build_checkpoint_callback
            from verl.trainer.ppo.v1.trainer_base import PPOTrainer as Trainer
            from verl.workers.engine_workers import ActorRolloutRefWorker
        from torchdata.stateful_dataloader import StatefulDataLoader

        for strategy in strategies:
            run = os.path.join(out, strategy, "run")
            cfg = _config(base, run, strategy, keep)
            worker = ActorRolloutRefWorker(cfg.actor_rollout_ref, role="actor")
            worker.init_model()
            module = worker.actor_module_fsdp if v07 else worker.actor.engine.module
            loader = StatefulDataLoader(list(range(8)), batch_size=2)
            batches = iter(loader)
            for step in steps:
                with torch.no_grad():
                    for p in module.parameters():
                        p.add_(step / 1024)
                next(batches)
                if rank == 0:
                    wg = types.SimpleNamespace(save_checkpoint=worker.save_checkpoint)
                    fake = types.SimpleNamespace(config=cfg, global_steps=step, use_critic=False, trainer_mode="sync",
                                                 train_dataloader=loader, actor_rollout_wg=wg)
                    if not v07:
                        fake.checkpoint_callback = build_checkpoint_callback(cfg)
                    Trainer._save_checkpoint(fake)
                else:  # the same call the worker group's ONE_TO_ALL dispatch makes on every rank
                    worker.save_checkpoint(os.path.join(run, f"global_step_{step}", "actor"), None, step,
                                           max_ckpt_to_keep=keep)
                dist.barrier()
            del worker, module
    except BaseException:
        traceback.print_exc()
        raise
    finally:
        dist.destroy_process_group()


def _preload() -> None:
    """Import, once in the parent, what each rank imports (torch, verl's workers and trainer, transformers: most of a
    rank's CPU), so the two forked ranks start with them; nothing runs a torch op here."""
    import verl

    if verl.__version__.startswith("0.7"):
        import verl.trainer.ppo.ray_trainer  # noqa: F401
        import verl.workers.fsdp_workers  # noqa: F401
    else:
        import verl.trainer.ppo.checkpoint_callback  # noqa: F401
        import verl.trainer.ppo.v1.trainer_base  # noqa: F401
        import verl.workers.engine_workers  # noqa: F401
    import transformers  # noqa: F401
    import verl.trainer.main_ppo  # noqa: F401
    from hydra import compose  # noqa: F401
    from torchdata.stateful_dataloader import StatefulDataLoader  # noqa: F401
    from transformers import AutoModelForCausalLM, LlamaForCausalLM  # noqa: F401


def main() -> None:
    import runpy

    import torch.multiprocessing as mp
    import verl

    job = json.load(sys.stdin)
    summary = os.fdopen(os.dup(1), "w")  # verl and its ranks print to stdout: that goes to stderr, the summary here
    os.dup2(2, 1)
    out, steps = job["out"], job["steps"]
    base = os.path.join(out, "base")
    # the CPU platform before any verl module is imported: 0.9.x's modules read the device name when imported
    os.environ.update(VERL_PLATFORM="cpu", VERL_ENGINE_DEVICE="cuda")
    _cpu(job["strategies"])
    _preload()
    with tempfile.TemporaryDirectory() as tmp:  # forked ranks inherit the imports instead of repeating them
        mp.start_processes(_rank, args=(2, os.path.join(tmp, "store"), base, out, job["strategies"], steps, job["keep"]),
                           nprocs=2, join=True, start_method="fork")
    result = {"verl": verl.__version__, "strategies": {}}
    for strategy in job["strategies"]:
        run = os.path.join(out, strategy, "run")
        merged = os.path.join(out, strategy, "verl_merged")
        # `python -m verl.model_merger merge ...`, in this process (one interpreter start less)
        sys.argv = ["verl.model_merger", "merge", "--backend", "fsdp", "--local_dir",
                    os.path.join(run, f"global_step_{steps[-1]}", "actor"), "--target_dir", merged]
        runpy.run_module("verl.model_merger", run_name="__main__", alter_sys=True)
        result["strategies"][strategy] = {"run": run, "verl_merged": merged}
    if job.get("oracle"):  # verl_oracle.py's job in this process, which has imported verl's trainer already
        import verl_oracle

        result["oracle"] = verl_oracle.run(job["oracle"])
    with summary:
        json.dump(result, summary)


if __name__ == "__main__":
    try:
        main()
    except BaseException:  # noqa: BLE001 - a failed rank can leave this process waiting on its threads: exit now
        traceback.print_exc()
        sys.stderr.flush()
        os._exit(1)
