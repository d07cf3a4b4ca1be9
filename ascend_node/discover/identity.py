"""Who this pod is in the job: Volcano environment -> NodeIdentity (pure).

Volcano's `env` plugin sets `VC_TASK_INDEX` (and the older `VK_TASK_INDEX`) to the pod's
index *within its task*; the `svc` plugin sets `VC_<TASK>_NUM` per task (volcano-sh/volcano
pkg/controllers/job/plugins/env/env.go and svc/, docs/user-guide/how_to_use_svc_plugin.md).
So master 0 and worker 0 both have task index 0: the global node index is the task index
for masters and `VC_MASTER_NUM + task index` for workers (the same rule Volcano's
`hcclrank` plugin writes into `hccl/rankIndex`).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Callable, Optional

from ascend_node.discover.netcheck import unusable_reason
from ascend_node.errors import ConfigError, refused_value

ROLES = ("master", "worker")
_RUN_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$")


@dataclass(frozen=True)
class NodeIdentity:
    role: str
    task_index: int
    master_count: int
    worker_count: int
    pod_ip: str
    host_ip: str
    incarnation: str
    sources: Mapping[str, str] = field(default_factory=dict)
    job_version: Optional[int] = None
    job_instance: Optional[str] = None

    @property
    def global_index(self) -> int:
        return global_index(self.role, self.task_index, self.master_count)

    @property
    def node_count(self) -> int:
        return self.master_count + self.worker_count

    @property
    def name(self) -> str:
        return node_name(self.global_index, self.master_count)


def global_index(role: str, task_index: int, master_count: int) -> int:
    return task_index if role == "master" else master_count + task_index


def node_name(index: int, master_count: int) -> str:
    """The contract's way to name a node: `worker 3 (node 4)`."""
    if index < master_count:
        return f"master {index} (node {index})"
    return f"worker {index - master_count} (node {index})"


def _count(environ: Mapping[str, str], name: str, default: Optional[int]) -> tuple[int, str]:
    raw = environ.get(name)
    if raw is None or not raw.strip():
        if default is None:
            raise ConfigError(
                f"{name} is not set",
                "run under a Volcano Job with the `svc` plugin, or export it "
                "(number of pods in that task)",
            )
        return default, "default"
    text = raw.strip()
    if not re.fullmatch(r"[0-9]{1,6}", text):
        raise ConfigError(
            f"{name}={raw!r} is not a non-negative integer",
            f"set {name} to the number of pods in that task",
        )
    return int(text), "environment"


