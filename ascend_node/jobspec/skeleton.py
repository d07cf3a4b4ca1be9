"""What every Job kind ascend-node renders shares: the Job's head and each pod's head (pure).

A plain job (`job.render_job`) and a PD service (`pd_job.render_pd_job`) differ in their tasks
and containers, not in how Volcano must see them: the same API version, scheduler, queue, gang
(`minAvailable` = every pod), `env` and `svc` plugins, the labels `launch` selects an earlier
run by (`RUN_ID_LABEL` on the Job and on every pod), and pods that never restart in place
(Volcano's policies fire only on a *failed* pod: job.py, "How Volcano matches them"). Written
once here, so a fix to one kind's skeleton is a fix to both.
"""

from __future__ import annotations

import hashlib
import re
from typing import Any, Optional

API_VERSION = "batch.volcano.sh/v1alpha1"
MANAGED_BY = {"app.kubernetes.io/managed-by": "ascend-node"}

# MindCluster's node label for Atlas 900 A3 SuperPoD servers, by NPUs per pod (MC
# accelerator-type values `module-a3-16-super-pod`, `module-a3-8-super-pod`: Ascend/mind-cluster
# component/ascend-operator/pkg/ranktable/factory.go).
ACCELERATOR_TYPE_LABEL = "accelerator-type"
A3_SUPER_POD_TYPES = {16: "module-a3-16-super-pod", 8: "module-a3-8-super-pod"}

# The run id as a label on the Job and its pods, so `launch` finds an earlier run's Jobs by a
# label selector. The key is cube-studio's own (`run-id`: github.com/tencentmusic/cube-studio at
# 852a7bd2, job-template/job/volcano/launcher.py), so the platform's tools that select by it see
# ours too.
RUN_ID_LABEL = "run-id"
_LABEL_VALUE = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?$")


def run_id_label_value(run_id: str) -> str:
    """The label value for `run_id`: itself when Kubernetes accepts it as a label value (at
    most 63 characters, alphanumeric at both ends), else `h-` and 20 hex digits of its
    SHA-256 — a run id the agent accepts (up to 128 characters, may end in `.`, `_`, `-`)
    must still label its Job, and the launcher selects with this same function."""
    if _LABEL_VALUE.match(run_id):
        return run_id
    return "h-" + hashlib.sha256(run_id.encode("utf-8")).hexdigest()[:20]


def job_labels(app_name: str, instance: str, run_id: str) -> dict[str, str]:
    """The Job's own labels: what it is, which job, who rendered it, which run."""
    return {"app.kubernetes.io/name": app_name, "app.kubernetes.io/instance": instance,
            **MANAGED_BY, RUN_ID_LABEL: run_id_label_value(run_id)}


def pod_labels(app_name: str, instance: str, component: str, run_id: str) -> dict[str, str]:
    """A task's pod labels: the run's label too, so `launch` waits for an earlier run's pods."""
    return {"app.kubernetes.io/name": app_name, "app.kubernetes.io/instance": instance,
            "app.kubernetes.io/component": component, RUN_ID_LABEL: run_id_label_value(run_id)}


def job_object(name: str, namespace: Optional[str], labels: dict[str, str], queue: str,
               max_retry: int, svc_args: list[str], tasks: list[dict[str, Any]],
               policies: Optional[list[dict[str, Any]]] = None) -> dict[str, Any]:
    """The Volcano Job around `tasks`: gang-scheduled as a whole (`minAvailable` = every pod),
    the `env` plugin (VC_TASK_INDEX) and the `svc` plugin (hostnames, the peers' lists)."""
    metadata: dict[str, Any] = {"name": name}
    if namespace is not None:
        metadata["namespace"] = namespace
    metadata["labels"] = labels
    spec: dict[str, Any] = {
        "schedulerName": "volcano",
        "queue": queue,
        "minAvailable": sum(t["replicas"] for t in tasks),
        "maxRetry": max_retry,
        "plugins": {"env": [], "svc": svc_args},
    }
    if policies is not None:
        spec["policies"] = policies
    spec["tasks"] = tasks
    return {"apiVersion": API_VERSION, "kind": "Job", "metadata": metadata, "spec": spec}


def pod_head(run_as_user: Optional[int], a3_npus: Optional[int],
             spread: Optional[dict[str, str]]) -> dict[str, Any]:
    """A pod spec's head: never restarted in place; the user (`pod_security`); with `a3_npus`
    only A3 super-pod nodes of that size (so every pod reports a super pod and the agent builds
    rank table v1.2); with `spread` one pod per node among the pods carrying those labels."""
    spec: dict[str, Any] = {"restartPolicy": "Never"}
    if run_as_user is not None:
        spec["securityContext"] = pod_security(run_as_user)
    if a3_npus is not None:
        spec["nodeSelector"] = {ACCELERATOR_TYPE_LABEL: A3_SUPER_POD_TYPES[a3_npus]}
    if spread is not None:
        spec["affinity"] = {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [{
            "labelSelector": {"matchLabels": dict(spread)},
            "topologyKey": "kubernetes.io/hostname",
        }]}}
    return spec


def pod_security(uid: int) -> dict[str, Any]:
    """The pod's user: runAsUser/runAsGroup, and fsGroup so that the volumes that support
    ownership (emptyDir, most block PVCs; not NFS) are group-writable for it."""
    sc: dict[str, Any] = {"runAsUser": uid, "runAsGroup": uid}
    if uid != 0:
        sc["runAsNonRoot"] = True
        sc["fsGroup"] = uid
    return sc
