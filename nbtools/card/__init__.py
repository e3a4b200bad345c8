"""A Hugging Face model card (``README.md``) beside every merged model: what was trained, how, and whether it is better.

Why: notebook 06 makes a HuggingFace directory and 07 a verdict with statistics; the card joins them in the format
the Hub reads (YAML front matter with ``base_model``, ``license``, ``datasets``, ``tags`` and a ``model-index``),
with the experiment as it ran and its training curves as files beside it. 06 writes it once the merge is
verified; 07 replaces its evaluation section; re-running either replaces the card atomically. Publishing is shown
(``card.upload_call``), never run.

Example:
    >>> card = nbtools.card.write(cfg, out, merge=result)                       # notebook 06
    >>> card = nbtools.card.update_evaluation(out, {"greedy": comparison})       # notebook 07
    >>> print(card.upload_call)
"""

from __future__ import annotations

import io
import os
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from nbtools import _paths, storage
from nbtools._escape import md, md_code
from nbtools.card import _guard, _io
from nbtools.card._experiment import experiment_yaml
from nbtools.card._facts import KNOWN_LICENSES, fingerprint, gather, merged_from
from nbtools.card._render import (
    CONFIG,
    CURVES,
    EVAL_END,
    EVAL_START,
    body,
    comparisons_of,
    eval_dataset,
    eval_results,
    evaluation_section,
    metadata,
    upload_call,
)
from nbtools.errors import ConfigError, ConflictError, Fix, NotFoundError

__all__ = ["Card", "write", "update_evaluation", "read", "merged_from", "KNOWN_LICENSES", "README", "CONFIG", "CURVES"]

README = "README.md"
_SECTION = re.compile(re.escape(EVAL_START) + r".*?" + re.escape(EVAL_END), re.DOTALL)


@_paths.tidy_reprs
@dataclass(frozen=True)
class Card:
    """A written card: where it is, its metadata as data, the full text, the files beside it, the publishing call."""

    path: str
    metadata: dict[str, Any]
    text: str
    files: tuple[str, ...]
    evaluations: int
    upload_call: str
    notes: tuple[str, ...] = ()

    def __repr__(self) -> str:  # a sentence, not the dataclass with the whole card text in it
        return (f"model card {self.path}: {self.evaluations} evaluation(s) in the model-index; beside it: "
                f"{', '.join(self.files) or 'nothing else'}" + "".join(f"\n  note: {n}" for n in self.notes))

    def _repr_markdown_(self) -> str:
        m = self.metadata
        notes = "".join(f"\n- {md(n)}" for n in self.notes if md(n))
        fence = "`" * max(3, 1 + max((len(r) for r in re.findall("`+", self.upload_call)), default=0))
        return (f"**Model card** {md_code(self.path)}: base model {md_code(m.get('base_model', 'n/a'))}, license "
                f"{md_code(m.get('license', 'unknown'))}, tags {md(', '.join(m.get('tags', [])))}; {self.evaluations} "
                f"evaluation(s) in the model-index; beside it: {md(', '.join(self.files) or 'nothing else')}.{notes}\n\n"
                f"Publish (not run by nbtools; paths relative to here):\n{fence}python\n"
                f"{_paths.pasteable(self.upload_call)}\n{fence}")


def _model_card(front: Any, text: str):
    """Build the card through huggingface_hub: the YAML is dumped by ModelCardData and parsed back (validated)."""
    from huggingface_hub import ModelCard

    return ModelCard("---\n" + front.to_yaml() + "\n---\n" + text)


def _versions(rehearsal: bool) -> dict[str, str]:
    """The libraries that made these files, as installed here (for a rehearsal, also the ones that trained it)."""
    from importlib import metadata as im

    names = ["transformers", "torch", "safetensors", "huggingface_hub", "nbtools"]
    if rehearsal:
        names.insert(2, "ray")
    from nbtools._version import __version__

    out = {}
    for n in names:
        try:
            out[n] = im.version(n)
        except im.PackageNotFoundError:  # nbtools run from a checkout on PYTHONPATH
            if n == "nbtools":
                out[n] = __version__
    return out


def _written() -> str:
    import huggingface_hub

    from nbtools._version import __version__

    return (f"Card written by nbtools {__version__} with huggingface_hub {huggingface_hub.__version__} on "
            f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}.")


def _arch(model_dir: Path) -> dict[str, Any]:
    import json

    try:
        return json.loads(_io.read_text(model_dir / "config.json") or "{}")
    except ValueError:
        return {}


def _curves_png(frame: Any, title: str, step: int | None) -> bytes:
    from nbtools import plots

    fig = plots.training_curves(frame, title=title)
    for ax in fig.axes if step is not None else ():
        if ax.get_visible():  # where the merged checkpoint sits on every curve
            ax.axvline(step, color="0.35", ls=":", lw=1.2)
            ax.annotate(f"merged step_{step}", (step, 1.0), xycoords=("data", "axes fraction"), fontsize=7,
                        color="0.35", ha="right", va="top", rotation=90)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110, bbox_inches="tight")
    return buf.getvalue()


