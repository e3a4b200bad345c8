"""What an executed notebook shows: every figure as an image, whatever the matplotlib backend.

``make demo`` and ``make test`` run the notebooks with ``MPLBACKEND=Agg``, where IPython registers no PNG formatter
for matplotlib figures; a figure a cell returned used to be stored as the text ``<Figure size 900x360 with 1 Axes>``.
Here a notebook calling every figure helper of nbtools is executed the way nbmake and papermill do (nbclient, a
fresh ``python3`` kernel, ``MPLBACKEND=Agg`` in its environment) and checked with ``nbtools.demo.check_outputs``,
the check ``nbtools demo`` runs over its executed notebooks. A cell returning a plain pyplot figure is the control:
the check must flag it.
"""

from __future__ import annotations

import base64
import json
import os
from pathlib import Path

import pytest
from ports import free_port

from nbtools.demo import check_outputs

ROOT = Path(__file__).resolve().parents[2]
SLOW_FIXTURES = ("executed",)  # a notebook kernel (tests/conftest.py marks its readers slow)

SETUP = '''
import numpy as np, pandas as pd
import nbtools
from nbtools.evals import EvalResult, compare
from nbtools.launch import Attempt
rng = np.random.default_rng(0)
steps = np.arange(1, 41)
metrics = pd.concat([pd.DataFrame({"run": "exp_001", "tag": tag, "step": steps, "value": rng.random(40) + k,
                                   "wall_time": steps * 1.0})
                     for k, tag in enumerate(["train/reward", "train/mean_gen_tokens_per_sample", "train/kl_penalty",
                                              "timing/train/total_step_time", "timing/train/generation",
                                              "performance/tokens_per_sec"])], ignore_index=True)
def result(correct):
    n = len(correct)
    return EvalResult(table=pd.DataFrame({"problem_id": [f"p{i}" for i in range(n)], "sample": 0, "prompt": "",
                      "response": "", "extracted_answer": None, "correct": correct,
                      "ground_truth": [str(i % 3) for i in range(n)]}), model="m")
base, tuned = result([i % 2 == 0 for i in range(30)]), result([i % 3 != 0 for i in range(30)])
df = pd.DataFrame({"step": [1] * 4 + [2] * 4, "idx": list(range(4)) * 2, "prompt": ["max 1 2 3"] * 8,
                   "response": [f"<think> 1 2 3 </think> <answer> {a} </answer>" for a in "32113322"],
                   "reward": [1.0, 0, 0, 0, 1, 1, 0, 0], "advantage": 0.0})
rescored = nbtools.rewards.rescore(df, [{"name": "exact_alnum", "weight": 1.0}], ground_truth=lambda p: "3")
'''

FIGURE_CELLS = [
    "nbtools.plots.training_curves(metrics)",
    "nbtools.plots.timing(metrics, save=FIGURES + '/timing.png')",
    "nbtools.plots.attempts_timeline([Attempt(1, 'a', status='SUCCEEDED', last_step=40)], metrics)",
    "nbtools.evals.plots.accuracy({'baseline': base, 'fine-tuned': tuned})",
    "nbtools.evals.plots.flip_matrix(compare(base, tuned))",
    "nbtools.evals.plots.breakdown({'baseline': base, 'fine-tuned': tuned})",
    "fig = nbtools.rewards.display.plot_rescore(rescored)\nfig",
]
PROGRESS = ("from nbtools._progress import tqdm\nfor _ in tqdm(range(3), desc='steps'): pass\n"
            "with tqdm(total=5, desc='merge', leave=False) as bar: bar.update(2)")
LOG_TAIL = ("from nbtools._progress import LogTail\ntail = LogTail(3, title='job log', every=0)\n"
            "for i in range(10): tail.add(f'line {i}')")
CONTROL = "import matplotlib.pyplot as plt\nfig, ax = plt.subplots(figsize=(9, 3.6))\nplt.close(fig)\nfig"


@pytest.fixture(scope="module")
def executed(tmp_path_factory):
    import nbclient
    import nbformat

    tmp = tmp_path_factory.mktemp("figures-nb")
    cells = [nbformat.v4.new_code_cell(f"FIGURES = {str(tmp)!r}\n" + SETUP)]
    cells += [nbformat.v4.new_code_cell(src) for src in [*FIGURE_CELLS, PROGRESS, LOG_TAIL, CONTROL]]
    nb = nbformat.v4.new_notebook(cells=cells)
    env = {**os.environ, "MPLBACKEND": "Agg", "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    old = dict(os.environ)
    os.environ.update(env)  # the kernel inherits this process's environment, as under `make test`
    try:
        nbclient.NotebookClient(nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(tmp)}}).execute()
    finally:
        os.environ.clear()
        os.environ.update(old)
    path = tmp / "figures.ipynb"
    nbformat.write(nb, path)
    return path, nb


