"""Building, rendering, reading and file-linting rank tables (ascend_node.ranktable).

The builder's output is what every node hands to HCCL and MindIE, so these tests pin its
exact shape and check that everything it produces passes the validator.
"""

from __future__ import annotations

import copy
import ipaddress
import json
import os
import stat
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ascend_node.errors import ClusterInconsistent, InvalidInputError
from ascend_node.ranktable import (
    DeviceEntry,
    Problem,
    ServerEntry,
    build_rank_table,
    local_server,
    master_ip,
    render_rank_table,
    validate_file,
    validate_rank_table,
    world_size,
)

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "ranktables"


def server(
    index: int,
    device_ids: list[int],
    *,
    pod: str | None = None,
    host: str | None = None,
) -> ServerEntry:
    return ServerEntry(
        global_index=index,
        pod_ip=pod or f"172.16.0.{index + 10}",
        host_ip=host or f"192.168.1.{index + 1}",
        devices=tuple(DeviceEntry(d, f"10.20.{index}.{d + 2}") for d in device_ids),
    )


def ranks(table: dict[str, Any]) -> list[list[str]]:
    return [[d["rank_id"] for d in s["device"]] for s in table["server_list"]]


# --------------------------------------------------------------------------- build


def test_two_servers_exact_table_and_text() -> None:
    table = build_rank_table([server(0, [0, 1]), server(1, [0, 1])])
    assert table == {
        "version": "1.0",
        "status": "completed",
        "server_count": "2",
        "server_list": [
            {
                "server_id": "192.168.1.1",
                "container_ip": "172.16.0.10",
                "device": [
                    {"device_id": "0", "device_ip": "10.20.0.2", "rank_id": "0"},
                    {"device_id": "1", "device_ip": "10.20.0.3", "rank_id": "1"},
                ],
            },
            {
                "server_id": "192.168.1.2",
                "container_ip": "172.16.0.11",
                "device": [
                    {"device_id": "0", "device_ip": "10.20.1.2", "rank_id": "2"},
                    {"device_id": "1", "device_ip": "10.20.1.3", "rank_id": "3"},
                ],
            },
        ],
    }
    text = render_rank_table(table)
    assert text.startswith(
        '{\n  "version": "1.0",\n  "status": "completed",\n  "server_count": "2",\n'
        '  "server_list": [\n    {\n      "server_id": "192.168.1.1",\n'
        '      "container_ip": "172.16.0.10",\n      "device": [\n        {\n'
        '          "device_id": "0",\n          "device_ip": "10.20.0.2",\n'
        '          "rank_id": "0"\n        },'
    )
    assert text.endswith("  ]\n}\n")
    assert json.loads(text) == table


def test_uneven_device_counts_use_prefix_sums() -> None:
    table = build_rank_table([server(0, [0, 1, 2]), server(1, [5]), server(2, [0, 1])])
    assert ranks(table) == [["0", "1", "2"], ["3"], ["4", "5"]]
    assert validate_rank_table(table, "hccl") == []


def test_duplicate_host_ips_switch_every_server_to_its_pod_ip() -> None:
    table = build_rank_table(
        [
            server(0, [0], host="192.168.1.1"),
            server(1, [0], host="192.168.1.1"),
            server(2, [0], host="192.168.1.9"),
        ]
    )
    assert [s["server_id"] for s in table["server_list"]] == [
        "172.16.0.10",
        "172.16.0.11",
        "172.16.0.12",
    ]
    assert [s["container_ip"] for s in table["server_list"]] == [
        "172.16.0.10",
        "172.16.0.11",
        "172.16.0.12",
    ]


def test_distinct_host_ips_are_the_server_ids() -> None:
    table = build_rank_table([server(0, [0], host="10.1.1.1"), server(1, [0], host="10.1.1.2")])
    assert [s["server_id"] for s in table["server_list"]] == ["10.1.1.1", "10.1.1.2"]


def test_servers_given_out_of_order_follow_global_index() -> None:
    table = build_rank_table([server(2, [0]), server(0, [0, 1]), server(1, [0])])
    assert [s["container_ip"] for s in table["server_list"]] == [
        "172.16.0.10",
        "172.16.0.11",
        "172.16.0.12",
    ]
    assert ranks(table) == [["0", "1"], ["2"], ["3"]]


