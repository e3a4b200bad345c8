"""The one way nbtools makes a matplotlib figure: shown as a PNG by any notebook, whatever the backend.

Why: ``make demo`` runs with ``MPLBACKEND=Agg``, where IPython registers no PNG formatter for figures, so a figure a
cell returns showed as the text ``<Figure size 900x360 with 1 Axes>``. These figures are built without pyplot (no
global figure list to close, no GUI window) on an Agg canvas, and carry their own ``_repr_png_``: Jupyter, papermill
and nbconvert all store the image. Under ``%matplotlib inline`` IPython's own PNG formatter answers first; one image
either way.

Example:
    >>> fig, axes = _figure.new(1, 2, figsize=(9, 3.6))
    >>> _figure.save(fig, run_dir / "figures" / "x.png")
"""

from __future__ import annotations

import io
import os
from pathlib import Path

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure as _MplFigure

from nbtools._atomic import write_bytes

__all__ = ["Figure", "new", "png", "save", "DPI"]

DPI = 110  # the PNGs written to disk and the ones shown in the notebook are the same picture


def png(fig) -> bytes:
    """``fig`` as PNG bytes, cropped to what is drawn."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=DPI, bbox_inches="tight")
    return buf.getvalue()


class Figure(_MplFigure):
    """A matplotlib Figure whose rich repr is its PNG (the same bytes :func:`save` writes)."""

    def _repr_png_(self) -> bytes:
        return png(self)


def new(nrows: int = 1, ncols: int = 1, *, figsize: tuple[float, float], squeeze: bool = True,
        **subplot_kw) -> tuple[Figure, np.ndarray]:
    """A :class:`Figure` on an Agg canvas with a grid of axes, like ``plt.subplots`` without pyplot's state."""
    fig = Figure(figsize=figsize)
    FigureCanvasAgg(fig)
    axes = fig.subplots(nrows, ncols, squeeze=squeeze, **subplot_kw)
    return fig, axes


def save(fig, path: str | os.PathLike) -> Path:
    """Write ``fig`` as a PNG atomically (``nbtools._atomic``); returns the path."""
    return write_bytes(path, png(fig))
