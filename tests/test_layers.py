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


# ---- packages in layers (issue 43) --------------------------------------------------------------------------------
# The declared order, bottom up. A package is a folder under nbtools/ or a top-level module (private helpers included);
# ``nbtools`` itself is the facade that re-exports everything, so it sits on top with the CLI. An import of a lower or
# equal layer is fine (unless it closes a cycle); an import of a higher layer is an upward edge.
PACKAGE_LAYERS: list[tuple[str, set[str]]] = [
    ("leaves", {"nbtools.errors", "nbtools._paths", "nbtools._escape", "nbtools._atomic", "nbtools._pids",
                "nbtools._ports", "nbtools._progress", "nbtools._table", "nbtools._figure", "nbtools._tfevents",
                "nbtools._layout", "nbtools._groups", "nbtools._html", "nbtools._rehearsal_task",
                "nbtools._trainer_folders", "nbtools._gpus"}),  # _gpus: the GPU memory table; _trainer_folders: the trainers' table of dotted names, imported on demand
    ("config", {"nbtools.config"}),
    ("storage and data readers", {"nbtools.storage", "nbtools._rayfs", "nbtools.metrics", "nbtools.overlay", "nbtools.trajectories", "nbtools.checkpoints",
                                  "nbtools.rewards", "nbtools.kube", "nbtools.manifests"}),
    # the rehearsal is a trainer's own code (the one-folder-per-trainer move puts it under trainers/)
    ("registries and layouts", {"nbtools.trainers", "nbtools.backends", "nbtools.rehearsal"}),
    ("jobs, launch, evals", {"nbtools.jobs", "nbtools.worker_logs", "nbtools.launch", "nbtools.evals", "nbtools.health", "nbtools.fit",
                             "nbtools.gke", "nbtools.tensorboard"}),
    ("display", {"nbtools.curves", "nbtools._labels", "nbtools.plots", "nbtools.widgets", "nbtools.explorer",
                 "nbtools.card"}),
    ("cli", {"nbtools.cli", "nbtools.demo", "nbtools"}),
]
LAYER = {pkg: i for i, (_, pkgs) in enumerate(PACKAGE_LAYERS) for pkg in pkgs}


def _package(module: str) -> str:
    return ".".join(module.split(".")[:2])


def _function_level_lines(path: Path) -> set[int]:
    """Lines of the import statements that sit inside a function (they run late, and can hide a cycle)."""
    tree = ast.parse(path.read_text(), str(path))
    return {n.lineno for f in ast.walk(tree) if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef))
            for n in ast.walk(f) if isinstance(n, (ast.Import, ast.ImportFrom))}


def _package_graph(graph: dict[str, list[tuple[str, int]]]) -> dict[tuple[str, str], list[str]]:
    """(package, package) -> the import sites behind that edge, ``module:line``, ``(in a function)`` marked."""
    inner = {name: _function_level_lines(MODULES[name]) for name in graph if name in MODULES}
    out: dict[tuple[str, str], list[str]] = {}
    for name, edges in graph.items():
        for target, line in edges:
            a, b = _package(name), _package(target)
            if a != b:
                late = " (in a function)" if line in inner.get(name, ()) else ""
                out.setdefault((a, b), []).append(f"{name}:{line}{late}")
    return out


def _components(edges: set[tuple[str, str]]) -> list[set[str]]:
    """Strongly connected components of more than one node of a small graph (reachability both ways)."""
    succ: dict[str, set[str]] = {}
    for a, b in edges:
        succ.setdefault(a, set()).add(b)

    def reach(v: str) -> set[str]:
        seen, todo = {v}, [v]
        while todo:
            for w in succ.get(todo.pop(), ()):
                if w not in seen:
                    seen.add(w)
                    todo.append(w)
        return seen

    nodes = {n for e in edges for n in e}
    reached = {v: reach(v) for v in nodes}
    comps: list[set[str]] = []
    for v in sorted(nodes):
        comp = {w for w in reached[v] if v in reached[w]}
        if len(comp) > 1 and comp not in comps:
            comps.append(comp)
    return comps


def _cycle_edges(edges: set[tuple[str, str]]) -> set[tuple[str, str]]:
    return {(a, b) for comp in _components(edges) for a, b in edges if a in comp and b in comp}


PACKAGE_GRAPH = _package_graph(GRAPH)

