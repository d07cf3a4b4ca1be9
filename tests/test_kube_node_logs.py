"""A pod's log through the real API server (issue 39): `GET pods/<pod>/log` is proxied by the
API server to the pod's node's kubelet port (scripts/kube_node_logs.py, served by the node
agent on the node's InternalIP), which answers from the container's podman log. The pure part
(the request's parameters, the kubelet's line format) is tested by tables of cases."""

from __future__ import annotations

import importlib.util
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any, Optional

import pytest

from tests.kube_agent_bed import AgentBed, open_agent
from tests.kube_bed import Bed

ROOT = Path(__file__).resolve().parents[1]
IMAGE = "localhost/ascend-node-mindie:test"


def _logs() -> ModuleType:
    sys.path.insert(0, str(ROOT / "scripts"))
    spec = importlib.util.spec_from_file_location("kube_node_logs",
                                                  ROOT / "scripts" / "kube_node_logs.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["kube_node_logs"] = module
    spec.loader.exec_module(module)
    return module


L = _logs()
T0 = 1_764_936_000 * 1_000_000_000  # 2025-12-05T12:00:00Z


@pytest.mark.parametrize(("path", "want"), [
    ("/containerLogs/ns/p/c", {"follow": False, "timestamps": False, "since_ns": None}),
    ("/containerLogs/ns/p/c?follow=true&timestamps=true",
     {"follow": True, "timestamps": True}),
    ("/containerLogs/ns/p/c?sinceTime=2025-12-05T12%3A00%3A00Z", {"since_ns": T0}),
    ("/containerLogs/ns/p/c?sinceTime=2025-12-05T13:00:00.5%2B01:00",
     {"since_ns": T0 + 500_000_000}),
    ("/containerLogs/ns/p/c?sinceSeconds=10", {"since_ns": T0 + 5_000_000_000}),
    ("/containerLogs/ns/p/c?tailLines=3&limitBytes=100", {"tail": 3, "limit_bytes": 100}),
])
def test_the_request_a_kubelet_path_asks_for(path: str, want: dict[str, Any]) -> None:
    req = L.request_of(path, T0 + 15_000_000_000)
    assert (req.namespace, req.pod, req.container) == ("ns", "p", "c")
    for key, value in want.items():
        assert getattr(req, key) == value, key


@pytest.mark.parametrize(("path", "status", "words"), [
    ("/containerLogs/ns/p/c?previous=true", 400, 'previous terminated container "c"'),
    ("/containerLogs/ns/p", 400, "want /containerLogs/"),
    ("/stats/summary", 404, "not found"),
    ("/containerLogs/ns/p/c?sinceTime=yesterday", 400, "sinceTime: 'yesterday'"),
    ("/containerLogs/ns/p/c?tailLines=-1", 400, "tailLines: -1 is negative"),
    ("/containerLogs/ns/p/c?follow=maybe", 400, "follow: 'maybe'"),
    ("/containerLogs/ns/p/c?follow=true&tailLines=3", 400, "tailLines with follow=true"),
])
def test_what_a_kubelet_refuses(path: str, status: int, words: str) -> None:
    with pytest.raises(L.LogRequestError) as info:
        L.request_of(path, T0)
    assert info.value.status == status and words in str(info.value)


@pytest.mark.parametrize(("line", "timestamps", "since", "want"), [
    # podman's RFC 3339 (trailing zeros cut, the local zone) -> the kubelet's: nine digits, UTC
    ("2025-12-05T12:00:00.5Z hello", True, None, "2025-12-05T12:00:00.500000000Z hello"),
    ("2025-12-05T13:00:00.123456789+01:00 a b", True, None,
     "2025-12-05T12:00:00.123456789Z a b"),
    ("2025-12-05T12:00:00Z whole", True, None, "2025-12-05T12:00:00.000000000Z whole"),
    ("2025-12-05T12:00:00.5Z hello", False, None, "hello"),
    ("2025-12-05T12:00:00.5Z ", False, None, ""),
    # sinceTime: lines not before it
    ("2025-12-05T11:59:59.999999999Z old", True, T0, None),
    ("2025-12-05T12:00:00Z at", False, T0, "at"),
    ("no stamp at all", True, T0, "no stamp at all"),
])
def test_a_podman_line_as_the_kubelet_sends_it(line: str, timestamps: bool,
                                               since: Optional[int], want: Optional[str]) -> None:
    req = L.LogRequest("ns", "p", "c", timestamps=timestamps, since_ns=since)
    assert L.kubelet_line(line, req) == want


def test_podman_is_asked_for_what_the_request_narrows() -> None:
    req = L.LogRequest("ns", "p", "c", follow=True, since_ns=T0 + 700_000_000, tail=5)
    assert L.podman_args(req, "kb_x") == ["logs", "--timestamps", "--follow", "--since",
                                          "2025-12-05T12:00:00Z", "kb_x"]


# ---- through the real API server -------------------------------------------------------

@pytest.fixture(scope="module")
def agent(kube_bed: Bed) -> Iterator[AgentBed]:
    yield from open_agent(kube_bed)


SCRIPT = ("for i in 1 2 3; do echo line $i; done; echo to-stderr >&2; sleep 4; "
          "printf 'late\\nno-newline'")


@pytest.mark.kube
@pytest.mark.containers
def test_pods_log_through_the_api_server_is_the_containers_log(agent: AgentBed) -> None:
    """kubectl logs -f --timestamps: every line, stdout and stderr in order, each with the
    kubelet's timestamp, following until the container ends; then sinceTime, tailLines,
    limitBytes and previous as the kubelet answers them."""
    kube, bed = agent.kube, agent.kube_bed
    ns = bed.namespace("klogs")
    try:
        kube.create(f"/api/v1/namespaces/{ns}/pods", {
            "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "talker"},
            "spec": {"nodeName": bed.nodes[0], "restartPolicy": "Never",
                     "containers": [{"name": "main", "image": IMAGE,
                                     "command": ["sh", "-c", SCRIPT]}]}})
        path = f"/api/v1/namespaces/{ns}/pods/talker"

        def running() -> bool:
            st = kube.get(path).get("status", {})
            return any("running" in c.get("state", {}) or "terminated" in c.get("state", {})
                       for c in st.get("containerStatuses", []))
        bed.wait("talker's container started", running, 120)
        t0 = time.monotonic()
        text = kube.request("GET", f"{path}/log?follow=true&timestamps=true")
        took = time.monotonic() - t0
        lines = text.split("\n")
        words = [line.split(" ", 1)[1] for line in lines]
        assert words == ["line 1", "line 2", "line 3", "to-stderr", "late", "no-newline"], text
        stamps = [line.split(" ", 1)[0] for line in lines]
        assert all(len(s) == 30 and s.endswith("Z") for s in stamps), stamps
        assert stamps == sorted(stamps)
        assert took > 1.0, "follow returned before the container ended"
        bed.wait("talker Succeeded",  # the agent reports what follow's end already said
                 lambda: kube.get(path)["status"]["phase"] == "Succeeded", 60)

        since = stamps[4][:19] + "Z"  # the whole second of "late"
        again = kube.request("GET", f"{path}/log?timestamps=true&sinceTime={since}")
        assert again.split("\n") == [line for line in lines if line[:19] >= since[:19]]
        assert kube.request("GET", f"{path}/log") == "\n".join(words)
        assert kube.request("GET", f"{path}/log?tailLines=2") == "late\nno-newline"
        assert kube.request("GET", f"{path}/log?tailLines=0") is None  # an empty answer
        assert kube.request("GET", f"{path}/log?limitBytes=9") == "line 1\nli"
        from kube_api import ApiError
        with pytest.raises(ApiError) as info:
            kube.request("GET", f"{path}/log?previous=true")
        assert info.value.status == 400 and "previous terminated container" in str(info.value)
    finally:
        kube.delete(f"/api/v1/namespaces/{ns}/pods/talker")
        bed.wait("talker gone", lambda: not bed.pods(ns), 120)
        kube.delete(f"/api/v1/namespaces/{ns}")
