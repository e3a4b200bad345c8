"""Config handling of the TEST DOUBLES of NeMo-RL's ``run_grpo.py`` / ``run_eval.py`` (tests/doubles/sim_gke.py).

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


def _value(text: str, hydra: bool = True) -> Any:
    """The value as Hydra's override grammar reads it (``{a:b,c:[1,2]}`` is a dict); YAML for OmegaConf's dotlist."""
    try:
        if not hydra:
            raise ImportError
        from hydra.core.override_parser.overrides_parser import OverridesParser

        return _plain(OverridesParser.create().parse_overrides([f"k={text}"])[0].value())
    except ImportError:
        pass
    except Exception:  # noqa: BLE001 - Hydra rejects it: NeMo-RL would exit with Hydra's message
        sys.exit(f"Error parsing override value '{text}'")
    if len(text) >= 2 and text[0] == text[-1] == "'":
        return text[1:-1].replace("\\'", "'").replace("\\\\", "\\")
    try:
        return yaml.safe_load(text) if text else ""
    except yaml.YAMLError:
        return text


def _plain(v: Any) -> Any:
    if isinstance(v, dict):
        return {str(k): _plain(x) for k, x in v.items()}
    if isinstance(v, list):
        return [_plain(x) for x in v]
    return v


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
            _put(tree, key, _value(value, hydra=False))
    return tree


def release() -> str:
    """The NeMo-RL release this simulated image holds (``sim_gke.json``; v0.7.0 when it does not say)."""
    return str(sim().get("nemo_rl_version", "v0.7.0"))


def environment(cfg: dict, script: str, version: str | None = None) -> tuple[str, str, Any]:
    """(env name, actor class FQN, ``env.<name>`` config) that ``script`` of the release builds for ``cfg``.

    Per nemo_rl_releases.py: a script that hard-codes its environment ignores ``data.env_name`` (NeMo-RL v0.5.0's
    run_grpo_math.py); the others read the key the release reads and resolve it in ``ENV_REGISTRY`` (NeMo-RL's
    registry when the job's path has it, so what ``nbtools.rewards.nemo_rl_env`` registered counts), failing with
    NeMo-RL's assertion when the name is not registered.
    """
    from nemo_rl_releases import MATH_ENV_FQN, facts, script_facts

    version = version or release()
    row = script_facts(version, script)
    if row is None:
        sys.exit(f"python: can't open file '{script}': [Errno 2] No such file or directory "
                 f"(NeMo-RL {version} has no {script}; test double)")
    if row["fixed_env"]:
        name = row["fixed_env"]
        return name, MATH_ENV_FQN, get(cfg, f"env.{name}")
    name = None
    for key in row.get("per_dataset_keys", ()):  # a dataset's own env_name beats data.default's
        if key.startswith("data.train"):
            found, name = lookup(cfg, key)
            if found and name is not None:
                break
            name = None
    name = name or get(cfg, row["env_name_key"])
    try:
        from nemo_rl.environments.utils import ENV_REGISTRY  # the registry double, when on the job's path
        registry = {k: v["actor_class_fqn"] for k, v in ENV_REGISTRY.items()}
    except ImportError:
        registry = dict(facts(version)["registered_envs"])
    if name not in registry:
        sys.exit(f"AssertionError: Env name {name} is not registered in ENV_REGISTRY. "
                 "Please call register_env() to register the environment.")
    return str(name), registry[name], get(cfg, f"env.{name}")
