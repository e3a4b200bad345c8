"""The ``ray`` backend on a Ray cluster whose run storage this machine cannot see (issue 40 item 5): tutorial 003's
shape (DGX Cloud Lepton: a dashboard address and ``/nemo-workspace``, no ``storage.url``).

The cluster is the simulated GKE's real local Ray head (tests/doubles/sim_gke.py) used as a plain Ray cluster: its
processes, and the jobs it runs, see the run's files at ``sim.data_dir`` through a bind mount in their own mount
namespace, while in this process that directory is empty (sim_files.py). So every read that works here went through
the cluster (``nbtools._rayfs``: short Ray jobs submitted to the dashboard address); a library that opened the path
locally would find nothing. The gcsfuse stand-in is off: there is no bucket to fall back on.
"""

from __future__ import annotations

import os
import uuid

import pytest
from sim_files import write_ray_experiment

import nbtools
from nbtools import storage
from nbtools._rayfs import RayJobsFileSystem

pytestmark = pytest.mark.ray

SIM_GKE = {"mirror": False, "provisioned": False}


@pytest.fixture(scope="module")
def ray_cfg_hidden(sim_gke, tmp_path_factory):
    """The sim experiment as ``backend: ray`` at the sim head's dashboard, storage only the cluster sees."""
    path = write_ray_experiment(sim_gke, tmp_path_factory.mktemp("ray-exp") / "ray-hidden.yaml")
    with sim_gke.activated():
        yield nbtools.config.load(path, backend="ray"), path


def _on_cluster(cfg, script: str) -> None:
    """Run ``sh -c script`` as a job on the cluster (where the run's files are) and wait for it."""
    job = nbtools.jobs.submit(cfg.dashboard_url, entrypoint=f"sh -c '{script}'", submission_id=f"t-{uuid.uuid4().hex[:8]}")
    job.wait(timeout=300)


def test_reads_go_through_the_cluster_because_this_machine_cannot_see_the_files(sim_gke, ray_cfg_hidden, monkeypatch):
    cfg, _ = ray_cfg_hidden
    base = f"{sim_gke.data_dir}/probe-{uuid.uuid4().hex[:6]}"
    _on_cluster(cfg, f"mkdir -p {base}/sub && printf hello > {base}/a.txt && printf 0123456789 > {base}/sub/b.bin")
    assert not os.path.exists(base), "the run's storage must be invisible here, or this test proves nothing"
    url = cfg.url(base)
    assert url.startswith("ray+http://127.0.0.1:") and url.endswith(base[len(str(sim_gke.data_dir)):])
    fs, _ = storage.filesystem(url)
    monkeypatch.setattr(fs, "cache_seconds", 120)  # job counts, not expiry: a loaded CI must not expire answers mid-test
    before = fs.jobs_run
    assert [(e.name, e.is_dir) for e in storage.ls(url)] == [("a.txt", False), ("sub", True)]
    assert storage.read_text(storage.join(url, "a.txt")) == "hello"
    assert storage.read_bytes(storage.join(url, "sub", "b.bin"), 2, 5) == b"234"
    assert storage.info(storage.join(url, "missing")) is None
    with pytest.raises(nbtools.errors.NotFoundError, match="found nothing there"):
        storage.read_bytes(storage.join(url, "missing"))
    mirrored = storage.mirror(url)  # the tree and its small files were read ahead with the first listing: no job
    assert (mirrored / "sub" / "b.bin").read_bytes() == b"0123456789" and (mirrored / "a.txt").read_text() == "hello"
    # ls (a.txt, sub/ and b.bin ahead), the range; the misses are missing from the kept listing, the find is put
    # together from the kept listings and the copy's bytes were read ahead (5 jobs before: 2 misses and the find)
    assert fs.jobs_run - before == 2, fs.jobs_run - before
    again = fs.jobs_run
    storage.mirror(url)  # asked again at once: the kept listing and files (nbtools._rayfs), no job
    assert fs.jobs_run == again
    fs.forget()  # as when its answers are older than cache_seconds
    storage.mirror(url)  # nothing changed: only the listing
    assert fs.jobs_run - again == 1
    fs.forget()
    storage.evict(url)  # no copies here: the find's job brings the tree's small files with it, no second job
    assert (storage.mirror(url) / "sub" / "b.bin").read_bytes() == b"0123456789"
    assert fs.jobs_run - again == 2, fs.jobs_run - again
    assert not any(j.startswith("nbtools-read-") for j in nbtools.jobs.list_jobs(cfg.dashboard_url).get("id", [])), \
        "read jobs are deleted once read"


