"""A pure model of how Volcano's job controller turns pod events into job actions.

Copied as facts (not code) from volcano-sh/volcano:
- pkg/controllers/job/job_controller_handler.go `updatePod`: a pod whose phase becomes
  `Failed` raises one request with the event `PodFailed` and the exit code of the pod's
  FIRST container (`Status.ContainerStatuses[0].State.Terminated.ExitCode`; init containers
  are not looked at); a pod that succeeds raises `TaskCompleted` only when its whole task
  has; any other change raises `OutOfSync`. `deletePod`: a deleted pod (evicted, its node
  lost, killed by a restart) raises `PodEvicted` with no exit code.
- job_controller_util.go `applyPolicies`: an outdated request (its pod's job version below
  the job's) is `SyncJob`; then the task's policies, then the job's, in order: the first
  policy whose event list holds the request's event (or `*`), or whose exitCode equals the
  request's, gives the action; no match is `SyncJob`.
- state/running.go: `RestartJob` kills the pods, RetryCount += 1, phase Restarting;
  `AbortJob` kills them and aborts. state/restarting.go: RetryCount >= maxRetry -> Failed,
  else the job starts again (Pending), with its version bumped.

Checked against the real controller (tests/test_kube_policies.py, Volcano v1.10.0): the
restarts, the abort and the end after maxRetry agree. Two details the model leaves out:
the version rises once per kill pass (two or more per restart, not one; only its order is
used here; tests/test_kube_jobs.py saw 0 -> 2 with the nodes' agent running the pods), and
`AbortJob` keeps a pod that already failed (its logs stay readable).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Optional

SYNC = "SyncJob"


@dataclass(frozen=True)
class PodEvent:
    """What happened to one pod: `failed` (with the first container's exit code),
    `deleted`, `succeeded` (the last pod of its task to succeed: Volcano raises
    TaskCompleted only then), `running`; `version` is the pod's job version."""

    what: str
    exit_code: int = 0
    task: str = "master"
    version: int = 0


@dataclass(frozen=True)
class Request:
    event: str
    exit_code: int
    task: str
    version: int


def request_for(pod: PodEvent) -> Request:
    event = {"failed": "PodFailed", "deleted": "PodEvicted", "succeeded": "TaskCompleted",
             "running": "OutOfSync"}[pod.what]
    code = pod.exit_code if pod.what == "failed" else 0
    return Request(event, code, pod.task, pod.version)


def _events(policy: Mapping[str, Any]) -> list[str]:
    out = list(policy.get("events") or [])
    if policy.get("event"):
        out.append(policy["event"])
    return out


def _match(policies: Sequence[Mapping[str, Any]], req: Request) -> Optional[str]:
    for policy in policies:
        events = _events(policy)
        if events and (req.event in events or "*" in events):
            return str(policy["action"])
        if policy.get("exitCode") is not None and policy["exitCode"] == req.exit_code:
            return str(policy["action"])
    return None


def apply_policies(job: Mapping[str, Any], req: Request, job_version: int) -> str:
    """The action Volcano takes for `req` on `job` (a rendered Job dict)."""
    if req.event == "OutOfSync" or req.version < job_version:
        return SYNC
    spec = job["spec"]
    for task in spec["tasks"]:
        if task["name"] == req.task:
            found = _match(task.get("policies") or [], req)
            if found:
                return found
            break
    return _match(spec.get("policies") or [], req) or SYNC


@dataclass
class JobRun:
    """One Job's life under a sequence of pod events: its phase, retries and actions.

    `RestartTask` deletes and re-creates that task's pods only: no retry counted, no new
    job version - the action's documented meaning (volcano.sh/apis bus/v1alpha1
    actions.go), which Volcano v1.10.0's controller does not carry out (state/running.go
    has no case for it: tests/test_kube_policies.py, tests/test_kube_jobs.py)."""

    job: Mapping[str, Any]
    phase: str = "Running"
    retry_count: int = 0
    version: int = 0
    starts: int = 1
    task_restarts: dict[str, int] = field(default_factory=dict)

    def on(self, pod: PodEvent) -> str:
        if self.phase not in ("Running", "Pending"):
            return "ignored"
        action = apply_policies(self.job, request_for(pod), self.version)
        if action == "RestartJob":
            self.retry_count += 1
            if self.retry_count >= self.job["spec"].get("maxRetry", 3):
                self.phase = "Failed"
            else:
                self.version += 1
                self.starts += 1
                self.phase = "Running"
        elif action == "RestartTask":
            self.task_restarts[pod.task] = self.task_restarts.get(pod.task, 0) + 1
        elif action == "AbortJob":
            self.phase = "Aborted"
        return action
