"""After a CUDA out-of-memory: which phase and term overflowed, and the smallest change that fits.

Why: "CUDA out of memory. Tried to allocate 16.00 GiB" names a size, not a cause. The fit estimate for the run's
config knows every allocation of that size (the fp32 ``[B, L, V]`` logits, a gathered layer, an AdamW temporary), so
the failing allocation points at a phase and a term, and the estimate's candidates give the smallest config change
that fits - as the config key and as the CLI's ``KEY=VALUE`` override.

Example:
    >>> pm = nbtools.fit.postmortem(log_text, cfg)
    >>> pm.phase, pm.term, pm.fix.override
    ('loss_backward', 'logits_fp32', "trainer.overrides=['policy.train_micro_batch_size=1']")
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field
from typing import Any

from nbtools.fit._estimate import (
    FitInputs,
    FitReport,
    evaluate,
    generation_candidates,
    training_candidates,
)
from nbtools.fit._verdict import Verdict

__all__ = ["OomMessage", "OomFix", "OomPostmortem", "parse_oom", "postmortem", "postmortem_inputs"]

GIB = 1024**3
_UNIT = {"B": 1 / GIB, "bytes": 1 / GIB, "KiB": 1 / 1024**2, "MiB": 1 / 1024, "GiB": 1.0, "TiB": 1024.0}
_NUM = r"([\d.]+) (bytes|B|KiB|MiB|GiB|TiB)"
_FIELDS = {
    "tried_gib": re.compile(r"Tried to allocate " + _NUM),
    "capacity_gib": re.compile(r"total capacity of " + _NUM),
    "free_gib": re.compile(r"of which " + _NUM + r" is free"),
    "in_use_gib": re.compile(r"this process has " + _NUM + r" memory in use"),
    "allocated_gib": re.compile(r"Of the allocated memory " + _NUM + r" is allocated by PyTorch"),
    "stranded_gib": re.compile(r"and " + _NUM + r" is reserved by PyTorch but unallocated"),
}
_OOM_LINE = re.compile(r"CUDA out of memory|OutOfMemoryError|CUDA error: out of memory|CUBLAS_STATUS_ALLOC_FAILED")

# where each changeable input is set comes from the trainer (``FitInputs.profile.override_keys``); a key under
# one of these prefixes is a recipe key that travels in trainer.overrides, the others are the experiment's own keys
_RECIPE_PREFIXES = ("policy.", "actor_rollout_ref.", "data.", "grpo.", "loss_fn.")


@dataclass(frozen=True)
class OomMessage:
    """The sizes PyTorch's out-of-memory message states (GiB; None where the message does not say)."""

    line: str
    tried_gib: float | None = None
    capacity_gib: float | None = None
    free_gib: float | None = None
    in_use_gib: float | None = None
    allocated_gib: float | None = None
    stranded_gib: float | None = None  # reserved by PyTorch but unallocated


@dataclass(frozen=True)
class OomFix:
    """One change: the input, its new value, the config key, the CLI override, and the estimate it gives."""

    field: str
    value: Any
    config_key: str
    override: str
    verdict: str
    need_gib: float
    usable_gib: float

    @property
    def assignment(self) -> str:
        """``config_key=value`` as the config file spells it."""
        return f"{self.config_key}={_show(self.value, self.field)}"

    def __str__(self) -> str:
        return (f"{self.assignment} -> {self.verdict} (need {self.need_gib:.1f} of "
                f"{self.usable_gib:.1f} GiB); CLI: {self.override}")