def test_devices_given_out_of_order_follow_physical_id() -> None:
    entry = ServerEntry(
        0,
        "172.16.0.10",
        "192.168.1.1",
        (DeviceEntry(7, "10.0.0.7"), DeviceEntry(2, "10.0.0.2"), DeviceEntry(4, "10.0.0.4")),
    )
    table = build_rank_table([entry])
    assert [
        (d["device_id"], d["device_ip"], d["rank_id"]) for d in table["server_list"][0]["device"]
    ] == [
        ("2", "10.0.0.2", "0"),
        ("4", "10.0.0.4", "1"),
        ("7", "10.0.0.7", "2"),
    ]


def test_one_node_gets_a_table_valid_for_hccl_only() -> None:
    table = build_rank_table([server(0, list(range(8)))])
    assert table["server_count"] == "1"
    assert validate_rank_table(table, "hccl") == []
    assert [p.path for p in validate_rank_table(table, "mindie")] == ["$.server_count"]


def test_sixteen_devices_per_node() -> None:
    table = build_rank_table([server(0, list(range(16))), server(1, list(range(16)))])
    assert ranks(table)[1] == [str(r) for r in range(16, 32)]
    assert [d["device_id"] for d in table["server_list"][1]["device"]] == [
        str(d) for d in range(16)
    ]
    assert validate_rank_table(table, "mindie") == []


def test_all_values_are_strings() -> None:
    table = build_rank_table([server(0, [0, 1]), server(1, [0, 1])])
    assert all(isinstance(table[k], str) for k in ("version", "status", "server_count"))
    for entry in table["server_list"]:
        assert all(isinstance(v, str) for k, v in entry.items() if k != "device")
        for device in entry["device"]:
            assert all(isinstance(v, str) for v in device.values())


@pytest.mark.parametrize(
    ("servers", "text"),
    [
        ([], "no servers"),
        ([server(1, [0]), server(1, [0], pod="172.16.0.99")], "node 1 appears twice"),
        ([server(0, [0]), server(3, [])], "node 3"),
        ([server(0, [0]), server(1, [2, 2])], "device 2 twice"),
    ],
    ids=["empty", "duplicate-index", "no-devices", "duplicate-device"],
)
def test_impossible_membership_is_inconsistent(servers: list[ServerEntry], text: str) -> None:
    with pytest.raises(ClusterInconsistent, match=text) as info:
        build_rank_table(servers)
    assert info.value.exit_code == 5
    assert info.value.hint


def test_4096_servers_build_and_render() -> None:
    servers = [
        ServerEntry(
            i,
            str(ipaddress.ip_address("10.128.0.1") + i),
            str(ipaddress.ip_address("10.64.0.1") + i),
            tuple(
                DeviceEntry(d, str(ipaddress.ip_address("10.0.0.1") + i * 16 + d))
                for d in range(16)
            ),
        )
        for i in reversed(range(4096))
    ]
    table = build_rank_table(servers)
    text = render_rank_table(table)
    assert table["server_count"] == "4096"
    assert world_size(table) == 4096 * 16
    last = table["server_list"][-1]
    assert last["container_ip"] == str(ipaddress.ip_address("10.128.0.1") + 4095)
    assert [d["rank_id"] for d in last["device"]] == [str(r) for r in range(65520, 65536)]
    assert json.loads(text) == table
    assert validate_rank_table(table, "hccl") == []


# ------------------------------------------------------------------ render / readers


def test_render_is_byte_identical_for_equal_input_in_any_order() -> None:
    a = render_rank_table(build_rank_table([server(0, [0, 1]), server(1, [1, 0])]))
    b = render_rank_table(build_rank_table([server(1, [0, 1]), server(0, [1, 0])]))
    assert a == b
    assert a.isascii()
    assert a.endswith("}\n")


def test_render_escapes_non_ascii() -> None:
    assert render_rank_table({"server_id": "nœud"}) == '{\n  "server_id": "n\\u0153ud"\n}\n'


def test_master_world_size_and_local_server() -> None:
    table = build_rank_table([server(0, [0, 1]), server(1, [0, 1]), server(2, [0, 1])])
    assert master_ip(table) == "172.16.0.10"
    assert world_size(table) == 6
    mine = local_server(table, "172.16.0.11")
    assert mine is not None
    assert [d["rank_id"] for d in mine["device"]] == ["2", "3"]
    assert local_server(table, "172.16.0.1") is None  # exact match only, no prefix games


def test_master_ip_of_the_upstream_table() -> None:
    table = json.loads((FIXTURES / "ranktable-2x8.json").read_text())
    assert master_ip(table) == "127.0.0.1"
    assert world_size(table) == 16
    assert local_server(table, "61.47.2.184") == table["server_list"][1]


