"""Volcano Job manifests for jobs whose containers run ascend-node.

A manifest is part of the agent's contract, not decoration: the exit codes the agent
uses (4 = peers timed out, retryable; 5 = cluster inconsistent, not retryable) only
help if the Job's policies act on them; the identity step needs the `env`/`svc`
plugins, tasks named `master` and `worker`, and the downward-API variables; the probes
must wait at least as long as the agent may wait for its peers. Rendering the manifest
from the same constants keeps those promises in one place, so hand-edited copies cannot
drift. This module is pure (no I/O, no typer): `render_job` returns a dict,
`render_yaml` its YAML text.

YAML is emitted by a small block-style emitter here because PyYAML is not a runtime
dependency. Every string that a YAML 1.1/1.2 reader could take for something else is
double-quoted, so `yaml.safe_load(render_yaml(p)) == render_job(p)` (tested).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any, Literal, Optional

from ascend_node.discover.identity import check_run_id
from ascend_node.errors import ClusterInconsistent, ConfigError, PeerTimeout, UsageError
from ascend_node.handoff.exec import DEFAULT_MINDIE_DAEMON
from ascend_node.handoff.mindie_startup import (
    DEFAULT_MIES_INSTALL_PATH,
    MODEL_NAME_RULE,
    model_name_ok,
)
from ascend_node.handoff.serving import DEFAULT_MANAGEMENT_PORT, LIVE_PATH, READY_PATH
from ascend_node.jobspec.mounts import HOST_MOUNTS, STATE_MOUNT, check_mount_path, under
from ascend_node.jobspec.skeleton import (
    A3_SUPER_POD_TYPES,
    job_labels,
    job_object,
    pod_head,
    pod_labels,
)
from ascend_node.rendezvous.kube_layout import identity_env, rbac_objects, service_account_name

Kind = Literal["mindie", "training"]
KINDS = ("mindie", "training")

DEFAULT_NPU_RESOURCE = "huawei.com/Ascend910"

# The image's ENTRYPOINT, repeated in the manifest so that the pod runs the agent even
# when an image's own ENTRYPOINT differs (any image with tini and ascend-node on PATH).
ENTRYPOINT = ["tini", "--", "ascend-node", "boot", "--"]
STATUS_COMMAND = ["ascend-node", "status"]
TRAINING_LAUNCHERS = ("msrun", "torch")

# Volcano's job policies read the exit code of the pod's first container once the pod
# has *failed*; with any other restartPolicy the kubelet restarts the container in place
# and the policy never fires.
#
# How Volcano matches them (volcano-sh/volcano pkg/controllers/job/job_controller_handler.go
# `updatePod`, job_controller_util.go `applyPolicies`): a pod turning `Failed` raises ONE
# request carrying both the event `PodFailed` and the first container's exit code; a pod
# deleted (evicted, node lost) raises `PodEvicted`. `applyPolicies` walks the policies in
# order (the task's, then the job's) and returns the action of the FIRST one whose event
# matches or whose exitCode equals the code; no match is `SyncJob` (nothing happens). So
# the exit-code policies come first: exit 5 must abort before `PodFailed` restarts.
# `RestartJob` kills every pod and starts a new attempt (state/running.go: RetryCount++);
# once RetryCount reaches maxRetry the job ends `Failed` (state/restarting.go).
EXIT_CODE_ACTIONS = (
    (PeerTimeout.exit_code, "RestartJob"),
    (ClusterInconsistent.exit_code, "AbortJob"),
)
# Then the events. A server that dies after serving began (exit 1, a signal: 137/143, an
# OOM kill: 137) leaves a multi-node instance broken for good (one pod Failed, the others
# serving nothing): only a restart of the whole job heals it. A lost pod invalidates
# everyone's rank table the same way.
EVENT_ACTIONS = (
    ("PodFailed", "RestartJob"),
    ("PodEvicted", "RestartJob"),
)
# A MindIE server never finishes: a task whose pods all exited 0 (`TaskCompleted`, raised by
# `updatePod` once every pod of the task has succeeded) is an instance that stopped serving.
# Training tasks do finish; for them it stays Volcano's default (the job completes).
MINDIE_EVENT_ACTIONS = (("TaskCompleted", "RestartJob"),)
MAX_RETRY = 3

# Probes. The startup probe must outlast the agent's own --timeout (which counts from
# its start) plus the time to install atb_llm, capture set_env.sh and patch config.json;
# otherwise the kubelet kills a node that is still legitimately waiting, and the pod
# fails with 137 instead of the agent's meaningful exit code 4.
STARTUP_PERIOD_S = 10
STARTUP_GRACE_S = 300
PROBE_TIMEOUT_S = 10
READINESS_FAILURES = 3

# MindIE pods (docs/deploy.md, "Probes"): `status --serving` is the bootstrap's answer until
# boot exec's the daemon, then MindIE's own /v2/health/ready (handoff/serving.py). So the
# startup probe also waits for the weights to load: its window adds --load-timeout (2 h by
# default: hundreds of GB from shared storage) to the bootstrap's; it gates readiness and
# liveness, so nothing restarts a pod while it loads. Its short period is how soon a pod
# turns Ready once MindIE is (an exec of a small Python command every 3 s).
SERVING_COMMAND = [*STATUS_COMMAND, "--serving"]
LIVE_COMMAND = [*SERVING_COMMAND, "--live"]
DEFAULT_LOAD_TIMEOUT_S = 7200
SERVING_STARTUP_PERIOD_S = 3
SERVING_READINESS_PERIOD_S = 5
LIVENESS_PERIOD_S = 10
LIVENESS_FAILURES = 3

MINDIE_HTTP_PORT = 1025  # ServerConfig.port in MindIE's default config.json
MINDIE_MAX_NODES = 60  # MindIE rejects server_count above 60
MAX_HOSTNAME = 63  # the svc plugin sets each pod's hostname to its pod name

_DNS1035_LABEL = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
_DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_DNS1123_SUBDOMAIN = re.compile(
    r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
)
# MindIE refuses paths with other characters; the model dir holds the shared table.
_SAFE_PATH = re.compile(r"^/[0-9A-Za-z_./-]+$")
_RESOURCE_NAME = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")


@dataclass(frozen=True)
class ManifestParams:
    """Everything a rendered Job depends on; validated on construction.

    Fields without defaults come first (dataclass rule): pass them by keyword.
    `command` is what `ascend-node boot --` execs (None: the MindIE daemon); training
    has no sensible default launcher, so it must be given.
    """

    kind: Kind
    name: str
    nodes: int
    image: str
    pvc: Optional[str]  # None: no shared PVC (only with rendezvous="kube")
    run_id: str
    npus_per_node: int = 8
    model_path: str = "/mnt/model"
    namespace: Optional[str] = None
    rdma_resource: Optional[str] = None
    queue: str = "default"
    timeout: int = 900
    command: Optional[list[str]] = None
    npu_resource: str = DEFAULT_NPU_RESOURCE
    mount_driver: bool = True
    a3: bool = False  # Atlas 900 A3 SuperPoD nodes (rank table v1.2)
    rendezvous_key_secret: Optional[str] = None  # a Secret holding the job's key, mounted
    # MindIE's httpsEnabled as ASCEND_NODE_HTTPS, rendered for every MindIE job. None and
    # False: plain http, the default for a cluster-internal Service (docs/deploy.md, "TLS");
    # True: https with the certificates of the Secret `tls_secret` mounted where MindIE
    # looks for them (MindIE's shipped config.json says true but ships no certificates).
    https: Optional[bool] = None
    # How long MindIE may load its weights after exec before the startup probe gives up
    # (None: DEFAULT_LOAD_TIMEOUT_S); MindIE jobs only.
    load_timeout: Optional[int] = None
    tls_secret: Optional[str] = None
    # The model: `model_dir` is MindIE's modelWeightPath (None: the PVC's mount path, as
    # before), on the shared PVC or on `model_pvc` mounted read-only at `model_dir`;
    # `model_name` is MindIE's modelName (None: the image's config.json decides).
    model_dir: Optional[str] = None
    model_pvc: Optional[str] = None
    model_name: Optional[str] = None
    # The uid (and gid) the pod runs as (None: the image's user).
    run_as_user: Optional[int] = None
    # Training: the launcher `boot` runs (msrun or torch) and msrun's own options.
    launcher: Optional[str] = None
    master_port: Optional[int] = None
    msrun_log_dir: Optional[str] = None
    bind_core: bool = False
    # The init-container variant: `ascend-node ranktable` in an init container writes to a
    # per-pod emptyDir; the server container sources its env script and runs the server.
    init_container: bool = False
    init_image: Optional[str] = None
    # Where the pods meet: "volume" (the shared PVC) or "kube" (through the API, under the
    # job's own ServiceAccount, Role and RoleBinding: `render_rbac`; no PVC needed).
    rendezvous: str = "volume"

    def __post_init__(self) -> None:
        validate(self)


def validate(p: ManifestParams) -> None:
    """Raise UsageError naming the first bad value, with what would be accepted.

    Every parameter is a command-line argument of `ascend-node manifest`, so a bad one is a
    usage error (exit 2) like an unknown option, whichever rule it breaks.
    """
    if p.kind not in KINDS:
        raise UsageError(f"manifest kind {p.kind!r} is not one of {', '.join(KINDS)}",
                          "use --kind mindie or --kind training")
    _check_int("--nodes", p.nodes, 1, MINDIE_MAX_NODES if p.kind == "mindie" else 100_000)
    _check_int("--npus-per-node", p.npus_per_node, 1, 16)
    if p.a3 and p.npus_per_node not in A3_SUPER_POD_TYPES:
        raise UsageError(
            f"--a3 with --npus-per-node {p.npus_per_node}: A3 super-pod nodes are scheduled "
            "with 16 (module-a3-16-super-pod) or 8 (module-a3-8-super-pod) NPUs per pod",
            "use --npus-per-node 16 (the default with --a3) or 8",
        )
    _check_int("--timeout", p.timeout, 1, 7 * 24 * 3600)
    if p.load_timeout is not None:
        if p.kind != "mindie":
            raise UsageError("--load-timeout is how long MindIE may load its weights; a "
                             "training job has no such wait", "leave it out with --kind training")
        _check_int("--load-timeout", p.load_timeout, 60, 7 * 24 * 3600)
    if p.https is not None and p.kind != "mindie":
        raise UsageError("--https/--no-https is MindIE's httpsEnabled; a training job has none",
                         "leave it out with --kind training")
    _check_tls(p)
    _check_model(p)
    _check_user(p)
    _check_launcher(p)
    if not isinstance(p.name, str) or not _DNS1035_LABEL.match(p.name):
        raise UsageError(
            f"job name {p.name!r} is not a DNS-1035 label",
            "use lower-case letters, digits and '-', starting with a letter "
            "(the svc plugin names a Service after the job)",
        )
    longest = pod_names(p.name, p.nodes)[-1]
    if len(longest) > MAX_HOSTNAME:
        raise UsageError(
            f"job name {p.name!r} is too long for {p.nodes} node(s): pod hostname "
            f"{longest!r} has {len(longest)} characters (max {MAX_HOSTNAME})",
            f"shorten the name to at most {MAX_HOSTNAME - len(longest) + len(p.name)} characters",
        )
    if not isinstance(p.image, str) or not p.image or any(c.isspace() for c in p.image):
        raise UsageError(f"image {p.image!r} is empty or contains whitespace",
                          "give an image reference such as registry/mindie:2.1-ascend-node")
    _check_rendezvous(p)
    if p.pvc is not None:
        _check_subdomain("--pvc", p.pvc)
    _check_subdomain("--queue", p.queue)
    _check_key_secret(p)
    if p.namespace is not None and (len(p.namespace) > 63 or not _DNS1123_LABEL.match(p.namespace)):
        raise UsageError(f"namespace {p.namespace!r} is not a DNS-1123 label",
                          "use lower-case letters, digits and '-', at most 63 characters")
    # The agent's own rule: the run id becomes part of file names on the shared volume.
    try:
        check_run_id(p.run_id if isinstance(p.run_id, str) else repr(p.run_id), "--run-id")
    except ConfigError as exc:
        raise UsageError(exc.cause, exc.hint) from None
    if (not isinstance(p.model_path, str) or not _SAFE_PATH.match(p.model_path)
            or p.model_path.rstrip("/") == "" or ".." in p.model_path.split("/")):
        raise UsageError(
            f"model path {p.model_path!r} is not an absolute path of [0-9A-Za-z_./-]",
            "MindIE refuses other characters in paths; e.g. /mnt/model",
        )
    check_mount_path("--model-path", p.model_path, "/mnt/model")
    _check_resource("--npu-resource", p.npu_resource)
    if p.rdma_resource is not None:
        _check_resource("--rdma-resource", p.rdma_resource)
    if p.command is not None and (
        not isinstance(p.command, list) or not p.command
        or not all(isinstance(a, str) and "\0" not in a for a in p.command) or not p.command[0]
    ):
        raise UsageError(f"command {p.command!r} is not a non-empty list of strings",
                          "give the program and its arguments after --")
    if p.kind == "training" and p.command is None:
        raise UsageError(
            "training manifest has no command",
            "give the script after -- (the agent runs msrun around it), e.g. -- "
            "run_mindformer.py --config /mnt/model/pretrain.yaml; with --launcher torch: "
            "-- torchrun train.py",
        )
    if p.init_image is not None and (not p.init_container or not p.init_image
                                     or any(c.isspace() for c in p.init_image)):
        raise UsageError(f"--init-image {p.init_image!r} needs --init-container and no spaces",
                          "e.g. --init-container --init-image registry/ascend-node-init:1.0")


def _check_tls(p: ManifestParams) -> None:
    if p.https and p.tls_secret is None:
        raise UsageError("--https needs --tls-secret NAME: MindIE's https needs its "
                          "certificates, and none are in MindIE's image",
                          "name the Secret holding them (docs/deploy.md, TLS), or use "
                          "--no-https (the default) for a cluster-internal Service")
    if p.tls_secret is not None:
        if not p.https:
            raise UsageError("--tls-secret without --https: plain http uses no certificates",
                              "add --https, or leave --tls-secret out")
        _check_subdomain("--tls-secret", p.tls_secret)
        if p.run_as_user not in (None, 0):
            raise UsageError(
                f"--https with --run-as-user {p.run_as_user}: a Secret's files are owned by "
                "root, and MindIE refuses certificates not owned by the uid that runs it",
                "run as root with --https, or bake certificates owned by that uid into the "
                "image and render --no-https ... (docs/deploy.md, TLS)")


def _safe_path(value: object) -> bool:
    return (isinstance(value, str) and bool(_SAFE_PATH.match(value))
            and value.rstrip("/") != "" and ".." not in value.split("/"))


def _check_rendezvous(p: ManifestParams) -> None:
    if p.rendezvous not in ("volume", "kube"):
        raise UsageError(f"--rendezvous {p.rendezvous!r} is not one of volume, kube",
                         "use --rendezvous volume (a shared PVC) or --rendezvous kube")
    if p.rendezvous == "volume" and p.pvc is None:
        raise UsageError("no --pvc: the rendezvous on the volume needs the job's shared PVC",
                         "name it with --pvc, or meet through the API: --rendezvous kube")
    if p.rendezvous == "kube" and p.namespace is None:
        raise UsageError("--rendezvous kube needs --namespace: the RoleBinding names the "
                         "ServiceAccount with its namespace", "pass --namespace NS")
    if p.rendezvous == "kube" and p.pvc is None and p.kind == "mindie" and p.model_dir is None:
        raise UsageError("--rendezvous kube without --pvc: MindIE needs its weights",
                         "mount them with --model-pvc NAME --model-dir /mnt/weights/..., or "
                         "give the directory inside the image with --model-dir")


def _check_model(p: ManifestParams) -> None:
    if p.model_name is not None and (not isinstance(p.model_name, str)
                                     or not model_name_ok(p.model_name)):
        raise UsageError(f"--model-name {p.model_name!r} is a name MindIE refuses",
                          f"use {MODEL_NAME_RULE}")
    if (p.model_dir is not None or p.model_pvc is not None or p.model_name is not None) \
            and p.kind != "mindie":
        raise UsageError("--model-dir/--model-pvc/--model-name are MindIE's config.json "
                          "keys; a training job has none", "pass the paths to your script")
    if p.model_pvc is not None:
        _check_subdomain("--model-pvc", p.model_pvc)
        if p.model_dir is None:
            raise UsageError("--model-pvc needs --model-dir: the path it is mounted at",
                              "e.g. --model-pvc weights --model-dir /mnt/weights/qwen")
    if p.model_dir is None:
        return
    if not _safe_path(p.model_dir):
        raise UsageError(f"--model-dir {p.model_dir!r} is not an absolute path of "
                          "[0-9A-Za-z_./-]", "MindIE refuses other characters in paths")
    if p.model_pvc is not None:
        check_mount_path("--model-dir", p.model_dir, "/mnt/weights")  # --model-pvc mounts it there
    if p.model_pvc is None and p.pvc is not None and not under(p.model_dir, p.model_path):
        raise UsageError(
            f"--model-dir {p.model_dir} is outside every volume of the pod (the PVC is "
            f"mounted at {p.model_path})",
            f"give a directory under {p.model_path}, or mount the weights' own claim "
            "there with --model-pvc NAME")
    if p.model_pvc is not None and p.pvc is not None and (
            under(p.model_dir, p.model_path) or under(p.model_path, p.model_dir)):
        raise UsageError(f"--model-dir {p.model_dir} with --model-pvc overlaps the shared "
                          f"PVC's mount {p.model_path}",
                          "mount the weights' claim elsewhere, e.g. /mnt/weights")


MAX_ID = 2**31 - 1


def _check_user(p: ManifestParams) -> None:
    if p.run_as_user is not None and (isinstance(p.run_as_user, bool)
                                      or not isinstance(p.run_as_user, int)
                                      or not 0 <= p.run_as_user <= MAX_ID):
        raise UsageError(f"--run-as-user {p.run_as_user!r} is not a uid",
                          f"use an integer from 0 to {MAX_ID} (MindIE's images: 1001)")


def _check_launcher(p: ManifestParams) -> None:
    if p.kind == "mindie":
        if (p.launcher is not None or p.msrun_log_dir is not None or p.bind_core
                or p.master_port is not None):
            raise UsageError("--launcher/--master-port/--msrun-log-dir/--bind-core are "
                              "for training; MindIE is its own launcher",
                              "leave them out with --kind mindie")
        return
    launcher = p.launcher or "msrun"
    if launcher not in TRAINING_LAUNCHERS:
        raise UsageError(f"--launcher {launcher!r} is not one of "
                          f"{', '.join(TRAINING_LAUNCHERS)}", "use --launcher msrun or torch")
    if p.master_port is not None:
        _check_int("--master-port", p.master_port, 1, 65535)
    if launcher != "msrun" and (p.msrun_log_dir is not None or p.bind_core):
        raise UsageError("--msrun-log-dir/--bind-core are msrun's options",
                          "give torchrun's own options in the command after --")
    if p.msrun_log_dir is not None and not _safe_path(p.msrun_log_dir):
        raise UsageError(f"--msrun-log-dir {p.msrun_log_dir!r} is not an absolute path of "
                          "[0-9A-Za-z_./-]", "e.g. /mnt/model/output/msrun_log")
    if p.init_container:
        raise UsageError("--init-container renders MindIE's variant; training runs its "
                          "launcher through `boot`", "leave --init-container out")


def _check_key_secret(p: ManifestParams) -> None:
    if p.rendezvous_key_secret is not None:
        _check_subdomain("--rendezvous-key-secret", p.rendezvous_key_secret)


def _check_int(flag: str, value: object, lo: int, hi: int) -> None:
    """Errors name the flag typed (`--npus-per-node 17`), never the Python field."""
    if not isinstance(value, int) or isinstance(value, bool) or not lo <= value <= hi:
        raise UsageError(f"{flag} {value!r} is out of range",
                         f"use an integer from {lo} to {hi}, e.g. {flag} {min(max(lo, 2), hi)}")


def _check_subdomain(field: str, value: object) -> None:
    if not isinstance(value, str) or len(value) > 253 or not _DNS1123_SUBDOMAIN.match(value):
        raise UsageError(f"{field} {value!r} is not a DNS-1123 subdomain",
                          "use lower-case letters, digits, '-' and '.', at most 253 characters")


def _check_resource(field: str, value: object) -> None:
    """Extended resources are `<domain>/<name>` (e.g. rdma/hca, huawei.com/Ascend910)."""
    prefix, _, name = value.partition("/") if isinstance(value, str) else ("", "", "")
    if (not prefix or len(prefix) > 253 or not _DNS1123_SUBDOMAIN.match(prefix)
            or not name or len(name) > 63 or not _RESOURCE_NAME.match(name)):
        raise UsageError(f"{field} {value!r} is not an extended resource name <domain>/<name>",
                          "e.g. rdma/hca or huawei.com/Ascend910")


def pod_names(name: str, nodes: int) -> list[str]:
    """Pod names in global node order, as Volcano names them (<job>-<task>-<index>)."""
    return [f"{name}-master-0"] + [f"{name}-worker-{i}" for i in range(nodes - 1)]


def startup_failure_threshold(timeout: int, load_timeout: int = 0,
                              period: int = STARTUP_PERIOD_S) -> int:
    """Probe failures the startup probe tolerates: longer than the agent may wait (plus,
    for MindIE, the weight load)."""
    return math.ceil((timeout + STARTUP_GRACE_S + load_timeout) / period)


def _probes(p: ManifestParams, role: str) -> dict[str, Any]:
    """The container's probes. MindIE: startup = `status --serving` everywhere (a slave's
    answer is its master's: the instance serves as one); readiness (MindIE's) and liveness
    only on the master, the pod that serves. Training: the bootstrap's startup probe
    (`status`) alone: no Service routes to a training pod, so no readiness gate, and the
    launcher's own exit is its liveness (it ends the container)."""
    if p.kind != "mindie":
        return {"startupProbe": _probe(STARTUP_PERIOD_S, startup_failure_threshold(p.timeout))}
    load = DEFAULT_LOAD_TIMEOUT_S if p.load_timeout is None else p.load_timeout
    out = {"startupProbe": _probe(
        SERVING_STARTUP_PERIOD_S,
        startup_failure_threshold(p.timeout, load, SERVING_STARTUP_PERIOD_S), SERVING_COMMAND)}
    if role == "master":
        out["readinessProbe"] = _probe(SERVING_READINESS_PERIOD_S, READINESS_FAILURES,
                                       SERVING_COMMAND)
        out["livenessProbe"] = _probe(LIVENESS_PERIOD_S, LIVENESS_FAILURES, LIVE_COMMAND)
    return out


