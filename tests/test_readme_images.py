"""The README's screenshots (issue 45: "the README's screenshots show each"): every image the README references is a
file of the repository, small enough to commit (at most 150 KB), and the four the issue asks for are there — 04's
overlay, the health panel, the terminal viewer and 01's dry run on gke."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
WANTED = {"docs/images/04_overlay.png", "docs/images/04_health_panel.png", "docs/images/terminal_viewer.svg",
          "docs/images/01_gke_dry_run.png"}


def test_every_readme_image_exists_and_is_small():
    text = (ROOT / "README.md").read_text()
    images = re.findall(r"!\[[^\]]*\]\(([^)\s]+)\)", text) + re.findall(r"<img [^>]*src=['\"]([^'\"]+)", text)
    local = [i for i in images if not re.match(r"[a-z]+://", i)]
    assert WANTED <= set(local), sorted(WANTED - set(local))
    for rel in local:
        path = ROOT / rel
        assert path.is_file(), f"README references {rel}, which is not in the repository"
        assert path.stat().st_size <= 150_000, f"{rel}: {path.stat().st_size} bytes, over 150 KB"
        head = path.read_bytes()[:256]
        assert head.startswith(b"\x89PNG") if rel.endswith(".png") else b"<svg" in head, rel
