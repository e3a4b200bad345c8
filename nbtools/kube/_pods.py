"""What a pod's status says about its life: phase, why it ended, its containers' restarts, its conditions.

Why: a RayJob stays "Running" after its head pod restarted (kuberay#3860, #3903) and a worker evicted for memory
pressure is gone from Ray without a word in the job's log; both are written only in the pods' status (``kubectl
describe pod``: ``status.reason`` ``Evicted``, the ``DisruptionTarget`` condition, a container's ``restartCount`` and
``lastState.terminated``), which events may not carry (Kubernetes ``k8s.io/api/core/v1``: ``PodReasonEvicted``,
``DisruptionTarget``).

Example:
    >>> [p.line() for p in pod_states(api, "default", "ray.io/cluster=nbtools-b200")]
    ['Pod/nbtools-b200-head-x (head): Running, 1 restart (last: Error, exit 1, at 2026-11-28T01:02:03Z); ...']
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

__all__ = ["PodState", "pod_states"]


def _stamp(t: Any) -> float | None:
    return t.timestamp() if hasattr(t, "timestamp") else None


@dataclass(frozen=True)
class PodState:
    """One pod as its status describes it; ``conditions`` are ``(type, status, reason, message, since)`` rows."""

    name: str
    node_type: str  # the ray.io/node-type label: head | worker ("" without one)
    phase: str
    reason: str  # status.reason: Evicted, Terminated, ... ("" while nothing ended it)
    message: str
    node: str
    restarts: int  # over its containers
    last_exit: str  # the newest container termination: "Error, exit 1" ("" when none)
    restarted_at: float | None  # when that termination finished (Unix seconds)
    conditions: tuple[tuple[str, str, str, str, float | None], ...] = ()

    @property
    def disrupted(self) -> tuple[str, str, float | None] | None:
        """(reason, message, since) when the pod was evicted or is being terminated by the kubelet or the control
        plane (``status.reason`` Evicted, or the ``DisruptionTarget`` condition), else None."""
        for typ, status, reason, message, since in self.conditions:
            if typ == "DisruptionTarget" and status == "True":
                return reason or "DisruptionTarget", message, since
        if self.reason == "Evicted" or (self.phase == "Failed" and self.reason):
            return self.reason, self.message, None
        return None

    def line(self) -> str:
        """One readable line (the bundle's ``pods.txt``)."""
        bits = [f"Pod/{self.name}" + (f" ({self.node_type})" if self.node_type else "") + f": {self.phase}"]
        if self.reason:
            bits.append(f"{self.reason}: {self.message}".rstrip(": "))
        if self.restarts:
            bits.append(f"{self.restarts} restart(s) (last: {self.last_exit or '?'})")
        bits += [f"{t}={s}" + (f" ({r})" if r else "") for t, s, r, _, _ in self.conditions]
        return "; ".join(bits) + (f"; node {self.node}" if self.node else "")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def pod_states(api, namespace: str, selector: str) -> list[PodState]:
    """The status of every pod matching ``selector`` (sorted by name)."""
    from kubernetes import client

    out = []
    for pod in sorted(client.CoreV1Api(api).list_namespaced_pod(namespace, label_selector=selector).items,
                      key=lambda p: p.metadata.name):
        st = pod.status
        restarts, last, at = 0, "", None
        for cs in st.container_statuses or []:
            restarts += int(cs.restart_count or 0)
            term = cs.last_state.terminated if cs.last_state is not None else None
            if term is not None and (at is None or (_stamp(term.finished_at) or 0) >= at):
                at = _stamp(term.finished_at)
                last = f"{term.reason or 'Terminated'}, exit {term.exit_code}"
        conds = tuple((c.type, c.status, c.reason or "", c.message or "", _stamp(c.last_transition_time))
                      for c in st.conditions or [])
        out.append(PodState(pod.metadata.name, (pod.metadata.labels or {}).get("ray.io/node-type", ""), st.phase or "",
                            st.reason or "", st.message or "", (pod.spec.node_name if pod.spec else "") or "",
                            restarts, last, at, conds))
    return out