def valid_name(value: str) -> bool:
    """A DNS-1123 label (a namespace, a ServiceAccount's name), at most 63 characters."""
    return len(value) <= 63 and bool(_DNS1123_LABEL.match(value))


def render_job(p: ManifestParams) -> dict[str, Any]:
    """The Volcano Job for `p`: a `master` task (1 pod) and a `worker` task (nodes-1 pods)."""
    tasks = [_task(p, "master", 1)]
    if p.nodes > 1:
        tasks.append(_task(p, "worker", p.nodes - 1))
    # The svc plugin's NetworkPolicy admits only pods of the job; MindIE's master must
    # also accept inference requests from outside it.
    svc_args = ["--disable-network-policy=true"] if p.kind == "mindie" else []
    policies: list[dict[str, Any]] = [
        {"exitCode": code, "action": action} for code, action in EXIT_CODE_ACTIONS
    ]
    events = EVENT_ACTIONS + (MINDIE_EVENT_ACTIONS if p.kind == "mindie" else ())
    policies += [{"event": event, "action": action} for event, action in events]
    return job_object(p.name, p.namespace, job_labels(p.kind, p.name, p.run_id), p.queue,
                      MAX_RETRY, svc_args, tasks, policies)


def _task(p: ManifestParams, role: str, replicas: int) -> dict[str, Any]:
    spec = pod_head(p.run_as_user, p.npus_per_node if p.a3 else None,
                    {"app.kubernetes.io/instance": p.name})
    if p.init_container:
        spec["initContainers"] = [_init_container(p, role)]
    spec["containers"] = [_container(p, role)]
    spec["volumes"] = _volumes(p)
    if p.rendezvous == "kube":
        # The job's own ServiceAccount: its token, CA and namespace are what the agent
        # meets the peers with (docs/rendezvous.md, "Through the Kubernetes API").
        spec["serviceAccountName"] = service_account_name(p.name)
    labels = pod_labels(p.kind, p.name, role, p.run_id)
    return {"name": role, "replicas": replicas,
            "template": {"metadata": {"labels": labels}, "spec": spec}}