def test_master_ip_without_rank_zero_is_invalid_input() -> None:
    table = json.loads((FIXTURES / "bad-rank-00.json").read_text())
    with pytest.raises(InvalidInputError, match='rank_id "0"'):
        master_ip(table)


def test_local_server_refuses_an_ambiguous_match() -> None:
    table = build_rank_table([server(0, [0]), server(1, [0], pod="172.16.0.10")])
    with pytest.raises(ClusterInconsistent, match=r"172\.16\.0\.10 appears on 2 servers"):
        local_server(table, "172.16.0.10")


# ------------------------------------------------------------------------ property


@st.composite
def memberships(draw: st.DrawFn) -> list[ServerEntry]:
    """Random memberships with unique pod/device IPs, any host-IP collisions, one IP family."""
    count = draw(st.integers(1, 8))
    indexes = draw(st.lists(st.integers(0, 500), min_size=count, max_size=count, unique=True))
    v6 = draw(st.booleans())
    base = ipaddress.ip_address("2001:db8::1" if v6 else "10.0.0.1")
    even = draw(st.booleans())
    shared_count = draw(st.integers(1, 16))
    hosts = draw(st.lists(st.integers(0, 3), min_size=count, max_size=count))
    servers = []
    next_ip = 0
    for n, index in enumerate(indexes):
        size = shared_count if even else draw(st.integers(1, 16))
        ids = draw(st.lists(st.integers(0, 63), min_size=size, max_size=size, unique=True))
        devices = []
        for device_id in ids:
            devices.append(DeviceEntry(device_id, str(base + next_ip)))
            next_ip += 1
        servers.append(ServerEntry(index, f"172.16.{n}.1", f"192.168.0.{hosts[n]}", tuple(devices)))
    return draw(st.permutations(servers))


@settings(max_examples=150, deadline=None)
@given(memberships())
def test_every_built_table_validates_clean(servers: list[ServerEntry]) -> None:
    table = build_rank_table(servers)
    assert validate_rank_table(table, "hccl") == []
    counts = {len(s.devices) for s in servers}
    if len(servers) >= 2 and len(counts) == 1:
        assert validate_rank_table(table, "mindie") == []
    # every node renders the same bytes, whatever order it saw its peers in
    assert render_rank_table(build_rank_table(list(reversed(servers)))) == render_rank_table(table)


json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False)
    | st.text(max_size=20)
    | st.sampled_from(["0", "00", "1.0", "1.2", "completed", "10.0.0.1", "::1", "-1", ""])
    | st.just("9" * 5000),
    lambda children: (
        st.lists(children, max_size=5)
        | st.dictionaries(
            st.sampled_from(
                [
                    "version",
                    "status",
                    "server_count",
                    "server_list",
                    "server_id",
                    "container_ip",
                    "device",
                    "device_id",
                    "device_ip",
                    "rank_id",
                    "super_pod_list",
                    "super_pod_id",
                    "super_device_id",
                ]
            )
            | st.text(max_size=5),
            children,
            max_size=6,
        )
    ),
    max_leaves=40,
)


@settings(max_examples=200, deadline=None)
@given(json_values)
def test_render_is_exactly_the_stdlib_indented_json(value: Any) -> None:
    table = {"server_list": value, "version": "1.0"}
    assert render_rank_table(table) == json.dumps(table, indent=2, ensure_ascii=True) + "\n"


def test_render_matches_stdlib_for_odd_keys_and_tuples() -> None:
    table = {"a": {1: "x", None: [()], "b": (1, 2.5, True)}}
    assert render_rank_table(table) == json.dumps(table, indent=2, ensure_ascii=True) + "\n"


def _assert_well_formed(problems: list[Problem]) -> None:
    for problem in problems:
        assert problem.path.startswith("$")
        assert problem.message and "\n" not in problem.message


@settings(max_examples=300, deadline=None)
@given(json_values, st.sampled_from(["hccl", "mindie"]))
def test_validator_never_raises_on_arbitrary_json(doc: Any, target: str) -> None:
    _assert_well_formed(validate_rank_table(doc, target))  # type: ignore[arg-type]


@pytest.mark.parametrize("target", ["hccl", "mindie"])
def test_validator_survives_huge_numbers(target: Any) -> None:
    doc = json.loads((FIXTURES / "ranktable-2x8.json").read_text())
    doc["server_count"] = 10**5000  # beyond Python's int-to-str limit
    doc["server_list"][0]["device"][0]["rank_id"] = "9" * 5000
    paths = [p.path for p in validate_rank_table(doc, target)]
    assert "$.server_count" in paths
    assert "$.server_list[0].device[0].rank_id" in paths