def test_silent_resume_lint_lists_the_checkpoints_through_the_cluster(sim_gke, ray_cfg_hidden):
    cfg, _ = ray_cfg_hidden
    _on_cluster(cfg, f"mkdir -p {cfg.checkpoint_dir}/step_3 {cfg.checkpoint_dir}/step_6")
    try:
        found = {f.rule: f for f in nbtools.launch.lint(cfg, cluster_gpus=8).findings}
        assert "silently resume from it" in found["existing-checkpoints"].message
        assert "step_6" in found["existing-checkpoints"].message
    finally:
        _on_cluster(cfg, f"rm -rf {cfg.checkpoint_dir}")


def test_a_storage_url_this_machine_reads_stays_the_fast_path(sim_gke, ray_cfg_hidden, tmp_path):
    _, path = ray_cfg_hidden
    (tmp_path / "x").write_text("local")
    cfg = nbtools.config.load(path, backend="ray", overrides={"storage.url": str(tmp_path)})
    assert cfg.url(f"{sim_gke.data_dir}/x") == str(tmp_path / "x")
    assert storage.read_text(cfg.url(f"{sim_gke.data_dir}/x")) == "local"



def test_a_confirmed_wipe_deletes_the_runs_results_through_the_cluster(sim_gke, ray_cfg_hidden):
    """Notebook 09's wipe on a cluster whose disk this machine cannot see: one short job deletes the directories there."""
    cfg, _ = ray_cfg_hidden
    other = f"{sim_gke.data_dir}/other-run-{uuid.uuid4().hex[:6]}"
    _on_cluster(cfg, f"mkdir -p {cfg.checkpoint_dir}/step_3 {other} && touch {cfg.checkpoint_dir}/step_3/w {other}/keep")
    fs, _ = storage.filesystem(cfg.url(cfg.checkpoint_dir))
    before = fs.jobs_run
    done = nbtools.backends.get(cfg).wipe(confirm=cfg.name)
    assert list(done.actions["action"]) == ["removed", "absent"] and done.stopped, done.actions
    assert fs.jobs_run - before == 1, fs.jobs_run - before  # checkpoints and logs in one job (one each before)
    assert storage.info(cfg.url(cfg.checkpoint_dir)) is None and storage.info(cfg.url(f"{other}/keep")) is not None
    assert list(nbtools.backends.get(cfg).wipe(confirm=cfg.name).actions["action"]) == ["absent", "absent"]


def test_answers_are_kept_briefly_and_never_past_a_write_an_error_or_a_job(sim_gke, ray_cfg_hidden, monkeypatch):
    """A cell that asks the same thing again (05's views list ``exp_001`` a dozen times) costs one read job, not one
    each; yet a read never returns what the process's own write, delete or submitted job has changed, nor keeps a
    "not there yet"."""
    cfg, _ = ray_cfg_hidden
    base = f"{sim_gke.data_dir}/kept-{uuid.uuid4().hex[:6]}"
    _on_cluster(cfg, f"mkdir -p {base} && printf one > {base}/a.txt")
    url = cfg.url(base)
    a, b = storage.join(url, "a.txt"), storage.join(url, "b.txt")
    fs, _ = storage.filesystem(url)
    monkeypatch.setattr(fs, "cache_seconds", 120)  # job counts, not expiry: a loaded CI must not expire answers mid-test
    start = fs.jobs_run
    for _ in range(3):
        assert [e.name for e in storage.ls(url)] == ["a.txt"] and storage.read_text(a) == "one"
    assert fs.jobs_run - start == 1, fs.jobs_run - start  # one listing, its small file read ahead with it
    assert storage.info(a) is not None and storage.read_bytes(a, 0, 2) == b"on"  # a file's stat, a range: asked
    assert fs.jobs_run - start == 3, fs.jobs_run - start

    assert storage.info(b) is None  # not there: missing from the listing kept moments ago (no error is kept)
    _on_cluster(cfg, f"printf two > {base}/b.txt && printf changed > {base}/a.txt")  # a job changes the files
    gone, asked = storage.join(url, "not-yet"), fs.jobs_run  # 03: lint and attempts ask for logs/... before the run
    assert storage.info(storage.join(gone, "x")) is None  # a miss lists the nearest directory that is there ...
    assert storage.info(gone) is None and storage.info(storage.join(gone, "y", "z.json")) is None  # ... so no job
    assert fs.jobs_run - asked == 1, fs.jobs_run - asked
    assert storage.read_text(b) == "two" and storage.read_text(a) == "changed"
    assert sorted(e.name for e in storage.ls(url)) == ["a.txt", "b.txt"]

    storage.write_text(a, "mine")  # this filesystem's own write: what it wrote is what a read returns, no job
    written = fs.jobs_run
    assert storage.read_text(a) == "mine" and fs.jobs_run == written
    storage.remove(b)
    assert [e.name for e in storage.ls(url)] == ["a.txt"] and storage.info(b) is None


