"""`simulate --rendezvous kube`: the simulated pods meet through a real API server.

What a pod of a `manifest --rendezvous kube` Job gets, made for the simulation from the
operator's kubeconfig (docs/simulate.md, "Through the Kubernetes API"):

* **an owner**: a Volcano Job (`batch.volcano.sh/v1alpha1`) named `sim-<hex>`, whose uid the
  pods' objects name in their `ownerReferences`. It must exist: kube-controller-manager's
  garbage collector deletes an object whose owner is gone, which would pull the rendezvous
  from under the pods. Its `schedulerName` names no scheduler, so no scheduler admits its
  PodGroup and Volcano's controller, which creates pods only for an admitted PodGroup, makes
  none: nothing runs, nothing is bound.
* **the job's ServiceAccount, Role and RoleBinding** exactly as `manifest` renders them
  (`kube_layout.rbac_objects`), and a token of that ServiceAccount from the TokenRequest API:
  the simulated pods hold no more right than real ones, so a Role that lacks a verb fails
  here as it would in the cluster.
* **the pod's files and variables**: a ServiceAccount directory per pod (token, the
  kubeconfig's CA, the namespace; `ASCEND_NODE_SERVICE_ACCOUNT_DIR` points the agent at it),
  KUBERNETES_SERVICE_HOST/PORT from the kubeconfig's server, and the downward API's view of
  Volcano's annotations (`ASCEND_NODE_JOB_NAME`, `ASCEND_NODE_POD_GROUP` = `<name>-<uid>`).

At the end the Job is deleted (the garbage collector then removes the rendezvous' objects
with it) and so are the ServiceAccount, Role and RoleBinding.
"""

from __future__ import annotations

import contextlib
import secrets
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional
from urllib.parse import urlsplit

from ascend_node.errors import ConfigError
from ascend_node.kube.client import Client
from ascend_node.kube.config import Endpoint
from ascend_node.kube.errors import Forbidden, KubeError, NotFound
from ascend_node.kube.resources import CONFIGMAPS, Call, Resource
from ascend_node.rendezvous.kube_layout import (
    JOB_API_VERSION,
    JOB_KIND,
    JOB_NAME_ENV,
    POD_GROUP_ENV,
    object_name,
    rbac_objects,
    service_account_name,
)

JOBS = Resource("batch.volcano.sh", "v1alpha1", "jobs", JOB_KIND)
SERVICE_ACCOUNTS = Resource("", "v1", "serviceaccounts", "ServiceAccount")
ROLES = Resource("rbac.authorization.k8s.io", "v1", "roles", "Role")
BINDINGS = Resource("rbac.authorization.k8s.io", "v1", "rolebindings", "RoleBinding")
RBAC = {"ServiceAccount": SERVICE_ACCOUNTS, "Role": ROLES, "RoleBinding": BINDINGS}
NO_SCHEDULER = "ascend-node-simulate-none"  # no scheduler by this name: nothing is bound
TOKEN_SECONDS = 3600
BINDING_WAIT = 30.0  # RBAC's authorizer sees a new RoleBinding within about a second


@dataclass
class KubeJob:
    """The simulation's job in the API: what each simulated pod is given."""

    client: Client
    endpoint: Endpoint
    name: str
    uid: str
    token: str
    ca_pem: str

    def pod_env(self, sa_dir: Path) -> dict[str, str]:
        """The pod's ServiceAccount directory, written, and the variables naming it."""
        sa_dir.mkdir(parents=True, exist_ok=True)
        (sa_dir / "token").write_text(self.token)
        (sa_dir / "ca.crt").write_text(self.ca_pem)
        (sa_dir / "namespace").write_text(self.endpoint.namespace)
        url = urlsplit(self.endpoint.server)
        return {"ASCEND_NODE_RENDEZVOUS": "kube",
                "ASCEND_NODE_SERVICE_ACCOUNT_DIR": str(sa_dir),
                "KUBERNETES_SERVICE_HOST": str(url.hostname),
                "KUBERNETES_SERVICE_PORT": str(url.port or 443),
                JOB_NAME_ENV: self.name, POD_GROUP_ENV: f"{self.name}-{self.uid}"}


