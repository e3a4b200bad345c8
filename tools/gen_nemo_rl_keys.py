"""Regenerate ``nbtools/data/nemo_rl_keys_<version>.json`` from NeMo-RL's real GRPO config files.

The package reads no file outside itself at run time, so the lint and the command builder carry each release's
resolved config trees (``defaults:`` inheritance applied) as package data. ``tests/launch/test_tree.py`` checks the
committed files match what this script produces.

Usage:
    .venv/bin/python tools/gen_nemo_rl_keys.py [--source DIR_OF_VERSION_FOLDERS] [--check]
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from nbtools.trainers._tree import DATA_FILE, load_yaml_tree  # noqa: E402

# v0.5.0/, v0.7.0/: NeMo-RL's examples/configs at each tag, each folder with a SOURCE.md naming its commit
DEFAULT_SOURCE = ROOT / "tests" / "assets" / "nemo-rl"
OUT_DIR = ROOT / "nbtools" / "data"


def _commit(vdir: Path) -> str:
    """The upstream commit named in ``<vdir>/SOURCE.md`` (its ``| commit | `<40 hex>` |`` row), or ""."""
    try:
        text = (vdir / "SOURCE.md").read_text()
    except OSError:
        return ""
    m = re.search(r"\|\s*commit\s*\|\s*`?([0-9a-f]{40})`?\s*\|", text)
    return m.group(1) if m else ""


def generate(source: Path = DEFAULT_SOURCE) -> dict[str, str]:
    """Return {file name: JSON text} for every version folder under ``source``."""
    out: dict[str, str] = {}
    for vdir in sorted(p for p in source.iterdir() if p.is_dir() and p.name.startswith("v")):
        configs = {}
        for f in sorted((vdir / "examples" / "configs").rglob("*.yaml")):
            rel = f.relative_to(vdir).as_posix()
            if "/evals/" in rel:
                continue
            configs[rel] = load_yaml_tree(f)
        data = {
            "version": vdir.name,
            "commit": _commit(vdir),
            "generated_by": "tools/gen_nemo_rl_keys.py",
            "configs": configs,
        }
        out[DATA_FILE.format(version=vdir.name)] = json.dumps(data, indent=1, sort_keys=True, default=str) + "\n"
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--source", type=Path, default=DEFAULT_SOURCE)
    ap.add_argument("--check", action="store_true", help="exit 1 if the committed files differ")
    args = ap.parse_args(argv)
    files = generate(args.source)
    stale = [name for name, text in files.items() if not (OUT_DIR / name).is_file() or (OUT_DIR / name).read_text() != text]
    if args.check:
        print("stale: " + ", ".join(stale) if stale else "up to date")
        return 1 if stale else 0
    OUT_DIR.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        tmp = OUT_DIR / (name + ".tmp")
        tmp.write_text(text)
        tmp.replace(OUT_DIR / name)
        print(f"wrote {OUT_DIR / name} ({len(text)} bytes)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
