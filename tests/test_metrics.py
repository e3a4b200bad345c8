"""nbtools.metrics on real TensorBoard event files written by ``torch.utils.tensorboard.SummaryWriter`` (the
writer NeMo-RL's TensorBoard logger uses, including ``add_hparams`` subdirs) and on verl console lines."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from torch.utils.tensorboard import SummaryWriter

from nbtools import metrics as M
from nbtools.errors import NotFoundError


def _write_run(exp: Path, steps: int = 6, reward0: float = 0.1) -> Path:
    w = SummaryWriter(log_dir=str(exp / "tensorboard"))
    for s in range(1, steps + 1):
        w.add_scalar("train/reward", reward0 + 0.1 * s, s)
        w.add_scalar("train/mean_gen_tokens_per_sample", 100.0 + s, s)
        w.add_scalar("train/kl_penalty", 0.01 * s, s)
        w.add_scalar("timing/train/total_step_time", 2.5, s)
    w.add_scalar("validation/accuracy", 0.5, 0)
    w.add_hparams({"grpo.num_generations_per_prompt": 8, "policy.model_name": "tiny"}, {"hparam/score": 0.75})
    w.close()
    return exp


def test_reads_scalars_and_hparams_subdirs_written_by_torch(tmp_path):
    exp = _write_run(tmp_path / "logs" / "exp_001")
    df = M.read_tensorboard(tmp_path / "logs")
    assert list(df.columns) == M.COLUMNS and set(df.run) == {"exp_001"}
    r = M.select(df, "reward")
    assert r["step"].tolist() == list(range(1, 7)) and r["value"].round(5).tolist() == [0.2, 0.3, 0.4, 0.5, 0.6, 0.7]
    assert "hparam/score" in set(df.tag)  # from the tensorboard/<time>/ subdir add_hparams creates
    assert df["wall_time"].gt(1e9).all()
    hp = M.read_hparams(exp)
    assert hp["grpo.num_generations_per_prompt"] == 8 and hp["policy.model_name"] == "tiny"
    assert M.select(df, "accuracy")["step"].tolist() == [0]


def test_latest_exp_restart_dedup_and_truncated_file(tmp_path):
    _write_run(tmp_path / "exp_001")
    exp2 = _write_run(tmp_path / "exp_002", steps=3, reward0=1.0)
    w = SummaryWriter(log_dir=str(exp2 / "tensorboard"))  # a restart re-logs step 3: the last write wins
    w.add_scalar("train/reward", 9.0, 3)
    w.close()
    df = M.read_tensorboard(tmp_path)
    r = M.select(df, "reward")
    assert set(r.run) == {"exp_002"} and r.set_index("step")["value"].round(3).to_dict() == {1: 1.1, 2: 1.2, 3: 9.0}
    # a file still being written (cut mid-record) yields its complete records
    ev = sorted((tmp_path / "exp_001" / "tensorboard").glob("events.out.tfevents.*"))[0]
    cut = tmp_path / "cut" / "tensorboard"
    cut.mkdir(parents=True)
    data = ev.read_bytes()
    (cut / ev.name).write_bytes(data[: len(data) - 7])
    part = M.read_tensorboard(tmp_path / "cut")
    full = M.read_tensorboard(tmp_path / "exp_001")
    assert 0 < len(part) < len(full[~full.tag.str.startswith("hparam")]) + 1


def test_empty_and_missing(tmp_path):
    (tmp_path / "exp_001").mkdir()
    assert M.read_tensorboard(tmp_path).empty
    with pytest.raises(NotFoundError, match="the job creates it when it starts"):
        M.read_tensorboard(tmp_path / "missing")


VERL_LOG = """\
(TaskRunner pid=4242) Training Progress:   0%|          | 0/3
(TaskRunner pid=4242) step:1 - global_seqlen/mean:37335.0 - actor/entropy:0.071 - actor/kl_loss:0.0012 - critic/score/mean:0.25 - critic/rewards/mean:0.25 - response_length/mean:512.5 - timing_s/step:12.5 - perf/throughput:1234.5
\x1b[36m(TaskRunner pid=4242)\x1b[0m step:2 - actor/kl_loss:np.float64(0.0021) - critic/score/mean:0.375 - response_length/mean:498.0 - val-core/openai/gsm8k/reward/mean@1:0.61 - timing_s/step:11.0
some other line with step:x - nothing
step:3 - critic/score/mean:nan - actor/pg_loss:-0.02 - response_length/mean:470.25
"""


def test_verl_console_lines_and_name_map(tmp_path):
    p = tmp_path / "verl_run.log"
    p.write_text(VERL_LOG)
    df = M.read_verl_log(p)
    assert list(df.columns) == M.COLUMNS and set(df.run) == {"verl_run"}
    assert M.framework_of(df.tag) == "verl"
    assert M.select(df, "reward").set_index("step")["value"].iloc[:2].tolist() == [0.25, 0.375]
    assert M.select(df, "kl")["value"].tolist() == [0.0012, 0.0021]
    assert M.select(df, "generation_length")["value"].tolist() == [512.5, 498.0, 470.25]
    acc = M.select(df, "accuracy")
    assert acc["tag"].tolist() == ["val-core/openai/gsm8k/reward/mean@1"] and acc["value"].tolist() == [0.61]
    assert M.select(df, "global_seqlen/mean")["value"].tolist() == [37335.0]  # raw tags work too
    with pytest.raises(NotFoundError, match=r"sorted\(df.tag.unique\(\)\)"):
        M.select(df, "no_such_metric")


def test_runs_side_by_side_nemo_and_verl(tmp_path):
    _write_run(tmp_path / "nemo" / "exp_001")
    (tmp_path / "v.log").write_text(VERL_LOG)
    df = M.read_runs({"nemo-rl": tmp_path / "nemo", "verl": tmp_path / "v.log"})
    r = M.select(df, "reward")
    assert set(r.run) == {"nemo-rl", "verl"}
    assert set(r.tag) == {"train/reward", "critic/score/mean"}
    last = M.latest(df)
    assert set(last[last.metric == "generation_length"].tag) == {"train/mean_gen_tokens_per_sample", "response_length/mean"}
    shutil.rmtree(tmp_path / "nemo")
    assert set(M.read_runs([tmp_path / "v.log"]).run) == {"v"}


# -- #31: the metrics command's JSON, pipes and non-metric files ------------------------------------------------


def _cli(capfd, *args):
    import json

    from nbtools import cli

    capfd.readouterr()
    code = cli.main([str(a) for a in args])
    out, err = capfd.readouterr()
    assert "Traceback" not in out + err, err
    return code, (json.loads(out) if "--json" in args and out.strip() else out), err


def test_metrics_json_lists_the_damage_and_keeps_infinity(tmp_path, capfd):
    exp = _write_run(tmp_path / "exp_001")
    w = SummaryWriter(log_dir=str(exp / "tensorboard"))
    w.add_scalar("train/reward", float("inf"), 7)
    w.add_scalar("train/kl_penalty", float("-inf"), 7)
    w.close()
    ev = max((exp / "tensorboard").glob("events.out.tfevents.*"), key=lambda p: p.stat().st_size)
    data = bytearray(ev.read_bytes())
    data[len(data) // 2: len(data) // 2 + 4] = b"\xff\xff\xff\xff"  # damage in the middle: the rest is still read
    ev.write_bytes(bytes(data))
    with pytest.warns(UserWarning, match="damaged"):
        code, doc, err = _cli(capfd, "metrics", exp, "--json")
    assert code == 0 and doc["problems"] and {"file", "offset", "kind", "message"} <= set(doc["problems"][0]), (doc, err)
    assert "damaged stretch" in err
    rows = {(r["tag"], r["step"]): r["value"] for r in doc["rows"]}
    assert rows.get(("train/reward", 7)) == "Infinity" and rows.get(("train/kl_penalty", 7)) == "-Infinity"


def test_metrics_of_a_file_that_holds_none_is_an_error(tmp_path, capfd):
    garbage = tmp_path / "garbage.bin"
    garbage.write_bytes(bytes(range(256)) * 64)
    code, doc, _ = _cli(capfd, "metrics", garbage, "--json")
    assert code == 1 and "holds no metrics" in doc["error"] and "verl console log" in doc["fix"]
    log = tmp_path / "verl.log"
    log.write_text("starting up…\n")  # a verl log before its first step holds no metric line yet: said, exit 1
    code, doc, _ = _cli(capfd, "metrics", log, "--json")
    assert code == 1 and "no verl metric line" in doc["error"] and "once its job finished step 1" in doc["fix"]


def test_metrics_json_into_a_closed_pipe_prints_no_traceback(tmp_path):
    import subprocess
    import sys

    w = SummaryWriter(log_dir=str(tmp_path / "exp_001" / "tensorboard"))
    for s in range(1, 3001):
        w.add_scalar("train/reward", s / 3000, s)
        w.add_scalar("train/mean_gen_tokens_per_sample", 100.0 + s, s)
    w.close()
    r = subprocess.run(f"{sys.executable} -m nbtools.cli metrics {tmp_path / 'exp_001'} --json | head -c 100",
                       shell=True, capture_output=True, text=True, timeout=300,
                       cwd=Path(__file__).resolve().parent.parent)
    assert len(r.stdout) == 100 and r.stdout.startswith('{"source": "tensorboard"')
    assert "Traceback" not in r.stderr and "BrokenPipeError" not in r.stderr and "Exception ignored" not in r.stderr
