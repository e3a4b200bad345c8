"""Notebook 09's default (issue 45): ``stop_jobs(..., dry_run=True)`` lists the running jobs it would stop and stops none."""

from __future__ import annotations

import pandas as pd

import nbtools


def test_dry_run_lists_the_running_jobs_and_stops_none(monkeypatch):
    jobs = pd.DataFrame({"submission_id": ["exp-a", "exp-b", "other-c", "exp-d"],
                         "status": ["RUNNING", "SUCCEEDED", "RUNNING", "PENDING"]})
    monkeypatch.setattr(nbtools.jobs, "list_jobs", lambda address: jobs)
    stopped = []
    monkeypatch.setattr(nbtools.jobs, "attach", lambda address, sid: stopped.append(sid))
    dry = nbtools.jobs.stop_jobs("http://127.0.0.1:9", prefix="exp-", dry_run=True)
    assert dry == {"exp-a": "RUNNING", "exp-d": "PENDING"} and dry.dry_run and stopped == []
    assert repr(dry) == "dry run: would stop 2 running job(s): exp-a (RUNNING), exp-d (PENDING); nothing was stopped"
