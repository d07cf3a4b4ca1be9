"""How a launched Job ends, decided from what the API says (pure).

`launch` exits with the Job's outcome so the pipeline knows (issue 39, "How it ends"); the seed's
launcher exits 1 with no cause (github.com/tencentmusic/cube-studio at 852a7bd2,
job-template/job/volcano/launcher.py). Here the verdict is a function of the Volcano Job's
status and its pods' statuses:

* training, or `--until ended`: the Job `Completed` → 0; `Failed`, `Aborted` or `Terminated` →
  non-zero, naming the pod whose failure ended it and its termination message — the agent's
  own one-line cause, which it writes to the termination log (handoff/exec.py
  `write_termination_log`) — with the exit code that pod's cause maps to (`LAUNCH_EXIT`).
* `--until serving` (MindIE): 0 once the Job runs and every one of its pods is Ready; a Job that
  ends first is judged as above.

While the Job is not done, `pending_reason` says why from the scheduler's own words: the
PodGroup's `Unschedulable` condition (Volcano's gang plugin, e.g. `1/5 tasks in gang
unschedulable: ...`) or the newest scheduling event.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Optional

from ascend_node.errors import ClusterInconsistent, PeerTimeout

UNTIL = ("ended", "serving")

# Volcano's job phases (volcano.sh/apis pkg/apis/batch/v1alpha1 JobPhase).
ENDED_OK = ("Completed",)
ENDED_BAD = ("Failed", "Aborted", "Terminated")

# launch's own exit codes (docs/launch.md, "Exit codes"). 4 and 5 carry the failing pod's
# cause through to the pipeline unchanged: the agent's contract (docs/design.md, "Exit codes")
# already says which is retryable. Anything else a pod died of is the job's own failure (6).
EXIT_OK = 0
EXIT_RETRYABLE = PeerTimeout.exit_code  # 4: a pod's peers did not all arrive
EXIT_NOT_RETRYABLE = ClusterInconsistent.exit_code  # 5: the cluster cannot form a table
EXIT_JOB_FAILED = 6  # the workload failed (its command's exit, OOM, eviction, a lost node)
EXIT_TIMEOUT = 7  # --timeout passed before the verdict (the Job is deleted unless kept)
LAUNCH_EXIT = {PeerTimeout.exit_code: EXIT_RETRYABLE,
               ClusterInconsistent.exit_code: EXIT_NOT_RETRYABLE}

_HINTS = {
    EXIT_RETRYABLE: "retryable: the pods did not all meet in time (a slow pull, a node "
                    "lost); run the step again",
    EXIT_NOT_RETRYABLE: "not retryable: the cluster cannot form one rank table as it is; fix "
                        "what the cause names before running again",
    EXIT_JOB_FAILED: "the workload itself failed: its log is above, prefixed with its task "
                     "and index",
}


@dataclass(frozen=True)
class Failure:
    """The pod whose failure ended the Job, and what it died of."""

    pod: str
    task: str
    index: Optional[int]
    exit_code: Optional[int]  # None: no container exit (evicted, init failed to start)
    message: str  # the termination message's last line, or the kubelet's reason


@dataclass(frozen=True)
class Verdict:
    """`done` False: keep following. Otherwise exit with `exit_code`; `cause` is the last
    line (stderr as `ascend-node: error: <cause>` when non-zero), `hint` what to do."""

    done: bool
    exit_code: int = EXIT_OK
    cause: str = ""
    hint: str = ""
    failure: Optional[Failure] = None


NOT_DONE = Verdict(done=False)


def job_phase(job: Mapping[str, Any]) -> str:
    """The Job's `status.state.phase`, "" before Volcano's controller first wrote it."""
    return str(((job.get("status") or {}).get("state") or {}).get("phase") or "")


def pod_task_index(pod: Mapping[str, Any]) -> tuple[str, Optional[int]]:
    """(task, index) of a Volcano pod: the task from the annotation `volcano.sh/task-spec`,
    the index from the name `<job>-<task>-<index>` (Volcano's pod naming, which the manifest's
    hostname check relies on: jobspec.job.pod_names)."""
    meta = pod.get("metadata") or {}
    name = str(meta.get("name", ""))
    task = str((meta.get("annotations") or {}).get("volcano.sh/task-spec")
               or (meta.get("labels") or {}).get("volcano.sh/task-spec") or "")
    tail = name.rsplit("-", 1)
    index = int(tail[1]) if len(tail) == 2 and tail[1].isdigit() else None
    if not task and len(tail) == 2:
        task = tail[0].rsplit("-", 1)[-1]
    return task, index


def _terminated(pod: Mapping[str, Any]) -> Optional[Mapping[str, Any]]:
    """The first container's terminated state (Volcano's policies read the first container's
    exit code: jobspec/job.py, EXIT_CODE_ACTIONS), else a failed init container's."""
    status = pod.get("status") or {}
    containers = (pod.get("spec") or {}).get("containers") or [{}]
    first = containers[0].get("name")
    for cs in status.get("containerStatuses") or []:
        if cs.get("name") == first:
            term = (cs.get("state") or {}).get("terminated")
            if term:
                return term  # type: ignore[no-any-return]
    for cs in status.get("initContainerStatuses") or []:
        term = (cs.get("state") or {}).get("terminated")
        if term and term.get("exitCode", 0) != 0:
            return term  # type: ignore[no-any-return]
    return None


