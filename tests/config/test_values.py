"""#41: values that lint used to pass — a token in any free-text value, a learning rate or temperature that is NaN,
inf, zero or negative, a negative generation limit, a zero sequence length — and a NUL byte in the YAML."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from nbtools import config
from nbtools.errors import ConfigError

LOCAL = Path(__file__).resolve().parents[2] / "experiments" / "local.yaml"
HF = "hf_" + "a1B2c3D4" * 5


@pytest.mark.parametrize("key,value", [("logging.wandb_project", HF), ("model.name", HF),
                                       ("data.data_dir", f"/data/{HF}/gsm8k"), ("logging.wandb_project", "ab12" * 10)])
def test_a_token_in_any_free_text_value_is_refused_and_never_shown(key, value):
    with pytest.raises(ConfigError, match=rf"{key}: the value <redacted, {len(value)} chars> looks like") as e:
        config.load(LOCAL, overrides={key: value})
    assert value not in str(e.value)


@pytest.mark.parametrize("key,value", [("model.name", f"cache/hub/models--q/snapshots/{'ab12' * 10}"),
                                       ("cluster.nccl_installer_ref", "ab12" * 10)])
def test_a_git_commit_is_not_a_token(key, value):
    assert config.load(LOCAL, overrides={key: value}) is not None


@pytest.mark.parametrize("key,value,says", [
    ("grpo.learning_rate", math.nan, "finite number > 0"), ("grpo.learning_rate", math.inf, "finite number > 0"),
    ("grpo.learning_rate", -1.0, "finite number > 0"), ("grpo.learning_rate", 0.0, "finite number > 0"),
    ("grpo.temperature", math.nan, "finite number >= 0"), ("grpo.temperature", -0.5, "finite number >= 0"),
    ("grpo.max_new_tokens", -3, "must be >= 1"), ("model.max_total_sequence_length", 0, "must be >= 1")])
def test_numbers_a_trainer_would_fail_on_later_are_refused(key, value, says):
    with pytest.raises(ConfigError, match=rf"{key}: .* {says}"):
        config.load(LOCAL, overrides={key: value})


def test_a_nul_byte_in_the_yaml_is_a_config_error_not_a_bug(tmp_path):
    p = tmp_path / "x.yaml"
    p.write_bytes(LOCAL.read_bytes() + b"\nname: a\x00b\n")
    with pytest.raises(ConfigError, match=r"not valid YAML: character \d+: the control character #x0000"):
        config.load(p)