def _env(p: ManifestParams, role: str) -> list[dict[str, Any]]:
    env: list[dict[str, Any]] = [{"name": "ROLE", "value": role}]
    if p.pvc is not None:
        env.append({"name": "MODEL_PATH", "value": p.model_path})
    env += [
        {"name": "ASCEND_NODE_RUN_ID", "value": p.run_id},
        {"name": "ASCEND_NODE_TIMEOUT", "value": str(p.timeout)},
        _field_env("POD_UID", "metadata.uid"),
        _field_env("K8S_POD_IP", "status.podIP"),
        _field_env("K8S_HOST_IP", "status.hostIP"),
        # Bumped by Volcano on every RestartJob: keeps a re-created pod with unchanged
        # addresses off the previous start's rank table.
        _field_env("ASCEND_NODE_JOB_VERSION", "metadata.annotations['volcano.sh/job-version']"),
        # `<job name>-<job UID>`: orders those versions within one Volcano Job only, so a
        # Job deleted and applied again under the same name is not taken for a leftover.
        _field_env("ASCEND_NODE_JOB_INSTANCE",
                   "metadata.annotations['scheduling.k8s.io/group-name']"),
    ]
    if p.nodes == 1:
        # With no worker task the svc plugin injects no VC_WORKER_NUM at all.
        env.append({"name": "VC_WORKER_NUM", "value": "0"})
    if p.kind == "mindie":
        # Always a choice, never the image's file: MindIE's shipped config.json says https
        # and ships no certificates, so a job left to it would never serve.
        env.append({"name": "ASCEND_NODE_HTTPS", "value": "1" if p.https else "0"})
        if p.https:
            # The Secret carries the inter-node certificates too: keep that TLS on.
            env.append({"name": "ASCEND_NODE_TLS_CERTS", "value": "1"})
    if p.a3:
        # The agent then warns on a node that reports no super pod (chain/table.py).
        env.append({"name": "ASCEND_NODE_A3", "value": "1"})
    if p.model_dir is not None:
        env.append({"name": "ASCEND_NODE_MODEL_DIR", "value": p.model_dir})
    if p.model_name is not None:
        env.append({"name": "MODEL_NAME", "value": p.model_name})
    if p.master_port is not None:
        env.append({"name": "ASCEND_NODE_MASTER_PORT", "value": str(p.master_port)})
    if p.rendezvous == "kube":
        # The vcjob's name and uid from Volcano's own pod annotations (kube_layout).
        env += [{"name": "ASCEND_NODE_RENDEZVOUS", "value": "kube"}, *identity_env()]
    if p.rendezvous_key_secret is not None:
        env.append({"name": "ASCEND_NODE_RENDEZVOUS_KEY_FILE",
                    "value": f"{KEY_MOUNT_DIR}/{KEY_ITEM}"})
    return env


