"""nbtools.trajectories on odd records and damaged runs: records of unusual shapes are coerced or skipped (never
fatal), rewritten step files are re-indexed, and a dangling symlink costs only its own step. Every record here
is written with Python's ``json.dumps`` (NeMo-RL's writer), on top of files from benchmarks/gen_nemo_rl_run.py."""

from __future__ import annotations

import importlib.util
import json
import math
import os
import warnings
from pathlib import Path

import pandas as pd
import pytest

from nbtools import trajectories as T
from nbtools.errors import NotFoundError

_GEN = Path(__file__).resolve().parents[2] / "benchmarks" / "gen_nemo_rl_run.py"
_spec = importlib.util.spec_from_file_location("gen_nemo_rl_run", _GEN)
gen = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(gen)

BASE = {"content": [["<|im_start|>user\nWhat is 2+2?<|im_end|>", "<think>add</think> <answer>4</answer>",
                     "Environment: correct"]],
        "rewards": [1.0], "input_lengths": [9], "token_ids": [[11, 12, 13, 14]], "token_loss_mask": [[0, 0, 1, 1]],
        "advantages": [[0.25, 0.25, 0.25, 0.25]], "generation_logprobs": [[0.0, 0.0, -0.5, -0.25]],
        "prev_logprobs": [[0.0, 0.0, -0.5, -0.25]]}


def _write(exp: Path, step: int, records: list[dict]) -> Path:
    exp.mkdir(parents=True, exist_ok=True)
    f = exp / f"train_data_step{step}.jsonl"
    f.write_text("".join(json.dumps({**BASE, **r, "idx": r.get("idx", i)}) + "\n" for i, r in enumerate(records)))
    return f


