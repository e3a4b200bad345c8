"""The notebooks follow STYLE.md: clean (no outputs), a typed `parameters` cell first, short cells that call
nbtools, markdown before every code cell, no secrets. Parsed with `ast`, so a rule broken is a test failed."""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path

import pytest
import yaml

NB_DIR = Path(__file__).resolve().parents[2] / "notebooks"
NOTEBOOKS = sorted(NB_DIR.glob("*.ipynb"))
EXPECTED = [
    "01_provision_gke", "02_ray_cluster", "03_launch_grpo", "04_monitor", "05_trajectories",
    "06_merge_checkpoint", "07_evaluate_compare", "08_rewards", "09_cleanup",
]


def _load(p: Path) -> dict:
    return json.loads(p.read_text())


def _src(cell: dict) -> str:
    s = cell.get("source", "")
    return "".join(s) if isinstance(s, list) else s


def test_the_sequence_is_complete():
    assert [p.stem for p in NOTEBOOKS] == EXPECTED


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_committed_clean(path):
    nb = _load(path)
    for i, cell in enumerate(nb["cells"]):
        if cell["cell_type"] == "code":
            assert cell.get("outputs") == [], f"{path.name} cell {i} has outputs; run `make clean-notebooks`"
            assert cell.get("execution_count") is None, f"{path.name} cell {i} has an execution count"
        for key in ("executionInfo", "colab", "papermill", "execution"):
            assert key not in cell.get("metadata", {}), f"{path.name} cell {i} carries {key} metadata"
    assert "papermill" not in nb["metadata"] and "colab" not in nb["metadata"]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_parameters_cell_first_typed_and_local_by_default(path):
    nb = _load(path)
    code = [c for c in nb["cells"] if c["cell_type"] == "code"]
    params = code[0]
    assert "parameters" in params.get("metadata", {}).get("tags", []), f"{path.name}: first code cell must be tagged `parameters`"
    tree = ast.parse(_src(params))
    names = {}
    for node in tree.body:
        assert isinstance(node, ast.AnnAssign), f"{path.name}: parameters must be annotated assignments (`NAME: type = value  # comment`)"
        names[node.target.id] = ast.literal_eval(node.value)
    # BACKEND and CONFIG are chosen once for all notebooks (settings.yaml beside them); the cell only overrides
    assert names.get("BACKEND") == "" and names.get("CONFIG") == "", f"{path.name}: BACKEND and CONFIG default to '' (the shared settings)"
    shared = yaml.safe_load((path.parent / "settings.yaml").read_text())
    assert shared == {"backend": "local", "experiment": "../experiments/local.yaml"}, "settings.yaml: local by default (what CI executes)"
    assert len(names) <= 6, f"{path.name}: at most a handful of knobs in the parameters cell"
    for line in _src(params).splitlines():
        assert "#" in line, f"{path.name}: every parameter needs a trailing comment: {line!r}"
    assert "cfg = nbtools.config.load(CONFIG, backend=BACKEND)" in _src(code[1]), f"{path.name}: second code cell must load the config"


def _body_lines(node: ast.AST) -> int:
    return max(getattr(n, "end_lineno", 0) for n in ast.walk(node)) - node.lineno


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_cells_call_the_library_work(path):
    nb = _load(path)
    for i, cell in enumerate(nb["cells"]):
        if cell["cell_type"] != "code":
            continue
        src = _src(cell)
        if "parameters" in cell.get("metadata", {}).get("tags", []):
            continue  # its own rules: test_parameters_cell_first_typed_and_local_by_default
        assert not re.search(r"^\s*[!%]", src, re.M), f"{path.name} cell {i}: no shell escapes or magics; call nbtools"
        tree = ast.parse(src)
        stmts = [n for n in tree.body if not isinstance(n, (ast.Import, ast.ImportFrom))]
        assert len(stmts) <= 3, f"{path.name} cell {i}: {len(stmts)} statements (max 3) — move logic into nbtools:\n{src}"
        for node in ast.walk(tree):
            assert not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)) or (
                isinstance(node, ast.FunctionDef) and path.stem == "08_rewards"
            ), f"{path.name} cell {i}: no def/class/lambda in notebooks (08_rewards may define one reward function)"
            if isinstance(node, (ast.For, ast.While, ast.With)):
                assert _body_lines(node) <= 2, f"{path.name} cell {i}: loop/with bodies at most two lines"
            if isinstance(node, ast.Await):
                raise AssertionError(f"{path.name} cell {i}: no await in notebooks; nbtools is sync")


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_narrative_shape(path):
    nb = _load(path)
    cells = nb["cells"]
    first = _src(cells[0])
    assert cells[0]["cell_type"] == "markdown" and first.startswith("# "), f"{path.name}: starts with an H1 title"
    assert re.search(r"^> ", first, re.M), f"{path.name}: one-line blockquote subtitle under the title"
    assert "What must exist first" in first and "What you will do" in first
    for i, cell in enumerate(cells[1:], start=1):
        if cell["cell_type"] == "code":
            assert cells[i - 1]["cell_type"] == "markdown", f"{path.name} cell {i}: markdown before each code cell"
    last = _src(cells[-1])
    assert cells[-1]["cell_type"] == "markdown" and "Where the outputs went" in last


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_no_secrets_in_notebooks(path):
    text = path.read_text()
    assert not re.search(r"hf_[A-Za-z0-9]{20,}", text), f"{path.name} contains what looks like a HF token"
    assert not re.search(r"(?i)(token|api_key|password)\s*=\s*['\"][^'\"]{8,}", text), f"{path.name} assigns a secret literal"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_kernelspec_is_the_installed_one_so_an_executed_copy_opens_unmodified(path):
    """Issue 45: the notebooks named their kernel "Python 3"; ipykernel's kernelspec says "Python 3 (ipykernel)", so
    JupyterLab rewrote it on opening and every executed copy opened already modified."""
    from ipykernel.kernelspec import get_kernel_dict

    spec = _load(path)["metadata"]["kernelspec"]
    assert spec == {"display_name": get_kernel_dict()["display_name"], "language": "python", "name": "python3"}
