"""Property-based tests (hypothesis): configs and eval logs nobody wrote by hand.

Configs: random mappings with known and unknown keys, wrong types and odd values either load or raise
``ConfigError`` (never TypeError/KeyError/...), and every wrongly typed key and unknown key is listed. Eval logs:
valid score blocks mixed with noise, truncated blocks and impossible numbers either parse or raise nbtools' typed
errors, and no returned block is impossible. Example counts are kept small so the file runs in a few seconds.
"""

from __future__ import annotations

import copy
import dataclasses
import typing
from pathlib import Path

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nbtools import config
from nbtools.config import ConfigError, Experiment
from nbtools.config._yaml import load_yaml
from nbtools.errors import NbtoolsError, Problem
from nbtools.evals import parse_score_blocks, read_score_log

ROOT = Path(__file__).resolve().parents[2]
BASES = [yaml.safe_load(p.read_text()) for p in sorted((ROOT / "experiments").glob("*.yaml"))]
FAST = settings(max_examples=60, deadline=None, database=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])


def _fields(cls: type, prefix: str = "") -> dict[str, typing.Any]:
    """Every dotted key of the config tree with its type (sections recursed into)."""
    out: dict[str, typing.Any] = {}
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        if f.name == "source":
            continue
        tp = hints[f.name]
        # a section or an optional one; a list of sections (rehearsal.faults) is one list-valued key
        inner = [a for a in typing.get_args(tp) if dataclasses.is_dataclass(a)] if typing.get_origin(tp) is not list else []
        sub = tp if dataclasses.is_dataclass(tp) else (inner[0] if inner else None)
        if sub is not None:
            out.update(_fields(sub, f"{prefix}{f.name}."))
        else:
            out[f"{prefix}{f.name}"] = tp
    return out


FIELDS = _fields(Experiment)
SCALAR = {k for k, tp in FIELDS.items() if typing.get_origin(tp) is not dict and tp is not typing.Any
          and all(a is not typing.Any and typing.get_origin(a) not in (list, dict) for a in (typing.get_args(tp) or [tp]))}

scalars = st.one_of(
    st.none(), st.booleans(), st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=30),
    st.sampled_from(["hf_Sent1nelT0kenAbCdEfGhIjKlMnOpQrStUv", "0123456789abcdef0123456789abcdef5e471e1a", "gke",
                     "val:accuracy", "train:nope", "gs://bucket", "ray://h:1", "", "1e-6", "~", "safetensors"]),
)
values = st.recursive(scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=4), st.dictionaries(st.one_of(st.text(max_size=8), st.integers(-5, 5)), inner, max_size=4)),
    max_leaves=8)
unknown_keys = st.text(alphabet="abcdefgh", min_size=3, max_size=8).map(lambda s: s + "_zz")  # never a real key


@FAST
@given(base=st.sampled_from(BASES), changes=st.dictionaries(st.sampled_from(sorted(FIELDS)), values, max_size=6),
       wrong=st.dictionaries(st.sampled_from(sorted(SCALAR)), st.dictionaries(st.text(max_size=4), scalars, max_size=2),
                             max_size=3),
       unknown=st.dictionaries(st.one_of(unknown_keys, st.builds(lambda a, b: f"{a}.{b}", st.sampled_from(
           ["grpo", "cluster", "secrets", "trainer"]), unknown_keys)), values, max_size=3))
def test_any_config_loads_or_raises_config_error_listing_every_problem(base, changes, wrong, unknown):
    data = copy.deepcopy(base)
    for key, value in {**changes, **wrong, **unknown}.items():
        config._set_dotted(data, key, value)
    try:
        cfg = config.from_dict(data)
    except ConfigError as e:
        problems = e.problems
        assert problems and all(isinstance(p, Problem) and p.what and p.fix for p in problems)
        for key in wrong:  # a mapping where a scalar belongs is always wrong, and listed under its key
            if not any(k != key and (key.startswith(k + ".")) for k in {**changes, **unknown}):
                assert any(p.key == key for p in problems), (key, problems)
        for key in unknown:
            section = key.rpartition(".")[0]
            if not any(k == section or section.startswith(k + ".") for k in {**changes, **wrong}):
                assert any(p.key == key and p.what.startswith("unknown key") for p in problems), (key, problems)
        assert "hf_Sent1nelT0ken" not in str(e) and "0123456789abcdef0123456789abcdef5e471e1a" not in str(e)
        return
    assert not wrong and not unknown
    cfg.config_hash()  # derived values work on anything that loaded
    assert config.from_dict(config.to_dict(cfg)) == cfg


@FAST
@given(st.dictionaries(st.one_of(st.text(max_size=10), st.integers(), st.none(), st.booleans()), values, max_size=5))
def test_random_top_level_mappings_raise_only_config_error(data):
    try:
        config.from_dict(data)
    except ConfigError as e:
        assert e.problems


