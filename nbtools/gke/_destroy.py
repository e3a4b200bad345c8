"""The teardown steps: compute first (RayCluster, GPU pool, cluster), then networks, identity, and data last.

Why this order and not the provisioning plan reversed: reversed, the bucket came before the GPU pool, and a bucket
with any run in it is not empty, so GCS refused, the plan stopped and the B200 nodes kept billing. Here the RayCluster
goes first (its pods hold the data PVC, whose protection finalizer otherwise hangs a delete), then the GPU pool and
the cluster (which takes every in-cluster object with it), then what only costs quota, then IAM, and the bucket last:
deleted only when empty, unless the user names it to delete it with its contents. Every check is a ``list`` with a
filter, which prints nothing when a resource is gone and fails (proving nothing) when gcloud cannot answer.
"""

from __future__ import annotations

from nbtools.config import Experiment
from nbtools.gke._step import Step
from nbtools.gke._steps import context_name, wi_member

__all__ = ["destroy_steps"]


def _gone(name: str, what: str, command: tuple[str, ...], check: tuple[str, ...], **kw) -> Step:
    return Step(name, what, command, check=check, absent=True, **kw)


def destroy_steps(cfg: Experiment, provision: list[Step], *, delete_bucket: bool = False) -> list[Step]:
    """The destroy plan's steps for ``cfg``; ``provision`` is the provisioning plan (its in-cluster step names)."""
    g, c, s = cfg.gcp, cfg.cluster, cfg.storage
    P, loc, region, ctx = f"--project={g.project}", f"--location={g.region}", f"--region={g.region}", context_name(cfg)
    pre = c.networks
    kube = ("kubectl", f"--context={ctx}", f"--namespace={c.namespace}")
    in_cluster = tuple(x.name for x in provision
                       if (x.command[0] in ("kubectl", "helm", "bash") or x.name == "gpu-pool") and not x.name.startswith("verl-"))
    steps = [_gone(
        "raycluster", f"RayCluster {c.name}: its pods go first, so nothing holds the data PVC or the GPUs",
        (*kube, "delete", f"rayclusters.ray.io/{c.name}", "--ignore-not-found", "--wait=true", "--timeout=10m"),
        (*kube, "get", f"rayclusters.ray.io/{c.name}", "--ignore-not-found", "-o", "name"),
        within="cluster",
    )]
    if c.mode == "standard":
        steps.append(_gone(
            "gpu-pool", f"GPU node pool {c.node_pool} ({c.worker_replicas} x {c.machine_type}): the billing stops here",
            ("gcloud", "container", "node-pools", "delete", c.node_pool, P, f"--cluster={c.name}", loc, "--quiet"),
            ("gcloud", "container", "node-pools", "list", P, f"--cluster={c.name}", loc, f"--filter=name={c.node_pool}",
             "--format=value(name)"),
            within="cluster",
        ))
    steps.append(_gone(
        "cluster", f"GKE cluster {c.name} (with every in-cluster object: Secrets, PV/PVC, KSA, installers)",
        ("gcloud", "container", "clusters", "delete", c.name, P, loc, "--quiet"),
        ("gcloud", "container", "clusters", "list", P, loc, f"--filter=name={c.name}", "--format=value(name)"),
        invalidates=in_cluster,
    ))
    steps.append(_gone(
        "credentials", f"kubeconfig context {ctx} (kept while the cluster is still there)",
        ("kubectl", "config", "delete-context", ctx),
        ("kubectl", "config", "get-contexts", "-o", "name"),
        expect=(ctx,), after=("cluster",),
    ))
    compute = ("gpu-pool", "cluster") if c.mode == "standard" else ("cluster",)
    fw = f"{pre}-gvnic-internal"
    steps.append(_gone(
        "gvnic-firewall", f"firewall rule {fw}",
        ("gcloud", "compute", "firewall-rules", "delete", fw, P, "--quiet"),
        ("gcloud", "compute", "firewall-rules", "list", P, f"--filter=name={fw}", "--format=value(name)"),
    ))

    def subnet(step: str, sub: str) -> Step:
        return _gone(
            step, f"subnet {pre}-{sub} (free once no node NIC uses it)",
            ("gcloud", "compute", "networks", "subnets", "delete", f"{pre}-{sub}", P, region, "--quiet"),
            ("gcloud", "compute", "networks", "subnets", "list", P, f"--regions={g.region}", f"--filter=name={pre}-{sub}",
             "--format=value(name)"),
            after=compute,
        )

    def network(step: str, after: tuple[str, ...]) -> Step:
        return _gone(
            step, f"VPC {pre}-{step}",
            ("gcloud", "compute", "networks", "delete", f"{pre}-{step}", P, "--quiet"),
            ("gcloud", "compute", "networks", "list", P, f"--filter=name={pre}-{step}", "--format=value(name)"),
            after=after,
        )

    rdma = [subnet(f"rdma-subnet-{i}", f"rdma-sub-{i}") for i in range(8)]
    steps += rdma
    steps.append(network("rdma-net", tuple(x.name for x in rdma)))
    steps.append(subnet("gvnic-subnet", "gvnic-sub"))
    steps.append(network("gvnic-net", ("gvnic-subnet", "gvnic-firewall")))
    if g.service_account:
        ksa_member = f"serviceAccount:{g.project}.svc.id.goog[{c.namespace}/{c.ksa}]"
        steps.append(_gone(
            "wi-impersonation", f"IAM binding: KSA {c.ksa} may act as {g.service_account}",
            ("gcloud", "iam", "service-accounts", "remove-iam-policy-binding", g.service_account, P,
             "--role=roles/iam.workloadIdentityUser", f"--member={ksa_member}"),
            ("gcloud", "iam", "service-accounts", "get-iam-policy", g.service_account, P, "--format=json"),
            expect=(ksa_member,),
        ))
    if s.kind == "gcsfuse" and s.bucket:
        url = f"gs://{s.bucket}"
        bucket_check = ("gcloud", "storage", "buckets", "list", P, f"--filter=name={s.bucket}", "--format=value(name)")
        member = wi_member(cfg)
        steps.append(_gone(
            "bucket-iam", f"IAM binding: the pods' identity on {url}",
            ("gcloud", "storage", "buckets", "remove-iam-policy-binding", url, P, f"--member={member}",
             "--role=roles/storage.objectUser"),
            ("gcloud", "storage", "buckets", "get-iam-policy", url, P, "--format=json"),
            expect=(member,), within="bucket",
        ))
        if delete_bucket:
            steps.append(_gone(
                "bucket", f"bucket {url} WITH ITS CONTENTS (checkpoints, logs, HF cache): asked for by name",
                ("gcloud", "storage", "rm", "--recursive", f"{url}/", P), bucket_check,
            ))
        else:
            steps.append(_gone(
                "bucket", f"bucket {url}, only if empty: GCS refuses a bucket that holds objects, and they are kept",
                ("gcloud", "storage", "buckets", "delete", url, P, "--quiet"), bucket_check, keep_if_refused=True,
                hint=f"it holds the run's objects; to delete it with them, name it: destroy_plan(cfg, delete_bucket="
                     f"{s.bucket!r}) or `nbtools plan EXPERIMENT.yaml --destroy --delete-bucket {s.bucket}`",
            ))
    return steps
