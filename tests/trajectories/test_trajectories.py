"""nbtools.trajectories on runs written by benchmarks/gen_nemo_rl_run.py (NeMo-RL's record layout and key
order, json.dumps separators) plus hand-made damage: truncated, malformed, empty, non-UTF-8, growing files.
Every column is checked against a plain ``json.loads`` reference computed here."""

from __future__ import annotations

import importlib.util
import json
import math
import os
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from nbtools import trajectories as T
from nbtools.errors import NotFoundError
from nbtools.rewards import split_think_answer
from nbtools.trajectories import _read

_GEN = Path(__file__).resolve().parents[2] / "benchmarks" / "gen_nemo_rl_run.py"
_spec = importlib.util.spec_from_file_location("gen_nemo_rl_run", _GEN)
gen = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(gen)


def _reference(path: Path, step: int) -> list[dict]:
    """The columns computed the slow, obvious way from json.loads."""
    out = []
    for line in path.read_bytes().splitlines():
        r = json.loads(line)
        c = r["content"][0]
        mask = r.get("token_loss_mask", [None])[0]
        adv = r.get("advantages", [None])[0]
        first = mask.index(1) if mask and 1 in mask else None
        think, answer = split_think_answer(c[1])
        out.append({"step": step, "idx": r["idx"], "prompt": c[0], "response": c[1], "env_observation": c[2],
                    "reward": r["rewards"][0], "generation_length": float(sum(mask)) if mask else math.nan,
                    "input_length": float(r["input_lengths"][0]),
                    "advantage": float(adv[first]) if first is not None else math.nan,
                    "think": think, "answer": answer})
    return out


def _same(a, b) -> bool:
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    if a is None or (isinstance(a, float) and math.isnan(a)):
        return b is None or (isinstance(b, float) and math.isnan(b))
    return a == b


@pytest.fixture
def logdir(tmp_path) -> Path:
    gen.generate(tmp_path / "logs", steps=4, records=16, seq_len=96, group_size=4, val_every=2)
    return tmp_path / "logs"


def test_every_column_matches_a_json_reference(logdir):
    run = T.open_run(logdir)
    df = run.read()
    assert list(df.columns) == list(T.ALL_COLUMNS) and len(df) == 64
    ref = [r for s in run.steps for r in _reference(run.files()[s], s)]
    got = df.to_dict("records")
    assert len(ref) == len(got)
    for want, row in zip(ref, got, strict=True):
        for k, v in want.items():
            assert _same(v, row[k]), (k, v, row[k])
    assert df["generation_length"].gt(0).all() and df["advantage"].ne(0).any()


def test_record_reads_one_line_with_arrays(logdir):
    run = T.open_run(logdir)
    rec = run.record(3, 5)
    row = run.read(3).iloc[5]
    assert rec["idx"] == 5 and rec["response"] == row["response"] and rec["reward"] == row["reward"]
    assert rec["token_loss_mask"].sum() == row["generation_length"] == rec["generation_length"]
    assert isinstance(rec["prev_logprobs"], np.ndarray) and rec["token_ids"].shape == (96,)
    assert (run.path / ".nbtools" / "index" / "train_data_step3.jsonl.idx").is_file()
    with pytest.raises(NotFoundError, match="pick an idx below the record count"):
        run.record(3, 16)


def test_open_run_resolves_log_dir_exp_and_errors(logdir, tmp_path):
    gen.generate(logdir, steps=1, records=4, seq_len=32, exp="exp_002")
    assert T.open_run(logdir).path.name == "exp_002"
    assert T.open_run(logdir, exp=1).path.name == "exp_001"
    assert T.open_run(logdir / "exp_001").steps == [1, 2, 3, 4]
    with pytest.raises(NotFoundError, match="pass one of the listed exp numbers"):
        T.open_run(logdir, exp=7)
    with pytest.raises(NotFoundError, match="pass the experiment's logs URL"):
        T.open_run(tmp_path / "nope")
    (tmp_path / "empty").mkdir()
    with pytest.raises(NotFoundError, match="pass the NeMo-RL logger.log_dir"):
        T.open_run(tmp_path / "empty")