yaml_text = st.lists(st.sampled_from(list("[]{}:&*!|>-'\"#%@`,? \n\t\\abn01x.=<~") + [
    "!!int ", "!!binary ", "!!python/object ", "&a ", "*a", "<<: ", "\n  ", "name: ", "grpo: ", "- "]), max_size=40).map("".join)


@FAST
@given(yaml_text)
def test_any_yaml_text_loads_or_raises_config_error(text):
    try:
        data = load_yaml(text)
    except ConfigError as e:
        assert e.problems
        return
    if isinstance(data, dict):
        try:
            config.from_dict(data)
        except ConfigError:
            pass


# -------------------------------------------------------------------------------------------------- eval logs
RULE = "=" * 60


def _block(model: str, dataset: str, num: float, den: int, *, n: int, temperature: float, score: str | None = None,
           prefix: str = "") -> str:
    score = score if score is not None else f"{num / den:.4f}"
    lines = [RULE, f"model_name={model!r} dataset_name={dataset!r}",
             f"max_new_tokens=2048 temperature={temperature} top_p=1.0 top_k=-1 seed=42", "",
             f"metric=pass@1 num_tests_per_prompt={n}", "", f"score={score} ({num}/{den})", RULE]
    return "\n".join(prefix + ln if ln else ln for ln in lines) + "\n"


valid_blocks = st.builds(
    lambda den, frac, n, t, pid, model: (_block(model, "math500", round(den * frac, 4), den, n=n, temperature=t,
                                                prefix=f"(EvalActor pid={pid}) " if pid else ""),
                                         (round(den * frac, 4), den)),
    st.integers(1, 5000), st.floats(0, 1), st.integers(1, 16), st.sampled_from([0.0, 0.6, 1.0]),
    st.one_of(st.none(), st.integers(1, 99999)), st.sampled_from(["base", "merged_hf", "Qwen2.5-Math-1.5B"]))
impossible_blocks = st.one_of(
    st.builds(lambda den, extra: _block("bad", "math500", den + extra, den, n=1, temperature=0.0, score="1.5000"),
              st.integers(1, 500), st.integers(1, 500)),
    st.builds(lambda den, num, off: _block("bad", "math500", num, den, n=1, temperature=0.0,
                                            score=f"{min(1.0, num / den + off):.4f}"),
              st.integers(10, 500), st.integers(0, 5), st.floats(0.01, 0.9)),
    st.builds(lambda num: _block("bad", "math500", num, 0, n=1, temperature=0.0, score="0.0000"), st.integers(0, 5)),
)
safe_noise = st.lists(st.sampled_from(list("abcdefghij klmnop0123456789:./%|-()") + ["INFO ", "\x1b[32m", "score"]),
                      max_size=40).map(lambda parts: "".join(parts) + "\n")
hostile_noise = st.text(max_size=80).map(lambda s: s + "\n") | st.sampled_from(
    ["score=0.5 (1/2)\n", "model_name='x' dataset_name='y'\n", RULE + "\n", "score=nan (1/0)\n", "top_k=1e999\n",
     "model_name='m' dataset_name='d'\nmax_new_tokens=1 temperature=0 top_p=1 top_k=-1 seed=1\nmetric=pass@1 "
     "num_tests_per_prompt=1\nscore=0.1 (99999999999999999999999/1)\n"])


@FAST
@given(st.lists(st.tuples(safe_noise, valid_blocks), max_size=5), safe_noise, st.integers(0, 400))
def test_valid_blocks_in_noise_are_all_found_and_a_cut_last_block_is_pending(parts, tail, cut):
    text = "".join(noise + block for noise, (block, _) in parts) + tail
    blocks = parse_score_blocks(text)
    assert [(b.numerator, b.denominator) for b in blocks] == [nd for _, (_, nd) in parts]
    if parts:  # the log is being written: cut it inside the last block
        line_end = text.index("\n", text.rindex("model_name="))  # after the block's first line ...
        end = text.index(")", text.index("score=", line_end))  # ... and before its score is complete
        cut_at = line_end + cut % (end - line_end)
        log = read_score_log(text[:cut_at])
        assert [(b.numerator, b.denominator) for b in log.blocks] == [nd for _, (_, nd) in parts[:-1]]
        assert log.pending_line is not None and not log.problems


@FAST
@given(st.lists(st.one_of(valid_blocks.map(lambda b: b[0]), impossible_blocks, hostile_noise, safe_noise), max_size=8),
       st.integers(0, 10_000))
def test_any_log_parses_to_possible_blocks_or_raises_typed_errors(parts, cut):
    text = "".join(parts)
    for t in (text, text[: cut % (len(text) + 1)]):
        for strict in (True, False):
            try:
                blocks = parse_score_blocks(t, strict=strict)
            except NbtoolsError:
                assert strict
                continue
            assert all(not b.problems() for b in blocks)
            assert all(0 <= b.accuracy <= 1 and b.denominator >= 1 for b in blocks)
        log = read_score_log(t)
        assert all(not b.problems() for b in log.blocks)
        assert len(log.blocks) + len(log.problems) + (log.pending_line is not None) <= t.count("model_name=")
