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
    assert diagnose_log(ACTOR_DIED, events=oom_kill).cause == "host-oom"  # the kernel's OOM killer: RAM, not the GPU


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


# issue 27 item 2: an actor whose __init__ raised is the error it carries (Ray's ActorDiedError text, ray
# python/ray/exceptions.py; worker lines forwarded to the driver with Ray's "(Class pid=N, ip=A)" prefix)
_W = "(VllmGenerationWorker pid=2211, ip=10.8.0.12)"
VLLM_KV_CACHE = f"""{_W} Exception raised in creation task: The actor died because of an error raised in its creation \
task, ray::VllmGenerationWorker.__init__() (pid=2211, ip=10.8.0.12, actor_id=5dc662848f950df8d330eb8a01000000, \
repr=<nemo_rl.models.generation.vllm.vllm_worker.VllmGenerationWorker object at 0x7f0adb21f490>)
{_W}   File "/opt/nemo-rl/nemo_rl/models/generation/vllm/vllm_worker.py", line 387, in __init__
{_W}     self.llm = vllm.LLM(**llm_kwargs)
{_W}   File "/opt/nemo-rl/.venv/lib/python3.12/site-packages/vllm/v1/core/kv_cache_utils.py", line 528, in \
check_enough_kv_cache_memory
{_W}     raise ValueError("No available memory for the cache blocks. "
{_W} ValueError: No available memory for the cache blocks. Try increasing `gpu_memory_utilization` when initializing \
the engine.
Traceback (most recent call last):
  File "/opt/nemo-rl/examples/run_grpo.py", line 251, in <module>
    main()
ray.exceptions.ActorDiedError: The actor died because of an error raised in its creation task, \
ray::VllmGenerationWorker.__init__() (pid=2211, ip=10.8.0.12, actor_id=5dc662848f950df8d330eb8a01000000)"""
GATED = """Traceback (most recent call last):
  File "/opt/nemo-rl/examples/run_grpo.py", line 251, in <module>
    main()
ray.exceptions.ActorDiedError: The actor died because of an error raised in its creation task, \
ray::DTensorPolicyWorkerV2.__init__() (pid=3120, ip=10.8.0.13, actor_id=28507c63735529c3265367b501000000)
  File "/opt/nemo-rl/nemo_rl/models/policy/dtensor_policy_worker_v2.py", line 172, in __init__
    model_config = AutoConfig.from_pretrained(model_name, trust_remote_code=True)
OSError: You are trying to access a gated repo.
Make sure to have access to it at https://huggingface.co/meta-llama/Llama-3.1-8B-Instruct.
401 Client Error. (Request ID: Root=1-6745a1b2-3c4d5e6f7a8b9c0d1e2f3a4b)
Cannot access gated repo for url https://huggingface.co/meta-llama/Llama-3.1-8B-Instruct/resolve/main/config.json.
Access to model meta-llama/Llama-3.1-8B-Instruct is restricted. You must have access to it and be authenticated to \
access it. Please log in."""
# Ray's memory monitor (host RAM): "N worker(s) were killed ..." from Ray 2.55, "Task was killed ..." before
# (ray-project/ray doc/source/ray-core/scheduling/ray-oom-prevention.rst)
HOST_OOM_NEW = ("ray.exceptions.OutOfMemoryError: 2 worker(s) were killed due to the node running low on memory. Memory "
                "on the node (IP: 10.8.0.12, ID: 4cb25bc084ae) was 1900.62GB / 2000.00GB (0.950311), which exceeds the "
                "memory usage threshold of 0.950000.")
HOST_OOM_OLD = ("ray.exceptions.OutOfMemoryError: Task was killed due to the node running low on memory.\nMemory on the "
                "node (IP: 10.8.0.12, ID: e5d953ef03e5) where the task (task ID: 43534ce9375f, name=allocate_memory, "
                "pid=11362, memory used=1.25GB) was running was 7.12GB / 7.47GB (0.953), which exceeds the memory usage "
                "threshold of 0.95.")


