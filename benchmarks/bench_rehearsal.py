"""Does the rehearsal learn, with margin, inside its budget? (issues 3 and 19, "Must show")

For each seed (default 0 1 2; ``--seeds 0 1 2 3 4 5 6 7 8 9`` for the robustness sweep) it runs the demo config (``experiments/local.yaml``) end to end the way ``make demo``
does: a fresh local Ray head on free ports (timed), the rehearsal submitted as a Ray job with ``nbtools.launch.submit``
(timed from submission to SUCCEEDED), the head stopped. Then it prints the seeds side by side:

* wall time of the Ray head start, of the job, and of both (budget 120 s), plus the job's CPU seconds (the launcher
  and both ranks, from its last log line) and the load average when the seed started and ended;
* per-step medians read back from TensorBoard ``timing/train/*`` (generation, policy training, whole step);
* mean train reward over the first 5 and the last 10 steps, from ``train/reward``: the first 5 at chance (0.2 format
  + 0.8 x 0.1 = 0.28; ≤ 0.32 is 4 standard errors of 640 samples, a start-at-chance check that belongs with the
  baseline's), the last 10 ≥ 0.93;
* held-out accuracy (pure correctness) of the warm-started baseline and of the final checkpoint, greedy and sampled
  (T = 1), on all held-out problems (target greedy ≥ 0.95); the baseline's greedy accuracy must stay ≤ 0.5 and its
  sampled accuracy at chance (0.1; ≤ 0.2 allows 4.7 standard errors on 200 problems), so the gain is real;
* the margin: the first step whose 10-step mean train reward meets the last-10 target.

Learning figures are deterministic for a seed on one machine, but not across machines: CPU kernels and reduction order
differ, and a run that is chaotic in them can stall on another CPU. Hence ten seeds, each one a "different machine"
for the same setting, and a verdict per seed. Times on a shared 2-core VM are contended, hence the load columns.
``--direct`` runs ``python -m nbtools.rehearsal`` without Ray (no head start in the total).

    $ timeout 1800 .venv/bin/python benchmarks/bench_rehearsal.py [--seeds 0 1 2] [--runs-dir DIR] [key=value ...]
    $ .venv/bin/python benchmarks/bench_rehearsal.py --tiny     # seed 0, 2 short steps: every code path, no figure (tests)
    $ .venv/bin/python benchmarks/bench_rehearsal.py ray.port=P ray.dashboard_port=D   # on a head already running
                                                                 # there (attached to, left running; no start timed)
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from nbtools.rehearsal import _grpo, checkpoint  # noqa: E402
from nbtools.rehearsal._sampling import sample  # noqa: E402
from nbtools.rehearsal.task import baseline_dir, held_out_problems  # noqa: E402
from nbtools.rehearsal.trainer import load_config  # noqa: E402

BUDGET_S = 120.0
# --tiny: a small data set, a short warm start and few samples per step (the paths, not the figures)
TINY = ["rehearsal.num_train=64", "rehearsal.num_test=16", "rehearsal.warmup_steps=5", "grpo.num_prompts_per_step=4",
        "grpo.num_generations_per_prompt=4", "grpo.max_val_samples=8"]
TARGETS = {"first5": 0.32, "last10": 0.93, "greedy": 0.95, "baseline_greedy": 0.5, "baseline_sampled": 0.2}


def accuracy(model, problems, *, temperature: float, seed: int = 0, max_new: int = 12) -> float:
    """Fraction of problems whose extracted answer equals the ground truth (one sample each)."""
    from nbtools.rewards import extract_answer

    ids = torch.tensor([_grpo.encode(p.prompt) for p in problems])
    s = sample(model, ids, max_new_tokens=max_new, eos_id=_grpo.EOS, pad_id=_grpo.PAD, temperature=temperature,
               generator=torch.Generator().manual_seed(seed))
    hits = 0
    for i, p in enumerate(problems):
        toks = s.tokens[i, : int(s.lengths[i])].tolist()
        hits += extract_answer(_grpo.decode(toks)) == p.ground_truth
    return hits / len(problems)


def scalars(exp: Path, tag: str) -> np.ndarray:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(exp / "tensorboard"), size_guidance={"scalars": 0})
    acc.Reload()
    return np.array([e.value for e in sorted(acc.Scalars(tag), key=lambda e: e.step)])


def run_seed(args, overrides: list[str], seed: int) -> dict:
    """One seed end to end; returns its figures."""
    runs = Path(args.runs_dir) / f"seed{seed}"
    shutil.rmtree(runs, ignore_errors=True)
    from nbtools._ports import free_ports

    given = {k for o in overrides for k in [o.partition("=")[0]] if k in ("ray.port", "ray.dashboard_port")}
    if len(given) == 1:
        sys.exit("give both ray.port= and ray.dashboard_port= (a head already running), or neither (a fresh head)")
    # a head already running on the ports given: attached to, not timed as a start, left running (a runs dir of
    # its own for the seed, so down() finds no head of ours to stop); a name of its own per run, or the submission
    # id (name + config hash) would re-attach to the job an earlier run of this benchmark left on that head
    if given:
        ov = [*overrides, f"grpo.seed={seed}", f"name=bench-rehearsal-{time.time_ns() // 10**6}-s{seed}"]
    else:
        gcs, dashboard = free_ports(2)  # distinct, and outside Ray's worker port range
        ov = [*overrides, f"grpo.seed={seed}", f"ray.port={gcs}", f"ray.dashboard_port={dashboard}"]
    cfg = load_config(args.config, ov, str(runs))  # sets NBTOOLS_RUNS_DIR for this seed
    out: dict = {"seed": seed, "load_start": os.getloadavg()[0]}
    if args.direct:
        out["head_s"] = 0.0
        t0 = time.perf_counter()
        cmd = [sys.executable, "-m", "nbtools.rehearsal", "--config", args.config, "--runs-dir", str(runs), *ov]
        proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
        out["job_s"] = time.perf_counter() - t0
        if proc.returncode:
            sys.exit(f"seed {seed}: rehearsal failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
        log = proc.stdout
    else:
        import nbtools

        cluster = nbtools.backends.get(cfg)
        t0 = time.perf_counter()
        head = cluster.up(timeout=600, progress=False)
        out["head_s"] = time.perf_counter() - t0
        if not head.started_by_us:
            print(f"seed {seed}: {head.note}", flush=True)
        try:
            t0 = time.perf_counter()
            job = nbtools.launch.submit(cfg)
            job.wait(timeout=1800, raise_on_failure=True)
            out["job_s"] = time.perf_counter() - t0
            log = job.logs()
        finally:
            cluster.down()
    out["load_end"] = os.getloadavg()[0]
    m = re.search(r"cpu ([\d.]+)s", log)
    out["cpu_s"] = float(m.group(1)) if m else float("nan")
    exp = sorted(Path(cfg.log_dir).glob("exp_*"))[-1]
    reward = scalars(exp, "train/reward")
    out.update(steps=len(reward), first5=reward[:5].mean(), last10=reward[-10:].mean(), reached=reached(reward))
    for key, tag in (("step_ms", "total_step_time"), ("gen_ms", "generation"), ("train_ms", "policy_training")):
        out[key] = 1000 * float(np.median(scalars(exp, f"timing/train/{tag}")))

    from transformers import AutoModelForCausalLM

    problems = held_out_problems(cfg)
    base = AutoModelForCausalLM.from_pretrained(baseline_dir(cfg)).eval()
    final = AutoModelForCausalLM.from_pretrained(baseline_dir(cfg)).eval()
    final.load_state_dict(checkpoint.read_full_state_dict(checkpoint.latest_checkpoint(cfg.checkpoint_dir)), strict=False)
    final.tie_weights()
    for name, model in (("base", base), ("final", final)):
        out[f"{name}_greedy"] = accuracy(model, problems, temperature=0.0)
        out[f"{name}_sampled"] = accuracy(model, problems, temperature=1.0)
    out["total_s"] = out["head_s"] + out["job_s"]
    return out


def reached(reward: np.ndarray, target: float = TARGETS["last10"], window: int = 10) -> int | None:
    """The first step whose trailing ``window``-step mean train reward meets the last-10 target (the margin in steps:
    a run that gets there at step 100 of 200 has room for a machine on which it learns more slowly)."""
    if len(reward) < window:  # np.convolve would swap the two and average the window over the run
        return None
    means = np.convolve(reward, np.ones(window) / window, mode="valid")
    hit = np.flatnonzero(means >= target)
    return int(hit[0]) + window if hit.size else None


def _learned(r: dict) -> bool:
    return r["last10"] >= TARGETS["last10"] and r["final_greedy"] >= TARGETS["greedy"]


def _weak_baseline(r: dict) -> bool:
    return (r["base_greedy"] <= TARGETS["baseline_greedy"] and r["base_sampled"] <= TARGETS["baseline_sampled"]
            and r["first5"] <= TARGETS["first5"])


def _verdict(r: dict) -> str:
    marks = [_learned(r), _weak_baseline(r), r["total_s"] <= BUDGET_S]
    return " ".join("ok" if m else "MISS" for m in marks)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs-dir", default=None)
    ap.add_argument("--config", default=str(ROOT / "experiments" / "local.yaml"))
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--direct", action="store_true", help="run python -m nbtools.rehearsal without a Ray head")
    ap.add_argument("--tiny", action="store_true", help="seed 0 for 2 steps (a checkpoint at step 2), runs in a temp "
                    "dir removed at the end: every code path in seconds, no figure worth reading (tests/test_benchmarks.py)")
    args, overrides = ap.parse_known_args()
    if args.tiny:
        args.seeds = [0]
        overrides = ["grpo.max_num_steps=2", "grpo.val_period=2", "checkpointing.save_period=2", *TINY, *overrides]
        with tempfile.TemporaryDirectory(prefix="bench-rehearsal-tiny-") as d:
            args.runs_dir = args.runs_dir or d
            return _bench(args, overrides)
    args.runs_dir = args.runs_dir or tempfile.mkdtemp(prefix="bench-rehearsal-")
    return _bench(args, overrides)


def _bench(args: argparse.Namespace, overrides: list[str]) -> None:
    torch.set_num_threads(1)
    uptime = subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
    results = []
    for s in args.seeds:  # one line per seed as it ends, so a long sweep shows progress
        r = run_seed(args, overrides, s)
        results.append(r)
        print(f"seed {s}: {_verdict(r)}; greedy {r['final_greedy']:.3f}, last-10 {r['last10']:.3f} (from step "
              f"{r['reached']}), baseline greedy {r['base_greedy']:.3f} / sampled {r['base_sampled']:.3f}, "
              f"whole run {r['total_s']:.1f} s, "
              f"load {r['load_start']:.1f} → {r['load_end']:.1f}", flush=True)
    uptime_end = subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()

    cfg = load_config(args.config, overrides, args.runs_dir)
    where = (f"the head on ports {cfg.ray.port}/{cfg.ray.dashboard_port}" if any(o.startswith("ray.port=") for o in overrides)
             else "a fresh local head")
    print(f"rehearsal benchmark — {cfg.name}: {cfg.grpo.max_num_steps} GRPO steps, {cfg.rehearsal.ranks} ranks, "
          f"{'direct (no Ray)' if args.direct else 'Ray job on ' + where}; {os.cpu_count()} CPUs")
    print(f"  machine load before: {uptime}\n  machine load after:  {uptime_end}")
    rows = [
        ("load average (1 min) start → end", lambda r: f"{r['load_start']:.1f} → {r['load_end']:.1f}"),
        ("Ray head start, wall s", lambda r: f"{r['head_s']:.1f}"),
        ("rehearsal job, wall s", lambda r: f"{r['job_s']:.1f}"),
        (f"whole run (head + job), wall s  ≤ {BUDGET_S:.0f}", lambda r: f"{r['total_s']:.1f}"),
        ("rehearsal job, CPU s (launcher + ranks)", lambda r: f"{r['cpu_s']:.1f}"),
        ("per step median ms: total", lambda r: f"{r['step_ms']:.0f}"),
        ("  generation", lambda r: f"{r['gen_ms']:.0f}"),
        ("  policy training", lambda r: f"{r['train_ms']:.0f}"),
        (f"train reward first 5 steps  ≤ {TARGETS['first5']}", lambda r: f"{r['first5']:.3f}"),
        (f"train reward last 10 steps  ≥ {TARGETS['last10']}", lambda r: f"{r['last10']:.3f}"),
        ("first step with a 10-step mean ≥ that", lambda r: f"{r['reached']}"),
        (f"held-out baseline greedy (≤ {TARGETS['baseline_greedy']}) / sampled (≤ {TARGETS['baseline_sampled']})",
         lambda r: f"{r['base_greedy']:.3f} / {r['base_sampled']:.3f}"),
        (f"held-out final greedy  ≥ {TARGETS['greedy']}", lambda r: f"{r['final_greedy']:.3f}"),
        ("held-out final sampled (T=1)", lambda r: f"{r['final_sampled']:.3f}"),
        ("targets (learning, weak baseline + chance start, time)", _verdict),
    ]
    width = max(len(label) for label, _ in rows) + 2
    print(f"  {'seed':<{width}}" + "".join(f"{r['seed']:>16}" for r in results))
    for label, fmt in rows:
        print(f"  {label:<{width}}" + "".join(f"{fmt(r):>16}" for r in results))
    n = len(results)
    print(f"  learning targets met on {sum(_learned(r) for r in results)} of {n} seeds; baseline weak on "
          f"{sum(_weak_baseline(r) for r in results)} of {n}; time target met on "
          f"{sum(r['total_s'] <= BUDGET_S for r in results)} of {n} "
          f"(contended when the load average exceeds {os.cpu_count()})")
    print(f"  runs: {args.runs_dir}")


if __name__ == "__main__":
    main()
