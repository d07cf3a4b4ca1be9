"""The node agent's pure parts (scripts/kube_node_agent.py): what a kubelet decides, case by case.

The device plugin stand-in's allocation (per container, init containers' devices reused by
the app containers as the kubelet's devicemanager `devicesToReuse` does, never a device
another live pod holds), the container env as the kubelet builds it from the API objects,
the termination message, the pod phase and conditions. tests/test_kube_jobs.py runs the
whole agent against the real API server.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from typing import Any, Optional

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _agent() -> Any:
    if "kube_node_agent" not in sys.modules:
        spec = importlib.util.spec_from_file_location(
            "kube_node_agent", ROOT / "scripts" / "kube_node_agent.py")
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules["kube_node_agent"] = module
        spec.loader.exec_module(module)
    return sys.modules["kube_node_agent"]


ka = _agent()


@pytest.mark.parametrize(("inits", "apps", "want_inits", "want_apps"), [
    ([], [8], [], [[0, 1, 2, 3, 4, 5, 6, 7]]),
    ([], [0], [], [[]]),  # no request: no devices (the motor pods, a plain sidecar)
    ([8], [8], [[0, 1, 2, 3, 4, 5, 6, 7]], [[0, 1, 2, 3, 4, 5, 6, 7]]),  # reused, not doubled
    ([0], [4], [[]], [[0, 1, 2, 3]]),  # an init container asking none gets none
    ([2], [4], [[0, 1]], [[0, 1, 2, 3]]),  # the init's two first, then two free ones
    ([4], [2, 2], [[0, 1, 2, 3]], [[0, 1], [2, 3]]),  # each reused device goes to one app
])
def test_devices_per_container_with_init_devices_reused(
        inits: list[int], apps: list[int], want_inits: list[list[int]],
        want_apps: list[list[int]]) -> None:
    got = ka.Devices(8).allocate("pod", inits, apps)
    assert got == (want_inits, want_apps)


def test_a_device_held_by_a_live_pod_is_never_handed_out_and_is_freed_with_it() -> None:
    devices = ka.Devices(8)
    assert devices.allocate("a", [], [6]) == ([], [[0, 1, 2, 3, 4, 5]])
    assert devices.allocate("b", [], [2]) == ([], [[6, 7]])
    with pytest.raises(ka.PodError) as refused:
        devices.allocate("c", [], [1])
    assert refused.value.reason == "UnexpectedAdmissionError"
    assert "requested 1, available 0" in str(refused.value)
    assert "c" not in devices.held  # a refused pod holds nothing
    devices.release("a")
    assert devices.allocate("c", [], [4]) == ([], [[0, 1, 2, 3]])


POD = {"metadata": {"name": "mj-worker-0", "namespace": "ns", "uid": "u-1",
                    "annotations": {"volcano.sh/job-version": "2"}, "labels": {"a": "b"}},
       "spec": {"nodeName": "kube-bed-node-1", "serviceAccountName": "default"},
       "status": {"podIP": "10.237.1.2", "hostIP": "10.237.1.1"}}
MAPS = {"cm": {"k": "from-cm"}}
SECRETS = {"s": {"key": "from-secret"}}


def _env(container: dict[str, Any]) -> dict[str, str]:
    def cm(name: str) -> Optional[dict[str, str]]:
        return MAPS.get(name)

    def secret(name: str) -> Optional[dict[str, str]]:
        return SECRETS.get(name)
    result: dict[str, str] = ka.resolve_env(container, POD, cm, secret)
    return result


def test_env_as_the_kubelet_builds_it_from_the_api_objects() -> None:
    env = _env({"env": [
        {"name": "IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
        {"name": "HOST", "valueFrom": {"fieldRef": {"fieldPath": "status.hostIP"}}},
        {"name": "V", "valueFrom": {"fieldRef": {
            "fieldPath": "metadata.annotations['volcano.sh/job-version']"}}},
        {"name": "NODE", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
        {"name": "C", "valueFrom": {"configMapKeyRef": {"name": "cm", "key": "k"}}},
        {"name": "S", "valueFrom": {"secretKeyRef": {"name": "s", "key": "key"}}},
        {"name": "X", "value": "$(IP):$(NOPE):$$(IP)"},
        {"name": "O", "valueFrom": {"configMapKeyRef": {"name": "gone", "key": "k",
                                                        "optional": True}}},
    ], "envFrom": [{"configMapRef": {"name": "cm"}, "prefix": "P_"}]})
    assert env == {"P_k": "from-cm", "IP": "10.237.1.2", "HOST": "10.237.1.1", "V": "2",
                   "NODE": "kube-bed-node-1", "C": "from-cm", "S": "from-secret",
                   "X": "10.237.1.2:$(NOPE):$(IP)"}


@pytest.mark.parametrize(("item", "says"), [
    ({"configMapKeyRef": {"name": "gone", "key": "k"}}, "configmap 'gone' not found"),
    ({"configMapKeyRef": {"name": "cm", "key": "nope"}}, "couldn't find key nope"),
    ({"secretKeyRef": {"name": "gone", "key": "k"}}, "secret 'gone' not found"),
    ({"fieldRef": {"fieldPath": "spec.bogus"}}, "spec.bogus"),
])
def test_a_missing_reference_is_a_create_container_config_error(
        item: dict[str, Any], says: str) -> None:
    with pytest.raises(ka.PodError) as refused:
        _env({"env": [{"name": "E", "valueFrom": item}]})
    assert refused.value.reason == "CreateContainerConfigError"
    assert says in str(refused.value)


@pytest.mark.parametrize(("text", "logs", "policy", "code", "want"), [
    ("peer missing: mj-worker-0\n", "log", "FallbackToLogsOnError", 4,
     "peer missing: mj-worker-0\n"),
    ("", "a\nb\n", "FallbackToLogsOnError", 1, "a\nb"),  # the log only on failure
    ("", "a\n", "FallbackToLogsOnError", 0, ""),
    ("", "a\n", "File", 1, ""),
    ("x" * 5000, "", "File", 1, "x" * 4096),  # at most 4 KiB of the file
    ("", "".join(f"{i}\n" for i in range(100)), "FallbackToLogsOnError", 1,
     "\n".join(str(i) for i in range(20, 100))),  # the last 80 lines
])
def test_termination_message(text: str, logs: str, policy: str, code: int, want: str) -> None:
    assert ka.termination_message(text, logs, policy, code) == want


def _c(name: str, **kw: Any) -> Any:
    return ka.CState(name, "img", **kw)


@pytest.mark.parametrize(("inits", "apps", "failed", "phase"), [
    ([], [_c("a")], False, "Pending"),
    ([], [_c("a", started_at="t")], False, "Running"),
    ([], [_c("a", started_at="t", exit_code=0)], False, "Succeeded"),
    ([], [_c("a", started_at="t", exit_code=4)], False, "Failed"),
    ([_c("i", exit_code=1)], [_c("a")], False, "Failed"),  # restartPolicy Never
    ([], [_c("a")], True, "Failed"),  # refused at admission
])
def test_phase_with_restart_policy_never(inits: list[Any], apps: list[Any], failed: bool,
                                         phase: str) -> None:
    assert ka.phase_of(inits, apps, failed) == phase


def test_ready_condition_follows_the_containers_and_keeps_pod_scheduled() -> None:
    scheduled = {"type": "PodScheduled", "status": "True", "lastTransitionTime": "t0"}
    app = _c("mindie", started_at="t", started=True)
    conds = {c["type"]: c for c in ka.conditions([], [], [app], "Running", True, [scheduled])}
    assert conds["Ready"]["status"] == "False"
    assert conds["Ready"]["reason"] == "ContainersNotReady"
    assert conds["PodScheduled"] == scheduled
    app.ready = True
    old = list(conds.values())
    conds = {c["type"]: c for c in ka.conditions([], [], [app], "Running", True, old)}
    assert conds["Ready"]["status"] == conds["ContainersReady"]["status"] == "True"
    done = {c["type"]: c for c in ka.conditions([], [], [app], "Failed", True, old)}
    assert done["Ready"]["status"] == "False" and done["Ready"]["reason"] == "PodCompleted"


def test_the_kubernetes_service_variables_name_the_api_server_a_pod_can_reach() -> None:
    """What the kubelet writes from the `kubernetes` Service (envvars.go FromServices), but
    naming the bridge's gateway and the API server's own port: no kube-proxy routes the
    ClusterIP on the bed (docs/kube-node-agent.md)."""
    env = ka.service_env(ka.API_HOST, 6443)
    assert ka.API_HOST == "10.237.0.1"  # the bridge's gateway: the host, the cert's SAN
    assert env == {
        "KUBERNETES_SERVICE_HOST": "10.237.0.1", "KUBERNETES_SERVICE_PORT": "6443",
        "KUBERNETES_SERVICE_PORT_HTTPS": "6443", "KUBERNETES_PORT": "tcp://10.237.0.1:6443",
        "KUBERNETES_PORT_6443_TCP": "tcp://10.237.0.1:6443",
        "KUBERNETES_PORT_6443_TCP_PROTO": "tcp", "KUBERNETES_PORT_6443_TCP_PORT": "6443",
        "KUBERNETES_PORT_6443_TCP_ADDR": "10.237.0.1"}
    # and the ascend-node client reads them as a pod's (kube/config.py in_cluster)
    from ascend_node.kube.config import in_cluster

    sa = ROOT / "tests" / "__sa_missing__"
    with pytest.raises(Exception) as info:  # no token here: the address was accepted first
        in_cluster(env, sa)
    assert "ServiceAccount token" in str(info.value)