def _kept_evaluation(model_dir: Path, weights: str | None) -> tuple[str, list[Any]] | None:
    """The existing evaluation (section text, model-index results) when it was made for these exact weights."""
    from huggingface_hub import ModelCard

    text = _io.read_text(model_dir / README)
    m = _SECTION.search(text or "")
    if not (text and m and weights and m.group(0).startswith(f"{EVAL_START} weights={weights} ")):
        return None
    try:
        old = ModelCard(text, ignore_metadata_errors=True).data
    except ValueError:
        return None
    return m.group(0), list(old.eval_results or [])


def _workdir(model_dir: str | os.PathLike) -> tuple[Path, str | None]:
    """(a local directory holding the model dir's small files, the remote URL or None): a ``gs://`` model dir is
    read through a local copy of everything but the weights, and the card's files are uploaded back after."""
    text = os.fspath(model_dir)
    if not storage.is_remote(text):
        return Path(text), None
    url = text.rstrip("/")
    if storage.info(url) is None:
        return storage.cache_path(url), url  # reported by the callers' "not found" checks
    return storage.mirror(url, include=lambda rel: "/" not in rel and not rel.endswith(".safetensors")), url


def _publish(local: Path, remote: str | None, names: list[str]) -> None:
    """Upload the card's files to the remote model dir (the README last, so a reader never sees a card whose
    files are missing)."""
    if remote is None:
        return
    for name in sorted(names, key=lambda n: n == README):
        storage.write_bytes(storage.join(remote, name), (local / name).read_bytes())


def _install(model_dir: Path, card: Any, extra: dict[str, str | bytes], secrets: dict[str, str]) -> str:
    """Scan every text, then write the files beside the card and the card last (each one atomically)."""
    text = _guard.scrub_home(str(card))
    for name, content in [(README, text), *extra.items()]:
        if isinstance(content, str):
            _guard.check(name, content, secrets)
    for name, content in extra.items():
        (_io.write_text if isinstance(content, str) else _io.write_bytes)(model_dir / name, content)
    _io.write_text(model_dir / README, text)
    return text


def write(cfg: Any, model_dir: str | os.PathLike, *, merge: Any = None, comparisons: Any = None,
          dataset: str | None = None, curves: bool = True) -> Card:
    """Write (or replace) ``README.md``, ``experiment.yaml`` and ``training_curves.png`` beside a merged model.

    Without ``comparisons`` an evaluation already in the card is kept when it was made for these exact weights
    (same digests in ``checksums.json``), so re-running notebook 06 keeps 07's numbers, and a new merge drops them.

    Args:
        cfg: the experiment (``nbtools.config.load``).
        model_dir: the merged HuggingFace directory (``nbtools.evals.finetuned_model_path(cfg)``).
        merge: the ``MergeResult`` (optional: the directory's ``checksums.json`` names the checkpoint too).
        comparisons: ``{label: Comparison}`` from ``nbtools.evals.compare`` (or saved comparison JSON paths).
        dataset: what the comparisons ran on (``"math500"``, ``"aime2024"``, …); default: the rehearsal's
            held-out split locally, MATH-500 on a cluster.
        curves: draw the training curves PNG (needs the run's TensorBoard events).

    Returns:
        Card (path, metadata, text, files written beside, the ``upload_folder`` call).

    Raises:
        NotFoundError: ``model_dir`` is not a HuggingFace model directory.
        ConfigError: a secret's value would end up in the card (nothing is written).

    Example:
        >>> card = nbtools.card.write(cfg, nbtools.evals.finetuned_model_path(cfg), merge=result)
        >>> card.metadata["base_model"]
    """
    from nbtools.config import to_dict

    model_dir, remote = _workdir(model_dir)
    if not _io.exists(model_dir / "config.json"):
        raise NotFoundError(f"expected a merged HuggingFace model (config.json) in {remote or model_dir}, found none",
                            fix=Fix("merge the checkpoint first: nbtools.checkpoints.merge_in_cluster(cfg) (notebook 06)",
                                    cli="merge the checkpoint first: `nbtools merge STEP_DIR OUT_DIR` (or notebook 06)"))
    facts = gather(cfg, model_dir, merge=merge)
    evals = comparisons_of(comparisons)
    ds = eval_dataset(facts.setup.rehearsal, cfg.data.dataset, dataset)
    kept = None if evals else _kept_evaluation(model_dir, facts.merged.fingerprint)
    if kept:
        section, results = kept
    else:
        section = evaluation_section(evals, ds, cfg.model.name, facts.merged.fingerprint)
        results = eval_results(evals, ds)
    data = _guard.redact(to_dict(cfg))
    extra: dict[str, str | bytes] = {CONFIG: _guard.scrub_home(experiment_yaml(cfg, data, (
        "# The experiment this model was trained with (secrets by name only).\n"
        f"# Config hash {cfg.config_hash()}. Load it: nbtools.config.load(\"{CONFIG}\")\n")))}
    if curves and not facts.training.frame.empty:
        extra[CURVES] = _curves_png(facts.training.frame, f"{cfg.name}: training curves", facts.merged.step)
    card = _model_card(metadata(facts, results, cfg.name),
                       body(facts, section, model_dir.name, list(extra), versions=_versions(facts.setup.rehearsal),
                            written=_written(), arch=_arch(model_dir)))
    text = _install(model_dir, card, extra, _guard.secret_values(data))
    _publish(model_dir, remote, [*extra, README])
    where = remote or str(model_dir)
    return Card(storage.join(where, README), card.data.to_dict(), text, tuple(extra), len(results),
                upload_call(cfg.name, str(model_dir), facts.merged.step, cfg.config_hash()), tuple(facts.notes))


