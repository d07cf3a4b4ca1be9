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


# What a retry brings up to date when it differs; everything else of these objects follows
# from the Job's name alone, so a retry reuses it as it is. A Role's rules name each node's
# rendezvous objects (`rendezvous.kube_layout.rbac_objects`): a retry with another
# --num_worker needs other names, or its new pods are refused (403). A PD service's ConfigMap
# holds the service's shape and MindIE's config. A Secret is kept: the rendezvous key of the
# earlier attempt serves as well as a new one, and the launcher may not read Secrets.
UP_TO_DATE = {"Role": ("rules",), "ConfigMap": ("data", "binaryData")}


def update_for(existing: dict[str, Any], wanted: dict[str, Any]) -> Optional[dict[str, Any]]:
    """The object to write over `existing` (compare-and-set at its resourceVersion) when
    what `wanted` sets of `UP_TO_DATE` differs from it; None when it is up to date."""
    fields = UP_TO_DATE.get(str(wanted.get("kind")), ())
    if all(existing.get(f) == wanted.get(f) for f in fields):
        return None
    meta = dict(wanted["metadata"],
                resourceVersion=existing.get("metadata", {}).get("resourceVersion"))
    return dict(wanted, metadata=meta)


def ensure_objects(client: Client, objects: list[dict[str, Any]]) -> list[str]:
    """Create each object, or bring the one of that name up to date (a retry of the run
    finds its predecessor's, named after the same Job: `update_for`); a line for each
    object created or updated."""
    said = []
    for obj in objects:
        res, ref = BEFORE_JOB[obj["kind"]], f"{obj['kind']}/{obj['metadata']['name']}"
        try:
            client.create(res, obj)
            said.append(f"created {ref}")
            continue
        except AlreadyExists:
            if obj["kind"] not in UP_TO_DATE:
                continue
        update = update_for(client.get(res, obj["metadata"]["name"]), obj)
        if update is not None:
            client.replace(res, update)
            fields = "/".join(UP_TO_DATE[obj["kind"]][:1])
            said.append(f"updated {ref}: the {fields} an earlier launch of this run left "
                        "differ from this one's")
    return said


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
