"""Check every flag of every gcloud command in a plan: against the installed gcloud's ``--help`` when there is one,
else against the flag table shipped in the package (``nbtools/data/gcloud_flags_<version>.json``).

The table is what ``tools/gen_gcloud_flags.py`` read from a named gcloud for every command path any plan uses, so a
machine without the Google Cloud CLI (a laptop running the local demo, CI) still checks the plan; the report always
says which of the two it used.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import re
import shutil
import subprocess
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Literal

import pandas as pd

from nbtools import _atomic
from nbtools.errors import DependencyError, Fix

__all__ = ["gcloud_path", "gcloud_flags", "validate_flags", "installed_gcloud", "shipped_table", "REGENERATE",
           "FlagTable"]

REGENERATE = ".venv/bin/python tools/gen_gcloud_flags.py"  # run in a clone, with the gcloud to record on PATH
TABLE_GLOB = "gcloud_flags_*.json"
COLUMNS = ["command", "flag", "ok", "known_command", "source", "message"]

_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_FLAG = re.compile(r"--(\[no-\])?([a-z][a-z0-9-]*)")
# gcloud leaf verbs used by the plans; the command path ends at the first of these
_VERBS = {
    "create", "create-auto", "describe", "delete", "enable", "list", "get-credentials", "add-iam-policy-binding",
    "remove-iam-policy-binding", "get-iam-policy", "rm", "rsync", "cat",
}


def gcloud_path(argv: tuple[str, ...] | list[str]) -> tuple[str, ...]:
    """The command path of a gcloud argv: ('container', 'clusters', 'create') for `gcloud container clusters create X`."""
    path = []
    for tok in argv[1:]:
        if tok.startswith("-"):
            break
        path.append(tok)
        if tok in _VERBS:
            break
    return tuple(path)


# -- the installed gcloud ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class InstalledGcloud:
    """The gcloud on PATH: its executable and the Cloud SDK version it reports."""

    exe: str
    version: str

    @property
    def source(self) -> str:
        return f"gcloud {self.version} at {self.exe}"


def _sdk_version(exe: str) -> str:
    """The Cloud SDK version: its ``VERSION`` file (instant), else ``gcloud version --format=json`` (~2 s)."""
    try:
        return (Path(os.path.realpath(exe)).parent.parent / "VERSION").read_text().strip()
    except OSError:
        pass
    r = subprocess.run([exe, "version", "--format=json"], capture_output=True, text=True, check=False,
                       env={**os.environ, "CLOUDSDK_CORE_DISABLE_PROMPTS": "1"})
    try:
        return str(json.loads(r.stdout)["Google Cloud SDK"])
    except (ValueError, KeyError, TypeError):
        return "unknown"


def installed_gcloud() -> InstalledGcloud | None:
    """The gcloud on PATH and its version, or None when there is none.

    Example:
        >>> nbtools.gke._flags.installed_gcloud()
        InstalledGcloud(exe='/usr/bin/gcloud', version='528.0.0')
    """
    exe = shutil.which("gcloud")
    return None if exe is None else InstalledGcloud(exe, _cached_version(exe))


@functools.cache
def _cached_version(exe: str) -> str:
    return _sdk_version(exe)


def _cache_file(exe: str, version: str, path: tuple[str, ...]) -> Path:
    """Help text cache keyed by the gcloud installation, its version and the command path."""
    root = Path(os.path.realpath(exe)).parent.parent
    key = hashlib.sha256(f"{root}|{version}|{' '.join(path)}".encode()).hexdigest()[:24]
    base = Path(os.environ.get("NBTOOLS_CACHE_DIR") or Path.home() / ".cache" / "nbtools")
    return base / "gcloud-help" / version / f"{key}.txt"


def _help_text(gc: InstalledGcloud, path: tuple[str, ...]) -> str | None:
    cache = _cache_file(gc.exe, gc.version, path)
    if cache.exists():
        return cache.read_text()
    env = {**os.environ, "CLOUDSDK_CORE_DISABLE_PROMPTS": "1"}
    r = subprocess.run([gc.exe, *path, "--help"], capture_output=True, text=True, check=False, env=env)
    if r.returncode != 0:
        return None
    text = _ANSI.sub("", r.stdout)
    try:
        _atomic.write_text(cache, text)
    except OSError:  # a read-only home only costs speed
        pass
    return text


@functools.cache
def _installed_flags(gc: InstalledGcloud, path: tuple[str, ...]) -> frozenset[str] | None:
    text = _help_text(gc, path)
    if text is None:
        return None
    flags: set[str] = set()
    for neg, name in _FLAG.findall(text):
        flags.add(name)
        if neg:
            flags.add("no-" + name)
    return frozenset(flags)


def gcloud_flags(path: tuple[str, ...]) -> frozenset[str]:
    """Every ``--flag`` named in the installed ``gcloud <path> --help`` (gcloud-wide flags and ``--no-`` forms too).

    The help text is cached on disk per gcloud version (``~/.cache/nbtools/gcloud-help``; ``NBTOOLS_CACHE_DIR``).
    Empty when ``path`` is not a gcloud command.

    Raises:
        DependencyError: no gcloud on PATH (``validate_flags`` then uses the shipped table instead).

    Example:
        >>> "spot" in nbtools.gke.gcloud_flags(("container", "node-pools", "create"))
        True
    """
    gc = installed_gcloud()
    if gc is None:
        raise DependencyError(
            "reading gcloud's own help needs the gcloud CLI, which is not on PATH",
            fix=Fix("install the Google Cloud CLI (https://cloud.google.com/sdk/docs/install), or validate against the "
                    "shipped table: nbtools.gke.validate_flags(argvs, source='table')",
                    cli="install the Google Cloud CLI (https://cloud.google.com/sdk/docs/install)"),
        )
    return _installed_flags(gc, tuple(path)) or frozenset()


# -- the shipped table -------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class FlagTable:
    """A ``gcloud_flags_<version>.json`` of the package: the flags of each command path of one gcloud version."""

    gcloud_version: str
    file: str
    commands: dict[str, frozenset[str]]

    @property
    def source(self) -> str:
        return f"shipped table (gcloud {self.gcloud_version})"


def _version_key(name: str) -> tuple[int, ...]:
    return tuple(int(x) for x in re.findall(r"\d+", name))


@functools.cache
def shipped_table() -> FlagTable:
    """The newest flag table in ``nbtools/data`` (one per recorded gcloud version).

    Example:
        >>> nbtools.gke._flags.shipped_table().gcloud_version
        '528.0.0'
    """
    data_dir = resources.files("nbtools") / "data"
    files = sorted((f for f in data_dir.iterdir() if re.fullmatch(r"gcloud_flags_[\d.]+\.json", f.name)),
                   key=lambda f: _version_key(f.name))
    if not files:
        raise DependencyError(
            "the package carries no gcloud flag table (nbtools/data/gcloud_flags_<version>.json) and gcloud is not on PATH",
            fix=f"reinstall nbtools from a clone (`make install`), or regenerate the table: `{REGENERATE}`",
        )
    data = json.loads(files[-1].read_text())
    return FlagTable(str(data["gcloud_version"]), f"nbtools/data/{files[-1].name}",
                     {cmd: frozenset(flags) for cmd, flags in data["commands"].items()})


# -- validation --------------------------------------------------------------------------------------------------


def validate_flags(argvs: list[tuple[str, ...]], *, source: Literal["auto", "gcloud", "table"] = "auto") -> pd.DataFrame:
    """One row per (gcloud command, flag): does gcloud know that flag for that command?

    Args:
        argvs: argv tuples; those that do not start with ``gcloud`` are ignored.
        source: "auto" (default) asks the installed gcloud when one is on PATH, else reads the shipped table;
            "gcloud" or "table" forces one.

    Returns:
        DataFrame with command, flag, ok, known_command, source, message (why a row is not ok);
        ``df.attrs["source"]`` says what was asked, e.g. "gcloud 528.0.0 at /usr/bin/gcloud" or
        "shipped table (gcloud 528.0.0)".

    Example:
        >>> report = nbtools.gke.plan(cfg).validate()
        >>> report.attrs["source"], report[~report.ok]   # the second is empty when every flag exists
    """
    gc = installed_gcloud() if source in ("auto", "gcloud") else None
    if source == "gcloud" and gc is None:
        gcloud_flags(())  # raises the DependencyError that names the fix
    cmds = [tuple(a) for a in argvs if a and a[0] == "gcloud"]
    paths = sorted({gcloud_path(a) for a in cmds})
    if gc is not None:
        with ThreadPoolExecutor(max_workers=4) as pool:
            known = dict(zip(paths, pool.map(lambda p: _installed_flags(gc, p), paths), strict=True))
        label, where = gc.source, f"`gcloud {{cmd}} --help` of gcloud {gc.version}"
        missing = "`gcloud {cmd} --help` failed: not a command of gcloud " + gc.version
    else:
        table = shipped_table()
        known = {p: table.commands.get(" ".join(p)) for p in paths}
        label, where = table.source, f"{table.file} (gcloud {table.gcloud_version}) for `gcloud {{cmd}}`"
        missing = (f"`gcloud {{cmd}}` is not in {table.file}; fix: regenerate the table where gcloud is installed: "
                   f"`{REGENERATE}` (or install the Google Cloud CLI, which is then used instead)")
    rows = []
    for a in cmds:
        path = gcloud_path(a)
        cmd, flags = " ".join(path), known[path]
        for tok in a[1 + len(path):]:
            if tok.startswith("--"):
                flag = tok[2:].split("=", 1)[0]
                ok = flags is not None and flag in flags
                msg = "" if ok else (missing.format(cmd=cmd) if flags is None else
                                     f"--{flag} is not a flag of " + where.format(cmd=cmd))
                rows.append({"command": "gcloud " + cmd, "flag": "--" + flag, "ok": ok,
                             "known_command": flags is not None, "source": label, "message": msg})
    df = pd.DataFrame(rows, columns=COLUMNS).drop_duplicates().reset_index(drop=True)
    df.attrs["source"] = label
    return df
