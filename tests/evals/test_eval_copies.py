"""``nbtools.evals.evaluate`` on GKE copies each model to the pods' local disks once: notebook 07's greedy and sampled
evaluations of the fine-tuned model load one copy, and a re-run that re-attaches to its finished job (07 again,
``nbtools evaluate`` after 07) execs nothing in the pods. The cluster is left out (jobs and pod execs recorded here);
the simulated GKE runs the whole path in tests/notebooks/test_gke*.py."""

from __future__ import annotations

from pathlib import Path

import pytest

import nbtools
from nbtools.errors import NotFoundError
from nbtools.evals import flow
from nbtools.evals.job import EvalJob

REPO = Path(__file__).resolve().parents[2]


class _Result:
    def __init__(self):
        self.params: dict = {}

    def save(self, out):
        return out


class _Job:
    def wait(self, timeout=None):
        return None


@pytest.mark.parametrize("experiment", ["gke-b200-gemma3-1b.yaml", "gke-b200-verl.yaml"])
def test_a_models_evaluations_share_one_local_copy_and_a_reattach_copies_nothing(experiment, monkeypatch):
    path = REPO / "experiments" / experiment
    if not path.is_file():
        pytest.fail(f"{path} is gone: name another GKE experiment of that trainer here")
    cfg = nbtools.config.load(path, backend="gke")
    prepared: list[EvalJob] = []
    submitted: dict[str, EvalJob] = {}

    def attach(address, submission_id):
        if submission_id not in submitted:
            raise NotFoundError(f"no job {submission_id}")
        return _Job()

    def submit(self):
        submitted[self.submission_id] = self
        return _Job()

    monkeypatch.setattr(nbtools.jobs, "attach", attach)
    monkeypatch.setattr(EvalJob, "submit", submit)
    monkeypatch.setattr(EvalJob, "prepare", lambda self, cfg, **kw: prepared.append(self) or [])
    monkeypatch.setattr(flow, "collect", lambda job, save_path=None, **kw: _Result())

    flow.evaluate(cfg, "fine-tuned")
    flow.evaluate(cfg, "fine-tuned", n=4, temperature=1.0)
    flow.evaluate(cfg, "fine-tuned")  # re-run: re-attaches, the copy is there
    assert len(submitted) == 2 and len(prepared) == 2, [j.submission_id for j in prepared]
    copies = {j.local_copy for j in prepared}
    assert len(copies) == 1 and all(j.local_copy for j in prepared)  # one copy, the same destination
    dest = nbtools.evals.job.local_model_path(cfg, prepared[0].model_name, "fine-tuned")
    assert all(dest in j.entrypoint for j in prepared), [j.entrypoint for j in prepared]
    assert prepared[0].submission_id != prepared[1].submission_id  # still one job per decoding


class _Saved(_Result):
    """A result whose save writes its params, as EvalResult.save does into summary.json."""

    def save(self, out):
        import json

        out.mkdir(parents=True, exist_ok=True)
        (out / "summary.json").write_text(json.dumps({"params": self.params}))
        return out


@pytest.mark.parametrize("experiment,program", [("gke-b200-gemma3-1b.yaml", "examples/run_eval.py"),
                                                ("gke-b200-verl.yaml", "nbtools.evals.vllm_generate")])
