"""What `ascend-node manifest` prints, handled by the real platform (issue 37).

Each Job goes to kube-apiserver v1.30.2 exactly as the command printed it (YAML, as `kubectl
apply -f` sends it), through Volcano v1.10.0's own admission webhooks, to Volcano's job
controller (which makes the PodGroup, the pods, the svc plugin's Service and ConfigMap) and
Volcano's scheduler with its default configuration (gang among its plugins), which binds the
pods to the bed's fake Ascend nodes (tests/kube_bed.py, scripts/kube_bed.py). No part of that
path is ours or imitated; only the nodes are fake, and nothing runs the bound pods yet.
"""

from __future__ import annotations

import subprocess
import sys
import time
from typing import Any

import pytest

from tests.kube_bed import Bed

pytestmark = pytest.mark.kube

NPU = "huawei.com/Ascend910"


def render(*args: str) -> str:
    """The manifest as a user gets it: the CLI's stdout."""
    proc = subprocess.run([sys.executable, "-m", "ascend_node", "manifest", *args],
                          capture_output=True, text=True, check=True)
    return proc.stdout


def model_claim(bed: Bed, ns: str, claim: str = "model") -> None:
    """The shared RWX claim the manifest mounts (docs/deploy.md), bound to a PV made for it by
    kube-controller-manager's binder as on a cluster with static provisioning."""
    pv = f"{ns}-{claim}"
    bed.kube.create("/api/v1/persistentvolumes", {
        "apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": pv},
        "spec": {"capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteMany"],
                 "persistentVolumeReclaimPolicy": "Retain", "storageClassName": "",
                 "nfs": {"server": "127.0.0.1", "path": "/models"}}})
    bed.kube.create(f"/api/v1/namespaces/{ns}/persistentvolumeclaims", {
        "apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": claim},
        "spec": {"accessModes": ["ReadWriteMany"], "storageClassName": "", "volumeName": pv,
                 "resources": {"requests": {"storage": "1Gi"}}}})
    path = f"/api/v1/namespaces/{ns}/persistentvolumeclaims/{claim}"
    bed.wait(f"claim {ns}/{claim} Bound",
             lambda: bed.kube.get(path)["status"].get("phase") == "Bound")


def submit(bed: Bed, ns: str, *args: str) -> dict[str, Any]:
    model_claim(bed, ns)
    created = bed.apply(ns, render("--namespace", ns, *args))
    (job,) = [obj for obj in created if obj["kind"] == "Job"]
    return dict(job)