def _last_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1] if lines else ""


def failure_of(pod: Mapping[str, Any]) -> Optional[Failure]:
    """What a Failed pod died of; None for a pod that has not failed."""
    status = pod.get("status") or {}
    if status.get("phase") != "Failed":
        return None
    task, index = pod_task_index(pod)
    name = str((pod.get("metadata") or {}).get("name", ""))
    term = _terminated(pod)
    if term is None:
        # Evicted, a node lost, a deadline: the pod's own reason and message.
        why = " ".join(str(status.get(k, "")) for k in ("reason", "message")).strip()
        return Failure(name, task, index, None, why or "failed without a container exit")
    code = term.get("exitCode")
    message = _last_line(str(term.get("message") or "")) or str(term.get("reason") or "")
    return Failure(name, task, index, code if isinstance(code, int) else None, message)


def root_failure(pods: Sequence[Mapping[str, Any]]) -> Optional[Failure]:
    """The pod whose failure ended the Job. A RestartJob or AbortJob kills the other pods too
    (they end 137/143 or Failed without a cause of their own), so the agent's own codes (4, 5)
    come first, then the earliest to finish; the pod name breaks ties."""
    found: list[tuple[int, str, str, Failure]] = []
    for pod in pods:
        failure = failure_of(pod)
        if failure is None:
            continue
        term = _terminated(pod) or {}
        rank = 0 if failure.exit_code in LAUNCH_EXIT else (1 if failure.exit_code else 2)
        found.append((rank, str(term.get("finishedAt") or "~"), failure.pod, failure))
    return min(found, key=lambda f: f[:3])[3] if found else None


def _ready(pod: Mapping[str, Any]) -> bool:
    for cond in (pod.get("status") or {}).get("conditions") or []:
        if cond.get("type") == "Ready":
            return bool(cond.get("status") == "True")
    return False


def expected_pods(job: Mapping[str, Any]) -> int:
    """The pods the Job runs: the sum of its tasks' replicas."""
    return sum(int(t.get("replicas", 0)) for t in (job.get("spec") or {}).get("tasks") or [])


