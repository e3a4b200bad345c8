"""The repository works in any clone on any machine: no file names a path of the machine it was written on, the
package and its tests read nothing outside the repository, test fixtures say where they come from, and nothing
tells anyone to ``pip install`` the unrelated PyPI project that owns the name ``nbtools``."""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from repo_tools import load_tool

ROOT = Path(__file__).resolve().parent.parent
ASSETS = ROOT / "tests" / "assets"
DISTRIBUTION = "nbtools-grpo"  # the PyPI name; the import name and the console script stay `nbtools`

# Built from pieces so that this file does not match its own patterns.
_SLASH = "/"
_MACHINE_ROOTS = ["work", "root", "Users"]
# /home/<user>/ is a person's home; /home/kubernetes/ is the GKE node directory the NCCL plugin lives in.
_NOT_A_USER = ["kubernetes"]
MACHINE_PATH = re.compile(
    r"(?<![\w.~-])" + _SLASH + "(?:" + "|".join(_MACHINE_ROOTS) + ")" + _SLASH
    + r"|(?<![\w.~-])" + _SLASH + "home" + _SLASH + r"(?!(?:" + "|".join(_NOT_A_USER) + r")/)[\w.-]+" + _SLASH
)
_SHARED = "shared"
SHARED_REF = re.compile(r"\.\./" + _SHARED + r"\b|/" + _SHARED + r"/(?:data|reference)\b")
SHARED_SCOPE = ("nbtools/", "tests/", "notebooks/", "tools/")

_NAME = "nb" + "tools"
# pip/uv installing the bare name (any flags, extras or version pin), or a runtime_env whose "pip" list names it
PIP_INSTALL = re.compile(
    r"pip3?\s+install\s+(?:-{1,2}[\w-]+(?:[= ]\S+)?\s+)*[\"']?" + _NAME + r"(?![\w-])"
    + r"|[\"']pip[\"']\s*:\s*\[[^\]]*[\"']" + _NAME + r"(?![\w-])"
)


def _repo_files() -> list[str]:
    """Tracked files plus new ones git does not ignore (so a file is checked before its first commit)."""
    try:
        out = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                             capture_output=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):  # an unpacked sdist: walk it, skipping what .gitignore names
        skip = {".venv", "runs", "__pycache__", ".pytest_cache", ".ipynb_checkpoints", ".git"}
        return [p.relative_to(ROOT).as_posix() for p in ROOT.rglob("*")
                if p.is_file() and not skip & set(p.relative_to(ROOT).parts) and not p.name.endswith(".egg-info")]
    return sorted({f for f in out.decode().split("\0") if f and (ROOT / f).is_file()})


@pytest.fixture(scope="module")
def texts() -> dict[str, str]:
    return {f: (ROOT / f).read_bytes().decode("utf-8", errors="replace") for f in _repo_files()}


def _hits(texts: dict[str, str], pattern: re.Pattern, scope: tuple[str, ...] = ("",)) -> list[str]:
    return [f"{f}:{t.count(chr(10), 0, m.start()) + 1}: {t[max(0, m.start() - 30):m.end() + 30]!r}"
            for f, t in texts.items() if f.startswith(scope) for m in pattern.finditer(t)]


def test_the_patterns_catch_what_they_are_for():
    for bad in ["/" + "work/main/runs", "x = '/" + "root/.cache'", "/" + "home/alice/src", "cd /" + "Users/bob/x"]:
        assert MACHINE_PATH.search(bad), bad
    for fine in ["/" + "home/kubernetes/bin/gib", "/data/ckpt", "/workspace/x", "~/" + "work/", "a/" + "root/b"]:
        assert not MACHINE_PATH.search(fine), fine
    for bad in ["../" + "shared/DESIGN.md", "/x/" + "shared/data/kuberay", "/" + "shared/reference/t"]:
        assert SHARED_REF.search(bad), bad
    assert not SHARED_REF.search("on the shared mount /data")
    for bad in ["pip install " + _NAME, "pip install -U '" + _NAME + "[gke]'", "uv pip install " + _NAME + "==0.1",
                'runtime_env={"pip": ["' + _NAME + '"]}']:
        assert PIP_INSTALL.search(bad), bad
    for fine in ["pip install -e .", "pip install " + DISTRIBUTION, "pip install 'ray[default]'", '{"pip": ["torch"]}']:
        assert not PIP_INSTALL.search(fine), fine


def test_no_absolute_path_of_a_machine(texts):
    assert len(texts) > 50, "git ls-files found almost nothing: is this the repository root?"
    hits = _hits(texts, MACHINE_PATH)
    assert not hits, "absolute paths of a machine (use paths relative to the file or the config):\n" + "\n".join(hits)


def test_nothing_refers_to_the_shared_folder(texts):
    hits = _hits(texts, SHARED_REF, SHARED_SCOPE)
    assert not hits, ("references to the shared folder beside the checkout; copy what is needed to tests/assets/ "
                      "with a SOURCE.md:\n" + "\n".join(hits))


def _source_note(p: Path) -> Path | None:
    """The SOURCE.md of the fixture ``p``: in its folder or a parent folder below tests/assets."""
    for d in p.parents:
        if d == ASSETS:
            return None
        if (d / "SOURCE.md").is_file():
            return d / "SOURCE.md"
    return None