@dataclass
class OomPostmortem:
    """Which phase and term overflowed at the failing allocation, and the smallest change that fits."""

    message: OomMessage
    phase: str  # loss_backward | layer_backward | optimizer | logprob | generation | unknown
    term: str  # the estimate's largest term in that phase
    term_gib: float
    allocation: str  # what the failing allocation is, when its size matches one the estimate knows
    report: FitReport | None
    fix: OomFix | None
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {"message": asdict(self.message), "phase": self.phase, "term": self.term, "term_gib": self.term_gib,
                "allocation": self.allocation, "fix": asdict(self.fix) if self.fix else None,
                "verdict": self.report.verdict if self.report else None,
                "peak_gib": self.report.training.peak_gib if self.report and self.report.training else None,
                "notes": self.notes}

    def summary(self) -> str:
        m = self.message
        lines = ["out-of-memory post-mortem:"]
        if m.tried_gib is not None:
            lines.append(f"  failing allocation {m.tried_gib:.2f} GiB" + (f" = {self.allocation}" if self.allocation else "")
                         + (f"; {m.allocated_gib:.2f} GiB allocated, {m.stranded_gib:.2f} GiB reserved but unallocated"
                            if m.allocated_gib is not None and m.stranded_gib is not None else ""))
        lines.append(f"  phase {self.phase}: largest term {self.term} ({self.term_gib:.2f} GiB)")
        if self.fix:
            lines.append(f"  smallest change that fits: {self.fix}")
        lines += [f"  note: {n}" for n in self.notes]
        return "\n".join(lines)

    __str__ = summary


def _show(value: Any, name: str = "") -> str:
    if name == "expandable_segments":
        return "expandable_segments:True"
    if value is None:
        return "null"
    return str(value).lower() if isinstance(value, bool) else str(value)


def parse_oom(text: str) -> OomMessage | None:
    """The last CUDA out-of-memory line of ``text`` and its sizes (None when there is none)."""
    lines = [ln for ln in (text or "").splitlines()[-5000:] if _OOM_LINE.search(ln[:20000])]
    if not lines:
        return None
    sized = [ln for ln in lines if "Tried to allocate" in ln]  # Ray's own summary line repeats the error's name only
    line = (sized or lines)[-1][:4000]
    vals: dict[str, float] = {}
    for name, rx in _FIELDS.items():
        m = rx.search(line)
        if m:
            vals[name] = round(float(m.group(1)) * _UNIT[m.group(2)], 4)
    return OomMessage(line=line.strip(), **vals)


def _known_allocations(i: FitInputs) -> list[tuple[str, str, str, float]]:
    """``(phase, term, description, GiB)`` of the single allocations the estimate models, per GPU."""
    a, tp, cp = i.arch, max(1, i.tensor_parallel), max(1, i.context_parallel)
    b, L, v, h = i.micro_batch, i.seq_len, a.vocab_size, a.hidden_size
    blp = i.logprob_batch or b
    w = max(1, i.gpus)
    t = b * L // cp
    out = [
        ("loss_backward", "logits_fp32", f"the fp32 logits [{b}, {L}, {v}] of a training micro-batch", 4 * b * L * v / (tp * cp)),
        ("loss_backward", "logits_fp32", f"the fp32 log-softmax [{b}, {L - 1}, {v}] of a training micro-batch",
         4 * b * (L - 1) * v / (tp * cp)),
        ("loss_backward", "logits_fp32", f"the bf16 logits [{b}, {L}, {v}] (LM head output)", 2 * b * L * v / (tp * cp)),
        ("logprob", "logits_fp32", f"the fp32 logits [{blp}, {L}, {v}] of the log-prob pass", 4 * blp * L * v / (tp * cp)),
        ("layer_backward", "gathered_bf16_params", "one decoder layer gathered in bf16", 2 * a.params_layer / tp),
        ("layer_backward", "backward_buffers", "one layer's fp32 gradient reduce-scatter input", 4 * a.params_layer / tp),
        ("layer_backward", "gathered_bf16_params", "the embedding / LM head gathered in bf16", 2 * v * h / tp),
        ("optimizer", "optimizer_step_temp", "an AdamW temporary of the embedding's shard", 4 * v * h / (tp * w)),
        ("layer_backward", "activations", f"an MLP activation [{b}, {L}, {a.intermediate_size}] in bf16",
         2 * t * a.intermediate_size / tp),
        ("layer_backward", "activations", f"a hidden state [{b}, {L}, {h}] in fp32", 4 * t * h),
    ]
    return [(p, term, d, x / GIB) for p, term, d, x in out]


