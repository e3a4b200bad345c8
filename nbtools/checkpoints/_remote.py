"""Run the merge where the checkpoint lives: a Ray job on the cluster carrying nbtools, then copy to each worker.

Why a job on every backend: on GKE the checkpoint is in the bucket the pods mount (tens of GB; reading it from a
laptop would copy it all), so the merge runs next to it, as ``python -m nbtools.checkpoints merge`` in a Ray job
whose ``runtime_env`` ships this nbtools package (the NeMo-RL image has none, and the PyPI name ``nbtools`` is
another project). The local backend runs the very same job on its local head.
"""

from __future__ import annotations

from pathlib import Path, PurePosixPath

from nbtools import _paths
from nbtools._escape import sh, sh_echo, sh_join
from nbtools._layout import finetuned_model_path
from nbtools.config import Experiment
from nbtools.jobs import carry

__all__ = ["merge_entrypoint", "submit_merge", "merge_in_cluster", "megatron_convert_entrypoint", "copy_to_local_disk_command"]


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
    return sh_join(argv)


def submit_merge(address: str, step_dir: str, out_dir: str, *, submission_id: str, overwrite: bool = False,
                 config: str | None = None, python: str = "python", env_vars: dict[str, str] | None = None):
    """Submit the merge as a Ray job that carries nbtools (re-running attaches to the same job); returns the Job.

    Example:
        >>> job = nbtools.checkpoints.submit_merge(cfg.dashboard_url, "/data/x/checkpoints/step_30", "/data/x/merged_hf",
        ...                                        submission_id="x-merge-step-30-1a2b3c4d")
    """
    args = ["merge", str(step_dir), str(out_dir), "--no-progress"]
    if config:
        args += ["--config", str(config)]
    if overwrite:
        args.append("--overwrite")
    return carry.submit_module(address, submission_id=submission_id, module="nbtools.checkpoints", args=args, python=python,
                         env_vars=env_vars, metadata={"nbtools.step_dir": str(step_dir)[:200]})


def merge_in_cluster(cfg: Experiment, step: str | None = None, *, out: str | None = None, overwrite: bool = False,
                     timeout: float = 3600, progress: bool = True, backend=None):
    """Merge a checkpoint of this run into a verified HuggingFace model, where the checkpoint lives.

    Args:
        cfg: the experiment.
        step: the ``step_N`` to merge, as a URL from :func:`best`/:func:`list_checkpoints` or as the cluster sees
            it; default: the best checkpoint by ``checkpointing.metric_name``.
        out: output dir as the cluster sees it (default ``merged_hf`` beside ``checkpoint_dir``).
        overwrite: redo a merge whose verified output already exists.
        backend: the experiment's backend where the caller has it (default ``cfg.runs_on()``, the backend the
            package wired into the config: this data package asks it where the job goes and imports no backends).

    Returns:
        MergeResult, with ``url`` where this machine reads the merged model.

    Example:
        >>> merged = nbtools.checkpoints.merge_in_cluster(cfg)
        >>> merged.verified, merged.url
    """
    from nbtools import storage
    from nbtools.checkpoints._listing import best
    from nbtools.checkpoints._result import MergeResult

    b = backend if backend is not None else cfg.runs_on()
    if step is None:
        step = str(best(cfg))
    step_path = b.storage.cluster_path(str(step)) if storage.is_remote(str(step)) else str(step)
    out = out or finetuned_model_path(cfg)
    sid = carry.helper_id(cfg.name, f"merge-{storage.name_of(step_path).replace('_', '-')}", step_path, out, overwrite)
    job = submit_merge(b.dashboard_url, step_path, out, submission_id=sid, overwrite=overwrite, python=b.python,
                       env_vars=b.job_env())
    job.wait(timeout=timeout, progress=progress)
    data = carry.result_of(job)
    return MergeResult(out=Path(data["out"]), tensors=data["tensors"], bytes=data["bytes"], seconds=data["seconds"],
                       layout=data["layout"], verified=data["verified"], checksums=data["checksums"],
                       source=Path(data["source"]) if data.get("source") else None, reused=data["reused"],
                       notes=[*data.get("notes", []), f"merged by Ray job {job.id}"], url=b.storage.url(data["out"]),
                       algorithm=data.get("algorithm", "xxh3_128"))


def megatron_convert_entrypoint(step_dir, out_dir, *, hf_model_name: str | None = None,
                                code_dir: str = "/opt/nemo-rl") -> str:
    """NeMo-RL's own Megatron -> HF converter command (nbtools does not merge ``iter_*`` checkpoints), run in
    ``code_dir``: the NeMo-RL checkout in its image (``trainer.code_dir``).

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
    return f"cd {sh(code_dir)} && {sh_join(argv)}"


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


class ShellCommand(_paths.Argv):
    """An argv a cell shows for copying: shown as the shell command (not a list repr with ``\\n`` escapes), with
    runs-dir and checkout paths relative to where it is shown, so it works when pasted there (issue 45)."""

    def _repr_pretty_(self, p, cycle) -> None:
        p.text(_paths.shown(_paths.pasteable(sh_join(self))))


def copy_to_local_disk_command(merged_dir: str, local_dir: str = "/tmp/merged_hf", *, python: str = "python3") -> list[str]:
    """argv to run in every worker pod (gke helper's pod exec): copy the merged model to local disk, checked.

    Loading safetensors with mmap from gcsfuse can crawl or crash (vllm#23115, transformers#45547); a local
    copy avoids it. The copy goes to a temp dir, is checked against ``checksums.json`` (sizes and the digests
    it names, with ``xxhash`` when the image has it, else byte for byte against the source) and renamed into
    place; a pod that already has an identical copy is skipped, so re-running is cheap.

    Example:
        >>> argv = nbtools.checkpoints.copy_to_local_disk_command("/data/hf/step_30", "/tmp/step_30")
    """
    src, dst = sh(str(merged_dir)), sh(str(local_dir))
    script = (
        "set -euo pipefail; "
        f"if [ -f {dst}/checksums.json ] && cmp -s {src}/checksums.json {dst}/checksums.json; then "
        f"{sh_echo(f'{local_dir} up to date')}; exit 0; fi; "
        f"tmp={dst}.partial-$$; trap 'rm -rf \"$tmp\"' EXIT; rm -rf \"$tmp\"; mkdir -p \"$tmp\"; "
        f"cp -r {src}/. \"$tmp\"/; "
        f"{sh(python)} -c {sh(_CHECK_COPY)} \"$tmp\" {src}; "
        f"rm -rf {dst}; mv \"$tmp\" {dst}; {sh_echo(f'copied to {local_dir}')}"
    )
    return ShellCommand(["bash", "-c", script])
