"""`nbtools card RUN_OR_MODEL_DIR`: write the Hugging Face model card beside a merged model, from its run's files.

Why: a model merged by a script or a cluster job gets the same card notebook 06/07 write. The experiment comes from
``--experiment``, else the ``experiment.yaml`` an earlier card left beside the model, else the ``nbtools:`` section
of the merged checkpoint's ``config.yaml``; saved comparisons (``<run_dir>/eval/comparison_*.json``) fill the
evaluation section.

Example:
    $ nbtools card runs/local-rehearsal --json
    $ nbtools card /data/run/merged_hf --experiment experiments/gke-h200-qwen.yaml --dataset math500
"""

from __future__ import annotations

from pathlib import Path

from nbtools.cli._out import Out

__all__ = ["register_card", "cmd_card"]


def register_card(sub) -> None:
    """Add the ``card`` subcommand to the ``nbtools`` parser."""
    what = "write the Hugging Face model card (README.md, experiment.yaml, training curves) beside a merged model"
    p = sub.add_parser("card", help=what, description=what + ". Publishing is shown, never run.")
    p.set_defaults(func=cmd_card)
    p.add_argument("--json", action="store_true", help="print one JSON document on stdout and nothing else there")
    p.add_argument("target", metavar="RUN_OR_MODEL_DIR", help="the merged model dir, or the run dir holding merged_hf/")
    p.add_argument("--experiment", metavar="EXPERIMENT.yaml", help="the experiment (default: found beside the model)")
    p.add_argument("--backend", choices=["local", "gke", "ray"], help="override the experiment's backend")
    p.add_argument("--dataset", help="what the saved comparisons ran on (default: held-out split locally, else math500)")
    p.add_argument("--no-eval", action="store_true", help="ignore saved comparisons (eval/comparison_*.json)")


def _model_dir(target: Path) -> Path:
    from nbtools import storage
    from nbtools.errors import NotFoundError

    for d in (target, target / "merged_hf"):
        if storage.exists(d / "config.json"):
            return d
    raise NotFoundError(f"expected a merged HuggingFace model (config.json) in {target} or {target / 'merged_hf'}",
                        fix="pass the merged model directory (notebook 06 / `nbtools merge` writes <run_dir>/merged_hf)")


def _experiment(a, model_dir: Path):
    import yaml

    from nbtools import config, storage
    from nbtools.card import CONFIG, merged_from
    from nbtools.errors import NotFoundError

    def text(path: Path) -> str | None:
        return storage.read_text(path) if storage.exists(path) else None

    if a.experiment:
        return config.load(a.experiment, backend=a.backend)
    data = yaml.safe_load(text(model_dir / CONFIG) or "null")
    source = merged_from(model_dir)
    if not data and source:
        data = (yaml.safe_load(text(Path(source) / "config.yaml") or "null") or {}).get("nbtools")
    if not isinstance(data, dict):
        raise NotFoundError(f"no experiment found for {model_dir} (no {CONFIG} beside it, no nbtools section in its "
                            "checkpoint's config.yaml)", fix="pass --experiment EXPERIMENT.yaml")
    return config.from_dict({**data, **({"backend": a.backend} if a.backend else {})})


def cmd_card(a) -> Out:
    from nbtools import card, storage

    model_dir = _model_dir(Path(a.target))
    cfg = _experiment(a, model_dir)
    saved = [] if a.no_eval else storage.glob(model_dir.parent / "eval", "comparison_*.json")
    c = card.write(cfg, model_dir, comparisons=saved or None, dataset=a.dataset)
    data = {"readme": c.path, "metadata": c.metadata, "files": list(c.files), "evaluations": c.evaluations,
            "upload_call": c.upload_call, "notes": list(c.notes)}
    text = (f"wrote {c.path}: {c.evaluations} evaluation(s) in the model-index; beside it: {', '.join(c.files)}\n"
            + "".join(f"  note: {n}\n" for n in c.notes) + f"\npublish (not run by nbtools):\n{c.upload_call}")
    return Out(data, text)