def _boot_command(p: ManifestParams) -> list[str]:
    """`tini -- ascend-node boot [--launcher L [--launcher-args …]] --`: the launcher is
    the agent's to run, so pre-flight `warn` and every launcher fix apply (docs/launchers.md)."""
    if p.kind == "mindie":
        return list(ENTRYPOINT)
    out = [*ENTRYPOINT[:-1], "--launcher", p.launcher or "msrun"]
    extra = []
    if p.msrun_log_dir is not None:
        extra.append(f"--log_dir={p.msrun_log_dir}")
    if p.bind_core:
        extra.append("--bind_core=True")
    if extra:
        out.append("--launcher-args=" + " ".join(extra))  # one word: the value starts with --
    return [*out, "--"]


def _container(p: ManifestParams, role: str) -> dict[str, Any]:
    env = _env(p, role)
    amounts = {p.npu_resource: str(p.npus_per_node)}
    if p.rdma_resource is not None:
        amounts[p.rdma_resource] = "1"
    c: dict[str, Any] = {
        "name": p.kind,
        "image": p.image,
        "imagePullPolicy": "IfNotPresent",
    }
    if p.init_container:
        # The server's own image: no agent in it. The init container left the env script.
        c["command"] = ["bash", "-c", f'source {STATE_MOUNT}/source_mul_env.sh && exec "$@"',
                        "server"]
        c["args"] = list(p.command) if p.command is not None else [DEFAULT_MINDIE_DAEMON]
        env = [e for e in env if e["name"] in ("MODEL_PATH", "ROLE")]
    else:
        c["command"] = _boot_command(p)
        if p.command is not None:
            c["args"] = list(p.command)
    c["env"] = env
    if p.kind == "mindie":
        c["ports"] = [{"name": "http", "containerPort": MINDIE_HTTP_PORT, "protocol": "TCP"}]
    c["resources"] = {"limits": dict(amounts), "requests": dict(amounts)}
    if p.rdma_resource is not None:
        # RDMA verbs pin (mlock) memory regions.
        c["securityContext"] = {"capabilities": {"add": ["IPC_LOCK"]}}
    c.update(_probes(p, role))
    c["terminationMessagePolicy"] = "FallbackToLogsOnError"
    c["volumeMounts"] = _mounts(p, agent=not p.init_container)
    if p.init_container:
        # The server's image need not have the agent: the same probes, asked by the kubelet.
        for name in ("startupProbe", "readinessProbe", "livenessProbe"):
            c.pop(name, None)
        c.update(_server_probes(p, role))
        # MindIE's own variable (as for a PD server, pd/server_config.py): its management
        # server listens on the pod IP, where the kubelet's httpGet reaches it, whatever
        # managementIpAddress the image's config.json has (127.0.0.2 as shipped).
        c["env"] = [*c["env"], _field_env(MANAGEMENT_IP_ENV, "status.podIP")]
    return c


