"""Launch GRPO as a Ray job: build the exact command and runtime env, lint the known traps, submit or re-attach.

Why: one call per step, the same on every backend. The backend says which trainer runs there (the local backend
runs the miniature rehearsal; ``gke`` and ``ray`` run the experiment's ``trainer.kind``: NeMo-RL (``examples/run_grpo_math.py`` up to v0.5, ``examples/run_grpo.py`` from v0.6) or verl from the container.
Re-running ``submit`` with the same config re-attaches to the job instead of starting a second one.
``supervise`` follows it and resubmits after a preemption (``resubmit``: attempt 2, 3, … from the newest ``step_N``);
``diagnose`` says why a job ended.

The modules, each importing only those before it: ``lint`` (the known traps) -> ``_submit`` (build, send, submit) ->
``_prepare`` (the trainer's preparation jobs, before training) -> ``_diagnose`` (pure: log text, status and events -> ``Diagnosis``) -> ``_attempts`` (the record beside the logs) ->
``_retry`` (the I/O between attempts: ``diagnose``, ``resubmit``) -> ``_stacks`` (pure: stacks -> phases) -> ``_stall``
(progress, and the pure stall verdict) -> ``_evidence`` (``stall``: stacks through Ray's dashboard, the bundle) ->
``_supervise`` (the loop).

Example:
    >>> prep = nbtools.launch.prepare(cfg)        # verl: data (and weights) in place first; NeMo-RL: nothing to do
    >>> spec = nbtools.launch.build(cfg)          # the exact entrypoint and runtime env
    >>> report = nbtools.launch.lint(cfg)         # findings with fixes; report.ok
    >>> job = nbtools.launch.submit(cfg)          # lint -> refuse on blocking -> submit (or re-attach)
"""

from __future__ import annotations

from nbtools.launch import recipes, runtime_env
from nbtools.launch._attempts import Attempt, attempts, read_attempts
from nbtools.launch._diagnose import Cause, Diagnosis, diagnose_log
from nbtools.launch._evidence import stall
from nbtools.launch._outputs import RunOutputs, outputs
from nbtools.launch._prepare import Preparation, PreparedJob, prepare, prepare_jobs, submit_prepare_jobs
from nbtools.launch._retry import attach, diagnose, resubmit
from nbtools.launch._stall import StallVerdict
from nbtools.launch._submit import LaunchSpec, build, follow, submit
from nbtools.launch._supervise import SupervisedRun, supervise
from nbtools.launch.lint import Finding, LintReport, existing_steps_in, lint

__all__ = [
    "LaunchSpec",
    "build",
    "lint",
    "submit",
    "follow",
    "outputs",
    "prepare",
    "prepare_jobs",
    "submit_prepare_jobs",
    "Preparation",
    "PreparedJob",
    "RunOutputs",
    "Finding",
    "LintReport",
    "existing_steps_in",
    "recipes",
    "runtime_env",
    "Cause",
    "Diagnosis",
    "diagnose",
    "diagnose_log",
    "Attempt",
    "attach",
    "attempts",
    "read_attempts",
    "resubmit",
    "supervise",
    "SupervisedRun",
    "stall",
    "StallVerdict",
]