def _match(i: FitInputs, tried: float | None) -> tuple[str, str, str] | None:
    if not tried:
        return None
    best = min(_known_allocations(i), key=lambda k: abs(k[3] - tried) / max(k[3], 1e-9))
    if abs(best[3] - tried) <= 0.03 * max(best[3], 1e-9) + 0.01:
        return best[0], best[1], best[2]
    return None


def _override(i: FitInputs, cfg: Any, key: str, value: Any, name: str) -> str:
    shown = _show(value, name)
    bare = key.lstrip("+")  # a Hydra add (+) or add-or-override (++) of a recipe key travels the same way
    if bare.startswith(_RECIPE_PREFIXES):
        existing = [o for o in (getattr(getattr(cfg, "trainer", None), "overrides", None) or [])
                    if o.split("=", 1)[0].lstrip("+~") != bare]
        items = existing + [f"{key}={shown}"]
        return "trainer.overrides=[" + ", ".join("'" + s.replace("'", "''") + "'" for s in items) + "]"
    return f"{key}={shown}"


def _fix(i: FitInputs, rep: FitReport, side: str, cfg: Any) -> OomFix | None:
    cands = training_candidates(i, rep.training.peak_phase if rep.training else "") if side == "training" \
        else generation_candidates(i)
    tight = None
    for name, value, inp in cands:
        key = i.profile.override_keys.get(name)
        if key is None:
            continue
        r = evaluate(inp, suggest=False)
        if side == "training":
            v = r.training_verdict()
            need, usable = r.training_need_gib, r.usable_gib
        else:
            v = r.generation.verdict
            need, usable = r.generation.budget_gib - r.generation.kv_cache_gib, r.generation.budget_gib
        if name == "gpus":
            from nbtools.fit._estimate import _nodes_for

            value = _nodes_for(i, value)
        fix = OomFix(name, value, key, _override(i, cfg, key, value, name), v, round(need, 2), round(usable, 2))
        if v == Verdict.FITS:
            return fix
        if v == Verdict.TIGHT and tight is None:
            tight = fix
    return tight


def _fix_for(i: FitInputs, name: str, value: Any, cfg: Any) -> OomFix | None:
    key = i.profile.override_keys.get(name)
    if key is None:
        return None
    r = evaluate(i.with_(**{name: value}), suggest=False)
    v = r.training_verdict()
    return OomFix(name, value, key, _override(i, cfg, key, value, name), v, round(r.training_need_gib, 2),
                  round(r.usable_gib, 2))


