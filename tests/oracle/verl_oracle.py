"""Run verl's own code on one GRPO step's batch, inside a verl venv (tools/verl_oracle_venv.sh); not a test module.

The tests run it through tests/oracle/verl_checkpoint.py (``run(job)`` in that process, whose imports it shares);
alone it reads a job (JSON) on stdin, writes what verl produced to ``job["out"]`` and a JSON summary to stdout:

- ``validate``: each case's overrides composed into verl's own Hydra config (``verl/trainer/config``,
  ``ppo_trainer``, as ``main_ppo``'s ``@hydra.main`` does) and checked by verl's ``validate_config``
  (``verl/utils/config.py``), with the reference policy in use when a KL term needs it (``main_ppo.py``'s
  ``need_reference_policy``);
- ``dump``: the step's rollouts dumped by verl's own code in the order that release dumps them. 0.7.x: a ``DataProto``
  built as ``fit`` builds it (``batch.repeat(n, interleave=True)``), reordered by ``RayPPOTrainer._balance_batch``
  (2 data-parallel ranks), advantages from ``core_algos.compute_grpo_outcome_advantage`` with ``index=uid``, dumped by
  ``RayPPOTrainer._log_rollout_data`` -> ``_dump_generations``. 0.9.x: the V1 ``PPOTrainer._log_rollout_data``
  (sort by ``{sample}_{rollout}_{output}``, ``_write_generations`` on its dump thread), its TransferQueue read
  answered from memory; advantages from ``v1/utils.py`` ``compute_advantage_for_multi_trajectories``;
- ``scores``: ``verl.utils.reward_score.default_compute_score`` for each (data source, solution, ground truth).

The trainer objects are never constructed (that starts Ray workers and vLLM): the methods run unbound on a namespace
holding the few attributes they read.
"""

from __future__ import annotations

import json
import os
import sys
import types
import uuid

import numpy as np
import torch


class Tokenizer:
    """Word-level ids; 0 pads (skipped like a special token)."""

    pad_token_id = 0

    def __init__(self, texts):
        self.vocab = {"<pad>": 0}
        for t in texts:
            for w in t.split(" "):
                self.vocab.setdefault(w, len(self.vocab))
        self.words = {i: w for w, i in self.vocab.items()}

    def ids(self, text):
        return [self.vocab[w] for w in text.split(" ")]

    def decode(self, ids, skip_special_tokens=True):
        return " ".join(self.words[int(i)] for i in ids if int(i) != 0)

    def batch_decode(self, batch, skip_special_tokens=True):
        return [self.decode(row) for row in batch]


def _padded(rows, left):
    width = max(len(r) for r in rows)
    out = torch.zeros(len(rows), width, dtype=torch.long)
    for i, r in enumerate(rows):
        if left:
            out[i, width - len(r):] = torch.tensor(r)
        else:
            out[i, : len(r)] = torch.tensor(r)
    return out


def validate(cases):
    import verl.trainer.main_ppo as main_ppo
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra
    from verl.utils.config import validate_config

    config_dir = os.path.join(os.path.dirname(main_ppo.__file__), "config")
    out = {}
    for case in cases:
        GlobalHydra.instance().clear()
        try:
            with initialize_config_dir(config_dir=config_dir, version_base=None):
                cfg = compose(config_name="ppo_trainer", overrides=case["overrides"])
            use_ref = bool(cfg.algorithm.get("use_kl_in_reward", False) or cfg.actor_rollout_ref.actor.use_kl_loss)
            validate_config(cfg, use_reference_policy=use_ref, use_critic=False)
            out[case["name"]] = "ok"
        except BaseException as e:  # noqa: BLE001 - verl raises ValueError, AssertionError, Hydra errors
            out[case["name"]] = f"{type(e).__name__}: {e}"
    return out


def dump_v07(job, tok, rows, n):
    from verl import DataProto
    from verl.trainer.ppo import core_algos
    from verl.trainer.ppo.ray_trainer import RayPPOTrainer

    prompts = [r["prompt"] for r in rows[::n]]
    uids = [str(uuid.uuid4()) for _ in prompts]
    gen = DataProto.from_single_dict({"input_ids": _padded([tok.ids(p) for p in prompts], left=True)},
                                     )
    gen.non_tensor_batch["uid"] = np.array(uids, dtype=object)
    gen.non_tensor_batch["reward_model"] = np.array([{"ground_truth": r["gt"]} for r in rows[::n]], dtype=object)
    batch = gen.repeat(repeat_times=n, interleave=True)  # ray_trainer.fit: the rollouts' order
    p_ids, r_ids = _padded([tok.ids(r["prompt"]) for r in rows], True), _padded([tok.ids(r["response"]) for r in rows], False)
    mask = torch.cat([(p_ids != 0), (r_ids != 0)], dim=1).long()
    scores = torch.zeros(r_ids.shape, dtype=torch.float32)
    for i, r in enumerate(rows):
        scores[i, len(tok.ids(r["response"])) - 1] = r["score"]
    batch.batch["prompts"], batch.batch["responses"], batch.batch["attention_mask"] = p_ids, r_ids, mask
    batch.batch["token_level_scores"] = scores
    batch.batch["token_level_rewards"] = scores
    batch.batch["response_mask"] = (r_ids != 0).long()
    batch.non_tensor_batch["row"] = np.arange(len(rows))
    fake = types.SimpleNamespace(tokenizer=tok, global_steps=job["step"], actor_rollout_wg=None,
                                 _get_dp_size=lambda wg, role: 2)
    fake._dump_generations = types.MethodType(RayPPOTrainer._dump_generations, fake)
    RayPPOTrainer._balance_batch(fake, batch, metrics={})
    adv, _ = core_algos.compute_grpo_outcome_advantage(
        token_level_rewards=batch.batch["token_level_rewards"], response_mask=batch.batch["response_mask"],
        index=batch.non_tensor_batch["uid"], norm_adv_by_std_in_grpo=job["norm_adv"])
    RayPPOTrainer._log_rollout_data(fake, batch, {}, {}, job["out"])
    first = [float(a[m.bool()][0]) for a, m in zip(adv, batch.batch["response_mask"], strict=True)]
    return {"advantages": first, "rows": [int(x) for x in batch.non_tensor_batch["row"]]}


