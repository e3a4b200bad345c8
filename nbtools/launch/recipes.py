"""The tutorials' GRPO runs as experiment configs, so each can be linted, built and launched from a notebook.

Why: every tutorial hides its run in a shell heredoc with hard-coded keys; as configs they get the same command
builder, lint and secrets handling as any other experiment. One source of truth: the checkout's
``experiments/tutorial-*.yaml``, each the run as its tutorial wrote it (comments say where a value comes from);
``nbtools/data/recipes.yaml`` is generated from them (``python tools/gen_recipes.py``; a test
checks it is current) so an installed package has them too. nbtools' recommended variants live beside the files
(``experiments/gke-*.yaml``), with a comment per difference and why.

Example:
    >>> cfg = recipes.get("tutorial-004-qwen2.5-1.5b")
    >>> print(nbtools.launch.build(cfg).entrypoint)
"""

from __future__ import annotations

import copy
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from nbtools.config import Experiment, from_dict

__all__ = ["RECIPES", "NOTES", "names", "get", "to_yaml", "from_files"]

def _load() -> tuple[dict[str, dict[str, Any]], dict[str, str]]:
    entries = yaml.safe_load(resources.files("nbtools").joinpath("data", "recipes.yaml").read_text())
    return ({name: e["experiment"] for name, e in entries.items()},
            {name: e["note"] for name, e in entries.items() if e.get("note")})


# name -> the experiment as a dict, and name -> where it comes from; data in nbtools/data/recipes.yaml
RECIPES, NOTES = _load()


def names() -> list[str]:
    """The recipe names, in tutorial order."""
    return sorted(RECIPES)


def get(name: str, *, backend: str | None = None, **changes: Any) -> Experiment:
    """A recipe as a validated :class:`~nbtools.config.Experiment`; ``changes`` are dotted keys (``grpo.max_num_steps``).

    Example:
        >>> cfg = recipes.get("tutorial-000-gemma3-1b-it", **{"grpo.max_num_steps": 5})
    """
    if name not in RECIPES:
        import difflib

        from nbtools.errors import NotFoundError

        near = difflib.get_close_matches(name, names(), n=1)
        raise NotFoundError(
            f"no recipe named {name!r}; known: {', '.join(names())}",
            fix=f"use {near[0]!r}" if near else f"pick one of {', '.join(names())}",
        )
    data = copy.deepcopy(RECIPES[name])
    if backend is not None:
        data["backend"] = backend
    cfg = from_dict(data)
    return cfg.replace(**changes) if changes else cfg


def to_yaml(name: str) -> str:
    """The recipe as an experiment YAML (``experiments/<name>.yaml`` is exactly this; save a copy to edit it)."""
    from nbtools import backends

    backend = RECIPES[name].get("backend", "gke")
    nb = backends.backend_class(backend).first_notebook
    head = (f"# {name}: {NOTES.get(name, '')}\n"
            f"# Run it:  nbtools launch experiments/{name}.yaml --lint-only; then notebooks/{nb}.ipynb with "
            f"BACKEND=\"{backend}\", CONFIG=\"../experiments/{name}.yaml\"\n")
    return head + yaml.safe_dump(RECIPES[name], sort_keys=False)


_HEADER = ("# GENERATED from experiments/tutorial-*.yaml by `python tools/gen_recipes.py`: edit those\n"
           "# files (the tutorials' runs as written, with comments), never this one. Per recipe: `note` (the file's first\n"
           "# comment line) and `experiment` (the file's YAML).\n")


def from_files(experiments_dir: str | Path) -> str:
    """``recipes.yaml``'s text, generated from ``<experiments_dir>/tutorial-*.yaml`` (the source of truth)."""
    out: dict[str, Any] = {}
    for path in sorted(Path(experiments_dir).glob("tutorial-*.yaml")):
        text = path.read_text()
        first = text.splitlines()[0] if text else ""
        note = first[len(f"# {path.stem}: "):] if first.startswith(f"# {path.stem}: ") else ""
        out[path.stem] = {"note": note, "experiment": yaml.safe_load(text)}
    return _HEADER + yaml.safe_dump(out, sort_keys=False, width=110, allow_unicode=True)

