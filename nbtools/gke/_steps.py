"""The provisioning steps for one experiment, in order (networks -> cluster -> pools -> in-cluster objects)."""

from __future__ import annotations

import re

from nbtools import manifests, trainers
from nbtools._escape import sh, sh_echo
from nbtools.config import GPU_TYPES, Experiment
from nbtools.gke._step import Step, _join
from nbtools.manifests import INSTALLER_REF_ANNOTATION, NCCL_INSTALLER_NAMESPACE, nccl_installer_url

__all__ = ["build_steps", "context_name", "wi_member", "nccl_installer_url", "source_steps",
           "KUBERAY_HELM_REPO", "PROJECT_NUMBER_LOOKUP"]

KUBERAY_HELM_REPO = "https://ray-project.github.io/kuberay-helm/"
KUBERAY_NAMESPACE = "kuberay-system"
def PROJECT_NUMBER_LOOKUP(project: str) -> tuple[str, ...]:  # noqa: N802 - reads like the variable it fills
    return ("gcloud", "projects", "describe", project, "--format=value(projectNumber)")


def context_name(cfg: Experiment) -> str:
    """The kubeconfig context `gcloud container clusters get-credentials` writes for this cluster."""
    return f"gke_{cfg.gcp.project}_{cfg.gcp.region}_{cfg.cluster.name}"


def wi_member(cfg: Experiment) -> str:
    """IAM member of the pods: the GSA when configured, else the KSA's Workload Identity principal."""
    if cfg.gcp.service_account:
        return f"serviceAccount:{cfg.gcp.service_account}"
    number = cfg.gcp.project_number or "${PROJECT_NUMBER}"
    return (
        f"principal://iam.googleapis.com/projects/{number}/locations/global/workloadIdentityPools/"
        f"{cfg.gcp.project}.svc.id.goog/subject/ns/{cfg.cluster.namespace}/sa/{cfg.cluster.ksa}"
    )


def _kubectl_objects_steps(cfg: Experiment, name: str, what: str, objs: list[dict], ctx: str) -> Step:
    refs = [f"{_resource(o)}/{o['metadata']['name']}" for o in objs]
    ns = {o["metadata"].get("namespace") for o in objs} - {None}
    ns_flag = (f"--namespace={ns.pop()}",) if len(ns) == 1 else ()
    return Step(
        name=name,
        what=what,
        command=("kubectl", f"--context={ctx}", "apply", "--server-side", "--field-manager=nbtools", "-f", "-"),
        stdin=manifests.to_yaml(objs),
        check=("kubectl", f"--context={ctx}", *ns_flag, "get", *refs, "-o", "name"),
        expect=tuple(r.split("/")[1] for r in refs),
        undo=("kubectl", f"--context={ctx}", *ns_flag, "delete", *refs, "--ignore-not-found"),
    )


_PLURALS = {
    "GKENetworkParamSet": "gkenetworkparamsets.networking.gke.io",
    "Network": "networks.networking.gke.io",
    "DaemonSet": "daemonsets.apps",
    "ServiceAccount": "serviceaccounts",
    "Secret": "secrets",
    "PersistentVolume": "persistentvolumes",
    "PersistentVolumeClaim": "persistentvolumeclaims",
    "RayCluster": "rayclusters.ray.io",
}


def _resource(obj: dict) -> str:
    return _PLURALS[obj["kind"]]


