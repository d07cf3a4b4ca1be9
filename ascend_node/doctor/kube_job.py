"""`ascend-node doctor --rendezvous kube --job J`: a job that meets through the Kubernetes
API, checked from outside the cluster with the operator's kubeconfig.

In a pod, `doctor` checks its node; from outside, what can stop a job meeting through the
API is in the API: the job's Role missing a call one of its pods makes (every pod would exit
1 naming it), the RoleBinding not binding the pods' ServiceAccount, objects under the job's
names that are not this vcjob's (leftovers of an earlier vcjob of the same name, or another
job's), and how far each rendezvous is (`rendezvous.kube_status`). The judging functions are
pure (they take the objects read); `job_checks` reads them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Optional

from ascend_node.doctor.report import CheckResult, Finding, ok, skip, verdict
from ascend_node.kube.client import Client
from ascend_node.kube.errors import NotFound
from ascend_node.kube.resources import CONFIGMAPS, Resource
from ascend_node.rendezvous import kube_docs
from ascend_node.rendezvous.kube_layout import (
    INSTANCE_LABEL,
    JOB_NAME_LABEL,
    MANAGED_BY,
    OBJECT_LABEL,
    JobIdentity,
    check_job_name,
    ownership_problem,
    service_account_name,
)
from ascend_node.rendezvous.kube_status import RendezvousState, job_states, job_uid

ROLES = Resource("rbac.authorization.k8s.io", "v1", "roles", "Role")
BINDINGS = Resource("rbac.authorization.k8s.io", "v1", "rolebindings", "RoleBinding")


def check_role(job: str, role: Optional[Mapping[str, Any]],
               scopes: Mapping[str, int]) -> CheckResult:
    """Every call every pod of each rendezvous (`scopes`: scope -> node count) makes is
    allowed by the Role (`kube_docs.needed_calls`, the pods' own check before their wait)."""
    name = service_account_name(job)
    if role is None:
        return CheckResult("kube.role", "fail", f"no Role {name}: every pod would exit 1 on "
                           "its first call", "render the job with `ascend-node manifest "
                           "--rendezvous kube` and apply its Role")
    if not scopes:
        return skip("kube.role", "no attempt yet: the pods' count is not known")
    rules = role.get("rules") or []
    findings = []
    for scope, nodes in sorted(scopes.items()):
        for index in range(nodes):
            denied = kube_docs.first_denied(rules, kube_docs.needed_calls(scope, index, nodes))
            if denied is not None:
                verb, what = denied
                findings.append(Finding("fail", f"{scope} node {index}: Role {name} does not "
                                        f"allow {verb} on configmaps{'/' + what if what else ''}",
                                        "apply the Role `manifest --rendezvous kube` renders "
                                        "for this job's shape"))
                break
    return verdict("kube.role", findings, f"Role {name} allows every call of the "
                   f"{sum(scopes.values())} pod(s) of {len(scopes)} rendezvous")


def check_binding(job: str, namespace: str, binding: Optional[Mapping[str, Any]]
                  ) -> CheckResult:
    name = service_account_name(job)
    if binding is None:
        return CheckResult("kube.binding", "fail", f"no RoleBinding {name}",
                           "apply the RoleBinding `manifest --rendezvous kube` renders")
    ref = binding.get("roleRef") or {}
    subjects = binding.get("subjects") or []
    bound = any(s.get("kind") == "ServiceAccount" and s.get("name") == name
                and s.get("namespace", namespace) == namespace for s in subjects
                if isinstance(s, Mapping))
    if ref.get("kind") != "Role" or ref.get("name") != name or not bound:
        return CheckResult("kube.binding", "fail", f"RoleBinding {name} does not bind "
                           f"ServiceAccount {name} to Role {name}", "apply the RoleBinding "
                           "`manifest --rendezvous kube` renders")
    return ok("kube.binding", f"RoleBinding {name} binds ServiceAccount {name} to Role {name}")


def check_objects(job: JobIdentity, objects: Sequence[Mapping[str, Any]]) -> CheckResult:
    """Every object under the job's label is this vcjob's (uid in label and owner)."""
    if not objects:
        return skip("kube.objects", f"no rendezvous objects of job {job.name} yet")
    findings = []
    for obj in objects:
        labels = (obj.get("metadata") or {}).get("labels") or {}
        scoped = JobIdentity(job.namespace, job.name, job.uid,
                             str(labels.get(INSTANCE_LABEL, "")))
        problem = ownership_problem(scoped, obj, str(labels.get(OBJECT_LABEL, "")))
        if problem:
            findings.append(Finding("warn", problem, "a leftover of an earlier vcjob of this "
                                    "name is taken over by the pods; `clean --rendezvous kube "
                                    f"--job {job.name}` removes it"))
    return verdict("kube.objects", findings, f"{len(objects)} object(s), every one owned by "
                   f"vcjob {job.name} (uid {job.uid})")


def check_rendezvous(states: Sequence[RendezvousState]) -> CheckResult:
    status = {"done": "ok", "waiting": "warn", "failed": "fail"}
    findings = [Finding(status[s.state], s.line,  # type: ignore[arg-type]
                        "`ascend-node report` and the pods' logs name the cause")
                for s in states if s.state != "done"]
    return verdict("kube.rendezvous", findings, "; ".join(s.line for s in states))


def job_checks(client: Client, job: str, run_id: Optional[str] = None
               ) -> list[CheckResult]:
    """Read the job's Role, RoleBinding and objects, and judge them."""
    check_job_name(job, "--job")
    objects = client.list(CONFIGMAPS, f"{MANAGED_BY}=ascend-node,{JOB_NAME_LABEL}={job}"
                          ).get("items") or []
    states, _ = job_states(client, job, run_id)
    attempts = [o for o in objects
                if ((o.get("metadata") or {}).get("labels") or {}).get(OBJECT_LABEL) == "attempt"]
    checks = []
    try:
        role: Optional[dict[str, Any]] = client.get(ROLES, service_account_name(job))
    except NotFound:
        role = None
    try:
        binding: Optional[dict[str, Any]] = client.get(BINDINGS, service_account_name(job))
    except NotFound:
        binding = None
    scopes: dict[str, int] = {}
    uid = ""
    if attempts:
        uid, _ = job_uid(client, job, attempts)
        for obj in attempts:
            task = str(((obj.get("metadata") or {}).get("labels") or {}).get(INSTANCE_LABEL, ""))
            scoped = JobIdentity(client.namespace, job, uid, task)
            run = run_id or job
            attempt, _, _ = kube_docs.attempt_state(scoped, obj,
                                                    f"{run}-{task}" if task else run)
            if attempt is not None:
                scopes[scoped.scope] = attempt.node_count
    checks.append(check_role(job, role, scopes))
    checks.append(check_binding(job, client.namespace, binding))
    checks.append(check_objects(JobIdentity(client.namespace, job, uid), objects)
                  if uid else skip("kube.objects", f"no attempt of job {job} yet"))
    checks.append(check_rendezvous(states))
    return checks
