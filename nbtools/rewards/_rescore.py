"""Re-score stored trajectories with a new reward mix and compare GRPO's learning signal before and after."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from nbtools import _table, _trainer_folders
from nbtools._escape import html as _h
from nbtools._groups import group_ids
from nbtools.config import Experiment
from nbtools.errors import ConfigError, Fix
from nbtools.rewards._advantages import AdvantageRule, group_advantages, verl_grpo_advantages
from nbtools.rewards._mix import RewardMix, combine
from nbtools.rewards._run import ground_truth as _ground_truth_column

__all__ = ["RescoreResult", "rescore", "assign_groups"]


def assign_groups(df: pd.DataFrame, group_size: int | None = None) -> np.ndarray:
    """Group id per row (rows ordered by step, idx): with ``group_size`` None, the rows of a step with the same uid
    sample part (verl 0.9.x dumps ``uid``) or else the same prompt, wherever they sit (verl v0.7.0 dumps after
    ``_balance_batch`` reordered the batch: ``nbtools.trajectories.group_ids``); else consecutive chunks of
    ``group_size`` within a step."""
    steps = df["step"].to_numpy() if "step" in df else np.zeros(len(df), dtype=int)
    new_step = np.r_[True, steps[1:] != steps[:-1]] if len(df) else np.zeros(0, dtype=bool)
    if group_size is None:
        return group_ids(df)
    if not isinstance(group_size, int) or group_size < 1:
        raise ConfigError(f"group_size must be a positive int or None, got {group_size!r}")
    pos = np.arange(len(df)) - np.maximum.accumulate(np.where(new_step, np.arange(len(df)), 0))
    counts = pd.Series(steps).value_counts()
    bad = counts[counts % group_size != 0]
    if len(bad):
        raise ConfigError(
            f"group_size={group_size}: expected every step to hold a multiple of {group_size} rows, got "
            f"{dict(bad.head(5))} (step: rows)", fix=Fix("pass group_size=None to group by uid or prompt",
                                                         cli="group by uid or prompt (no group size)"),
        )
    return np.cumsum(new_step | (pos % group_size == 0)) - 1


def _advantages_by_group(values: np.ndarray, gid: np.ndarray, rule: AdvantageRule) -> np.ndarray:
    """Advantages under the trainer's rule; groups may be scattered over the rows (``gid`` per row)."""
    if rule.baseline == "verl_group_mean":
        return verl_grpo_advantages(values, gid, normalize=rule.normalize)
    out = np.full(len(values), np.nan)
    order = np.argsort(gid, kind="stable")
    sg = gid[order]
    starts = np.flatnonzero(np.r_[True, sg[1:] != sg[:-1]]) if len(sg) else np.zeros(0, int)
    sizes = np.diff(np.r_[starts, len(sg)])
    for size in np.unique(sizes):  # ragged groups: one rectangular call per group size
        rows = order[starts[sizes == size][:, None] + np.arange(size)]
        out[rows] = group_advantages(values[rows], leave_one_out=rule.leave_one_out, normalize=rule.normalize)
    return out


def _ground_truths(df: pd.DataFrame, ground_truth: str | Callable[[str], str]) -> list[str]:
    if callable(ground_truth):
        memo: dict[str, str] = {}
        for p in pd.unique(df["prompt"]):
            try:
                memo[p] = str(ground_truth(p))
            except Exception as e:
                name = getattr(ground_truth, "__name__", "ground_truth")
                raise ConfigError(
                    f"{name}(prompt) failed on prompt {str(p)[:80]!r}: {e}; fix: pass the function that derives "
                    "answers for THIS run's task, or a column name holding the ground truth"
                ) from e
        return [memo[p] for p in df["prompt"]]
    if isinstance(ground_truth, str) and ground_truth in df:
        return df[ground_truth].astype(str).tolist()
    raise ConfigError(
        f"ground_truth: expected a column of the trajectories or a function prompt -> answer, got {ground_truth!r} "
        f"(columns: {', '.join(map(str, df.columns))})",
        fix=Fix("e.g. ground_truth=nbtools.rehearsal.task.ground_truth_for",
                cli="name a column of the trajectories that holds the answers"),
    )


def _accuracy(correct: pd.Series) -> float:
    """Fraction correct among samples with a correctness flag; NaN when no reward in the mix judges correctness."""
    known = correct.dropna()
    return float(known.astype(bool).mean()) if len(known) else float("nan")


