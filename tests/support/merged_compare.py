"""Test helper: compare two merged HuggingFace directories' tensors, naming every way they differ (the oracle tests'
judge of nbtools' merge against the upstream trainer's own merger or weights)."""

from __future__ import annotations

from pathlib import Path

import torch


def tensors(d: str | Path) -> dict[str, torch.Tensor]:
    """Every tensor of every ``*.safetensors`` file in ``d``."""
    from safetensors.torch import load_file

    return {k: v for f in sorted(Path(d).glob("*.safetensors")) for k, v in load_file(f).items()}


def diff(ours: dict[str, torch.Tensor], theirs: dict[str, torch.Tensor], *, cast: torch.dtype | None = None) -> list[str]:
    """Every way two state dicts differ (names, shapes, dtypes, values), [] when equal bit for bit; ``cast`` first
    casts ``ours`` (verl's merger writes bfloat16)."""
    problems = [f"only in ours: {k}" for k in sorted(set(ours) - set(theirs))]
    problems += [f"only in theirs: {k}" for k in sorted(set(theirs) - set(ours))]
    for k in sorted(set(ours) & set(theirs)):
        a, b = ours[k], theirs[k]
        a = a.to(cast) if cast is not None else a
        if a.shape != b.shape:
            problems.append(f"{k}: shape {list(a.shape)} != {list(b.shape)}")
        elif a.dtype != b.dtype:
            problems.append(f"{k}: dtype {a.dtype} != {b.dtype}")
        elif not torch.equal(a, b):
            problems.append(f"{k}: values differ (max |d| {(a.float() - b.float()).abs().max().item():.3g})")
    return problems


def mutants(good: dict[str, torch.Tensor], square: str, rows: str, split: int) -> dict[str, dict[str, torch.Tensor]]:
    """Wrong merges of ``good``: ``square`` transposed (same shape), renamed and re-typed; ``rows`` with its two ranks'
    halves swapped at ``split``, and with one rank's rows twice."""
    r = good[rows]
    return {
        "transposed": {**good, square: good[square].t().contiguous()},
        "renamed": {**{k: v for k, v in good.items() if k != square}, square + ".renamed": good[square]},
        "re-typed": {**good, square: good[square].double()},
        "ranks swapped": {**good, rows: torch.cat([r[split:], r[:split]])},
        "one rank twice": {**good, rows: torch.cat([r[:split], r[: r.shape[0] - split]])},
    }