def test_truncated_last_line_then_completed(logdir):
    run = T.open_run(logdir)
    f = run.files()[2]
    full = f.read_bytes()
    lines = full.splitlines(keepends=True)
    cut = len(lines[-1]) // 2
    f.write_bytes(b"".join(lines[:-1]) + lines[-1][:cut])
    df = run.read(2)
    assert len(df) == 15 and df.attrs["pending_bytes"] == cut and run.pending == {f.name: cut}
    assert run.index(2).pending == cut and run.skipped == 0
    with open(f, "ab") as fh:  # the writer finishes the line
        fh.write(lines[-1][cut:])
    df = run.read(2)
    assert len(df) == 16 and df.attrs["pending_bytes"] == 0 and run.pending == {}
    assert run.index(2).n_lines == 16 and run.record(2, 15)["idx"] == 15


def test_malformed_line_reported_with_file_and_line(logdir):
    run = T.open_run(logdir)
    f = run.files()[3]
    lines = f.read_bytes().splitlines(keepends=True)
    lines.insert(2, b'{"content": [["p", "r", "e"]], "rewards": [1.0, \n')
    f.write_bytes(b"".join(lines))
    with pytest.warns(UserWarning, match="see run.problems"):
        df = run.read()
    assert len(df) == 64 and run.skipped == 1 and df.attrs["skipped"] == 1
    p = run.problems
    assert p.to_dict("records")[0]["file"] == f.name and p.iloc[0]["line"] == 3 and p.iloc[0]["kind"] == "malformed"
    again = T.open_run(logdir)  # from the cache: the problem is still reported, not lost
    assert len(again.read()) == 64 and again.skipped == 1 and again.problems.iloc[0]["line"] == 3
    other = run.files()[1]
    with open(other, "ab") as fh:  # another file changes: only it is re-parsed, the old report stays
        fh.write(other.read_bytes().splitlines(keepends=True)[0])
    third = T.open_run(logdir)
    assert len(third.read()) == 65 and third.skipped == 1 and third.problems.iloc[0]["file"] == f.name


def test_empty_step_file_and_gaps(tmp_path):
    exp = gen.generate(tmp_path, steps=5, records=8, seq_len=32, skip_steps=(3,))
    (exp / "train_data_step4.jsonl").write_bytes(b"")
    run = T.open_run(exp)
    assert run.steps == [1, 2, 4, 5] and run.gaps == [3]
    assert run.read(4).empty and list(run.read(4).columns) == list(T.ALL_COLUMNS)
    df = run.read(range(1, 6))
    assert sorted(df.step.unique()) == [1, 2, 5] and df.attrs["missing_steps"] == [3]
    with pytest.raises(NotFoundError, match="use one of run.steps"):
        run.read(3)


def test_non_utf8_bytes_are_replaced_and_reported(logdir):
    run = T.open_run(logdir)
    f = run.files()[1]
    data = f.read_bytes()
    pos = data.index(b"<think>") + 8
    f.write_bytes(data[:pos] + b"\xff\xfe" + data[pos:])
    df = run.read(1)
    assert len(df) == 16 and "\ufffd" in df.iloc[0]["prompt"] + df.iloc[0]["response"]
    p = run.problems
    assert (p["kind"] == "non_utf8").sum() == 1 and p.iloc[0]["line"] == 1 and run.skipped == 0


def test_file_growing_during_iteration(logdir):
    run = T.open_run(logdir)
    f = run.files()[4]
    lines = f.read_bytes().splitlines(keepends=True)
    f.write_bytes(b"".join(lines[:4]))
    seen = []
    for rec in run.iter_records(4):
        seen.append(rec["idx"])
        if len(seen) == 2:  # the trainer appends while we iterate
            with open(f, "ab") as fh:
                fh.write(b"".join(lines[4:]))
    assert seen == list(range(16))


def test_rewritten_file_invalidates_index_and_cache(logdir):
    run = T.open_run(logdir)
    before = run.read(1)
    f = run.files()[1]
    lines = f.read_bytes().splitlines(keepends=True)
    f.write_bytes(b"".join(lines[8:]))  # shorter file: NeMo-RL re-opened it with "w"
    os.utime(f, ns=(1, 1))
    after = T.open_run(logdir).read(1)
    assert len(after) == 8 and after.iloc[0]["response"] == before.iloc[8]["response"]
    assert run.index(1).n_lines == 8


