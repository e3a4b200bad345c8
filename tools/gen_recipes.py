"""Regenerate nbtools/data/recipes.yaml from experiments/tutorial-*.yaml (the tutorials' runs as written: the source
of truth; tests/launch/test_tutorial_experiments.py checks the packaged copy is current).

Usage:
    .venv/bin/python tools/gen_recipes.py
"""

from __future__ import annotations

from pathlib import Path

from nbtools.launch.recipes import from_files

ROOT = Path(__file__).resolve().parents[1]

if __name__ == "__main__":
    target = ROOT / "nbtools" / "data" / "recipes.yaml"
    target.write_text(from_files(ROOT / "experiments"))
    print(f"wrote {target.relative_to(ROOT)}")
