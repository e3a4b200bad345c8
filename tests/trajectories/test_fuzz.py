"""Property test of nbtools.trajectories over generated jsonl records: valid ones in NeMo-RL's schemas (v0.5,
v0.6+ train, v0.6+ chat validation) and mutated ones (wrong types, missing keys, deep nesting, huge ints, NaN,
non-UTF-8 bytes, truncated lines, list-of-parts content, extra or missing wrapping). No input may make a reader
raise anything but nbtools' typed errors, and every way of reading gives the same rows:
rows read + lines skipped = complete lines, and read() == read(arrays=True) == iter_records == record().

The suite runs a fixed set of 40 examples (derandomized: the same inputs every run, a few seconds). To search
further, set NBTOOLS_FUZZ_EXAMPLES (e.g. 5000): the examples are then random and new on each run.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import tempfile
import warnings
from pathlib import Path

import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nbtools import trajectories as T

KEYS = ["step", "idx", "prompt", "response", "env_observation", "reward", "input_length", "think", "answer"]
# an explicit alphabet (JSON's special characters, whitespace, multi-byte UTF-8): hypothesis' default one costs
# seconds to build on a machine without its .hypothesis cache
text = st.text(alphabet='ab xyz09.-"\\/\n\t\r\x00\x1f\x7f<>{}[],:éß中😀\u2028', max_size=12)
number = st.floats(allow_nan=True, allow_infinity=True) | st.integers(-(2**70), 2**70)
scalar = st.none() | st.booleans() | number | text
value = st.recursive(scalar, lambda c: st.lists(c, max_size=3) | st.dictionaries(text, c, max_size=3), max_leaves=6)


@st.composite
def valid_record(draw) -> dict:
    n = draw(st.integers(0, 6))
    p, r, e = draw(text), draw(text), draw(st.sampled_from(["Environment: correct", "Environment: incorrect", ""]))
    floats = st.lists(st.floats(-5, 5), min_size=n, max_size=n)
    schema = draw(st.sampled_from(["v0.6", "v0.5", "chat"]))
    rec: dict = {"content": [[p, r, e]], "rewards": [draw(st.floats(0, 1))]}
    if schema == "chat":
        rec["content"] = [[{"role": "user", "content": p}, {"role": "assistant", "content": r},
                           {"role": "environment", "content": e}]]
    if schema != "chat":
        rec["input_lengths"] = [draw(st.integers(0, 4096))]
    if schema == "v0.6":
        rec["token_ids"] = [draw(st.lists(st.integers(0, 150_000), min_size=n, max_size=n))]
        rec["token_loss_mask"] = [draw(st.lists(st.integers(0, 1), min_size=n, max_size=n))]
        rec["advantages"] = [draw(floats)]
    if schema != "chat":
        rec["generation_logprobs"] = [draw(floats)]
        rec["prev_logprobs"] = [draw(floats)]
    rec["idx"] = draw(st.integers(0, 10_000))
    return rec


def _parts(v):
    return [{"type": "text", "text": v}, {"type": "image_url", "image_url": {"url": "data:,"}}] if isinstance(v, str) else v


@st.composite
def line(draw) -> bytes:
    """One line (without its newline): a valid record, mutated as a record and/or as bytes."""
    rec = draw(valid_record())
    keys = list(rec)
    for _ in range(draw(st.integers(0, 2))):
        how = draw(st.sampled_from(["type", "drop", "wrap", "unwrap", "huge_idx", "nan", "parts", "surrogate"]))
        k = draw(st.sampled_from(keys))
        if how == "type":
            rec[k] = draw(value)
        elif how == "drop":
            rec.pop(k, None)
        elif how == "wrap":
            rec[k] = [[rec.get(k)]] if draw(st.booleans()) else [rec.get(k)]
        elif how == "unwrap" and isinstance(rec.get(k), list) and rec[k]:
            rec[k] = rec[k][0]
        elif how == "huge_idx":
            rec["idx"] = draw(st.integers(2**63, 2**90) | st.integers(-(2**90), -(2**63) - 1))
        elif how == "nan":
            rec[k] = draw(st.sampled_from([[math.nan], [math.inf], [[math.nan, -math.inf]], math.nan]))
        elif how == "parts" and isinstance(rec.get("content"), list) and rec["content"]:
            inner = rec["content"][0]
            if isinstance(inner, list):
                rec["content"] = [[{**m, "content": _parts(m.get("content"))} if isinstance(m, dict) else _parts(m)
                                   for m in inner]]
        elif how == "surrogate":
            rec["content"] = [["\ud800", "r\udfff", "e"]]
    data = json.dumps(rec).encode("utf-8", "surrogatepass")
    depth = draw(st.sampled_from([0, 0, 0, 40, 3000]))
    if depth:  # nested far deeper than any writer would (msgspec and json give up on 3000)
        data = b'{"content": ' + b"[" * depth + b'"x"' + b"]" * depth + data[data.index(b"{") + 1 :].join([b", ", b""])
        data = data.rstrip(b", ") + (b"" if data.endswith(b"}") else b"}")
    byte = draw(st.sampled_from(["none", "none", "non_utf8", "cut", "flip", "blank"]))
    if byte == "non_utf8":
        at = draw(st.integers(0, len(data)))
        data = data[:at] + draw(st.binary(min_size=1, max_size=3).map(lambda b: bytes(x | 0x80 for x in b))) + data[at:]
    elif byte == "cut":
        data = data[: draw(st.integers(0, len(data)))]
    elif byte == "flip" and data:
        at = draw(st.integers(0, len(data) - 1))
        data = data[:at] + bytes([data[at] ^ (1 << draw(st.integers(0, 7)))]) + data[at + 1 :]
    elif byte == "blank":
        data = draw(st.sampled_from([b"", b"  ", b"\r", b" \t "]))
    return data


def _rows(frame_or_records) -> list[tuple]:
    """Rows as plain tuples; a missing value (None in a dict, NaN or <NA> in a column) is None."""
    recs = frame_or_records.to_dict("records") if isinstance(frame_or_records, pd.DataFrame) else frame_or_records
    return [tuple(None if v is None or (isinstance(v, float) and math.isnan(v)) or v is pd.NA else v
                  for v in (r[k] for k in KEYS)) for r in recs]


_EXTRA = int(os.environ.get("NBTOOLS_FUZZ_EXAMPLES", "0"))


@settings(max_examples=_EXTRA or 40, deadline=None, derandomize=not _EXTRA, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(st.lists(line(), max_size=6), st.binary(max_size=20).filter(lambda b: b"\n" not in b))
def test_any_jsonl_reads_consistently_with_typed_errors_only(lines, pending):
    with tempfile.TemporaryDirectory() as d, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        exp = Path(d) / "exp_001"
        exp.mkdir()
        data = b"".join(x + b"\n" for x in lines) + pending  # a partial last line is pending, not a record
        (exp / "train_data_step1.jsonl").write_bytes(data)
        complete = data.count(b"\n")

        run = T.open_run(exp, cache=False)
        df = run.read(1)
        assert len(df) + run.skipped == complete
        arr_run = T.open_run(exp, cache=False)
        arr = arr_run.read(1, arrays=True)
        assert len(arr) + arr_run.skipped == complete
        it_run = T.open_run(exp, cache=False)
        recs = list(it_run.iter_records(1))
        assert len(recs) + it_run.skipped == complete
        got = [run.record(1, int(i)) for i in df["idx"]]  # a row opens by its idx column, as the explorer does (#41)
        assert [r["idx"] for r in got] == df["idx"].tolist()
        cached = T.open_run(exp).read(1)  # writes the column cache
        again = T.open_run(exp).read(1)  # from the cache
        want = _rows(df)
        for name, other in (("arrays", arr), ("iter_records", recs), ("cached", cached), ("from cache", again),
                            *((("record", got),) if df["idx"].is_unique else ())):
            assert _rows(other) == want, name
        assert len(run.summary()) == (1 if len(df) else 0)
        assert (run.problems["kind"].isin(["malformed", "empty"])).sum() == run.skipped


@pytest.mark.slow  # console-script processes
def test_cli_prints_no_traceback_for_odd_records(tmp_path):
    exp = tmp_path / "logs" / "exp_001"
    exp.mkdir(parents=True)
    rows = [json.dumps({"content": [[{"role": "user", "content": [{"type": "text", "text": "hi"}]}]], "rewards": [math.nan],
                        "idx": 2**70}).encode(),
            json.dumps({"content": ["p", "r", "e"], "rewards": [[1.0]], "idx": 1}).encode(),
            b'{"content": [["p", "\xff\xfe", "e"]], "rewards": [Infinity], "idx": 2}', b"[" * 5000, b"not json"]
    (exp / "train_data_step1.jsonl").write_bytes(b"\n".join(rows) + b"\n{\"partial")
    (exp / "train_data_step2.jsonl").symlink_to(tmp_path / "nowhere.jsonl")
    exe = Path(sys.executable).with_name("nbtools")
    for args in (["--step", "1", "--json"], ["--step", "2"]):  # a subprocess each: ~1.5 s
        res = subprocess.run([str(exe), "trajectories", str(tmp_path / "logs"), *args], capture_output=True, text=True,
                             timeout=120)
        assert "Traceback" not in res.stderr and res.returncode in (0, 1), res.stderr
        if "--json" in args:
            out = json.loads(res.stdout)
            assert out["records"] == 2 and out["skipped_lines"] == 3 and len(out["rows"]) == 2
