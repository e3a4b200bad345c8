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

from nbtools.demo import check_outputs

ROOT = Path(__file__).resolve().parent.parent

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
CONTROL = "import matplotlib.pyplot as plt\nfig, ax = plt.subplots(figsize=(9, 3.6))\nplt.close(fig)\nfig"


@pytest.fixture(scope="module")
def executed(tmp_path_factory):
    import nbclient
    import nbformat

    tmp = tmp_path_factory.mktemp("figures-nb")
    cells = [nbformat.v4.new_code_cell(f"FIGURES = {str(tmp)!r}\n" + SETUP)]
    cells += [nbformat.v4.new_code_cell(src) for src in [*FIGURE_CELLS, CONTROL]]
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
