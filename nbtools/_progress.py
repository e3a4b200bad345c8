"""The progress bar every nbtools wait and loop shows: ``tqdm.auto``'s, that says what finished once it closes.

Why: in a notebook tqdm draws an ipywidgets bar. A saved notebook keeps no widget state, so the output falls back to
the text the bar had when it was first shown — "Ray head: 0%| 0/3" in every executed notebook, for waits that
finished. Here the bar is displayed with a display id and, when it closes, replaced by its final line as text
("Ray head: 100% 3/3 [00:04]"): what a reader sees live and in the saved file is what happened. Outside a kernel
this is plain ``tqdm.auto.tqdm``.

Example:
    >>> from nbtools._progress import tqdm
    >>> with tqdm(total=3, desc="Ray head") as bar:
    ...     bar.update(3)
"""

from __future__ import annotations

from tqdm.auto import tqdm as _auto

__all__ = ["tqdm", "final_line", "LogTail"]


def final_line(bar) -> str:
    """The bar's last state as one line of text, without the drawn bar (tqdm's ``ncols=0`` form)."""
    d = dict(bar.format_dict)
    d["ncols"] = 0
    if d.get("bar_format"):
        d["bar_format"] = d["bar_format"].replace("{bar}", "")
    line = bar.format_meter(**d).replace("||", "").replace("| ", " ").replace(": , ", ": ").strip()
    if bar.total and bar.n < bar.total:
        line += " (stopped before the end)"
    return line


try:
    from tqdm.notebook import tqdm as _notebook
except ImportError:  # no ipywidgets: tqdm.auto is the console bar
    _notebook = None


if _notebook is not None and issubclass(_auto, _notebook):
    from IPython.display import display as _display

    class tqdm(_auto):  # noqa: N801 - a drop-in for tqdm.auto.tqdm
        """``tqdm.notebook.tqdm`` shown under a display id and replaced by :func:`final_line` when it closes."""

        def __init__(self, *args, **kwargs):
            self._handle = None
            show_now = kwargs.pop("display", True)
            super().__init__(*args, display=False, **kwargs)
            if show_now and not self.disable and self.delay <= 0:
                self._show()

        def _show(self):
            self._handle = _display(self.container, display_id=True)
            self.displayed = True

        def display(self, *args, check_delay: bool = True, **kwargs):
            shown = super().display(*args, check_delay=False, **kwargs)
            if check_delay and self.delay > 0 and not self.displayed:
                self._show()
            return shown

        def close(self):
            if self.disable or getattr(self, "_closed_text", False):
                return
            super().close()
            self._closed_text = True
            if self._handle is not None:
                self._handle.update({"text/plain": final_line(self)}, raw=True)
else:
    tqdm = _auto


IN_NOTEBOOK = _notebook is not None and issubclass(_auto, _notebook)  # tqdm.auto found a Jupyter kernel


class LogTail:
    """The last ``lines`` lines of a log, shown in a notebook under the progress bar and updated in place.

    Why: a bar says how far a job is, the log says what it is doing (and why it fails). Redrawn at most every
    ``every`` seconds; in the saved notebook the tail as the job ended stays. Outside a kernel it shows nothing.

    Example:
        >>> tail = LogTail(8, title="job log")
        >>> for line in job.follow(): tail.add(line)
        >>> tail.show()
    """

    def __init__(self, lines: int = 8, *, title: str = "log", every: float = 0.5):
        import collections

        self.lines = collections.deque(maxlen=max(lines, 1))
        self.title, self.every = title, every
        self._handle, self._shown_at, self._dirty = None, 0.0, False

    def add(self, line: str) -> None:
        import time

        self.lines.append(line.rstrip("\n"))
        self._dirty = True
        if time.monotonic() - self._shown_at >= self.every:
            self.show()

    def text(self) -> str:
        from nbtools._paths import shown

        return shown(f"── {self.title}: last {len(self.lines)} line(s) ──\n" + "\n".join(self.lines))

    def show(self) -> None:
        import time

        if not IN_NOTEBOOK or not self.lines or not self._dirty:
            return
        bundle = {"text/plain": self.text()}
        if self._handle is None:
            self._handle = _display(bundle, raw=True, display_id=True)
        else:
            self._handle.update(bundle, raw=True)
        self._shown_at, self._dirty = time.monotonic(), False
