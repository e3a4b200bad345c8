"""What the DCP and verl merges share: the pipeline from a checkpoint's tensors to an installed HF directory (check
against the config, plan, stream, sidecars, read back, hash, manifest, atomic install), sizes and the progress bar."""

from __future__ import annotations

import errno
import json
import os
import shutil
import time
from collections.abc import Iterable
from pathlib import Path

from nbtools.checkpoints._outdir import clean_stale, install, temp_dir
from nbtools.checkpoints._result import MergeResult
from nbtools.checkpoints._sources import SourceTensor, read_safetensors_header
from nbtools.checkpoints._verify import (
    MANIFEST,
    SUMS,
    check_against_config,
    expected_tensors,
    file_digest,
    verify,
)
from nbtools.checkpoints._writer import plan_files, write_files
from nbtools.errors import CheckpointError, ConflictError, Fix

__all__ = ["parse_size", "reuse_existing", "write_merged"]


def _size(n: int) -> str:
    """Bytes in the largest decimal unit that keeps a digit before the point (``12.3 MB``, never ``0.00 GB``)."""
    for unit, mult in (("TB", 10**12), ("GB", 10**9), ("MB", 10**6), ("KB", 10**3)):
        if n >= mult:
            return f"{n / mult:.3g} {unit}" if n < 100 * mult else f"{n / mult:.0f} {unit}"
    return f"{n} bytes"


def parse_size(size: int | str) -> int:
    """``"5GB"`` / ``"500MB"`` / ``2**30`` -> bytes (decimal units, like transformers' max_shard_size)."""
    if isinstance(size, int):
        return size
    s = size.strip().upper()
    for unit, mult in (("GIB", 2**30), ("MIB", 2**20), ("KIB", 2**10), ("GB", 10**9), ("MB", 10**6), ("KB", 10**3),
                       ("B", 1)):
        if s.endswith(unit):
            return int(float(s[: -len(unit)]) * mult)
    return int(s)


def _tqdm(total: int, desc: str, enabled: bool):
    from nbtools._progress import tqdm

    return tqdm(total=total, unit="B", unit_scale=True, unit_divisor=1024, desc=desc, disable=not enabled)