def update_evaluation(model_dir: str | os.PathLike, comparisons: Any, *, dataset: str | None = None) -> Card:
    """Replace the card's evaluation section and model-index with these comparisons (the rest stays as written).

    Args:
        model_dir: the merged model directory holding the card from :func:`write`.
        comparisons: ``{label: Comparison}`` (``nbtools.evals.compare``), their ``to_dict()`` or saved JSON paths.
        dataset: what they ran on (see :func:`write`).

    Raises:
        NotFoundError: no card yet (run :func:`write` first).
        ConflictError: the README was not written by ``nbtools.card``.

    Example:
        >>> nbtools.card.update_evaluation(nbtools.evals.finetuned_model_path(cfg), {"greedy": comparison})
    """
    from huggingface_hub import ModelCard

    model_dir, remote = _workdir(model_dir)
    text = _io.read_text(model_dir / README)
    if text is None:
        raise NotFoundError(f"expected a model card at {storage.join(remote or str(model_dir), README)}, found none",
                            fix=Fix("write it first: nbtools.card.write(cfg, model_dir, merge=result) (notebook 06)",
                                    cli="write it first: `nbtools card RUN_OR_MODEL_DIR` (or notebook 06)"))
    if not _SECTION.search(text):
        raise ConflictError(f"{model_dir / README} has no nbtools evaluation section (not written by nbtools.card)",
                            fix=Fix("replace it with nbtools.card.write(cfg, model_dir, comparisons=...)",
                                    cli="replace it: `nbtools card RUN_OR_MODEL_DIR` writes the card with its evaluations"))
    evals = comparisons_of(comparisons)
    if not evals:
        raise ConfigError("no comparisons given", fix=Fix("pass {'greedy': nbtools.evals.compare(baseline, tuned)}",
                                                          cli="save a comparison first (notebook 07 writes "
                                                              "eval/comparison_*.json)"))
    exp = yaml.safe_load(_io.read_text(model_dir / CONFIG) or "") or {}
    name = exp.get("name") or model_dir.name
    base = (exp.get("model") or {}).get("name", "baseline")
    rehearsal = "nbtools-rehearsal" in (ModelCard(text, ignore_metadata_errors=True).data.tags or [])
    ds = eval_dataset(rehearsal, (exp.get("data") or {}).get("dataset", "held-out"), dataset)
    section = evaluation_section(evals, ds, base, fingerprint(model_dir))
    card = ModelCard(text)
    card.text = _SECTION.sub(lambda _: section, card.text, count=1)
    card.data.eval_results, card.data.model_name, card.data.metrics = eval_results(evals, ds), name, ["accuracy"]
    card = ModelCard(str(card))  # re-parse: the new model-index must read back
    new = _install(model_dir, card, {}, _guard.secret_values(exp))
    _publish(model_dir, remote, [README])
    step = re.search(r"Merged from \*\*step_(\d+)\*\*", new)
    return Card(storage.join(remote or str(model_dir), README), card.data.to_dict(), new,
                tuple(n for n in (CONFIG, CURVES) if _io.exists(model_dir / n)), len(evals),
                upload_call(name, str(model_dir), int(step.group(1)) if step else None, _hash_of(new)), ())


def _hash_of(text: str) -> str:
    m = re.search(r"config hash `([0-9a-f]+)`", text)
    return m.group(1) if m else "unknown"


def read(model_dir: str | os.PathLike):
    """The card as a ``huggingface_hub.ModelCard`` (``.data.eval_results`` holds the model-index).

    Example:
        >>> nbtools.card.read(out).data.eval_results[0].metric_value
    """
    text = _io.read_text(storage.join(str(model_dir), README))
    if text is None:
        raise NotFoundError(f"expected a model card at {storage.join(str(model_dir), README)}, found none",
                            fix=Fix("write it: nbtools.card.write(cfg, model_dir) or `nbtools card RUN_DIR`",
                                    cli="write it: `nbtools card RUN_DIR`"))
    from huggingface_hub import ModelCard

    return ModelCard(text)
