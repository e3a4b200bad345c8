"""Display widgets; the trajectory explorer lives in ``nbtools.explorer`` (kept here under its old name).

Example:
    >>> explorer = nbtools.widgets.explore(run, cfg=cfg)
"""

from __future__ import annotations

from nbtools.explorer import FILTERS, TrajectoryExplorer, explore

__all__ = ["TrajectoryExplorer", "explore", "FILTERS"]