def _fsync_small_files(tmp: Path, done: set[str]) -> None:
    """fsync the sidecar files (the weights were synced as they were written) and the directory itself."""
    for p in tmp.iterdir():
        if p.name not in done:
            fd = os.open(p, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
    fd = os.open(tmp, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _check_written(tmp: Path, files) -> None:
    """Headers read back from disk must describe exactly the planned tensors at the planned sizes."""
    for f in files:
        header, start = read_safetensors_header(tmp / f.name)
        header.pop("__metadata__", None)
        want = {t.name: list(t.shape) for t in f.tensors}
        if {k: v["shape"] for k, v in header.items()} != want or (tmp / f.name).stat().st_size != start + f.data_bytes:
            raise CheckpointError(f"{f.name} did not read back as written", fix="check the disk, then merge again")


def reuse_existing(out: Path, step: Path, fingerprint: str, overwrite: bool, t0: float) -> MergeResult | None:
    """The verified merge of ``step`` already at ``out`` (None when there is none or ``overwrite``); anything else
    there is a conflict, never replaced silently."""
    if not out.exists() or overwrite:
        return None
    m = out / MANIFEST
    try:
        manifest = json.loads(m.read_bytes()) if m.is_file() else {}
        manifest = manifest if isinstance(manifest, dict) else {}
    except (OSError, ValueError):
        manifest = {}  # damaged (e.g. a crash before it reached the disk): not a merge we can reuse
    if manifest.get("source") == str(step) and manifest.get("source_fingerprint") == fingerprint:
        # sizes suffice for a durable merge; one written with durable=False may have met a crash: read it all
        report = verify(out, checksums=manifest.get("durable") is False)
        if report.ok:
            files, alg = manifest["files"], manifest.get("algorithm", "sha256")
            return MergeResult(out, manifest["tensors"], sum(v["bytes"] for v in files.values()), time.perf_counter() - t0,
                               manifest["layout"], True, {k: v[alg] for k, v in files.items()}, step, reused=True,
                               notes=["output already merged from this checkpoint and verified; pass overwrite=True to redo"],
                               algorithm=alg)
    what = f"a merge of {manifest.get('source')}" if manifest else "something else"
    raise ConflictError(f"{out} already exists and holds {what}, not a verified merge of {step}",
                        fix=Fix("pass overwrite=True to replace it, or choose another out_dir",
                                cli="pass --overwrite to replace it, or choose another OUT_DIR"))


def write_merged(sources: dict[str, SourceTensor], cfg, gen, *, step: Path, out: Path, layout: str, fingerprint: str,
                 extra_files: Iterable[Path], notes: list[str], overwrite: bool, progress: bool, max_shard_size,
                 workers: int, band_mb: int, checksum: str, durable: bool, t0: float,
                 missing_hint: str) -> MergeResult:
    """Check ``sources`` against the model config, write them as balanced safetensors files with the index, config,
    generation config and ``extra_files`` (tokenizer) into a hidden sibling of ``out``, read back, hash, and rename
    into place only when every check passed; nothing is left behind on any failure."""
    expected, tied = expected_tensors(cfg)  # the model on the meta device, built once (~0.5 s)
    for target, src in tied.items():
        if target in sources and src in sources:
            del sources[target]
            notes.append(f"dropped {target}: tied to {src} (tie_word_embeddings); transformers re-ties it on load")
    problems = check_against_config({k: (v.shape, v.dtype) for k, v in sources.items()}, cfg, expected=expected)
    if problems:
        raise CheckpointError(f"{step} does not match its model config ({notes[0].removeprefix('config from ')}):\n    "
                              + "\n    ".join(problems),
                              fix=Fix("pass config= with the config of the model that was trained; if shapes are "
                                      f"short, {missing_hint}", cli="pass --config PATH with the config of the model that "
                                      f"was trained; if shapes are short, {missing_hint}"))
    floats = {t.dtype for t in sources.values() if t.dtype.is_floating_point}
    if len(floats) == 1:
        cfg.dtype = str(next(iter(floats))).removeprefix("torch.")
    tensors = list(sources.values())
    total = sum(t.nbytes for t in tensors)
    files = plan_files(tensors, parse_size(max_shard_size), workers)
    out.parent.mkdir(parents=True, exist_ok=True)
    clean_stale(out)
    tmp = temp_dir(out)
    tmp.mkdir()  # mode 0777 & ~umask, like every file in it
    try:
        with _tqdm(total, f"merge {step.name}", progress) as bar:
            write_files(tmp, files, band_bytes=band_mb << 20, workers=workers, progress=bar.update,
                        algorithm=checksum, durable=durable)
        weight_map = {t.name: f.name for f in files for t in f.tensors}
        index = {"metadata": {"total_size": sum(f.data_bytes for f in files)}, "weight_map": weight_map}
        (tmp / "model.safetensors.index.json").write_text(json.dumps(index, indent=2) + "\n")
        cfg.save_pretrained(str(tmp))
        if gen is not None:
            gen.save_pretrained(str(tmp))
        for p in extra_files:
            if p.is_file() and not (tmp / p.name).exists():
                shutil.copyfile(p, tmp / p.name)
        _check_written(tmp, files)
        checksums = {f.name: f.digest for f in files}
        checksums.update({p.name: file_digest(p, checksum) for p in sorted(tmp.iterdir()) if p.name not in checksums})
        manifest = {"algorithm": checksum, "source": str(step), "source_fingerprint": fingerprint, "layout": layout,
                    "tensors": len(tensors), "durable": durable, "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                    "files": {k: {checksum: v, "bytes": (tmp / k).stat().st_size} for k, v in sorted(checksums.items())}}
        (tmp / MANIFEST).write_text(json.dumps(manifest, indent=1) + "\n")
        if checksum == "sha256":
            (tmp / SUMS).write_text("".join(f"{v}  {k}\n" for k, v in sorted(checksums.items())))
        if durable:
            _fsync_small_files(tmp, {f.name for f in files})
        install(tmp, out, overwrite, durable=durable)
    except OSError as e:
        shutil.rmtree(tmp, ignore_errors=True)
        if e.errno in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG):
            free = shutil.disk_usage(out.parent).free
            raise CheckpointError(f"no space writing the merged model under {out.parent} ({e.strerror}; needs "
                                  f"{_size(total)}, {_size(free)} free); nothing was left behind",
                                  fix="free disk space or pass an out_dir on a disk with room") from None
        raise
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    notes.append(f"{len(files)} safetensors file(s), {checksum} in {MANIFEST}" + (f" and {SUMS}" if checksum == "sha256" else ""))
    return MergeResult(out, len(tensors), total, time.perf_counter() - t0, layout, True, checksums, step, notes=notes,
                       algorithm=checksum)