def owner_job(name: str, namespace: str) -> dict[str, Any]:
    """A Volcano Job that owns the rendezvous' objects and never runs a pod."""
    return {
        "apiVersion": JOB_API_VERSION, "kind": JOB_KIND,
        "metadata": {"name": name, "namespace": namespace,
                     "labels": {"app.kubernetes.io/managed-by": "ascend-node",
                                "ascend-node.io/simulate": "true"}},
        "spec": {"schedulerName": NO_SCHEDULER, "minAvailable": 1, "tasks": [{
            "name": "simulate", "replicas": 1, "template": {"spec": {
                "restartPolicy": "Never",
                "containers": [{"name": "simulate", "image": "ascend-node-simulate:none",
                                "command": ["true"]}]}}}]},
    }


def _ca_pem(ep: Endpoint) -> str:
    if ep.ca_data:
        return ep.ca_data
    if ep.ca_file:
        return Path(ep.ca_file).read_text()
    raise ConfigError(f"{ep.source} names no CA for {ep.server}: the simulated pods verify "
                      "the API server with the CA a pod gets",
                      "add certificate-authority(-data) to the cluster's entry")


def open_job(ep: Endpoint, nodes: int) -> KubeJob:
    """Create the owner Job, the ServiceAccount, Role and RoleBinding, and a token; wait
    until RBAC lets the token read the job's attempt object. Anything made is removed again
    if a later step fails."""
    ca = _ca_pem(ep)
    client = Client(ep, timeout=30)
    name = f"sim-{secrets.token_hex(4)}"
    job = client.create(JOBS, owner_job(name, ep.namespace))
    made = KubeJob(client, ep, name, str(job["metadata"]["uid"]), "", ca)
    try:
        for obj in rbac_objects(name, ep.namespace, nodes):
            client.create(RBAC[obj["kind"]], obj)
        sa = service_account_name(name)
        answer = client.request(
            "POST", Call("create", SERVICE_ACCOUNTS, ep.namespace, sa),
            SERVICE_ACCOUNTS.path(ep.namespace, sa) + "/token",
            {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
             "spec": {"expirationSeconds": TOKEN_SECONDS}})
        made.token = str(answer["status"]["token"])
        _wait_binding(ep, made.token, name)
    except BaseException:
        close_job(made)
        raise
    return made


def _wait_binding(ep: Endpoint, token: str, job: str) -> None:
    """Until the token may read the job's attempt object (a 404: allowed, not there yet)."""
    probe = Client(Endpoint(server=ep.server, namespace=ep.namespace, source=ep.source,
                            ca_file=ep.ca_file, ca_data=ep.ca_data, token=token), timeout=30)
    deadline = time.monotonic() + BINDING_WAIT
    try:
        while True:
            try:
                probe.get(CONFIGMAPS, object_name(job, "attempt"))
                return
            except NotFound:
                return
            except Forbidden:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
    finally:
        probe.close()


def close_job(job: KubeJob) -> Optional[str]:
    """Delete the owner Job (its objects go with it) and the RBAC objects; a failure is
    returned as a line to print, never raised (the simulation's outcome stands)."""
    failed = []
    for res, name in ((JOBS, job.name), (BINDINGS, service_account_name(job.name)),
                      (ROLES, service_account_name(job.name)),
                      (SERVICE_ACCOUNTS, service_account_name(job.name))):
        try:
            job.client.delete(res, name)
        except NotFound:
            pass
        except KubeError as exc:
            failed.append(f"{res.plural}/{name}: {exc}")
    with contextlib.suppress(Exception):
        job.client.close()
    if failed:
        return "simulate: could not delete " + "; ".join(failed)
    return None


__all__ = ["KubeJob", "close_job", "open_job", "owner_job"]