def test_every_figure_cell_shows_a_png_under_agg(executed):
    path, nb = executed
    for cell in nb.cells[1:1 + len(FIGURE_CELLS)]:
        pngs = [o["data"]["image/png"] for o in cell.outputs if "image/png" in o.get("data", {})]
        assert len(pngs) == 1, (cell.source, cell.outputs)  # one image, not one per backend hook
        assert base64.b64decode(pngs[0])[:8] == b"\x89PNG\r\n\x1a\n"
        assert not any("<Figure size" in str(o.get("data", {}).get("text/plain", "")) and "image/png" not in o.get("data", {})
                       for o in cell.outputs), cell.outputs
    assert (path.parent / "timing.png").stat().st_size > 1000


def test_check_outputs_flags_a_bare_figure_and_nothing_else(executed):
    path, nb = executed
    problems = check_outputs(path)
    control = len(nb.cells) - 1
    assert problems == [f"{path.name} cell {control}: shows <Figure size 900x360 with 1 Axes> instead of the figure"], problems


def test_check_outputs_flags_missing_images_and_absolute_paths(tmp_path):
    nb = {"cells": [
        {"cell_type": "code", "source": "nbtools.plots.timing(metrics)", "outputs": []},
        {"cell_type": "code", "source": "cfg.logs_url", "outputs": [
            {"output_type": "execute_result", "data": {"text/plain": [f"'{ROOT}/runs/x/logs'"]}}]},
        {"cell_type": "code", "source": "print(1)", "outputs": [{"output_type": "stream", "name": "stdout", "text": "~/runs/x"}]},
    ]}
    p = tmp_path / "nb.ipynb"
    p.write_text(json.dumps(nb))
    problems = check_outputs(p, forbidden=(str(ROOT),))
    assert problems == ["nb.ipynb cell 0: makes a figure but shows no image (outputs: none)",
                        f"nb.ipynb cell 1: output names the machine's absolute path {ROOT}"], problems


def test_finished_progress_bars_say_what_finished(executed):
    _, nb = executed
    cell = nb.cells[1 + len(FIGURE_CELLS)]
    assert [sorted(o["data"]) for o in cell.outputs] == [["text/plain"], ["text/plain"]], cell.outputs  # no dead widget
    done, stopped = (o["data"]["text/plain"] for o in cell.outputs)
    assert done.startswith("steps: 100%") and "3/3" in done and "[00:0" in done, done
    assert stopped.startswith("merge:  40%") and "2/5" in stopped and stopped.endswith("(stopped before the end)"), stopped


def test_a_followed_log_shows_its_last_lines_in_place(executed):
    _, nb = executed
    cell = nb.cells[2 + len(FIGURE_CELLS)]
    assert [o["data"]["text/plain"] for o in cell.outputs] == ["── job log: last 3 line(s) ──\nline 7\nline 8\nline 9"]


# ------------------------------------------------------------------------------------------------ paths shown
def test_paths_show_relative_to_the_runs_dir_and_home(tmp_path, monkeypatch):
    import html

    import nbtools
    from nbtools import _paths

    runs = tmp_path / "runs" / "20260101-000000"
    monkeypatch.setenv("NBTOOLS_RUNS_DIR", str(runs))
    cfg = nbtools.config.load(ROOT / "experiments" / "local.yaml")
    assert cfg.logs_url == f"{runs}/local-rehearsal/logs"  # the value is the real path: commands and files use it
    assert repr(cfg.logs_url) == "'<runs_dir>/local-rehearsal/logs'"  # what a cell ending on it shows
    assert str(runs) not in repr(cfg) and "<runs_dir>/local-rehearsal/logs" in cfg._repr_markdown_()
    assert str(ROOT) not in repr(cfg)  # the config file's own path: <checkout>/experiments/local.yaml
    spec = nbtools.launch.build(cfg)
    assert str(runs) not in repr(spec) and str(runs) not in spec._repr_html_()
    assert html.escape("<runs_dir>") in spec._repr_html_() and "<runs_dir>" not in spec._repr_html_()  # no stray tag
    assert str(runs) in spec.entrypoint  # the command itself still runs as is
    from nbtools.health._report import HealthReport

    health = HealthReport(f"{runs}/local-rehearsal/logs/exp_001", "healthy", (1, 30), ())
    assert str(runs) not in str(health) and str(runs) not in health._repr_html_()  # 04's panel, 05's report
    assert str(health).startswith("<runs_dir>/local-rehearsal/logs/exp_001: healthy")
    import pickle

    import yaml

    assert yaml.safe_load(yaml.safe_dump({"logs": cfg.logs_url})) == {"logs": str(cfg.logs_url)}  # written as the path
    assert type(pickle.loads(pickle.dumps(cfg.logs_url))) is str  # crosses to Ray workers as a plain string
    home = str(Path.home())
    assert _paths.shown(f"x {home}/data/a.txt y") == "x ~/data/a.txt y"
    assert _paths.shown(f"{runs}x/other") == f"{runs}x/other"  # only whole path components


