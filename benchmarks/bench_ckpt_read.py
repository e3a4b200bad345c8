"""Benchmark: nbtools' checkpoint readers vs torch's own (issue 43 item 4), side by side in one run.

    .venv/bin/python benchmarks/bench_ckpt_read.py                  # ~0.5 GB bf16 model, 4 ranks, 3 rounds
    .venv/bin/python benchmarks/bench_ckpt_read.py --model 1x       # bench_merge.py's ~1.2 B (2.5 GB) model
    .venv/bin/python benchmarks/bench_ckpt_read.py --tiny           # a 2-layer model by 2 ranks, once, in one
                                                                    # process (tests: no figure, RSS not separated)
    .venv/bin/python benchmarks/bench_ckpt_read.py --tiny --keep DIR/tiny/step_1   # then bench_merge.py --tiny
                                                                    # --workdir DIR merges the same checkpoint

One generator run (bench_merge.py's ``generate``: ``bench_merge_make_ckpt.py --verl-actor``, FSDP2 on gloo CPU ranks) writes the same weights in
both layouts nbtools reads: NeMo-RL's DCP ``policy/weights`` and verl v0.7.0's ``global_step_N/actor`` rank files.
Each method then runs in its own process (imports done before the clock starts, so both sides pay only the read);
wall and CPU seconds are measured inside it around the read, peak RSS is the child's ``ru_maxrss`` (mapped file pages
that were touched count). Methods run round robin and the table shows medians.

Pairs (ours vs the library call the issue names):
  verl-sources  ``_verl.read_verl_sources``: every rank's records and byte spans, nothing loaded  |
                ``torch.load(mmap=True, weights_only=True)`` of every rank file under
                ``torch.serialization.safe_globals`` (DTensor, DTensorSpec, TensorMeta, DeviceMesh, Shard,
                Replicate), then each DTensor's shape, placements and local shape  |  the same with
                ``map_location="meta"`` (no storage; each one's byte offset in the file, what the merge streams)
  dcp-metadata  ``_unpickle.load_dcp_metadata`` (allow-listed)  |  ``FileSystemReader(dir).read_metadata()``
                (plain ``pickle.load``: it runs whatever a crafted ``.metadata`` names)
  verl-bytes    every byte of every local tensor CRC-32'd: our byte spans read with ``os.pread``  |  the tensors of
                ``torch.load(mmap=True, weights_only=True)``; both must give the same CRCs (checked)
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
MODELS = {  # generator dims (Llama-style, untied, bf16), as bench_merge.py names them
    "half": {"hidden": 1024, "intermediate": 2816, "layers": 16, "heads": 16, "vocab": 32000},
    "1x": {"hidden": 2048, "intermediate": 5632, "layers": 22, "heads": 32, "vocab": 32000},
    "tiny": {"hidden": 64, "intermediate": 128, "layers": 2, "heads": 4, "vocab": 256},
}
PAIRS = {"verl-sources": ("nbtools", "torch.load", "torch.load meta"), "dcp-metadata": ("nbtools", "FileSystemReader"),
         "verl-bytes": ("nbtools", "torch.load")}
_BLOCK = 16 << 20


def _safe_globals() -> list:
    from torch.distributed.device_mesh import DeviceMesh
    from torch.distributed.tensor import DTensor, Replicate, Shard
    from torch.distributed.tensor._dtensor_spec import DTensorSpec, TensorMeta

    return [DTensor, DTensorSpec, TensorMeta, DeviceMesh, Shard, Replicate]


def _torch_ranks(actor: Path, meta: bool = False):
    """Every rank's state dict via torch.load(mmap, weights_only), the DTensor classes allow-listed (``meta``: no
    storage at all, each storage's byte offset in the file recorded instead)."""
    import torch

    ranks = sorted(actor.glob("model_world_size_*_rank_*.pt"), key=lambda p: int(p.stem.rsplit("_", 1)[1]))
    kw = {"map_location": "meta"} if meta else {"mmap": True, "map_location": "cpu"}
    with torch.serialization.safe_globals(_safe_globals()):
        for p in ranks:
            yield torch.load(p, weights_only=True, **kw)


