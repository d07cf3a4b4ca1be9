"""`report --rendezvous kube --job J`: every pod's timeline summary of one attempt, read from
the job's slot objects in the API (`summary.json` beside `slot.json`,
`rendezvous/kube_summary.py`) with the operator's kubeconfig, outside the cluster.

The same validation as on the volume (`collect.validate_summary`: run, attempt, node, sizes,
times) plus the API's own: an object that is not this vcjob's by uid and layout
(`kube_layout.ownership_problem`) is left out and named, never drawn. Times are each pod's own
clock (no shared file to stamp them). The volume's slot and outcome file times have no
counterpart here (an object's timestamps are whole seconds): the rows are the summaries'.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

from ascend_node.errors import ConfigError, UsageError
from ascend_node.kube.client import Client
from ascend_node.kube.resources import CONFIGMAPS
from ascend_node.rendezvous import kube_docs
from ascend_node.rendezvous.kube_layout import (
    INSTANCE_LABEL,
    JOB_NAME_LABEL,
    MANAGED_BY,
    NODE_LABEL,
    OBJECT_LABEL,
    JobIdentity,
    check_job_name,
    object_name,
    ownership_problem,
)
from ascend_node.rendezvous.kube_status import job_uid
from ascend_node.rendezvous.kube_summary import KEY
from ascend_node.report.collect import Collected, Ignored, validate_summary
from ascend_node.report.record import MAX_SUMMARY_BYTES, attempt_dir_name
from ascend_node.report.summary import NodeSummary


def summaries_of(job: JobIdentity, run_id: str, attempt: str,
                 objects: list[dict[str, Any]]) -> tuple[list[NodeSummary], list[Ignored]]:
    """The valid summaries of `attempt` among the job's slot objects, and what was left out
    and why (pure). A slot without a summary is no finding: its pod left none (yet)."""
    summaries: list[NodeSummary] = []
    ignored: list[Ignored] = []
    for obj in objects:
        meta = obj.get("metadata") or {}
        name = str(meta.get("name", "?"))
        where = f"ConfigMap {name}"
        label = str((meta.get("labels") or {}).get(NODE_LABEL, ""))
        if not label.isdigit() or name != object_name(job.scope, "node", int(label)):
            ignored.append(Ignored(where, "is not named for its node label"))
            continue
        problem = ownership_problem(job, obj, "node")
        if problem:
            ignored.append(Ignored(where, problem))
            continue
        text = (obj.get("data") or {}).get(KEY)
        if text is None:
            continue
        raw = text.encode() if isinstance(text, str) else b""
        if len(raw) > MAX_SUMMARY_BYTES:
            ignored.append(Ignored(where, f"summary of {len(raw)} bytes, over "
                                   f"{MAX_SUMMARY_BYTES}"))
            continue
        try:
            summaries.append(validate_summary(raw, run_id, attempt_dir_name(attempt),
                                              int(label)))
        except ValueError as exc:
            if "belongs to attempt" not in str(exc):  # an earlier attempt's: not drawn
                ignored.append(Ignored(where, str(exc)))
    return sorted(summaries, key=lambda s: s.global_index), ignored


def collect_from_api(client: Client, job: str, run_id: Optional[str] = None,
                     attempt: Optional[str] = None) -> Collected:
    """Every pod's summary of `attempt` (default: the one the attempt object names)."""
    check_job_name(job, "--job")
    found = client.list(CONFIGMAPS, f"{MANAGED_BY}=ascend-node,{JOB_NAME_LABEL}={job}"
                        ).get("items") or []
    where = f"namespace {client.namespace}"
    if any((o["metadata"].get("labels") or {}).get(INSTANCE_LABEL) for o in found):
        raise UsageError(f"job {job} is a PD service (one rendezvous per instance): report "
                         "--rendezvous kube draws one job's rendezvous",
                         "status --rendezvous kube --job shows each instance's")
    attempts = [o for o in found if (o["metadata"].get("labels") or {}).get(OBJECT_LABEL)
                == "attempt"]
    if not attempts:
        raise ConfigError(f"no rendezvous objects of job {job} in {where}",
                          "check --job and --namespace (the objects go with the vcjob)")
    uid, _ = job_uid(client, job, attempts)
    identity = JobIdentity(client.namespace, job, uid)
    run = run_id or job
    current, outcome, _ = kube_docs.attempt_state(
        identity, next((o for o in attempts if o["metadata"].get("name")
                        == object_name(job, "attempt")), None), run)
    chosen = attempt or (current.attempt_id if current is not None else None)
    if chosen is None:
        raise ConfigError(f"job {job} has no attempt of run {run!r} in {where}",
                          "the pods leave summaries once their rendezvous ends")
    slots = [o for o in found if (o["metadata"].get("labels") or {}).get(OBJECT_LABEL)
             == "node"]
    summaries, ignored = summaries_of(identity, run, chosen, slots)
    if not summaries:
        raise ConfigError(f"no pod summaries of job {job}, attempt {chosen!r} in {where}",
                          "pods leave them in their slot objects when their rendezvous "
                          "ends (agents of this version and later)")
    counts = sorted({s.node_count for s in summaries})
    node_count = max(counts)
    if len(counts) > 1:
        ignored.append(Ignored(f"job {job}", "summaries disagree on the node count "
                               f"({', '.join(map(str, counts))}); drawing {node_count}"))
    decision = (outcome.result if outcome is not None and current is not None
                and current.attempt_id == chosen else None)
    return Collected(run, chosen, Path(CONFIGMAPS.path(client.namespace, "")),
                     tuple(summaries), tuple(ignored), node_count, {}, None, None, decision)
