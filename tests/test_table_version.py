"""Rank table v1.2 (A3 SuperPoD): which format a run gets, what the builder makes of it,
and that `validate` accepts every table the agent builds and refuses broken v1.2 tables."""

from __future__ import annotations

import copy
import ipaddress
import json
from typing import Any, Callable, Optional

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ascend_node.discover.identity import node_name
from ascend_node.errors import ClusterInconsistent
from ascend_node.ranktable import (
    DeviceEntry,
    NodeSuperPodReport,
    ServerEntry,
    VersionConflict,
    build_rank_table,
    choose_table_version,
    validate_rank_table,
)
from ascend_node.rendezvous import decide
from ascend_node.rendezvous.models import DeviceRecord, MemberDoc
from tests.rdzv_docs import member

IN = NodeSuperPodReport("0", (1, 2))
IN_B = NodeSuperPodReport("1", (1, 2))
OUT = NodeSuperPodReport(None)


# ------------------------------------------------------------------ the decision


@pytest.mark.parametrize(("requested", "reports", "expect"), [
    ("auto", {0: IN, 1: IN_B}, "1.2"),
    ("auto", {0: OUT, 1: OUT}, "1.0"),
    ("auto", {}, "1.0"),
    ("auto", {0: IN}, "1.2"),
    ("1.0", {0: IN, 1: OUT}, "1.0"),
    ("1.0", {0: IN, 1: IN}, "1.0"),
    ("1.2", {0: IN, 1: IN_B}, "1.2"),
    ("auto", {0: IN, 1: OUT, 2: OUT},
     ("node 0 reports an A3 super pod but node 1, node 2 do not", (0, 1, 2))),
    ("1.2", {0: IN, 1: OUT}, ("--table-version 1.2, but node 1 reports no super pod", (1,))),
    ("1.2", {0: OUT, 1: OUT}, ("--table-version 1.2, but node 0, node 1 report", (0, 1))),
    ("auto", {0: IN, 1: NodeSuperPodReport("0", (2, 3))},
     ("SDID 2 is reported by node 0 and node 1 in super pod 0", (0, 1))),
    ("1.2", {0: IN, 1: NodeSuperPodReport("1", (1, 2))}, "1.2"),  # same SDID, other pod
])
def test_choose_table_version(requested: str, reports: dict[int, NodeSuperPodReport],
                              expect: object) -> None:
    got = choose_table_version(requested, reports)
    if isinstance(expect, str):
        assert got == expect
    else:
        assert isinstance(got, VersionConflict)
        words, nodes = expect  # type: ignore[misc]
        assert words in got.reason and got.nodes == nodes


def test_unknown_requested_version_is_a_programming_error() -> None:
    with pytest.raises(ValueError, match=r"2\.0"):
        choose_table_version("2.0", {})


# ------------------------------------------------------------------ the builder


def a3_server(index: int, pod: Optional[str], devices: int = 16, sdid_base: int = 0,
              host: str = "") -> ServerEntry:
    return ServerEntry(
        index, f"172.16.{index}.1", host or f"192.168.0.{index + 1}",
        tuple(DeviceEntry(d, f"10.20.{index}.{d + 1}",
                          None if pod is None else sdid_base + d) for d in range(devices)),
        pod)


def test_v1_2_table_exact_shape() -> None:
    table = build_rank_table([a3_server(0, "7", 2, 0), a3_server(1, "7", 2, 16)])
    assert table == {
        "version": "1.2", "status": "completed", "server_count": "2",
        "server_list": [
            {"server_id": "192.168.0.1", "container_ip": "172.16.0.1", "device": [
                {"device_id": "0", "device_ip": "10.20.0.1", "rank_id": "0",
                 "super_device_id": "0"},
                {"device_id": "1", "device_ip": "10.20.0.2", "rank_id": "1",
                 "super_device_id": "1"}]},
            {"server_id": "192.168.0.2", "container_ip": "172.16.1.1", "device": [
                {"device_id": "0", "device_ip": "10.20.1.1", "rank_id": "2",
                 "super_device_id": "16"},
                {"device_id": "1", "device_ip": "10.20.1.2", "rank_id": "3",
                 "super_device_id": "17"}]},
        ],
        "super_pod_list": [{"super_pod_id": "7", "server_list": [
            {"server_id": "192.168.0.1"}, {"server_id": "192.168.0.2"}]}],
    }
    assert validate_rank_table(table, "mindie") == []


