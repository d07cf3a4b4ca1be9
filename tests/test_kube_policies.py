"""The rendered Job's policies as Volcano v1.10.0's own job controller applies them (issue 37,
item 5), against the model in tests/volcano_model.py.

Nothing runs the pods yet, so the test speaks for the fake nodes as their kubelets would,
each as `system:node:<node>` (tests/test_kube_node_identity.py): it reports a bound pod
Running, or Failed with its first container's exit code, and it confirms a deletion the
controller asked for (the kubelet's final `DELETE` with grace period 0). Everything else —
which action a report triggers, the retry count, the job version, re-creating the pods under
the same names — is Volcano's controller's. Where it agrees with tests/volcano_model.py's
table, the model's row is proven; a disagreement fails here.
"""

from __future__ import annotations

import time
from typing import Any

import pytest

from ascend_node.jobspec.job import MAX_RETRY
from tests.kube_bed import Bed, load_scripts
from tests.test_kube_volcano import bound, gone, submit

pytestmark = pytest.mark.kube

JOB_VERSION = "volcano.sh/job-version"  # volcano.sh/apis batch/v1alpha1 labels.go


class Kubelets:
    """The fake nodes' side of the pods of one namespace."""

    def __init__(self, bed: Bed, ns: str) -> None:
        self.bed, self.ns = bed, ns
        _, self._script = load_scripts()
        self._clients: dict[str, Any] = {}

    def node(self, name: str) -> Any:
        if name not in self._clients:
            self._clients[name] = self._script.client(self.bed.run, f"node-{name}")
        return self._clients[name]

    def report(self, pod: dict[str, Any], phase: str, exit_code: int = 0) -> None:
        name = pod["metadata"]["name"]
        container = pod["spec"]["containers"][0]
        if phase == "Running":
            state: dict[str, Any] = {"running": {"startedAt": "2026-01-01T00:00:00Z"}}
        else:
            state = {"terminated": {"exitCode": exit_code, "reason": "Error",
                                    "startedAt": "2026-01-01T00:00:00Z",
                                    "finishedAt": "2026-01-01T00:00:01Z"}}
        status = {"phase": phase, "containerStatuses": [{
            "name": container["name"], "image": container["image"], "imageID": "",
            "ready": False, "restartCount": 0, "started": phase == "Running", "state": state}]}
        self.node(pod["spec"]["nodeName"]).merge_patch(
            f"/api/v1/namespaces/{self.ns}/pods/{name}/status", {"status": status})

    def confirm_deletions(self) -> None:
        """What a kubelet does once the containers of a deleted pod are gone."""
        for pod in self.bed.pods(self.ns):
            if pod["metadata"].get("deletionTimestamp") and pod["spec"].get("nodeName"):
                try:
                    self.node(pod["spec"]["nodeName"]).request(
                        "DELETE", f"/api/v1/namespaces/{self.ns}/pods/{pod['metadata']['name']}",
                        b'{"gracePeriodSeconds": 0}')
                except self.bed.api.ApiError as e:
                    if e.status != 404:
                        raise


def job_of(bed: Bed, ns: str, name: str) -> dict[str, Any]:
    return dict(bed.kube.get(bed.jobs_path(ns, name)))


def start(bed: Bed, kubelets: Kubelets, ns: str, name: str, pods: int,
          after: int = -1) -> tuple[list[dict[str, Any]], int]:
    """Wait for a new attempt's pods (job version above `after`) to be bound, report them
    Running, wait for the job to be Running; the pods and their job version."""
    def bound_at_new_version() -> list[dict[str, Any]]:
        kubelets.confirm_deletions()
        items = bed.pods(ns)
        if len(items) != pods or len(bound(items)) != pods:
            return []
        versions = {int(p["metadata"]["annotations"][JOB_VERSION]) for p in items}
        fresh = not any(p["metadata"].get("deletionTimestamp") for p in items)
        return items if fresh and len(versions) == 1 and versions.pop() > after else []

    items = list(bed.wait(f"a new attempt of {ns}/{name} bound", bound_at_new_version))
    version = int(items[0]["metadata"]["annotations"][JOB_VERSION])
    for pod in items:
        kubelets.report(pod, "Running")
    bed.wait(f"{ns}/{name} Running",
             lambda: job_of(bed, ns, name)["status"].get("state", {}).get("phase") == "Running")
    assert job_of(bed, ns, name)["status"].get("version", 0) == version
    return items, version


