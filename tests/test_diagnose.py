"""Diagnosis of a finished job from its log tail, Ray's status and Kubernetes events (issue #16 item 1), and the
``nbtools diagnose --log FILE [--json]`` command. The log lines are the real messages: Ray's ActorDiedError and
node-death texts (ray/exceptions.py and the GCS's strings), torch's OutOfMemoryError, NCCL's errors as
torch.distributed prints them, and kubelet's graceful-node-shutdown event."""

from __future__ import annotations

import json

import pytest

from nbtools.launch import Diagnosis, diagnose_log

NODE_DEAD = (
    "(raylet) The node with node id: 2e4f0c9a1b7d and address: 10.8.0.12 and node name: 10.8.0.12 has been marked "
    "dead because the detector has missed too many heartbeats from it. This can happen when a \t(1) raylet crashes "
    "unexpectedly (OOM, etc.) \n\t(2) raylet has lagging heartbeats due to slow network or busy workload.")
ACTOR_DIED = """Traceback (most recent call last):
  File "/opt/nemo-rl/examples/run_grpo.py", line 251, in <module>
    main()
  File "/opt/nemo-rl/nemo_rl/algorithms/grpo.py", line 1012, in grpo_train
    train_results = policy.train(train_data, loss_fn)
ray.exceptions.ActorDiedError: The actor died unexpectedly before finishing this task.
\tclass_name: DTensorPolicyWorkerV2
\tactor_id: 28507c63735529c3265367b501000000
\tpid: 159258
\tip: 10.8.0.12
The actor died because its node has died. Node Id: 2e4f0c9a1b7d"""
PREEMPTED = ACTOR_DIED.replace("The actor died because its node has died. Node Id: 2e4f0c9a1b7d",
                               "Actor died by preemption.")
OOM = """Traceback (most recent call last):
  File "/opt/nemo-rl/nemo_rl/models/policy/dtensor_policy_worker_v2.py", line 655, in train
    loss.backward()
torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 7.82 GiB. GPU 3 has a total capacity of 178.35 GiB \
of which 5.12 GiB is free.
ray.exceptions.ActorDiedError: The actor died unexpectedly before finishing this task."""
NCCL = """torch.distributed.DistBackendError: NCCL error in: /pytorch/torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:3356, \
unhandled system error (run with NCCL_DEBUG=INFO for details), NCCL version 2.21.5
ncclSystemError: System call (e.g. socket, malloc) or external library call failed or device error."""
NCCL_REMOTE = ("[rank3]: torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:1970, remote process "
               "exited or there was a network error, NCCL version 2.19.3\nncclRemoteError: A call failed possibly due to "
               "a network error or a remote process exiting prematurely.")
USER = """Traceback (most recent call last):
  File "/opt/nemo-rl/examples/run_grpo.py", line 251, in <module>
    main()
  File "/data/rewards/my_reward.py", line 12, in score
    return float(answers[key])
KeyError: 'answer'"""
SHUTDOWN_EVENTS = [
    "Warning TerminationByKubelet: Pod/gemma-ray-gpu-workers-x7k2p: Pod was terminated in response to imminent node "
    "shutdown.",
    "Normal Killing: Pod/gemma-ray-gpu-workers-x7k2p: Stopping container ray-worker",
]


@pytest.mark.parametrize(("log", "status", "cause", "retry", "decided_by"), [
    (NODE_DEAD, "FAILED", "lost-node", True, "has been marked dead"),
    (ACTOR_DIED, "FAILED", "lost-node", True, "its node has died"),
    (PREEMPTED, "FAILED", "preempted", True, "Actor died by preemption."),
    (OOM, "FAILED", "oom", False, "torch.OutOfMemoryError: CUDA out of memory"),
    (NCCL, "FAILED", "nccl", True, "unhandled system error"),
    (NCCL_REMOTE, "FAILED", "nccl", True, "ncclRemoteError"),
    (USER, "FAILED", "user-error", False, "KeyError: 'answer'"),
    ("Training step 3 ...", "STOPPED", "stopped", False, "STOPPED"),
    ("Killed", "FAILED", "unknown", False, "Killed"),
    ("Training finished", "SUCCEEDED", "succeeded", False, "SUCCEEDED"),
])
def test_the_real_messages_decide_the_cause(log, status, cause, retry, decided_by):
    d = diagnose_log(log, status=status)
    assert (d.cause, d.retry) == (cause, retry), d
    assert decided_by in d.evidence and d.fix