def decide(job: Mapping[str, Any], pods: Sequence[Mapping[str, Any]],
           until: str = "ended") -> Verdict:
    """The verdict for `job` and its current pods (module docstring)."""
    if until not in UNTIL:
        raise ValueError(f"until={until!r}")
    meta = job.get("metadata") or {}
    ref = f"job {meta.get('namespace', '')}/{meta.get('name', '')}"
    phase = job_phase(job)
    if phase in ENDED_OK:
        if until == "serving":
            return Verdict(True, EXIT_JOB_FAILED, f"{ref} Completed before it was serving: "
                           "every pod exited 0", "a MindIE server never finishes: its log is "
                           "above")
        return Verdict(True, EXIT_OK, f"{ref} Completed")
    if phase in ENDED_BAD:
        failure = root_failure(pods)
        if failure is None:
            return Verdict(True, EXIT_JOB_FAILED, f"{ref} {phase}: no failed pod left to name "
                           "(deleted, or never started)", _HINTS[EXIT_JOB_FAILED])
        code = LAUNCH_EXIT.get(failure.exit_code or 0, EXIT_JOB_FAILED)
        exited = (f"exited {failure.exit_code}" if failure.exit_code is not None
                  else "failed")
        where = f"{failure.task} {failure.index}" if failure.index is not None else failure.task
        return Verdict(True, code, f"{ref} {phase}: pod {failure.pod} ({where}) {exited}: "
                       f"{failure.message}", _HINTS[code], failure)
    if until == "serving" and phase == "Running":
        want = expected_pods(job)
        ready = [p for p in pods if _ready(p)
                 and not (p.get("metadata") or {}).get("deletionTimestamp")]
        if want and len(ready) >= want:
            return Verdict(True, EXIT_OK, f"{ref} serving: {len(ready)}/{want} pods Ready")
    return NOT_DONE


# Events that say why a Job waits, best first (what the kube bed's Volcano v1.10.0 records for a
# gang that cannot be placed: fixtures/volcano/gang-unschedulable.json). The PodGroup's own
# `Unschedulable` event carries the gang plugin's verdict; the Job's `PodGroupPending` repeats it
# behind a prefix; a pod's `FailedScheduling` is the default scheduler's kind of message, but
# under Volcano's gang plugin most of them say `Pod ns/x can possibly be assigned to node-2`:
# a node that *would* fit, not why the gang waits — those are skipped.
_REASON_EVENTS = (("PodGroup", "Unschedulable"), ("Job", "PodGroupPending"),
                  ("Pod", "FailedScheduling"))
_JOB_EVENT_PREFIX = re.compile(r"^PodGroup \S+ unschedule,reason: ")
_POSSIBLY = re.compile(r"^Pod \S+ can possibly be assigned to ")


def pending_reason(podgroups: Sequence[Mapping[str, Any]],
                   events: Sequence[Mapping[str, Any]]) -> Optional[str]:
    """Why the Job's pods are not running, in the scheduler's words: the newest `Unschedulable`
    condition (status True) of its PodGroup; else the newest Warning event of the best kind in
    `_REASON_EVENTS`; None when nothing says."""
    conds = []
    for group in podgroups:
        for cond in (group.get("status") or {}).get("conditions") or []:
            if cond.get("type") == "Unschedulable" and cond.get("status") == "True":
                conds.append((str(cond.get("lastTransitionTime") or ""),
                              str(cond.get("message") or cond.get("reason") or "")))
    if conds:
        return max(conds)[1] or None
    for kind, reason in _REASON_EVENTS:
        found = []
        for event in events:
            message = str(event.get("message") or "")
            if (event.get("type") != "Warning" or event.get("reason") != reason
                    or (event.get("involvedObject") or {}).get("kind") != kind
                    or not message or _POSSIBLY.match(message)):
                continue
            when = str(event.get("lastTimestamp") or event.get("eventTime") or "")
            found.append((when, _JOB_EVENT_PREFIX.sub("", message)))
        if found:
            return max(found)[1]
    return None


@dataclass(frozen=True)
class Progress:
    """What `launch` printed last, so each phase change and each new pending reason is
    printed once (watch events repeat the same state many times)."""

    phase: str = ""
    reason: Optional[str] = None


def progress_lines(before: Progress, phase: str,
                   reason: Optional[str]) -> tuple[Progress, list[str]]:
    """The lines to print for the Job now in `phase` (with `reason` while it waits)."""
    lines = []
    if phase != before.phase and phase:
        lines.append(f"job phase {phase}")
    waiting = phase in ("", "Pending", "Restarting", "Inqueue")
    if waiting and reason and (reason != before.reason or phase != before.phase):
        lines.append(f"pending: {reason}")
    return Progress(phase or before.phase, reason if waiting else None), lines
