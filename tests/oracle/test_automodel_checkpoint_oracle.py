"""NeMo-RL v0.7's ``policy/weights`` written by NeMo-Automodel 0.7.0's own ``Checkpointer`` (the DTensor-v2 policy's
checkpoint writer; NeMo-RL itself is not on PyPI), read and merged by nbtools.

``tests/oracle/automodel_checkpoint.py`` runs in a cached venv (``tools/automodel_venv.sh``: PyPI's
``nemo-automodel==0.7.0`` with ``--no-deps`` beside the project's torch 2.13.0+cpu; git-ignored ``.venv-automodel/``):
2 gloo CPU ranks load a tiny Llama (vocabulary 103: uneven shards), shard it with FSDP2, and ``save_model`` it with
``model_save_format`` ``torch_save`` (``policy/weights/model/.metadata`` + ``__<rank>_0.distcp``) and ``safetensors``
(NeMo-RL v0.7's default: per-rank ``shard-0000R-model-00001-of-00001.safetensors`` + ``.hf_metadata/``). nbtools must
detect each layout and merge it to exactly the float32 weights the ranks held.

What does not run as NeMo-RL runs it, and why (details in that script's docstring):
- the async save NeMo-RL v0.7 configures (``is_async=True``): torch's ``DefaultStager`` refuses CPU (``AssertionError:
  Non-blocking copy requires that the current accelerator is available.``); the synchronous save writes the same files;
- Automodel's FSDP2 parallelizer (``fully_shard`` is applied per layer here, as it does) and NeMo-RL's own
  ``AutomodelCheckpointManager`` around the ``Checkpointer`` (NeMo-RL is not installable: PyPI holds a placeholder), so
  the files NeMo-RL writes itself beside the weights (``config.yaml``, ``training_info.json``, ``policy/tokenizer``)
  stay the project's writer (tests/support/checkpoint_writer.py ``write_step_files``) and are not used here.

CPU: 10 CPU-seconds (the ranks forked after one import of Automodel and transformers; 18 when spawned; 2026-11-28,
this 2-core machine), plus the venv's build where
``.venv-automodel/`` is missing (one wheel of 3.7 MB, about 6 CPU-seconds).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from merged_compare import diff, mutants, tensors

from nbtools import checkpoints as ck

ROOT = Path(__file__).resolve().parents[2]
SLOW_FIXTURES = ("automodel_ckpt",)  # a venv and two gloo ranks: `make test`, not the inner loop
VERSION = "0.7.0"
FORMATS = {"torch_save": "v2_torch_save", "safetensors": "v2_safetensors"}
STEP = 3

@pytest.fixture(scope="module")
def automodel_ckpt(tmp_path_factory):
    built = subprocess.run(["bash", str(ROOT / "tools" / "automodel_venv.sh"), sys.executable,
                            str(ROOT / ".venv-automodel" / VERSION), VERSION], capture_output=True, text=True)
    assert built.returncode == 0, f"building the nemo-automodel {VERSION} venv failed:\n{built.stderr[-3000:]}"
    python = built.stdout.strip().splitlines()[-1]
    out = tmp_path_factory.mktemp("automodel")
    job = {"out": str(out), "formats": list(FORMATS), "step": STEP}
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}
    ran = subprocess.run([python, str(Path(__file__).with_name("automodel_checkpoint.py"))], input=json.dumps(job),
                         capture_output=True, text=True, env=env, timeout=1200)
    assert ran.returncode == 0, f"nemo-automodel's checkpoint code failed:\n{ran.stderr[-5000:]}"
    result = json.loads(ran.stdout.strip().splitlines()[-1])
    assert result["nemo_automodel"] == VERSION
    return out, result


@pytest.mark.parametrize("fmt", list(FORMATS))
def test_automodel_writes_nemo_rl_v07s_layout(automodel_ckpt, fmt):
    out, result = automodel_ckpt
    files = result["files"][fmt]
    if fmt == "torch_save":  # torch DCP: what convert_dcp_to_hf.py and nbtools read
        assert files == ["policy/weights/model/.metadata", "policy/weights/model/__0_0.distcp",
                         "policy/weights/model/__1_0.distcp"]
    else:
        assert {"policy/weights/model/shard-00001-model-00001-of-00001.safetensors",
                "policy/weights/model/shard-00002-model-00001-of-00001.safetensors",
                "policy/weights/model/.hf_metadata/config.json"} <= set(files)
        assert not any(f.endswith(".metadata") for f in files)  # no DCP metadata: convert_dcp_to_hf.py cannot read it
    assert ck.detect_layout(out / fmt / f"step_{STEP}") == FORMATS[fmt]


@pytest.mark.parametrize("fmt", list(FORMATS))
def test_merge_equals_the_weights_automodel_saved(automodel_ckpt, fmt, tmp_path):
    from transformers import AutoConfig

    out, _ = automodel_ckpt
    truth = {k: v + 1 / 1024 for k, v in tensors(out / "base").items()}  # what each rank added before saving
    config = AutoConfig.from_pretrained(str(out / "base")) if fmt == "torch_save" else None  # .hf_metadata has it
    r = ck.merge(out / fmt / f"step_{STEP}", tmp_path / "hf", config=config, progress=False)
    assert r.verified and ck.verify(r.out).ok
    got = tensors(r.out)
    assert diff(got, truth) == []
    q = "model.layers.0.self_attn.q_proj.weight"
    for name, bad in mutants(got, q, "model.embed_tokens.weight", 52).items():
        assert diff(bad, truth), f"a {name} tensor was not seen"
    if fmt == "safetensors":
        wrote = json.loads((out / fmt / f"step_{STEP}" / "policy/weights/model/.hf_metadata/config.json").read_text())
        merged = json.loads((Path(r.out) / "config.json").read_text())
        assert {k: merged[k] for k in ("vocab_size", "hidden_size", "num_hidden_layers", "architectures")} == \
               {k: wrote[k] for k in ("vocab_size", "hidden_size", "num_hidden_layers", "architectures")}
    assert torch.equal(got["lm_head.weight"], truth["lm_head.weight"])
