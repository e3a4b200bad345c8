"""TEST DOUBLE of verl's ``verl/utils/reward_score/__init__.py`` ``default_compute_score`` (verl v0.7.0), written
anew for the stand-in trainer (tests/doubles/sim_verl); NOT verl, and independent of nbtools' rewards so the two can
disagree.

Behaviour at v0.7.0 (that path): the row's ``data_source`` picks the rule; ``"openai/gsm8k"`` is ``gsm8k.compute_score
(solution_str, ground_truth)`` with its defaults; a data source without a rule raises ``NotImplementedError``
("Reward function is not implemented for data_source=…"); a number comes back as ``float``, a dict as is. Only the
GSM8K rule is re-implemented here: any other data source fails as an unknown one would (the simulated image's data is
GSM8K's). The reward manager (``verl/workers/reward_manager/naive.py``) decodes the response with
``skip_special_tokens=True``, reads ``data_source`` through ``data.reward_fn_key`` and the answer from
``reward_model.ground_truth``, and puts a non-dict score on the response's last token.
"""

from __future__ import annotations

from typing import Any

from . import gsm8k

__all__ = ["default_compute_score"]


def default_compute_score(data_source: str, solution_str: str, ground_truth: str, extra_info: Any = None,
                          **kwargs: Any) -> float | dict:
    if data_source == "openai/gsm8k":
        res = gsm8k.compute_score(solution_str, ground_truth)
    else:
        raise NotImplementedError(f"Reward function is not implemented for {data_source=} (verl test double: only "
                                  "openai/gsm8k's rule is re-implemented)")
    return res if isinstance(res, dict) else float(res)
