"""nbtools.fit refuses inputs no GPU run can have, naming the key (or flag) and the fix (issue #31's finding).

Before: ``hidden_size: -4096`` gave "fits" with a -5.82 GiB peak, ``--vllm-tensor-parallel 0`` and
``--gpu-memory-utilization nan`` were accepted, and NaN / Infinity / a list / a 5000-digit integer in config.json
ended in "unexpected ... a bug in nbtools".
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from nbtools import fit
from nbtools.errors import ConfigError

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent / "nbtools"
QWEN = ROOT / "nbtools" / "data" / "model_configs" / "Qwen--Qwen2.5-1.5B.json"


def _cfg(**changes) -> dict:
    return {**json.loads(QWEN.read_text()), **changes}


@pytest.mark.parametrize("key,value", [("hidden_size", -4096), ("hidden_size", 1536.5), ("num_hidden_layers", 0),
                                       ("vocab_size", float("nan")), ("intermediate_size", float("inf")),
                                       ("num_attention_heads", True), ("head_dim", "128"),
                                       ("num_key_value_heads", 10**5000)],
                         ids=["negative", "fractional", "zero", "nan", "inf", "bool", "string", "5000-digits"])
def test_impossible_sizes_in_a_config_dict_are_refused(key, value):
    with pytest.raises(ConfigError, match=rf"{key} must be a positive whole number .*fix: pass the model's own config"):
        fit.estimate(_cfg(**{key: value}), gpu="h100", phase="training")


def test_whole_floats_are_sizes_and_the_estimate_stays_positive():
    a = fit.resolve_arch(_cfg(hidden_size=1536.0))
    assert a.hidden_size == 1536 and isinstance(a.hidden_size, int)
    r = fit.estimate(_cfg(), gpu="h100", phase="training")
    assert r.training.peak_gib > 0 and all(v >= 0 for v in r.training.terms.values())


@pytest.mark.parametrize("text,match", [
    ('{"hidden_size": NaN}', "NaN is not a valid JSON value"),
    ('{"hidden_size": Infinity}', "Infinity is not a valid JSON value"),
    ('[{"hidden_size": 1536}]', "holds a JSON list, not an object"),
    ('{"hidden_size": ' + "9" * 5000 + "}", "fix: pass the model's own config.json"),
    ("{", "is not valid JSON"),
])
def test_malformed_config_json_files_get_a_clear_error(tmp_path, text, match):
    f = tmp_path / "config.json"
    f.write_text(text)
    with pytest.raises(ConfigError, match=match):
        fit.resolve_arch(str(f))
    r = subprocess.run([str(BIN), "fit", "--model", str(f), "--gpu", "h100"], capture_output=True, text=True,
                       timeout=120, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    assert r.returncode != 0 and "unexpected" not in r.stderr and "fix:" in r.stderr, r.stderr


@pytest.mark.parametrize("args,match", [
    (["--vllm-tensor-parallel", "0"], "--vllm-tensor-parallel must be a whole number >= 1, got 0"),
    (["--vllm-tensor-parallel", "-2"], "--vllm-tensor-parallel must be a whole number >= 1, got -2"),
    (["--gpu-memory-utilization", "nan"], r"--gpu-memory-utilization must be a fraction of the GPU in \(0, 1\], got nan"),
    (["--gpu-memory-utilization", "2"], r"--gpu-memory-utilization must be a fraction of the GPU in \(0, 1\], got 2.0"),
    (["--max-model-len", "-100"], "--max-model-len must be a whole number >= 1, got -100"),
])
def test_cli_refuses_impossible_flags_with_the_fix(args, match):
    r = subprocess.run([str(BIN), "fit", "--model", str(QWEN), "--gpu", "h100", *args], capture_output=True,
                       text=True, timeout=120, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    assert r.returncode != 0
    assert __import__("re").search(match, r.stderr), r.stderr
    assert "fix: pass e.g. " + args[0] in r.stderr


def test_inputs_from_an_experiment_are_checked_by_their_config_key():
    r = fit.estimate("Qwen/Qwen2.5-1.5B", gpu="h100", phase="training")
    i = r.inputs.with_(keys={"vllm_tensor_parallel": "trainer.vllm_cfg.tensor_parallel_size"})
    with pytest.raises(ConfigError, match=r"trainer.vllm_cfg.tensor_parallel_size must be .* fix: pass e.g. "
                                          r"trainer.vllm_cfg.tensor_parallel_size=1"):
        fit.evaluate(i.with_(vllm_tensor_parallel=0))
    with pytest.raises(ConfigError, match="logprob_chunk_size must be a whole number >= 1"):
        fit.evaluate(r.inputs.with_(logprob_chunk_size=-1))
    with pytest.raises(ConfigError, match="micro_batch must be a positive integer"):
        fit.estimate("Qwen/Qwen2.5-1.5B", micro_batch=2.5)