def postmortem_inputs(i: FitInputs, text: str, cfg: Any = None) -> OomPostmortem | None:
    """The post-mortem of an out-of-memory ``text`` (a log or the OOM line) for the run's :class:`FitInputs`."""
    msg = parse_oom(text)
    if msg is None:
        return None
    notes: list[str] = []
    if msg.capacity_gib and abs(msg.capacity_gib - i.gpu.gib) > 0.05 * i.gpu.gib:
        notes.append(f"the message's GPU has {msg.capacity_gib:.1f} GiB, the config's {i.gpu.label} {i.gpu.gib:.1f} "
                     "GiB: the estimate uses the config's GPU")
    rep = evaluate(i.with_(phase="both" if i.phase == "both" else i.phase), suggest=False)
    found = _match(i, msg.tried_gib)
    if found is not None and rep.training is not None:
        phase, owner, allocation = found
        terms = rep.training.phase_terms.get(phase) or rep.training.terms
    elif rep.training is not None:
        phase, owner, allocation = rep.training.peak_phase, "", ""
        terms = rep.training.terms
        if msg.tried_gib is not None:
            notes.append(f"{msg.tried_gib:.2f} GiB matches no single allocation the estimate models; the phase is "
                         "the estimate's peak")
    else:
        phase, owner, allocation, terms = "unknown", "", "", {}
    term = max(terms, key=terms.get) if terms else owner or "unknown"
    if owner and owner != term:
        notes.append(f"the failing allocation belongs to {owner} ({terms.get(owner, 0):.2f} GiB in {phase})")
    side = "training"
    if rep.generation is not None and rep.generation.verdict == Verdict.DOES_NOT_FIT and (
            rep.training is None or rep.training.peak_gib <= rep.usable_gib):
        side, phase, term = "generation", "generation", "kv_cache"
    fix = _fix(i, rep, side, cfg)
    if rep.training is not None and side == "training" and rep.verdict != Verdict.DOES_NOT_FIT:
        notes.append(f"the estimate says this config fits (need {rep.training_need_gib:.1f} of {rep.usable_gib:.1f} GiB): "
                     "the run held more than estimated" + (
                         f" - {msg.stranded_gib:.2f} GiB reserved but unallocated (blocks the caching allocator "
                         "stranded)" if msg.stranded_gib else ""))
        if msg.stranded_gib and msg.tried_gib and not i.expandable_segments:
            fix = next((f for f in [_fix_for(i, "expandable_segments", True, cfg)] if f), fix)
    if fix is None:
        notes.append("no single change of micro-batch, checkpointing, allocator, GPUs or length fits; combine them "
                     "(nbtools fit lists the terms)")
    return OomPostmortem(msg, phase, term, round(float(terms.get(term, 0.0)), 3), allocation, rep, fix, notes)


def postmortem(text: str, cfg: Any) -> OomPostmortem | None:
    """The post-mortem of a job log that ended in a CUDA out-of-memory, for the experiment ``cfg`` that ran it.

    Returns None when ``text`` holds no CUDA out-of-memory line. Without ``cfg`` (a log alone) the message's sizes
    are all there is: the result names no term (pass the experiment to get one).
    """
    from nbtools._gpus import GPUS
    from nbtools.errors import NbtoolsError
    from nbtools.fit._experiment import inputs_from_experiment

    def sizes_only(note: str) -> OomPostmortem | None:
        msg = parse_oom(text)
        return None if msg is None else OomPostmortem(msg, "unknown", "unknown", 0.0, "", None, None, [note])

    if cfg is None:
        return sizes_only("no experiment given: pass --experiment EXPERIMENT.yaml (and the run's KEY=VALUE "
                          "overrides) to name the phase, the term and the change that fits")
    try:
        read = inputs_from_experiment(cfg)
    except NbtoolsError as e:  # e.g. the model's config.json cannot be read from here: the diagnosis still stands
        return sizes_only(f"no memory estimate for this experiment ({e})")
    if read is None:
        return sizes_only("the CPU rehearsal runs on no GPU, so there is no GPU memory estimate to compare with")
    inputs, notes = read
    msg = parse_oom(text)
    if msg is not None and msg.capacity_gib and abs(msg.capacity_gib - inputs.gpu.gib) > 0.03 * inputs.gpu.gib:
        # the message knows the card the job really ran on (torch reports a little under the spec's figure)
        near = min(GPUS.values(), key=lambda g: abs(g.gib - msg.capacity_gib))
        if abs(near.gib - msg.capacity_gib) <= 0.02 * near.gib:
            notes.append(f"the message's GPU has {msg.capacity_gib:.2f} GiB: estimated for {near.label}, not the "
                         f"config's {inputs.gpu.label}")
            inputs = inputs.with_(gpu=near)
    pm = postmortem_inputs(inputs, text, cfg)
    if pm is not None:
        pm.notes = notes + pm.notes
    return pm
