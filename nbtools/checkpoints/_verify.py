"""Verification: tensors vs the model built on the meta device from config.json, checksums, reference compare."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd
import torch

from nbtools import _paths
from nbtools._escape import html as _h
from nbtools.checkpoints._sources import ST_DTYPES, read_safetensors_header
from nbtools.errors import CheckpointError, Fix

__all__ = ["expected_tensors", "check_against_config", "verify", "verify_against", "VerifyReport", "MANIFEST", "SUMS",
           "CHECKSUMS", "new_hash", "file_digest"]

MANIFEST = "checksums.json"
SUMS = "SHA256SUMS"


def expected_tensors(config) -> tuple[dict[str, tuple[tuple[int, ...], bool]], dict[str, str]]:
    """{name: (shape, is_floating)} the architecture expects in a checkpoint, and its tied keys {target: source}."""
    from transformers import AutoModel, AutoModelForCausalLM

    try:
        with torch.device("meta"):
            try:
                model = AutoModelForCausalLM.from_config(config)
            except ValueError:
                model = AutoModel.from_config(config)
    except Exception as e:  # noqa: BLE001 - transformers raises many types for unknown/invalid configs
        raise CheckpointError(f"cannot build the model from config.json ({type(e).__name__}: {e})",
                              fix=Fix("pass config= with the base model's config.json (a directory or file)",
                                      cli="pass --config PATH with the base model's config.json (a directory or file)")) from None
    tied = dict(getattr(model, "all_tied_weights_keys", None) or {})
    exp = {k: (tuple(v.shape), v.dtype.is_floating_point) for k, v in model.state_dict().items() if k not in tied}
    return exp, tied


def check_against_config(got: Mapping[str, tuple[tuple[int, ...], torch.dtype]], config, *,
                         expected: dict | None = None) -> list[str]:
    """Every problem between the checkpoint's tensors and the config's model: missing, extra, shape, dtype kind.

    ``expected``: :func:`expected_tensors`' first value, when the caller already built it (it costs ~0.5 s).
    """
    exp = expected if expected is not None else expected_tensors(config)[0]
    problems = []
    missing = [k for k in exp if k not in got]
    extra = [k for k in got if k not in exp]
    if missing:
        problems.append(f"missing key(s) {missing[:8]}{' ...' if len(missing) > 8 else ''} ({len(missing)} in all)")
    if extra:
        problems.append(f"unexpected key(s) {extra[:8]}{' ...' if len(extra) > 8 else ''} ({len(extra)} in all)")
    for k, (shape, is_float) in exp.items():
        if k in got:
            gshape, gdtype = got[k]
            if tuple(gshape) != shape:
                problems.append(f"{k}: checkpoint shape {list(gshape)}, config expects {list(shape)}")
            elif gdtype.is_floating_point != is_float:
                problems.append(f"{k}: checkpoint dtype {gdtype}, config expects a {'float' if is_float else 'non-float'}")
    return problems


@_paths.tidy_reprs
@dataclass
class VerifyReport:
    """What :func:`verify` checked, per file and overall."""

    out: Path
    ok: bool
    problems: list[str] = field(default_factory=list)
    files: pd.DataFrame = field(default_factory=pd.DataFrame)
    tensors: int = 0

    def _repr_html_(self) -> str:
        head = "verified ✓" if self.ok else "NOT verified ✗"
        probs = "".join(f"<li>{_h(p)}</li>" for p in self.problems)
        return f"<b>{_h(self.out)}</b>: {head}, {self.tensors} tensors<ul>{probs}</ul>{self.files.to_html(index=False)}"


def new_hash(algorithm: str):
    """A streaming hash object for ``checksums.json``: ``xxh3_128`` (default, ~10x cheaper) or ``sha256``.

    Both detect a damaged or incomplete file; neither protects against someone who can also rewrite the
    manifest. ``sha256`` is for users who check with ``sha256sum -c SHA256SUMS``.
    """
    if algorithm == "xxh3_128":
        import xxhash

        return xxhash.xxh3_128()
    if algorithm == "sha256":
        return hashlib.sha256()
    raise CheckpointError(f"unknown checksum algorithm {algorithm!r}", fix=f"use one of {list(CHECKSUMS)}")


CHECKSUMS = ("xxh3_128", "sha256")


def default_checksum() -> str:
    """``xxh3_128`` where the ``xxhash`` package is installed, else ``sha256`` (hashlib): a merge job in a cluster
    image without xxhash still merges and verifies, only slower."""
    try:
        import xxhash  # noqa: F401
    except ImportError:
        return "sha256"
    return "xxh3_128"


def file_digest(path: Path, algorithm: str, block: int = 16 << 20) -> str:
    """Hex digest of a whole file (``algorithm`` as in :func:`new_hash`)."""
    h = new_hash(algorithm)
    buf = bytearray(block)
    with open(path, "rb", buffering=0) as f:
        while n := f.readinto(buf):
            h.update(memoryview(buf)[:n])
    return h.hexdigest()


def verify(out_dir: str | Path, *, checksums: bool = True) -> VerifyReport:
    """Re-check a merged HF dir on disk: headers and index vs config.json's model, file sizes and checksums.

    The checksum algorithm is the one ``checksums.json`` names (``xxh3_128``; ``sha256`` for older merges).

    Example:
        >>> nbtools.checkpoints.verify(cfg.run_dir / "merged_hf").ok
        True
    """
    from transformers import AutoConfig

    out = Path(out_dir)
    problems: list[str] = []
    manifest_path = out / MANIFEST
    if not manifest_path.is_file():
        return VerifyReport(out, False, [f"{MANIFEST} missing: not a completed nbtools merge"])
    try:
        manifest = json.loads(manifest_path.read_bytes())
        algorithm = manifest.get("algorithm", "sha256")
        entries = {str(k): (int(v["bytes"]), str(v[algorithm])) for k, v in manifest["files"].items()}
        if algorithm not in CHECKSUMS:
            raise KeyError(algorithm)
    except (ValueError, KeyError, TypeError, AttributeError) as e:
        return VerifyReport(out, False, [f"{MANIFEST} is damaged ({type(e).__name__}: {e}): not a completed nbtools merge"])
    rows = []
    for name, (nbytes, want) in entries.items():
        p = out / name
        size = p.stat().st_size if p.is_file() else None
        digest = file_digest(p, algorithm) if checksums and size == nbytes else None
        ok = size == nbytes and (not checksums or digest == want)
        rows.append({"file": name, "bytes": size, "expected_bytes": nbytes, "checksum_ok": ok if checksums else None})
        if not ok:
            problems.append(f"{name}: {'missing' if size is None else f'size or {algorithm} differs from the manifest'}")
    if not (out / "model.safetensors.index.json").is_file():
        return VerifyReport(out, False, [*problems, "model.safetensors.index.json missing"], pd.DataFrame(rows))
    got: dict[str, tuple[tuple[int, ...], torch.dtype]] = {}
    index = json.loads((out / "model.safetensors.index.json").read_text())
    for fname in sorted(set(index["weight_map"].values())):
        if (out / fname).is_file():
            header, _ = read_safetensors_header(out / fname)
            header.pop("__metadata__", None)
            got.update({k: (tuple(v["shape"]), ST_DTYPES[v["dtype"]]) for k, v in header.items()})
    if set(got) != set(index["weight_map"]):
        problems.append("model.safetensors.index.json does not match the tensors in the files")
    problems += check_against_config(got, AutoConfig.from_pretrained(str(out)))
    return VerifyReport(out, not problems, problems, pd.DataFrame(rows), len(got))


@_paths.tidy_reprs
@dataclass
class AgainstReport:
    """Result of :func:`verify_against`: exact equality unless ``atol`` was given."""

    ok: bool
    mode: str  # "tensors" | "logits"
    max_abs_diff: float
    mismatches: list[str] = field(default_factory=list)

    def _repr_html_(self) -> str:
        return (f"<b>{'equal ✓' if self.ok else 'DIFFERENT ✗'}</b> ({self.mode}), max |diff| = {self.max_abs_diff:g}"
                + "".join(f"<br>{_h(m)}" for m in self.mismatches[:20]))


def verify_against(out_dir: str | Path, reference, *, input_ids: torch.Tensor | None = None,
                   atol: float = 0.0) -> AgainstReport:
    """Compare a merged dir with a reference state dict (every tensor) or a model (logits on ``input_ids``).

    Args:
        reference: a ``{name: tensor}`` state dict or an ``nn.Module``.
        input_ids: with a module reference, compare logits on these ids instead of tensors.
        atol: allowed absolute difference (0 = exactly equal).

    Example:
        >>> ids = torch.tensor([[1, 5, 7, 9]])
        >>> nbtools.checkpoints.verify_against(out, source_model, input_ids=ids).ok
        True
    """
    from safetensors import safe_open

    out = Path(out_dir)
    if isinstance(reference, torch.nn.Module) and input_ids is not None:
        from transformers import AutoModelForCausalLM

        dtype = next(reference.parameters()).dtype
        merged = AutoModelForCausalLM.from_pretrained(str(out), dtype=dtype).eval()
        ref_bufs = dict(reference.named_buffers())
        for name, buf in merged.named_buffers():  # e.g. RoPE inv_freq: a .to(dtype)'d reference casts it too
            if name in ref_bufs and ref_bufs[name].dtype != buf.dtype:
                *path, leaf = name.split(".")
                merged.get_submodule(".".join(path)).register_buffer(leaf, buf.to(ref_bufs[name].dtype), persistent=False)
        with torch.no_grad():
            a = reference.eval()(input_ids).logits
            b = merged(input_ids).logits
        diff = (a.float() - b.float()).abs().max().item()
        return AgainstReport(diff <= atol and a.shape == b.shape, "logits", diff)
    ref = reference.state_dict() if isinstance(reference, torch.nn.Module) else dict(reference)
    tied = set(getattr(reference, "all_tied_weights_keys", None) or {})  # e.g. lm_head.weight, saved once
    index = json.loads((out / "model.safetensors.index.json").read_text())["weight_map"]
    mism, worst = [], 0.0
    for k in sorted(set(ref) - set(index) - tied):
        mism.append(f"{k}: in the reference, not in the merged model")
    for fname in sorted(set(index.values())):
        with safe_open(str(out / fname), framework="pt") as f:
            for k in f.keys():  # noqa: SIM118 - safe_open is not a dict
                if k not in ref:
                    mism.append(f"{k}: in the merged model, not in the reference")
                    continue
                t, r = f.get_tensor(k), ref[k].detach()
                if t.shape != r.shape or t.dtype != r.dtype:
                    mism.append(f"{k}: merged {t.dtype}{list(t.shape)} vs reference {r.dtype}{list(r.shape)}")
                    continue
                d = (t.float() - r.float()).abs().max().item() if t.numel() else 0.0
                worst = max(worst, d)
                if d > atol:
                    mism.append(f"{k}: max |diff| {d:g}")
    return AgainstReport(not mism, "tensors", worst, mism)