def _paths(node: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    found = [prefix]
    if isinstance(node, dict):
        for key, value in node.items():
            found += _paths(value, (*prefix, key))
    elif isinstance(node, list):
        for index, value in enumerate(node):
            found += _paths(value, (*prefix, index))
    return found


def _base_tables() -> list[dict[str, Any]]:
    tables = [json.loads((FIXTURES / n).read_text()) for n in ("ranktable-2x8.json",)]
    tables.append(json.loads((FIXTURES / "superpod-v1.2.json").read_text()))
    return tables


BASES = _base_tables()


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data(), st.sampled_from(["hccl", "mindie"]))
def test_validator_never_raises_on_mutated_tables(data: st.DataObject, target: str) -> None:
    doc = copy.deepcopy(data.draw(st.sampled_from(BASES)))
    for _ in range(data.draw(st.integers(1, 3))):
        paths = [p for p in _paths(doc) if p]
        if not paths:
            break
        path = data.draw(st.sampled_from(paths))
        parent: Any = doc
        for key in path[:-1]:
            parent = parent[key]
        if data.draw(st.booleans()):
            parent[path[-1]] = data.draw(json_values)
        elif isinstance(parent, dict):
            del parent[path[-1]]
        else:
            parent.pop(path[-1])
    problems = validate_rank_table(doc, target)  # type: ignore[arg-type]
    _assert_well_formed(problems)


# ---------------------------------------------------------------------------- files


def write(path: Path, text: str, mode: int = 0o640) -> Path:
    path.write_text(text)
    path.chmod(mode)
    return path


def good_text() -> str:
    return (FIXTURES / "ranktable-2x8.json").read_text()


def file_messages(problems: list[Problem]) -> list[str]:
    return [p.message for p in problems if p.path == "file"]


def test_good_file_passes(tmp_path: Path) -> None:
    path = write(tmp_path / "ranktable.json", good_text())
    assert validate_file(path, check_owner_uid=os.getuid()) == []
    assert validate_file(str(path), "hccl") == []


@pytest.mark.parametrize("mode", [0o640, 0o600, 0o440, 0o400])
def test_strict_modes_pass(tmp_path: Path, mode: int) -> None:
    assert validate_file(write(tmp_path / "t.json", good_text(), mode)) == []


@pytest.mark.parametrize("mode", [0o644, 0o660, 0o740, 0o641, 0o666])
def test_loose_modes_fail_naming_the_mode(tmp_path: Path, mode: int) -> None:
    problems = validate_file(write(tmp_path / "t.json", good_text(), mode))
    assert file_messages(problems) == [
        f"{tmp_path / 't.json'} has mode {mode:04o}: MindIE requires 0640 or stricter"
    ]


MINDCLUSTER = Path(__file__).resolve().parent.parent / "fixtures" / "mindcluster"


@pytest.mark.parametrize("name", ["hccl-2x8-completed.json", "hccl-a3-2x16-v1.2.json"])
def test_mindclusters_own_0644_hccl_json_is_valid_for_hccl(tmp_path: Path, name: str) -> None:
    """MindCluster writes hccl.json 0644 and HCCL reads it: 0640 is MindIE's rule alone."""
    path = write(tmp_path / "hccl.json", (MINDCLUSTER / name).read_text(), 0o644)
    assert validate_file(path, "hccl") == []
    assert file_messages(validate_file(path, "mindie")) == [
        f"{path} has mode 0644: MindIE requires 0640 or stricter"]


def test_mindie_file_rules_are_not_applied_for_hccl(tmp_path: Path) -> None:
    """Symlink (a ConfigMap mount), special characters and long paths are MindIE's and
    atb_llm's refusals, not HCCL's."""
    real = write(tmp_path / "rank table.json", good_text(), 0o666)
    link = tmp_path / "link.json"
    link.symlink_to(real)
    long_path = str(tmp_path) + "/." * 130 + "/link.json"
    for path in (real, link, long_path):
        assert validate_file(path, "hccl") == [], path
        assert file_messages(validate_file(path, "mindie")), path


def test_for_hccl_a_missing_empty_or_foreign_owned_file_is_still_a_problem(
        tmp_path: Path) -> None:
    [missing] = validate_file(tmp_path / "absent.json", "hccl")
    assert missing.path == "file" and "cannot be read" in missing.message
    [empty] = validate_file(write(tmp_path / "e.json", ""), "hccl")
    assert empty == Problem("file", f"{tmp_path / 'e.json'} is empty")
    path = write(tmp_path / "t.json", good_text(), 0o644)
    [owner] = file_messages(validate_file(path, "hccl", check_owner_uid=os.getuid() + 1))
    assert "owned by uid" in owner  # asked for explicitly (--owner-uid)


