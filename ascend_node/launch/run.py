"""The API side of a launch that runs (the thin edge): delete the earlier run's Jobs and wait
until their pods are gone, create the Job, follow it by watches to the verdict, and delete it
on a pipeline stop. Each decision is the pure modules' (`earlier_run`, `verdict`); this module
only calls the API (`ascend_node.kube`) and says what it does through `say`.

Not built yet: following the pods' logs (`log_follow` holds the bookkeeping).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Mapping
from typing import Any, Callable, ClassVar, Optional

from ascend_node.errors import AscendNodeError
from ascend_node.jobspec.skeleton import RUN_ID_LABEL, run_id_label_value
from ascend_node.kube.client import Client
from ascend_node.kube.errors import NotFound
from ascend_node.kube.resources import PODS, Resource
from ascend_node.launch.earlier_run import Deletion, pods_left
from ascend_node.launch.submit import JOBS
from ascend_node.launch.verdict import (
    EXIT_JOB_FAILED,
    EXIT_NOT_RETRYABLE,
    EXIT_RETRYABLE,
    EXIT_TIMEOUT,
    Progress,
    Verdict,
    decide,
    failure_of,
    job_phase,
    pending_reason,
    progress_lines,
)

PODGROUPS = Resource("scheduling.volcano.sh", "v1beta1", "podgroups", "PodGroup")
EVENTS = Resource("", "v1", "events", "Event")
WATCH_S = 10  # the longest a watch is held before the state is read again (no long polls)


class JobFailedRetryable(AscendNodeError):
    exit_code: ClassVar[int] = EXIT_RETRYABLE


class JobFailedNotRetryable(AscendNodeError):
    exit_code: ClassVar[int] = EXIT_NOT_RETRYABLE


class JobFailed(AscendNodeError):
    exit_code: ClassVar[int] = EXIT_JOB_FAILED


class LaunchTimeout(AscendNodeError):
    exit_code: ClassVar[int] = EXIT_TIMEOUT


_BY_CODE: dict[int, type[AscendNodeError]] = {
    EXIT_RETRYABLE: JobFailedRetryable, EXIT_NOT_RETRYABLE: JobFailedNotRetryable}


def raise_for(verdict: Verdict) -> None:
    """A non-zero verdict as the error the command line prints (cause last, its exit code)."""
    if verdict.exit_code:
        raise _BY_CODE.get(verdict.exit_code, JobFailed)(verdict.cause, verdict.hint)


def _remaining(deadline: float, what: str) -> float:
    left = deadline - time.monotonic()
    if left <= 0:
        raise LaunchTimeout(f"--timeout passed while {what}",
                            "raise --timeout, or see why with kubectl describe")
    return left


def _wait_for_change(client: Client, res: Resource, rv: Optional[str], selector: Optional[str],
                     seconds: float, field_selector: Optional[str] = None) -> None:
    """Block until something of `res` under `selector` changes after `rv`, at most
    `seconds` (a watch, not a poll: it returns at the first event)."""
    for event in client.watch(res, rv, label_selector=selector,
                              timeout_seconds=max(1, int(seconds)),
                              field_selector=field_selector):
        if event.get("type") != "BOOKMARK":
            return


def delete_earlier(client: Client, run_id: str, deletions: list[Deletion],
                   say: Callable[[str], None], deadline: float) -> None:
    """Delete each Job and wait until it and every pod of it are gone."""
    for d in deletions:
        say(d.line())
        with contextlib.suppress(NotFound):  # gone already: what we wanted
            client.delete(JOBS, d.name)
    if not deletions:
        return
    names = {d.name for d in deletions}
    pod_selector = f"{RUN_ID_LABEL}={run_id_label_value(run_id)}"
    said = False
    while True:
        jobs = [j for j in client.list(JOBS).get("items") or []
                if j["metadata"]["name"] in names]
        listed = client.list(PODS, label_selector=pod_selector)
        left = pods_left(listed.get("items") or [], deletions)
        if not jobs and not left:
            say(f"the earlier run's {len(deletions)} job(s) and their pods are gone")
            return
        if not said:
            say(f"waiting for {len(left)} pod(s) of the earlier run to go: {', '.join(left)}"
                if left else "waiting for the earlier run's job(s) to go")
            said = True
        seconds = min(WATCH_S, _remaining(deadline, "the earlier run's pods were going"))
        _wait_for_change(client, PODS, listed["metadata"].get("resourceVersion"),
                         pod_selector, seconds)


def follow(client: Client, name: str, until: str, say: Callable[[str], None],
           deadline: float) -> Verdict:
    """Follow Job `name` to its verdict: each phase change and each pending reason once; a
    pod's failure remembered as the watch shows it (RestartJob deletes the failed pod)."""
    selector = f"volcano.sh/job-name={name}"
    progress = Progress()
    failed: dict[str, Mapping[str, Any]] = {}
    while True:
        job = client.get(JOBS, name)
        listed = client.list(PODS, label_selector=selector)
        pods = listed.get("items") or []
        for pod in pods:
            if failure_of(pod) is not None:
                failed[pod["metadata"]["uid"]] = pod
        seen = {p["metadata"]["uid"] for p in pods}
        verdict = decide(job, [*pods, *(p for uid, p in failed.items() if uid not in seen)],
                         until)
        phase = job_phase(job)
        reason = None
        if phase in ("", "Pending", "Restarting"):
            groups = client.list(PODGROUPS).get("items") or []
            mine = [g for g in groups if any(
                ref.get("name") == name for ref in g["metadata"].get("ownerReferences") or [])]
            about = {name, *(g["metadata"]["name"] for g in mine),
                     *(p["metadata"]["name"] for p in pods)}
            events = [e for e in client.list(EVENTS).get("items") or []
                      if (e.get("involvedObject") or {}).get("name") in about]
            reason = pending_reason(mine, events)
        progress, lines = progress_lines(progress, phase, reason)
        for line in lines:
            say(line)
        if verdict.done:
            return verdict
        seconds = min(WATCH_S, _remaining(deadline, f"following job {name} ({phase or 'new'})"))
        if pods and all((p.get("status") or {}).get("phase") in ("Succeeded", "Failed")
                        for p in pods):
            # Every pod has ended: the next change is the Job's own phase (Volcano's
            # controller writes it after the pods'), which no pod event would announce.
            _wait_for_change(client, JOBS, job["metadata"].get("resourceVersion"), None,
                             seconds, field_selector=f"metadata.name={name}")
        else:
            _wait_for_change(client, PODS, listed["metadata"].get("resourceVersion"), selector,
                             seconds)