def _max_abs_diff(a: pd.Series, b: pd.Series) -> float:
    """Largest |recomputed - stored| advantage; ~0 means grouping and settings match what the trainer did."""
    d = np.abs(a.to_numpy(float) - b.to_numpy(float))
    return float(np.nanmax(d)) if np.isfinite(d).any() else float("nan")


class RescoreSummary(dict):
    """Totals of a re-scoring, as a mapping (``summary["changed_rewards"]``) that shows as one short sentence and a
    two-column table with numbers rounded for people (not a pandas Series repr with 16-digit floats)."""

    def _value(self, key: str) -> str:
        v = self[key]
        if isinstance(v, float):
            return "n/a" if v != v else f"{v:.3g}" if abs(v) >= 1e-3 or v == 0 else f"{v:.1e}"
        return str(v)

    def __repr__(self) -> str:
        return (f"re-scored {self['samples']} samples in {self['groups']} groups over {self['steps']} steps: mean reward "
                f"{self._value('old_mean_reward')} → {self._value('new_mean_reward')}, {self['changed_rewards']} "
                f"rewards changed; groups with a learning signal {self['old_signal_groups']} → "
                f"{self['new_signal_groups']} (+{self['flipped_to_signal']} / -{self['flipped_to_no_signal']}); "
                f"stored advantages reproduced within {self._value('stored_advantage_max_diff')}")

    def _repr_pretty_(self, p, cycle) -> None:
        p.text(repr(self))

    def _repr_html_(self) -> str:
        rows = "".join(f"<tr><td>{_h(k.replace('_', ' '))}</td><td>{_h(self._value(k))}</td></tr>" for k in self)
        return f"<table><tbody>{rows}</tbody></table>"


@dataclass(frozen=True)
class RescoreResult:
    """Old vs new rewards and advantages of stored trajectories under a new reward mix.

    ``samples``: one row per trajectory (step, idx, group, prompt, response, ground_truth, old/new reward and
    advantage, new_correct, one column per mix component). ``groups``: one row per prompt group with whether it
    carried a learning signal (rewards not all equal) before and after.
    """

    samples: pd.DataFrame
    groups: pd.DataFrame
    mix: RewardMix
    leave_one_out: bool
    normalize: bool
    # where the trainer logged only each step's advantage max and min (verl): {step: {"max", "min"}}
    logged_extremes: dict | None = None
    baseline: str = "leave_one_out"  # AdvantageRule.baseline: the trainer's rule the advantages were recomputed with

    @property
    def flipped_to_signal(self) -> int:
        """Groups that had all-equal rewards (zero advantage) before and differ under the new mix."""
        return int((~self.groups["old_signal"] & self.groups["new_signal"]).sum())

    @property
    def flipped_to_no_signal(self) -> int:
        """Groups that carried a signal before and have all-equal rewards under the new mix."""
        return int((self.groups["old_signal"] & ~self.groups["new_signal"]).sum())

    def flipped_samples(self, direction: str = "to_signal") -> pd.DataFrame:
        """The samples of groups that flipped ``"to_signal"`` (gained one) or ``"to_no_signal"`` (lost it)."""
        g = self.groups
        if direction == "to_signal":
            ids = g.loc[~g["old_signal"] & g["new_signal"], "group"]
        elif direction == "to_no_signal":
            ids = g.loc[g["old_signal"] & ~g["new_signal"], "group"]
        else:
            raise ConfigError(f"direction must be 'to_signal' or 'to_no_signal', got {direction!r}")
        return self.samples[self.samples["group"].isin(ids)]

    def table(self) -> pd.DataFrame:
        """Per-step comparison: mean reward and groups with a learning signal, old vs new, and the flips."""
        g = self.groups.assign(
            gained=~self.groups["old_signal"] & self.groups["new_signal"],
            lost=self.groups["old_signal"] & ~self.groups["new_signal"],
        )
        per_group = g.groupby("step").agg(
            groups=("group", "size"),
            old_signal_groups=("old_signal", "sum"),
            new_signal_groups=("new_signal", "sum"),
            gained_signal=("gained", "sum"),
            lost_signal=("lost", "sum"),
        )
        s = self.samples
        per_sample = s.groupby("step").agg(
            samples=("idx", "size"),
            old_reward=("old_reward", "mean"),
            new_reward=("new_reward", "mean"),
            new_accuracy=("new_correct", _accuracy),
        )
        return _table.table(per_sample.join(per_group).reset_index(), when_empty="no trajectories: nothing was re-scored")

    def summary(self) -> RescoreSummary:
        """Totals over the whole run (samples, groups, mean rewards, signal groups, flips in both directions).

        ``stored_advantage_max_diff`` compares the advantages recomputed from the stored rewards with the ones the
        trainer stored (verl: each step's logged max and min): near 0 confirms the grouping and the
        leave_one_out/normalize settings match the run.
        """
        s, g = self.samples, self.groups
        changed = ~np.isclose(
            s["old_reward"].to_numpy(float), s["new_reward"].to_numpy(float), equal_nan=True
        )
        return RescoreSummary(
            {
                "samples": len(s),
                "groups": len(g),
                "steps": int(s["step"].nunique()),
                "old_mean_reward": float(s["old_reward"].mean()),
                "new_mean_reward": float(s["new_reward"].mean()),
                "changed_rewards": int(changed.sum()),
                "old_signal_groups": int(g["old_signal"].sum()),
                "new_signal_groups": int(g["new_signal"].sum()),
                "flipped_to_signal": self.flipped_to_signal,
                "flipped_to_no_signal": self.flipped_to_no_signal,
                "new_accuracy": _accuracy(s["new_correct"]),
                "stored_advantage_max_diff": self._stored_diff(),
            }
        )

    def _stored_diff(self) -> float:
        """|recomputed - stored| advantages at most; where the run stored no advantage per sample but logged each
        step's extremes, the same over those (each step's recomputed max and min against the logged ones)."""
        s, ext = self.samples, self.logged_extremes
        diff = _max_abs_diff(s["old_advantage"], s["stored_advantage"])
        if not np.isnan(diff) or not ext:
            return diff
        mine = s.groupby("step")["old_advantage"].agg(["max", "min"])
        both = mine.join(pd.DataFrame.from_dict(ext, orient="index").add_suffix("_logged"), how="inner")
        if both.empty:
            return diff
        return float(np.nanmax(np.abs(both[["max", "min"]].to_numpy(float) - both[["max_logged", "min_logged"]].to_numpy(float))))

    def _repr_html_(self) -> str:
        mix = _h(repr(self.mix))
        return (
            f"<b>RescoreResult</b> — {mix}, baseline={_h(self.baseline)}, normalize={self.normalize}"
            f"{self.summary()._repr_html_()}{self.table().to_html(index=False)}"
        )