def build_steps(cfg: Experiment) -> list[Step]:
    """Every step of the provisioning plan for ``cfg`` (see ``nbtools.gke.plan``)."""
    g, c, s = cfg.gcp, cfg.cluster, cfg.storage
    P = f"--project={g.project}"
    region, ctx = f"--region={g.region}", context_name(cfg)
    loc = f"--location={g.region}"
    pre = c.networks
    steps: list[Step] = []

    apis = ["container.googleapis.com", "compute.googleapis.com", "storage.googleapis.com"]
    if s.kind == "lustre":
        apis.append("lustre.googleapis.com")
    steps.append(Step(
        "enable-apis", "enable the Google Cloud APIs the cluster and bucket need (never disabled by destroy)",
        ("gcloud", "services", "enable", *apis, P),
        check=("gcloud", "services", "list", "--enabled", P, "--format=value(config.name)"),
        expect=tuple(apis),
    ))

    def network(name: str, what: str, *extra: str) -> Step:  # the undo lives in nbtools.gke._destroy
        return Step(
            name, what, ("gcloud", "compute", "networks", "create", f"{pre}-{name}", P, "--subnet-mode=custom", *extra),
            check=("gcloud", "compute", "networks", "describe", f"{pre}-{name}", P, "--format=value(name)"),
            undo=("gcloud", "compute", "networks", "delete", f"{pre}-{name}", P, "--quiet"),
        )

    def subnet(step: str, sub: str, net: str, cidr: str) -> Step:
        return Step(
            step, f"subnet {cidr} of {pre}-{net}",
            ("gcloud", "compute", "networks", "subnets", "create", f"{pre}-{sub}", P, f"--network={pre}-{net}", region, f"--range={cidr}"),
            check=("gcloud", "compute", "networks", "subnets", "describe", f"{pre}-{sub}", P, region, "--format=value(name)"),
            undo=("gcloud", "compute", "networks", "subnets", "delete", f"{pre}-{sub}", P, region, "--quiet"),
        )

    steps.append(network("gvnic-net", f"VPC for the gVNIC NIC (eth1), MTU {c.gvnic_mtu}", f"--mtu={c.gvnic_mtu}"))
    steps.append(subnet("gvnic-subnet", "gvnic-sub", "gvnic-net", "192.168.0.0/24"))
    steps.append(Step(
        "gvnic-firewall", "allow internal traffic on the gVNIC VPC",
        ("gcloud", "compute", "firewall-rules", "create", f"{pre}-gvnic-internal", P, f"--network={pre}-gvnic-net",
         "--action=ALLOW", "--rules=tcp:0-65535,udp:0-65535,icmp", "--source-ranges=192.168.0.0/16"),
        check=("gcloud", "compute", "firewall-rules", "describe", f"{pre}-gvnic-internal", P, "--format=value(name)"),
        undo=("gcloud", "compute", "firewall-rules", "delete", f"{pre}-gvnic-internal", P, "--quiet"),
    ))
    steps.append(network("rdma-net", f"VPC with the RoCE network profile of {g.zone} for the 8 RDMA NICs",
                         f"--network-profile={g.zone}-vpc-roce"))
    steps += [subnet(f"rdma-subnet-{i}", f"rdma-sub-{i}", "rdma-net", f"192.168.{i + 1}.0/24") for i in range(8)]

    cluster_check = ("gcloud", "container", "clusters", "describe", c.name, P, loc, "--format=value(status)")
    cluster_undo = ("gcloud", "container", "clusters", "delete", c.name, P, loc, "--quiet")
    version = (f"--cluster-version={c.gke_version}",) if c.gke_version else ()
    if c.mode == "autopilot":
        ray = ("--enable-ray-operator",) if c.kuberay == "addon" else ()
        cmd = ("gcloud", "container", "clusters", "create-auto", c.name, P, loc, "--enable-multi-networking", *ray, *version)
    else:
        addons = ["GcsFuseCsiDriver"] + (["RayOperator"] if c.kuberay == "addon" else [])
        cmd = ("gcloud", "container", "clusters", "create", c.name, P, loc, f"--node-locations={g.zone}",
               "--enable-dataplane-v2", "--enable-ip-alias", "--enable-multi-networking",
               f"--addons={','.join(addons)}", f"--workload-pool={g.project}.svc.id.goog",
               f"--machine-type={c.head_machine_type}", "--num-nodes=1", *version)
    floor = GPU_TYPES[c.gpu_type].get("min_gke_version")
    shown = (f"GKE {c.gke_version}" if c.gke_version else "the release channel's default GKE version") + (
        f"; {c.gpu_type} needs >= {floor}" if floor else "")
    steps.append(Step("cluster", f"GKE {c.mode} cluster with multi-networking ({shown})", cmd, check=cluster_check,
                      undo=cluster_undo,
                      states=("RUNNING", "RECONCILING"),
                      hint=f"the cluster is not usable; read its status message (gcloud container clusters describe {c.name} "
                           f"{P} {loc}) and, if it stays in ERROR, delete it (the destroy plan) and re-apply"))
    # No check: a context of the same name may point at an older cluster's endpoint; get-credentials rewrites it.
    steps.append(Step(
        "credentials", f"kubeconfig context {ctx} (refreshed on every apply: a stale context is not a done one)",
        ("gcloud", "container", "clusters", "get-credentials", c.name, P, loc),
        undo=("kubectl", "config", "delete-context", ctx),
    ))
    if c.mode == "standard":
        if c.provisioning == "spot":
            capacity: tuple[str, ...] = ("--spot",)
        elif c.provisioning == "reservation":
            capacity = ("--reservation-affinity=specific", f"--reservation={c.reservation}")
        else:
            capacity = ()
        nics = [f"--additional-node-network=network={pre}-gvnic-net,subnetwork={pre}-gvnic-sub"] + [
            f"--additional-node-network=network={pre}-rdma-net,subnetwork={pre}-rdma-sub-{i}" for i in range(8)
        ]
        steps.append(Step(
            "gpu-pool", f"{c.worker_replicas} x {c.machine_type} ({c.provisioning}), 8 x {c.gpu_type}, gVNIC + 8 RDMA NICs",
            ("gcloud", "container", "node-pools", "create", c.node_pool, P, f"--cluster={c.name}", loc,
             f"--node-locations={g.zone}", f"--machine-type={c.machine_type}",
             f"--accelerator=type={c.gpu_type},count={c.gpus_per_node},gpu-driver-version={c.gpu_driver_version}",
             f"--num-nodes={c.worker_replicas}", *capacity, *nics),
            check=("gcloud", "container", "node-pools", "describe", c.node_pool, P, f"--cluster={c.name}", loc,
                   "--format=value(status)"),
            states=("RUNNING", "RECONCILING"),
            hint=(f"the pool exists but is not running (ERROR or RUNNING_WITH_ERROR: e.g. no {c.provisioning} capacity "
                  f"for {c.machine_type} in {g.zone}); read its status message (gcloud container node-pools describe "
                  f"{c.node_pool} {P} --cluster={c.name} {loc}), delete it (gcloud container node-pools delete "
                  f"{c.node_pool} {P} --cluster={c.name} {loc} --quiet) and re-apply, or change cluster.provisioning / zone"),
            undo=("gcloud", "container", "node-pools", "delete", c.node_pool, P, f"--cluster={c.name}", loc, "--quiet"),
        ))
    steps.append(_nccl_installer(cfg, ctx))
    if s.kind == "lustre":
        # The installed gcloud (528) has no flag for the Managed Lustre CSI driver, so the plan does not guess one:
        # it stops here, with kubectl's NotFound, until the driver is enabled (newer gcloud or the console).
        steps.append(Step(
            "lustre-csi", "require the Managed Lustre CSI driver (enable it on the cluster if this step fails)",
            ("kubectl", f"--context={ctx}", "get", "csidrivers.storage.k8s.io/lustre.csi.storage.gke.io", "-o", "name"),
            check=("kubectl", f"--context={ctx}", "get", "csidrivers.storage.k8s.io/lustre.csi.storage.gke.io", "-o", "name"),
        ))
    steps.append(_kubectl_objects_steps(cfg, "network-mapping", "GKENetworkParamSet + Network for gvnic-1 and rdma-0..7",
                                        manifests.network_objects(cfg), ctx))
    if c.kuberay == "helm":
        rel = ("kuberay-operator", f"--namespace={KUBERAY_NAMESPACE}", f"--kube-context={ctx}")
        steps.append(Step(
            "kuberay-operator", f"KubeRay operator v{c.kuberay_version} via Helm (instead of the GKE Ray add-on)",
            ("helm", "upgrade", "--install", "kuberay-operator", "kuberay-operator", f"--repo={KUBERAY_HELM_REPO}",
             f"--version={c.kuberay_version}", f"--namespace={KUBERAY_NAMESPACE}", "--create-namespace",
             f"--kube-context={ctx}", "--set", f"image.tag=v{c.kuberay_version}", "--wait"),
            check=("helm", "status", *rel, "-o", "json"),
            expect=('"status":"deployed"',),
            undo=("helm", "uninstall", *rel),
        ))
    if s.kind == "gcsfuse" and s.bucket:
        steps.append(Step(
            "bucket", "bucket with hierarchical namespace (atomic folder rename for tmp_step_N -> step_N)",
            ("gcloud", "storage", "buckets", "create", f"gs://{s.bucket}", P, loc, "--enable-hierarchical-namespace",
             "--uniform-bucket-level-access"),
            check=("gcloud", "storage", "buckets", "describe", f"gs://{s.bucket}", P, "--format=value(name)"),
            undo=("gcloud", "storage", "buckets", "delete", f"gs://{s.bucket}", P, "--quiet"),
        ))
    steps.append(_kubectl_objects_steps(cfg, "ksa", f"Kubernetes ServiceAccount {c.ksa} of the Ray pods",
                                        [manifests.service_account(cfg)], ctx))
    member = wi_member(cfg)
    if cfg.gcp.service_account:
        ksa_member = f"serviceAccount:{g.project}.svc.id.goog[{c.namespace}/{c.ksa}]"
        steps.append(Step(
            "wi-impersonation", f"let KSA {c.ksa} act as {g.service_account}",
            ("gcloud", "iam", "service-accounts", "add-iam-policy-binding", g.service_account, P,
             "--role=roles/iam.workloadIdentityUser", f"--member={ksa_member}"),
            check=("gcloud", "iam", "service-accounts", "get-iam-policy", g.service_account, P, "--format=json"),
            expect=(ksa_member,),
            undo=("gcloud", "iam", "service-accounts", "remove-iam-policy-binding", g.service_account, P,
                  "--role=roles/iam.workloadIdentityUser", f"--member={ksa_member}"),
        ))
    if s.kind == "gcsfuse" and s.bucket:
        steps.append(Step(
            "bucket-iam", "Workload Identity: the pods may read and write the bucket (roles/storage.objectUser)",
            ("gcloud", "storage", "buckets", "add-iam-policy-binding", f"gs://{s.bucket}", P, f"--member={member}",
             "--role=roles/storage.objectUser"),
            check=("gcloud", "storage", "buckets", "get-iam-policy", f"gs://{s.bucket}", P, "--format=json"),
            expect=(member,),
            undo=("gcloud", "storage", "buckets", "remove-iam-policy-binding", f"gs://{s.bucket}", P,
                  f"--member={member}", "--role=roles/storage.objectUser"),
        ))
    if s.kind != "none":
        steps.append(_kubectl_objects_steps(cfg, "storage", f"PV + PVC of the shared {s.mount_path} ({s.kind})",
                                            manifests.storage_objects(cfg), ctx))
    steps += source_steps(cfg)
    for env, name, key, var in manifests.secret_specs(cfg):
        placeholder = manifests.secrets(cfg)
        obj = next(o for o in placeholder if o["metadata"]["name"] == name)
        check = ("kubectl", f"--context={ctx}", f"--namespace={c.namespace}", "get", f"secrets/{name}", "-o", "name")
        steps.append(Step(
            f"secret-{name}", f"Secret {name} (pod env {env}) from ${var}, re-applied on every apply (a rotated token "
                              "reaches the pods); never written or shown",
            # the token is the environment's to set, whoever wrote the Secret before (`kubectl create secret`, a
            # client-side `kubectl apply`): without --force-conflicts the API server refuses to change their field
            ("kubectl", f"--context={ctx}", "apply", "--server-side", "--field-manager=nbtools", "--force-conflicts", "-f", "-"),
            stdin=manifests.to_yaml(obj),
            make_stdin=_secret_stdin(cfg, name),
            script=(f'if [[ -n "${{{var}:-}}" ]]; then printf %s "${var}" | kubectl --context={ctx} --namespace={c.namespace} '
                    f"create secret generic {name} --from-file={key}=/dev/stdin --dry-run=client -o yaml | kubectl "
                    f"--context={ctx} apply --server-side --field-manager=nbtools --force-conflicts -f -\n"
                    f"elif EXPECT=(); STATES=(); done_ {_join(check)}; then "
                    f"{sh_echo(f'keep secret-{name}: ${var} is not set, the Secret stays as it is')}\n"
                    f"else {sh_echo(f'secret-{name}: export {var} first', stderr=True)}; exit 1; fi"),
            check=check,
            refresh=True,
            undo=("kubectl", f"--context={ctx}", f"--namespace={c.namespace}", "delete", f"secrets/{name}", "--ignore-not-found"),
        ))
    return steps


