"""A pod's timeline summary through the API: `summary.json` beside `slot.json` in its slot.

On the volume each pod leaves `timeline/<attempt>/node-<g>.json` for `report`; through the API
there is no shared directory, so the pod puts the same document into its own slot object,
once its rendezvous has ended (table or failure). Why the slot: the pod already may `get` and
`update` it (the Role's names, no new verb or name), it is owned by the vcjob (deleted with
it), it is per pod (no two writers but twins), and `clean --rendezvous kube` already removes
it. The write keeps `slot.json` as read (compare-and-set at the version read: node 0's
decisions read `slot.json` only, so a summary never changes them) and is bounded: at most
`SUMMARY_BYTES` (64 KiB; a 16-NPU boot writes ~3.5 KiB) beside a slot document of a few KiB,
far below the API's 1 MiB. A pod that never published gets a slot holding only its summary
(no `slot.json`: node 0 reads it as absent, as before).

Never raises and never changes the pod's exit code: a summary that cannot be written is a
debug line and a gap in the report (`report` names the pod as having left none).
"""

from __future__ import annotations

import logging
from typing import Any, Optional

from ascend_node.kube.client import Client
from ascend_node.kube.errors import AlreadyExists, Conflict, KubeError, NotFound
from ascend_node.kube.resources import CONFIGMAPS
from ascend_node.rendezvous.kube_layout import (
    SUMMARY_BYTES,
    JobIdentity,
    new_object,
    object_name,
    ownership_problem,
)

log = logging.getLogger("ascend_node.report")

KEY = "summary.json"


def with_summary(job: JobIdentity, index: int, current: Optional[dict[str, Any]],
                 text: str) -> dict[str, Any]:
    """The slot object to write: what `current` holds (its `slot.json` untouched) plus the
    summary, at `current`'s version; a new slot holding the summary alone when there is
    none. ValueError when the summary is over `SUMMARY_BYTES` or `current` is not this
    job's slot (pure)."""
    if len(text.encode()) > SUMMARY_BYTES:
        raise ValueError(f"summary of {len(text.encode())} bytes, over {SUMMARY_BYTES}")
    data: dict[str, str] = {}
    if current is not None:
        problem = ownership_problem(job, current, "node")
        if problem:
            raise ValueError(problem)
        data = {k: v for k, v in (current.get("data") or {}).items()
                if k == "slot.json" and isinstance(v, str)}
    obj = new_object(job, "node", index, data={**data, KEY: text})
    if current is not None:
        obj["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"]
    return obj


def put_summary(client: Client, job: JobIdentity, index: int, text: str,
                wait: float = 5.0) -> bool:
    """Write the summary into slot `index` (3 tries at the version read, each call at most
    `wait` s); True when written. Never raises."""
    name = object_name(job.scope, "node", index)
    client.timeout = max(1.0, wait)
    try:
        for _ in range(3):
            try:
                current: Optional[dict[str, Any]] = client.get(CONFIGMAPS, name)
            except NotFound:
                current = None
            obj = with_summary(job, index, current, text)
            try:
                if current is None:
                    client.create(CONFIGMAPS, obj)
                else:
                    client.replace(CONFIGMAPS, obj)
                return True
            except (AlreadyExists, Conflict):
                continue  # another write came first: read it again
    except (KubeError, ValueError) as exc:
        log.debug("left no timeline summary in %s: %s", name,
                  getattr(exc, "cause", None) or exc)
    return False