MANAGEMENT_IP_ENV = "MIES_CONTAINER_MANAGEMENT_IP"
# A worker's startup probe without the agent: MindIE's readiness as its master answers it,
# one HTTP/1.0 GET over bash's /dev/tcp (the server image has bash: its command is bash).
_ASK_MASTER = (
    f"m=$(cat {STATE_MOUNT}/master) && exec 3<>/dev/tcp/$m/{DEFAULT_MANAGEMENT_PORT} && "
    f"printf 'GET {READY_PATH} HTTP/1.0\\r\\nHost: %s\\r\\n\\r\\n' \"$m\" >&3 && "
    "read -r -t 8 _ code _ <&3 && [ \"$code\" = 200 ]"
)


def _server_probes(p: ManifestParams, role: str) -> dict[str, Any]:
    """The init-container variant's probes: `_probes`' schedule, asked by the kubelet itself
    (`httpGet`, https unverified as MindIE's certificates name no pod) of MindIE's
    management port, since the server's image has no agent to run `status --serving`.
    A slave's own endpoint is not established (docs/deploy.md, "Probes"), so a worker asks
    the master, as `status --serving` does for a slave: bash's /dev/tcp to the master IP
    the init container left, plain http only (with --https a worker has no probe)."""
    load = DEFAULT_LOAD_TIMEOUT_S if p.load_timeout is None else p.load_timeout
    scheme = "HTTPS" if p.https else "HTTP"
    startup_failures = startup_failure_threshold(0, load, SERVING_STARTUP_PERIOD_S)
    if role != "master":
        if p.https:
            return {}
        return {"startupProbe": {"exec": {"command": ["bash", "-c", _ASK_MASTER]},
                                 "periodSeconds": SERVING_STARTUP_PERIOD_S,
                                 "timeoutSeconds": PROBE_TIMEOUT_S,
                                 "failureThreshold": startup_failures}}

    def get(path: str, period: int, failures: int) -> dict[str, Any]:
        return {"httpGet": {"path": path, "port": DEFAULT_MANAGEMENT_PORT, "scheme": scheme},
                "periodSeconds": period, "timeoutSeconds": PROBE_TIMEOUT_S,
                "failureThreshold": failures}

    # The init container's wait for its peers is over when this container starts: the
    # window is the weight load and the grace, as in `_probes` less the peer wait.
    return {
        "startupProbe": get(READY_PATH, SERVING_STARTUP_PERIOD_S, startup_failures),
        "readinessProbe": get(READY_PATH, SERVING_READINESS_PERIOD_S, READINESS_FAILURES),
        "livenessProbe": get(LIVE_PATH, LIVENESS_PERIOD_S, LIVENESS_FAILURES),
    }