def _crc_digest(per_key: dict[str, list[int]]) -> str:
    import hashlib

    return hashlib.sha256(json.dumps(sorted(per_key.items())).encode()).hexdigest()[:16]


def child(pair: str, side: str, root: Path) -> dict:
    """Runs one method in this process; returns {seconds, cpu, items, check}."""
    import zlib

    import torch
    import torch.distributed.checkpoint  # noqa: F401 - every module either side imports, before the clock starts

    from nbtools.checkpoints import _unpickle
    from nbtools.trainers.verl import _checkpoints as _verl

    _safe_globals()
    _unpickle.dcp_metadata_globals()
    actor, weights = root / "verl" / "global_step_1" / "actor", root / "policy" / "weights"
    t0, c0 = time.perf_counter(), time.process_time()
    check: object = None
    if pair == "verl-sources" and side == "nbtools":
        src = _verl.read_verl_sources(actor)
        items, check = len(src), sorted((k, list(v.shape)) for k, v in src.items())
    elif pair == "verl-sources":
        shapes: dict[str, list[int]] = {}
        for sd in _torch_ranks(actor, meta=side.endswith("meta")):
            for k, v in sd.items():
                _ = (v.placements, v.to_local().shape, v.dtype, v.to_local().untyped_storage()._checkpoint_offset
                     if side.endswith("meta") else 0)
                shapes[k] = list(v.shape)
        items, check = len(shapes), sorted(shapes.items())
    elif pair == "dcp-metadata" and side == "nbtools":
        md = _unpickle.load_dcp_metadata(weights / ".metadata")
        items, check = len(md.state_dict_metadata), sorted(md.state_dict_metadata)
    elif pair == "dcp-metadata":
        from torch.distributed.checkpoint import FileSystemReader

        md = FileSystemReader(str(weights)).read_metadata()
        items, check = len(md.state_dict_metadata), sorted(md.state_dict_metadata)
    elif pair == "verl-bytes" and side == "nbtools":
        per_key: dict[str, list[int]] = {}
        fds: dict[Path, int] = {}
        for k, st in _verl.read_verl_sources(actor).items():
            for c in st.chunks:
                fd = fds.get(c.path) or fds.setdefault(c.path, os.open(c.path, os.O_RDONLY))
                crc, at, left = 0, c.start, c.nbytes
                while left:
                    b = os.pread(fd, min(_BLOCK, left), at)
                    crc, at, left = zlib.crc32(b, crc), at + len(b), left - len(b)
                per_key.setdefault(k, []).append(crc)
        for fd in fds.values():
            os.close(fd)
        items, check = sum(map(len, per_key.values())), _crc_digest(per_key)
    elif pair == "verl-bytes":
        per_key = {}
        for sd in _torch_ranks(actor):
            for k, v in sd.items():
                t = v.to_local()
                if t.numel():
                    per_key.setdefault(k, []).append(zlib.crc32(t.contiguous().view(torch.uint8).numpy()))
        items, check = sum(map(len, per_key.values())), _crc_digest(per_key)
    else:
        raise ValueError(f"{pair}/{side}")
    return {"seconds": time.perf_counter() - t0, "cpu": time.process_time() - c0, "items": items,
            "check": check if isinstance(check, str) else _crc_digest({"contents": check})}


def _measure(pair: str, side: str, root: Path, fresh: bool = True) -> dict:
    """Runs child() in a fresh process; adds its peak RSS (MB). ``fresh=False`` (--tiny): in this process, once."""
    if not fresh:
        import resource

        return {**child(pair, side, root), "rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024 * 1.048576}
    argv = [sys.executable, __file__, "--child", pair, side, str(root)]
    with tempfile.TemporaryFile("w+") as ferr:
        p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=ferr, text=True)
        out = p.stdout.read()
        _, status, ru = os.wait4(p.pid, 0)
        if os.waitstatus_to_exitcode(status) != 0:
            ferr.seek(0)
            raise RuntimeError(f"{pair}/{side} failed:\n{ferr.read()[-3000:]}")
    return {**json.loads(out.strip().splitlines()[-1]), "rss_mb": ru.ru_maxrss / 1024 * 1.048576}