def source_steps(cfg: Experiment) -> list[Step]:
    """The trainer's source on the bucket where its image has none (``Trainer.code_source``; verl: tutorial 002's
    "clone verl and upload it to the bucket"), pinned: a release tag fetched here, synced to the bucket.

    verl's ``verl.trainer.main_ppo`` and its gsm8k preparation ``cd`` into the code dir, and nothing else puts the
    source there. The synced tree carries a ``.nbtools-<name>-ref`` marker, so the check reads which release is on the
    bucket and a new ref syncs again. Only for gcsfuse storage (the bucket is the mount); with Lustre,
    ``nbtools.launch.lint`` asks to copy it there.
    """
    s = cfg.storage
    mount = s.mount_path.rstrip("/") + "/"
    src = trainers.trainer_class(cfg.trainer.kind).code_source(cfg)  # None: the trainer's image holds its code
    if src is None or s.kind != "gcsfuse" or not s.bucket or not src.code_dir.startswith(mount):
        return []
    n, ref, code = src.name, src.ref, src.code_dir
    local = cfg.run_dir / "gke" / f"{n}-{re.sub(r'[^A-Za-z0-9._-]+', '-', ref)}"
    tree, tmp, marker = f"{local}/{n}", f"{local}.tmp", f".nbtools-{n}-ref"
    dest = f"gs://{s.bucket}/{code[len(mount):].strip('/')}"
    fetch = (f"set -euo pipefail; rm -rf {sh(tmp)}; git clone --quiet --depth=1 --branch={sh(ref)} "
             f"{sh(src.repo)} {sh(tmp)}/{n}; rm -rf {sh(tmp)}/{n}/.git; "
             f"printf %s {sh(ref)} > {sh(tmp)}/{n}/{marker}; rm -rf {sh(str(local))}; "
             f"mv {sh(tmp)} {sh(str(local))}")
    P = f"--project={cfg.gcp.project}"
    return [
        Step(f"{n}-fetch", f"{n} {ref} from {src.repo} into {local} (no .git)", ("bash", "-c", fetch),
             check=("cat", f"{tree}/{marker}"), expect=(ref,)),
        Step(f"{n}-source", f"{n} {ref} on the bucket at {dest} = {code} on the pods (cd there to train/prepare)",
             ("gcloud", "storage", "rsync", "--recursive", "--delete-unmatched-destination-objects", tree, dest, P),
             check=("gcloud", "storage", "cat", f"{dest}/{marker}", P), expect=(ref,)),
    ]