def _init_container(p: ManifestParams, role: str) -> dict[str, Any]:
    """`ascend-node ranktable` writing the env script, table, master and world-size files
    to the pod's emptyDir (images/README.md, "Init container")."""
    env = [
        *_env(p, role),
        {"name": "ASCEND_NODE_STATE_DIR", "value": STATE_MOUNT},
        {"name": "ASCEND_NODE_MASTER_FILE", "value": f"{STATE_MOUNT}/master"},
        {"name": "ASCEND_NODE_WORLD_SIZE_FILE", "value": f"{STATE_MOUNT}/world_size"},
    ]
    if p.run_as_user is not None:
        env.append({"name": "ASCEND_NODE_FILE_OWNER", "value": f"{p.run_as_user}:{p.run_as_user}"})
    amounts = {p.npu_resource: str(p.npus_per_node)}
    c: dict[str, Any] = {
        "name": "ranktable", "image": p.init_image or p.image,
        "imagePullPolicy": "IfNotPresent",
        "command": ["ascend-node", "ranktable"], "env": env,
        # The same NPUs as the server: the device plugin gives a container only what it
        # requests (no request: no ASCEND_VISIBLE_DEVICES, no /dev/davinciN), and the
        # kubelet's device manager hands an init container's devices on to the app
        # containers (kubernetes pkg/kubelet/cm/devicemanager/manager.go `devicesToReuse`:
        # "devices that can be reused as they have been allocated to init containers";
        # docs/deploy.md, "Init container").
        "resources": {"limits": dict(amounts), "requests": dict(amounts)},
        "terminationMessagePolicy": "FallbackToLogsOnError",
        "volumeMounts": _mounts(p, agent=True, server=False),
    }
    return c


