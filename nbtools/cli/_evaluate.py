"""``nbtools evaluate EXPERIMENT.yaml [MODEL ...]``: notebook 07 from a terminal. Each model is evaluated the way 07
evaluates the run's two (NeMo-RL's run_eval.py or verl's generation job on the experiment's cluster, the local
rehearsal on its held-out split), then the first is compared with each other, paired per problem.

Why: tutorials 000 and 001 drive the evaluation from scripts; a script gets the same jobs, settings (MATH-500 at
8192 tokens unless ``--max-model-len``), per-problem results and statistics as the notebook, in one command.

Example:
    $ nbtools evaluate experiments/gke-b200-gemma3-1b.yaml                     # baseline vs fine-tuned
    $ nbtools evaluate experiments/gke-b200-gemma3-1b.yaml baseline /data/nemo-rl/run/merged_step_20 --json
"""

from __future__ import annotations

import warnings

from nbtools.cli._load import load_cfg
from nbtools.cli._out import Out

__all__ = ["register_evaluate", "cmd_evaluate"]

NAMED = ("baseline", "fine-tuned")


def register_evaluate(sub) -> None:
    """Add the ``evaluate`` subcommand to the ``nbtools`` parser."""
    what = ("evaluate models on the experiment's cluster as notebook 07 does (the run's baseline and fine-tuned by "
            "default), print where the per-problem results are and the paired comparison")
    p = sub.add_parser("evaluate", help=what, description=what + ". Exit 0 when every evaluation ran.")
    p.set_defaults(func=cmd_evaluate, overrides=[])
    p.add_argument("--json", action="store_true", help="print one JSON document on stdout and nothing else there")
    p.add_argument("experiment", metavar="EXPERIMENT.yaml")
    p.add_argument("models", nargs="*", metavar="MODEL",
                   help="'baseline', 'fine-tuned' (06's merge), or a model directory / Hub id as the cluster's jobs see "
                        "it; the first is compared with each other (default: baseline fine-tuned)")
    p.add_argument("--backend", choices=["local", "gke", "ray"], help="override the file's backend")
    p.add_argument("--dataset", default="math500", help="run_eval.py's data.dataset_name (NeMo-RL; default math500)")
    p.add_argument("--samples", type=int, default=1, help="samples per problem (default 1: greedy)")
    p.add_argument("--temperature", type=float, help="default 0 for one sample, else the training temperature")
    p.add_argument("--max-model-len", type=int,
                   help="generation length (default: the benchmark's published one, MATH-500 8192; else the run's)")
    p.add_argument("--alpha", type=float, default=0.05, help="significance level of the verdict, in (0, 1)")
    p.add_argument("--timeout", type=float, default=4 * 3600, help="seconds to wait for each evaluation job")


def _label(model: str, i: int) -> str:
    if model in NAMED:
        return model
    import re

    tail = re.sub(r"[^a-z0-9]+", "-", model.rstrip("/").rsplit("/", 1)[-1].lower()).strip("-")[:24]
    return f"model{i}-{tail or 'x'}"


def cmd_evaluate(a) -> Out:
    from nbtools import evals
    from nbtools.errors import ConfigError

    if not 0 < a.alpha < 1:
        raise ConfigError(f"--alpha {a.alpha:g} is not a significance level; fix: e.g. --alpha 0.05")
    if a.samples < 1:
        raise ConfigError(f"--samples {a.samples} must be >= 1; fix: 1 for greedy, e.g. 8 to sample")
    cfg = load_cfg(a)
    names = a.models or list(NAMED)
    if len(set(names)) != len(names):
        raise ConfigError(f"MODEL: {names} names a model twice; fix: name each model once")
    kw = {"n": a.samples, "temperature": a.temperature, "dataset": a.dataset, "max_model_len": a.max_model_len,
          "timeout": a.timeout}
    results, rows, lines = {}, [], []
    mode = "greedy" if (a.temperature == 0 or (a.temperature is None and a.samples == 1)) else f"sampled{a.samples}"
    for i, name in enumerate(names):
        label = _label(name, i)
        if name in NAMED:
            r = evals.evaluate(cfg, name, **kw)
            model = str(evals.models(cfg)[name])
        else:
            r = evals.evaluate_model(cfg, name, label=label, **kw)
            model = name
        results[label] = r
        local = evals.eval_dir(cfg) / f"{label.replace('-', '')}_{mode}"
        lo, hi = r.ci
        row = {"label": label, "model": model, "accuracy": r.accuracy, "ci": [lo, hi], "problems": r.num_problems,
               "samples_per_problem": r.n, "results": str(local / "results.parquet"),
               "cluster_results": r.params.get("save_path"), "max_new_tokens": r.params.get("max_new_tokens"),
               "length_from": r.params.get("length_from"), "dataset": r.params.get("dataset_name") or a.dataset}
        rows.append(row)
        lines.append(f"{label:<14} accuracy {r.accuracy:.3f}  95% CI [{lo:.3f}, {hi:.3f}]  {r.num_problems} problems x "
                     f"{r.n}  max_new_tokens {row['max_new_tokens']} ({row['length_from'] or 'as run'})")
        lines.append(f"{'':<14} per-problem results: {row['results']}"
                     + (f"  (the job wrote {row['cluster_results']})" if row["cluster_results"] else ""))
    comparisons = []
    first = next(iter(results))
    for other in list(results)[1:]:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)
            c = evals.compare(results[first], results[other], names=(first, other), alpha=a.alpha)
        saved = c.save(evals.eval_dir(cfg) / f"comparison_{first.replace('-', '')}_{other.replace('-', '')}_{mode}.json")
        comparisons.append({**c.to_dict(), "saved": str(saved)})
        ci = f"[{c.ci_low:+.3f}, {c.ci_high:+.3f}]" if c.ci_low is not None else "n/a"
        lines += [f"{other} vs {first}: delta {c.delta:+.3f}  95% CI {ci}  test: {c.test} "
                  f"({'paired' if c.paired else 'unpaired'})  p = {c.p_value:.3g}  on {c.n_problems} problems",
                  *[f"note: {n}" for n in c.notes], c.verdict, f"saved: {saved}"]
    return Out({"experiment": cfg.name, "evaluations": rows, "comparisons": comparisons}, "\n".join(lines))
