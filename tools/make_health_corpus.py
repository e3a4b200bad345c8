"""Generate the labelled health corpus (``tests/assets/health-corpus/``) with the local rehearsal.

Why: a check users can trust has a measured false-alarm rate. Each entry is a real rehearsal run (2 gloo ranks) made
healthy or broken by its overrides, in the layout of the trainer it names:

* NeMo-RL's (``exp_NNN``, ``train_data_step{N}.jsonl`` dumps, TensorBoard) as the rehearsal writes it;
* verl's (``rollout_data/{N}.jsonl``, ``validation_data/``, TensorBoard), per release: the rehearsal's steps are
  written again by that release's own code in its oracle venv (``tools/verl_corpus_writer.py``: verl's ``Tracking``
  and ``_dump_generations``), so the files, tag names included, are what verl writes.

A pathology the miniature run trains for real in seconds (KL blow-up, length and entropy blow-up, truncation, zero
reward, an unparseable format, flat GRPO groups) comes from its overrides alone. Validation falling while reward rises (overfitting)
does not happen in 12 steps of the rehearsal: those entries are trained runs whose ``series`` (named in
``labels.json``) are replaced by the drift and written through the trainer's own scalar writer (NeMo-RL: the
rehearsal's ``MetricsLogger``, NeMo-RL's TensorBoard logger; verl: verl's ``Tracking``). ``labels.json`` records,
per run, whether it is healthy, which check(s) it must trip, its trainer and release, the exact overrides and any
replaced series, so the corpus can be regenerated and extended. ``benchmarks/bench_health_corpus.py`` reads it.

Example:
    $ python tools/make_health_corpus.py                 # every entry (a few minutes on 2 cores)
    $ python tools/make_health_corpus.py --only broken-truncation
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "tests" / "assets" / "health-corpus"
# small runs: a few KB per step; 12 steps so the checks' windows (5 steps) have room
BASE = ["grpo.max_num_steps=12", "grpo.num_prompts_per_step=8", "grpo.num_generations_per_prompt=4",
        "grpo.val_period=4", "grpo.max_val_samples=16", "checkpointing.enabled=false", "rehearsal.num_test=32"]
NEVER = '[{"name": "exact_alnum", "weight": 1.0, "kwargs": {"answer_tag": "final"}}]'  # the task writes <answer>
RELEASES = {"0.7.0": "v0.7.0", "0.9.1": "v0.9.0"}  # verl on PyPI -> the trainer.verl_ref whose facts nbtools keeps
KL = ["grpo.learning_rate=0.05"]  # the policy leaves the reference within 5 steps: KL 4-5 nats per token
RAMBLE = ["grpo.learning_rate=0.08", "grpo.max_new_tokens=40"]  # no EOS any more: entropy x4, lengths to the limit
# overfitting, written over a trained run: training reward climbs while validation accuracy peaks at step 4, then falls
DRIFT_REWARD = {str(s): round(0.3 + 0.05 * s, 3) for s in range(1, 13)}
WIDE_VAL = ["grpo.max_val_samples=32"]  # 32 validation prompts: a 0.35 drop is beyond 2 standard errors


def _drift(acc_tag: str, reward_tag: str) -> dict[str, dict[str, float]]:
    return {acc_tag: {"0": 0.3, "4": 0.6, "8": 0.4, "12": 0.25}, reward_tag: DRIFT_REWARD}


ENTRIES: dict[str, dict] = {
    "healthy-seed0": {"label": "healthy", "overrides": ["grpo.seed=0"]},
    "healthy-seed1": {"label": "healthy", "overrides": ["grpo.seed=1"]},
    "healthy-seed2-lr": {"label": "healthy", "overrides": ["grpo.seed=2", "grpo.learning_rate=0.001"]},
    "broken-zero-reward": {"label": "broken", "check": "zero-reward",
                           "overrides": ["grpo.seed=0", f"rehearsal.reward_functions={NEVER}"]},
    "broken-truncation": {"label": "broken", "check": "truncation", "overrides": ["grpo.seed=0", "grpo.max_new_tokens=6"]},
    "broken-answer-format": {"label": "broken", "check": "answer-format",
                             "overrides": ["grpo.seed=0", "rehearsal.answer_format=gsm8k"]},
    "broken-no-signal": {"label": "broken", "check": "no-signal-groups",  # near-greedy: a group's 4 samples agree
                         "overrides": ["grpo.seed=0", "grpo.temperature=0.05"]},
    "broken-kl-runaway": {"label": "broken", "check": "kl-runaway", "overrides": ["grpo.seed=0", *KL]},
    "broken-length-entropy": {"label": "broken", "check": ["length-runaway", "entropy-blowup", "truncation"],
                              "overrides": ["grpo.seed=0", *RAMBLE]},
    "broken-val-divergence": {"label": "broken", "check": "val-divergence", "overrides": ["grpo.seed=0", *WIDE_VAL],
                              "series": _drift("validation/accuracy", "train/reward")},
    # verl's layout, written by verl's own code per release
    "verl-0.7.0-healthy-seed0": {"label": "healthy", "trainer": "verl", "release": "0.7.0", "overrides": ["grpo.seed=0"]},
    "verl-0.9.1-healthy-seed1": {"label": "healthy", "trainer": "verl", "release": "0.9.1", "overrides": ["grpo.seed=1"]},
    "verl-0.7.0-broken-kl-runaway": {"label": "broken", "check": "kl-runaway", "trainer": "verl", "release": "0.7.0",
                                     "overrides": ["grpo.seed=0", *KL]},
    "verl-0.9.1-broken-length-entropy": {"label": "broken", "check": ["length-runaway", "entropy-blowup", "truncation"],
                                         "trainer": "verl", "release": "0.9.1", "overrides": ["grpo.seed=0", *RAMBLE]},
    "verl-0.9.1-broken-val-divergence": {"label": "broken", "check": "val-divergence", "trainer": "verl",
                                         "release": "0.9.1", "overrides": ["grpo.seed=0", *WIDE_VAL],
                                         "series": _drift("val-core/max3/acc/mean@1", "critic/score/mean")},
}


def overrides(spec: dict) -> list[str]:
    """Every override the entry's run was made with (and is checked with)."""
    extra = ["trainer.kind=verl", f"trainer.verl_ref={RELEASES[spec['release']]}"] if spec.get("trainer") else []
    return BASE + extra + spec["overrides"]


