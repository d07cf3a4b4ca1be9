"""One bad rank table per rule: the exact problem paths, and messages that name the value.

These are the rules `ascend-node validate` promises: HCCL's rank-table rules (hicann/hccl
docs/zh/user_guide/.../rank_table_config_a2.md, _a3.md) and MindIE's (MindIE-LLM
src/config_manager/ranktable_config.cpp and atb_llm/utils/env.py @8b4871a (2026-04), run
against hand-made tables; listed in ascend_node/ranktable/validate.py). Each case starts
from a valid table, breaks one thing, and lists every problem expected for each target
("hccl": HCCL alone; "mindie": HCCL plus MindIE).
"""

from __future__ import annotations

import copy
import ipaddress
import json
from pathlib import Path
from typing import Any, Callable, NamedTuple

import pytest

from ascend_node.ranktable import validate_rank_table

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "ranktables"

Expected = list[tuple[str, str]]  # (path, text the message must contain)


def table(servers: int = 2, devices: int = 8, version: str = "1.0") -> dict[str, Any]:
    """A valid table; written out literally so these tests do not trust the builder."""
    server_list = []
    for s in range(servers):
        server_list.append(
            {
                "server_id": str(ipaddress.ip_address("192.168.1.1") + s),
                "container_ip": str(ipaddress.ip_address("172.16.0.10") + s),
                "device": [
                    {
                        "device_id": str(d),
                        "device_ip": str(ipaddress.ip_address("10.20.0.2") + s * 64 + d),
                        "rank_id": str(s * devices + d),
                    }
                    for d in range(devices)
                ],
            }
        )
    return {
        "version": version,
        "status": "completed",
        "server_count": str(servers),
        "server_list": server_list,
    }