def _state_volume(p: ManifestParams) -> bool:
    """A per-pod emptyDir at the state dir: the init container's hand-over, and a place a
    non-root agent can write without the fallbacks (docs/deploy.md, "Non-root")."""
    return p.init_container or p.run_as_user not in (None, 0)


def _mounts(p: ManifestParams, agent: bool, server: bool = True) -> list[dict[str, Any]]:
    mounts: list[dict[str, Any]] = ([] if p.pvc is None else
                                    [{"name": "model", "mountPath": p.model_path}])
    if p.model_pvc is not None:
        mounts.append({"name": "weights", "mountPath": p.model_dir, "readOnly": True})
    if server:
        mounts.append({"name": "shm", "mountPath": "/dev/shm"})
    if _state_volume(p):
        mounts.append({"name": "ascend-node-state", "mountPath": STATE_MOUNT})
    if p.mount_driver:
        mounts += [{"name": name, "mountPath": path, "readOnly": True}
                   for name, path, _ in HOST_MOUNTS]
    if agent and p.rendezvous_key_secret is not None:
        mounts.append({"name": "rendezvous-key", "mountPath": KEY_MOUNT_DIR, "readOnly": True})
    if server and p.tls_secret is not None:
        # One file per mount (subPath): MindIE refuses a symlink, and a Secret volume's
        # files are symlinks into its ..data directory; a subPath mount is the file itself.
        mounts += [{"name": "mindie-tls", "mountPath": f"{TLS_HOME}/{rel}", "subPath": key,
                    "readOnly": True} for key, rel in TLS_ITEMS]
    return mounts


# Where MindIE looks for its certificates: `$MIES_INSTALL_PATH/<value>` for the 16 paths of
# its shipped config.json (handoff/mindie_startup.py: business, management and metrics
# endpoints of ServerConfig, and BackendConfig's inter-node TLS). The Secret's key for each
# is the path under security/ with "/" as "." (Secret keys allow [-._a-zA-Z0-9]).
TLS_HOME = DEFAULT_MIES_INSTALL_PATH
TLS_PATHS = (
    "security/certs/server.pem", "security/keys/server.key.pem", "security/ca/ca.pem",
    "security/certs/server_crl.pem",
    "security/certs/management/server.pem", "security/keys/management/server.key.pem",
    "security/ca/management_ca.pem", "security/management/certs/server_crl.pem",
    "security/certs/metrics/server.pem", "security/keys/metrics/server.key.pem",
    "security/ca/metrics_ca.pem", "security/metrics/certs/server_crl.pem",
    "security/grpc/certs/server.pem", "security/grpc/keys/server.key.pem",
    "security/grpc/ca/ca.pem", "security/grpc/certs/server_crl.pem",
)
TLS_ITEMS = tuple((rel[len("security/"):].replace("/", "."), rel) for rel in TLS_PATHS)


# The job's rendezvous key (docs/rendezvous.md, threat model) reaches the agent as a
# file from a mounted Secret, never as an environment variable: it then shows neither in
# `kubectl describe pod` nor in /proc/<pid>/environ, and the server never inherits it.
KEY_MOUNT_DIR = "/etc/ascend-node/rendezvous-key"
KEY_ITEM = "key"


def render_key_secret(p: ManifestParams, key_text: str) -> dict[str, Any]:
    """The Secret `p.rendezvous_key_secret` holding `key_text` (a fresh random key: the
    caller makes it; this module stays pure)."""
    if p.rendezvous_key_secret is None:
        raise ConfigError("no rendezvous key Secret to render", "pass --rendezvous-key")
    metadata: dict[str, Any] = {"name": p.rendezvous_key_secret}
    if p.namespace is not None:
        metadata["namespace"] = p.namespace
    metadata["labels"] = {"app.kubernetes.io/instance": p.name,
                          "app.kubernetes.io/managed-by": "ascend-node"}
    return {"apiVersion": "v1", "kind": "Secret", "metadata": metadata, "type": "Opaque",
            "stringData": {KEY_ITEM: key_text}}


def _field_env(name: str, path: str) -> dict[str, Any]:
    return {"name": name, "valueFrom": {"fieldRef": {"fieldPath": path}}}


def _probe(period: int, failures: int, command: Optional[list[str]] = None) -> dict[str, Any]:
    return {"exec": {"command": list(command or STATUS_COMMAND)}, "periodSeconds": period,
            "timeoutSeconds": PROBE_TIMEOUT_S, "failureThreshold": failures}