def test_ray_sdk_info_lines_are_silenced_when_a_client_is_made():
    import logging

    from nbtools.errors import NotReadyError
    from nbtools.jobs._client import RAY_SDK_LOGGERS, client_for

    logging.getLogger(RAY_SDK_LOGGERS[2]).setLevel(logging.DEBUG)  # a level a user chose is kept
    try:
        with pytest.raises(NotReadyError, match="notebook 02"):
            client_for("http://127.0.0.1:9")  # nothing answers on the discard port
        import ray.dashboard.modules.job.sdk  # noqa: F401 - Ray sets its loggers to INFO at import

        assert [logging.getLogger(n).level for n in RAY_SDK_LOGGERS] == [logging.WARNING, logging.WARNING, logging.DEBUG]
    finally:
        logging.getLogger(RAY_SDK_LOGGERS[2]).setLevel(logging.NOTSET)


# ------------------------------------------------------------------------------------------------ one-line verdicts
def test_empty_results_read_as_one_line_verdicts(tmp_path):
    import nbtools
    from nbtools.jobs import StoppedJobs

    assert repr(nbtools.jobs.stop_jobs("http://127.0.0.1:9", prefix="exp-")) == \
        "no job of 'exp-' can be running: no Ray cluster answers"
    assert repr(StoppedJobs(prefix="exp-")) == "no job of 'exp-' was running: nothing to stop"
    assert repr(StoppedJobs({"exp-1": "STOPPED"}, prefix="exp-")) == "stopped 1 job(s): exp-1 (STOPPED)"
    assert repr(StoppedJobs({"exp-1": "RUNNING"}, prefix="exp-", dry_run=True)) == \
        "dry run: would stop 1 running job(s): exp-1 (RUNNING); nothing was stopped"
    cfg = nbtools.config.load(ROOT / "experiments" / "local.yaml", overrides={"local.runs_dir": str(tmp_path)})
    nowhere = cfg.replace(**{"ray.dashboard_port": free_port()})  # the experiment's jobs: its cluster, '<name>-'
    assert repr(nbtools.jobs.stop_jobs(nowhere)) == "no job of 'local-rehearsal-' can be running: no Ray cluster answers"
    none = nbtools.tensorboard.stop(cfg)
    assert not none and repr(none) == "no TensorBoard of this experiment was running: nothing to stop"
    assert nbtools.tensorboard.Stopped(123) and repr(nbtools.tensorboard.Stopped(123)) == "TensorBoard (pid 123) stopped"


def test_checkpoint_overview_names_steps_and_drops_what_misleads():
    import pandas as pd

    import nbtools

    full = pd.DataFrame({"step": [100, 200], "path": ["/x/step_100", "/x/step_200"], "layout": ["v2_safetensors"] * 2,
                         "problem": [None, "not valid JSON"], "current_step": [50, 50], "current_epoch": [1, 3],
                         "val:accuracy": [0.9, 1.0], "val_reward": [0.9, 1.0], "consumed_samples": [1600, 3200]})
    view = nbtools.checkpoints.overview(full)
    assert list(view.columns) == ["checkpoint", "state", "layout", "val:accuracy", "epoch", "samples seen"]
    assert list(view["checkpoint"]) == ["step_100", "step_200"] and list(view["state"]) == ["ok", "damaged: not valid JSON"]
    other = nbtools.checkpoints.overview(full.assign(val_reward=[0.5, 0.6]))
    assert "val_reward" in other.columns  # kept when it says something the val: metric does not


