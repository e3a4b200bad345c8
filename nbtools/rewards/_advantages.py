"""GRPO group-relative advantages, computed as NeMo-RL does (one implementation for trainer and re-scoring), and as
verl does (its whole-group baseline, for re-scoring a verl run)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np
import pandas as pd

from nbtools.errors import ConfigError, Fix

__all__ = ["group_advantages", "group_baseline_std", "verl_grpo_advantages"]


def group_baseline_std(rewards: np.ndarray, *, leave_one_out: bool) -> tuple[np.ndarray, np.ndarray]:
    """Per-sample baseline and std as NeMo-RL's ``calculate_baseline_and_std_per_prompt`` (all samples valid).

    Baseline: the group mean, or with ``leave_one_out`` the mean of the other G-1 samples (RLOO). Std: the
    sample std (ddof=1) over the same samples. Groups of one sample get baseline = reward and std 0. Where the
    samples behind a baseline are all equal, the baseline is exactly that value and the std exactly 0 (NeMo-RL's
    ``E[r^2] - E[r]^2`` can leave a ~1e-9 residue there, which normalisation would blow up).
    """
    r = np.asarray(rewards, dtype=float)
    if r.ndim != 2:
        raise ConfigError(
            f"group_advantages: expected rewards of shape (num_groups, G), got shape {r.shape}",
            fix=Fix("reshape with rewards.reshape(num_groups, num_generations_per_prompt)",
                    cli="give the rewards as num_groups rows of num_generations_per_prompt values"),
        )
    g = r.shape[1]
    n = g - 1 if leave_one_out else g  # samples behind each baseline
    if g <= 1 or n < 1:
        return r.copy(), np.zeros_like(r)
    if leave_one_out:
        others = np.broadcast_to(r[:, None, :], (r.shape[0], g, g))[:, ~np.eye(g, dtype=bool)]
        others = others.reshape(r.shape[0], g, n)
    else:
        others = np.broadcast_to(r[:, None, :], (r.shape[0], g, g))
    baseline = others.mean(axis=-1)
    std = others.std(axis=-1, ddof=1) if n > 1 else np.zeros_like(r)
    # Equal values must give std exactly 0: a float residue (mean of seven 0.2s is not exactly 0.2) would
    # otherwise be divided into, turning a 0.8 advantage into 0.8 / (1e-17 + eps) = 800000.
    flat = np.ptp(others, axis=-1) == 0
    baseline[flat] = others[..., 0][flat]
    std[flat] = 0.0
    return baseline, np.nan_to_num(std)


def group_advantages(
    rewards: np.ndarray, *, leave_one_out: bool, normalize: bool, eps: float = 1e-6
) -> np.ndarray:
    """Advantages ``reward - baseline``, divided by ``std + eps`` where std > 0 when ``normalize``.

    Why: the one implementation the rehearsal trainer and re-scoring share; it matches NeMo-RL's GRPO
    (``calculate_baseline_and_std_per_prompt`` then ``normalize_advantages_with_epsilon``).

    Args:
        rewards: shape (num_groups, G), one row per prompt, G generations each.
        leave_one_out: baseline from the other G-1 samples (``grpo.use_leave_one_out_baseline``).
        normalize: divide by the std (``grpo.normalize_rewards``); samples whose std is 0 are left as is.
        eps: added to the std before dividing.

    Returns:
        Array of the same shape. Groups whose rewards are all equal get exactly 0.

    Example:
        >>> group_advantages(np.array([[1.0, 0.0, 0.0, 0.0]]), leave_one_out=False, normalize=False)
        array([[ 0.75, -0.25, -0.25, -0.25]])
    """
    baseline, std = group_baseline_std(rewards, leave_one_out=leave_one_out)
    adv = np.asarray(rewards, dtype=float) - baseline
    if normalize:
        nz = std > 0
        adv[nz] = adv[nz] / (std[nz] + eps)
    return adv


def verl_grpo_advantages(values: np.ndarray, groups: np.ndarray, *, normalize: bool, eps: float = 1e-6) -> np.ndarray:
    """Per-sample advantages as verl's GRPO computes them: ``(r - mean) / (std + eps)`` over the whole group.

    Why: verl's baseline is not NeMo-RL's. ``compute_grpo_outcome_advantage`` (``verl/trainer/ppo/core_algos.py`` at
    v0.7.0 and v0.9.1, the same body) groups by ``index`` (the batch's uid), takes the mean over every sample of the
    group (no leave-one-out) and ``torch.std`` (ddof=1), and gives a group of one sample mean 0 and std 1; with
    ``algorithm.norm_adv_by_std_in_grpo: false`` it subtracts the mean only. A group whose rewards are all equal gets
    exactly 0 here (verl's float32 mean can leave a residue there, which it divides by eps).

    Args:
        values: one reward per sample, any order.
        groups: the group id of each sample (same length).
        normalize: ``algorithm.norm_adv_by_std_in_grpo``.

    Example:
        >>> verl_grpo_advantages(np.array([1.0, 0.0, 0.0, 1.0]), np.array([0, 1, 1, 0]), normalize=False)
        array([0., 0., 0., 0.])
    """
    r = np.asarray(values, dtype=float)
    g = np.asarray(groups)
    s = pd.Series(r)
    by = s.groupby(g)
    size = by.transform("size").to_numpy()
    mean = by.transform("mean").to_numpy().copy()
    sq = pd.Series((r - mean) ** 2).groupby(g).transform("sum").to_numpy()
    with np.errstate(invalid="ignore", divide="ignore"):
        std = np.sqrt(sq / (size - 1))
    flat = (by.transform("max") == by.transform("min")).to_numpy()
    single = size == 1
    mean[single], std[single] = 0.0, 1.0
    mean[flat & ~single] = r[flat & ~single]
    adv = r - mean
    if normalize:
        adv = adv / (np.nan_to_num(std) + eps)
    return adv


@dataclass(frozen=True)
class AdvantageRule:
    """How a trainer turns a group's rewards into advantages (what ``rewards.rescore`` must recompute).

    Attributes:
        baseline: ``"leave_one_out"`` (NeMo-RL with ``grpo.use_leave_one_out_baseline``: the other G-1 samples' mean),
            ``"group_mean"`` (NeMo-RL without it), or ``"verl_group_mean"`` (verl's GRPO: the whole group's mean, a
            one-sample group mean 0 and std 1; ``core_algos.py`` ``compute_grpo_outcome_advantage``).
        normalize: divide by the group's std (NeMo-RL ``grpo.normalize_rewards``; verl
            ``algorithm.norm_adv_by_std_in_grpo``).
    """

    baseline: Literal["leave_one_out", "group_mean", "verl_group_mean"]
    normalize: bool

    @property
    def leave_one_out(self) -> bool:
        return self.baseline == "leave_one_out"