def superpod(servers: int = 2, devices: int = 16, pods: int = 1) -> dict[str, Any]:
    """A valid v1.2 table; servers are spread over `pods` super pods in listing order."""
    doc = table(servers, devices, version="1.2")
    for server in doc["server_list"]:
        for device in server["device"]:
            device["super_device_id"] = str(100 + int(device["rank_id"]))
    per_pod = -(-servers // pods)
    doc["super_pod_list"] = [
        {
            "super_pod_id": str(p),
            "server_list": [
                {"server_id": s["server_id"]}
                for s in doc["server_list"][p * per_pod : (p + 1) * per_pod]
            ],
        }
        for p in range(pods)
    ]
    return doc


def edit(doc: dict[str, Any], path: str, value: Any) -> dict[str, Any]:
    """Set (or delete, when value is DELETE) the value at a dotted path like 'server_list.1.x'."""
    node: Any = doc
    keys = [int(k) if k.isdigit() else k for k in path.split(".")]
    for key in keys[:-1]:
        node = node[key]
    if value is DELETE:
        del node[keys[-1]]
    else:
        node[keys[-1]] = value
    return doc


DELETE = object()
D = "$.server_list[1].device[3]"  # the device most cases break
S1 = "server_list.1"
DEV = "server_list.1.device.3"


class Case(NamedTuple):
    name: str
    doc: Callable[[], Any]
    hccl: Expected
    mindie: Expected


def same(name: str, doc: Callable[[], Any], *expected: tuple[str, str]) -> Case:
    """A rule both targets apply with the same outcome."""
    return Case(name, doc, list(expected), list(expected))


def mindie_only(name: str, doc: Callable[[], Any], *expected: tuple[str, str]) -> Case:
    return Case(name, doc, [], list(expected))


def swapped_servers() -> dict[str, Any]:
    doc = table()
    doc["server_list"].reverse()
    return doc


def interleaved() -> dict[str, Any]:
    doc = table(2, 4)
    for device, rank in zip(doc["server_list"][0]["device"], [0, 1, 2, 7]):
        device["rank_id"] = str(rank)
    for device, rank in zip(doc["server_list"][1]["device"], [3, 4, 5, 6]):
        device["rank_id"] = str(rank)
    return doc


def uneven() -> dict[str, Any]:
    doc = table()
    doc["server_list"][1]["device"] = doc["server_list"][1]["device"][:4]
    return doc


def without_device_ips(doc: dict[str, Any]) -> dict[str, Any]:
    for server in doc["server_list"]:
        for device in server["device"]:
            del device["device_ip"]
    return doc


def no_pod_for_second_server() -> dict[str, Any]:
    doc = superpod()
    doc["super_pod_list"][0]["server_list"].pop()
    return doc


def pods_not_contiguous() -> dict[str, Any]:
    doc = superpod(3, 4, pods=2)  # pod 0: servers 0,1; pod 1: server 2
    doc["super_pod_list"][0]["server_list"][1] = {"server_id": "192.168.1.3"}
    doc["super_pod_list"][1]["server_list"][0] = {"server_id": "192.168.1.2"}
    return doc


def pod_names_unknown_server() -> dict[str, Any]:
    doc = superpod()
    doc["super_pod_list"][0]["server_list"].append({"server_id": "1.2.3.4"})
    return doc


def server_in_two_pods() -> dict[str, Any]:
    doc = superpod(2, 4, pods=2)
    doc["super_pod_list"][1]["server_list"].append({"server_id": "192.168.1.1"})
    return doc


LONG = "x" * 300
NO_MASTER = ("$.server_list", 'rank_id "0"')

CASES = [
    # --- the document --------------------------------------------------------------
    same("doc-array", lambda: [], ("$", "array")),
    same("doc-null", lambda: None, ("$", "null")),
    same("doc-number", lambda: 3.5, ("$", "3.5")),
    same("doc-string", lambda: "ranktable", ("$", '"ranktable"')),
    same("version-missing", lambda: edit(table(), "version", DELETE), ("$.version", "missing")),
    same("version-2.0", lambda: edit(table(), "version", "2.0"), ("$.version", '"2.0"')),
    same("version-number", lambda: edit(table(), "version", 1.0), ("$.version", "number 1.0")),
    same(
        "status-initializing",
        lambda: edit(table(), "status", "initializing"),
        ("$.status", '"initializing"'),
    ),
    same("status-missing", lambda: edit(table(), "status", DELETE), ("$.status", "missing")),
    same("status-null", lambda: edit(table(), "status", None), ("$.status", "null")),
    same(
        "server_count-mismatch",
        lambda: edit(table(), "server_count", "3"),
        ("$.server_count", '"3"'),
    ),
    same(
        "server_count-2abc",
        lambda: edit(table(), "server_count", "2abc"),
        ("$.server_count", '"2abc"'),
    ),
    same(
        "server_count-number",
        lambda: edit(table(), "server_count", 2),
        ("$.server_count", "number 2"),
    ),
    same(
        "server_count-missing",
        lambda: edit(table(), "server_count", DELETE),
        ("$.server_count", "missing"),
    ),
    same(
        "server_list-missing",
        lambda: edit(table(), "server_list", DELETE),
        ("$.server_list", "missing"),
    ),
    same(
        "server_list-object",
        lambda: edit(table(), "server_list", {}),
        ("$.server_list", "object"),
    ),
    Case(
        "server_list-empty",
        lambda: edit(edit(table(), "server_list", []), "server_count", "0"),
        [("$.server_list", "empty")],
        [("$.server_list", "empty"), ("$.server_count", '"0"')],
    ),
    # --- servers ---------------------------------------------------------------------
    same(
        "server-not-object",
        lambda: edit(table(), S1, "node-1"),
        ("$.server_list[1]", '"node-1"'),
    ),
    same(
        "server_id-missing",
        lambda: edit(table(), f"{S1}.server_id", DELETE),
        ("$.server_list[1].server_id", "missing"),
    ),
    same(
        "server_id-empty",
        lambda: edit(table(), f"{S1}.server_id", ""),
        ("$.server_list[1].server_id", "empty"),
    ),
    same(
        "server_id-number",
        lambda: edit(table(), f"{S1}.server_id", 7),
        ("$.server_list[1].server_id", "number 7"),
    ),
    same(
        "server_id-duplicate",
        lambda: edit(table(), f"{S1}.server_id", "192.168.1.1"),
        ("$.server_list[1].server_id", '"192.168.1.1"'),
    ),
    Case(
        "server_id-65-chars",
        lambda: edit(table(), f"{S1}.server_id", "a" * 65),
        [("$.server_list[1].server_id", "a" * 20)],
        [("$.server_list[1].server_id", "64"), ("$.server_list[1].server_id", "a" * 20)],
    ),
    mindie_only(
        "server_id-hostname",
        lambda: edit(table(), f"{S1}.server_id", "node_1"),
        ("$.server_list[1].server_id", '"node_1"'),
    ),
    same(
        "host_ip-number",
        lambda: edit(table(), f"{S1}.host_ip", 10),
        ("$.server_list[1].host_ip", "number 10"),
    ),
    mindie_only(
        "container_ip-missing",
        lambda: edit(table(), f"{S1}.container_ip", DELETE),
        ("$.server_list[1].container_ip", "missing"),
    ),
    mindie_only(
        "container_ip-empty",
        lambda: edit(table(), f"{S1}.container_ip", ""),
        ("$.server_list[1].container_ip", "empty"),
    ),
    mindie_only(
        "container_ip-unspecified",
        lambda: edit(table(), f"{S1}.container_ip", "0.0.0.0"),
        ("$.server_list[1].container_ip", '"0.0.0.0"'),
    ),
    mindie_only(
        "container_ip-name",
        lambda: edit(table(), f"{S1}.container_ip", "pod-a"),
        ("$.server_list[1].container_ip", '"pod-a"'),
    ),
    mindie_only(
        "container_ip-duplicate",
        lambda: edit(table(), f"{S1}.container_ip", "172.16.0.10"),
        ("$.server_list[1].container_ip", '"172.16.0.10"'),
    ),
    same(
        "container_ip-number",
        lambda: edit(table(), f"{S1}.container_ip", 1),
        ("$.server_list[1].container_ip", "number 1"),
    ),
    # --- device lists ----------------------------------------------------------------
    same(
        "device-missing",
        lambda: edit(table(), f"{S1}.device", DELETE),
        ("$.server_list[1].device", "missing"),
    ),
    same(
        "device-not-array",
        lambda: edit(table(), f"{S1}.device", "0-7"),
        ("$.server_list[1].device", '"0-7"'),
    ),
    Case(
        "device-empty",
        lambda: edit(table(), f"{S1}.device", []),
        [("$.server_list[1].device", '"192.168.1.2" has no devices')],
        [
            ("$.server_list[1].device", '"192.168.1.2" has no devices'),
            ("$.server_list[1].device", "0 devices"),
        ],
    ),
    same("device-not-object", lambda: edit(table(), DEV, "3"), (D, '"3"')),
    mindie_only(
        "devices-33-per-server",
        lambda: table(2, 33),
        ("$.server_list[0].device", "33"),
        ("$.server_list[1].device", "33"),
    ),
    mindie_only("devices-uneven", uneven, ("$.server_list[1].device", "4 devices")),
    # --- device_id -------------------------------------------------------------------
    same(
        "device_id-missing",
        lambda: edit(table(), f"{DEV}.device_id", DELETE),
        (f"{D}.device_id", "missing"),
    ),
    same(
        "device_id-leading-zero",
        lambda: edit(table(), f"{DEV}.device_id", "03"),
        (f"{D}.device_id", '"03"'),
    ),
    same(
        "device_id-negative",
        lambda: edit(table(), f"{DEV}.device_id", "-1"),
        (f"{D}.device_id", '"-1"'),
    ),
    same(
        "device_id-number",
        lambda: edit(table(), f"{DEV}.device_id", 3),
        (f"{D}.device_id", "number 3"),
    ),
    same(
        "device_id-duplicate-in-server",
        lambda: edit(table(), f"{DEV}.device_id", "2"),
        (f"{D}.device_id", '"2"'),
    ),
    mindie_only(
        "device_id-64",
        lambda: edit(table(), f"{DEV}.device_id", "64"),
        (f"{D}.device_id", '"64"'),
    ),
    # --- device_ip -------------------------------------------------------------------
    same(
        "device_ip-dashes",
        lambda: edit(table(), f"{DEV}.device_ip", "-.-.-.-"),
        (f"{D}.device_ip", '"-.-.-.-"'),
    ),
    same(
        "device_ip-minus-one",
        lambda: edit(table(), f"{DEV}.device_ip", "-1"),
        (f"{D}.device_ip", '"-1"'),
    ),
    same(
        "device_ip-unspecified",
        lambda: edit(table(), f"{DEV}.device_ip", "0.0.0.0"),
        (f"{D}.device_ip", '"0.0.0.0"'),
    ),
    same(
        "device_ip-link-local",
        lambda: edit(table(), f"{DEV}.device_ip", "169.254.3.4"),
        (f"{D}.device_ip", '"169.254.3.4"'),
    ),
    same(
        "device_ip-loopback",
        lambda: edit(table(), f"{DEV}.device_ip", "127.0.0.1"),
        (f"{D}.device_ip", '"127.0.0.1"'),
    ),
    same(
        "device_ip-multicast",
        lambda: edit(table(), f"{DEV}.device_ip", "224.0.0.1"),
        (f"{D}.device_ip", '"224.0.0.1"'),
    ),
    same(
        "device_ip-leading-zeros",
        lambda: edit(table(), f"{DEV}.device_ip", "10.20.001.2"),
        (f"{D}.device_ip", '"10.20.001.2"'),
    ),
    same(
        "device_ip-duplicate-across-servers",
        lambda: edit(table(), f"{DEV}.device_ip", "10.20.0.2"),
        (f"{D}.device_ip", '"10.20.0.2"'),
    ),
    same(
        "device_ip-mixed-family",
        lambda: edit(table(), f"{DEV}.device_ip", "2001:db8::5"),
        (f"{D}.device_ip", '"2001:db8::5" is IPv6'),
    ),
    same(
        "device_ip-missing-multi-server",
        lambda: edit(table(), f"{DEV}.device_ip", DELETE),
        (f"{D}.device_ip", "missing"),
    ),
    same(
        "device_ip-number",
        lambda: edit(table(), f"{DEV}.device_ip", 10),
        (f"{D}.device_ip", "number 10"),
    ),
    Case(
        "device_ip-300-chars",
        lambda: edit(table(), f"{DEV}.device_ip", LONG),
        [(f"{D}.device_ip", "x" * 40)],
        [(f"{D}.device_ip", "x" * 40)],
    ),
    mindie_only(
        "device_ip-missing-one-server",
        lambda: edit(table(1, 1), "server_list.0.device.0.device_ip", DELETE),
        ("$.server_count", '"1"'),
        ("$.server_list[0].device[0].device_ip", "missing"),
    ),
    # --- rank_id ---------------------------------------------------------------------
    Case(
        "rank_id-00",
        lambda: edit(table(), "server_list.0.device.0.rank_id", "00"),
        [("$.server_list[0].device[0].rank_id", '"00"')],
        [("$.server_list[0].device[0].rank_id", '"00"'), NO_MASTER],
    ),
    same(
        "rank_id-negative",
        lambda: edit(table(), f"{DEV}.rank_id", "-1"),
        (f"{D}.rank_id", '"-1"'),
    ),
    same(
        "rank_id-number",
        lambda: edit(table(), f"{DEV}.rank_id", 11),
        (f"{D}.rank_id", "number 11"),
    ),
    same(
        "rank_id-missing",
        lambda: edit(table(), f"{DEV}.rank_id", DELETE),
        (f"{D}.rank_id", "missing"),
    ),
    same(
        "rank_id-duplicate",
        lambda: edit(table(), "server_list.1.device.7.rank_id", "8"),
        ("$.server_list[1].device[7].rank_id", '"8"'),
        ("$.server_list", "rank_id 15 missing"),
    ),
    same(
        "rank_id-gap",
        lambda: edit(table(), "server_list.1.device.7.rank_id", "16"),
        ("$.server_list[1].device[7].rank_id", '"16"'),
        ("$.server_list", "rank_id 15 missing"),
    ),
    same(
        "rank_id-interleaved",
        interleaved,
        ("$.server_list[1]", "3,4,5,6 of this server fall inside 0..7"),
    ),
    mindie_only(
        "rank_id-above-511",
        lambda: table(17, 32),
        *[(f"$.server_list[16].device[{d}].rank_id", f'"{512 + d}"') for d in range(32)],
    ),
    mindie_only("master-not-first", swapped_servers, ("$.server_list[1]", 'rank_id "0"')),
    # --- server counts MindIE accepts -------------------------------------------------
    mindie_only("one-node", lambda: table(1, 8), ("$.server_count", '"1"')),
    mindie_only("61-servers", lambda: table(61, 1), ("$.server_count", '"61"')),
    # --- v1.2 (A3 SuperPoD) ------------------------------------------------------------
    Case(
        "v1.2-no-server_count",
        lambda: edit(superpod(), "server_count", DELETE),
        [],
        [("$.server_count", "missing")],
    ),
    Case(
        "v1.2-one-pod-no-device_ip",
        lambda: without_device_ips(superpod()),
        [],
        [
            (f"$.server_list[{s}].device[{d}].device_ip", "missing")
            for s in range(2)
            for d in range(16)
        ],
    ),
    same(
        "v1.2-two-pods-no-device_ip",
        lambda: edit(superpod(2, 4, pods=2), "server_list.1.device.3.device_ip", DELETE),
        (f"{D}.device_ip", "missing"),
    ),
    same(
        "v1.2-super_device_id-missing",
        lambda: edit(superpod(), f"{DEV}.super_device_id", DELETE),
        (f"{D}.super_device_id", "missing"),
    ),
    same(
        "v1.2-super_device_id-empty",
        lambda: edit(superpod(), f"{DEV}.super_device_id", ""),
        (f"{D}.super_device_id", '""'),
    ),
    same(
        "v1.2-ai-server-mode-empty-super_device_id",
        lambda: edit(edit(superpod(), "super_pod_list", DELETE), f"{DEV}.super_device_id", ""),
        (f"{D}.super_device_id", '""'),
    ),
    same(
        "v1.2-super_device_id-duplicate-in-pod",
        lambda: edit(superpod(), f"{DEV}.super_device_id", "100"),
        (f"{D}.super_device_id", '"100"'),
    ),
    same(
        "v1.2-server-in-no-pod",
        no_pod_for_second_server,
        ("$.server_list[1]", '"192.168.1.2"'),
    ),
    same(
        "v1.2-pod-names-unknown-server",
        pod_names_unknown_server,
        ("$.super_pod_list[0]", '"1.2.3.4"'),
    ),
    same("v1.2-pods-not-contiguous", pods_not_contiguous, ("$.server_list[2]", '"192.168.1.3"')),
    same(
        "v1.2-server-in-two-pods",
        server_in_two_pods,
        ("$.super_pod_list[1].server_list[1].server_id", '"192.168.1.1"'),
    ),
    same(
        "v1.2-super_pod_list-object",
        lambda: edit(superpod(), "super_pod_list", {"0": []}),
        ("$.super_pod_list", "object"),
    ),
    same(
        "v1.2-super_pod_id-duplicate",
        lambda: edit(superpod(2, 4, pods=2), "super_pod_list.1.super_pod_id", "0"),
        ("$.super_pod_list[1].super_pod_id", '"0"'),
    ),
]


def _check(problems: list[Any], expected: Expected) -> None:
    assert sorted(p.path for p in problems) == sorted(path for path, _ in expected), problems
    for path, text in expected:
        messages = [p.message for p in problems if p.path == path]
        assert any(text in m for m in messages), (path, text, messages)
        assert all("\n" not in m for m in messages)


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_hccl_rules(case: Case) -> None:
    _check(validate_rank_table(case.doc(), "hccl"), case.hccl)


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_mindie_rules(case: Case) -> None:
    _check(validate_rank_table(case.doc(), "mindie"), case.mindie)


def test_case_names_are_unique() -> None:
    assert len({c.name for c in CASES}) == len(CASES)


@pytest.mark.parametrize(
    "doc",
    [
        table(),
        table(2, 16),
        table(60, 8),
        table(2, 32),
        superpod(),
        superpod(4, 16, pods=2),
        edit(superpod(), "super_pod_list", DELETE),
    ],
    ids=["2x8", "2x16", "60x8", "2x32", "v1.2-1pod", "v1.2-2pods", "v1.2-ai-server-mode"],
)
@pytest.mark.parametrize("target", ["hccl", "mindie"])
def test_valid_tables_have_no_problems(doc: dict[str, Any], target: str) -> None:
    assert validate_rank_table(copy.deepcopy(doc), target) == []  # type: ignore[arg-type]


def test_same_device_ids_on_different_servers_are_fine() -> None:
    doc = table()
    ids = [[d["device_id"] for d in s["device"]] for s in doc["server_list"]]
    assert ids[0] == ids[1]
    assert validate_rank_table(doc, "mindie") == []


def test_hccl_accepts_one_server_without_device_ip() -> None:
    assert validate_rank_table(without_device_ips(table(1, 8)), "hccl") == []


def test_every_problem_is_reported_not_just_the_first() -> None:
    doc = table()
    edit(doc, "status", "initializing")
    edit(doc, f"{DEV}.device_ip", "-.-.-.-")
    edit(doc, "server_list.0.server_id", "node-0")
    paths = [p.path for p in validate_rank_table(doc, "mindie")]
    assert paths == ["$.status", "$.server_list[0].server_id", f"{D}.device_ip"]


def test_unknown_target_is_a_programming_error() -> None:
    with pytest.raises(ValueError, match="'slurm'"):
        validate_rank_table(table(), "slurm")  # type: ignore[arg-type]


# --- the real tables in fixtures/ranktables ----------------------------------------------

FIXTURE_CASES: list[tuple[str, str, Expected]] = [
    ("ranktable-2x8.json", "mindie", []),
    ("ranktable-2x8.json", "hccl", []),
    ("ranktable-fuzz.json", "mindie", []),
    ("superpod-v1.2.json", "mindie", []),
    ("one-node.json", "hccl", []),
    ("one-node.json", "mindie", [("$.server_count", '"1"')]),
    (
        "bad-device-ip-dashes.json",
        "mindie",
        [("$.server_list[1].device[3].device_ip", '"-.-.-.-"')],
    ),
    ("bad-interleaved.json", "hccl", [("$.server_list[1]", "3,4,5,6")]),
    (
        "bad-rank-00.json",
        "mindie",
        [("$.server_list[0].device[0].rank_id", '"00"'), NO_MASTER],
    ),
    (
        "bad-numbers.json",
        "hccl",
        [("$.server_count", "number 2")]
        + [
            (f"$.server_list[{s}].device[{d}].{key}", "number")
            for s in range(2)
            for d in range(2)
            for key in ("device_id", "rank_id")
        ],
    ),
]


@pytest.mark.parametrize(
    ("name", "target", "expected"),
    FIXTURE_CASES,
    ids=[f"{n}-{t}" for n, t, _ in FIXTURE_CASES],
)
def test_fixture_tables(name: str, target: str, expected: Expected) -> None:
    doc = json.loads((FIXTURES / name).read_text())
    _check(validate_rank_table(doc, target), expected)  # type: ignore[arg-type]


@pytest.mark.parametrize(("text", "paths"), [
    ('{"a": 1, "a": 2}', ["$.a"]),
    ('{"a": {"b": [1, {"c": 1, "c": 1, "c": 1}]}}', ["$.a.b[1].c"]),
    ('[{"x": 1}, {"x": 1, "y": 2, "x": 3}]', ["$[1].x"]),
    ('{"a": 1, "b": {"a": 2}}', []),  # the same key in two objects is fine
])
def test_a_key_named_twice_in_one_object_is_a_problem_at_its_path(text: str,
                                                                 paths: list[str]) -> None:
    from ascend_node.ranktable import parse_table_json

    doc, problems = parse_table_json(text.encode())
    assert [p.path for p in problems] == paths
    assert doc == json.loads(text)
    if paths:
        assert "appears" in problems[0].message and "keep one" in problems[0].message