def test_a_models_decodings_run_in_one_job_and_a_single_decoding_reattaches_to_it(experiment, program, monkeypatch,
                                                                                tmp_path):
    """07's ``evaluate(cfg, which, n=(1, 8))``: one job per model (one copy check; verl's program loads the model once
    for both decodings), each result read from its own save path and score block; ``nbtools evaluate`` after 07 (one
    decoding) re-attaches to that job instead of submitting its own."""
    cfg = nbtools.config.load(REPO / "experiments" / experiment, backend="gke")
    prepared, submitted, attached, collected = [], {}, [], []

    def attach(address, submission_id):
        if submission_id not in submitted:
            raise NotFoundError(f"no job {submission_id}")
        attached.append(submission_id)
        return _Job()

    def submit(self):
        submitted[self.submission_id] = self
        return _Job()

    def collect(job, save_path=None, **kw):
        collected.append((str(save_path), kw))
        return _Saved()

    monkeypatch.setattr(nbtools.jobs, "attach", attach)
    monkeypatch.setattr(EvalJob, "submit", submit)
    monkeypatch.setattr(EvalJob, "prepare", lambda self, cfg, **kw: prepared.append(self) or [])
    monkeypatch.setattr(flow, "collect", collect)
    monkeypatch.setattr(flow, "eval_dir", lambda cfg: tmp_path / "eval")
    monkeypatch.setattr(flow, "_read_back", lambda urls: urls)  # the bucket is left out: read where the job wrote

    greedy, sampled = flow.evaluate(cfg, "fine-tuned", n=(1, 4))
    (job,) = submitted.values()
    assert len(prepared) == 1 and job.entrypoint.count(program) == (2 if program.endswith(".py") else 1), job.entrypoint
    assert [p.num_tests_per_prompt for p in job.parts] == [1, 4] and job.parts[1].temperature > 0
    if not program.endswith(".py"):  # one vLLM engine, both decodings
        assert "--n 1 4" in job.entrypoint and job.parts[0].save_path in job.entrypoint, job.entrypoint
    assert [c[0] for c in collected] == [str(cfg.url(p.save_path)) for p in job.parts]
    assert [c[1] for c in collected] == [{"n": 1, "temperature": 0.0}, {"n": 4, "temperature": job.parts[1].temperature}]
    assert greedy.params["job"] == sampled.params["job"] == job.submission_id
    assert (tmp_path / "eval" / "finetuned_greedy" / "summary.json").is_file()

    collected.clear()
    flow.evaluate(cfg, "fine-tuned", n=4)  # `nbtools evaluate --samples 4` after 07
    assert len(submitted) == 1 and len(prepared) == 1 and attached[-1] == job.submission_id
    assert collected == [(str(cfg.url(job.parts[1].save_path)), {"n": 4, "temperature": job.parts[1].temperature})]
    flow.evaluate(cfg, "fine-tuned", n=(1, 4))  # 07 again: the same job
    assert len(submitted) == 1 and attached[-1] == job.submission_id


def test_a_tuple_of_samples_names_each_decoding_once(monkeypatch):
    cfg = nbtools.config.load(REPO / "experiments" / "gke-b200-gemma3-1b.yaml", backend="gke")
    with pytest.raises(nbtools.errors.ConfigError, match=r"(?s)n=\(8, 8\).*fix: name each number of samples once"):
        flow.evaluate(cfg, "fine-tuned", n=(8, 8))


def test_one_jobs_results_are_copied_here_in_one_listing_and_one_read(tmp_path, monkeypatch):
    """The save paths of one job are siblings: their results come here with one listing and one read of their parent
    (on a cluster whose storage only it sees, each is a Ray job), only the result files of those save paths."""
    import fsspec

    from nbtools import storage

    monkeypatch.setenv("NBTOOLS_CACHE_DIR", str(tmp_path / "cache"))
    fs = fsspec.filesystem("memory")
    root = f"/evalone-{tmp_path.name}/eval"
    for name in ("math500_ft-greedy", "math500_ft-sampled8", "math500_other"):
        fs.pipe(f"{root}/{name}/evaluation_data.json", name.encode())
        fs.pipe(f"{root}/{name}/config.json", b"{}")
    fs.pipe(f"{root}/math500_ft-greedy/big.bin", b"x")
    calls = {"find": 0, "get": 0}
    for verb in calls:
        real = getattr(type(fs), verb)

        def spy(self, *a, _verb=verb, _real=real, **kw):
            calls[_verb] += 1
            return _real(self, *a, **kw)

        monkeypatch.setattr(type(fs), verb, spy)
    urls = [f"memory://{root}/math500_ft-greedy", f"memory://{root}/math500_ft-sampled8"]
    local = [Path(p) for p in flow._read_back(urls)]
    assert [(p / "evaluation_data.json").read_text() for p in local] == ["math500_ft-greedy", "math500_ft-sampled8"]
    assert (local[0] / "config.json").is_file() and not (local[0] / "big.bin").exists()
    assert not (local[0].parent / "math500_other").exists() and calls == {"find": 1, "get": 1}, calls
    assert flow._read_back(urls[:1]) == urls[:1] and flow._read_back([str(tmp_path)] * 2) == [str(tmp_path)] * 2
    assert storage.is_remote(urls[0])