# ------------------------------------------------------------------------------------------------ plots read well
def test_legends_name_the_experiment_and_models_keep_their_colour():
    import matplotlib.colors as mcolors
    import pandas as pd

    import nbtools
    from nbtools.evals import EvalResult

    steps = list(range(1, 11))
    df = pd.DataFrame({"run": "exp_001", "tag": "train/reward", "step": steps, "value": [s / 10 for s in steps],
                       "wall_time": steps})
    fig = nbtools.plots.training_curves(df, metrics=("reward",), experiment="local-rehearsal")
    assert [t.get_text() for t in fig.axes[0].get_legend().get_texts()] == ["local-rehearsal (exp_001)"]
    live = nbtools.curves.figure(df, metrics=("reward",), experiment="local-rehearsal")
    assert "local-rehearsal (exp_001)" in {t.name for t in live.data}

    def result(correct):
        return EvalResult(table=pd.DataFrame({"problem_id": [f"p{i}" for i in range(len(correct))], "sample": 0,
                                              "correct": correct, "ground_truth": ["1"] * (len(correct) - 1) + ["2"]}))

    base, tuned = result([True, False, False, True]), result([True, True, True, False])
    acc = nbtools.evals.plots.accuracy({"baseline greedy": base, "baseline sampled": base, "fine-tuned greedy": tuned})
    by = nbtools.evals.plots.breakdown({"baseline": base, "fine-tuned": tuned})

    def colours(ax):
        return [mcolors.to_hex(p.get_facecolor()) for p in ax.patches]

    a, b = colours(acc.axes[0]), colours(by.axes[0])
    assert a[0] == a[1] == b[0] == b[1] and a[2] == b[2] == b[3] and a[0] != a[2]  # one colour per model, everywhere
    labels = [t.get_text() for t in by.axes[0].texts]
    assert "0.00\nn=1" in labels and "1.00\nn=1" in labels  # the one-problem group says so instead of an empty bar
    assert "3 problems × 1" not in "".join(t.get_text() for t in acc.axes[0].get_xticklabels())  # 4 problems here
    assert all("4 problems × 1" in t.get_text() for t in acc.axes[0].get_xticklabels())


# ------------------------------------------------------------------------------------------------ tables a person reads
def test_plan_flags_script_and_nodes_read_like_kubectl(tmp_path, monkeypatch):
    import pandas as pd

    import nbtools
    from nbtools.backends._types import ClusterResources

    monkeypatch.setenv("NBTOOLS_RUNS_DIR", str(tmp_path))
    cfg = nbtools.config.load(ROOT / "experiments" / "gke-b200-gemma3-1b.yaml")
    plan = nbtools.gke.plan(cfg)
    page = plan._repr_html_()
    assert page.index(">STATUS<") < page.index(">STEP<") < page.index(">COMMAND<")  # the status first
    assert page.count("<tr><td style='text-align:left") == len(plan.steps) and "pending" in page
    yaml_steps = [s for s in plan.steps if s.stdin]
    assert yaml_steps and page.count("lines of YAML</summary>") == len(yaml_steps)  # heredocs folded, not inline
    assert "\\n" not in page and str(tmp_path) not in page and "&lt;runs_dir&gt;" in page

    flags = pd.DataFrame({"command": ["gcloud a b", "gcloud c d"], "flag": ["--x", "--location"], "ok": [True, False],
                          "source": "table", "message": ["", "no such flag"]})
    flags.attrs["source"] = "the shipped table"
    assert repr(nbtools.gke.flag_report(flags[flags.ok])) == "1 gcloud flags checked against the shipped table: every flag exists"
    bad = nbtools.gke.flag_report(flags)
    assert not bad.ok and "1 do not exist" in repr(bad) and "--location" in bad._repr_html_()

    script = "\n".join(f"line {i}" for i in range(50))
    preview = nbtools.gke.ScriptPreview(script, str(tmp_path / "provision.sh"), lines=10)
    assert repr(preview).splitlines()[-2:] == ["line 9", "# … 40 more lines in <runs_dir>/provision.sh"]

    res = ClusterResources("http://x", 1, 2.0, 0.0, 2 * 1024**3, 1024**3, node_table=pd.DataFrame(
        {"node_id": ["e9a7"], "ip": ["10.0.0.1"], "head": [True], "state": ["ALIVE"], "CPU": [2.0], "GPU": [0.0],
         "memory_bytes": [2 * 1024**3], "object_store_bytes": [1024**3]}))
    view = res.nodes_view()
    assert list(view.columns)[:3] == ["state", "node", "role"] and view.loc[0, "memory (GiB)"] == 2.0