def test_an_actor_whose_init_raised_is_the_error_it_carries_never_a_lost_node():
    kv = diagnose_log(VLLM_KV_CACHE)
    assert (kv.cause, kv.retry) == ("oom", False), kv
    assert "No available memory for the cache blocks" in kv.evidence and "gpu_memory_utilization" in kv.fix
    gated = diagnose_log(GATED)
    assert (gated.cause, gated.retry) == ("user-error", False), gated
    assert "OSError: You are trying to access a gated repo." in gated.evidence
    assert gated.frame == "/opt/nemo-rl/nemo_rl/models/policy/dtensor_policy_worker_v2.py:172 in __init__"
    assert "licence" in gated.fix and "hf_token" in gated.fix
    # a plain error in __init__ is the user's error at its frame
    plain = GATED.split("OSError")[0] + "KeyError: 'generation'"
    assert (diagnose_log(plain).cause, diagnose_log(plain).evidence.count("KeyError: 'generation'")) == ("user-error", 1)
    # a node that died while the actor was being created is still a lost node
    assert diagnose_log(GATED + "\n" + NODE_DEAD).cause == "lost-node"


@pytest.mark.parametrize("log", [HOST_OOM_NEW, HOST_OOM_OLD])
def test_rays_memory_monitor_is_host_oom_with_its_own_fix(log):
    d = diagnose_log(log + "\n" + ACTOR_DIED.split("The actor died because its node")[0])
    assert (d.cause, d.retry) == ("host-oom", False), d
    assert "host memory" in d.fix and d.fix != diagnose_log(OOM).fix


def test_kubelets_memory_eviction_is_host_oom_and_its_shutdown_preemption():
    evict = ["Warning TerminationByKubelet: Pod/gemma-ray-gpu-workers-x7k2p: The node was low on resource: memory. "
             "Threshold quantity: 100Mi, available: 92Ki. (pod condition DisruptionTarget)"]
    assert diagnose_log(ACTOR_DIED, events=evict).cause == "host-oom"
    assert diagnose_log(ACTOR_DIED, events=SHUTDOWN_EVENTS[:1]).cause == "preempted"


class _Counting:
    """A compiled pattern that records how many characters each search is given."""

    def __init__(self, pattern, seen):
        self.pattern, self.seen = pattern, seen

    def search(self, text, *a):
        self.seen.append(len(text))
        return self.pattern.search(text, *a)