def test_foreign_owner_fails(tmp_path: Path) -> None:
    path = write(tmp_path / "t.json", good_text())
    other = os.getuid() + 1
    [message] = file_messages(validate_file(path, check_owner_uid=other))
    assert f"uid {os.getuid()}" in message and f"uid {other}" in message


def test_symlink_is_reported_and_its_target_still_checked(tmp_path: Path) -> None:
    target = write(tmp_path / "real.json", good_text().replace('"completed"', '"initializing"'))
    link = tmp_path / "link.json"
    link.symlink_to(target)
    problems = validate_file(link)
    assert [p.path for p in problems] == ["file", "$.status"]
    assert "is a symlink" in problems[0].message and str(link) in problems[0].message


def test_symlinked_parent_directory_is_fine(tmp_path: Path) -> None:
    (tmp_path / "real").mkdir()
    write(tmp_path / "real" / "t.json", good_text())
    (tmp_path / "alias").symlink_to(tmp_path / "real")
    assert validate_file(tmp_path / "alias" / "t.json") == []


def test_missing_file(tmp_path: Path) -> None:
    [problem] = validate_file(tmp_path / "absent.json")
    assert problem.path == "file" and "absent.json" in problem.message


def test_directory_is_not_a_regular_file(tmp_path: Path) -> None:
    [message] = file_messages(validate_file(tmp_path))
    assert message == f"{tmp_path} is not a regular file"


def test_fifo_is_rejected_without_blocking(tmp_path: Path) -> None:
    fifo = tmp_path / "pipe.json"
    os.mkfifo(fifo, 0o600)
    [message] = file_messages(validate_file(fifo))
    assert "not a regular file" in message


def test_empty_file(tmp_path: Path) -> None:
    [problem] = validate_file(write(tmp_path / "t.json", ""))
    assert problem == Problem("file", f"{tmp_path / 't.json'} is empty")


def test_file_over_10_mib_is_not_read(tmp_path: Path) -> None:
    path = write(tmp_path / "t.json", "")
    with open(path, "r+b") as handle:
        handle.truncate(10 * 1024 * 1024 + 1)  # sparse: costs no disk
    [problem] = validate_file(path)
    assert problem.path == "file" and "10485761 bytes" in problem.message


def test_file_of_exactly_10_mib_is_read(tmp_path: Path) -> None:
    text = good_text()
    path = write(tmp_path / "t.json", text + " " * (10 * 1024 * 1024 - len(text.encode())))
    assert validate_file(path) == []


@pytest.mark.parametrize(
    ("name", "bad"),
    [("rank table.json", '" "'), ("rank@table:1.json", '":", "@"'), ("ränk.json", '"ä"')],
)
def test_special_characters_in_the_real_path(tmp_path: Path, name: str, bad: str) -> None:
    path = write(tmp_path / name, good_text())
    [message] = file_messages(validate_file(path))
    assert message == (f"real path {path} contains {bad}: atb_llm allows only [0-9a-zA-Z_./-]")


def test_path_longer_than_256_characters(tmp_path: Path) -> None:
    write(tmp_path / "t.json", good_text())
    long_path = str(tmp_path) + "/." * 130 + "/t.json"
    assert len(long_path) > 256
    [message] = file_messages(validate_file(long_path))
    assert f"is {len(long_path)} characters" in message


@pytest.mark.parametrize(
    ("raw", "text"),
    [
        (b'{"version": "1.0",', "not valid JSON"),
        (b'{"server_count": NaN}', "NaN"),
        (b'{"server_id": "\xff"}', "0xff"),
    ],
    ids=["truncated", "nan", "not-utf8"],
)
def test_unparsable_content_is_a_problem_at_root(tmp_path: Path, raw: bytes, text: str) -> None:
    path = tmp_path / "t.json"
    path.write_bytes(raw)
    path.chmod(0o640)
    [problem] = validate_file(path)
    assert problem.path == "$" and text in problem.message


def test_file_and_table_problems_are_reported_together(tmp_path: Path) -> None:
    bad = (FIXTURES / "bad-device-ip-dashes.json").read_text()
    path = write(tmp_path / "t.json", bad, 0o644)
    problems = validate_file(path)
    assert [p.path for p in problems] == ["file", "$.server_list[1].device[3].device_ip"]
    assert stat.S_IMODE(path.stat().st_mode) == 0o644  # validation never changes the file
