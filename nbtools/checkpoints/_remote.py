"""Run the merge where the checkpoint lives: a Ray job on the cluster's head, then copy to each worker's disk."""

from __future__ import annotations

import shlex
from pathlib import PurePosixPath

__all__ = ["merge_entrypoint", "submit_merge", "megatron_convert_entrypoint", "copy_to_local_disk_command"]


def merge_entrypoint(step_dir: str, out_dir: str, *, overwrite: bool = False, config: str | None = None,
                     python: str = "python") -> str:
    """The shell command that merges on the machine running it (a Ray job entrypoint on the head pod).

    Example:
        >>> nbtools.checkpoints.merge_entrypoint("/data/ckpt/step_30", "/data/ckpt/step_30-hf")
        'python -m nbtools.checkpoints merge /data/ckpt/step_30 /data/ckpt/step_30-hf'
    """
    argv = [python, "-m", "nbtools.checkpoints", "merge", str(step_dir), str(out_dir)]
    if config:
        argv += ["--config", str(config)]
    if overwrite:
        argv.append("--overwrite")
    return shlex.join(argv)


def submit_merge(address: str, step_dir: str, out_dir: str, *, submission_id: str | None = None,
                 overwrite: bool = False, config: str | None = None, runtime_env: dict | None = None):
    """Submit the merge as a Ray job (re-running attaches to the same job); returns ``nbtools.jobs.Job``.

    The NeMo-RL image does not contain nbtools, and the PyPI name ``nbtools`` is another project: the job must
    carry this package through its ``runtime_env`` ``py_modules`` (e.g. ``{"py_modules": [nbtools]}``).

    Example:
        >>> job = nbtools.checkpoints.submit_merge(cfg.dashboard_url, "/data/ckpt/step_30", "/data/ckpt/step_30-hf")
        >>> job.wait(timeout=1800)
    """
    from nbtools import jobs

    sid = submission_id or "merge-" + PurePosixPath(step_dir).name.replace("_", "-")
    return jobs.submit(address, entrypoint=merge_entrypoint(step_dir, out_dir, overwrite=overwrite, config=config),
                       submission_id=sid, runtime_env=runtime_env, metadata={"nbtools": "checkpoints.merge"},
                       entrypoint_num_cpus=1)


def megatron_convert_entrypoint(step_dir, out_dir, *, hf_model_name: str | None = None,
                                nemo_rl_dir: str = "/opt/nemo-rl") -> str:
    """NeMo-RL's own Megatron -> HF converter command (nbtools does not merge ``iter_*`` checkpoints).

    Submit it with ``nbtools.jobs.submit(address, entrypoint=..., submission_id=...)`` on the cluster.

    Example:
        >>> nbtools.checkpoints.megatron_convert_entrypoint("/data/ckpt/step_30", "/data/hf/step_30")
    """
    step = PurePosixPath(str(step_dir))
    argv = ["uv", "run", "--extra", "mcore", "python", "examples/converters/convert_megatron_to_hf.py",
            "--config", str(step / "config.yaml"), "--megatron-ckpt-path", str(step / "policy/weights/iter_0000000"),
            "--hf-ckpt-path", str(out_dir)]
    if hf_model_name:
        argv += ["--hf-model-name", hf_model_name]
    return f"cd {shlex.quote(nemo_rl_dir)} && {shlex.join(argv)}"


_CHECK_COPY = r"""
import filecmp, hashlib, json, os, sys
copy, src = sys.argv[1:3]
m = json.load(open(os.path.join(copy, "checksums.json")))
alg = m.get("algorithm", "sha256")
try:
    import xxhash
    new = {"sha256": hashlib.sha256, "xxh3_128": xxhash.xxh3_128}[alg]
except ImportError:  # no xxhash in this image: compare bytes with the source instead
    new = hashlib.sha256 if alg == "sha256" else None
bad = []
for name, meta in m["files"].items():
    p = os.path.join(copy, name)
    if not os.path.isfile(p) or os.path.getsize(p) != meta["bytes"]:
        bad.append(name)
    elif new is None:
        bad += [] if filecmp.cmp(p, os.path.join(src, name), shallow=False) else [name]
    else:
        h = new()
        with open(p, "rb") as f:
            for b in iter(lambda: f.read(1 << 24), b""):
                h.update(b)
        bad += [] if h.hexdigest() == meta[alg] else [name]
if bad:
    sys.exit("the copy differs from checksums.json: " + ", ".join(bad))
"""


def copy_to_local_disk_command(merged_dir: str, local_dir: str = "/tmp/merged_hf", *, python: str = "python3") -> list[str]:
    """argv to run in every worker pod (gke helper's pod exec): copy the merged model to local disk, checked.

    Loading safetensors with mmap from gcsfuse can crawl or crash (vllm#23115, transformers#45547); a local
    copy avoids it. The copy goes to a temp dir, is checked against ``checksums.json`` (sizes and the digests
    it names, with ``xxhash`` when the image has it, else byte for byte against the source) and renamed into
    place; a pod that already has an identical copy is skipped, so re-running is cheap.

    Example:
        >>> argv = nbtools.checkpoints.copy_to_local_disk_command("/data/hf/step_30", "/tmp/step_30")
    """
    src, dst = shlex.quote(str(merged_dir)), shlex.quote(str(local_dir))
    script = (
        "set -euo pipefail; "
        f"if [ -f {dst}/checksums.json ] && cmp -s {src}/checksums.json {dst}/checksums.json; then "
        f"echo {dst} up to date; exit 0; fi; "
        f"tmp={dst}.partial-$$; trap 'rm -rf \"$tmp\"' EXIT; rm -rf \"$tmp\"; mkdir -p \"$tmp\"; "
        f"cp -r {src}/. \"$tmp\"/; "
        f"{shlex.quote(python)} -c {shlex.quote(_CHECK_COPY)} \"$tmp\" {src}; "
        f"rm -rf {dst}; mv \"$tmp\" {dst}; echo copied to {dst}"
    )
    return ["bash", "-c", script]