def pod_named(pods: list[dict[str, Any]], name: str) -> dict[str, Any]:
    (pod,) = [p for p in pods if p["metadata"]["name"] == name]
    return pod


@pytest.mark.parametrize(("pod", "code"), [("j-master-0", 4), ("j-worker-0", 1),
                                           ("j-worker-0", 137)])
def test_a_failure_restarts_the_whole_job_under_the_same_names_with_a_new_version(
        kube_bed: Bed, pod: str, code: int) -> None:
    """Model rows: failed 4 (the agent's peer timeout), failed 1 on a worker (the server
    crashed), failed 137 (killed) -> RestartJob: every pod deleted and re-created, same
    names, a higher job version on the job and every new pod, retry count +1.

    Not +1 as tests/volcano_model.py's JobRun counts it: the controller bumps the version on
    every kill pass (job_controller_actions.go killJob), once when the policy fires and once
    more per sync while the old pods terminate (state/restarting.go), so 2 or more. The
    model's use of it (a report from an older version is only a SyncJob) holds either way."""
    ns = kube_bed.namespace(f"restart-{code}")
    kubelets = Kubelets(kube_bed, ns)
    try:
        submit(kube_bed, ns, "--kind", "mindie", "--nodes", "2", "--name", "j")
        first, v0 = start(kube_bed, kubelets, ns, "j", 2)
        assert v0 == 0
        kubelets.report(pod_named(first, pod), "Failed", code)
        again, v1 = start(kube_bed, kubelets, ns, "j", 2, after=v0)
        assert sorted(p["metadata"]["name"] for p in again) == ["j-master-0", "j-worker-0"]
        assert {p["metadata"]["uid"] for p in again}.isdisjoint(
            p["metadata"]["uid"] for p in first)
        assert job_of(kube_bed, ns, "j")["status"]["retryCount"] == 1
        assert v1 >= 2
    finally:
        kubelets.confirm_deletions()
        gone(kube_bed, ns)


def test_exit_5_aborts_the_job_and_is_never_retried(kube_bed: Bed) -> None:
    """Model row: failed 5 (an inconsistent cluster) -> AbortJob. The controller deletes the
    pods still running and keeps the failed one (killJob with PodRetainPhaseSoft: a pod
    that already ended stays, with its logs and termination message, for `kubectl`)."""
    ns = kube_bed.namespace("abort-5")
    kubelets = Kubelets(kube_bed, ns)
    try:
        submit(kube_bed, ns, "--kind", "mindie", "--nodes", "2", "--name", "j")
        first, _ = start(kube_bed, kubelets, ns, "j", 2)
        kubelets.report(pod_named(first, "j-worker-0"), "Failed", 5)

        def aborted() -> list[tuple[str, str]]:
            kubelets.confirm_deletions()
            if job_of(kube_bed, ns, "j")["status"]["state"]["phase"] != "Aborted":
                return []
            left = [(p["metadata"]["name"], p["status"].get("phase", ""))
                    for p in kube_bed.pods(ns)]
            return left if left == [("j-worker-0", "Failed")] else []

        kube_bed.wait("j Aborted, only the failed pod left", aborted)
        status = job_of(kube_bed, ns, "j")["status"]
        assert status.get("retryCount", 0) == 0
        (kept,) = kube_bed.pods(ns)
        assert kept["metadata"]["uid"] == pod_named(first, "j-worker-0")["metadata"]["uid"]
    finally:
        kubelets.confirm_deletions()
        gone(kube_bed, ns)