def _volumes(p: ManifestParams) -> list[dict[str, Any]]:
    vols: list[dict[str, Any]] = [] if p.pvc is None else [
        {"name": "model", "persistentVolumeClaim": {"claimName": p.pvc}}]
    vols.append({"name": "shm", "emptyDir": {"medium": "Memory"}})
    if p.model_pvc is not None:
        vols.append({"name": "weights", "persistentVolumeClaim": {
            "claimName": p.model_pvc, "readOnly": True}})
    if _state_volume(p):
        vols.append({"name": "ascend-node-state", "emptyDir": {}})
    if p.mount_driver:
        # The node's vendor tools, read-only, typed so that a node without one fails the
        # pod at mount time (manifest_mounts.HOST_MOUNTS says whose instructions these are).
        vols += [{"name": name, "hostPath": {"path": path, "type": kind}}
                 for name, path, kind in HOST_MOUNTS]
    if p.rendezvous_key_secret is not None:
        vols.append({"name": "rendezvous-key", "secret": {
            "secretName": p.rendezvous_key_secret, "defaultMode": 0o440,
            "items": [{"key": KEY_ITEM, "path": KEY_ITEM}]}})
    if p.tls_secret is not None:
        vols.append({"name": "mindie-tls", "secret": {
            "secretName": p.tls_secret, "defaultMode": 0o400,
            "items": [{"key": key, "path": key} for key, _ in TLS_ITEMS]}})
    return vols


def render_rbac(p: ManifestParams) -> list[dict[str, Any]]:
    """With `--rendezvous kube`: the job's ServiceAccount, Role (only the verbs the agent
    uses, on the job's own ConfigMaps: `kube_layout.role_rules`, docs/deploy.md) and
    RoleBinding, applied before the Job; none for the volume."""
    if p.rendezvous != "kube" or p.namespace is None:
        return []
    return rbac_objects(p.name, p.namespace, p.nodes)


def render_yaml(p: ManifestParams) -> str:
    """The Job as a YAML document (for `kubectl apply -f -`), after its RBAC objects."""
    rbac = "".join("# the agent's least privilege for the rendezvous through the API "
                   f"(docs/deploy.md)\n{to_yaml(obj)}---\n" for obj in render_rbac(p))
    header = (f"# Volcano Job rendered by ascend-node: kind={p.kind} nodes={p.nodes} "
              f"npus_per_node={p.npus_per_node}\n")
    return rbac + header + to_yaml(render_job(p))


# --- a minimal YAML emitter for JSON-like data -------------------------------------

_MAX_IMPLICIT_KEY = 1000
_PLAIN = re.compile(r"^[A-Za-z_/][A-Za-z0-9_./-]*$")
# Words YAML 1.1 readers (PyYAML, older kubectl) turn into booleans or null.
_RESERVED = frozenset(["y", "n", "yes", "no", "on", "off", "true", "false", "null"])


def to_yaml(data: Any) -> str:
    """Block-style YAML for dicts with str keys, lists, str, int, bool and None.

    Floats are refused: YAML 1.1 readers take `1e+100` for a string, and a Job needs none.
    """
    return "\n".join(_lines(data)) + "\n"


def _lines(data: Any) -> list[str]:
    if isinstance(data, dict):
        if not data:
            return ["{}"]
        out: list[str] = []
        for key, value in data.items():
            if not isinstance(key, str):
                raise TypeError(f"YAML keys must be strings, got {key!r}")
            key_text = _scalar(key)
            if len(key_text) > _MAX_IMPLICIT_KEY:
                # YAML limits implicit keys to 1024 characters; use an explicit key.
                out.append(f"? {key_text}")
                key_text = ""
            if _literal(value):
                out.append(f"{key_text}: |")
                out.extend("  " + line for line in value[:-1].split("\n"))
            elif _is_block(value):
                out.append(f"{key_text}:")
                out.extend("  " + line for line in _lines(value))
            else:
                out.append(f"{key_text}: {_lines(value)[0]}")
        return out
    if isinstance(data, list):
        if not data:
            return ["[]"]
        out = []
        for item in data:
            sub = _lines(item)
            out.append("- " + sub[0])
            out.extend("  " + line for line in sub[1:])
        return out
    return [_scalar(data)]


def _literal(value: Any) -> bool:
    """A multi-line text (a file in a ConfigMap) that a `|` block holds exactly: printable
    ASCII lines, none empty or ending with a space, the first not starting with one, and
    one final newline (so that neither indentation nor chomping can change it)."""
    if not isinstance(value, str) or not value.endswith("\n") or value.endswith("\n\n"):
        return False
    lines = value[:-1].split("\n")
    return (len(lines) > 1 and all(line and line[-1] != " " and all(
        0x20 <= ord(ch) < 0x7F for ch in line) for line in lines)
        and not lines[0].startswith(" "))


def _is_block(value: Any) -> bool:
    return isinstance(value, (dict, list)) and bool(value)


def _scalar(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str):
        if _PLAIN.fullmatch(value) and value.lower() not in _RESERVED:
            return value
        return _quote(value)
    raise TypeError(f"cannot emit {type(value).__name__} as YAML")


def _quote(s: str) -> str:
    """A YAML double-quoted scalar, ASCII only (escapes valid in YAML 1.1 and 1.2)."""
    out = ['"']
    for ch in s:
        code = ord(ch)
        if ch in '"\\':
            out.append("\\" + ch)
        elif 0x20 <= code < 0x7F:
            out.append(ch)
        elif code <= 0xFF:
            out.append(f"\\x{code:02x}")
        elif code <= 0xFFFF:
            out.append(f"\\u{code:04x}")
        else:
            out.append(f"\\U{code:08x}")
    out.append('"')
    return "".join(out)
