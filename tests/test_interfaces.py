"""STYLE rule 16: callers ask the trainer or the backend, they do not branch on what it is. Outside the registries
(nbtools/trainers/, nbtools/backends/ and the trainers' table), no code reads a trainer's kind flags (``miniature``,
``eval_plan``, ``code_on_storage``, ``runs_rehearsal``) or compares ``<x>.backend`` with a name, found by ``ast``.

A ratchet (2026-11-28): the branches still there may only go; a file may not gain one, and a new file may not have
one. What remains: lint's early return for the CPU rehearsal, the eval flow's choice of plan, the card's local facts,
the GKE provisioning step that copies a trainer's source, the rehearsal-task test in rewards, fit's GPU-table rule.
"""

from __future__ import annotations

import ast
from pathlib import Path

from ratchet import check_ratchet

ROOT = Path(__file__).resolve().parents[1]
FLAGS = {"miniature", "eval_plan", "code_on_storage", "runs_rehearsal"}
REGISTRIES = ("nbtools/trainers/", "nbtools/backends/", "nbtools/_trainer_folders.py")

BRANCHES_LEFT: dict[str, int] = {
    "nbtools/card/_facts.py": 1,
    "nbtools/evals/flow.py": 1,
    "nbtools/fit/_gpus.py": 1,
    "nbtools/gke/_steps.py": 1,
    "nbtools/launch/lint.py": 1,
    "nbtools/rewards/_run.py": 1,
}


def _is_backend_name_test(node: ast.AST) -> bool:
    if not isinstance(node, ast.Compare):
        return False
    sides = [node.left, *node.comparators]
    backend = any(isinstance(s, ast.Attribute) and s.attr == "backend" for s in sides)
    named = any(isinstance(s, ast.Constant) and isinstance(s.value, str) and s.value
                or isinstance(s, (ast.Tuple, ast.List, ast.Set)) and any(isinstance(e, ast.Constant) for e in s.elts)
                for s in sides)
    return backend and named


def branches(path: Path) -> int:
    """How many places read a kind flag or test a backend's name."""
    tree = ast.parse(path.read_text(), str(path))
    return sum((isinstance(n, ast.Attribute) and n.attr in FLAGS) or _is_backend_name_test(n) for n in ast.walk(tree))


def test_no_new_branch_on_what_a_trainer_or_backend_is():
    found = {}
    for p in sorted((ROOT / "nbtools").rglob("*.py")):
        rel = str(p.relative_to(ROOT))
        if not rel.startswith(REGISTRIES) and (n := branches(p)):
            found[rel] = n
    check_ratchet(found, BRANCHES_LEFT, "branches on a trainer's or backend's kind outside the registries",
                  "put the behaviour in the Trainer or Backend and call it", "BRANCHES_LEFT")


def test_the_walk_finds_flag_reads_and_backend_name_tests(tmp_path):
    src = tmp_path / "x.py"
    src.write_text('if cfg.backend == "gke":\n    pass\nif trainer.miniature:\n    pass\n'
                   'if cfg.backend in ("ray", "gke"):\n    pass\nif cfg.backend == other:\n    pass\n')
    assert branches(src) == 3
