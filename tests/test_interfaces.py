"""STYLE rule 16: callers ask the trainer or the backend, they do not branch on what it is. Outside the registries
(nbtools/trainers/, nbtools/backends/ and the trainers' table), no code reads a trainer's kind flags (``miniature``,
``eval_plan``, ``code_on_storage``, ``runs_rehearsal``, by attribute or ``getattr``), compares anything with a
registered backend's, trainer's or layout's name (``==``, ``in``, ``match``, a table indexed by it), tests an object
against an implementation's class (``isinstance(b, GkeBackend)``), or compares ``<x>.backend`` with a string, found by
``ast``.

None is left (2026-11-28; the last six: lint's early return for the CPU rehearsal, the eval flow's plan table, the
card's local facts, the GKE step that copies a trainer's source, the rehearsal-task test in rewards, fit's GPU-table
rule, each now a Trainer or Backend verb), so the test asserts zero."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from nbtools import backends, trainers

ROOT = Path(__file__).resolve().parents[1]
FLAGS = {"miniature", "eval_plan", "code_on_storage", "runs_rehearsal"}
REGISTRIES = ("nbtools/trainers/", "nbtools/backends/", "nbtools/_trainer_folders.py")

# The names a branch would test: every registered backend and trainer, the rehearsal, and the layouts' names.
NAMES = frozenset({"local", "gke", "ray", "nemo-rl", "nemo_rl", "verl", "rehearsal"})
# ... and their implementations' class names (``isinstance(b, GkeBackend)``, ``type(t).__name__ == "Verl"``)
CLASSES = frozenset({ref.partition(":")[2] for ref in backends.REGISTRY.values()}
                    | {trainers.trainer_class(k).__name__ for k in trainers.names()} | {trainers.Rehearsal.__name__})

def _names_in(node: ast.AST | None) -> bool:
    """A registered name (or an implementation's class name) as a string constant, or a tuple/list/set/dict literal
    holding one."""
    if isinstance(node, ast.Constant):
        return isinstance(node.value, str) and node.value in NAMES | CLASSES
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return any(_names_in(e) for e in node.elts)
    if isinstance(node, ast.Dict):
        return any(_names_in(k) for k in node.keys)
    return False


def _is_what(node: ast.AST) -> bool:
    """``<x>.backend`` (the backend's name on a config or a job)."""
    return isinstance(node, ast.Attribute) and node.attr == "backend"


def _is_branch(node: ast.AST) -> bool:
    if isinstance(node, ast.Attribute) and node.attr in FLAGS:  # trainer.miniature
        return True
    if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in {"getattr", "hasattr"}
            and len(node.args) > 1 and isinstance(node.args[1], ast.Constant) and node.args[1].value in FLAGS):
        return True  # getattr(trainer, "miniature")
    if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in {"isinstance", "issubclass"}
            and len(node.args) == 2):  # isinstance(backend, GkeBackend), isinstance(t, (NemoRl, Verl))
        kinds = node.args[1].elts if isinstance(node.args[1], ast.Tuple) else [node.args[1]]
        return any((k.id if isinstance(k, ast.Name) else getattr(k, "attr", None)) in CLASSES for k in kinds)
    if isinstance(node, ast.Compare):  # cfg.backend == "gke", cfg.backend in (...), t.name == "verl", kind in {...}
        sides = [node.left, *node.comparators]
        named = any(_names_in(s) for s in sides)
        return named or (any(map(_is_what, sides)) and any(isinstance(s, ast.Constant) and s.value for s in sides))
    if isinstance(node, ast.Match):  # match cfg.backend: case "gke": ...
        return _is_what(node.subject) or any(
            isinstance(p, ast.MatchValue) and _names_in(p.value)
            for c in node.cases for p in ast.walk(c.pattern))
    if isinstance(node, ast.Subscript):  # {"gke": ...}[cfg.backend], TABLE[cfg.backend]
        return _is_what(node.slice) or _names_in(node.value)
    return False


def branches(path: Path) -> int:
    """How many places read a kind flag or test a backend's or a trainer's name."""
    tree = ast.parse(path.read_text(), str(path))
    return sum(map(_is_branch, ast.walk(tree)))


def test_no_branch_on_what_a_trainer_or_backend_is():
    found = {}
    for p in sorted((ROOT / "nbtools").rglob("*.py")):
        rel = str(p.relative_to(ROOT))
        if not rel.startswith(REGISTRIES) and (n := branches(p)):
            found[rel] = n
    assert not found, ("branches on a trainer's or backend's kind outside the registries (file: count); put the "
                       f"behaviour in the Trainer or Backend and call it: {found}")


def test_the_walk_finds_flag_reads_and_backend_name_tests(tmp_path):
    src = tmp_path / "x.py"
    src.write_text('if cfg.backend == "gke":\n    pass\nif trainer.miniature:\n    pass\n'
                   'if cfg.backend in ("ray", "gke"):\n    pass\nif cfg.backend == other:\n    pass\n')
    assert branches(src) == 3


@pytest.mark.parametrize("spelling", [
    'getattr(trainer, "miniature")',
    'hasattr(t, "eval_plan")',
    'match cfg.backend:\n    case "gke":\n        pass',
    'match kind:\n    case "verl" | "x":\n        pass',
    'backend in {"local", "ray"}',
    'b.kind == "gke"',
    'trainers.get(cfg).name == "verl"',
    'trainer.name != "nemo-rl"',
    '"rehearsal" == t.name',
    'layout == "nemo_rl"',
    '{"gke": 1, "local": 2}[name]',
    'TABLE[cfg.backend]',
    'isinstance(backend, GkeBackend)',
    'isinstance(t, (str, trainers.Rehearsal))',
    'type(t).__name__ == "Verl"',
])
def test_the_walk_sees_other_spellings_of_a_branch(tmp_path, spelling):
    """Spellings the first walk let through (a flag by getattr, a match, a set, a trainer's name)."""
    src = tmp_path / "x.py"
    src.write_text(spelling + "\n")
    assert branches(src) == 1


def test_the_walk_leaves_other_comparisons_alone(tmp_path):
    src = tmp_path / "x.py"
    src.write_text('if s.kind != "gcsfuse":\n    pass\nif f.kind == "slow":\n    pass\nx = cfg.backend\n'
                   'match mode:\n    case "greedy":\n        pass\n')
    assert branches(src) == 0
