"""The checks: each a stable name, thresholds a user can change, and a fix in words and as config keys.

Why: a GRPO run that learns nothing still bills its GPUs. Each failure below has been reported again and again by
NeMo-RL, verl and TRL users; each leaves a trace in the records or the scalars within a few steps. Metric names are
NeMo-RL's (nemo-rl-facts.md §2: ``train/truncation_rate``, ``train/token_mult_prob_error``, ``train/kl_penalty``,
``train/mean_gen_tokens_per_sample``, ``validation/accuracy``), with verl's where it logs one.

Every check decides on the recent window (the last ``window`` steps) and names the first step where the per-step
value crossed the threshold in the run of steps that reaches the end. The checks see finite values only;
:func:`run_checks` applies the rules of :mod:`nbtools.health._evidence` (NaN/inf, no data, warm-up) to every result.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field, replace

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from nbtools import _trainer_folders
from nbtools.health._data import RunData, per_step
from nbtools.health._evidence import judge, nonfinite
from nbtools.health._report import CheckResult, Example, Status
from nbtools.health._specs import CHECKS, CheckSpec

__all__ = ["run_checks"]


@dataclass(frozen=True)
class _Ctx:
    data: RunData
    window: int
    examples: int
    memo: dict = field(default_factory=dict)  # results other checks reuse (no-signal-groups)


def _first_step(crossed: pd.Series) -> int | None:
    """First step of the run of crossed steps that reaches the last step (else the first crossed step)."""
    if crossed.empty or not crossed.any():
        return None
    vals = crossed.to_numpy()
    if vals[-1]:
        k = len(vals) - 1
        while k > 0 and vals[k - 1]:
            k -= 1
        return int(crossed.index[k])
    return int(crossed.index[np.argmax(vals)])


def _result(spec: CheckSpec, value: float | None, message: str, *, series: pd.Series | None = None,
            examples=(), status: Status | None = None, threshold: float | None = None,
            first_step: int | None = None) -> CheckResult:
    lvl, t = spec.level(value)
    status = status or lvl
    t = threshold if threshold is not None else t
    if status != "ok" and first_step is None and series is not None and len(series):
        first_step = _first_step(spec.crossed(series, t))
    return CheckResult(spec.name, status, first_step if status != "ok" else None, value, t, message,
                       spec.fix_text(), spec.keys, tuple(examples) if status != "ok" else (), series)


def _skip(spec: CheckSpec, why: str) -> CheckResult:
    return CheckResult(spec.name, "unknown", None, None, spec.warning if spec.warning is not None else spec.unhealthy,
                       f"not checked: {why}", spec.fix_text(), spec.keys)


def _recent(series: pd.Series, window: int) -> pd.Series:
    return series.sort_index().iloc[-window:]


def _examples(records: pd.DataFrame, mask, n: int, *, latest: bool = False) -> list[Example]:
    rows = records.loc[np.asarray(mask, dtype=bool), ["step", "idx"]]
    if latest and len(rows):
        rows = rows[rows["step"] == rows["step"].max()]
    return [Example(int(s), int(i)) for s, i in rows.head(n).itertuples(index=False)]


# ---- the checks ------------------------------------------------------------------------------------------------
def zero_reward(c: _Ctx, spec: CheckSpec) -> CheckResult:
    d = c.data
    if len(d.records):
        r = d.reward.to_numpy(dtype="float64")
        zero = per_step(d.meta, np.isclose(r, 0.0))
        steps = list(_recent(zero, c.window).index)
        recent = d.meta[d.meta["step"].isin(steps)]
        vals = recent["reward"].dropna().to_numpy()
        if len(vals) and np.ptp(vals) == 0 and not np.isclose(vals[0], 0.0):
            const = float(vals[0])
            every = pd.Series(1.0, index=zero.index)
            return _result(spec, 1.0, f"every reward of steps {steps[0]}..{steps[-1]} is {const:g}: no sample is "
                           "better than another, so no step learns anything", series=every,
                           examples=_examples(recent, np.ones(len(recent)), c.examples))
        if not len(vals):
            return _skip(spec, f"no finite reward in steps {steps[0]}..{steps[-1]}")
        value = float(np.isclose(vals, 0.0).mean())
        ex = _examples(d.meta, np.isclose(r, 0.0), c.examples)
        return _result(spec, value, f"{value:.0%} of the rewards of steps {steps[0]}..{steps[-1]} are 0", series=zero,
                       examples=ex)
    s = d.scalar("train/reward", "critic/score/mean")
    if s.empty:
        return _skip(spec, "no records and no reward scalar yet")
    recent = _recent(s, c.window)
    value = 1.0 if np.allclose(recent.to_numpy(), 0.0) else 0.0
    return _result(spec, value, f"the mean reward of steps {recent.index[0]}..{recent.index[-1]} is "
                   f"{recent.mean():.3g}" + (" on every step" if value else ""), series=(s == 0).astype(float))


def no_signal_groups(c: _Ctx, spec: CheckSpec) -> CheckResult:
    d = c.data
    if not len(d.records):
        s = d.scalar("train/baseline_reward/pct_0")
        if s.empty:
            return _skip(spec, "no records and no train/baseline_reward/pct_0 scalar yet")
        ones = d.scalar("train/baseline_reward/pct_1").reindex(s.index).fillna(0.0)
        both = s + ones
        value = float(_recent(both, c.window).mean())
        msg = f"{value:.0%} of the groups of the recent steps got all-0 or all-1 rewards"
        top = float(_recent(ones, c.window).mean())
        if value and top / value > 0.5 and spec.level(value)[0] != "ok":
            return _result(spec, value, msg + f" ({top / value:.0%} of them all-1: the task is solved; move on, or make "
                           "it harder: harder prompts, more generations per prompt)", series=both, status="solved")
        return _result(spec, value, msg, series=both)
    codes, _ = pd.factorize(d.records["prompt"], use_na_sentinel=False)  # int keys: a fast groupby
    work = pd.DataFrame({"step": d.meta["step"].to_numpy(), "group": codes, "reward": d.reward.to_numpy()})
    groups = work.groupby(["step", "group"], sort=False)["reward"].agg(["min", "max", "size"]).reset_index()
    groups = groups[groups["size"] > 1]
    if groups.empty:
        return _skip(spec, "one sample per prompt: no GRPO groups")
    groups["flat"] = np.isclose(groups["min"], groups["max"])
    share = groups.groupby("step")["flat"].mean()
    steps = list(_recent(share, c.window).index)
    recent = groups[groups["step"].isin(steps)]
    value = float(recent["flat"].mean())
    top = float(d.reward.max())
    at_top = recent["flat"] & np.isclose(recent["min"], top) & (top > 0)
    solved = float(at_top.sum() / max(1, recent["flat"].sum()))
    msg = f"{value:.0%} of the groups of steps {steps[0]}..{steps[-1]} got the same reward on every sample"
    status = None
    if spec.level(value)[0] == "warning":
        rewards = work.loc[work["step"].isin(steps), "reward"].to_numpy(dtype="float64")
        expected, p = _chance_flat(rewards, recent["size"].to_numpy(), int(recent["flat"].sum()))
        n = "/".join(str(k) for k in sorted(recent["size"].unique()))
        msg += f"; {expected:.0%} expected by chance for groups of {n} with these rewards (p={p:.2g})"
        if p >= _ALPHA:  # as many flat groups as independent samples give: a fact of the group size, not a fault
            msg += ": more generations per prompt would give more groups a signal"
            status = "ok"
    if solved > 0.5 and spec.level(value)[0] != "ok":
        msg += (f" ({solved:.0%} of them at the top reward {top:g}: the task is solved; move on, or make it harder: "
                "harder prompts, more generations per prompt)")
        status = "solved"  # not broken: nothing left to learn from these prompts, which is a result, not a warning
    flat = groups[groups["flat"] & groups["step"].isin(steps)].head(1)
    ex = []
    if len(flat):
        st, grp = flat.iloc[0]["step"], flat.iloc[0]["group"]
        ex = _examples(d.meta, (work["step"] == st).to_numpy() & (codes == grp), c.examples)
    return _result(spec, value, msg, series=share, examples=ex, status=status)


_ALPHA = 0.01  # one-sided significance of the flat-group excess before no-signal-groups warns


def _chance_flat(rewards: np.ndarray, sizes: np.ndarray, flat: int) -> tuple[float, float]:
    """(expected share of all-equal groups, P(at least ``flat`` of them)) if samples were independent draws.

    Why: with n samples a group is flat by chance with probability sum_v q_v^n over the reward values v of the
    window (binary: p^n + (1-p)^n): 4 samples at a 20% success rate leave 41% of the groups flat in a healthy run.
    The count of flat groups is then Poisson-binomial; its upper tail (exact, by convolution) says whether the run
    has more flat groups than its group size and reward mix explain (identical samples, prompts all too easy or too
    hard), which is what the fix (temperature, data difficulty) acts on.
    """
    _, counts = np.unique(np.round(rewards[np.isfinite(rewards)], 6), return_counts=True)
    q = counts / max(1, counts.sum())
    chance = np.array([float(np.sum(q ** int(n))) for n in sizes])
    pmf = np.zeros(len(chance) + 1)
    pmf[0] = 1.0
    for e in chance:
        pmf[1:] = pmf[1:] * (1 - e) + pmf[:-1] * e
        pmf[0] *= 1 - e
    return float(chance.mean()), float(min(1.0, pmf[flat:].sum()))


def _parsers(data: RunData) -> list[tuple[str, Callable[[str], bool]]]:
    """(label, response -> parseable) for what the reward functions read (default: an answer tag or \\boxed{})."""
    from nbtools.health._contract import parse_targets, target_label

    targets = parse_targets(data.mix) if data.mix is not None else None
    if not targets:
        targets = [("tag", data.answer_tag), ("boxed", "")]
    return [(target_label(kind, arg), _parser(kind, arg)) for kind, arg in targets]


def _parser(kind: str, arg: str) -> Callable[[pa.Array], pa.Array]:
    """A vectorised test (RE2: linear time) of NeMo-RL's ``<tag>[\\s\\S]*</tag>`` search, of a ``\\boxed``, or of
    GSM8K's ``#### N`` answer line (verl's rule, anywhere in the response: its 300-character window is not applied)."""
    if kind == "tag":
        pattern = re.escape(f"<{arg}>") + r"[\s\S]*" + re.escape(f"</{arg}>")
    elif kind == "gsm8k":
        pattern = r"#### -?[0-9.,]"
    else:
        pattern = r"\\boxed[{ ]"
    return lambda arr: pc.fill_null(pc.match_substring_regex(arr, pattern), False)


def answer_format(c: _Ctx, spec: CheckSpec) -> CheckResult:
    d = c.data
    if not len(d.records):
        return _skip(spec, "no records yet")
    parsers = _parsers(d)
    arr = pa.array(d.records["response"], from_pandas=True)
    ok = np.zeros(len(arr), dtype=bool)
    for _, p in parsers:
        ok |= p(arr).to_numpy(zero_copy_only=False)
    bad = per_step(d.meta, ~ok)
    steps = list(_recent(bad, c.window).index)
    value = float(bad.loc[steps].mean())
    what = " or ".join(label for label, _ in parsers)
    return _result(spec, value, f"{value:.0%} of the responses of steps {steps[0]}..{steps[-1]} have no {what}",
                   series=bad, examples=_examples(d.meta, ~ok, c.examples, latest=True))


def truncation(c: _Ctx, spec: CheckSpec) -> CheckResult:
    d = c.data
    s = d.scalar(*_tags("truncation"))
    lengths = d.meta["generation_length"] if len(d.records) else None
    at_limit = None
    if d.limit is not None and lengths is not None and lengths.notna().any():
        at_limit = (lengths >= d.limit).to_numpy()
    if s.empty and at_limit is not None:
        s = per_step(d.meta, at_limit)
    if s.empty:
        return _skip(spec, "no train/truncation_rate scalar, and no generation limit known (pass the experiment: "
                           "--config EXPERIMENT.yaml)")
    recent = _recent(s, c.window)
    value = float(recent.mean())
    lim = f" of {d.limit} tokens" if d.limit is not None else ""
    ex = _examples(d.meta, at_limit, c.examples, latest=True) if at_limit is not None else []
    if not ex and lengths is not None and lengths.notna().any():  # the longest of the latest step
        last = d.meta[d.meta["step"] == d.meta["step"].max()]
        ex = [Example(int(r.step), int(r.idx)) for r in last.nlargest(c.examples, "generation_length").itertuples()]
    return _result(spec, value, f"{value:.0%} of the generations of steps {recent.index[0]}..{recent.index[-1]} hit "
                   f"the generation limit{lim}", series=s, examples=ex)


def _sampled_mismatch(d: RunData, window: int, per: int = 8) -> tuple[pd.Series, list[tuple[float, Example]]]:
    """mean exp(|generation_logprobs - prev_logprobs|) over generated tokens, for a few records of recent steps."""
    out, scored = {}, []
    for step in d.meta["step"].drop_duplicates().sort_values().iloc[-window:]:
        idxs = d.meta.loc[d.meta["step"] == step, "idx"].to_numpy()[:per]
        vals = []
        for i in idxs:
            try:
                rec = d.run.record(int(step), int(i), arrays=True)
            except Exception:  # noqa: BLE001 - an unreadable record is the reader's report; use the others
                continue
            g, p, m = rec.get("generation_logprobs"), rec.get("prev_logprobs"), rec.get("token_loss_mask")
            if g is None or p is None:
                continue
            n = min(len(g), len(p))
            mask = (np.asarray(m[:n]) > 0) if m is not None else (np.asarray(g[:n]) != 0)
            if not mask.any():
                continue
            err = float(np.exp(np.abs(np.asarray(g[:n], float) - np.asarray(p[:n], float)))[mask].mean())
            vals.append(err)
            scored.append((err, Example(int(step), int(i))))
        if vals:
            out[int(step)] = float(np.mean(vals))
    return pd.Series(out, dtype="float64"), scored


def logprob_mismatch(c: _Ctx, spec: CheckSpec) -> CheckResult:
    d = c.data
    s = d.scalar("train/token_mult_prob_error")
    source, scored = "train/token_mult_prob_error", []
    if s.empty and d.run is not None and len(d.records):
        s, scored = _sampled_mismatch(d, c.window)
        source = "generation_logprobs vs prev_logprobs of sampled records"
    if s.empty:
        return _skip(spec, "no train/token_mult_prob_error scalar and no records with both logprob arrays")
    recent = _recent(s, c.window)
    value = float(recent.mean())
    ex = [e for _, e in sorted(scored, key=lambda t: -t[0])[: c.examples]]
    return _result(spec, value, f"train/inference probability ratio {value:.3f} over steps {recent.index[0]}.."
                   f"{recent.index[-1]} ({source})", series=s, examples=ex)


def _lengths(d: RunData) -> pd.Series:
    if len(d.records) and d.meta["generation_length"].notna().any():
        return d.meta.groupby("step")["generation_length"].mean().dropna()
    return d.scalar("train/mean_gen_tokens_per_sample", "response_length/mean")


def _length_ratio(c: _Ctx, spec: CheckSpec, label: str) -> CheckResult:
    d = c.data
    s = _lengths(d)
    if len(s) < 2 * c.window:
        return _skip(spec, f"{len(s)} step(s) of generation lengths; the check compares the first {c.window} with the "
                           f"last {c.window}")
    early = float(s.iloc[: c.window].mean())
    if early <= 0:
        return _skip(spec, "the first steps generated nothing")
    ratio = s / early
    recent = _recent(s, c.window)
    value = float(recent.mean() / early)
    ex = []
    if len(d.records):
        last = d.meta[d.meta["step"] == d.meta["step"].max()]
        pick = last.nsmallest if label == "collapse" else last.nlargest
        ex = [Example(int(r.step), int(r.idx)) for r in pick(c.examples, "generation_length").itertuples()]
    return _result(spec, value, f"mean generation length {recent.mean():.1f} over steps {recent.index[0]}.."
                   f"{recent.index[-1]} vs {early:.1f} over the first {c.window} steps ({value:.2f}×)",
                   series=ratio, examples=ex)


def length_collapse(c: _Ctx, spec: CheckSpec) -> CheckResult:
    return _length_ratio(c, spec, "collapse")


def length_runaway(c: _Ctx, spec: CheckSpec) -> CheckResult:
    return _length_ratio(c, spec, "runaway")


_ENTROPY_FLOOR = 0.1  # nats per token: a near-greedy policy's entropy (0.001 -> 0.02) is not a blow-up


def entropy_blowup(c: _Ctx, spec: CheckSpec) -> CheckResult:
    """Recent mean entropy over the first steps' (at least ``_ENTROPY_FLOOR``), read under the trainer's own entropy
    tag (the registry's)."""
    s = c.data.scalar(*_tags("entropy"))
    if len(s) < 2 * c.window:
        return _skip(spec, f"{len(s)} step(s) of the policy's entropy ({' or '.join(_tags('entropy'))}); the check "
                           f"compares the first {c.window} with the last {c.window}")
    first = float(s.iloc[: c.window].mean())
    early = max(first, _ENTROPY_FLOOR)
    recent = _recent(s, c.window)
    value = float(recent.mean() / early)
    base = f"{first:.3g} over the first {c.window} steps" + (f" (compared with the floor {early:g})" if early > first
                                                               else "")
    return _result(spec, value, f"mean entropy {recent.mean():.3g} over steps {recent.index[0]}..{recent.index[-1]} "
                   f"vs {base} ({value:.2f}×)", series=s / early)


def kl_runaway(c: _Ctx, spec: CheckSpec) -> CheckResult:
    s = c.data.scalar("train/kl_penalty", "actor/kl_loss", "actor/ppo_kl")
    if s.empty:
        return _skip(spec, "no KL scalar logged (train/kl_penalty)")
    recent = _recent(s, c.window)
    value = float(recent.mean())
    return _result(spec, value, f"mean KL {value:.3g} over steps {recent.index[0]}..{recent.index[-1]} (largest "
                   f"{s.max():.3g} at step {int(s.idxmax())})", series=s)


def reward_stalled(c: _Ctx, spec: CheckSpec, min_steps: int = 20) -> CheckResult:
    d = c.data
    s = (d.reward.groupby(d.meta["step"].to_numpy()).mean().dropna() if len(d.records)
         else d.scalar("train/reward", "critic/score/mean"))
    w = max(c.window, 10)
    if len(s) < max(min_steps, 2 * w):
        return _skip(spec, f"{len(s)} step(s); the check needs {max(min_steps, 2 * w)} to call a trend")
    early, recent = float(s.iloc[:w].mean()), _recent(s, w)
    value = float(recent.mean() - early)
    signal = c.memo.get("no-signal-groups") or no_signal_groups(c, CHECKS["no-signal-groups"])
    if signal.value is not None and signal.value >= CHECKS["no-signal-groups"].unhealthy:
        return _result(spec, value, "no signal to learn from (see no-signal-groups)", status="ok")
    return _result(spec, value, f"mean reward {recent.mean():.3g} over steps {recent.index[0]}..{recent.index[-1]} vs "
                   f"{early:.3g} over the first {w} steps (+{value:.3g})", series=s - early)


def _tags(metric: str) -> tuple[str, ...]:
    """The tags every trainer logs ``metric`` under (each registered layout's names, e.g. accuracy: NeMo-RL's
    ``validation/accuracy``, verl's ``val-core/<data source>/acc/mean@<n>``), so a check runs on whichever trainer
    wrote the run without naming one."""
    return tuple(t for lay in _trainer_folders.layouts().values() for t in lay.metric_names.get(metric, ()))


def _val_samples(d: RunData, step: int) -> int | None:
    """How many prompts the run validated on at ``step``: the lines of its own validation dump (None without one)."""
    run = d.run
    try:
        if run is not None and step in getattr(run, "val_steps", []):
            if hasattr(run, "index"):  # NeMo-RL's reader counts the lines from its index, without parsing them
                return int(run.index(step, kind="val").n_lines) or None
            return sum(1 for _ in run.iter_records(step, kind="val")) or None  # verl's: the dump's records
    except Exception:  # noqa: BLE001 - a dump that cannot be read leaves the check on its threshold alone
        return None
    return None


def _noise(best: float, last: float, n: int | None) -> float | None:
    """Two standard errors of the difference of two accuracies measured on ``n`` samples each (None: n unknown)."""
    if not n:
        return None
    var = (best * (1 - best) + last * (1 - last)) / n
    return 2.0 * float(np.sqrt(var))


def val_divergence(c: _Ctx, spec: CheckSpec) -> CheckResult:
    d = c.data
    val = d.scalar(*_tags("accuracy"))
    if len(val) < 3:
        return _skip(spec, f"{len(val)} validation point(s); the check needs 3")
    train = d.scalar("train/reward", "critic/score/mean")
    if train.empty and len(d.records):
        train = d.reward.groupby(d.meta["step"].to_numpy()).mean().dropna()
    best_step = int(val.idxmax())
    drop = float(val.max() - val.iloc[-1])
    at_best = train[train.index <= max(best_step, int(train.index.min()) if len(train) else 0)]
    rose = len(train) and len(at_best) and float(_recent(train, c.window).mean()) > float(at_best.iloc[-min(
        c.window, len(at_best)):].mean())
    series = val.cummax() - val
    n = _val_samples(d, int(val.index[-1]))
    noise = _noise(float(val.max()), float(val.iloc[-1]), n)
    if noise is not None and drop <= noise:  # within the sampling noise of two accuracies over n prompts each
        return _result(spec, drop, f"validation accuracy {val.iloc[-1]:.3g} at step {int(val.index[-1])} vs its best "
                       f"{val.max():.3g} at step {best_step}: within the noise of {n} validation samples "
                       f"(2 standard errors: {noise:.3g})", status="ok", series=series)
    if drop < (spec.warning or 0.0):
        return _result(spec, drop, f"validation accuracy {val.iloc[-1]:.3g} at step {int(val.index[-1])} (best "
                       f"{val.max():.3g} at step {best_step})", status="ok", series=series)
    if not rose:
        return _result(spec, drop, f"validation accuracy {val.iloc[-1]:.3g} at step {int(val.index[-1])} vs its best "
                       f"{val.max():.3g} at step {best_step}; training reward did not rise meanwhile", status="ok",
                       series=series)
    return _result(spec, drop, f"validation accuracy fell from {val.max():.3g} (step {best_step}) to "
                   f"{val.iloc[-1]:.3g} (step {int(val.index[-1])}) while training reward rose", series=series)


_FUNCS: dict[str, Callable[[_Ctx, CheckSpec], CheckResult]] = {
    "zero-reward": zero_reward, "no-signal-groups": no_signal_groups, "answer-format": answer_format,
    "truncation": truncation, "logprob-mismatch": logprob_mismatch, "length-collapse": length_collapse,
    "length-runaway": length_runaway, "entropy-blowup": entropy_blowup, "kl-runaway": kl_runaway, "reward-stalled": reward_stalled,
    "val-divergence": val_divergence,
}


def run_checks(data: RunData, *, thresholds: dict | None = None, checks=None, window: int = 5,
               examples: int = 5, warmup: int = 0) -> list[CheckResult]:
    """Every check (or ``checks``) on ``data``, with ``thresholds`` replacing the defaults, each result judged by the
    rules of :mod:`nbtools.health._evidence` on what that check read."""
    from nbtools.errors import ConfigError

    specs = dict(CHECKS)
    problems = []
    for name, t in (thresholds or {}).items():
        if name not in specs:
            problems.append(f"thresholds: unknown check {name!r}; the checks are {list(specs)}")
            continue
        if isinstance(t, (int, float)):
            t = {"unhealthy": float(t)}
        elif isinstance(t, (tuple, list)) and len(t) == 2:
            t = {"warning": t[0], "unhealthy": t[1]}
        if not isinstance(t, dict) or set(t) - {"warning", "unhealthy"}:
            problems.append(f"thresholds[{name!r}]: expected a number (the unhealthy level), a (warning, unhealthy) "
                            f"pair or {{'warning': x, 'unhealthy': y}}, got {t!r}")
            continue
        try:
            levels = {k: (None if v is None else float(v)) for k, v in t.items()}
        except (TypeError, ValueError):
            levels = {"unhealthy": float("nan")}
        if any(v is not None and not math.isfinite(v) for v in levels.values()):
            problems.append(f"thresholds[{name!r}]: expected finite numbers (or None: never), got {t!r}; a NaN level "
                            "is never crossed, so the check could never fail")
            continue
        specs[name] = replace(specs[name], **levels)
    names = list(checks) if checks else list(specs)
    problems += [f"checks: unknown check {n!r}; the checks are {list(specs)}" for n in names if n not in specs]
    if window < 1:
        problems.append(f"window: expected 1 or more steps, got {window}")
    if not isinstance(warmup, int) or warmup < 0:
        problems.append(f"warmup: expected 0 or more steps, got {warmup!r}")
    if problems:
        raise ConfigError(problems)
    ctx = _Ctx(data, window, examples)
    out = []
    n_steps = len(data.steps)
    for n in names:
        data.read.clear()
        own = _FUNCS[n](ctx, specs[n])
        ctx.memo[n] = own  # other checks reuse the check's own finding
        out.append(judge(own, nonfinite(data, set(data.read), window), n_steps, warmup))
    return out
