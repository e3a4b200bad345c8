"""Build a directory that stands in for PATH minus some commands, and print it (``make test`` runs the notebooks
with it to prove they need no gcloud, kubectl or helm).

Removing directories from PATH does not work where those tools sit in /usr/bin beside everything else, so the
directory holds one symlink per executable name found on PATH (the first one, as the shell would pick it), except
the names given. The directory is rebuilt on every call.

Usage:
    PATH="$(python tools/path_without.py runs/x/path gcloud kubectl helm)" some-command
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
from pathlib import Path


def build(target: Path, drop: set[str], path: str | None = None) -> Path:
    """Fill ``target`` with symlinks to every executable on ``path`` (default $PATH) not named in ``drop``."""
    path = os.environ.get("PATH", "") if path is None else path
    target = target.resolve()
    if target.exists():
        shutil.rmtree(target)
    tmp = target.with_name(target.name + ".partial")
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir(parents=True)
    seen: set[str] = set()
    for d in path.split(os.pathsep):
        if not d or not os.path.isdir(d) or Path(d).resolve() == target:
            continue
        for entry in sorted(os.scandir(d), key=lambda e: e.name):
            if entry.name in seen or entry.name in drop:
                continue
            try:
                is_exe = entry.is_file() and os.access(entry.path, os.X_OK)
            except OSError:
                continue
            if is_exe:
                seen.add(entry.name)
                (tmp / entry.name).symlink_to(os.path.abspath(entry.path))
    tmp.rename(target)
    return target


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("target", type=Path, help="directory to (re)build")
    ap.add_argument("drop", nargs="+", help="command names to leave out, e.g. gcloud kubectl helm")
    args = ap.parse_args(argv)
    print(build(args.target, set(args.drop)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
