"""Plan validation with and without gcloud: the flag table shipped in the package covers every plan variant, is what
tools/gen_gcloud_flags.py reads from the installed gcloud, and is used (and named) when there is no gcloud on PATH."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
from pathlib import Path

import pandas as pd
import pytest

import nbtools
from nbtools.errors import DependencyError
from nbtools.gke import _flags

ROOT = Path(__file__).resolve().parents[2]


def _generator():
    spec = importlib.util.spec_from_file_location("gen_gcloud_flags", ROOT / "tools" / "gen_gcloud_flags.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


GEN = _generator()
SLOW_FIXTURES = ("plans",)  # plans every experiment variant (tests/conftest.py marks its readers slow)
TABLE = _flags.shipped_table()
STALE = f"the shipped gcloud flag table is stale: run `{_flags.REGENERATE}` (one command; needs gcloud on PATH) and commit it"


@pytest.fixture(scope="module")
def plans(tmp_path_factory) -> dict[str, list]:
    """{variant: [provision plan, destroy plan(s)]} for every config variant the generator knows (with a bucket, also
    the teardown that deletes it with its contents)."""
    old = os.environ.get("NBTOOLS_RUNS_DIR")
    os.environ["NBTOOLS_RUNS_DIR"] = str(tmp_path_factory.mktemp("runs"))
    try:
        return {name: [nbtools.gke.plan(cfg), nbtools.gke.destroy_plan(cfg)]
                + ([nbtools.gke.destroy_plan(cfg, delete_bucket=cfg.storage.bucket)] if cfg.storage.bucket else [])
                for name, cfg in GEN.plan_variants().items()}
    finally:
        if old is None:
            os.environ.pop("NBTOOLS_RUNS_DIR", None)
        else:
            os.environ["NBTOOLS_RUNS_DIR"] = old


@pytest.fixture
def no_gcloud(tmp_path, monkeypatch) -> None:
    """PATH without gcloud (an empty directory: gcloud, kubectl and helm all absent)."""
    empty = tmp_path / "empty-path"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    assert shutil.which("gcloud") is None


def _fake_gcloud(root: Path, version: str, flags: list[str]) -> Path:
    """A Cloud SDK layout (bin/gcloud + VERSION) whose `gcloud ... --help` names ``flags``."""
    (root / "bin").mkdir(parents=True)
    (root / "VERSION").write_text(version + "\n")
    exe = root / "bin" / "gcloud"
    exe.write_text("#!/bin/sh\ncase \"$*\" in *--help*) echo 'FLAGS' " + " ".join(f"'--{f}'" for f in flags)
                   + " ;; *) exit 2 ;; esac\n")
    exe.chmod(0o755)
    return exe


def test_variants_span_the_config_axes(plans):
    assert len(plans) == len(GEN.gke_experiments()) * 2 * 2 * 3 * 2 * 2  # experiments x mode x kuberay x provisioning x storage x GSA
    assert len(GEN.gke_experiments()) >= 3 and any("verl" in f.name for f in GEN.gke_experiments())
    first = {s.command[:4] for ps in plans.values() for p in ps for s in p.steps if s.command[0] == "gcloud"}
    assert ("gcloud", "container", "clusters", "create-auto") in first and ("gcloud", "container", "clusters", "create") in first
    helm = [n for n, (p, *_) in plans.items() if "kuberay-operator" in [s.name for s in p.steps]]
    assert len(helm) == len(plans) // 2


def test_the_table_covers_every_command_path_of_every_plan_variant(plans):
    argvs = [a for ps in plans.values() for p in ps for a in p.argvs()]
    used = set(GEN.command_paths(argvs))
    assert {"container clusters create-auto", "iam service-accounts add-iam-policy-binding", "projects describe",
            "storage buckets remove-iam-policy-binding"} <= used
    missing = sorted(used - set(TABLE.commands))
    assert not missing, f"command paths the plans use but {TABLE.file} lacks: {missing}; {STALE}"


def test_without_gcloud_every_plan_variant_validates_against_the_table(plans, no_gcloud):
    for name, ps in plans.items():
        for p in ps:
            report = p.validate()
            assert report.attrs["source"] == f"shipped table (gcloud {TABLE.gcloud_version})"
            assert set(report["source"]) == {report.attrs["source"]}
            bad = report[~report.ok]
            assert bad.empty, f"{name} {p.kind}: flags the shipped table does not know:\n{bad.to_string()}\n{STALE}"
    assert len(next(iter(plans.values()))[0].validate()) > 50, "a standard plan checks more than 50 flags"


def test_without_gcloud_an_unknown_flag_or_command_is_not_ok_and_names_the_fix(no_gcloud):
    report = nbtools.gke.validate_flags([
        ("gcloud", "container", "clusters", "create", "x", "--enable-magic", "--num-nodes=1"),
        ("gcloud", "compute", "networks", "subnets", "create", "s", "--location=us-central1"),  # only --region there
        ("gcloud", "compute", "routers", "create", "r", "--network=n"),  # no plan uses it: not in the table
        ("kubectl", "get", "pods", "--no-such-flag"),  # not gcloud: not checked
    ])
    by_flag = report.set_index("flag")
    assert by_flag["ok"].to_dict() == {"--enable-magic": False, "--num-nodes": True, "--location": False, "--network": False}
    assert "--enable-magic is not a flag of " + TABLE.file in by_flag.loc["--enable-magic", "message"]
    router = by_flag.loc["--network"]
    assert not router["known_command"]
    assert "`gcloud compute routers create` is not in " + TABLE.file in router["message"]
    assert _flags.REGENERATE in router["message"]
    assert by_flag.loc["--num-nodes", "message"] == ""


def test_forcing_the_installed_gcloud_without_one_names_the_fix(no_gcloud):
    with pytest.raises(DependencyError, match=r"fix: install the Google Cloud CLI .* source='table'"):
        nbtools.gke.validate_flags([("gcloud", "projects", "describe", "p")], source="gcloud")
    assert nbtools.gke.validate_flags([("gcloud", "projects", "describe", "p", "--format=json")]).ok.all()


def test_an_installed_gcloud_is_preferred_and_named(tmp_path, monkeypatch):
    exe = _fake_gcloud(tmp_path / "sdk", "999.1.0", ["project", "only-here"])
    monkeypatch.setenv("PATH", str(exe.parent))
    monkeypatch.setenv("NBTOOLS_CACHE_DIR", str(tmp_path / "cache"))
    argvs = [("gcloud", "projects", "describe", "p", "--project=x", "--only-here", "--format=json")]
    report = nbtools.gke.validate_flags(argvs)
    assert report.attrs["source"] == f"gcloud 999.1.0 at {exe}"
    assert report.set_index("flag")["ok"].to_dict() == {"--project": True, "--only-here": True, "--format": False}
    assert "`gcloud projects describe --help` of gcloud 999.1.0" in report.set_index("flag").loc["--format", "message"]
    table = nbtools.gke.validate_flags(argvs, source="table")
    assert table.attrs["source"].startswith("shipped table") and table.set_index("flag")["ok"].to_dict() == {
        "--project": True, "--only-here": False, "--format": True}


def test_the_table_is_what_the_installed_gcloud_says(plans):
    """The one test that reads a real gcloud when there is one. Without it, the README must name the table's version
    (the statement a reader checks against their own `gcloud version`)."""
    readme = (ROOT / "README.md").read_text()
    assert f"gcloud {TABLE.gcloud_version}" in readme and TABLE.file in readme, (
        f"README.md must say the shipped table is for gcloud {TABLE.gcloud_version} ({TABLE.file})")
    data = json.loads((ROOT / TABLE.file).read_text())
    assert data["gcloud_version"] == TABLE.gcloud_version and Path(TABLE.file).name == f"gcloud_flags_{TABLE.gcloud_version}.json"
    exe = shutil.which("gcloud")
    if exe is None:
        return
    argvs = [a for ps in plans.values() for p in ps for a in p.argvs()]
    version = GEN.gcloud_version(exe)
    if version == TABLE.gcloud_version:
        name, text = GEN.generate(exe, GEN.command_paths(argvs))
        assert (ROOT / "nbtools" / "data" / name).read_text() == text, STALE
    else:  # a different gcloud here: no table to compare with, but every plan flag must exist in it too
        bad = nbtools.gke.validate_flags(argvs, source="gcloud").query("not ok")
        assert bad.empty, f"gcloud {version} at {exe} lacks flags the plans use:\n{bad.to_string()}"


def test_report_columns_and_empty_input():
    empty = nbtools.gke.validate_flags([("kubectl", "get", "pods")])
    assert list(empty.columns) == _flags.COLUMNS and empty.empty and empty.attrs["source"]
    assert isinstance(empty, pd.DataFrame)
