"""Config problems as typed data (issue 43): each a ``Problem(key, value, allowed, fix)``, every one at once.

The type checks are pydantic's (its errors carry the key path); nbtools words them. A message lists each problem once
with its own fix; the CLI's forms are tested in tests/cli/test_fix_once.py.
"""

from __future__ import annotations

import pytest

from nbtools import config
from nbtools.config import ConfigError, Problem


def _problems(data: dict) -> dict[str, Problem]:
    with pytest.raises(ConfigError) as ei:
        config.from_dict(data)
    return {p.key: p for p in ei.value.problems}


def test_type_problems_are_typed_with_key_value_allowed_and_fix():
    got = _problems({"name": "x", "backend": "gkee", "grpo": {"seed": "5", "seeed": 1, "val_at_start": "yes"},
                     "cluster": {"mode": "auto"}, "rehearsal": {"faults": [{"kind": "hang"}, {"kind": "hnag"}]}})
    assert got["backend"] == Problem("backend", "'gkee'", "'local', 'gke', 'ray'", "set `backend` to one of them",
                                     what="'gkee' is not allowed; allowed: 'local', 'gke', 'ray' (did you mean 'gke'?)")
    assert (got["grpo.seed"].value, got["grpo.seed"].allowed) == ("'5'", "an integer")  # a quoted number is no integer
    assert got["grpo.seeed"].fix == "did you mean `grpo.seed`?" and got["grpo.seeed"].what.startswith("unknown key")
    assert got["grpo.val_at_start"].allowed == "true | false"
    assert got["cluster.mode"].allowed == "'standard', 'autopilot'"
    assert got["rehearsal.faults[1].kind"].fix == "set `rehearsal.faults[1].kind` to one of them"
    assert len(got) == 6 and all(p.fix and p.what for p in got.values())


def test_cross_field_rules_are_typed_too_and_every_problem_comes_at_once():
    got = _problems({"name": "Bad Name", "ray": {"port": 0}, "grpo": {"kl_penalty": -1, "seed": True}})
    assert got["ray.port"] == Problem("ray.port", "0", "1..65535", "e.g. 8265 for the dashboard, 6379 for the head",
                                      what="0 is not a TCP port; allowed: 1..65535")
    assert got["name"].fix == "e.g. `name: bad-name`" and got["grpo.kl_penalty"].allowed == ">= 0"
    assert got["grpo.seed"].what == "expected an integer, got True"  # a bool is no integer
    assert list(got) == ["grpo.seed", "name", "ray.port", "grpo.kl_penalty"]  # type problems, then the rules


def test_message_lists_each_problem_once_with_its_own_fix():
    with pytest.raises(ConfigError) as ei:
        config.from_dict({"name": "x", "grpo": {"seed": "a", "max_num_steps": 0}, "cluster": {"mode": "auto"}})
    text = str(ei.value)
    assert text.startswith("3 problems:\n") and "problem(s)" not in text
    assert text.count("fix:") == 3 and "see the message above" not in text
    assert "  - grpo.max_num_steps: 0 must be >= 1; fix: use a positive integer" in text.splitlines()
    with pytest.raises(ConfigError) as ei:
        config.from_dict({"name": "x", "grpo": {"seed": "a"}})
    assert str(ei.value) == "1 problem:\n  - grpo.seed: expected an integer, got 'a'; fix: write a whole number"


def test_a_problem_written_as_one_sentence_is_read_once():
    e = ConfigError(["trainer.kind: 'x' is unknown; fix: use 'verl'", "no key here, just words; fix: do this"])
    assert [(p.key, p.what, p.fix) for p in e.problems] == [
        ("trainer.kind", "'x' is unknown", "use 'verl'"), ("", "no key here, just words", "do this")]
    assert e.problem_fixes == ["use 'verl'", "do this"]


def test_yaml_exponent_without_a_dot_is_a_number_and_a_string_field_takes_a_number(tmp_path):
    p = tmp_path / "e.yaml"
    p.write_text("name: x\ngrpo:\n  learning_rate: 1e-5\ncluster:\n  head_cpu: 8\ngcp:\n  project_number: 123456789\n")
    cfg = config.load(p)
    assert cfg.grpo.learning_rate == 1e-5 and cfg.cluster.head_cpu == "8" and cfg.gcp.project_number == "123456789"
