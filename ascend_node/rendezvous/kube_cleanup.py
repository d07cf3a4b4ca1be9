"""`ascend-node clean --rendezvous kube`: remove one vcjob's rendezvous objects from the API.

The volume's `cleanup.clean_run` for a job that met through the Kubernetes API, run by the
operator with their own kubeconfig (the pods' Role holds no `delete`: the garbage collector
removes the objects with their vcjob, docs/rendezvous.md "The Role"). For a job that is still
there and must meet afresh — a stuck or aborted attempt — without deleting the job.

Deletes only what the agent creates for that job: ConfigMaps labelled
`app.kubernetes.io/managed-by=ascend-node` and `ascend-node.io/job-name=<job>` (a PD
service's instance and service objects included), each at the version listed, so an object
rewritten in between is named and left (run clean again), never removed unseen. Nothing else
of the namespace is touched: not the job, its pods, its ServiceAccount, Role or RoleBinding.
"""

from __future__ import annotations

from ascend_node.kube.client import Client
from ascend_node.kube.errors import Conflict, NotFound
from ascend_node.kube.resources import CONFIGMAPS
from ascend_node.rendezvous.kube_layout import JOB_NAME_LABEL, MANAGED_BY, check_job_name


def job_selector(job: str) -> str:
    """The label selector of every object the agent wrote for vcjob `job`."""
    return f"{MANAGED_BY}=ascend-node,{JOB_NAME_LABEL}={job}"


def rendezvous_objects(client: Client, job: str) -> list[str]:
    """The names of the job's rendezvous objects in the client's namespace, sorted."""
    check_job_name(job, "--job")
    found = client.list(CONFIGMAPS, job_selector(job)).get("items") or []
    return sorted(str(o["metadata"]["name"]) for o in found)


def clean_job(client: Client, job: str) -> list[str]:
    """Delete the job's rendezvous objects; one line per object, as `clean_run` says per
    path: `removed`, `absent` (gone meanwhile), or `changed` (written since the list:
    left)."""
    check_job_name(job, "--job")
    found = client.list(CONFIGMAPS, job_selector(job)).get("items") or []
    where = f"namespace {client.namespace}"
    if not found:
        return [f"absent   no rendezvous objects of job {job} in {where}"]
    done: list[str] = []
    for obj in sorted(found, key=lambda o: str(o["metadata"]["name"])):
        meta = obj["metadata"]
        name = f"configmap/{meta['name']}"
        try:
            client.delete(CONFIGMAPS, str(meta["name"]), meta.get("resourceVersion"))
        except NotFound:
            done.append(f"absent   {name}")
            continue
        except Conflict:
            done.append(f"changed  {name} (written since it was listed: left; run clean "
                        "again)")
            continue
        done.append(f"removed  {name}")
    return done
