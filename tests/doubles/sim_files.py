"""What the simulated GKE (sim_gke.py) writes before it starts: the shim scripts, the stand-in NeMo-RL checkout (the
"image"), the sim experiment, and how the Ray head is launched so that only its processes (the "pods") see the
run's files at the mount path.

The pods' view: the head runs in its own mount namespace (``unshare --mount``) where the mount path (``data_dir``,
e.g. ``<root>/data``, the experiment's ``storage.mount_path``) is a bind mount of ``backing_dir``; on the notebook's
side ``data_dir`` stays empty, exactly as a laptop has no ``/data``. Everything the jobs write is there for the pods
and reaches this machine only through the bucket (the gcsfuse stand-in mirrors ``backing_dir``), so a reader that
opens the cluster's paths locally instead of the ``gs://`` URL fails here as it would on GKE.

Each pod also has its own local disk at :data:`LOCAL_DISK` (the head's namespace and each GPU worker node's, see
sim_nodes.py, bind their own directory there), so a file copied to the workers' disks is not on the head's.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml
from sim_shims import SDK_VERSION, flag_table

ROOT = Path(__file__).resolve().parents[2]
TESTS = Path(__file__).resolve().parents[1]
DOUBLES = Path(__file__).resolve().parent
BUCKET = "sim-bucket"
PROJECT = "sim-project"

__all__ = ["write_shims", "write_checkout", "write_experiment", "write_ray_experiment", "pods_launcher", "in_pods", "BUCKET",
           "PROJECT", "LOCAL_DISK"]
# A pod's local disk as nbtools uses it: where EvalJob.prepare copies a model (nbtools.evals.job.LOCAL_MODELS). Each
# pod's namespace binds its own directory here, so a copy made in one pod is not there in another (as on GKE).
LOCAL_DISK = "/tmp/nbtools-models"


def _set(data: dict, dotted: str, value: Any) -> None:
    parts = dotted.split(".")
    for p in parts[:-1]:
        data = data.setdefault(p, {})
    data[parts[-1]] = value


def _local() -> dict:
    return yaml.safe_load((ROOT / "experiments" / "local.yaml").read_text())


def write_shims(sim, *, conf: dict) -> None:
    """``<shims>/bin/{gcloud,kubectl,helm}`` (``python -S`` scripts calling sim_shims.main), their config and log."""
    conf = {"state": str(sim.shims_dir / "state.json"), "log": str(sim.shims_dir / "commands.jsonl"),
            "nbtools_data": str(ROOT / "nbtools" / "data"),
            "site_packages": [str(Path(yaml.__file__).resolve().parent.parent)], **conf}
    conf_path = sim.shims_dir / "sim.json"
    conf_path.write_text(json.dumps(conf, indent=1))
    (sim.shims_dir / "commands.jsonl").touch()
    table = flag_table(conf)
    (sim.shims_dir / "VERSION").write_text((table or {}).get("gcloud_version", SDK_VERSION) + "\n")  # the "SDK root"
    for tool in ("gcloud", "kubectl", "helm"):
        script = sim.bin_dir / tool
        script.write_text(f"#!{sys.executable} -S\n# simulated {tool} (tests/doubles/sim_shims.py)\nimport sys\n"
                          f"sys.path.insert(0, {str(DOUBLES)!r})\nfrom sim_shims import main\n"
                          f"sys.exit(main({tool!r}, {str(conf_path)!r}))\n")
        script.chmod(0o755)


def write_checkout(sim, rehearsal: dict) -> None:
    """The image: ``/opt/nemo-rl`` stand-in (doubles + the release's configs + the baked rehearsal) and its ``python``.

    The release is the experiment's ``images.nemo_rl_version`` (v0.7.0 unless the sim's changes say otherwise); the
    doubles behave as that release does (sim_nemo_rl/examples/nemo_rl_releases.py).
    """
    from sim_gke import nemo_rl_configs

    version = str(getattr(sim, "_changes", {}).get("images.nemo_rl_version", "v0.7.0"))
    shutil.copytree(DOUBLES / "sim_nemo_rl", sim.code_dir, ignore=shutil.ignore_patterns("__pycache__"), dirs_exist_ok=True)
    configs = nemo_rl_configs() if version == "v0.7.0" else TESTS / "assets" / "nemo-rl" / version / "examples" / "configs"
    shutil.copytree(configs, sim.code_dir / "examples" / "configs", dirs_exist_ok=True)
    local = _local()
    baked = {k: local[k] for k in ("name", "model", "data", "grpo", "checkpointing", "logging", "rehearsal")}
    baked["backend"] = "local"
    baked["rehearsal"].update(rehearsal)
    path = sim.code_dir / "sim_rehearsal.yaml"
    path.write_text("# The miniature GRPO the NeMo-RL test doubles train and evaluate (the simulated image's model).\n"
                    + yaml.safe_dump(baked, sort_keys=False))
    (sim.code_dir / "sim_gke.json").write_text(json.dumps({"nbtools_root": str(ROOT), "rehearsal_config": str(path),
                                                                "nemo_rl_version": version}))
    base = yaml.safe_load((ROOT / "experiments" / getattr(sim, "experiment_base", "gke-b200-gemma3-1b.yaml")).read_text())
    if base.get("trainer", {}).get("kind") == "verl":  # the verl stand-in trains the same task, in verl's layout
        from sim_verl_checkout import write_hub_copy, write_verl_checkout

        tag = str(getattr(sim, "_changes", {}).get("trainer.verl_ref", base["trainer"]["verl_ref"]))
        verl_baked = {**baked, "trainer": {"kind": "verl", "verl_ref": tag}}
        verl_path = sim.code_dir / "sim_rehearsal_verl.yaml"
        verl_path.write_text("# The miniature GRPO the verl test double trains (the simulated image's model).\n"
                             + yaml.safe_dump(verl_baked, sort_keys=False))
        write_verl_checkout(sim.verl_dir, tag, rehearsal_config=verl_path)
        # the Hub's copy of the model, in the shared HF cache: what the weights job stages and 07's baseline loads
        write_hub_copy(sim.backing_dir / "huggingface_cache", base["model"]["name"], verl_path)
    (sim.image_dir / "python").write_text(f'#!/bin/sh\nexec "{sys.executable}" "$@"\n')
    (sim.image_dir / "python").chmod(0o755)


def write_experiment(sim, rehearsal: dict, changes: dict) -> None:
    """``sim.experiment_yaml``: ``experiments/<sim.experiment_base>`` (gke-b200-gemma3-1b.yaml by default) with the
    sim's project, bucket, mount, checkout, port, and the rehearsal's model size, data and GRPO settings
    (``grpo.max_num_steps`` = ``sim.steps``). A verl experiment keeps its dataset (gsm8k, which the verl stand-in's
    preparation writes from the rehearsal's task) and runs from ``sim.verl_dir``."""
    data = yaml.safe_load((ROOT / "experiments" / getattr(sim, "experiment_base", "gke-b200-gemma3-1b.yaml")).read_text())
    local = _local()
    verl = data.get("trainer", {}).get("kind") == "verl"
    exp = sim.data_dir / ("verl-runs" if verl else "nemo-rl") / sim.name
    data["name"] = sim.name
    data["gcp"]["project"] = PROJECT
    data["storage"] = {"kind": "gcsfuse", "bucket": BUCKET, "mount_path": str(sim.data_dir)}
    data["trainer"].update(code_dir=str(sim.verl_dir if verl else sim.code_dir), python=sys.executable)
    data["model"].update(max_total_sequence_length=local["model"]["max_total_sequence_length"])  # name: the example's
    data["data"] = {"dataset": "gsm8k", "data_dir": str(sim.data_dir / "gsm8k")} if verl else dict(local["data"])
    data["grpo"] = {**local["grpo"], "max_num_steps": sim.steps}
    data["checkpointing"].update(checkpoint_dir=str(exp / "checkpoints"), save_period=local["checkpointing"]["save_period"])
    data["logging"] = {"log_dir": str(exp / "logs"), "tensorboard": True}
    data["ray"] = {"dashboard_port": sim.dashboard_port}
    data["rehearsal"] = {**local["rehearsal"], **rehearsal}
    if verl:  # the tutorial's mini-batch (256) is above the rehearsal's batch: verl refuses that at start (the lint too)
        n = data["grpo"]["num_prompts_per_step"]
        fit = {"actor_rollout_ref.actor.ppo_mini_batch_size": n, "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu": 1}
        data["trainer"]["overrides"] = [f"{k}={fit[k]}" if (k := o.split("=", 1)[0]) in fit else o
                                        for o in data["trainer"].get("overrides", [])]
    for key, value in changes.items():
        _set(data, key, value)
    sim.experiment_yaml.write_text(
        "# The simulated GKE's experiment (tests/doubles/sim_gke.py), from experiments/gke-b200-gemma3-1b.yaml.\n"
        + yaml.safe_dump(data, sort_keys=False))


def pods_launcher(backing: Path, mount: Path, disk: Path | None = None) -> list[str]:
    """The command prefix that runs a program in a new mount namespace where ``mount`` shows ``backing`` (the shared
    bucket) and, with ``disk``, :data:`LOCAL_DISK` shows ``disk``: that pod's own local disk, which no other pod sees.

    Raises:
        RuntimeError: this machine does not allow it (no ``unshare``, or no permission to mount), with the way out.
    """
    script = 'mount --bind "$1" "$2" && shift 2 && exec "$@"'
    args = [str(backing), str(mount)]
    if disk is not None:  # the mount point is an empty dir on this machine's /tmp; each namespace binds its own over it
        script = ('mount --bind "$1" "$2" && mkdir -p "$4" && mount --bind "$3" "$4" && shift 4 && exec "$@"')
        args += [str(disk), LOCAL_DISK]
        Path(disk).mkdir(parents=True, exist_ok=True)
    prefix = ["unshare", "--mount", "--propagation", "private", "sh", "-c", script, "sim-pods", *args]
    try:
        r = subprocess.run([*prefix, "true"], capture_output=True, text=True, timeout=30, check=False)
    except FileNotFoundError:
        r = subprocess.CompletedProcess(prefix, 127, "", "unshare: command not found")
    if r.returncode:
        raise RuntimeError(f"the simulated GKE cannot give its pods their own view of {mount} (a bind mount in a new "
                           f"mount namespace): {r.stderr.strip()}; fix: run as root where `unshare --mount` is allowed, "
                           "or SimGke(..., isolate=False), with which this machine sees the run's files at the mount path")
    return prefix


def in_pods(head_pid: int | None) -> list[str]:
    """The prefix that runs a command in the pods' mount namespace (the Ray head's), or nothing when not isolated."""
    return ["nsenter", f"--target={head_pid}", "--mount", "--"] if head_pid else []


def write_ray_experiment(sim, path: Path, **changes: Any) -> Path:
    """The sim experiment as a ``backend: ray`` one (tutorial 003's shape: the Ray cluster's dashboard address and a
    ``storage.mount_path`` only its nodes see, no ``storage.url``), for the ``ray`` backend against the sim's Ray
    head; ``changes`` are dotted keys (e.g. ``{"storage.url": ...}``)."""
    data = yaml.safe_load(sim.experiment_yaml.read_text())
    data["backend"] = "ray"
    data["ray"] = {"address": sim.head.dashboard_url}
    data["storage"] = {"kind": "gcsfuse", "mount_path": str(sim.data_dir)}
    for key, value in changes.items():
        _set(data, key, value)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("# The simulated GKE's Ray head as a plain Ray cluster (tests/doubles/sim_files.py).\n"
                    + yaml.safe_dump(data, sort_keys=False))
    return path
