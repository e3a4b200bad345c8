"""Config handling of the TEST DOUBLES of NeMo-RL's ``run_grpo.py`` / ``run_eval.py`` (tests/sim_gke.py).

NOT NeMo-RL's code: it reproduces what those scripts do with their command line, so a wrong command fails here the
way it fails on the cluster. ``load_config`` follows ``nemo_rl.utils.config.load_config`` (``defaults:`` parents,
paths relative to the file, merged depth-first, the child wins); ``apply_hydra_overrides`` follows Hydra's grammar
as ``parse_hydra_overrides`` uses it (``key=value`` only for existing keys, ``+key=value`` only for new ones,
``++key=value`` either, ``~key`` deletes; the error texts are Hydra's); ``apply_dotlist`` follows run_eval.py's
``OmegaConf.from_cli`` (plain ``key=value``). ``sim()`` reads what the simulated image holds next to the checkout
(``sim_gke.json``): where the nbtools checkout is and the rehearsal config the doubles train and evaluate with.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

import yaml

CHECKOUT = Path(__file__).resolve().parent.parent  # the stand-in of /opt/nemo-rl
_REF = re.compile(r"\$\{([A-Za-z0-9_.]+)\}")


def sim() -> dict:
    """``sim_gke.json`` of the simulated image: {"nbtools_root": ..., "rehearsal_config": ...}."""
    return json.loads((CHECKOUT / "sim_gke.json").read_text())


def import_nbtools() -> None:
    """Put the nbtools checkout on sys.path: this program carries its own code (the image has no nbtools)."""
    root = sim()["nbtools_root"]
    if root not in sys.path:
        sys.path.insert(0, root)


def merge(a: dict, b: dict) -> dict:
    out = dict(a)
    for k, v in b.items():
        out[k] = merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def load_config(path: str | Path) -> dict:
    p = Path(path)
    if not p.is_absolute():
        p = Path.cwd() / p
    data = yaml.safe_load(p.read_text()) or {}
    parents = data.pop("defaults", None)
    if parents is None:
        return data
    base: dict = {}
    for rel in [parents] if isinstance(parents, str) else parents:
        base = merge(base, load_config(p.parent / rel))
    return merge(base, data)


def lookup(tree: dict, key: str) -> tuple[bool, Any]:
    cur: Any = tree
    for part in key.split("."):
        if not isinstance(cur, dict) or part not in cur:
            return False, None
        cur = cur[part]
    return True, cur


def get(tree: dict, key: str, default: Any = None) -> Any:
    """A key's value with ``${a.b}`` interpolations followed (resolvers like ``${mul:...}`` are left as text)."""
    found, value = lookup(tree, key)
    for _ in range(10):
        if not found or not isinstance(value, str):
            break
        m = _REF.fullmatch(value.strip())
        if not m:
            break
        found, value = lookup(tree, m.group(1))
    return value if found else default


def _put(tree: dict, key: str, value: Any) -> None:
    parts = key.split(".")
    for part in parts[:-1]:
        if not isinstance(tree.get(part), dict):
            tree[part] = {}
        tree = tree[part]
    tree[parts[-1]] = value


def _value(text: str) -> Any:
    if len(text) >= 2 and text[0] == text[-1] == "'":
        return text[1:-1].replace("\\'", "'").replace("\\\\", "\\")
    try:
        return yaml.safe_load(text) if text else ""
    except yaml.YAMLError:
        return text


def apply_hydra_overrides(tree: dict, overrides: list[str]) -> dict:
    """Hydra's rules; a bad override exits like NeMo-RL does (Hydra's message on stderr, exit 1)."""
    for ov in overrides:
        if ov.startswith("~"):
            key = ov[1:].split("=", 1)[0]
            found, _ = lookup(tree, key)
            if not found:
                sys.exit(f"Could not delete from config. The value of '{key}' is None and not a dictionary")
            parent, _, leaf = key.rpartition(".")
            (lookup(tree, parent)[1] if parent else tree).pop(leaf)
            continue
        prefix = "++" if ov.startswith("++") else "+" if ov.startswith("+") else ""
        key, sep, value = ov[len(prefix):].partition("=")
        if not sep:
            sys.exit(f"Error parsing override '{ov}'\nmissing EQUAL at '<EOF>'")
        found, current = lookup(tree, key)
        if prefix == "" and not found:
            sys.exit(f"Could not override '{key}'.\nTo append to your config use +{ov}")
        if prefix == "+" and found and current is not None:
            sys.exit(f"Could not append to config. An item is already at '{key}'.")
        _put(tree, key, _value(value))
    return tree


def apply_dotlist(tree: dict, args: list[str]) -> dict:
    """run_eval.py's ``OmegaConf.from_cli()`` + merge: every ``key=value`` token (``--config`` is skipped here)."""
    for a in args:
        if "=" in a and not a.startswith("-"):
            key, _, value = a.partition("=")
            _put(tree, key, _value(value))
    return tree
