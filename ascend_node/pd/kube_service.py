"""The PD service through the Kubernetes API (`--rendezvous kube`): `pd.service`'s reads and
the coordinators' announcements on ConfigMaps instead of the shared volume.

Each prefill or decode instance meets through its own objects, `<job>.<task>-rdzv-*`
(`kube_layout.JobIdentity.scope`), written by the ordinary rendezvous of its pods
(`chain.kube_table`). Each coordinator (and the controller's pod) publishes its addresses in
its own object `<job>.pd-<role>-<place>` (`kube_layout.service_object_name`): one writer per
object, created or replaced at the version read, owned by the vcjob. The controller pod's
`pd-table` reads them all and writes the global table where the controller reads it, in its
own pod (no shared volume). What counts as complete is `pd.service`'s rule: an instance's
*current* attempt with a table outcome, the table joined from its parts and checked against
the outcome's sha256.

Imported only for `--rendezvous kube` in a PD pod: the volume's pods never load the client.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from typing import Any, Optional

from ascend_node.kube.client import Client
from ascend_node.kube.errors import AlreadyExists, Conflict, NotFound
from ascend_node.kube.resources import CONFIGMAPS
from ascend_node.pd.global_table import ServicePod
from ascend_node.pd.roles import PdIdentity
from ascend_node.pd.service import InstanceState, ServicePodDoc, ServiceView, service_pod_doc
from ascend_node.ranktable import validate_rank_table
from ascend_node.rendezvous import kube_docs
from ascend_node.rendezvous.kube_layout import (
    JOB_NAME_LABEL,
    JOB_UID_LABEL,
    MANAGED_BY,
    MAX_PARTS,
    OBJECT_LABEL,
    JobIdentity,
    ObjectRefused,
    join_table,
    object_name,
    owner_reference,
    service_object_name,
    slot_selector,
    table_part,
)
from ascend_node.rendezvous.models import MemberDoc

log = logging.getLogger("ascend_node.pd")
POD_KEY = "pod.json"


def service_object(job: JobIdentity, doc: ServicePodDoc) -> dict[str, Any]:
    """A coordinator's or the controller's address object, labelled and owned like the
    rendezvous objects (`kube_layout.new_object`)."""
    return {
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": service_object_name(job.name, doc.task, doc.place),
                     "namespace": job.namespace,
                     "labels": {MANAGED_BY: "ascend-node", JOB_UID_LABEL: job.uid,
                                JOB_NAME_LABEL: job.name, OBJECT_LABEL: f"pd-{doc.task}"},
                     "ownerReferences": [owner_reference(job)]},
        "data": {POD_KEY: doc.model_dump_json()},
    }


def read_service_object(job: JobIdentity, obj: Mapping[str, Any], run_id: str, role: str
                        ) -> Optional[ServicePodDoc]:
    """The address document, only when the object is this job's of that role and for this
    run; anything else is nobody's (logged)."""
    meta = obj.get("metadata") or {}
    labels = meta.get("labels") or {}
    owners = meta.get("ownerReferences") or []
    if labels.get(JOB_UID_LABEL) != job.uid or labels.get(OBJECT_LABEL) != f"pd-{role}" or \
            not any(isinstance(o, dict) and o.get("uid") == job.uid for o in owners):
        log.warning("ignoring ConfigMap %s: not this job's %s", meta.get("name"), role)
        return None
    try:
        doc = ServicePodDoc.model_validate_json(str((obj.get("data") or {}).get(POD_KEY, "")))
    except ValueError as exc:
        log.warning("ignoring ConfigMap %s: %s", meta.get("name"), str(exc).splitlines()[0])
        return None
    return doc if doc.run_id == run_id and doc.task == role else None


def announce(client: Client, job: JobIdentity, run_id: str, me: PdIdentity,
             environ: Mapping[str, str]) -> ServicePodDoc:
    """`pd.service.announce` through the API: create the pod's object, or replace it at the
    version read (a restarted coordinator with its new address); a 409 is a re-read."""
    doc = service_pod_doc(run_id, me, environ)
    name = service_object_name(job.name, me.role, me.place)
    while True:
        new = service_object(job, doc)
        try:
            current = client.get(CONFIGMAPS, name)
        except NotFound:
            current = None
        try:
            if current is None:
                client.create(CONFIGMAPS, new)
            else:
                new["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"]
                client.replace(CONFIGMAPS, new)
            return doc
        except (AlreadyExists, Conflict) as exc:
            log.info("%s; reading it again", exc.cause)