def test_a_stat_or_listing_reads_the_directories_below_ahead_in_the_same_job(sim_gke, ray_cfg_hidden, monkeypatch):
    """05's and 06's readers walk down a tree one call at a time (``info(logs)``, ``ls(logs)``, ``ls(exp_001)``,
    ``info(exp_001/tensorboard)``, a small file there; 06: ``info(step_N/policy/weights)``, ``ls`` of its ``model``):
    the first job reads five levels and their small files ahead, so the walk is one job, not seven; a listing keeps
    the directory's own stat; a file's stat still asks the cluster (a pinned read's check comes with its read), and a
    job's changes are never hidden behind what was read ahead."""
    cfg, _ = ray_cfg_hidden
    base = f"{sim_gke.data_dir}/ahead-{uuid.uuid4().hex[:6]}"
    _on_cluster(cfg, f"mkdir -p {base}/exp_001/tensorboard/17958 && printf x > {base}/exp_001/a.jsonl && "
                     f"printf ev > {base}/exp_001/tensorboard/17958/events.out")
    url = cfg.url(base)
    exp = storage.join(url, "exp_001")
    deep = storage.join(exp, "tensorboard", "17958")
    fs, _ = storage.filesystem(url)
    monkeypatch.setattr(fs, "cache_seconds", 120)  # job counts, not expiry: a loaded CI must not expire answers mid-test
    start = fs.jobs_run
    assert storage.info(url).is_dir
    assert [e.name for e in storage.ls(url)] == ["exp_001"]
    assert [(e.name, e.is_dir) for e in storage.ls(exp)] == [("a.jsonl", False), ("tensorboard", True)]
    assert storage.info(storage.join(exp, "tensorboard")).is_dir
    assert storage.read_text(storage.join(exp, "a.jsonl")) == "x"  # a small file: read ahead too
    assert storage.info(deep).is_dir and [e.name for e in storage.ls(deep)] == ["events.out"]  # 4 levels down
    assert storage.read_text(storage.join(deep, "events.out")) == "ev"
    assert fs.jobs_run - start == 1, fs.jobs_run - start
    a = storage.join(exp, "a.jsonl")
    version = next(e.version for e in storage.ls(exp) if e.name == "a.jsonl")  # what a pinned reader holds
    assert storage.info(a).size == 1  # a file's stat: asked
    # a pinned byte range (the trajectory readers'): asked, its version check in the same job (2 jobs before)
    assert storage.read_bytes(a, 0, 1, version=version) == b"x"
    assert fs.jobs_run - start == 3, fs.jobs_run - start
    # rewritten behind this filesystem's back (another instance here, a trainer on the cluster there): the check's
    # stat is taken after the read, never an older kept one, so the pinned read is refused
    RayJobsFileSystem(cfg.dashboard_url, cache_seconds=10.5).pipe_file(fs._strip_protocol(a), b"y")
    with pytest.raises(storage.StaleVersion):
        storage.read_bytes(a, 0, 1, version=version)
    _on_cluster(cfg, f"rm -rf {base}/exp_001/tensorboard")
    listed = fs.jobs_run
    assert storage.info(a).size == 1  # a file's stat reads its directory ahead (07: then a find of it)
    assert [e.name for e in storage.ls(exp)] == ["a.jsonl"] and storage.info(storage.join(exp, "tensorboard")) is None
    assert fs.jobs_run - listed == 1, fs.jobs_run - listed
    fs.forget()
    assert [e.name for e in storage.ls(exp)] == ["a.jsonl"] and storage.info(exp).is_dir  # its own stat came with it
    assert fs.jobs_run - listed == 2, fs.jobs_run - listed
