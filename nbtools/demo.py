"""Run the whole notebook sequence headless on the local backend (what `make demo` and `nbtools demo` do).

Executed copies and figures land in ``runs/<timestamp>/``; the local Ray head the notebooks start is stopped
at the end even when a notebook fails, so nothing is left running.

Example:
    $ python -m nbtools.demo                # all notebooks
    $ python -m nbtools.demo --only 02 03   # a subset, in order
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import re
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["DemoResult", "run_demo", "check_outputs", "clean_notebook", "freeze_widgets", "kernel_config", "main"]

PROJECT_ROOT = Path(__file__).resolve().parent.parent


@dataclass
class DemoResult:
    """What ran, how long each notebook took, and where everything went."""

    out_dir: Path
    timings: dict[str, float] = field(default_factory=dict)
    failed: str | None = None
    error: str | None = None
    problems: list[str] = field(default_factory=list)  # what a reader would see broken: fails the demo
    warnings: list[str] = field(default_factory=list)  # outputs naming the machine's absolute paths

    @property
    def ok(self) -> bool:
        return self.failed is None and not self.problems

    def summary(self) -> str:
        verdict = "OK" if self.ok else (f"FAILED at {self.failed}" if self.failed else
                                         f"FAILED: {len(self.problems)} output problem(s) in the executed notebooks")
        lines = [f"nbtools demo — {verdict}"]
        for name, secs in self.timings.items():
            lines.append(f"  {name:<32} {secs:7.1f} s")
        lines.append(f"  {'total':<32} {sum(self.timings.values()):7.1f} s")
        lines.append(f"executed notebooks: {self.out_dir / 'notebooks'}")
        figs = sorted(self.out_dir.rglob("*.png"))
        lines.append(f"figures ({len(figs)}): {self.out_dir}  (e.g. {figs[0].relative_to(self.out_dir)})" if figs else f"figures: none under {self.out_dir}")
        lines.append(f"run artifacts (logs, checkpoints, merged model): {self.out_dir}")
        if self.error:
            lines.append(f"error: {self.error}")
        if self.problems:
            lines.append(f"{len(self.problems)} problem(s) in the executed notebooks' outputs:")
            lines.extend(f"  {p}" for p in self.problems)
        if self.warnings:
            lines.append(f"{len(self.warnings)} output(s) name this machine's absolute paths (show them under <runs_dir> or ~):")
            lines.extend(f"  {p}" for p in self.warnings)
        return "\n".join(lines)


def _notebooks(nb_dir: Path, only: list[str] | None) -> list[Path]:
    nbs = sorted(nb_dir.glob("[0-9][0-9]_*.ipynb"))
    if only:
        nbs = [p for p in nbs if any(p.name.startswith(o) for o in only)]
    return nbs


def run_demo(
    *,
    out_dir: str | os.PathLike | None = None,
    only: list[str] | None = None,
    notebooks_dir: str | os.PathLike | None = None,
    timeout: int = 1800,
    parameters: dict | None = None,
) -> DemoResult:
    """Execute the numbered notebooks in order with papermill on the local backend.

    ``parameters`` are passed to every notebook beside ``BACKEND="local"`` (e.g. another ``CONFIG``, relative to
    ``notebooks_dir`` as the notebooks' own default is). Executed copies already in ``<out_dir>/notebooks`` (a
    subset run before, or notebooks run and saved in JupyterLab) are frozen and checked with the new ones.

    Example:
        >>> result = nbtools.demo.run_demo(only=["01", "02"])
        >>> print(result.summary())
    """
    import papermill as pm

    nb_dir = Path(notebooks_dir) if notebooks_dir else PROJECT_ROOT / "notebooks"
    stamp = dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    out = Path(out_dir) if out_dir else PROJECT_ROOT / "runs" / stamp
    out = out.resolve()
    (out / "notebooks").mkdir(parents=True, exist_ok=True)
    os.environ["NBTOOLS_RUNS_DIR"] = str(out)
    os.environ.setdefault("MPLBACKEND", "Agg")
    result = DemoResult(out_dir=out)
    selected = _notebooks(nb_dir, only)
    if not selected:
        result.failed = "(no notebook)"
        result.error = f"no notebook in {nb_dir} matches {only or 'NN_*.ipynb'}; fix: use prefixes like 02 03"
        return result
    try:
        for nb in selected:
            t0 = time.perf_counter()
            target = out / "notebooks" / nb.name
            print(f"▶ {nb.name} → {target}", flush=True)
            try:
                pm.execute_notebook(
                    str(nb), str(target), parameters={"BACKEND": "local", **(parameters or {})}, cwd=str(nb_dir),
                    kernel_name="python3", progress_bar=False, execution_timeout=timeout, config=kernel_config(),
                )
            except Exception as e:  # papermill already wrote the failing notebook with its traceback
                result.failed, result.error = nb.name, f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''} (see {target})"
                result.timings[nb.name] = time.perf_counter() - t0
                break
            result.timings[nb.name] = time.perf_counter() - t0
    finally:
        _stop_everything(out)
    for nb in sorted((out / "notebooks").glob("*.ipynb")):
        freeze_widgets(nb)
        result.problems += check_outputs(nb)
        # outputs that still name this machine's paths: reported, not (yet) failing the demo
        result.warnings += [p for p in check_outputs(nb, forbidden=(str(PROJECT_ROOT), str(out))) if "absolute path" in p]
    return result


# Calls whose cell must show a figure (an image, or plotly's own output).
FIGURE_CALLS = re.compile(r"\b(?:plots\.(?:training_curves|timing|attempts_timeline|watch|overlay)|evals\.plots\.(?:accuracy|flip_matrix|"
                          r"breakdown)|plot_rescore)\(")
FIGURE_MIMES = ("image/png", "image/svg+xml", "application/vnd.plotly.v1+json")
_WIDGET_REPR = re.compile(r"(?:VBox|HBox|Box|GridBox|HTML|Output|Tab|Accordion|Stack)\(")  # ipywidgets' repr
_FIGURE_TEXT = re.compile(r"<(?:Figure|matplotlib\.figure\.\w+) size [\d.]+x[\d.]+ with \d+ Axes>")


def check_outputs(notebook: str | os.PathLike, *, forbidden: tuple[str, ...] = ()) -> list[str]:
    """What a reader of an executed notebook would see wrong, one line each (empty when nothing).

    A cell that makes a figure (``FIGURE_CALLS``) must hold an image or plotly output; no output may be a figure's
    bare text repr (``<Figure size 900x360 with 1 Axes>``: the backend showed no image); no output may contain any of
    ``forbidden`` (the checkout's and the runs dir's absolute paths: outputs name paths relative to the runs dir); no
    widget may be saved with only its Python repr (``VBox(children=…)``) where its snapshot belongs.

    Example:
        >>> nbtools.demo.check_outputs("runs/20260101-000000/notebooks/04_monitor.ipynb", forbidden=(str(Path.cwd()),))
        []
    """
    p = Path(notebook)
    cells = json.loads(p.read_text()).get("cells", [])
    problems = []
    for i, cell in enumerate(cells):
        if cell.get("cell_type") != "code":
            continue
        where = f"{p.name} cell {i}"
        source = "".join(cell.get("source", ""))
        outputs = cell.get("outputs", [])
        mimes = {m for o in outputs for m in o.get("data", {})}
        if FIGURE_CALLS.search(source) and not mimes.intersection(FIGURE_MIMES):
            problems.append(f"{where}: makes a figure but shows no image (outputs: {sorted(mimes) or 'none'})")
        for o in outputs:
            texts = [_text(o.get("text", ""))] + [_text(v) for v in o.get("data", {}).values() if isinstance(v, str | list)]
            texts += [_text(o.get("evalue", "")), *map(_text, o.get("traceback", []))]
            blob = "\n".join(texts)
            plain = _text(o.get("data", {}).get("text/plain", ""))
            if "text/html" not in o.get("data", {}) and _WIDGET_REPR.match(plain):
                problems.append(f"{where}: a widget saved without a static snapshot (shows {plain[:40]}…)")
            if (m := _FIGURE_TEXT.search(blob)) and "image/png" not in o.get("data", {}):
                problems.append(f"{where}: shows {m.group(0)} instead of the figure")
            for f in forbidden:
                if f and f in blob:
                    problems.append(f"{where}: output names the machine's absolute path {f}")
                    break
    return problems


def _text(v) -> str:
    return "".join(v) if isinstance(v, list) else str(v)


def kernel_config():
    """Kernel manager settings for headless runs: CurveZMQ-encrypted kernel sockets.

    ipykernel (7.x) warns "Kernel is running over TCP without encryption" at every start (once per notebook), and
    rightly: the kernel's ports on 127.0.0.1 carry code and outputs in plain text. jupyter_client provisions CurveZMQ
    keys when asked (``KernelManager.transport_encryption``, jupyter_client >= 8.9) and the kernel spec declares
    support (``metadata.supported_encryption``, as ipykernel >= 7.3's does); "auto" falls back to plain TCP, with
    the warning, for a kernel that cannot. An older jupyter_client has no such setting (nor does its ipykernel warn).

    Example:
        >>> papermill.execute_notebook(src, dst, kernel_name="python3", config=kernel_config())
    """
    from jupyter_client import KernelManager
    from traitlets.config import Config

    if not KernelManager.class_traits().get("transport_encryption"):
        return Config()
    return Config({"KernelManager": {"transport_encryption": "auto"}})


def _stop_everything(runs_dir: Path) -> None:
    """Stop whatever the notebooks started under this runs dir (the local Ray head), by its recorded pid."""
    from nbtools.backends.local import stop_all_under

    try:
        stop_all_under(runs_dir)
    except Exception as e:  # report, never mask the demo's own result
        print(f"warning: could not stop the local Ray head under {runs_dir}: {e}", file=sys.stderr)


WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"


def freeze_widgets(path: str | os.PathLike) -> int:
    """Keep an executed notebook's widgets as their static snapshots; the number of widget outputs frozen.

    Why: a saved notebook has no kernel behind its widgets. Restored from saved state (trusted), they come back as
    controls that look live but do nothing, each with a "disconnected" icon; without state, as "model not found";
    and nbconvert's HTML needs the widget manager from a CDN. The snapshot each nbtools widget puts beside its view
    (``text/html``: what it showed, with a note to re-run the cell) is true in all of them, so the saved copy keeps
    that: the widget-view output and the notebook's widget state are dropped (re-running the cell brings the live
    widget back). Other outputs are untouched.

    Example:
        >>> freeze_widgets("runs/20260101-000000/notebooks/05_explore.ipynb")
        3
    """
    p = Path(path)
    nb = json.loads(p.read_text())
    frozen = 0
    for cell in nb.get("cells", []):
        for o in cell.get("outputs", []):
            data = o.get("data", {})
            if WIDGET_VIEW in data and len(data) > 1:  # a widget with another rendering: its snapshot or its text
                del data[WIDGET_VIEW]
                frozen += 1
    had_state = nb.get("metadata", {}).pop("widgets", None) is not None
    if frozen or had_state:
        p.write_text(json.dumps(nb, indent=1, ensure_ascii=False) + "\n")
    return frozen


def clean_notebook(path: str | os.PathLike) -> bool:
    """Strip outputs, execution counts and execution metadata in place; True when the file changed."""
    p = Path(path)
    raw = p.read_text()
    nb = json.loads(raw)
    for cell in nb.get("cells", []):
        if cell.get("cell_type") == "code":
            cell["outputs"] = []
            cell["execution_count"] = None
        md = cell.get("metadata", {})
        for key in ("execution", "papermill", "collapsed", "scrolled", "executionInfo", "colab", "ExecuteTime"):
            md.pop(key, None)
    for key in ("papermill", "colab", "widgets"):
        nb.get("metadata", {}).pop(key, None)
    new = json.dumps(nb, indent=1, ensure_ascii=False) + "\n"
    if new != raw:
        p.write_text(new)
        return True
    return False


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="nbtools demo", description="Run notebooks 01-09 on the local backend.")
    ap.add_argument("--only", nargs="*", help="notebook number prefixes to run, e.g. 02 03")
    ap.add_argument("--out", help="output directory (default runs/<timestamp>)")
    ap.add_argument("--clean", nargs="*", metavar="NOTEBOOK", help="strip outputs from these notebooks and exit")
    args = ap.parse_args(argv)
    if args.clean is not None:
        changed = [p for p in args.clean if clean_notebook(p)]
        print(f"cleaned {len(changed)} notebook(s)" + (": " + ", ".join(changed) if changed else ""))
        return 0
    result = run_demo(out_dir=args.out, only=args.only)
    print(result.summary())
    return 0 if result.ok else 1


if __name__ == "__main__":
    sys.exit(main())