def test_every_fixture_names_its_source():
    files = [p for p in ASSETS.rglob("*") if p.is_file() and p.name != "SOURCE.md"]
    assert files, "tests/assets is empty"
    loose = [p.name for p in files if p.parent == ASSETS and not p.name.startswith("LICENSE-")]
    assert not loose, f"tests/assets/ holds only licence texts; put {loose} in a folder with a SOURCE.md"
    missing = [p.relative_to(ASSETS).as_posix() for p in files if p.parent != ASSETS and _source_note(p) is None]
    assert not missing, f"fixtures without a SOURCE.md in their folder or a parent below tests/assets: {missing}"
    for note in ASSETS.rglob("SOURCE.md"):
        text = note.read_text().lower()
        for word in ("licen", "https://", "version" if "tutorials" not in note.relative_to(ASSETS).parts else "source"):
            assert word in text, f"{note.relative_to(ROOT)} does not state its {word} (project, version, licence, URL)"


def test_pip_install_nbtools_is_recommended_nowhere(texts):
    hits = _hits(texts, PIP_INSTALL)
    assert not hits, (f"`pip install {_NAME}` installs an unrelated PyPI project; say `make install` / `pip install -e .` "
                      f"from a clone, and ship nbtools to Ray jobs through runtime_env py_modules:\n" + "\n".join(hits))


def test_the_distribution_is_not_called_nbtools():
    project = re.search(r"^\[project\]\s*$(.*?)^\[", (ROOT / "pyproject.toml").read_text(), re.M | re.S).group(1)
    assert re.search(r'^name\s*=\s*"' + re.escape(DISTRIBUTION) + '"\\s*$', project, re.M), project[:200]
    dist = importlib.metadata.distribution(DISTRIBUTION)  # what `make install` / `pip install -e .` installed
    assert DISTRIBUTION in importlib.metadata.packages_distributions().get("nbtools", [])
    assert [e.value for e in dist.entry_points if e.group == "console_scripts" and e.name == "nbtools"] == ["nbtools.cli:main"]
    readme = (ROOT / "README.md").read_text()
    assert "pip install -e ." in readme and DISTRIBUTION in readme, "the README says how to install from a clone"


def test_path_without_drops_only_the_named_commands(tmp_path):
    first, second = tmp_path / "first", tmp_path / "second"
    for d, names in ((first, ["gcloud", "tool", "data.txt"]), (second, ["kubectl", "helm", "tool", "other"])):
        d.mkdir()
        for n in names:
            (d / n).write_text("#!/bin/sh\n")
            (d / n).chmod(0o644 if n.endswith(".txt") else 0o755)
    out = load_tool("path_without").build(tmp_path / "out", {"gcloud", "kubectl", "helm"}, path=f"{first}:{second}:/nonexistent")
    assert sorted(p.name for p in out.iterdir()) == ["other", "tool"]
    assert os.readlink(out / "tool") == str(first / "tool"), "the first match on PATH wins, as in the shell"
    assert shutil.which("gcloud", path=str(out)) is None and shutil.which("other", path=str(out))


def test_make_test_runs_every_test_the_notebooks_included():
    r = subprocess.run(["make", "-n", "test"], cwd=ROOT, capture_output=True, text=True, check=True,
                       env={**os.environ, "NBTOOLS_RUNS_DIR": "RUNS"})
    script = r.stdout
    run = re.search(r"python -m pytest tests (.*)", script)
    assert run, script
    assert not re.search(r"(^|\s)(-m|-k|--ignore|--deselect)(\s|=)", run.group(1)), f"make test must deselect nothing: {run.group(0)}"
    assert re.search(r"(^|\s)notebooks(\s|$)", run.group(1)) and "--nbmake" in run.group(1), (
        f"make test must run the committed notebooks through nbmake, as a user's CI does: {run.group(0)}")


def test_ruff_finds_nothing():
    """`make lint` in the test run: a method defined twice in one class (F811) once broke GKE's status() unseen."""
    ruff = shutil.which("ruff", path=str(Path(sys.executable).parent)) or shutil.which("ruff")
    assert ruff, "ruff is in the [test] extra: make install"
    r = subprocess.run([ruff, "check", "--no-cache", "nbtools", "tests", "benchmarks"], cwd=ROOT, capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-2000:]


def _broad_stops(path: Path, root: Path = ROOT) -> list[str]:
    """``stop_jobs`` calls of a test module that shares the session's Ray head whose prefix is a literal (or absent:
    an experiment's ``<name>-``), not one run's ``cfg.submission_id``."""
    import ast

    text = path.read_text()
    if "ray_head" not in text and "ray_cfg" not in text:
        return []
    bad = []
    for node in ast.walk(ast.parse(text, str(path))):
        if isinstance(node, ast.Call) and getattr(node.func, "attr", getattr(node.func, "id", None)) == "stop_jobs":
            prefix = next((k.value for k in node.keywords if k.arg == "prefix"), None)
            if prefix is None or isinstance(prefix, ast.Constant | ast.JoinedStr):
                bad.append(f"{path.relative_to(root)}:{node.lineno}")
    return bad


def test_no_test_on_the_shared_ray_head_stops_jobs_by_a_broad_prefix(tmp_path):
    """The xdist workers share one session Ray head: a teardown that stops every ``local-rehearsal-`` (or ``stall-``)
    job stops another module's run mid-test (CI failed so). A test stops only the submission ids it made."""
    found = [b for p in sorted((ROOT / "tests").rglob("test_*.py")) for b in _broad_stops(p)]
    assert not found, "stop only your own run: prefix=cfg.submission_id, at " + ", ".join(found)
    old = tmp_path / "test_old.py"  # the teardown CI failed on is caught
    old.write_text("def test_x(ray_cfg):\n    nbtools.jobs.stop_jobs(url, prefix='local-rehearsal-')\n")
    mine = tmp_path / "test_mine.py"
    mine.write_text("def test_x(ray_cfg):\n    nbtools.jobs.stop_jobs(url, prefix=cfg.submission_id)\n")
    assert _broad_stops(old, tmp_path) == ["test_old.py:2"] and _broad_stops(mine, tmp_path) == []