def test_token_strip_shows_decoded_text_with_the_id_on_hover():
    import numpy as np

    from nbtools.explorer import _decoder
    from nbtools.explorer._record import record_view
    from nbtools.explorer._render import record_html

    class Tok:  # the one method the strip needs from a transformers tokenizer
        def decode(self, ids):
            return {5: "<think>", 13: " 3"}[ids[0]]

    rec = {"step": 1, "idx": 0, "prompt": "p", "response": "<think> 3", "reward": 1.0, "token_ids": [5, 13],
           "token_loss_mask": [1, 1], "generation_logprobs": [-0.1, -0.2]}
    page = record_html(record_view(rec, decode=_decoder(Tok(), None)))
    assert "title='pos 0 · id 5 ·" in page and ">&lt;think&gt;</span>" in page and "> 3</span>" in page
    assert ">13</span>" not in page  # the id moved to the hover
    plain = record_html(record_view(rec))
    assert ">13</span>" in plain and np.isnan(record_view(rec).advantage)  # without a tokenizer: ids, as before
    assert _decoder(None, None) is None


def test_demo_fails_on_a_missing_figure_and_reports_machine_paths(tmp_path):
    from nbtools.demo import DemoResult

    clean = DemoResult(out_dir=tmp_path, warnings=["04_monitor.ipynb cell 3: output names the machine's absolute path /x"])
    assert clean.ok and "1 output(s) name this machine's absolute paths" in clean.summary()
    broken = DemoResult(out_dir=tmp_path, problems=["07_evaluate_compare.ipynb cell 14: shows <Figure size 680x360 "
                                                    "with 1 Axes> instead of the figure"])
    assert not broken.ok and "FAILED: 1 output problem(s)" in broken.summary() and "cell 14: shows <Figure size" in broken.summary()


# ------------------------------------------------------------------------------------------------ tables read well
def test_tables_read_like_kubectl_left_aligned_and_one_line_when_empty(tmp_path):
    """JupyterLab right-aligns table cells; the tables nbtools shows carry ``text-align:left`` inline (kept by its
    sanitiser), stay DataFrames through pandas, and say one line where they have no rows."""
    import importlib.util
    import re

    import pandas as pd

    import nbtools
    from nbtools._table import Table

    full = pd.DataFrame({"step": [100, 200], "path": ["/x/step_100", "/x/step_200"], "layout": ["v2_safetensors"] * 2,
                         "problem": [None, None], "val:accuracy": [0.9, 1.0]})
    view = nbtools.checkpoints.overview(full)
    cells = re.findall(r"<t[dh][\s>][^>]*>?", view._repr_html_())
    assert len(cells) >= 10 and all('style="text-align:left"' in c for c in cells), cells[:3]
    assert 'text-align: right' not in view._repr_html_()
    assert isinstance(view.head(1), Table) and view["state"].tolist() == ["ok", "ok"]  # still a DataFrame
    none = nbtools.checkpoints.overview(full.iloc[:0])
    assert repr(none) == "no complete step_N checkpoint yet" and none._repr_html_() == "<p>no complete step_N checkpoint yet</p>"
    assert repr(view[view["state"] == "damaged"]) != "no complete step_N checkpoint yet"  # a filter is not the whole

    spec = importlib.util.spec_from_file_location("gen_nemo_rl_run", ROOT / "benchmarks" / "gen_nemo_rl_run.py")
    gen = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen)
    exp = gen.generate(tmp_path / "logs", steps=1, records=4, seq_len=16, group_size=2)
    run = nbtools.trajectories.open_run(exp)
    run.read()
    assert repr(run.problems) == "every line read so far was read whole: nothing skipped, no bytes replaced"
    step_file = next(Path(exp).glob("train_data_step*.jsonl"))
    with open(step_file, "a") as f:
        f.write("{not json\n")
    again = nbtools.trajectories.open_run(exp)
    with pytest.warns(UserWarning, match="malformed lines skipped"):
        again.read()
    assert len(again.problems) == 1 and again.problems["kind"].tolist() == ["malformed"]
    assert "text-align:left" in again.problems._repr_html_()