def _all_ways(exp: Path, step: int) -> dict[str, pd.DataFrame]:
    """The same step read every way the reader offers; all must agree."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        out = {"uncached": T.open_run(exp, cache=False).read(step),
               "cached": T.open_run(exp).read(step), "from cache": T.open_run(exp).read(step),
               "arrays": T.open_run(exp, cache=False).read(step, arrays=True)}
        run = T.open_run(exp, cache=False)
        recs = list(run.iter_records(step))
        got = []
        for k in range(run.index(step).n_lines):
            try:
                got.append(run.record(step, k))
            except NotFoundError:
                pass
    cols = list(T.COLUMNS)
    out["iter_records"] = pd.DataFrame(recs, columns=[*cols, "think", "answer"])
    out["record"] = pd.DataFrame(got, columns=[*cols, "think", "answer"])
    return out


def _agree(frames: dict[str, pd.DataFrame]) -> pd.DataFrame:
    first = frames["uncached"]
    cols = ["step", "idx", "prompt", "response", "env_observation", "reward", "input_length", "think", "answer"]
    for name, df in frames.items():
        assert len(df) == len(first), (name, len(df), len(first))
        pd.testing.assert_frame_equal(df[cols].reset_index(drop=True), first[cols].reset_index(drop=True),
                                      check_dtype=False, obj=name)
    return first


def test_content_as_list_of_parts_is_joined(tmp_path):
    parts = [{"role": "user", "content": [{"type": "text", "text": "What is in the image?"},
                                          {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}]},
             {"role": "assistant", "content": [{"type": "text", "text": "<think>a cat</think>"},
                                               {"type": "text", "text": "<answer>cat</answer>"}]},
             {"role": "environment", "content": "Environment: correct"}]
    _write(tmp_path / "exp_001", 1, [{}, {"content": [parts]}, {"content": [["p", [{"type": "text", "text": "r"}], "e"]]}])
    df = _agree(_all_ways(tmp_path / "exp_001", 1))
    assert len(df) == 3
    assert df.loc[1, "prompt"] == "What is in the image?\n<image_url>"
    assert df.loc[1, "response"] == "<think>a cat</think>\n<answer>cat</answer>" and df.loc[1, "answer"] == "cat"
    assert df.loc[2, "response"] == "r" and df.loc[1, "env_observation"] == "Environment: correct"


def test_wrapped_twice_and_unwrapped_fields_read_like_nemo_rl(tmp_path):
    recs = [{},
            {"content": [[["p1", "r1 <answer>1</answer>", "e1"]]], "rewards": [[0.5]], "input_lengths": [[7]],
             "token_loss_mask": [[[0, 1, 1, 1]]], "advantages": [[[0.75, 0.75, 0.75, 0.75]]], "idx": [[1]]},
            {"content": ["p2", "r2", "e2"], "rewards": 0.25, "input_lengths": 5, "idx": 2}]
    _write(tmp_path / "exp_001", 1, recs)
    df = _agree(_all_ways(tmp_path / "exp_001", 1))
    assert df["idx"].tolist() == [0, 1, 2]
    assert df.loc[1, ["prompt", "response", "env_observation", "answer"]].tolist() == ["p1", "r1 <answer>1</answer>",
                                                                                      "e1", "1"]
    assert df.loc[1, "reward"] == 0.5 and df.loc[1, "input_length"] == 7 and df.loc[1, "generation_length"] == 3
    assert df.loc[1, "advantage"] == 0.75
    assert df.loc[2, ["prompt", "response", "env_observation"]].tolist() == ["p2", "r2", "e2"]
    assert df.loc[2, "reward"] == 0.25 and df.loc[2, "input_length"] == 5


def test_idx_past_int64_is_skipped_and_listed(tmp_path):
    f = _write(tmp_path / "exp_001", 1, [{}, {"idx": 2**70}, {"idx": -(2**64)}, {}])
    frames = _all_ways(tmp_path / "exp_001", 1)
    df = _agree(frames)
    assert df["idx"].tolist() == [0, 3]
    run = T.open_run(tmp_path / "exp_001", cache=False)
    with pytest.warns(UserWarning, match="see run.problems"):
        run.read(1)
    p = run.problems
    assert p[["file", "line", "kind"]].values.tolist() == [[f.name, 2, "malformed"], [f.name, 3, "malformed"]]
    assert p.loc[0, "message"].startswith("idx 1180591620717411303424 does not fit in int64")
    assert run.skipped == 2
    with pytest.raises(NotFoundError, match="does not fit in int64"):
        run.record(1, 1)


def test_nan_and_infinity_literals_decode_everywhere(tmp_path):
    recs = [{}, {"rewards": [math.nan], "advantages": [[math.inf] * 4]},
            {"generation_logprobs": [[-math.inf, 0.0, math.nan, -1.0]], "input_lengths": [math.inf]}, {}]
    f = _write(tmp_path / "exp_001", 1, recs)
    assert b"NaN" in f.read_bytes() and b"-Infinity" in f.read_bytes()
    df = _agree(_all_ways(tmp_path / "exp_001", 1))
    assert len(df) == 4 and math.isnan(df.loc[1, "reward"]) and df.loc[1, "advantage"] == math.inf
    assert df.loc[2, "input_length"] == math.inf
    run = T.open_run(tmp_path / "exp_001", cache=False)
    rec = run.record(1, 2)
    assert rec["generation_logprobs"][0] == -math.inf and math.isnan(rec["generation_logprobs"][2])
    assert run.problems.empty and run.skipped == 0


def test_damaged_arrays_keep_the_row_in_every_reading(tmp_path):
    f = _write(tmp_path / "exp_001", 1, [{}, {}, {}])
    lines = f.read_bytes().splitlines(keepends=True)
    lines[1] = lines[1].replace(b'"prev_logprobs": [[0.0', b'"prev_logprobs": [[0.0\xff, oops')
    f.write_bytes(b"".join(lines))
    df = _agree(_all_ways(tmp_path / "exp_001", 1))
    assert len(df) == 3
    run = T.open_run(tmp_path / "exp_001", cache=False)
    arr = run.read(1, arrays=True)
    assert arr.loc[1, "prev_logprobs"] is None and arr.loc[0, "prev_logprobs"].tolist() == [0.0, 0.0, -0.5, -0.25]
    assert run.problems["kind"].tolist() == ["arrays"] and run.skipped == 0
    assert "problem" in run.record(1, 1) and "prev_logprobs" not in run.record(1, 1)


# ---- 8: a step file re-written after it was indexed ------------------------------------------------------
def _rewrite(f: Path, data: bytes, *, new_inode: bool) -> None:
    if new_inode:
        tmp = f.with_name(f.name + ".new")
        tmp.write_bytes(data)
        os.replace(tmp, f)
    else:
        with open(f, "r+b") as fh:  # same inode: truncate and write in place, as open(..., "w") does
            fh.truncate(0)
            fh.write(data)


@pytest.mark.parametrize("new_inode", [False, True])
def test_rewritten_larger_file_is_rescanned(tmp_path, new_inode):
    exp = gen.generate(tmp_path, steps=2, records=6, seq_len=24)
    run = T.open_run(exp)
    f = run.files()[2]
    old = run.record(2, 3)  # indexes the file (memory and disk)
    ino = f.stat().st_ino
    new = gen.generate(tmp_path / "other", steps=2, records=12, seq_len=40, group_size=4, seed=7)
    new = new / "train_data_step2.jsonl"
    data = new.read_bytes()
    assert len(data) > f.stat().st_size
    _rewrite(f, data, new_inode=new_inode)
    assert (f.stat().st_ino == ino) is not new_inode
    want = [json.loads(x) for x in data.splitlines()]
    for r in (run, T.open_run(exp)):  # the in-memory index and the saved one
        got = r.record(2, 3)
        assert got["response"] == want[3]["content"][0][1] != old["response"]
        assert r.record(2, 11)["idx"] == 11 and r.index(2).n_lines == len(want) == 12
    assert T.open_run(exp).read(2)["response"].tolist() == [w["content"][0][1] for w in want]


def test_rewrite_with_a_newline_where_the_old_end_was_is_still_detected(tmp_path):
    """Lines 1-2 change length but keep their sum, so the byte before the old end is still a newline."""
    exp = tmp_path / "exp_001"
    f = _write(exp, 1, [{"content": [["p", "aaaa", "e"]]}, {"content": [["p", "bbbb", "e"]]}])
    run = T.open_run(exp)
    assert run.record(1, 1)["response"] == "bbbb"
    old_end = f.stat().st_size
    recs = [{"content": [["p", "ccccc", "e"]]}, {"content": [["p", "ddd", "e"]]}, {"content": [["p", "eeee", "e"]]}]
    data = "".join(json.dumps({**BASE, **r, "idx": i}) + "\n" for i, r in enumerate(recs)).encode()
    assert data[old_end - 1 : old_end] == b"\n"
    _rewrite(f, data, new_inode=False)
    assert [run.record(1, k)["response"] for k in range(3)] == ["ccccc", "ddd", "eeee"]


def test_column_cache_notices_a_replaced_file_with_the_same_size_and_mtime(tmp_path):
    exp = tmp_path / "exp_001"
    f = _write(exp, 1, [{"content": [["p", "aaaa", "e"]]}, {"content": [["p", "bbbb", "e"]]}])
    assert T.open_run(exp).read(1)["response"].tolist() == ["aaaa", "bbbb"]
    st = f.stat()
    recs = [{"content": [["p", "xxxxx", "e"]]}, {"content": [["p", "yyy", "e"]]}]
    data = "".join(json.dumps({**BASE, **r, "idx": i}) + "\n" for i, r in enumerate(recs)).encode()
    assert len(data) == st.st_size
    tmp = exp / "staging.tmp"
    tmp.write_bytes(data)
    os.utime(tmp, ns=(st.st_atime_ns, st.st_mtime_ns))  # e.g. `cp -p` / rsync -t of a re-written dump
    os.replace(tmp, f)
    assert (f.stat().st_size, f.stat().st_mtime_ns) == (st.st_size, st.st_mtime_ns)
    run = T.open_run(exp)
    assert run.read(1)["response"].tolist() == ["xxxxx", "yyy"]
    assert run.record(1, 1)["response"] == "yyy"


# ---- 11: a dangling symlink for one step ---------------------------------------------------------------------
def test_dangling_symlink_costs_only_its_step(tmp_path):
    exp = gen.generate(tmp_path, steps=3, records=4, seq_len=16)
    T.open_run(exp).read()  # cached while the file was there
    (exp / "train_data_step2.jsonl").rename(tmp_path / "moved.jsonl")
    os.symlink(tmp_path / "gone.jsonl", exp / "train_data_step2.jsonl")
    for kw in ({}, {"cache": False}):
        run = T.open_run(exp, **kw)
        assert run.steps == [1, 2, 3]
        with pytest.warns(UserWarning, match="dangling symlink"):
            df = run.read()
        assert sorted(df.step.unique()) == [1, 3] and len(df) == 8 and df.attrs["unreadable_steps"] == [2]
        p = run.problems
        assert p[["file", "line", "kind"]].values.tolist() == [["train_data_step2.jsonl", 0, "unreadable"]]
        assert "gone.jsonl" in p.loc[0, "message"]
        with pytest.warns(UserWarning):
            assert len(run.read(arrays=True)) == 8 and len(run.summary()) == 2
        with pytest.raises(NotFoundError, match="remove the broken link"):
            run.record(2, 0)
        with pytest.raises(NotFoundError, match="dangling symlink"):
            list(run.iter_records(2))
        assert run.record(3, 1)["idx"] == 1
        assert "1…3 (3 files" in run._repr_html_()


def test_a_same_size_rewrite_with_restored_mtime_is_read_again(tmp_path):
    """#31: inode, size and mtime_ns kept (rewritten in place, timestamp restored): the cache keys on content too."""
    exp = tmp_path / "exp_001"
    f = _write(exp, 1, [{"rewards": [0.25]}, {"rewards": [0.5]}])
    run = T.open_run(exp)
    assert run.read()["reward"].tolist() == [0.25, 0.5]
    st = os.stat(f)
    data = f.read_bytes()
    with open(f, "r+b") as fh:  # same inode, same size: 0.25 -> 0.75 in the first record
        fh.write(data.replace(b'"rewards": [0.25]', b'"rewards": [0.75]', 1))
    os.utime(f, ns=(st.st_atime_ns, st.st_mtime_ns))
    after = os.stat(f)
    assert (after.st_ino, after.st_size, after.st_mtime_ns) == (st.st_ino, st.st_size, st.st_mtime_ns)
    assert T.open_run(exp).read()["reward"].tolist() == [0.75, 0.5]  # the on-disk cache of another reader
    assert run.read()["reward"].tolist() == [0.75, 0.5]  # this reader's memory
    assert run.record(1, 0)["reward"] == 0.75


