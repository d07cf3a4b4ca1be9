"""The API side of `launch` (the thin edge): the Jobs of an earlier run, read through the
product's client (`ascend_node.kube`); the decisions stay in `earlier_run`."""

from __future__ import annotations

from typing import Any, Optional

from ascend_node.jobspec.job import to_yaml
from ascend_node.kube.client import Client
from ascend_node.kube.errors import AlreadyExists
from ascend_node.kube.resources import Resource
from ascend_node.launch.earlier_run import Deletion, run_selector, to_delete

JOBS = Resource("batch.volcano.sh", "v1alpha1", "jobs", "Job")
# What the Job's pods need before they exist (`jobspec.request.Rendered.before`): the job's own
# ServiceAccount, Role and RoleBinding (`--rendezvous kube`: its pods are refused by the
# ServiceAccount admission plugin until they exist), the rendezvous key's Secret
# (`--rendezvous-key`) and a PD service's ConfigMap (`--kind mindie-pd`).
BEFORE_JOB = {
    "ServiceAccount": Resource("", "v1", "serviceaccounts", "ServiceAccount"),
    "Role": Resource("rbac.authorization.k8s.io", "v1", "roles", "Role"),
    "RoleBinding": Resource("rbac.authorization.k8s.io", "v1", "rolebindings", "RoleBinding"),
    "Secret": Resource("", "v1", "secrets", "Secret"),
    "ConfigMap": Resource("", "v1", "configmaps", "ConfigMap"),
}


def ensure_objects(client: Client, objects: list[dict[str, Any]]) -> list[str]:
    """Create each object unless it exists (a retry of the run reuses its predecessor's,
    which are named after the same Job); the `Kind/name` of those created."""
    made = []
    for obj in objects:
        try:
            client.create(BEFORE_JOB[obj["kind"]], obj)
            made.append(f"{obj['kind']}/{obj['metadata']['name']}")
        except AlreadyExists:
            pass
    return made


def earlier_jobs(client: Client, run_id: str, new_name: str,
                 created_uid: Optional[str] = None) -> list[Deletion]:
    """The Jobs of `run_id` to delete before `new_name` is created (one list call)."""
    items = client.list(JOBS, label_selector=run_selector(run_id)).get("items") or []
    return to_delete(items, run_id, new_name, created_uid)


def dry_run_text(deletions: list[Deletion], job: dict[str, Any],
                 objects: Optional[list[dict[str, Any]]] = None) -> str:
    """What `launch --dry-run` prints: each Job it would delete (one line each, as `# ` YAML
    comments, so the output stays one valid YAML document), the job's RBAC objects it would
    create if absent, then the Job it would create."""
    head = [f"# would {d.line()}" for d in deletions] or ["# no earlier run's Job to delete"]
    if objects:
        head.append("# would create if absent: " + ", ".join(
            f"{o['kind']}/{o['metadata']['name']}" for o in objects))
    return "\n".join(head) + "\n# would create:\n" + to_yaml(job)