@pytest.mark.parametrize("size", [1 << 20, 8 << 20])
def test_one_huge_line_costs_a_bounded_search(monkeypatch, size):
    from nbtools.launch import _diagnose

    seen: list[int] = []
    for name in ("_LOG_RULES", "_EVENT_RULES"):
        monkeypatch.setattr(_diagnose, name, [(c, _Counting(p, seen)) for c, p in getattr(_diagnose, name)])
    # the backtracking shape of issue 31: "gloo" over and over with no "Connection ... by peer" after it
    line = ("gloo " * (size // 5))[:size]
    d = diagnose_log(f"step 3\n{line}\nRuntimeError: gloo Connection reset by peer", events=[line])
    assert d.cause == "lost-node" and "gloo Connection reset by peer" in d.evidence
    assert seen and max(seen) <= _diagnose.LINE_CHARS + 64, max(seen)
    assert len(d.evidence) <= 2000
    # what the line says at its start and its end still decides
    head = "torch.OutOfMemoryError: CUDA out of memory. " + "x" * size
    assert diagnose_log(head).cause == "oom"
    assert diagnose_log("x" * size + " ncclRemoteError: remote process exited").cause == "nccl"


# issue 27 item 2: a reward function raised inside a Ray actor. The driver's traceback ends in the error the task
# carried (Ray's ``RayTaskError(KeyError): ray::Class.method() (pid=…)`` header, then the actor's frames, then the
# ``KeyError``), and Ray then reports the other actors the failed driver took down, "The actor died unexpectedly
# before finishing this task" with no word on why (ray python/ray/exceptions.py ActorDiedError; the GCS's "The actor
# is dead because its worker process has died. Worker exit type: …" text; the "Unhandled error (suppress with
# 'RAY_IGNORE_UNHANDLED_ERRORS=1')" line of ray/_private/worker.py; the "(raylet) A worker died or was killed" line).
USER_THEN_DEAD_ACTORS = """Traceback (most recent call last):
  File "/opt/nemo-rl/examples/run_grpo.py", line 251, in <module>
    main()
  File "/opt/nemo-rl/nemo_rl/algorithms/grpo.py", line 1012, in grpo_train
    env_outputs = run_multi_turn_rollout(policy_generation, batch, task_to_env)
  File "/usr/local/lib/python3.12/site-packages/ray/_private/worker.py", line 929, in get_objects
    raise value.as_instanceof_cause()
ray.exceptions.RayTaskError(KeyError): ray::MathEnvironment.step() (pid=3305, ip=10.8.0.12, \
actor_id=9c3f2e1d0b7a6958a4b3c2d101000000, repr=<nemo_rl.environments.math_environment.MathEnvironment object at \
0x7f3a2c1b0d90>)
  File "/opt/nemo-rl/nemo_rl/environments/math_environment.py", line 188, in step
    results = [self.reward_fn(response, meta) for response, meta in zip(responses, metadata)]
  File "/data/rewards/my_reward.py", line 12, in score
    return float(answers[key])
KeyError: 'answer'
2026-11-25 21:14:03,512\tERROR worker.py:433 -- Unhandled error (suppress with 'RAY_IGNORE_UNHANDLED_ERRORS=1'): \
The actor died unexpectedly before finishing this task.
\tclass_name: DTensorPolicyWorkerV2
\tactor_id: 28507c63735529c3265367b501000000
\tpid: 159258
\tip: 10.8.0.12
The actor is dead because its worker process has died. Worker exit type: SYSTEM_ERROR Worker exit detail: Worker \
unexpectedly exits with a connection error code 2. End of file.
(raylet) A worker died or was killed while executing a task by an unexpected system error. To troubleshoot the \
problem, check the logs for the dead worker. Worker PID: 159258 Worker exit type: SYSTEM_ERROR"""


def test_the_users_traceback_outranks_a_dead_actor_with_no_word_on_why():
    d = diagnose_log(USER_THEN_DEAD_ACTORS)
    assert (d.cause, d.retry) == ("user-error", False), d
    assert d.evidence.startswith("KeyError: 'answer'") and d.frame == "/data/rewards/my_reward.py:12 in score"
    assert "retry fails the same way" in d.fix
    # the same error forwarded from the worker (Ray's "(Class pid=N, ip=A)" prefix), then the driver's own
    # traceback, which carries only the dead actor: the forwarded error decides
    w = "(DTensorPolicyWorkerV2 pid=159258, ip=10.8.0.12)"
    forwarded = "\n".join(f"{w} {ln}" for ln in USER.splitlines()) + "\n" + ACTOR_DIED.split("The actor died because")[0]
    d = diagnose_log(forwarded)
    assert (d.cause, d.frame) == ("user-error", "/data/rewards/my_reward.py:12 in score"), d
    # with no error of its own anywhere, the dead actor is still a lost worker (retry), as before
    dead_only = ACTOR_DIED.split("The actor died because")[0]
    assert (diagnose_log(dead_only).cause, diagnose_log(dead_only).retry) == ("lost-node", True)
    # and a node Ray lost still explains the traceback that follows it
    assert diagnose_log(USER_THEN_DEAD_ACTORS + "\n" + NODE_DEAD).cause == "lost-node"


def test_causes_are_a_string_enum_whose_words_the_json_keeps():
    from nbtools.launch import Cause

    assert [c.value for c in Cause] == ["preempted", "lost-node", "oom", "host-oom", "nccl", "user-error", "stopped",
                                        "unknown", "succeeded", "running", "unhealthy", "hang", "deadlock"]
    assert {c for c in Cause if c.retryable} == {Cause.PREEMPTED, Cause.LOST_NODE, Cause.NCCL}
    d = diagnose_log(OOM)
    assert d.cause is Cause.OOM and d.cause == "oom" and f"{d.cause}" == "oom" and not d.retry
    assert type(d.to_dict()["cause"]) is str and json.loads(json.dumps(d.to_dict()))["cause"] == "oom"
    assert Diagnosis("preempted", "e", "f").retry and Diagnosis("preempted", "e", "f").cause is Cause.PREEMPTED
    with pytest.raises(ValueError, match="'tired' is not a valid Cause"):
        Diagnosis("tired", "e", "f")
