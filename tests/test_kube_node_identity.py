"""The fake nodes' identities are a kubelet's (what a node agent on the bed builds on).

Each node has a client certificate for `system:node:<node>` in group `system:nodes`
(`<run>/pki/node-<node>.*`, `<run>/nodes/<node>.kubeconfig`). The API server runs the Node
authorizer and the NodeRestriction admission plugin, so that identity may do what a kubelet
may and no more: read the pods, write the status of those bound to its own node only, and
request a service-account token bound to such a pod (the `kube-api-access` volume's), and
read only the ConfigMaps its pods reference.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.kube_bed import Bed, load_scripts

pytestmark = pytest.mark.kube


def pod(name: str, node: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
            "spec": {"nodeName": node, "containers": [{"name": "c", "image": "mindie:latest"}]}}


def test_a_node_writes_the_status_of_its_own_pods_only(kube_bed: Bed) -> None:
    _, bed_script = load_scripts()
    mine, other = kube_bed.nodes[0], kube_bed.nodes[1]
    node = bed_script.client(kube_bed.run, f"node-{mine}")
    ns = kube_bed.namespace("node-identity")
    try:
        pods = f"/api/v1/namespaces/{ns}/pods"
        kube_bed.kube.create(pods, pod("here", mine))
        kube_bed.kube.create(pods, pod("there", other))

        listed = node.get(f"{pods}?fieldSelector=spec.nodeName%3D{mine}")["items"]
        assert [p["metadata"]["name"] for p in listed] == ["here"]
        # A watch from the list's resourceVersion: how an agent learns of each change.
        since = node.get(f"{pods}?fieldSelector=spec.nodeName%3D{mine}")["metadata"]
        kube_bed.kube.merge_patch(f"{pods}/here", {"metadata": {"labels": {"seen": "yes"}}})
        first = next(node.watch(f"/api/v1/pods?fieldSelector=spec.nodeName%3D{mine}"
                                f"&resourceVersion={since['resourceVersion']}", seconds=30))
        assert (first["type"], first["object"]["metadata"]["labels"]) == ("MODIFIED",
                                                                          {"seen": "yes"})
        # The ServiceAccount admission plugin gave the pod its projected token volume.
        assert any(v["name"].startswith("kube-api-access-") for v in listed[0]["spec"]["volumes"])

        patched = node.merge_patch(f"{pods}/here/status",
                                   {"status": {"phase": "Running", "podIP": "127.0.1.1"}})
        assert (patched["status"]["phase"], patched["status"]["podIP"]) == ("Running",
                                                                           "127.0.1.1")
        with pytest.raises(kube_bed.api.ApiError) as refused:
            node.merge_patch(f"{pods}/there/status", {"status": {"phase": "Running"}})
        assert refused.value.status == 403
        assert f'node "{mine}" can only update pod status for pods with spec.nodeName set to ' \
               "itself" in refused.value.message

        # The Node authorizer's graph: a ConfigMap a pod of the node mounts (the projected
        # volume's CA) is readable, one no pod of the node names is not.
        cms = f"/api/v1/namespaces/{ns}/configmaps"
        assert "ca.crt" in node.get(f"{cms}/kube-root-ca.crt")["data"]
        kube_bed.kube.create(cms, {"apiVersion": "v1", "kind": "ConfigMap",
                                   "metadata": {"name": "lonely"}, "data": {"a": "b"}})
        with pytest.raises(kube_bed.api.ApiError) as unrelated:
            node.get(f"{cms}/lonely")
        assert "no relationship found between node" in unrelated.value.message

        uid = listed[0]["metadata"]["uid"]
        token = node.create(f"/api/v1/namespaces/{ns}/serviceaccounts/default/token", {
            "apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
            "spec": {"audiences": ["https://kubernetes.default.svc.cluster.local"],
                     "expirationSeconds": 3607, "boundObjectRef": {
                         "apiVersion": "v1", "kind": "Pod", "name": "here", "uid": uid}}})
        assert token["status"]["token"].count(".") == 2  # a signed JWT
    finally:
        kube_bed.purge(ns)
