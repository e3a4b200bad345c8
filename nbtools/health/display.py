"""The health panel of notebook 04: the report's table, redrawn beside the curves while the run trains.

A thin display layer over :func:`nbtools.health.check`: it holds the latest ``HealthReport`` (``panel.report``) and
redraws it every ``interval`` seconds from a background thread until the run's job ends, so the cell that follows
(``nbtools.plots.watch``, which blocks while it redraws the curves) and the panel move together.

Example:
    >>> panel = nbtools.health.display.panel(cfg, interval=30)
    >>> panel.report.status
    'healthy'
"""

from __future__ import annotations

import contextlib
import threading
import time

from nbtools._escape import html as _h
from nbtools.health import HealthReport, check

__all__ = ["HealthPanel", "panel"]


class HealthPanel:
    """An ``ipywidgets.HTML`` with the run's health table; ``refresh()`` re-checks and redraws it."""

    def __init__(self, cfg, *, interval: float = 30.0, thresholds: dict | None = None, until_done: bool = True,
                 timeout: float | None = None):
        import ipywidgets as w

        self.cfg, self.interval, self.thresholds = cfg, interval, thresholds
        self.widget = w.HTML()
        self.report: HealthReport | None = None
        self.error = ""
        self.refresh()
        self._thread = None
        job = self._job() if until_done else None
        if job is not None:
            self._thread = threading.Thread(target=self._follow, args=(job, timeout), daemon=True,
                                            name="nbtools-health-panel")
            self._thread.start()

    def _job(self):
        from nbtools import jobs
        from nbtools.errors import NbtoolsError

        with contextlib.suppress(NbtoolsError, OSError):  # the newest attempt of the run (``<id>``, ``<id>-attemptN``)
            table = jobs.list_jobs(self.cfg.dashboard_url)
            mine = table[table["submission_id"].astype(str).str.startswith(self.cfg.submission_id)]
            if len(mine):
                newest = mine.sort_values("start_time", na_position="first").iloc[-1]["submission_id"]
                job = jobs.attach(self.cfg.dashboard_url, newest)
                if not job.status().is_terminal():
                    return job
        return None

    def _follow(self, job, timeout: float | None) -> None:
        from nbtools.errors import NbtoolsError

        deadline = None if timeout is None else time.monotonic() + timeout
        while deadline is None or time.monotonic() < deadline:
            try:
                done = job.wait(self.interval, raise_on_failure=False) is not None
            except (NbtoolsError, TimeoutError):
                done = False
            except OSError:
                return
            self.refresh()
            if done and job.status().is_terminal():
                return

    def refresh(self) -> HealthReport | None:
        """Check the run again and redraw; returns the report (None while the run has written nothing)."""
        from nbtools.errors import NbtoolsError

        try:
            self.report = check(self.cfg.logs_url, config=self.cfg, thresholds=self.thresholds)
            self.error = ""
        except NbtoolsError as e:
            self.error = str(e).splitlines()[0]
        stamp = time.strftime("%H:%M:%S")
        body = self.report._repr_html_() if self.report is not None else "<i>no steps written yet</i>"
        note = f"<br><small style='color:#b00'>{_h(self.error)}</small>" if self.error else ""
        self.widget.value = f"{body}<br><small>checked at {stamp}</small>{note}"
        return self.report

    def _repr_mimebundle_(self, **kwargs):
        """The live widget, plus the table as it is now (``text/html``) for a saved notebook, which has no kernel."""
        bundle = self.widget._repr_mimebundle_(**kwargs)
        data = bundle[0] if isinstance(bundle, tuple) else bundle
        data["text/html"] = self.widget.value
        data["text/plain"] = "Health panel (a live widget): re-run this cell in JupyterLab to follow the run."
        return bundle


def panel(cfg, *, interval: float = 30.0, thresholds: dict | None = None, until_done: bool = True,
          timeout: float | None = None) -> HealthPanel:
    """A health panel for ``cfg``'s run, redrawn every ``interval`` s while its job runs (once when it has ended).

    Example:
        >>> panel = nbtools.health.display.panel(cfg, interval=REFRESH_SECONDS)
        >>> panel
    """
    return HealthPanel(cfg, interval=interval, thresholds=thresholds, until_done=until_done, timeout=timeout)