def _nccl_installer(cfg: Experiment, ctx: str) -> Step:
    """Google's published gIB installer at the pinned ref, annotated with that ref so the check can see a re-pin."""
    c = cfg.cluster
    url, ns = nccl_installer_url(cfg), NCCL_INSTALLER_NAMESPACE[c.mode]
    ds = ("kubectl", f"--context={ctx}", f"--namespace={ns}")
    apply = _join(("kubectl", f"--context={ctx}", "apply", "-f", url))
    note = _join((*ds, "annotate", "daemonsets.apps/nccl-rdma-installer", f"{INSTALLER_REF_ANNOTATION}={c.nccl_installer_ref}",
                  "--overwrite"))
    return Step(
        "nccl-installer", f"Google's gIB NCCL installer DaemonSet ({ns}) from container-engine-accelerators@"
                          f"{c.nccl_installer_ref[:12]}",
        ("bash", "-c", f"{apply} && {note}"),
        check=(*ds, "get", "daemonsets.apps/nccl-rdma-installer", "-o",
               "jsonpath={.metadata.annotations." + INSTALLER_REF_ANNOTATION + "}"),
        expect=(c.nccl_installer_ref,),
        undo=("kubectl", f"--context={ctx}", "delete", "-f", url, "--ignore-not-found"),
    )


def _secret_stdin(cfg: Experiment, name: str):
    def build() -> str:
        obj = next(o for o in manifests.secrets(cfg, reveal=True) if o["metadata"]["name"] == name)
        return manifests.to_yaml(obj)

    return build