def generate(root: Path, dims: dict, nproc: int) -> None:
    """Both layouts of one set of weights (bench_merge_make_ckpt.py), plus verl's config and tracker files."""
    from bench_merge import generate as generate_weights  # the sibling script (its folder is on sys.path)
    from transformers import LlamaConfig

    step = root / "verl" / "global_step_1"
    t0 = time.perf_counter()
    generate_weights(root, dims, nproc, verl_actor=step / "actor")
    cfg = LlamaConfig(hidden_size=dims["hidden"], intermediate_size=dims["intermediate"], vocab_size=dims["vocab"],
                      num_hidden_layers=dims["layers"], num_attention_heads=dims["heads"],
                      num_key_value_heads=dims["heads"], tie_word_embeddings=False)
    cfg.save_pretrained(step / "actor" / "huggingface")
    (root / "verl" / "latest_checkpointed_iteration.txt").write_text("1")
    size = sum(f.stat().st_size for f in (step / "actor").glob("*.pt"))
    print(f"generated both layouts in {time.perf_counter() - t0:.0f} s ({size / 1e9:.2f} GB of verl rank files)",
          flush=True)


def bench(root: Path, repeat: int, fresh: bool = True) -> list[dict]:
    rows = []
    for _ in range(repeat):  # round robin: a change of load on the shared machine hits every method alike
        subprocess.run(f"cat {root}/verl/global_step_1/actor/*.pt > /dev/null", shell=True, check=True)  # warm cache
        for pair, sides in PAIRS.items():
            for side in sides:
                rows.append({"pair": pair, "side": side, **_measure(pair, side, root, fresh)})
    return rows


def report(rows: list[dict]) -> None:
    print(f"{'read':<14}{'method':<18}{'wall s':>9}{'CPU s':>9}{'peak RSS MB':>13}{'items':>7}   ratio (theirs/ours wall, RSS)")
    for pair, (ours, *others) in PAIRS.items():
        med = {}
        for side in (ours, *others):
            rs = [r for r in rows if r["pair"] == pair and r["side"] == side]
            med[side] = {k: statistics.median(r[k] for r in rs) for k in ("seconds", "cpu", "rss_mb")}
            checks = {r["check"] for r in rs}
            med[side]["check"], med[side]["items"] = checks, rs[0]["items"]
        for theirs in others:
            if med[ours]["check"] != med[theirs]["check"]:
                raise SystemExit(f"{pair}: nbtools and {theirs} read different contents ({med[ours]['check']} vs "
                                 f"{med[theirs]['check']})")
        for side in (ours, *others):
            m = med[side]
            ratio = "" if side == ours else (f"   {m['seconds'] / max(med[ours]['seconds'], 1e-9):.2f}x, "
                                             f"{m['rss_mb'] / med[ours]['rss_mb']:.2f}x")
            print(f"{pair:<14}{side:<18}{m['seconds']:>9.4f}{m['cpu']:>9.3f}{m['rss_mb']:>13.0f}{m['items']:>7}{ratio}")
    print("same contents read by both sides of every pair: True")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", choices=[m for m in MODELS if m != "tiny"], default="half")
    ap.add_argument("--ranks", type=int, default=4)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--keep", type=Path, help="write (or reuse) the checkpoints here instead of a temp dir")
    ap.add_argument("--tiny", action="store_true", help="a 2-layer model by 2 ranks, every method once (tests)")
    ap.add_argument("--child", nargs=3, metavar=("PAIR", "SIDE", "ROOT"), help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        print(json.dumps(child(a.child[0], a.child[1], Path(a.child[2]))))
        return
    dims, ranks, repeat = (MODELS["tiny"], 2, 1) if a.tiny else (MODELS[a.model], a.ranks, a.repeat)
    root = a.keep or Path(tempfile.mkdtemp(prefix="bench-ckpt-read-"))
    try:
        if not (root / "verl" / "latest_checkpointed_iteration.txt").is_file():
            generate(root, dims, ranks)
        report(bench(root, repeat, fresh=not a.tiny))
    finally:
        if not a.keep:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