def test_oom_wins_over_the_dead_actor_it_causes_and_ray_s_oom_word_in_heartbeats_is_not_oom():
    assert diagnose_log(OOM).cause == "oom"  # an OOM-killed worker also surfaces as ActorDiedError
    assert diagnose_log(NODE_DEAD).cause == "lost-node"  # "(OOM, etc.)" in Ray's heartbeat text is not an OOM


def test_user_error_names_the_last_frame_and_the_fix_says_a_retry_will_not_help():
    d = diagnose_log(USER)
    assert d.frame == "/data/rewards/my_reward.py:12 in score" and "at /data/rewards/my_reward.py:12" in d.evidence
    assert "retry fails the same way" in d.fix


def test_events_say_preempted_where_the_log_only_says_a_node_died():
    d = diagnose_log(ACTOR_DIED, events=SHUTDOWN_EVENTS)
    assert (d.cause, d.retry) == ("preempted", True)
    assert "TerminationByKubelet" in d.evidence and d.events == tuple(SHUTDOWN_EVENTS)
    assert diagnose_log("", status="STOPPED", events=SHUTDOWN_EVENTS).cause == "preempted"
    oom_kill = ["Warning OOMKilling: Node/gke-pool-1: Memory cgroup out of memory: Killed process 4121 (ray::DTensor)"]
    assert diagnose_log(ACTOR_DIED, events=oom_kill).cause == "oom"


def test_diagnosis_is_a_typed_result_with_json_and_html():
    d = diagnose_log(OOM, submission_id="run-1")
    assert isinstance(d, Diagnosis)
    data = d.to_dict()
    assert {"cause", "retry", "evidence", "fix"} <= set(data) and json.loads(json.dumps(data)) == data
    assert "oom" in d._repr_html_() and "run-1" in d._repr_html_() and str(d).startswith("run-1: oom (retry: no)")


@pytest.fixture
def cli_run(capfd, monkeypatch):
    """``nbtools ARGS`` in this process -> (exit status, stdout, stderr)."""
    from nbtools import cli

    monkeypatch.delenv("NBTOOLS_DEBUG", raising=False)

    def go(*argv):
        capfd.readouterr()
        code = cli.main([str(a) for a in argv])
        out, err = capfd.readouterr()
        assert "Traceback" not in out + err, err
        return code, out, err

    return go


def test_cli_diagnose_a_saved_log(tmp_path, cli_run):
    (tmp_path / "oom.log").write_text(OOM)
    (tmp_path / "node.log").write_text(PREEMPTED)
    rc, out, err = cli_run("diagnose", "--log", str(tmp_path / "oom.log"), "--json")
    data = json.loads(out)
    assert rc == 1 and data["cause"] == "oom" and data["retry"] is False and "CUDA out of memory" in data["evidence"]
    assert data["fix"].startswith("a retry fails the same way") and data["exit"] == 1
    rc, out, err = cli_run("diagnose", "--log", str(tmp_path / "node.log"))
    assert rc == 0 and out.startswith("preempted (retry: yes)") and "Actor died by preemption." in out
    rc, out, err = cli_run("diagnose", "--log", str(tmp_path / "missing.log"), "--json")
    assert rc == 1 and "expected a job log" in json.loads(out)["error"] and "nbtools jobs logs" in json.loads(out)["fix"]
    rc, out, err = cli_run("diagnose", "--json")
    assert rc == 1 and "pass SUBMISSION_ID" in json.loads(out)["fix"]
