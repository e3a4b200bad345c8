"""Write one health-corpus run in verl's layout with verl's own code, inside a verl venv (tools/verl_oracle_venv.sh).

Why: a check that reads verl runs is measured on files verl itself wrote, per release, not on nbtools' idea of them.
``tools/make_health_corpus.py`` runs the rehearsal (verl's layout, v0.7.0 names) and hands its steps here as JSON on
stdin: ``{"out": LOG_DIR, "scalars": {step: {tag: value}}, "dumps": {"rollout_data" | "validation_data":
{step: [record]}}}``. This script, in the venv of the release under test:

- logs every step's scalars through verl's ``verl.utils.tracking.Tracking`` (``default_backend=["tensorboard"]``,
  ``TENSORBOARD_DIR=<out>/tensorboard``); on 0.9.x the actor worker's memory peaks first go through verl's
  ``rename_dict(..., "actor/")``, as the V1 trainer's ``_update_actor`` does (``verl/trainer/ppo/v1/trainer_base.py``);
- dumps every step's generations with verl's own writer: 0.7.x ``RayPPOTrainer._dump_generations`` (run unbound on a
  namespace holding ``global_steps``), 0.9.x the V1 ``PPOTrainer._write_generations``.

Not a test module; its last line of output is ``{"verl": version, "steps": n}``.
"""

from __future__ import annotations

import json
import os
import sys
import types

_FIELDS = ("input", "output", "gts", "score", "step")
_WORKER_METRICS = ("perf/max_memory_allocated_gb", "perf/max_memory_reserved_gb")  # engine_workers.update_actor


def _dump(version: str, out: str, kind: str, step: int, records: list[dict]) -> None:
    cols = {k: [r[k] for r in records] for k in records[0]}
    extra = {k: v for k, v in cols.items() if k not in _FIELDS}
    args = (cols["input"], cols["output"], cols["gts"], cols["score"], extra, os.path.join(out, kind))
    if version.startswith("0.7"):
        from verl.trainer.ppo.ray_trainer import RayPPOTrainer

        RayPPOTrainer._dump_generations(types.SimpleNamespace(global_steps=step), *args)
    else:
        from verl.trainer.ppo.v1.trainer_base import PPOTrainer

        PPOTrainer._write_generations(*args, step)


def main() -> None:
    job = json.load(sys.stdin)
    import verl
    from verl.utils.py_functional import rename_dict
    from verl.utils.tracking import Tracking

    version = verl.__version__
    os.environ["TENSORBOARD_DIR"] = os.path.join(job["out"], "tensorboard")
    tracking = Tracking("nbtools-health-corpus", os.path.basename(job["out"]), default_backend=["tensorboard"])
    for step, data in sorted(job["scalars"].items(), key=lambda kv: int(kv[0])):
        data = dict(data)
        if not version.startswith("0.7"):
            worker = {k: data.pop(k) for k in _WORKER_METRICS if k in data}
            data.update(rename_dict(worker, "actor/"))
        tracking.log(data=data, step=int(step))
    tracking.logger["tensorboard"].finish()
    for kind, steps in job["dumps"].items():
        for step, records in steps.items():
            _dump(version, job["out"], kind, int(step), records)
    print(json.dumps({"verl": version, "steps": len(job["scalars"])}))  # the last line (verl prints its dumps' paths)


if __name__ == "__main__":
    main()