class _Nested:
    def __init__(self, t):
        self.t = t

    def to_padded_tensor(self, padding=0):
        return self.t


class _List:
    def __init__(self, items):
        self.items = items

    def tolist(self):
        return list(self.items)


def dump_v09(job, tok, rows, n):
    import verl.trainer.ppo.v1.trainer_base as tb
    from verl import DataProto
    from verl.trainer.ppo.v1.utils import compute_advantage_for_multi_trajectories

    samples = [str(uuid.uuid4()) for _ in rows[::n]]
    keys = [f"{samples[i // n]}_{i % n}_0" for i in range(len(rows))]  # agent loop keys {sample}_{rollout}_{output}
    order = list(np.random.default_rng(0).permutation(len(rows)))  # the order the rollouts finished
    keys_in = [keys[i] for i in order]
    rows_in = [rows[i] for i in order]
    p_ids, r_ids = _padded([tok.ids(r["prompt"]) for r in rows_in], True), _padded([tok.ids(r["response"]) for r in rows_in], False)
    rm = torch.zeros(r_ids.shape, dtype=torch.float32)
    for i, r in enumerate(rows_in):
        rm[i, len(tok.ids(r["response"])) - 1] = r["score"]

    def kv_batch_get(keys, partition_id, select_fields):
        data = {"uid": _List([k.rsplit("_", 2)[0] for k in keys]), "prompts": _Nested(p_ids), "responses": _Nested(r_ids),
                "rm_scores": rm, "reward_model": _List([{"ground_truth": r["gt"]} for r in rows_in])}
        return {f: data[f] for f in select_fields}

    tb.tq = types.SimpleNamespace(kv_batch_get=kv_batch_get)
    fake = types.SimpleNamespace(tokenizer=tok, global_steps=job["step"])
    tb.PPOTrainer._init_dump_executor(fake)
    fake._write_generations = tb.PPOTrainer._write_generations  # a staticmethod
    fake._dump_generations = types.MethodType(tb.PPOTrainer._dump_generations, fake)
    meta = types.SimpleNamespace(keys=keys_in, partition_id="train")
    tb.PPOTrainer._log_rollout_data(fake, meta, {}, job["out"])
    tb.PPOTrainer._shutdown_dump_executor(fake)
    data = DataProto.from_single_dict({"token_level_rewards": rm, "response_mask": (r_ids != 0).long()})
    data.non_tensor_batch["uid"] = np.array([k.rsplit("_", 2)[0] for k in keys_in], dtype=object)
    data = compute_advantage_for_multi_trajectories(data, batch_keys=keys_in, adv_estimator="grpo", gamma=1.0, lam=1.0,
                                                     num_repeat=n, norm_adv_by_std_in_grpo=job["norm_adv"], config=None)
    adv = data.batch["advantages"]
    by_key = {k: float(a[m.bool()][0]) for k, a, m in zip(keys_in, adv, data.batch["response_mask"], strict=True)}
    return {"advantages_by_uid": by_key}


def run(job: dict) -> dict:
    """The job's parts, by verl's own code (tests/oracle/verl_checkpoint.py calls this after its ranks are done)."""
    import verl

    out = {"verl": verl.__version__}
    if job.get("validate"):
        out["validate"] = validate(job["validate"])
    if job.get("rows"):
        rows, n = job["rows"], job["n"]
        tok = Tokenizer([r["prompt"] for r in rows] + [r["response"] for r in rows])
        out["dump"] = (dump_v07 if verl.__version__.startswith("0.7") else dump_v09)(job, tok, rows, n)
    if job.get("scores"):
        from verl.utils.reward_score import default_compute_score

        out["scores"] = [float(default_compute_score(src, sol, gt)) for src, sol, gt in job["scores"]]
    return out


def main():
    json.dump(run(json.load(sys.stdin)), sys.stdout)


if __name__ == "__main__":
    main()
