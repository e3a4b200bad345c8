"""Regenerate ``nbtools/data/verl_keys_<tag>.json`` from verl's own flattened trainer config at each release tag.

verl keeps ``verl/trainer/config/_generated_ppo_trainer.yaml``: ``ppo_trainer.yaml`` with its Hydra defaults list
composed (its CI regenerates it with scripts/generate_trainer_config.sh), i.e. every key ``verl.trainer.main_ppo``
accepts without ``+``. The package reads no file outside itself, so the lint carries each release's tree as data;
``tests/trainers/test_verl_releases.py`` checks the committed files match what this script produces.

Usage:
    .venv/bin/python tools/gen_verl_keys.py [--source DIR_OF_TAG_FOLDERS] [--check]
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from nbtools.trainers.verl._tree import CONFIG, DATA_FILE  # noqa: E402

# v0.7.0/, v0.9.0/: verl's verl/trainer/config/_generated_ppo_trainer.yaml at each tag, each with a SOURCE.md
DEFAULT_SOURCE = ROOT / "tests" / "assets" / "verl"
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
    """Return {file name: JSON text} for every tag folder under ``source`` that holds the trainer config."""
    out: dict[str, str] = {}
    for vdir in sorted(p for p in source.iterdir() if p.is_dir() and (p / CONFIG).is_file()):
        data = {
            "version": vdir.name,
            "commit": _commit(vdir),
            "config": CONFIG,
            "generated_by": "tools/gen_verl_keys.py",
            "tree": yaml.safe_load((vdir / CONFIG).read_text()),
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
    for name, text in files.items():
        tmp = OUT_DIR / (name + ".tmp")
        tmp.write_text(text)
        tmp.replace(OUT_DIR / name)
        print(f"wrote {OUT_DIR / name} ({len(text)} bytes)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
