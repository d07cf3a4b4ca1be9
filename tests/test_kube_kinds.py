"""Every rendered kind, applied to the real API server and placed by Volcano (issue 37, item 4).

Each case is `ascend-node manifest` output as printed (all its documents: the Job, and the
Secret or ConfigMap some kinds add), created in a namespace of its own on the kube bed
(tests/kube_bed.py): the API server and Volcano's webhooks accept it, Volcano's job
controller makes every pod, and the scheduler binds every pod to a fake node with the NPUs
the pod asks for. Running the pods is the nodes' agent's part (not in this file).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.kube_bed import Bed, open_bed
from tests.test_kube_volcano import NPU, all_bound, gone, model_claim, none_bound_for, render

pytestmark = pytest.mark.kube

CASES = {
    "mindie-2": ("--kind", "mindie", "--nodes", "2"),
    "mindie-4": ("--kind", "mindie", "--nodes", "4"),
    "init-container": ("--kind", "mindie", "--nodes", "2", "--init-container"),
    "run-as-user": ("--kind", "mindie", "--nodes", "2", "--run-as-user", "1001"),
    "https": ("--kind", "mindie", "--nodes", "2", "--https", "--tls-secret", "mindie-tls"),
    "rendezvous-key": ("--kind", "mindie", "--nodes", "2", "--rendezvous-key"),
    "training": ("--kind", "training", "--nodes", "2", "--", "python", "train.py"),
    "mindie-pd": ("--kind", "mindie-pd"),
}


def npus(pod: dict[str, Any]) -> int:
    return sum(int(c.get("resources", {}).get("requests", {}).get(NPU, "0"))
               for c in pod["spec"]["containers"])


def place(bed: Bed, ns: str, args: tuple[str, ...]) -> list[dict[str, Any]]:
    model_claim(bed, ns)
    bed.apply(ns, render("--namespace", ns, *args))
    (job,) = bed.kube.get(bed.jobs_path(ns))["items"]
    want = sum(t["replicas"] for t in job["spec"]["tasks"])
    return all_bound(bed, ns, want)


@pytest.mark.parametrize("case", sorted(CASES))
def test_every_kind_is_accepted_and_every_pod_bound_with_its_npus(kube_bed: Bed,
                                                                  case: str) -> None:
    ns = kube_bed.namespace(f"kind-{case}")
    try:
        pods = place(kube_bed, ns, CASES[case])
        per_node: dict[str, int] = {}
        for pod in pods:
            node = pod["spec"]["nodeName"]
            per_node[node] = per_node.get(node, 0) + npus(pod)
        assert max(per_node.values()) <= 8  # no node gives out more NPUs than it has
        assert sum(per_node.values()) == sum(npus(p) for p in pods) > 0
    finally:
        gone(kube_bed, ns)


@pytest.fixture(scope="module")
def kube_bed_a3(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Bed]:
    """A second bed: 2 Atlas 900 A3 super-pod nodes (16 NPUs, accelerator-type label)."""
    yield from open_bed(tmp_path_factory, nodes=2, a3=True)


def test_a3_pods_are_bound_only_to_super_pod_nodes(kube_bed_a3: Bed, kube_bed: Bed) -> None:
    ns = kube_bed_a3.namespace("kind-a3")
    try:
        pods = place(kube_bed_a3, ns, ("--kind", "mindie", "--nodes", "2", "--a3"))
        assert sorted(p["spec"]["nodeName"] for p in pods) == sorted(kube_bed_a3.nodes)
        assert {npus(p) for p in pods} == {16}
    finally:
        gone(kube_bed_a3, ns)

    # The same Job on plain 8-NPU nodes: nothing carries the label, nothing is bound.
    plain = kube_bed.namespace("kind-a3-on-plain")
    try:
        model_claim(kube_bed, plain)
        kube_bed.apply(plain, render("--namespace", plain, "--kind", "mindie", "--nodes", "2",
                                     "--a3"))
        kube_bed.wait("the A3 job's PodGroup", lambda: kube_bed.podgroups(plain))
        none_bound_for(kube_bed, plain, 15)
    finally:
        gone(kube_bed, plain)