def read_identity(
    environ: Mapping[str, str],
    default_route_ip: Callable[[], Optional[str]] = lambda: None,
    incarnation_fallback: Callable[[str], str] = lambda pod_ip: "",
) -> NodeIdentity:
    """Build the identity from the environment; raise ConfigError naming any bad value.

    The two callables are the only impure inputs (default-route address, fallback
    incarnation), injected so this function stays a table-testable pure function.
    """
    sources: dict[str, str] = {}

    raw_role = environ.get("ROLE")
    if raw_role is None or not raw_role.strip():
        raise ConfigError(
            "ROLE is not set",
            "set ROLE=master or ROLE=worker in the task's container env",
        )
    role = raw_role.strip().lower()
    if role not in ROLES:
        raise ConfigError(
            f"ROLE={raw_role!r} is not one of master, worker",
            "set ROLE=master or ROLE=worker (any case)",
        )
    sources["role"] = "ROLE"

    masters, src_m = _count(environ, "VC_MASTER_NUM", 0 if role == "worker" else None)
    workers, src_w = _count(environ, "VC_WORKER_NUM", 0 if role == "master" else None)
    sources["master_count"] = "VC_MASTER_NUM" if src_m == "environment" else "default (0)"
    sources["worker_count"] = "VC_WORKER_NUM" if src_w == "environment" else "default (0)"
    if masters + workers == 0:
        raise ConfigError(
            f"VC_MASTER_NUM={masters if src_m == 'environment' else '(unset)'} and "
            f"VC_WORKER_NUM={workers if src_w == 'environment' else '(unset)'}: "
            "the job has no nodes",
            "check the Volcano task replicas and the `svc` plugin",
        )

    index_var = "VC_TASK_INDEX" if environ.get("VC_TASK_INDEX", "").strip() else "VK_TASK_INDEX"
    raw_index = environ.get(index_var)
    if raw_index is None or not raw_index.strip():
        raise ConfigError(
            "VC_TASK_INDEX (or VK_TASK_INDEX) is not set",
            "enable Volcano's `env` plugin for the job, or export VC_TASK_INDEX",
        )
    if not re.fullmatch(r"[0-9]{1,6}", raw_index.strip()):
        raise ConfigError(
            f"{index_var}={raw_index!r} is not a non-negative integer",
            "it must be the pod's index within its task (0, 1, ...)",
        )
    task_index = int(raw_index.strip())
    limit = masters if role == "master" else workers
    count_var = "VC_MASTER_NUM" if role == "master" else "VC_WORKER_NUM"
    if task_index >= limit:
        raise ConfigError(
            f"{index_var}={task_index} is out of range for ROLE={role} with "
            f"{count_var}={limit}",
            f"the task index must be below {count_var}; check the task replicas",
        )
    sources["task_index"] = index_var

    pod_ip, pod_src = _pick_ip(environ, ("K8S_POD_IP", "POD_IP"), default_route_ip)
    sources["pod_ip"] = pod_src
    host_raw = environ.get("K8S_HOST_IP", "").strip()
    if host_raw:
        _check_ip("K8S_HOST_IP", host_raw)
        host_ip, sources["host_ip"] = host_raw, "K8S_HOST_IP"
    else:
        host_ip, sources["host_ip"] = pod_ip, "pod IP (K8S_HOST_IP unset)"

    uid = environ.get("POD_UID", "").strip()
    if uid:
        if not re.fullmatch(r"[A-Za-z0-9_.:-]{1,128}", uid):
            raise ConfigError(
                f"POD_UID={uid!r} contains characters outside [A-Za-z0-9_.:-]",
                "map it from the downward API field metadata.uid",
            )
        incarnation, sources["incarnation"] = uid, "POD_UID"
    else:
        incarnation = incarnation_fallback(pod_ip)
        sources["incarnation"] = "fallback (network namespace + boot id + hostname + pod IP)"
        if not incarnation:
            raise ConfigError(
                "POD_UID is not set and no fallback incarnation could be derived",
                "map POD_UID from the downward API field metadata.uid",
            )

    job_version = _job_version(environ, sources)
    job_instance = _job_instance(environ, sources)

    return NodeIdentity(
        role=role,
        task_index=task_index,
        master_count=masters,
        worker_count=workers,
        pod_ip=pod_ip,
        host_ip=host_ip,
        incarnation=incarnation,
        sources=sources,
        job_version=job_version,
        job_instance=job_instance,
    )


JOB_VERSION_ENV = "ASCEND_NODE_JOB_VERSION"


def _job_version(environ: Mapping[str, str], sources: dict[str, str]) -> Optional[int]:
    """Volcano's job version, when the pod maps it in (optional).

    Volcano bumps the `volcano.sh/job-version` annotation each time it kills and re-creates
    the whole job (RestartJob), and leaves it alone for RestartPod/Task (volcano-sh/volcano
    pkg/controllers/job/job_controller_util.go, `killPods`: "Job version is bumped only when
    job is killed"). Mapped into the environment through the downward API, it tells a
    re-created pod with unchanged addresses whether the table it finds is from an earlier
    start of the job. An unset annotation reaches us as an empty string.
    """
    raw = environ.get(JOB_VERSION_ENV, "").strip()
    if not raw:
        sources["job_version"] = "not set"
        return None
    if not re.fullmatch(r"[0-9]{1,9}", raw):
        raise ConfigError(
            f"{JOB_VERSION_ENV}={raw!r} is not a non-negative integer",
            "map it from the downward API field metadata.annotations['volcano.sh/job-version']",
        )
    sources["job_version"] = JOB_VERSION_ENV
    return int(raw)


