"""TEST DOUBLE of verl's ``verl/trainer/main_ppo.py`` (v0.7.0, v0.9.0), in the simulated GKE's verl checkout.

NOT verl (no vLLM, no GPUs here). It takes verl's command line exactly, through real Hydra: ``@hydra.main`` over the
tag's own trainer config (``verl/trainer/config/ppo_trainer.yaml`` here is a copy of the tag's
``_generated_ppo_trainer.yaml``, ppo_trainer.yaml with its defaults composed), so Hydra refuses an unknown
``key=value`` or a ``+key`` that exists with its own message and exit code, as the real job does. Then, per release
(``verl_releases.py``, every fact with its tag and path): the default trainer's imports (v0.9.0's TaskRunnerV1 needs
``transfer_queue`` in the image), the legacy trainer's deprecation warning, the parquet files ``data.train_files`` /
``data.val_files`` (missing files or columns fail as verl's dataset does). ``VERL_SIM_CONFIG_ONLY=1`` stops there and
prints ``CONFIG=<json>``: the keys as the job sees them, and the files it would write where.
"""

from __future__ import annotations

import importlib
import json
import os
import sys
from pathlib import Path

import hydra
from omegaconf import DictConfig, OmegaConf

CHECKOUT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(CHECKOUT))
from verl_releases import facts, release_of  # noqa: E402


def release() -> str:
    """The tag of this checkout (``verl/version/version``, as verl's ``verl/__init__.py`` reads it)."""
    return release_of((CHECKOUT / "verl" / "version" / "version").read_text())


def _files(value) -> list[str]:
    return [value] if isinstance(value, str) else [str(v) for v in value]


def check_data(config: DictConfig, columns: tuple[str, ...]) -> None:
    """verl's RLHFDataset reads every file as parquet: a missing file or a frame without verl's columns fails."""
    import pyarrow.parquet as pq

    for key in ("data.train_files", "data.val_files"):
        for f in _files(OmegaConf.select(config, key)):
            if not os.path.isfile(f):
                raise FileNotFoundError(f"Unable to find '{f}' ({key}; verl test double)")
            missing = [c for c in columns if c not in pq.read_schema(f).names]
            if missing:
                raise ValueError(f"{f}: no column(s) {missing} (verl's data/rl_dataset.py reads {list(columns)})")


def outputs(config: DictConfig, row: dict) -> dict:
    """Where the release writes this run's files (``verl_releases.py``)."""
    sel = lambda k: OmegaConf.select(config, k)  # noqa: E731
    loggers = sel("trainer.logger")
    loggers = [loggers] if isinstance(loggers, str) else list(loggers or [])
    tb = None
    if "tensorboard" in loggers:
        tb = os.environ.get(row["tensorboard_env"]) or row["tensorboard_default"].format(
            project=sel("trainer.project_name"), experiment=sel("trainer.experiment_name"))
    return {"checkpoints": sel(row["checkpoint_dir_key"]), "rollouts": sel(row["rollout_dir_key"]),
            "validation": sel(row["validation_dir_key"]), "tensorboard": tb}


@hydra.main(config_path="config", config_name="ppo_trainer", version_base=None)
def main(config: DictConfig) -> None:
    tag = release()
    row = facts(tag)
    if row["v1_key"] and OmegaConf.select(config, row["v1_key"]):
        trainer = "TaskRunnerV1"
        for module in row["v1_imports"]:  # ModuleNotFoundError on an image without them, as TaskRunnerV1.run
            importlib.import_module(module)
    else:
        trainer = "TaskRunner"
        if row["legacy_warning"]:
            print(row["legacy_warning"], file=sys.stderr, flush=True)
    check_data(config, row["parquet_columns"])
    print(f"(verl test double) verl {tag} verl.trainer.main_ppo: {trainer}", flush=True)
    if os.environ.get("VERL_SIM_CONFIG_ONLY") == "1":
        print("CONFIG=" + json.dumps({"release": tag, "trainer": trainer, "outputs": outputs(config, row),
                                      "config": OmegaConf.to_container(config, resolve=False)}), flush=True)
        return
    from sim_verl_train import train  # the training half, beside the facts

    train(config, row, outputs(config, row))


if __name__ == "__main__":
    main()
