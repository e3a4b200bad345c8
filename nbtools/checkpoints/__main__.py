"""CLI: ``python -m nbtools.checkpoints merge STEP_DIR OUT_DIR [--overwrite] [--config PATH]`` (a Ray job entrypoint).

Also ``list CHECKPOINT_DIR`` and ``best CHECKPOINT_DIR [--metric val:accuracy] [--lower-is-better]``.
"""

from __future__ import annotations

import argparse
import sys

from nbtools.errors import NbtoolsError


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m nbtools.checkpoints", description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    m = sub.add_parser("merge", help="merge a step_N into a verified HuggingFace directory")
    m.add_argument("step_dir")
    m.add_argument("out_dir")
    m.add_argument("--config", default=None, help="base model directory or config.json")
    m.add_argument("--overwrite", action="store_true")
    m.add_argument("--max-shard-size", default="2GB")
    m.add_argument("--no-progress", action="store_true")
    m.add_argument("--checksum", choices=["auto", "xxh3_128", "sha256"], default="auto",
                   help="checksums.json algorithm (auto: xxh3_128 where xxhash is installed, else sha256); sha256 also "
                   "writes SHA256SUMS")
    ls = sub.add_parser("list", help="list step_N checkpoints")
    ls.add_argument("checkpoint_dir")
    b = sub.add_parser("best", help="print the best checkpoint by a metric (NeMo-RL ranking)")
    b.add_argument("checkpoint_dir")
    b.add_argument("--metric", default="val:accuracy")
    b.add_argument("--lower-is-better", action="store_true")
    args = ap.parse_args(argv)

    from nbtools import checkpoints

    try:
        if args.cmd == "merge":
            r = checkpoints.merge(args.step_dir, args.out_dir, config=args.config, overwrite=args.overwrite,
                                  max_shard_size=args.max_shard_size, progress=not args.no_progress,
                                  checksum=args.checksum)
            state = "reused (already merged and verified)" if r.reused else f"merged in {r.seconds:.1f} s"
            print(f"{state}: {r.tensors} tensors, {r.bytes / 1e9:.3f} GB, layout {r.layout} -> {r.out}")
            from nbtools.jobs.carry import print_result

            print_result({"out": str(r.out), "tensors": r.tensors, "bytes": r.bytes, "seconds": r.seconds,
                          "layout": r.layout, "verified": r.verified, "reused": r.reused, "checksums": r.checksums,
                          "source": str(r.source) if r.source else None, "notes": list(r.notes),
                          "algorithm": r.algorithm})
        elif args.cmd == "list":
            print(checkpoints.list_checkpoints(args.checkpoint_dir).to_string(index=False))
        else:
            print(checkpoints.best(args.checkpoint_dir, args.metric, not args.lower_is_better))
    except NbtoolsError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1  # 2 is argparse's bad usage; a failed merge/list is 1, like the nbtools CLI
    return 0


if __name__ == "__main__":
    sys.exit(main())
