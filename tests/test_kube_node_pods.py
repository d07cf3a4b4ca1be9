"""A pod's life on the node agent against the real API server (scripts/kube_node_agent.py),
where the agent must do what a kubelet does under churn — a RestartJob's pods re-created on
a loaded machine exposed both:

* when a pod's NPUs are free again for the next pod on its node. As the kubelet's device
  manager decides (kubernetes v1.30 pkg/kubelet/cm/devicemanager/manager.go,
  `UpdateAllocatedDevices`: the devices of pods no longer in `activePods` are freed at the
  next allocation): once the pod has ended (Succeeded or Failed) or is deleted with no
  container running — not once podman has removed its containers, which a loaded machine did
  seconds after Volcano had bound the re-created pods to that node (they failed
  `UnexpectedAdmissionError`);
* a container's reference to a ConfigMap not there yet: the pod stays Pending, its container
  waiting `CreateContainerConfigError`, and runs once the ConfigMap exists (the kubelet's pod
  worker syncs again after its back-off) — not a failed pod, which Volcano answers by
  restarting the whole job.

The allocation itself (init containers' devices reused, one NPU never to two active pods) and
the env references are tested by tables in tests/test_kube_node_agent.py."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import pytest

from tests.kube_agent_bed import AgentBed, open_agent
from tests.kube_bed import Bed

IMAGE = "localhost/ascend-node-mindie:test"
NPU = "huawei.com/Ascend"

pytestmark = [pytest.mark.kube, pytest.mark.containers]


@pytest.fixture(scope="module")
def agent(kube_bed: Bed) -> Iterator[AgentBed]:
    yield from open_agent(kube_bed)


def _pod(name: str, node: str, resource: str, count: str, command: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
            "spec": {"nodeName": node, "restartPolicy": "Never",
                     "containers": [{"name": "main", "image": IMAGE,
                                     "command": ["sh", "-c", command],
                                     "resources": {"limits": {resource: count},
                                                   "requests": {resource: count}}}]}}


def test_an_ended_pods_npus_go_to_the_next_pod_before_it_is_deleted(agent: AgentBed) -> None:
    """Pod `first` takes every NPU of a node and ends (Succeeded), and stays: pod `second`,
    asking for every NPU of that node, runs with them, as a kubelet admits it."""
    kube, bed = agent.kube, agent.kube_bed
    node = bed.nodes[0]
    capacity = kube.get(f"/api/v1/nodes/{node}")["status"]["allocatable"]
    (resource,) = [k for k in capacity if k.startswith(NPU)]
    count = capacity[resource]
    ns = bed.namespace("kdevices")
    try:
        pods = f"/api/v1/namespaces/{ns}/pods"
        kube.create(pods, _pod("first", node, resource, count, "echo $ASCEND_VISIBLE_DEVICES"))
        bed.wait("first Succeeded",
                 lambda: kube.get(f"{pods}/first").get("status", {}).get("phase")
                 in ("Succeeded", "Failed"), 120)
        assert kube.get(f"{pods}/first")["status"]["phase"] == "Succeeded"
        kube.create(pods, _pod("second", node, resource, count,
                               "echo $ASCEND_VISIBLE_DEVICES"))
        bed.wait("second ended",
                 lambda: kube.get(f"{pods}/second").get("status", {}).get("phase")
                 in ("Succeeded", "Failed"), 120)
        status = kube.get(f"{pods}/second")["status"]
        assert status["phase"] == "Succeeded", (status, agent.log_tail())
        devices = ",".join(str(i) for i in range(int(count)))
        assert kube.request("GET", f"{pods}/second/log").strip() == devices
    finally:
        for name in ("first", "second"):
            with contextlib.suppress(Exception):  # not created
                kube.delete(f"/api/v1/namespaces/{ns}/pods/{name}")
        agent.purge(ns)


def test_a_configmap_not_there_yet_keeps_the_pod_pending_until_it_is(agent: AgentBed) -> None:
    kube, bed = agent.kube, agent.kube_bed
    ns = bed.namespace("kconfig")
    try:
        pods = f"/api/v1/namespaces/{ns}/pods"
        pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "reader"},
               "spec": {"nodeName": bed.nodes[1], "restartPolicy": "Never",
                        "containers": [{"name": "main", "image": IMAGE,
                                        "command": ["sh", "-c", "echo $GREETING"],
                                        "env": [{"name": "GREETING", "valueFrom": {
                                            "configMapKeyRef": {"name": "later",
                                                                "key": "greeting"}}}]}]}}
        kube.create(pods, pod)

        def waiting() -> str:
            statuses = kube.get(f"{pods}/reader").get("status", {}).get(
                "containerStatuses") or [{}]
            return str(statuses[0].get("state", {}).get("waiting", {}).get("reason", ""))
        bed.wait("reader waiting on its ConfigMap",
                 lambda: waiting() == "CreateContainerConfigError", 120)
        assert kube.get(f"{pods}/reader")["status"]["phase"] == "Pending"
        kube.create(f"/api/v1/namespaces/{ns}/configmaps", {
            "apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "later"},
            "data": {"greeting": "hello"}})
        bed.wait("reader ended",
                 lambda: kube.get(f"{pods}/reader").get("status", {}).get("phase")
                 in ("Succeeded", "Failed"), 120)
        status = kube.get(f"{pods}/reader")["status"]
        assert status["phase"] == "Succeeded", (status, agent.log_tail())
        assert kube.request("GET", f"{pods}/reader/log").strip() == "hello"
    finally:
        with contextlib.suppress(Exception):  # not created
            kube.delete(f"/api/v1/namespaces/{ns}/pods/reader")
        agent.purge(ns)