def test_servers_of_one_super_pod_are_contiguous_and_ranks_follow_the_list() -> None:
    # nodes 0 and 2 in pod "0", nodes 1 and 3 in pod "1": listed 0, 2, 1, 3.
    servers = [a3_server(i, str(i % 2), 4, sdid_base=16 * i) for i in range(4)]
    table = build_rank_table(servers)
    assert [s["container_ip"] for s in table["server_list"]] == [
        "172.16.0.1", "172.16.2.1", "172.16.1.1", "172.16.3.1"]
    ranks = [int(d["rank_id"]) for s in table["server_list"] for d in s["device"]]
    assert ranks == list(range(16))
    assert [[m["server_id"] for m in p["server_list"]] for p in table["super_pod_list"]] == [
        ["192.168.0.1", "192.168.0.3"], ["192.168.0.2", "192.168.0.4"]]
    assert validate_rank_table(table, "mindie") == []


def test_forced_1_0_drops_super_pods_and_auto_without_pods_stays_1_0() -> None:
    table = build_rank_table([a3_server(0, "0"), a3_server(1, "0", sdid_base=16)], "1.0")
    assert table["version"] == "1.0" and "super_pod_list" not in table
    assert all("super_device_id" not in d for s in table["server_list"] for d in s["device"])
    plain = build_rank_table([a3_server(0, None), a3_server(1, None)])
    assert plain == table


@pytest.mark.parametrize(("servers", "version", "words"), [
    ([a3_server(0, "0"), a3_server(1, None)], "auto",
     "node 0 reports an A3 super pod but node 1 does not"),
    ([a3_server(0, None), a3_server(1, None)], "1.2", "--table-version 1.2, but node 0, node 1"),
    ([a3_server(0, "0"), a3_server(1, "0")], "auto", "SDID 0 is reported by node 0 and node 1"),
])
def test_builder_refuses_what_no_format_fits(servers: list[ServerEntry], version: str,
                                             words: str) -> None:
    with pytest.raises(ClusterInconsistent, match=words):
        build_rank_table(servers, version)


# ------------------------------------------------------------------ property: both directions


@st.composite
def super_pod_memberships(draw: st.DrawFn) -> list[ServerEntry]:
    """Random A3 memberships: 1-8 nodes in 1-3 super pods (in any node order), equal or
    uneven device counts, SDIDs unique inside each pod, one IP family."""
    count = draw(st.integers(1, 8))
    indexes = draw(st.lists(st.integers(0, 300), min_size=count, max_size=count, unique=True))
    pods = draw(st.lists(st.sampled_from(["0", "1", "42"]), min_size=count, max_size=count))
    v6 = draw(st.booleans())
    base = ipaddress.ip_address("2001:db8::1" if v6 else "10.0.0.1")
    even = draw(st.booleans())
    shared = draw(st.integers(1, 16))
    hosts = draw(st.lists(st.integers(0, 3), min_size=count, max_size=count))
    sdids = iter(draw(st.permutations(range(count * 16))))
    servers, next_ip = [], 0
    for n, index in enumerate(indexes):
        size = shared if even else draw(st.integers(1, 16))
        ids = draw(st.lists(st.integers(0, 63), min_size=size, max_size=size, unique=True))
        devices = []
        for device_id in ids:
            devices.append(DeviceEntry(device_id, str(base + next_ip), next(sdids)))
            next_ip += 1
        servers.append(ServerEntry(index, f"172.16.{n}.1", f"192.168.0.{hosts[n]}",
                                   tuple(devices), pods[n]))
    return draw(st.permutations(servers))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(super_pod_memberships())
def test_validate_accepts_every_v1_2_table_the_agent_builds(servers: list[ServerEntry]) -> None:
    table = build_rank_table(servers)
    assert table["version"] == "1.2"
    assert validate_rank_table(table, "hccl") == []
    if len(servers) >= 2 and len({len(s.devices) for s in servers}) == 1:
        assert validate_rank_table(table, "mindie") == []
    assert build_rank_table(list(reversed(servers))) == table
    # and its v1.0 twin, for the same cluster with --table-version 1.0
    assert validate_rank_table(build_rank_table(servers, "1.0"), "hccl") == []


def _drop_sdid(t: dict[str, Any]) -> None:
    del t["server_list"][-1]["device"][0]["super_device_id"]


def _repeat_sdid(t: dict[str, Any]) -> None:
    devices = [d for s in t["server_list"] for d in s["device"]]
    devices[-1]["super_device_id"] = devices[0]["super_device_id"]


def _split_pod(t: dict[str, Any]) -> None:
    # Move the first server to the end: its pod is no longer contiguous.
    t["server_list"].append(t["server_list"].pop(0))
    for i, server in enumerate(t["server_list"]):
        for j, device in enumerate(server["device"]):
            device["rank_id"] = str(i * len(server["device"]) + j)


