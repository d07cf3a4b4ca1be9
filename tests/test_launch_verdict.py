"""How a launched Job ends (issue 39, "How it ends"): the verdict from the Volcano Job's status
and its pods' statuses, pure, one row per outcome a pipeline relies on."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Optional

import pytest

from ascend_node.launch.verdict import (
    EXIT_JOB_FAILED,
    Progress,
    decide,
    pending_reason,
    pod_task_index,
    progress_lines,
)


def job(phase: str, replicas: tuple[int, ...] = (1, 2)) -> dict[str, Any]:
    tasks = [{"name": n, "replicas": r} for n, r in zip(("master", "worker"), replicas)]
    out: dict[str, Any] = {"metadata": {"name": "t", "namespace": "ns"},
                           "spec": {"tasks": tasks}}
    if phase:
        out["status"] = {"state": {"phase": phase}}
    return out


def pod(name: str, phase: str = "Running", code: Optional[int] = None, message: str = "",
        reason: str = "", finished: str = "2026-12-05T09:00:00Z", ready: bool = False,
        init_code: Optional[int] = None, pod_reason: str = "") -> dict[str, Any]:
    task = name.split("-")[-2]
    status: dict[str, Any] = {"phase": phase, "conditions": [
        {"type": "Ready", "status": "True" if ready else "False"}]}
    if code is not None:
        term = {"exitCode": code, "finishedAt": finished, "reason": reason or "Error"}
        if message:
            term["message"] = message
        status["containerStatuses"] = [{"name": "server", "state": {"terminated": term}}]
    if init_code is not None:
        status["initContainerStatuses"] = [{"name": "ranktable", "state": {"terminated": {
            "exitCode": init_code, "message": "init: peers missing", "finishedAt": finished}}}]
    if pod_reason:
        status["reason"], status["message"] = pod_reason, "The node was low on memory."
    return {"metadata": {"name": name, "annotations": {"volcano.sh/task-spec": task}},
            "spec": {"containers": [{"name": "server"}]}, "status": status}


CAUSE5 = ("peer 10.0.0.3 holds device IP 192.168.1.5 that 10.0.0.2 holds too: "
          "duplicate device IP")

CASES = [
    # id, phase, pods, until, (done, exit, cause)
    ("completed", "Completed", [pod("t-master-0", "Succeeded", 0)], "ended",
     (True, 0, "job ns/t Completed")),
    ("running", "Running", [pod("t-master-0")], "ended", (False, 0, "")),
    ("pending", "Pending", [], "ended", (False, 0, "")),
    ("no-status-yet", "", [], "ended", (False, 0, "")),
    ("restarting", "Restarting", [pod("t-worker-1", "Failed", 4, "peers missing")], "ended",
     (False, 0, "")),
    ("abort-on-5: the cause pod, not the ones the abort killed", "Aborted",
     [pod("t-master-0", "Failed", 143, finished="2026-12-05T09:00:01Z"),
      pod("t-worker-1", "Failed", 5, "starting\n" + CAUSE5 + "\n", finished="2026-12-05T09:00:02Z"),
      pod("t-worker-0", "Failed", 137, finished="2026-12-05T09:00:00Z")], "ended",
     (True, 5, f"job ns/t Aborted: pod t-worker-1 (worker 1) exited 5: {CAUSE5}")),
    ("restarts exhausted on 4", "Failed",
     [pod("t-worker-0", "Failed", 4, "peers did not all arrive within 900 s: missing t-worker-1")],
     "ended",
     (True, 4, "job ns/t Failed: pod t-worker-0 (worker 0) exited 4: peers did not all arrive "
               "within 900 s: missing t-worker-1")),
    ("the workload's own exit: the earliest non-zero", "Failed",
     [pod("t-worker-1", "Failed", 1, "", reason="Error", finished="2026-12-05T09:00:05Z"),
      pod("t-master-0", "Failed", 2, "Traceback: ValueError", finished="2026-12-05T09:00:03Z"),
      pod("t-worker-0", "Succeeded", 0)], "ended",
     (True, EXIT_JOB_FAILED,
      "job ns/t Failed: pod t-master-0 (master 0) exited 2: Traceback: ValueError")),
    ("no termination message: the kubelet's reason", "Failed",
     [pod("t-master-0", "Failed", 137, reason="OOMKilled")], "ended",
     (True, EXIT_JOB_FAILED, "job ns/t Failed: pod t-master-0 (master 0) exited 137: OOMKilled")),
    ("evicted: no container exit", "Failed",
     [pod("t-worker-0", "Failed", pod_reason="Evicted")], "ended",
     (True, EXIT_JOB_FAILED,
      "job ns/t Failed: pod t-worker-0 (worker 0) failed: Evicted The node was low on memory.")),
    ("init container failed (the init-container variant)", "Aborted",
     [pod("t-worker-0", "Failed", init_code=5)], "ended",
     (True, 5, "job ns/t Aborted: pod t-worker-0 (worker 0) exited 5: init: peers missing")),
    ("failed with no pod left", "Terminated", [], "ended",
     (True, EXIT_JOB_FAILED,
      "job ns/t Terminated: no failed pod left to name (deleted, or never started)")),
    ("serving: all ready", "Running",
     [pod("t-master-0", ready=True), pod("t-worker-0", ready=True), pod("t-worker-1", ready=True)],
     "serving", (True, 0, "job ns/t serving: 3/3 pods Ready")),
    ("serving: one not ready", "Running",
     [pod("t-master-0", ready=True), pod("t-worker-0", ready=True), pod("t-worker-1")],
     "serving", (False, 0, "")),
    ("serving: ready pods of a pending job do not count", "Pending",
     [pod("t-master-0", ready=True)], "serving", (False, 0, "")),
    ("serving: completed is no server", "Completed", [], "serving",
     (True, EXIT_JOB_FAILED, "job ns/t Completed before it was serving: every pod exited 0")),
    ("serving: failed before serving", "Aborted", [pod("t-master-0", "Failed", 5, "x")],
     "serving", (True, 5, "job ns/t Aborted: pod t-master-0 (master 0) exited 5: x")),
    ("ended: a serving job is not done", "Running", [pod("t-master-0", ready=True)], "ended",
     (False, 0, "")),
]


@pytest.mark.parametrize("phase, pods, until, want",
                         [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_the_verdict(phase: str, pods: list[dict[str, Any]], until: str,
                     want: tuple[bool, int, str]) -> None:
    replicas = (1, 2)
    v = decide(job(phase, replicas), pods, until)
    assert (v.done, v.exit_code, v.cause) == want
    if v.done and v.exit_code:
        assert v.hint


def test_a_deleting_pod_is_not_serving() -> None:
    pods = [pod("t-master-0", ready=True), pod("t-worker-0", ready=True),
            pod("t-worker-1", ready=True)]
    pods[2]["metadata"]["deletionTimestamp"] = "2026-12-05T09:00:00Z"
    assert not decide(job("Running"), pods, "serving").done


@pytest.mark.parametrize("name, annotations, want", [
    ("train-master-0", {"volcano.sh/task-spec": "master"}, ("master", 0)),
    ("train-a-worker-12", {"volcano.sh/task-spec": "worker"}, ("worker", 12)),
    ("train-a-worker-3", {}, ("worker", 3)),
    ("odd", {}, ("", None)),
])
def test_task_and_index_of_a_pod(name: str, annotations: dict[str, str],
                                 want: tuple[str, Optional[int]]) -> None:
    assert pod_task_index({"metadata": {"name": name, "annotations": annotations}}) == want


def test_pending_reason_prefers_the_podgroups_newest_unschedulable_condition() -> None:
    groups = [{"status": {"conditions": [
        {"type": "Unschedulable", "status": "True", "lastTransitionTime": "2026-12-05T09:00:00Z",
         "message": "old"},
        {"type": "Unschedulable", "status": "True", "lastTransitionTime": "2026-12-05T09:00:09Z",
         "message": "1/5 tasks in gang unschedulable: pod group is not ready, 5 Pending, "
                    "5 minAvailable; Pending: 1 Unschedulable, 4 Schedulable"},
        {"type": "Scheduled", "status": "True", "lastTransitionTime": "2026-12-05T09:00:10Z",
         "message": "later but not a reason"},
    ]}}]
    events = [{"type": "Warning", "reason": "Unschedulable", "message": "event",
               "involvedObject": {"kind": "PodGroup"}}]
    assert pending_reason(groups, events).startswith("1/5 tasks in gang unschedulable")


GANG = json.loads((Path(__file__).resolve().parents[1] / "fixtures" / "volcano"
                   / "gang-unschedulable.json").read_text(encoding="utf-8"))
GANG_WHY = ("1/5 tasks in gang unschedulable: pod group is not ready, 5 Pending, 5 minAvailable; "
            "Pending: 1 Unschedulable, 4 Schedulable. Origin reason is five-worker-3: 0/4 nodes "
            "are unavailable: 4 node(s) didn't match pod anti-affinity rules.")


def test_pending_reason_of_the_real_gang_capture() -> None:
    """What the kube bed's Volcano wrote for 5 pods on 4 nodes (fixtures/volcano/README.md)."""
    assert GANG["job"]["status"]["state"]["phase"] == "Pending"
    assert pending_reason(GANG["podgroups"], GANG["events"]) == GANG_WHY