def read_instance(client: Client, job: JobIdentity, run_id: str, task: str) -> InstanceState:
    """`pd.service.read_instance` through the API: the instance's table when its current
    attempt has one (run id `<run>-<task>`, as `pd.roles.instance_environ` gives its pods);
    what the API holds that is not a complete table is a reason to wait."""
    inst = JobIdentity(job.namespace, job.name, job.uid, task)
    run = f"{run_id}-{task}"
    try:
        current = client.get(CONFIGMAPS, object_name(inst.scope, "attempt"))
    except NotFound:
        return InstanceState(task, None, {}, "no attempt yet")
    attempt, outcome, refused = kube_docs.attempt_state(inst, current, run)
    if attempt is None:
        return InstanceState(task, None, {}, f"invalid: {refused}" if refused
                             else "no attempt yet")
    aid = attempt.attempt_id
    if outcome is None:
        return InstanceState(task, None, {}, f"attempt {aid} is still open")
    if outcome.result != "table":
        return InstanceState(task, None, {}, f"attempt {aid} aborted: {outcome.reason}")
    try:
        text = _table_text(client, inst, aid, outcome.ranktable_sha256)
    except ObjectRefused as exc:
        return InstanceState(task, None, {}, f"attempt {aid}'s table cannot be read: {exc}")
    table = json.loads(text)
    problems = validate_rank_table(table, "hccl")
    if problems:
        return InstanceState(task, None, {}, f"attempt {aid}'s table is invalid: {problems[0]}")
    hosts: dict[str, str] = {}
    for obj in client.list(CONFIGMAPS, slot_selector(inst)).get("items") or []:
        slot = kube_docs.slot_state(inst, obj, run, aid)
        if isinstance(slot, MemberDoc):
            hosts[slot.data.pod_ip] = slot.data.host_ip
    return InstanceState(task, table, hosts)


def _table_text(client: Client, inst: JobIdentity, aid: str, sha: str) -> str:
    try:
        first = client.get(CONFIGMAPS, object_name(inst.scope, "table", 0))
    except NotFound:
        raise ObjectRefused("its first part is missing") from None
    said = str((first.get("data") or {}).get("parts", ""))
    count = int(said) if said.isdigit() and 0 < int(said) <= MAX_PARTS else 1
    parts: list[Optional[bytes]] = [table_part(inst, first, 0, aid, sha, count)]
    for k in range(1, count):
        try:
            obj = client.get(CONFIGMAPS, object_name(inst.scope, "table", k))
        except NotFound:
            parts.append(None)
            continue
        parts.append(table_part(inst, obj, k, aid, sha, count))
    return join_table(parts, sha)


def read_service_pods(client: Client, job: JobIdentity, run_id: str
                      ) -> dict[str, list[ServicePod]]:
    found: dict[str, list[ServicePod]] = {"coordinator": [], "controller": []}
    for role in found:
        for place in ((0, 1) if role == "coordinator" else (0,)):
            try:
                obj = client.get(CONFIGMAPS, service_object_name(job.name, role, place))
            except NotFound:
                continue
            doc = read_service_object(job, obj, run_id, role)
            if doc is not None:
                found[role].append(ServicePod(doc.pod_ip, doc.host_ip))
    return found


def read_service(client: Client, job: JobIdentity, run_id: str, counts: Mapping[str, int]
                 ) -> ServiceView:
    """`pd.service.read_service` through the API: one get per instance (two more and a
    list for an instance whose table is complete) and up to three for the service pods."""
    tasks = [f"{role}-{i}" for role in ("prefill", "decode") for i in range(counts[role])]
    return ServiceView(tuple(read_instance(client, job, run_id, t) for t in tasks),
                       read_service_pods(client, job, run_id))
