"""verl's own checkpoints, per release: written by verl's worker and trainer on 2 gloo CPU ranks, read and merged by
nbtools, and merged by verl's own model merger; the two merges must agree tensor for tensor.

``tests/oracle/verl_checkpoint.py`` (run in each release's cached venv, ``tools/verl_oracle_venv.sh``) builds a tiny
Llama in code (vocabulary 103: uneven shards over 2 ranks), has verl's ``ActorRolloutRefWorker`` (role ``actor``)
load it with ``actor.strategy`` ``fsdp2`` and ``fsdp`` (FSDP1, verl's default), saves steps 1-3 through the
trainer's own ``_save_checkpoint`` with ``trainer.max_actor_ckpt_to_keep=2``, and merges the last step with
``python -m verl.model_merger merge --backend fsdp``. Its docstring lists what this CPU machine supplies that verl
lacks (a CPU platform on 0.9.x, ``torch.cpu.empty_cache``, torch's GPU-only guard on FSDP1's ``sync_module_states``,
eager attention) and the exact errors without them; nothing of verl's checkpoint or merge code is replaced.

What is compared:
- nbtools' reader on verl's run directory: the steps, the one whose ``actor/`` verl pruned, world size, FSDP version,
  ``latest_checkpointed_iteration.txt``, and the merge's verification (zip CRCs, read-back hashes);
- nbtools' merge against verl's merger: the same tensor names and shapes; verl casts to bfloat16
  (``verl/model_merger/fsdp_model_merger.py``, ``_load_and_merge_state_dicts``), nbtools keeps the float32 training
  saved, so nbtools' tensors cast to bfloat16 must equal verl's bit for bit, and nbtools' float32 must equal the
  weights the ranks held (the base model plus the steps' offsets, computed here in float32);
- the HF config, generation config and tokenizer files verl's rank 0 wrote (``actor/huggingface``) against both merged
  directories;
- ``test_comparison_sees_a_wrong_merge``: the comparison itself reports a transposed, renamed, rank-swapped or
  re-typed tensor, so a wrong merge cannot pass.

CPU: 32 CPU-seconds with test_verl_oracle.py, whose job runs in the same verl process per release
(tests/oracle/conftest.py), for both releases and both strategies (28 s of wall, 2026-11-28, this 2-core machine; 76
when each module ran its own process per release and the ranks were spawned, each importing verl and transformers
again), the venvs cached; ``NBTOOLS_VERL_ORACLE`` picks the releases (default ``0.7.0 0.9.1``).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import torch
from merged_compare import diff, mutants, tensors

from nbtools import checkpoints as ck
from tests.oracle.verl_cases import STEPS, STRATEGIES

SLOW_FIXTURES = ("verl_ckpt",)  # a venv per release and two gloo ranks of verl: `make test`, not the inner loop
RELEASES = os.environ.get("NBTOOLS_VERL_ORACLE", "0.7.0 0.9.1").split()


@pytest.fixture(scope="module", params=RELEASES)
def verl_ckpt(request, verl_release):
    """verl's checkpoints and merges for a release (run with the dump oracle's job: tests/oracle/conftest.py)."""
    version = request.param
    out, result = verl_release(version)
    return version, out, result


def _truth(out: Path, step: int) -> dict[str, torch.Tensor]:
    """The weights the ranks held at ``step``: the base model plus each step's offset, added in float32 in order."""
    w = tensors(out / "base")
    for s in STEPS[: STEPS.index(step) + 1]:
        w = {k: v + s / 1024 for k, v in w.items()}
    return w


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_reader_on_verls_run(verl_ckpt, strategy):
    version, _, result = verl_ckpt
    run = Path(result["strategies"][strategy]["run"])
    assert (run / "latest_checkpointed_iteration.txt").read_text() == str(STEPS[-1])
    df = ck.list_checkpoints(run)
    assert df["step"].tolist() == STEPS and set(df["layout"]) == {"verl_fsdp"}
    pruned = df[df.step == STEPS[0]].iloc[0]  # max_actor_ckpt_to_keep=2 removed its actor/, verl left data.pt
    assert (run / "global_step_1" / "data.pt").is_file() and not (run / "global_step_1" / "actor").exists()
    assert pruned["problem"].startswith("no actor/ directory"), pruned["problem"]
    done = df[df.step > STEPS[0]]
    assert done["problem"].isna().all(), done["problem"].tolist()
    assert done["world_size"].tolist() == [2, 2]
    assert done["fsdp_version"].tolist() == [2 if strategy == "fsdp2" else 1] * 2
    assert df["latest"].tolist() == [False, False, True]
    assert ck.latest(run) == run / "global_step_3"
    assert ck.detect_layout(run / "global_step_3") == "verl_fsdp"


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_merge_equals_verls_model_merger(verl_ckpt, strategy, tmp_path):
    version, out, result = verl_ckpt
    paths = result["strategies"][strategy]
    r = ck.merge(Path(paths["run"]) / "global_step_3", tmp_path / "hf", progress=False)
    assert r.layout == "verl_fsdp" and r.verified and ck.verify(r.out).ok
    ours, theirs = tensors(r.out), tensors(Path(paths["verl_merged"]))
    assert len(ours) == 2 + 9 * 2 + 1 == len(theirs)  # embed, norm, 9 per layer, lm_head
    assert {v.dtype for v in theirs.values()} == {torch.bfloat16}  # verl's merger casts; ours keeps what was saved
    assert {v.dtype for v in ours.values()} == {torch.float32}
    assert diff(ours, theirs, cast=torch.bfloat16) == []
    assert diff(ours, _truth(out, 3)) == []
    step2 = ck.merge(Path(paths["run"]) / "global_step_2", tmp_path / "hf2", progress=False)
    assert diff(tensors(step2.out), _truth(out, 2)) == []


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_config_and_tokenizer_as_verl_wrote_them(verl_ckpt, strategy, tmp_path):
    from transformers import AutoTokenizer

    _, out, result = verl_ckpt
    paths = result["strategies"][strategy]
    hf = Path(paths["run"]) / "global_step_3" / "actor" / "huggingface"
    r = ck.merge(hf.parent.parent, tmp_path / "hf", progress=False)
    merged, verls = Path(r.out), Path(paths["verl_merged"])
    wrote = json.loads((hf / "config.json").read_text())
    ours, theirs = json.loads((merged / "config.json").read_text()), json.loads((verls / "config.json").read_text())
    model = ("architectures", "vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers",
             "num_attention_heads", "num_key_value_heads", "tie_word_embeddings", "bos_token_id", "eos_token_id")
    assert {k: ours.get(k) for k in model} == {k: wrote.get(k) for k in model} == {k: theirs.get(k) for k in model}
    for name in ("tokenizer.json", "tokenizer_config.json"):  # verl's rank 0 saved them; both merges carry them
        assert (hf / name).is_file() and (merged / name).read_bytes() == (hf / name).read_bytes(), name
    text = "w7 w42 w101"
    ids = AutoTokenizer.from_pretrained(str(merged)).encode(text)
    assert ids == AutoTokenizer.from_pretrained(str(verls)).encode(text) and 42 in ids
    if (hf / "generation_config.json").is_file():
        assert json.loads((merged / "generation_config.json").read_text())["eos_token_id"] == wrote["eos_token_id"]


def test_comparison_sees_a_wrong_merge(verl_ckpt):
    """The comparison the tests above rely on reports each way a merge can go wrong."""
    _, _, result = verl_ckpt
    good = tensors(Path(result["strategies"][STRATEGIES[0]]["verl_merged"]))
    q = "model.layers.0.self_attn.q_proj.weight"  # square (32 x 32): a transposed copy keeps its shape
    assert good[q].shape[0] == good[q].shape[1]
    for name, bad in mutants(good, q, "model.layers.0.mlp.down_proj.weight", 16).items():
        assert diff(bad, good), f"a {name} tensor was not seen"
    assert diff(good, good) == []
