"""An earlier run's Jobs: the selector that finds them and which of them to delete.

cube-studio's launcher deletes every Job labelled with the step's run id before it creates
the new one (github.com/tencentmusic/cube-studio at 852a7bd2,
job-template/job/volcano/launcher.py): a retried
pipeline step must never meet the pods of its previous attempt (they would join the new
attempt's rendezvous with a stale view). The label is the one `manifest` renders
(`jobspec.skeleton.RUN_ID_LABEL`, `run_id_label_value`), so the selector is derived from the
same function and cannot drift from it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Optional

from ascend_node.jobspec.skeleton import RUN_ID_LABEL, run_id_label_value

MANAGED_BY = "app.kubernetes.io/managed-by=ascend-node"


def run_selector(run_id: str) -> str:
    """The label selector (the API's `labelSelector` query text) for the Jobs of `run_id`
    that ascend-node rendered: the run id alone would also match Jobs another tool labelled
    the same way (cube-studio's own launcher uses the same key), which are not ours to
    delete."""
    return f"{RUN_ID_LABEL}={run_id_label_value(run_id)},{MANAGED_BY}"


@dataclass(frozen=True)
class Deletion:
    """One Job to delete, and why it is (printed by `launch` before it deletes)."""

    namespace: str
    name: str
    uid: str
    phase: str  # status.state.phase, "" when the Job has no status yet
    reason: str

    def line(self) -> str:
        phase = self.phase or "no status yet"
        return f"delete job {self.namespace}/{self.name} ({phase}): {self.reason}"


def to_delete(jobs: Sequence[Mapping[str, Any]], run_id: str,
              new_name: str, created_uid: Optional[str] = None) -> list[Deletion]:
    """From a Job list (the items of a list by `run_selector`), the Jobs to delete before the
    new one is created, sorted by name.

    Every Job carrying this run's label is an earlier attempt, whatever its phase: a
    Completed one holds no pods but its name may be the new one's; a Running one holds pods
    that must not meet the new attempt. The label is checked again here (a list answered by
    a selector the server did not apply must not delete another run's Job). The Job this
    launch created itself (`created_uid`) is never in the list: a re-list after creating
    must not delete what it just made. A Job already being deleted (deletionTimestamp set)
    is still listed, so `launch` waits for it, with that reason.
    """
    want = run_id_label_value(run_id)
    out: list[Deletion] = []
    for job in jobs:
        meta = job.get("metadata") or {}
        labels = meta.get("labels") or {}
        if labels.get(RUN_ID_LABEL) != want:
            continue
        if labels.get("app.kubernetes.io/managed-by") != "ascend-node":
            continue
        uid = str(meta.get("uid", ""))
        if created_uid is not None and uid == created_uid:
            continue
        name = str(meta.get("name", ""))
        phase = str(((job.get("status") or {}).get("state") or {}).get("phase", "") or "")
        if meta.get("deletionTimestamp"):
            reason = "already being deleted; waiting for it and its pods to go"
        elif name == new_name:
            reason = f"an earlier attempt of run {run_id!r} under the new Job's name"
        else:
            reason = f"an earlier attempt of run {run_id!r}"
        out.append(Deletion(str(meta.get("namespace", "")), name, uid, phase, reason))
    return sorted(out, key=lambda d: (d.namespace, d.name))


def pods_left(pods: Sequence[Mapping[str, Any]], deleted: Sequence[Deletion]) -> list[str]:
    """The names of the pods that still belong to a deleted Job (Volcano labels each pod
    `volcano.sh/job-name`): the new Job is created only once this is empty, so a new attempt
    never meets the old pods (issue 39, "Before creating")."""
    names = {(d.namespace, d.name) for d in deleted}
    left = []
    for pod in pods:
        meta = pod.get("metadata") or {}
        job = (meta.get("labels") or {}).get("volcano.sh/job-name")
        if (str(meta.get("namespace", "")), job) in names:
            left.append(str(meta.get("name", "")))
    return sorted(left)