JOB_INSTANCE_ENV = "ASCEND_NODE_JOB_INSTANCE"
# A pod group's name: `<job name>-<job UID>`, a DNS subdomain (at most 253 characters).
_JOB_INSTANCE_RE = re.compile(r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$")


def _job_instance(environ: Mapping[str, str], sources: dict[str, str]) -> Optional[str]:
    """Which Volcano Job this pod belongs to, when the pod maps it in (optional).

    A job version only orders the starts of one Volcano Job: deleting the Job and applying
    it again under the same name (the same run id) makes a new Job whose version counts
    from 0 again. Volcano names each pod's pod group `<job name>-<job UID>` in its
    `scheduling.k8s.io/group-name` annotation (volcano-sh/volcano v1.10.0,
    pkg/controllers/job/job_controller_util.go `createJobPod`), so that annotation, mapped
    through the downward API, tells a re-deployed Job from a later start of the same one.
    An unset annotation reaches us as an empty string.
    """
    raw = environ.get(JOB_INSTANCE_ENV, "").strip()
    if not raw:
        sources["job_instance"] = "not set"
        return None
    if not _JOB_INSTANCE_RE.fullmatch(raw):
        raise ConfigError(
            f"{JOB_INSTANCE_ENV}={raw[:300]!r} is not a pod group name (a DNS subdomain)",
            "map it from the downward API field "
            "metadata.annotations['scheduling.k8s.io/group-name']",
        )
    sources["job_instance"] = JOB_INSTANCE_ENV
    return raw


def _check_ip(name: str, value: str) -> None:
    reason = unusable_reason(value)
    if reason is not None:
        raise ConfigError(
            f"{name}={value!r} is unusable: {reason}",
            "it must be the pod's routable IP (downward API status.podIP / status.hostIP)",
        )


def read_pod_ip(
    environ: Mapping[str, str], default_route_ip: Callable[[], Optional[str]]
) -> tuple[str, str]:
    """The pod IP alone (K8S_POD_IP, POD_IP, else the default-route address) and its source,
    for sources that need no Volcano identity (MindCluster's hccl.json)."""
    return _pick_ip(environ, ("K8S_POD_IP", "POD_IP"), default_route_ip)


def _pick_ip(
    environ: Mapping[str, str],
    names: tuple[str, ...],
    default_route_ip: Callable[[], Optional[str]],
) -> tuple[str, str]:
    for name in names:
        value = environ.get(name, "").strip()
        if value:
            _check_ip(name, value)
            return value, name
    found = default_route_ip()
    if not found:
        raise ConfigError(
            "no pod IP: K8S_POD_IP and POD_IP are unset and no interface holds a default route",
            "map K8S_POD_IP from the downward API field status.podIP",
        )
    reason = unusable_reason(found)
    if reason is not None:
        raise ConfigError(
            f"default-route interface address {found!r} is unusable: {reason}",
            "map K8S_POD_IP from the downward API field status.podIP",
        )
    return found, "default-route interface"


def check_run_id(value: str, source: str) -> str:
    """A run id names files on a shared volume: refuse anything path-like or unsafe."""
    text = value
    if not _RUN_ID_RE.fullmatch(text) or ".." in text:
        raise refused_value(
            source,
            f"run id {value!r} (from {source}) is not a safe file-name part",
            "use 1-128 characters from [A-Za-z0-9_.-], starting with a letter or digit, "
            "without '..'",
        )
    return text


def run_id_from_volcano_hosts(environ: Mapping[str, str]) -> Optional[str]:
    """The Volcano job name, from `VC_<TASK>_HOSTS` (`<job>-<task>-<i>.<job>`), if present."""
    for key in sorted(environ):
        if key.startswith("VC_") and key.endswith("_HOSTS"):
            first = environ[key].split(",")[0].strip()
            if "." in first:
                job = first.split(".", 1)[1].split(".", 1)[0]
                if job and _RUN_ID_RE.fullmatch(job):
                    return job
    return None


def fallback_incarnation(pod_ip: str, hostname: str, boot_id: str, netns: str) -> str:
    """A value that survives a container restart and changes when the pod is re-created.

    The pod's network namespace is held by the sandbox (pause) container: it outlives
    container restarts and is new for a re-created pod. Inode numbers can be reused,
    so the host's boot id, the hostname and the pod IP are mixed in.
    """
    if not netns:
        return ""
    digest = hashlib.sha256("\0".join((netns, boot_id, hostname, pod_ip)).encode()).hexdigest()
    return "ns-" + digest[:20]
