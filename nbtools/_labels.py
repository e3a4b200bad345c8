"""How runs and panels are named in both figure layers (matplotlib ``plots`` and plotly ``curves``)."""

from __future__ import annotations

import pandas as pd

from nbtools import metrics as _metrics

__all__ = ["TITLES", "run_label", "panel_title"]

TITLES = {
    "reward": "reward (train) / accuracy (validation)",
    "generation_length": "mean generation length (tokens)",
    "kl": "KL",
    "step_time": "step time (s)",
    "generation_time": "generation time (s)",
    "throughput": "throughput (tokens/s)",
}


def run_label(run, experiment: str | None = None) -> str:
    """A run's name in legends: ``local-rehearsal (exp_001)`` when the experiment is known, else ``exp_001``."""
    return f"{experiment} ({run})" if experiment else str(run)


def panel_title(df: pd.DataFrame, name: str) -> str:
    """A panel's title, naming the tag the KL panel plots (``KL · train/kl_penalty``: NeMo-RL logs several KL-like tags)."""
    title = TITLES.get(name, name)
    tags = list(dict.fromkeys(_metrics.select(df, name)["tag"])) if not df.empty and name in TITLES else []
    return f"{title} · {', '.join(map(str, tags[:2]))}" if tags and name == "kl" else title