# Today's package-level cycle (2026-11-27): one strongly connected set of 12 packages (backends, checkpoints, explorer,
# fit, gke, health, launch, metrics, rehearsal, rewards, trainers, trajectories); KNOWN_CYCLE_EDGES lists the 30 edges
# inside it (87 import sites, 46 of them inside functions, after the day's merges). It may only shrink: a new edge
# inside a cycle (or a new cycle) fails, and an edge that left the cycle must leave this list. The
# one-folder-per-trainer move (issue 43) empties it.
# 2026-11-28, one folder per trainer: health -> metrics, health -> trainers, metrics -> trainers and rehearsal -> trainers
# left the cycle (they ask the layouts through nbtools._trainer_folders); trainers -> checkpoints joined it (below).
# 2026-11-28, explorer left it: the tag segments live in rewards._text and the shared HTML look in nbtools._html, so
# rewards.display imports nothing of the explorer. trainers -> backends left it: the backend chooses what its jobs run
# (Backend.job_trainer: the local backend's rehearsal), and trainers.get takes the backend or asks cfg.runs_on().
# 2026-11-28, checkpoints -> backends left it: merge_in_cluster asks cfg.runs_on() (or the backend it is handed) where
# the merge job goes; with it, and trainers -> backends gone, 15 edges left at once (fit, gke, health, checkpoints and
# trajectories are out of the cycle); backends -> launch left with the job env pieces (backends._env: gib_nccl_env,
# secrets_from_env); rewards -> trainers left: the re-scoring asks the run's trainer through the leaf registry
# (_trainer_folders.job_trainer) and AdvantageRule lives in rewards; rewards -> rehearsal left with the rehearsal task
# (nbtools._rehearsal_task, below both; rehearsal.task re-exports it). No package cycle is left.
KNOWN_CYCLE_EDGES: set[tuple[str, str]] = set()  # none: any package cycle fails

# Imports of a higher layer (2026-11-27). May only shrink, like the cycle edges.
KNOWN_UPWARD: set[tuple[str, str]] = {
    ("nbtools.launch", "nbtools"),  # came with the 2026-11-27 merges (launch._evidence)
    ("nbtools.backends", "nbtools.gke"), ("nbtools.backends", "nbtools.jobs"), ("nbtools.card", "nbtools"),
    ("nbtools.checkpoints", "nbtools.jobs"), ("nbtools.jobs", "nbtools"),
    ("nbtools.trainers", "nbtools"), ("nbtools.trainers", "nbtools.jobs"),
}


def _sites(edges) -> str:
    return "\n  ".join(f"{a} -> {b}: {', '.join(PACKAGE_GRAPH[(a, b)])}" for a, b in sorted(edges))


def test_every_package_has_a_layer():
    packages = {_package(m) for m in MODULES}
    assert packages <= set(LAYER), f"put each new package in PACKAGE_LAYERS: {sorted(packages - set(LAYER))}"
    assert set(LAYER) <= packages, f"PACKAGE_LAYERS names packages that are gone: {sorted(set(LAYER) - packages)}"
    assert sum(len(p) for _, p in PACKAGE_LAYERS) == len(LAYER), "a package in two layers"


def test_no_new_package_cycle_edge():
    """Counting imports inside functions (TYPE_CHECKING-only ones excepted): the package cycle may only shrink."""
    found = _cycle_edges(set(PACKAGE_GRAPH))
    new, gone = found - KNOWN_CYCLE_EDGES, KNOWN_CYCLE_EDGES - found
    assert not new, ("new package-level cycle edges (STYLE rule 17; depend on the lower package only, or move what "
                     "ties them to the package that owns it):\n  " + _sites(new))
    assert not gone, f"these edges no longer close a cycle: remove them from KNOWN_CYCLE_EDGES: {sorted(gone)}"


def test_no_new_upward_package_edge():
    found = {(a, b) for a, b in PACKAGE_GRAPH if LAYER[b] > LAYER[a]}
    new, gone = found - KNOWN_UPWARD, KNOWN_UPWARD - found
    assert not new, ("new imports of a higher layer (order: " + " -> ".join(n for n, _ in PACKAGE_LAYERS) +
                     "):\n  " + _sites(new))
    assert not gone, f"these upward imports are gone: remove them from KNOWN_UPWARD: {sorted(gone)}"


def test_the_package_walk_counts_function_level_imports_and_skips_type_checking_ones():
    src = ("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from nbtools import launch\n"
           "def f():\n    from nbtools import backends\n")
    path = _write(src)
    assert _imports("nbtools.storage", path) == [("nbtools.backends", 5)]
    assert _function_level_lines(path) == {5}
    assert _cycle_edges({("a", "b"), ("b", "c"), ("c", "a"), ("c", "d")}) == {("a", "b"), ("b", "c"), ("c", "a")}
    assert _cycle_edges({("a", "b"), ("b", "c")}) == set()
