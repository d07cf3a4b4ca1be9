"""`ascend-node status --rendezvous kube --job J`: how far a job's rendezvous through the API
is, read from outside the cluster with the operator's kubeconfig.

In a pod, `status` reads the container's own state directory; an operator outside the cluster
has none, but the API holds what every pod of the job sees: node 0's attempt object (the
attempt, then its outcome) and its progress object (who is present, who is missing). One line
per rendezvous — the job's, or each instance's of a PD service — and the exit code of
`status`: 0 every table complete, 1 one aborted, 3 still waiting (or no attempt yet).

The reading is `kube_docs`' (the same checks a pod makes: the object must be this vcjob's by
uid and the layout's, its documents of this run); `scope_state` is pure. The vcjob's uid comes
from the vcjob itself when the operator may read it, else from the objects when they all name
one (said so in the line): a leftover of an earlier vcjob of the same name is not this job's.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Optional

from ascend_node.errors import ConfigError
from ascend_node.kube.client import Client
from ascend_node.kube.errors import NotFound
from ascend_node.kube.resources import CONFIGMAPS, Resource
from ascend_node.rendezvous import kube_docs
from ascend_node.rendezvous.kube_layout import (
    INSTANCE_LABEL,
    JOB_NAME_LABEL,
    JOB_UID_LABEL,
    MANAGED_BY,
    OBJECT_LABEL,
    JobIdentity,
    check_job_name,
    object_name,
)
from ascend_node.rendezvous.participant import names_of

VCJOBS = Resource("batch.volcano.sh", "v1alpha1", "jobs", "Job")
EXIT_DONE, EXIT_FAILED, EXIT_WAITING = 0, 1, 3


@dataclass(frozen=True)
class RendezvousState:
    scope: str  # the job's name, or `<job>.<task>` for a PD instance
    state: str  # "done" | "failed" | "waiting"
    line: str


def scope_state(job: JobIdentity, run_id: str, attempt_obj: Optional[Mapping[str, Any]],
                progress_obj: Optional[Mapping[str, Any]]) -> RendezvousState:
    """One rendezvous's state from its attempt and progress objects (pure)."""
    scope = job.scope
    attempt, outcome, refused = kube_docs.attempt_state(job, attempt_obj, run_id)
    if attempt is None:
        why = f"no attempt taken ({refused})" if refused else "no attempt yet"
        return RendezvousState(scope, "waiting", f"{scope}: {why}")
    head = (f"{scope}: attempt {attempt.attempt_id} (job version {attempt.job_version}, "
            f"{attempt.node_count} nodes)")
    if outcome is not None and outcome.result == "table":
        return RendezvousState(scope, "done", f"{head} complete: table sha256 "
                               f"{outcome.ranktable_sha256[:12]}")
    if outcome is not None:
        return RendezvousState(scope, "failed", f"{head} aborted: {outcome.reason}")
    progress = kube_docs.progress_state(job, progress_obj, run_id, attempt.attempt_id)
    if progress is None:
        return RendezvousState(scope, "waiting", f"{head} open: node 0 has published no "
                               "progress")
    missing = names_of(progress.missing, attempt.master_count) if progress.missing else "none"
    return RendezvousState(scope, "waiting", f"{head} open: {len(progress.present)} of "
                           f"{attempt.node_count} present; missing: {missing}")


def exit_code(states: list[RendezvousState]) -> int:
    if any(s.state == "failed" for s in states):
        return EXIT_FAILED
    return EXIT_DONE if states and all(s.state == "done" for s in states) else EXIT_WAITING


def job_uid(client: Client, job: str, found: list[dict[str, Any]]) -> tuple[str, str]:
    """(the vcjob's uid, where it came from)."""
    try:
        obj = client.get(VCJOBS, job)
        return str(obj["metadata"]["uid"]), "the vcjob"
    except NotFound:
        pass
    uids = {str((o["metadata"].get("labels") or {}).get(JOB_UID_LABEL)) for o in found}
    if len(uids) != 1:
        raise ConfigError(f"no vcjob {job} in namespace {client.namespace}, and its "
                          f"rendezvous objects name {len(uids)} job uids",
                          "check --job and --namespace (clean --rendezvous kube removes "
                          "leftovers)")
    return uids.pop(), "the objects (no vcjob of that name is readable)"


def job_states(client: Client, job: str, run_id: Optional[str] = None
               ) -> tuple[list[RendezvousState], str]:
    """Every rendezvous of vcjob `job` (the job's, or each PD instance's), and a note on
    where the uid came from."""
    check_job_name(job, "--job")
    found = client.list(CONFIGMAPS, f"{MANAGED_BY}=ascend-node,{JOB_NAME_LABEL}={job},"
                        f"{OBJECT_LABEL}=attempt").get("items") or []
    if not found:
        return [RendezvousState(job, "waiting", f"{job}: no attempt yet (no rendezvous "
                                f"objects in namespace {client.namespace})")], ""
    uid, source = job_uid(client, job, found)
    run = run_id or job
    instances = sorted({str((o["metadata"].get("labels") or {}).get(INSTANCE_LABEL, ""))
                        for o in found})
    states = []
    for task in instances:
        scoped = JobIdentity(client.namespace, job, uid, task)
        attempt = next(o for o in found if str((o["metadata"].get("labels") or {}).get(
            INSTANCE_LABEL, "")) == task)
        try:
            progress: Optional[dict[str, Any]] = client.get(
                CONFIGMAPS, object_name(scoped.scope, "progress"))
        except NotFound:
            progress = None
        states.append(scope_state(scoped, f"{run}-{task}" if task else run, attempt,
                                  progress))
    return states, f"uid {uid} from {source}"
