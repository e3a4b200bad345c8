"""Command line of the rehearsal job: validate the config, import the heavy modules once, then fork one process per
rank (rendezvous on a free port). Forking after the imports saves each rank the 3–8 s of CPU that importing torch,
transformers and FSDP2 costs; no torch op runs before the fork, so the ranks start with clean thread pools."""

from __future__ import annotations

import argparse
import os
import resource
import sys
import time

from nbtools._ports import free_port

__all__ = ["main", "free_port"]


def main(argv: list[str] | None = None) -> int:
    """``python -m nbtools.rehearsal --config X.yaml --runs-dir DIR [key=value ...]``; returns the exit code."""
    parser = argparse.ArgumentParser(prog="python -m nbtools.rehearsal", description=__doc__)
    parser.add_argument("--config", required=True, help="experiment YAML (e.g. experiments/local.yaml)")
    parser.add_argument("--runs-dir", default=None, help="runs directory (default: $NBTOOLS_RUNS_DIR or local.runs_dir)")
    args, overrides = parser.parse_known_args(argv)
    bad = [o for o in overrides if o.startswith("-")]
    if bad:
        parser.error(f"unknown option(s) {bad}; overrides are `key=value`, e.g. grpo.max_num_steps=50")

    from nbtools.rehearsal.trainer import load_config

    cfg = load_config(args.config, overrides, args.runs_dir)  # fail fast, before any process starts
    world = cfg.rehearsal.ranks
    print(f"nbtools rehearsal: {cfg.name}: {world} rank(s), {cfg.grpo.max_num_steps} GRPO steps; "
          f"logs {cfg.log_dir}, checkpoints {cfg.checkpoint_dir}", flush=True)
    t0 = time.perf_counter()
    import torch.multiprocessing as mp

    from nbtools.rehearsal.trainer import preload, run_rank

    preload()  # import torch/transformers/FSDP once here: forked ranks inherit them instead of importing them again
    runs_dir = args.runs_dir or os.environ.get("NBTOOLS_RUNS_DIR")
    try:
        mp.start_processes(run_rank, args=(world, args.config, overrides, runs_dir, free_port()), nprocs=world,
                           join=True, start_method="fork")
    except KeyboardInterrupt:
        print("Interrupted: complete checkpoints are the step_N directories; a tmp_step_N is never resumed from. "
              "Re-run the same command to resume.", flush=True)
        return 130
    except mp.ProcessRaisedException as e:
        print(f"rehearsal failed in a rank:\n{e}", file=sys.stderr, flush=True)
        return 1
    except mp.ProcessExitedException as e:
        print(f"rehearsal rank exited abnormally: {e}", file=sys.stderr, flush=True)
        return 1
    cpu = sum(getattr(resource.getrusage(who), f) for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)
              for f in ("ru_utime", "ru_stime"))
    print(f"nbtools rehearsal done in {time.perf_counter() - t0:.1f}s (wall, incl. process start); "
          f"cpu {cpu:.1f}s (this process and its ranks, imports included).", flush=True)
    return 0