SOURCE_MD = """# Health corpus — provenance

| field | value |
| --- | --- |
| project | nbtools (this repository): its local rehearsal, `python -m nbtools.rehearsal`; verl (https://github.com/volcengine/verl) 0.7.0 and 0.9.1 from PyPI for the `verl-*` entries |
| version | nbtools 0.1.0, generated by `tools/make_health_corpus.py` (2026-11-28) |
| licence | Apache-2.0 (this repository's licence; verl's code that wrote the `verl-*` files is Apache-2.0 too) |
| format | NeMo-RL's log layout (`exp_NNN/train_data_step{N}.jsonl`, `val_data_step{N}.jsonl`, TensorBoard), https://github.com/NVIDIA-NeMo/RL; `verl-<release>-*`: verl's (`rollout_data/{N}.jsonl`, `validation_data/{N}.jsonl`, `tensorboard/`) as that release's `Tracking` and `_dump_generations` / `_write_generations` write them (`tools/verl_corpus_writer.py`) |
| labels | `labels.json`: per run, healthy or broken (the check or checks it must trip), trainer and release, the exact overrides, and `series`: the scalar series replaced after training (see below) |

The per-token floats of the NeMo-RL dumps are rounded to 4 decimals (`compact`). Entries with `series` are trained
runs whose named scalar series were replaced (validation falling while reward rises: overfitting does not happen in
the rehearsal's 12 steps) and written through the trainer's own scalar writer; nothing else is changed.
"""


def _rounded(x):
    if isinstance(x, float):
        return round(x, 4)
    if isinstance(x, list):
        return [_rounded(v) for v in x]
    return x


def compact(logs: Path) -> None:
    """Round the dumps' per-token floats to 4 decimals (halves the corpus; no check reads finer than that)."""
    for f in logs.rglob("*.jsonl"):
        lines = [json.loads(ln) for ln in f.read_text().splitlines() if ln.strip()]
        for rec in lines:
            for k in ("generation_logprobs", "prev_logprobs", "advantages"):
                if k in rec:
                    rec[k] = _rounded(rec[k])
        f.write_text("".join(json.dumps(r, separators=(",", ":")) + "\n" for r in lines))