def bound(pods: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [p for p in pods if p["spec"].get("nodeName")]


def all_bound(bed: Bed, ns: str, count: int) -> list[dict[str, Any]]:
    def probe() -> list[dict[str, Any]]:
        pods = bed.pods(ns)
        return pods if len(pods) == count and len(bound(pods)) == count else []
    return list(bed.wait(f"{count} pods of {ns} bound", probe))


def test_a_rendered_mindie_job_is_admitted_and_every_pod_bound_to_its_own_npu_node(
        kube_bed: Bed) -> None:
    ns = kube_bed.namespace("mindie-two")
    try:
        submit(kube_bed, ns, "--kind", "mindie", "--nodes", "2", "--name", "mj")
        job = kube_bed.kube.get(kube_bed.jobs_path(ns, "mj"))
        # Volcano's mutating webhook (jobs/mutate) gives each task its minAvailable.
        assert [(t["name"], t.get("minAvailable")) for t in job["spec"]["tasks"]] == [
            ("master", 1), ("worker", 1)]

        pods = all_bound(kube_bed, ns, 2)
        assert sorted(p["metadata"]["name"] for p in pods) == ["mj-master-0", "mj-worker-0"]
        nodes = [p["spec"]["nodeName"] for p in pods]
        assert len(set(nodes)) == 2 and set(nodes) <= set(kube_bed.nodes)  # anti-affinity
        (group,) = kube_bed.podgroups(ns)
        assert group["spec"]["minMember"] == 2
        for pod in pods:
            assert pod["spec"]["schedulerName"] == "volcano"
            assert pod["metadata"]["annotations"]["scheduling.k8s.io/group-name"] == \
                group["metadata"]["name"]
            (server,) = [c for c in pod["spec"]["containers"] if c["name"] == "mindie"]
            assert server["resources"]["requests"][NPU] == "8"
            # The svc plugin: each pod is <pod>.<job> in the job's headless Service.
            assert (pod["spec"]["hostname"], pod["spec"]["subdomain"]) == (
                pod["metadata"]["name"], "mj")
        service = kube_bed.kube.get(f"/api/v1/namespaces/{ns}/services/mj")
        assert service["spec"]["clusterIP"] == "None"
        hosts = kube_bed.kube.get(f"/api/v1/namespaces/{ns}/configmaps/mj-svc")["data"]
        assert hosts["master.host"] == "mj-master-0.mj"
        assert hosts["worker.host"] == "mj-worker-0.mj"
    finally:
        kube_bed.purge(ns)


def gone(bed: Bed, *namespaces: str) -> None:
    for ns in namespaces:
        try:
            bed.purge(ns)
        except bed.api.ApiError as e:
            if e.status != 404:
                raise


def none_bound_for(bed: Bed, ns: str, seconds: float) -> None:
    """No pod of `ns` bound over `seconds` of vc-scheduler's 1-second cycles."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        assert not bound(bed.pods(ns))
        time.sleep(1)


def test_gang_no_pod_is_bound_while_one_pod_of_the_job_has_no_node(kube_bed: Bed) -> None:
    """5 pods, one NPU each, one pod per node (the manifest's anti-affinity), 4 nodes: four
    pods could be placed, the gang plugin places none and says why on the PodGroup."""
    ns = kube_bed.namespace("gang-five")
    try:
        submit(kube_bed, ns, "--kind", "mindie", "--nodes", "5", "--npus-per-node", "1",
               "--name", "five")

        def unschedulable() -> str:
            for group in kube_bed.podgroups(ns):
                for cond in group.get("status", {}).get("conditions", []):
                    if cond["type"] == "Unschedulable" and "4 Schedulable" in cond["message"]:
                        return str(cond["message"])
            return ""

        message = kube_bed.wait("the PodGroup's gang verdict", unschedulable)
        assert "1/5 tasks in gang unschedulable" in message
        assert "didn't match pod anti-affinity rules" in message
        assert len(kube_bed.pods(ns)) == 5
        none_bound_for(kube_bed, ns, 20)
    finally:
        gone(kube_bed, ns)


def test_a_job_wanting_more_npus_than_are_free_waits_whole_then_is_bound_whole(
        kube_bed: Bed) -> None:
    """4 nodes x 8 NPUs: while a 2-pod job holds 16, a 4-pod job (32) is not even enqueued
    (Volcano's enqueue action with the overcommit plugin): no pod of it is created or bound.
    Once the first job goes, all four pods are created and bound, one per node."""
    first, second = kube_bed.namespace("npus-first"), kube_bed.namespace("npus-second")
    try:
        submit(kube_bed, first, "--kind", "mindie", "--nodes", "2", "--name", "held")
        all_bound(kube_bed, first, 2)
        submit(kube_bed, second, "--kind", "mindie", "--nodes", "4", "--name", "waits")
        kube_bed.wait("the 4-pod job's PodGroup", lambda: kube_bed.podgroups(second))
        none_bound_for(kube_bed, second, 20)
        (group,) = kube_bed.podgroups(second)
        assert group["status"].get("phase") == "Pending"

        kube_bed.purge(first)
        pods = all_bound(kube_bed, second, 4)
        assert len({p["spec"]["nodeName"] for p in pods}) == 4
    finally:
        gone(kube_bed, first, second)


def test_volcano_validating_webhook_refuses_what_volcano_refuses(kube_bed: Bed) -> None:
    """The bed's API server calls Volcano's jobs/validate webhook: a Job whose task wants more
    pods than it has is denied with Volcano's words, so an accepted Job means accepted."""
    ns = kube_bed.namespace("webhook-denies")
    try:
        text = render("--namespace", ns, "--kind", "mindie", "--nodes", "2", "--name", "bad")
        text = text.replace("      replicas: 1\n", "      replicas: 1\n      minAvailable: 2\n", 1)
        with pytest.raises(kube_bed.api.ApiError) as denied:
            kube_bed.kube.create_yaml(kube_bed.jobs_path(ns), text)
        assert "validatejob.volcano.sh" in str(denied.value)
        assert "'minAvailable' is greater than 'replicas' in task: master" in str(denied.value)
    finally:
        kube_bed.purge(ns)
