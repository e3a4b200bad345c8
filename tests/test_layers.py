"""STYLE rule 17: layers point one way. Every import between nbtools modules, top-level or inside a function (and
not under ``TYPE_CHECKING``: those never run), is an edge; the graph must have no cycle, the config must import no other nbtools package,
and a package's private modules are imported only by that package."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1] / "nbtools"


def _modules() -> dict[str, Path]:
    out = {}
    for path in sorted(ROOT.rglob("*.py")):
        parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


MODULES = _modules()


def _imports(name: str, path: Path) -> list[tuple[str, int]]:
    """(imported nbtools module, line) for every import statement in the file, wherever it sits."""
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    found = []
    tree = ast.parse(path.read_text(), str(path))
    typing_only = {id(n) for block in ast.walk(tree) if isinstance(block, ast.If) and _is_type_checking(block.test)
                   for stmt in block.body for n in ast.walk(stmt)}
    for node in ast.walk(tree):
        if id(node) in typing_only:  # never runs: annotations only
            continue
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - node.level + 1]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            # `from pkg import sub` imports the submodule; `from pkg import name` imports pkg
            targets = [f"{module}.{a.name}" if f"{module}.{a.name}" in MODULES else module for a in node.names]
        else:
            continue
        for t in targets:
            while t and t not in MODULES:  # `import nbtools.x.y` where y is not a module: its package
                t = t.rpartition(".")[0]
            if t and t != name:
                found.append((t, node.lineno))
    return found


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


GRAPH = {name: _imports(name, path) for name, path in MODULES.items()}


def _cycles() -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []
    counter = 0
    for start in GRAPH:
        if start in index:
            continue
        work = [(start, iter(sorted({t for t, _ in GRAPH[start]})))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on.add(start)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = counter
                    counter += 1
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted({t for t, _ in GRAPH[w]}))))
                elif w in on:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                if len(comp) > 1:
                    out.append(sorted(comp))
    return out


def _show(comp: list[str]) -> str:
    members = set(comp)
    edges = sorted({f"{a} -> {b} (line {line})" for a in comp for b, line in GRAPH[a] if b in members})
    return "\n    ".join(edges)


# Cycles still allowed (none): an entry would name one that may not grow; the test fails while an entry names a cycle
# that no longer exists.
KNOWN: list[frozenset[str]] = []


def test_the_graph_sees_function_level_imports():
    """The walker must see an import inside a function, or a hidden cycle would pass."""
    src = "def f():\n    from nbtools import backends\n"
    tree = ast.parse(src)
    assert any(isinstance(n, ast.ImportFrom) for n in ast.walk(tree))
    assert ("nbtools.backends", 2) in _imports("nbtools.x", _write(src))


def _write(src: str) -> Path:
    import tempfile

    path = Path(tempfile.mkdtemp()) / "x.py"
    path.write_text(src)
    return path


def test_no_import_cycle():
    found = _cycles()
    cycles = [c for c in found if frozenset(c) not in KNOWN]
    gone = [sorted(k) for k in KNOWN if k not in {frozenset(c) for c in found}]
    assert not gone, f"a known cycle is gone: remove it from KNOWN: {gone}"
    assert not cycles, "import cycles (STYLE rule 17; move what ties them to the module that owns it):\n  " + \
        "\n  ".join(f"{' <-> '.join(c)}\n    {_show(c)}" for c in cycles)


def test_config_imports_no_other_nbtools_package():
    bad = [f"{name} imports {target} (line {line})" for name in MODULES if name.split(".")[:2] == ["nbtools", "config"]
           for target, line in GRAPH[name]
           if target.split(".")[:2] != ["nbtools", "config"] and target not in LEAVES]
    assert not bad, "the config is the floor (STYLE rule 17); it may import only " + ", ".join(sorted(LEAVES)) + \
        ":\n  " + "\n  ".join(bad)


LEAVES = {"nbtools.errors", "nbtools._paths", "nbtools._escape", "nbtools._atomic"}  # helpers that import nothing of nbtools


@pytest.mark.parametrize("leaf", sorted(LEAVES))
def test_leaves_import_nothing_of_nbtools(leaf):
    assert GRAPH[leaf] == []


def test_private_modules_are_imported_only_by_their_package():
    bad = []
    for name, edges in GRAPH.items():
        for target, line in edges:
            parts = target.split(".")
            private = next((i for i, p in enumerate(parts) if p.startswith("_") and not p.startswith("__")), None)
            if private is None:
                continue
            owner = ".".join(parts[:private])
            if owner != "nbtools" and not (name == owner or name.startswith(owner + ".")):
                bad.append(f"{name} (line {line}) imports {target}; import it from {owner}'s __init__")
    assert not bad, "private modules reached from outside their package (STYLE rule 17):\n  " + "\n  ".join(bad)