def _scalars(logs: Path) -> dict[int, dict[str, float]]:
    """step -> {tag: value} of every scalar the run logged (its hparams subdir left out)."""
    from nbtools import metrics

    tb = metrics.read_tensorboard(logs)
    tb = tb[tb["run"].astype(str) == str(tb["run"].iloc[0])]
    out: dict[int, dict[str, float]] = {}
    for tag, step, value in tb[["tag", "step", "value"]].itertuples(index=False):
        out.setdefault(int(step), {})[tag] = float(value)
    return out


def _replace(scalars: dict[int, dict[str, float]], series: dict[str, dict[str, float]]) -> None:
    for tag, values in series.items():
        for steps in scalars.values():
            steps.pop(tag, None)
        for step, v in values.items():
            scalars.setdefault(int(step), {})[tag] = v


def _nemo_rl(run_logs: Path, dest: Path, series: dict | None) -> None:
    shutil.copytree(run_logs, dest / "logs")
    compact(dest / "logs")
    if series:  # written again through the rehearsal's NeMo-RL TensorBoard logger, the named series replaced
        from nbtools.rehearsal.artifacts import MetricsLogger

        for exp in sorted((dest / "logs").glob("exp_*")):
            scalars = _scalars(exp / "tensorboard")
            _replace(scalars, series)
            shutil.rmtree(exp / "tensorboard")
            logger = MetricsLogger(exp)
            for step, values in sorted(scalars.items()):
                logger.log_metrics(values, step)
            logger.close()


def _verl(run_logs: Path, dest: Path, release: str, series: dict | None) -> None:
    venv = ROOT / ".venv-verl" / release
    built = subprocess.run(["bash", str(ROOT / "tools" / "verl_oracle_venv.sh"), sys.executable, str(venv), release],
                           capture_output=True, text=True)
    if built.returncode:
        raise SystemExit(f"building the verl {release} venv failed:\n{built.stderr[-2000:]}")
    scalars = _scalars(run_logs / "tensorboard")
    _replace(scalars, series or {})
    dumps = {kind: {f.stem: [json.loads(ln) for ln in f.read_text().splitlines() if ln.strip()]
                    for f in (run_logs / kind).glob("*.jsonl")} for kind in ("rollout_data", "validation_data")}
    job = {"out": str(dest / "logs"), "scalars": {str(k): v for k, v in scalars.items()}, "dumps": dumps}
    p = subprocess.run([built.stdout.strip().splitlines()[-1], str(ROOT / "tools" / "verl_corpus_writer.py")],
                       input=json.dumps(job), capture_output=True, text=True, cwd=ROOT)
    if p.returncode:
        raise SystemExit(f"verl {release}'s writers failed:\n{p.stderr[-3000:]}")
    got = json.loads(p.stdout.strip().splitlines()[-1])
    if got["verl"] != release:
        raise SystemExit(f"expected verl {release} in {venv}, found {got['verl']}")


def make(name: str) -> None:
    spec = ENTRIES[name]
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [sys.executable, "-m", "nbtools.rehearsal", "--config", str(ROOT / "experiments" / "local.yaml"),
               "--runs-dir", tmp, *overrides(spec)]
        p = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
        if p.returncode:
            raise SystemExit(f"{name}: the rehearsal failed:\n{p.stdout[-2000:]}\n{p.stderr[-2000:]}")
        dest = OUT / name
        shutil.rmtree(dest, ignore_errors=True)
        run_logs = Path(tmp) / "local-rehearsal" / "logs"
        if spec.get("trainer") == "verl":
            _verl(run_logs, dest, spec["release"], spec.get("series"))
        else:
            _nemo_rl(run_logs, dest, spec.get("series"))
    print(f"{name}: {sum(f.stat().st_size for f in dest.rglob('*') if f.is_file()) / 1e3:.0f} kB", flush=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", nargs="*", choices=sorted(ENTRIES), help="entries to (re)generate (default: all)")
    a = ap.parse_args(argv)
    OUT.mkdir(parents=True, exist_ok=True)
    for name in a.only or ENTRIES:
        make(name)
    labels = {n: {**e, "overrides": overrides(e)} for n, e in ENTRIES.items() if (OUT / n).is_dir()}
    (OUT / "labels.json").write_text(json.dumps(labels, indent=1) + "\n")
    (OUT / "SOURCE").unlink(missing_ok=True)
    (OUT / "SOURCE.md").write_text(SOURCE_MD)
    return 0


if __name__ == "__main__":
    sys.exit(main())