def _rule(cfg: Experiment | None, leave_one_out: bool | None, normalize: bool | None) -> AdvantageRule:
    """The trainer's advantage rule (``trainers.get(cfg).advantage_rule``); what the caller passes wins and means
    NeMo-RL's rule (leave-one-out or group mean)."""
    if cfg is not None and leave_one_out is None:
        rule = _trainer_folders.job_trainer(cfg).advantage_rule()
        return rule if normalize is None else AdvantageRule(rule.baseline, bool(normalize))
    loo = leave_one_out if leave_one_out is not None else (cfg.grpo.use_leave_one_out_baseline if cfg else True)
    norm = normalize if normalize is not None else (cfg.grpo.normalize_rewards if cfg else True)
    return AdvantageRule("leave_one_out" if loo else "group_mean", bool(norm))


def rescore(
    df: pd.DataFrame,
    mix: RewardMix | Sequence[Mapping[str, Any]],
    *,
    cfg: Experiment | None = None,
    ground_truth: str | Callable[[str], str] | None = None,
    group_size: int | None = None,
    leave_one_out: bool | None = None,
    normalize: bool | None = None,
    progress: bool = True,
) -> RescoreResult:
    """Apply a reward mix to stored trajectories and recompute GRPO advantages, old vs new.

    Why: see what a new reward would have done to a finished run (which groups gain or lose a learning
    signal) before paying for another run. Old advantages are recomputed from the stored rewards with the same
    settings, so both sides are comparable; NeMo-RL's stored per-token value is kept as ``stored_advantage``.

    Args:
        df: what ``nbtools.trajectories.Run.read()`` returns (needs prompt, response; uses step, idx, reward,
            advantage when present), or any DataFrame with those columns.
        mix: a :class:`RewardMix` or a NeMo-RL ``reward_functions`` list.
        cfg: the experiment that made the trajectories: the ground truth of its dataset
            (:func:`nbtools.rewards.ground_truth`) and its GRPO settings (``grpo.use_leave_one_out_baseline``,
            ``grpo.normalize_rewards``), so the groups' advantages are the trainer's; what is passed below wins.
        ground_truth: a column name, or a function prompt -> answer (default: the ``ground_truth`` column where
            every row has one, as verl's dumps do; else ``cfg``'s).
        group_size: None groups the rows of a step by uid sample part (verl 0.9.x) or prompt, wherever they sit in
            the dump; an int chunks each step.
        leave_one_out: NeMo-RL's ``grpo.use_leave_one_out_baseline``; given, it picks NeMo-RL's rule (default: the
            rule of ``cfg``'s trainer, ``trainers.get(cfg).advantage_rule``: verl's whole-group mean for a verl run;
            without ``cfg`` True).
        normalize: divide by the group's std (default: the trainer's rule, else True).
        progress: show a tqdm bar when scoring takes longer than a second.

    Returns:
        A :class:`RescoreResult` (``.table()``, ``.summary()``, ``.samples``, ``.groups``).

    Raises:
        ConfigError: missing columns, an unusable ground truth, or a bad mix.

    Example:
        >>> run = nbtools.trajectories.open_run(cfg.logs_url)
        >>> result = nbtools.rewards.rescore(run.read(), mix, cfg=cfg)
        >>> result.table()
    """
    if ground_truth is None:  # the answers the dumps carry (verl's gts), else the experiment's, else the column
        logged = "ground_truth" in df and bool(df["ground_truth"].notna().all()) and len(df) > 0
        ground_truth = "ground_truth" if logged or cfg is None else _ground_truth_column(cfg)
    rule = _rule(cfg, leave_one_out, normalize)
    mix = combine(mix)
    missing = [c for c in ("prompt", "response") if c not in df]
    if missing:
        raise ConfigError(
            f"rescore: trajectories need columns prompt and response, missing {missing} "
            f"(got {', '.join(map(str, df.columns))})",
            fix=Fix("pass nbtools.trajectories.open_run(path).read()", cli="pass a run's trajectories (an exp_NNN dir)"),
        )
    order = [c for c in ("step", "idx") if c in df]
    s = df.sort_values(order, kind="stable") if order else df
    s = s.reset_index(drop=True)
    out = pd.DataFrame(
        {
            "step": s["step"].to_numpy() if "step" in s else np.zeros(len(s), dtype=int),
            "idx": s["idx"].to_numpy() if "idx" in s else np.arange(len(s)),
        }
    )
    keyed = out.assign(prompt=s["prompt"].to_numpy())
    if "uid" in s:
        keyed["uid"] = s["uid"].to_numpy()
    out["group"] = assign_groups(keyed, group_size)
    out["prompt"], out["response"] = s["prompt"].to_numpy(), s["response"].fillna("").astype(str).to_numpy()
    out["ground_truth"] = _ground_truths(s, ground_truth)
    comps = mix.score_components(out["ground_truth"].tolist(), out["response"].tolist(), progress=progress)
    old = s["reward"].to_numpy(dtype=float) if "reward" in s else np.full(len(s), np.nan)
    new = comps["reward"].to_numpy(dtype=float)

    gid = out["group"].to_numpy()
    out["old_reward"], out["new_reward"] = old, new
    out["reward_delta"] = new - old
    out["old_advantage"] = _advantages_by_group(old, gid, rule)
    out["new_advantage"] = _advantages_by_group(new, gid, rule)
    out["stored_advantage"] = s["advantage"].to_numpy(dtype=float) if "advantage" in s else np.nan
    out["new_correct"] = comps["correct"].to_numpy()
    for label in mix.labels:  # unique even when the mix names a reward twice
        out[f"r_{label}"] = comps[label].to_numpy()

    by = pd.DataFrame({"group": gid, "old": old, "new": new}).groupby("group", sort=True)
    first = by.head(1).index.to_numpy()  # each group's first row, groups in id order
    agg = by.agg(size=("old", "size"), old_mean=("old", "mean"), new_mean=("new", "mean"), old_min=("old", "min"),
                 old_max=("old", "max"), new_min=("new", "min"), new_max=("new", "max"))
    groups = pd.DataFrame(
        {
            "step": out["step"].to_numpy()[first],
            "group": gid[first],
            "prompt": out["prompt"].to_numpy()[first],
            "size": agg["size"].to_numpy(),
            "old_mean": agg["old_mean"].to_numpy(),
            "new_mean": agg["new_mean"].to_numpy(),
            "old_signal": (agg["old_max"] - agg["old_min"]).to_numpy() > 0,  # NaN (no stored reward): no signal
            "new_signal": (agg["new_max"] - agg["new_min"]).to_numpy() > 0,
        }
    )
    return RescoreResult(
        samples=out, groups=groups, mix=mix, leave_one_out=rule.leave_one_out, normalize=rule.normalize,
        logged_extremes=df.attrs.get("logged_advantage_extremes"), baseline=rule.baseline,
    )