def _stranger(t: dict[str, Any]) -> None:
    t["super_pod_list"][0]["server_list"].append({"server_id": "10.99.99.99"})


def _orphan(t: dict[str, Any]) -> None:
    t["super_pod_list"][-1]["server_list"].pop()


def _hex_sdid(t: dict[str, Any]) -> None:
    t["server_list"][0]["device"][0]["super_device_id"] = "0x10"


MUTATIONS: list[tuple[str, Callable[[dict[str, Any]], None], str]] = [
    ("an SDID missing", _drop_sdid, "super_device_id is missing"),
    ("an SDID repeated in one pod", _repeat_sdid, "in the same super pod"),
    ("a super pod split", _split_pod, "is not listed next to the other servers"),
    ("a server in no pod", _orphan, "is in no super pod"),
    ("a pod member not in server_list", _stranger, "is not in the top-level server_list"),
    ("a non-decimal SDID", _hex_sdid, "super_device_id"),
]


@pytest.mark.parametrize(("case", "mutate", "words"), MUTATIONS, ids=[m[0] for m in MUTATIONS])
def test_validate_refuses_broken_v1_2_tables(case: str, mutate: Callable[[dict[str, Any]], None],
                                             words: str) -> None:
    # Three servers in two pods: "a" holds nodes 0 and 1, "b" node 2.
    table = build_rank_table([a3_server(0, "5", 2, 0), a3_server(1, "5", 2, 16),
                              a3_server(2, "6", 2, 0)])
    assert validate_rank_table(table, "hccl") == []
    broken = copy.deepcopy(table)
    mutate(broken)
    problems = validate_rank_table(broken, "hccl")
    assert any(words in p.message for p in problems), (case, problems)
    assert validate_rank_table(broken, "mindie") != []


# ------------------------------------------------------------------ the rendezvous verdict


def a3_member(index: int, pod: Optional[str], nodes: int = 4, sdid_base: Optional[int] = None
              ) -> MemberDoc:
    doc = member(index, nodes=nodes)
    if pod is None:
        return doc
    base = index * 8 if sdid_base is None else sdid_base
    devices = tuple(DeviceRecord(device_id=d.device_id, device_ip=d.device_ip,
                                 super_device_id=base + d.device_id) for d in doc.data.devices)
    data = doc.data.model_copy(update={"super_pod_id": pod, "devices": devices})
    return doc.model_copy(update={"data": data})


def test_a_mixed_cluster_aborts_as_soon_as_both_kinds_are_present_naming_them() -> None:
    slots: dict[int, Any] = {0: a3_member(0, "1"), 1: a3_member(1, "1"), 2: a3_member(2, None)}
    got = decide.evaluate(slots, 4, 1, False)
    assert isinstance(got, decide.Abort)
    assert got.reason.startswith("master 0 (node 0), worker 0 (node 1) report an A3 super pod "
                                 "but worker 1 (node 2) does not")
    assert got.nodes == (0, 1, 2)


def test_a_super_pod_cluster_completes_and_the_1_0_request_ignores_a_mix() -> None:
    slots: dict[int, Any] = {i: a3_member(i, str(i // 2)) for i in range(4)}
    assert isinstance(decide.evaluate(slots, 4, 1, False), decide.Complete)
    slots[3] = a3_member(3, None)
    assert isinstance(decide.evaluate(slots, 4, 1, False, table_version="1.0"),
                      decide.Complete)


def test_forced_1_2_aborts_on_a_node_without_super_pod() -> None:
    slots: dict[int, Any] = {0: a3_member(0, "1"), 3: a3_member(3, None)}
    got = decide.evaluate(slots, 4, 1, False, table_version="1.2")
    assert isinstance(got, decide.Abort)
    assert got.reason == "--table-version 1.2, but worker 2 (node 3) reports no super pod"
    assert got.nodes == (3,)


def test_a_repeated_sdid_in_one_pod_aborts() -> None:
    slots: dict[int, Any] = {0: a3_member(0, "1", 2, sdid_base=0),
                             1: a3_member(1, "1", 2, sdid_base=4)}
    got = decide.evaluate(slots, 2, 1, False)
    assert isinstance(got, decide.Abort)
    assert got.reason == ("SDID 4 is reported by master 0 (node 0) and worker 0 (node 1) in "
                          "super pod 1")


def test_a_member_outside_super_pods_keeps_its_digest() -> None:
    doc = member(0)
    text = json.dumps(doc.data.model_dump(mode="json", exclude_none=True), sort_keys=True)
    assert "super" not in text
    assert a3_member(0, "1").data.digest() != doc.data.digest()
    assert node_name(0, 1) == "master 0 (node 0)"