def test_a_crash_loop_ends_failed_after_max_retry(kube_bed: Bed) -> None:
    """Model: the job is started MAX_RETRY times, then Failed (state/restarting.go)."""
    ns = kube_bed.namespace("crash-loop")
    kubelets = Kubelets(kube_bed, ns)
    try:
        submit(kube_bed, ns, "--kind", "mindie", "--nodes", "2", "--name", "j")
        version = -1
        for _ in range(MAX_RETRY):
            pods, version = start(kube_bed, kubelets, ns, "j", 2, after=version)
            kubelets.report(pod_named(pods, "j-master-0"), "Failed", 137)

        def failed() -> bool:
            kubelets.confirm_deletions()
            return bool(job_of(kube_bed, ns, "j")["status"]["state"]["phase"] == "Failed")

        kube_bed.wait("j Failed after MAX_RETRY starts", failed)
        assert job_of(kube_bed, ns, "j")["status"]["retryCount"] == MAX_RETRY
    finally:
        kubelets.confirm_deletions()
        gone(kube_bed, ns)


def test_pd_volcano_v1_10_chooses_restart_task_for_a_failed_decode_pod_but_does_not_restart_it(
        kube_bed: Bed) -> None:
    """Model (and the podman bed, which plays it): RestartTask re-creates the failed task's
    pods. Volcano v1.10.0's controller disagrees: its webhook accepts RestartTask and its
    policy matching picks it (the `ExecuteAction` event), but its running state has no case
    for it (pkg/controllers/job/state/running.go `Execute`: anything but RestartJob, AbortJob,
    TerminateJob and CompleteJob is a plain SyncJob). The failed decode pod stays Failed, the
    rest runs on, nothing is re-created: on v1.10.0 a PD instance that loses a pod is not
    healed by its policies (docs/deploy.md, compatibility); deleting the failed pod by hand
    is. This test pins both, so that a Volcano that implements RestartTask fails it and the
    docs are updated."""
    ns = kube_bed.namespace("pd-restart-task")
    kubelets = Kubelets(kube_bed, ns)
    try:
        submit(kube_bed, ns, "--kind", "mindie-pd", "--name", "pd")
        first, version = start(kube_bed, kubelets, ns, "pd", 5)
        (decode,) = [p for p in first if p["metadata"]["name"].startswith("pd-decode-0-")]
        kubelets.report(decode, "Failed", 1)

        def chosen() -> bool:
            events = kube_bed.kube.get(f"/api/v1/namespaces/{ns}/events")["items"]
            return any(e["reason"] == "ExecuteAction" and "RestartTask" in e["message"]
                       for e in events)

        kube_bed.wait("the controller choosing RestartTask", chosen)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:  # twenty seconds of the controller's syncs
            kubelets.confirm_deletions()
            now = {p["metadata"]["name"]: (p["metadata"]["uid"], p["status"].get("phase"))
                   for p in kube_bed.pods(ns)}
            assert now == {p["metadata"]["name"]: (p["metadata"]["uid"],
                                                   "Failed" if p is decode else "Running")
                           for p in first}
            time.sleep(1)
        status = job_of(kube_bed, ns, "pd")["status"]
        assert status["state"]["phase"] == "Running"
        assert (status.get("version", 0), status.get("retryCount", 0)) == (version, 0)

        # What heals it on v1.10.0: `kubectl delete pod` of the failed pod (an ended pod is
        # deleted at once): the controller re-creates that pod alone, the rest runs on.
        name = decode["metadata"]["name"]
        kube_bed.kube.delete(f"/api/v1/namespaces/{ns}/pods/{name}")

        def recreated() -> dict[str, str]:
            uids = {p["metadata"]["name"]: p["metadata"]["uid"] for p in kube_bed.pods(ns)
                    if p["spec"].get("nodeName")}
            return uids if name in uids and uids[name] != decode["metadata"]["uid"] else {}

        uids = kube_bed.wait(f"{name} re-created", recreated)
        assert {n: u for n, u in uids.items() if n != name} == {
            p["metadata"]["name"]: p["metadata"]["uid"] for p in first if p is not decode}
        assert job_of(kube_bed, ns, "pd")["status"].get("retryCount", 0) == 0
    finally:
        kubelets.confirm_deletions()
        gone(kube_bed, ns)
