"""Regenerate ``nbtools/data/gcloud_flags_<gcloud version>.json`` from the installed gcloud.

Plan validation (``nbtools.gke.validate``) asks the installed gcloud when there is one and this table otherwise, so
the local demo and CI check every plan without the Google Cloud CLI. The table holds, for every gcloud command path
that any provisioning or destroy plan uses, every flag that ``gcloud <path> --help`` names. The paths come from
plans built over config variants of every GKE experiment in ``experiments/`` (standard/autopilot, addon/helm,
spot/reservation/on-demand, gcsfuse/lustre, with and without a Google service account). A plan that gains a flag
or a command needs one run of this script. ``tests/gke/test_gcloud_flags.py`` checks the table covers every variant and,
where gcloud is installed, equals what this script produces.

Usage:
    .venv/bin/python tools/gen_gcloud_flags.py            # write the table for the gcloud on PATH
    .venv/bin/python tools/gen_gcloud_flags.py --check    # exit 1 if the committed table differs
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import shutil
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import nbtools  # noqa: E402
from nbtools.errors import ConfigError  # noqa: E402
from nbtools.gke import _flags  # noqa: E402

OUT_DIR = ROOT / "nbtools" / "data"
AXES = {
    "cluster.mode": ["standard", "autopilot"],
    "cluster.kuberay": ["addon", "helm"],
    "cluster.provisioning": ["spot", "reservation", "on-demand"],
    "storage.kind": ["gcsfuse", "lustre"],
    "gcp.service_account": [None, "ray@my-gcp-project.iam.gserviceaccount.com"],
}
# values a variant needs to be a valid config (a reservation name, a Lustre instance)
_NEEDS = {
    ("cluster.provisioning", "reservation"): {"cluster.reservation": "my-reservation"},
    ("storage.kind", "lustre"): {"storage.lustre": {"instance": "lfs", "ip": "10.1.2.3"}},
}


def gke_experiments() -> list[Path]:
    """The experiment files that describe a GKE cluster (a GCP project is set)."""
    out = []
    for f in sorted((ROOT / "experiments").glob("*.yaml")):
        try:
            cfg = nbtools.config.load(f, backend="gke")
        except ConfigError:
            continue
        if cfg.gcp.project:
            out.append(f)
    return out


def plan_variants() -> dict[str, object]:
    """{"<file>:<axis values>": config} for every combination of ``AXES`` over every GKE experiment."""
    variants = {}
    for f in gke_experiments():
        base = nbtools.config.load(f, backend="gke")
        for values in itertools.product(*AXES.values()):
            changes: dict = {}
            for key, value in zip(AXES, values, strict=True):
                changes[key] = value
                changes.update(_NEEDS.get((key, value), {}))
            name = f"{f.stem}:" + ",".join(str(v).split("@")[0] for v in values)
            variants[name] = base.replace(**changes)
    return variants


def plan_argvs(variants: dict[str, object] | None = None) -> list[tuple[str, ...]]:
    """Every argv of the provision and destroy plans of every variant (plans are built, never applied)."""
    argvs: list[tuple[str, ...]] = []
    old = os.environ.get("NBTOOLS_RUNS_DIR")
    with tempfile.TemporaryDirectory(prefix="gen-gcloud-flags-") as runs:
        os.environ["NBTOOLS_RUNS_DIR"] = runs  # a plan's state path lives under it; nothing is written
        try:
            for cfg in (variants or plan_variants()).values():
                argvs += nbtools.gke.plan(cfg).argvs() + nbtools.gke.destroy_plan(cfg).argvs()
                if cfg.storage.bucket:  # the teardown that deletes the bucket with its contents, when named
                    argvs += nbtools.gke.destroy_plan(cfg, delete_bucket=cfg.storage.bucket).argvs()
        finally:
            if old is None:
                os.environ.pop("NBTOOLS_RUNS_DIR", None)
            else:
                os.environ["NBTOOLS_RUNS_DIR"] = old
    return argvs


def command_paths(argvs: list[tuple[str, ...]] | None = None) -> list[str]:
    """The gcloud command paths (e.g. "container clusters create") the plans use, sorted."""
    return sorted({" ".join(_flags.gcloud_path(a)) for a in (argvs or plan_argvs()) if a and a[0] == "gcloud"})


def gcloud_version(exe: str) -> str:
    """The Cloud SDK version as ``gcloud version --format=json`` reports it."""
    r = subprocess.run([exe, "version", "--format=json"], capture_output=True, text=True, check=True,
                       env={**os.environ, "CLOUDSDK_CORE_DISABLE_PROMPTS": "1"})
    return str(json.loads(r.stdout)["Google Cloud SDK"])


def generate(exe: str | None = None, paths: list[str] | None = None) -> tuple[str, str]:
    """(file name, JSON text) of the table for the gcloud at ``exe`` (default: the one on PATH).

    ``paths`` defaults to ``command_paths()`` (every plan variant's); help texts are read 4 at a time (~2 s each).
    """
    exe = exe or shutil.which("gcloud")
    if exe is None:
        raise SystemExit("no gcloud on PATH: install the Google Cloud CLI (https://cloud.google.com/sdk/docs/install)")
    gc = _flags.InstalledGcloud(exe, gcloud_version(exe))
    paths = paths if paths is not None else command_paths()
    with ThreadPoolExecutor(max_workers=4) as pool:
        found = dict(zip(paths, pool.map(lambda cmd: _flags._installed_flags(gc, tuple(cmd.split())), paths), strict=True))
    commands = {}
    for cmd, flags in sorted(found.items()):
        if flags is None:
            raise SystemExit(f"`gcloud {cmd} --help` failed with gcloud {gc.version}: the plans use a command it lacks")
        commands[cmd] = sorted(flags)
    data = {"gcloud_version": gc.version, "generated_by": "tools/gen_gcloud_flags.py", "commands": commands}
    return f"gcloud_flags_{gc.version}.json", json.dumps(data, indent=1, sort_keys=True) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="exit 1 if the committed table differs")
    ap.add_argument("--gcloud", help="the gcloud executable to read (default: the one on PATH)")
    args = ap.parse_args(argv)
    name, text = generate(args.gcloud)
    target = OUT_DIR / name
    if args.check:
        stale = not target.is_file() or target.read_text() != text
        print(f"stale: {target.relative_to(ROOT)}" if stale else "up to date")
        return 1 if stale else 0
    tmp = target.with_name(name + ".tmp")
    tmp.write_text(text)
    tmp.replace(target)
    others = sorted(p.name for p in OUT_DIR.glob(_flags.TABLE_GLOB) if p.name != name)
    print(f"wrote {target.relative_to(ROOT)} ({len(json.loads(text)['commands'])} command paths, {len(text)} bytes)")
    if others:
        print(f"older tables still in nbtools/data: {', '.join(others)} (the newest version is used; git rm the rest)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
