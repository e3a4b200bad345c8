"""What a merge produced, wherever it ran (this machine: ``_merge``; a Ray job in the cluster: ``_remote``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from nbtools import _paths
from nbtools._escape import html as _h

__all__ = ["MergeResult"]


@_paths.tidy_reprs
@dataclass
class MergeResult:
    """What :func:`merge` produced (or found already merged, ``reused=True``)."""

    out: Path
    tensors: int
    bytes: int
    seconds: float
    layout: str
    verified: bool
    checksums: dict[str, str]
    source: Path | None = None
    reused: bool = False
    notes: list[str] = field(default_factory=list)
    url: str | None = None  # where this machine reads ``out`` (a gs:// URL when the merge ran in the cluster)
    algorithm: str = "xxh3_128"  # of ``checksums``

    def table(self) -> pd.DataFrame:
        """One row per output file with its size and checksum (column named by the algorithm)."""
        return pd.DataFrame([{"file": k, "bytes": (self.out / k).stat().st_size, self.algorithm: v}
                             for k, v in sorted(self.checksums.items())])

    def __repr__(self) -> str:  # a sentence, not the dataclass with its checksum dict (a console or a text export)
        state = "reused existing verified output" if self.reused else f"merged in {self.seconds:.1f} s"
        return (f"{self.out}: {self.tensors} tensors, {self.bytes / 1e6:.1f} MB, layout {self.layout}, {state}, "
                f"verified {'yes' if self.verified else 'NO'}, {len(self.checksums)} files with {self.algorithm} checksums"
                + "".join(f"\n  note: {n}" for n in self.notes))

    def _repr_html_(self) -> str:
        state = "reused existing verified output" if self.reused else f"merged in {self.seconds:.1f} s"
        notes = "".join(f"<li>{_h(n)}</li>" for n in self.notes)
        return (f"<b>{_h(self.out)}</b> — {self.tensors} tensors, {self.bytes / 1e6:.1f} MB, layout <code>{_h(self.layout)}"
                f"</code>, {state}, verified: {'✓' if self.verified else '✗'}<ul>{notes}</ul>")
