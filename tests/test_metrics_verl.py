"""verl's two metric outputs read into the one tidy frame: console lines and TensorBoard (TENSORBOARD_DIR).

SOURCE: verl v0.7.0 (github.com/volcengine/verl, tag v0.7.0): the console backend prints
``concat_dict_to_str(data, step)`` (verl/utils/logger/aggregate_logger.py: ``"step:{step}"`` then
``"{k}:{pprint.pformat(v)}"`` for every ``numbers.Number`` value, joined by ``" - "``); the tensorboard backend
(verl/utils/tracking.py ``_TensorboardAdapter``) is ``torch.utils.tensorboard.SummaryWriter(TENSORBOARD_DIR)``
with ``add_scalar(key, value, step)``; ``perf/mfu/actor`` and ``perf/max_memory_*_gb`` come from
verl/workers/fsdp_workers.py ``update_actor``. :func:`concat_dict_to_str` below does what verl's does; the
TensorBoard files are written by torch's own SummaryWriter.
"""

from __future__ import annotations

import numbers
import pprint

import numpy as np
import pytest

from nbtools import metrics


def concat_dict_to_str(d: dict, step) -> str:
    out = [f"step:{step}"]
    for k, v in d.items():
        if isinstance(v, numbers.Number):
            out.append(f"{k}:{pprint.pformat(v)}")
    return " - ".join(out)


def _step_metrics(step: int) -> dict:
    return {"critic/score/mean": np.float64(0.25 + step / 10), "response_length/mean": np.float64(180.5 - step),
            "actor/pg_loss": np.float32(-0.012 * step), "actor/lr": 1e-06, "perf/mfu/actor": np.float64(0.31 + step / 100),
            "perf/max_memory_allocated_gb": np.float64(61.2), "perf/max_memory_reserved_gb": np.float64(70.0),
            "perf/cpu_memory_used_gb": 112.4, "timing_s/step": np.float64(95.0 + step), "training/global_step": step,
            "actor/entropy_coeff": 0, "note": "not a number", "val-core/openai/gsm8k/acc/mean@1": np.float64(0.5 + step / 20)}


@pytest.fixture()
def logs(tmp_path):
    lines = ["(TaskRunner pid=4711) Training Progress:  10%|█         | 1/10", "Saving tensorboard log to tb."]
    lines += [f"(TaskRunner pid=4711) {concat_dict_to_str(_step_metrics(s), s)}" for s in (1, 2, 3)]
    (tmp_path / "job.log").write_text("\n".join(lines) + "\n")
    from torch.utils.tensorboard import SummaryWriter

    w = SummaryWriter(str(tmp_path / "tb"))
    for s in (1, 2, 3):
        for k, v in _step_metrics(s).items():
            if isinstance(v, numbers.Number):
                w.add_scalar(k, v, s)
    w.close()
    return tmp_path


def test_console_and_tensorboard_agree(logs):
    con = metrics.read_verl_log(logs / "job.log")
    tb = metrics.read_tensorboard(logs / "tb")
    assert list(con.columns) == metrics.COLUMNS == list(tb.columns)
    assert "note" not in set(con.tag) and set(con.tag) == set(tb.tag)
    assert len(con) == 3 * 12 == len(tb)
    merged = con.merge(tb, on=["tag", "step"], suffixes=("_con", "_tb"))
    assert np.allclose(merged.value_con, merged.value_tb, rtol=1e-6)  # TensorBoard stores float32
    row = con[(con.tag == "actor/pg_loss") & (con.step == 2)].value.item()
    assert row == pytest.approx(-0.024, rel=1e-6)


@pytest.mark.parametrize("reader", ["console", "tensorboard"])
def test_friendly_names_mfu_memory(logs, reader):
    df = metrics.read_verl_log(logs / "job.log") if reader == "console" else metrics.read_tensorboard(logs / "tb")
    assert metrics.framework_of(df.tag) == "verl"
    mfu = metrics.select(df, "mfu")
    assert mfu.tag.unique().tolist() == ["perf/mfu/actor"] and mfu.value.tolist() == pytest.approx([0.32, 0.33, 0.34])
    assert metrics.select(df, "memory").value.tolist() == pytest.approx([61.2] * 3)
    assert metrics.select(df, "accuracy").tag.unique().tolist() == ["val-core/openai/gsm8k/acc/mean@1"]
    last = metrics.latest(df, names=("reward", "mfu", "memory", "step_time"))
    assert last.set_index("metric").loc["reward", "value"] == pytest.approx(0.55) and set(last.step) == {3}


def test_memory_on_verl_09_is_the_actor_prefixed_tag(tmp_path):
    """verl 0.9.x's V1 trainer logs the actor worker's memory as ``actor/perf/max_memory_allocated_gb``
    (verl/trainer/ppo/v1/trainer_base.py at v0.9.1: ``rename_dict(output["metrics"], "actor/")``); "memory" was empty."""
    m = {k.replace("perf/max_memory", "actor/perf/max_memory"): v for k, v in _step_metrics(1).items()}
    (tmp_path / "job.log").write_text(concat_dict_to_str(m, 1) + "\n")
    df = metrics.read_verl_log(tmp_path / "job.log")
    mem = metrics.select(df, "memory")
    assert mem.tag.tolist() == ["actor/perf/max_memory_allocated_gb"] and mem.value.tolist() == pytest.approx([61.2])


_KEYS = ["critic/score/mean", "actor/kl_loss", "x", "a:b", " - ", "perf/mfu/actor"]
_VALUES = [0.5, -1, 10**30, float("nan"), float("inf"), "np.float64(0.25)", "abc", "", "1e999"]


def _line(step, items, noise) -> str:
    return noise + concat_dict_to_str({k: v for k, v in items if isinstance(v, numbers.Number)}, step) + "".join(
        f" - {k}:{v}" for k, v in items if isinstance(v, str))


def test_a_garbled_step_is_a_skipped_line_not_an_overflow():
    """#41: ``step:312345678901234567890 - …`` made ``nbtools metrics`` fail with OverflowError."""
    df = metrics.read_verl_log("step:312345678901234567890 - critic/score/mean:0.5\nstep:3 - critic/score/mean:0.25\n")
    assert df[["step", "value"]].values.tolist() == [[3, 0.25]]


def test_verl_console_lines_of_any_shape_read_or_skip_never_fail():
    """Property (hypothesis): whatever a console line holds — huge or negative steps, keys with ':' or ' - ', NaN,
    inf, text values, ANSI colours, noise before ``step:`` — the reader returns the tidy frame or skips the line."""
    from hypothesis import given, settings
    from hypothesis import strategies as st

    line = st.builds(_line, st.integers(min_value=0, max_value=10**22),
                     st.lists(st.tuples(st.sampled_from(_KEYS), st.sampled_from(_VALUES)), max_size=4),
                     st.sampled_from(["", "(TaskRunner pid=1) ", "\x1b[36m", "garbage step:"]))

    @settings(max_examples=60, deadline=None, database=None, derandomize=True)
    @given(lines=st.lists(st.one_of(line, st.text(max_size=40)), min_size=1, max_size=6))
    def check(lines):
        df = metrics.read_verl_log("\n".join(lines) + "\n")
        assert list(df.columns) == list(metrics.COLUMNS)
        assert df["step"].dtype == np.int64 and (df["step"] >= 0).all() and df["value"].dtype == np.float64
        assert not df.duplicated(["run", "tag", "step"]).any()

    check()
