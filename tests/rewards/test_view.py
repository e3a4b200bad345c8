"""nbtools.rewards.display.compare_view (notebook 08): which groups it steps through and what one group shows."""

from __future__ import annotations

import re

import pandas as pd
import pytest

from nbtools import rewards
from nbtools.errors import ConfigError
from nbtools.rewards import display


def _run() -> pd.DataFrame:
    """Stored rewards were format-only; exact_alnum gives prompt A a signal and takes prompt B's away."""
    rows = [{"step": 1, "idx": i, "prompt": "max 1 2 3", "response": f"<think>t</think> <answer>{a}</answer>",
             "reward": 1.0} for i, a in enumerate("3321")]
    rows += [{"step": 1, "idx": 4 + i, "prompt": "max 5 4 0", "response": "<answer>4</answer>" if r else "4",
              "reward": r} for i, r in enumerate([1.0, 0.0, 0.0, 0.0])]
    return pd.DataFrame(rows).assign(advantage=0.0)


def _truth(prompt: str) -> str:
    return str(max(int(d) for d in prompt.split()[1:]))


def test_compare_view_steps_through_the_groups_that_flipped():
    result = rewards.rescore(_run(), [{"name": "exact_alnum", "weight": 1.0}], ground_truth=_truth, progress=False)
    assert display.flipped_groups(result) == [0] and display.flipped_groups(result, "lost a signal") == [1]
    assert display.flipped_groups(result, "every group") == [0, 1]
    with pytest.raises(ConfigError, match="which: expected one of"):
        display.flipped_groups(result, "to_signal")
    view = display.compare_view(result)
    pick, pos, count = view.children[0].children
    body = view.children[1]
    assert count.value == "1 groups" and "group 0" in body.value and body.value.count("class='nbx-row'") == 4
    assert "<span class='answer tag'>&lt;answer&gt;</span>" in re.sub(r" style='[^']*'", "", body.value)
    assert "text-align:left" in body.value
    pick.value = "every group"
    pos.value = 2
    assert "group 1" in body.value and "max 5 4 0" in body.value and pos.max == 2