def test_pending_reason_of_the_real_gang_events_alone() -> None:
    """Without the condition, the PodGroup's newest event — never a pod's `can possibly be
    assigned to` (the newest events there), which says where a pod would fit, not why."""
    # the PodGroup's event counts the gang differently from its condition (5/5, not 1/5)
    assert pending_reason([], GANG["events"]) == "5/5" + GANG_WHY[3:]
    pods_and_job = [e for e in GANG["events"] if e["involvedObject"]["kind"] != "PodGroup"]
    assert pending_reason([], pods_and_job) == GANG_WHY  # the Job's event, its prefix cut
    pods_only = [e for e in GANG["events"] if e["involvedObject"]["kind"] == "Pod"]
    assert pending_reason([], pods_only) == \
        "0/4 nodes are unavailable: 4 node(s) didn't match pod anti-affinity rules."


def test_pending_reason_from_events_then_none() -> None:
    events = [
        {"type": "Warning", "reason": "FailedScheduling", "message": "first",
         "lastTimestamp": "2026-12-05T09:00:00Z", "involvedObject": {"kind": "Pod"}},
        {"type": "Warning", "reason": "FailedScheduling", "message": "0/4 nodes are available",
         "lastTimestamp": "2026-12-05T09:00:05Z", "involvedObject": {"kind": "Pod"}},
        {"type": "Normal", "reason": "Scheduled", "message": "no",
         "lastTimestamp": "2026-12-05T09:00:09Z", "involvedObject": {"kind": "Pod"}},
    ]
    assert pending_reason([], events) == "0/4 nodes are available"
    assert pending_reason([{"status": {"conditions": [
        {"type": "Unschedulable", "status": "False", "message": "resolved"}]}}], []) is None


@pytest.mark.parametrize("before, phase, reason, after, lines", [
    (Progress(), "Pending", None, Progress("Pending"), ["job phase Pending"]),
    (Progress("Pending"), "Pending", "gang", Progress("Pending", "gang"), ["pending: gang"]),
    (Progress("Pending", "gang"), "Pending", "gang", Progress("Pending", "gang"), []),
    (Progress("Pending", "gang"), "Running", "gang", Progress("Running"), ["job phase Running"]),
    (Progress("Running"), "Running", None, Progress("Running"), []),
    (Progress("Running"), "Restarting", "x", Progress("Restarting", "x"),
     ["job phase Restarting", "pending: x"]),
    (Progress("Running"), "", None, Progress("Running"), []),
])
def test_each_phase_change_and_new_reason_is_printed_once(
        before: Progress, phase: str, reason: Optional[str], after: Progress,
        lines: list[str]) -> None:
    assert progress_lines(before, phase, reason) == (after, lines)