def test_v05_schema_has_no_generation_length(tmp_path):
    exp = gen.generate(tmp_path, steps=2, records=8, seq_len=48, schema="v0.5")
    df = T.open_run(exp).read()
    assert len(df) == 16 and df["generation_length"].isna().all() and df["advantage"].isna().all()
    ref = _reference(exp / "train_data_step2.jsonl", 2)
    assert df[df.step == 2]["reward"].tolist() == [r["reward"] for r in ref]
    assert df["input_length"].notna().all() and df["answer"].notna().any()


def test_v06_validation_dumps_with_chat_messages(logdir):
    run = T.open_run(logdir)
    assert run.val_steps == [0, 2, 4]
    v = run.read(kind="val")
    raw = json.loads((run.path / "val_data_step2.jsonl").read_bytes().splitlines()[0])
    msgs = raw["content"][0]
    first = v[v.step == 2].iloc[0]
    assert first["prompt"] == msgs[0]["content"] and first["response"] == msgs[1]["content"]
    assert first["env_observation"] == msgs[2]["content"] and first["reward"] == raw["rewards"][0]


def test_second_open_uses_cache_and_reparses_only_changed_files(logdir, monkeypatch):
    first = T.open_run(logdir).read()
    assert list((logdir / "exp_001" / ".nbtools").glob("train-*.arrow"))
    calls = []
    real = _read.read_file
    monkeypatch.setattr(_read, "read_file", lambda p, s, o: calls.append(Path(p).name) or real(p, s, o))
    second = T.open_run(logdir).read()
    pd.testing.assert_frame_equal(first, second)
    assert calls == []
    with open(logdir / "exp_001" / "train_data_step2.jsonl", "ab") as fh:
        fh.write((logdir / "exp_001" / "train_data_step2.jsonl").read_bytes().splitlines(keepends=True)[0])
    third = T.open_run(logdir).read()
    assert calls == ["train_data_step2.jsonl"] and len(third) == 65 and third.step.is_monotonic_increasing
    assert third[third.step == 2].idx.tolist() == [*range(16), 0]  # line order within the step is kept


def test_parallel_read_equals_serial_and_other_key_orders(logdir, monkeypatch):
    serial = T.open_run(logdir, cache=False).read()
    monkeypatch.setattr(_read, "_PARALLEL_MIN_BYTES", 0)
    parallel = T.open_run(logdir, cache=False).read(workers=2)
    pd.testing.assert_frame_equal(serial, parallel)
    # the same records re-serialised compactly with keys in another order read identically
    f = logdir / "exp_001" / "train_data_step1.jsonl"
    recs = [json.loads(x) for x in f.read_bytes().splitlines()]
    f.write_text("".join(json.dumps(dict(reversed(list(r.items()))), separators=(",", ":")) + "\n" for r in recs))
    again = T.open_run(logdir, cache=False).read(1)
    pd.testing.assert_frame_equal(again, serial[serial.step == 1].reset_index(drop=True))


def test_arrays_and_column_projection(logdir):
    run = T.open_run(logdir, cache=False)
    df = run.read(2, arrays=True)
    assert all(df["token_loss_mask"].map(lambda m: m.sum()) == df["generation_length"])
    small = run.read(columns=["step", "idx", "reward", "generation_length"])
    assert list(small.columns) == ["step", "idx", "reward", "generation_length"] and len(small) == 64
    with pytest.raises(NotFoundError, match="drop the unknown names"):
        run.read(columns=["nope"])


def test_step_summary_counts_groups_without_signal():
    df = pd.DataFrame({"step": [1] * 8, "prompt": ["a"] * 4 + ["b"] * 4,
                       "reward": [1.0, 1.0, 1.0, 1.0, 0.0, 1.0, 0.0, 0.0],
                       "env_observation": ["Environment: correct"] * 5 + ["Environment: incorrect"] * 3,
                       "generation_length": [10.0] * 8})
    s = T.step_summary(df).iloc[0]
    assert s["groups"] == 2 and s["no_signal_share"] == 0.5 and s["correct_share"] == 5 / 8
    assert s["reward_mean"] == 5 / 8
