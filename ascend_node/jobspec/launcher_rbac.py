"""The launcher's own ServiceAccount, Role and RoleBinding (`manifest --launcher-rbac NAME`).

`ascend-node launch` runs in a pipeline step's pod under a ServiceAccount of the pipeline's
namespace (docs/launch.md). Least privilege is what its calls need, one rule each, and no more:
nothing cluster-wide, no Secrets, no update of a Job, no pod deletion (deleting the Job lets
Volcano and the garbage collector remove its pods).

With the rendezvous through the API (the default without a shared PVC) the launcher also
creates each job's own ServiceAccount, Role and RoleBinding (`rendezvous.kube_layout`). RBAC
refuses to create a Role granting what its creator does not hold, and a RoleBinding to a Role
whose permissions its creator does not hold (Kubernetes RBAC, "Privilege escalation
prevention and bootstrapping": https://kubernetes.io/docs/reference/access-authn-authz/rbac/),
so the launcher holds the job Role's verbs on ConfigMaps itself — on all of them, as the
names of a job's ConfigMaps are known only per job.
"""

from __future__ import annotations

from typing import Any

RULES: tuple[tuple[str, str, tuple[str, ...], str], ...] = (
    ("batch.volcano.sh", "jobs", ("get", "list", "watch", "create", "delete"),
     "find the earlier run's Jobs by label, delete them, create and follow the new one, "
     "delete it on a pipeline stop"),
    ("", "pods", ("list", "watch"), "wait until the earlier run's pods are gone; the verdict "
     "reads the pods' exit codes and termination messages"),
    ("", "pods/log", ("get",), "stream every pod's log (follow=true, resumed with "
     "sinceTime)"),
    ("scheduling.volcano.sh", "podgroups", ("list",), "why the Job is pending (the gang "
     "plugin's Unschedulable condition)"),
    ("", "events", ("list",), "why the Job is pending (the scheduler's events)"),
    ("", "serviceaccounts", ("create",), "the job's own ServiceAccount (rendezvous through "
     "the API)"),
    ("rbac.authorization.k8s.io", "roles", ("create", "get", "update"), "the job's own Role; "
     "a retry of the run with another number of pods brings its rules up to date"),
    ("rbac.authorization.k8s.io", "rolebindings", ("create",), "the job's own RoleBinding"),
    ("", "configmaps", ("create", "get", "update", "list", "watch"), "held so that the job's "
     "Role (these verbs on the job's ConfigMaps) may be created and bound: RBAC's escalation "
     "rule"),
)


def launcher_rbac(name: str, namespace: str) -> list[dict[str, Any]]:
    """The launcher's ServiceAccount `name`, its Role and RoleBinding in `namespace`."""
    meta = {"name": name, "namespace": namespace,
            "labels": {"app.kubernetes.io/managed-by": "ascend-node",
                       "app.kubernetes.io/component": "launcher"}}
    rules = [{"apiGroups": [group], "resources": [resource], "verbs": list(verbs)}
             for group, resource, verbs, _ in RULES]
    return [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": dict(meta)},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": dict(meta),
         "rules": rules},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
         "metadata": dict(meta),
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
         "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": namespace}]},
    ]