def test_a_run_dir_deleted_while_it_is_read_stays_deleted(tmp_path):
    """#41: the line index and the column cache were written with ``parents=True``, so a run dir deleted while it was
    read came back as ``exp_001/.nbtools/index/*.idx`` (6 of 40 trials) and later readers took it for the latest run."""
    import shutil

    import pyarrow as pa

    from nbtools.trajectories._cache import save_cache
    from nbtools.trajectories._index import build_index, save_index

    exp = tmp_path / "logs" / "exp_001"
    f = _write(exp, 1, [{}, {}])
    idx = build_index(f)
    shutil.rmtree(exp)  # the run dir goes away between the read and the cache write
    assert save_index(exp / ".nbtools", idx) is False
    assert save_cache(exp / ".nbtools", "train", "k", {}, pa.table({"a": [1]})) is False
    assert not exp.exists() and list((tmp_path / "logs").iterdir()) == []
    with pytest.raises(NotFoundError):
        T.open_run(tmp_path / "logs")


@pytest.mark.parametrize("first", [1, 640])
def test_a_foreign_dumps_idx_column_opens_its_record(tmp_path, first):
    """#41: the explorer's idx column is the record's idx field while ``Run.record(step, idx)`` counted lines, so a
    dump with 1-based or global idx opened no page (or the wrong record)."""
    exp = tmp_path / "exp_001"
    _write(exp, 3, [{"idx": first + k, "rewards": [float(k)]} for k in range(4)])
    run = T.open_run(exp, cache=False)
    table = run.read(3)
    assert table["idx"].tolist() == [first + k for k in range(4)]
    for idx, reward in zip(table["idx"], table["reward"], strict=True):
        rec = run.record(3, int(idx))
        assert rec["idx"] == idx and rec["reward"] == reward and len(rec["token_ids"]) == 4
    nemo = _write(tmp_path / "exp_002", 1, [{}, {}, {}])  # NeMo-RL's own: idx counts lines, one pread as before
    assert [T.open_run(nemo.parent, cache=False).record(1, k)["idx"] for k in range(3)] == [0, 1, 2]
