"""A PD service's global rank table (ascend_node.pd): built from the instances' tables, judged
by MindIE-Motor's controller rules, written so the controller never reads half of it.

The controller's own test tables (fixtures/mindie-motor/) must load; every table the builder
makes must pass the same checker; each rule is pinned by one bad case.
"""

from __future__ import annotations

import copy
import json
import os
import shutil
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ascend_node.cli import app
from ascend_node.errors import ClusterInconsistent, ConfigError
from ascend_node.pd.files import validate_global_file, write_global_table
from ascend_node.pd.global_table import (
    Instance,
    ServicePod,
    build_global_table,
    group_id_of,
    group_of,
    render_global_table,
)
from ascend_node.pd.motor_rules import (
    InstanceFlags,
    check_global_table,
    check_table_path,
    deploy_server_for,
    flags_from_controller_config,
    role_of,
)
from ascend_node.ranktable import DeviceEntry, ServerEntry, build_rank_table
from tests.cli_helpers import cli_runner

MOTOR = Path(__file__).resolve().parents[1] / "fixtures" / "mindie-motor"
UPSTREAM = sorted(MOTOR.glob("global_rank_table*.json"))
SHIPPED_CONFIG = json.loads((MOTOR / "ms_controller.json").read_text())
# P centralized, D distributed: the official deployer's stock flags (P "0", D "1").
STOCK = InstanceFlags(multi_node=True, p_distributed=False, d_distributed=True)


def load(name: str) -> dict[str, Any]:
    return json.loads((MOTOR / name).read_text())


def instance_table(first_node: int, pods: int, devices: int, *, a3: bool = False,
                   subnet: int = 1) -> dict[str, Any]:
    servers = [ServerEntry(
        global_index=i, pod_ip=f"172.16.{subnet}.{first_node + i + 10}",
        host_ip=f"192.168.{subnet}.{first_node + i + 10}",
        devices=tuple(DeviceEntry(d, f"10.{subnet}.{first_node + i}.{d + 1}",
                                  super_device_id=(first_node + i) * 100 + d if a3 else None)
                      for d in range(devices)),
        super_pod_id="0" if a3 else None) for i in range(pods)]
    return build_rank_table(servers, "1.2" if a3 else "1.0")


COORD = [ServicePod("172.16.0.10", "192.168.0.1")]
CTRL = [ServicePod("172.16.0.11", "192.168.0.1")]


def service(flags: InstanceFlags = STOCK, *, a3: bool = False) -> dict[str, Any]:
    """1 P of 2 pods x 8 NPUs + 1 D of 1 pod x 8, the coordinator and the controller."""
    return build_global_table(
        COORD, CTRL,
        [Instance("prefill", 0, instance_table(0, 2, 8, a3=a3, subnet=1)),
         Instance("decode", 0, instance_table(0, 1, 8, a3=a3, subnet=2))],
        {"prefill": 1, "decode": 1}, flags)


# ------------------------------------------------------------- the controller's own tables


@pytest.mark.parametrize("path", UPSTREAM, ids=lambda p: p.name)
def test_the_controllers_own_test_tables_load(path: Path) -> None:
    assert check_global_table(json.loads(path.read_text())) == []


def test_the_shipped_config_is_single_node_and_refuses_cross_node_tables() -> None:
    flags = flags_from_controller_config(SHIPPED_CONFIG)
    assert flags.multi_node is False
    assert check_global_table(load("global_rank_table.json"), flags) == []
    assert check_global_table(load("global_rank_table_6group.json"), flags) == []
    problems = check_global_table(load("global_rank_table_cross_node_a2.json"), flags)
    assert [p.path for p in problems] == ["$.server_group_list"]
    assert "5 groups; the controller reads 2 to 3 in single-node mode" in problems[0].message


def test_the_cross_node_tables_match_the_stock_flags() -> None:
    # a2: P "0" (centralized), two D groups "1" (distributed): the deployer's P=0, D=1.
    assert check_global_table(load("global_rank_table_cross_node_a2.json"), STOCK) == []
    assert check_global_table(load("global_rank_table_cross_node_a3.json"), STOCK) == []
    doc = load("global_rank_table_cross_node_a2.json")
    roles = [role_of(g["deploy_server"], STOCK) for g in doc[G][2:]]
    assert roles == [("prefill", False), ("decode", True), ("decode", True)]
    # The same table under swapped flags loads too, with P and D swapped: deploy_server
    # means a role only relative to the flags, which is why the builder derives it from
    # the controller's config instead of taking it from the operator.
    swapped = InstanceFlags(multi_node=True, p_distributed=True, d_distributed=False)
    assert check_global_table(doc, swapped) == []
    assert [role_of(g["deploy_server"], swapped)[0] for g in doc[G][2:]] == [
        "decode", "prefill", "prefill"]


# ------------------------------------------------------------- one bad case per rule


def _set(doc: dict[str, Any], path: list[Any], value: Any) -> None:
    for step in path[:-1]:
        doc = doc[step]
    if value is _DELETE:
        del doc[path[-1]]
    else:
        doc[path[-1]] = value


_DELETE = object()
G = "server_group_list"
DEV = [G, 2, "server_list", 0, "device", 0]
SRV = [G, 2, "server_list", 0]

BAD_CASES = [
    ("rank_id a number", [*DEV, "rank_id"], 0, "$.server_group_list[2].server_list[0]"
     ".device[0].rank_id", "must be a JSON string, got number"),
    ("server_id a name", [*SRV, "server_id"], "node-1", "$.server_group_list[2]"
     ".server_list[0].server_id", "is not an IP address"),
    ("server_ip unspecified", [*SRV, "server_ip"], "0.0.0.0", "$.server_group_list[2]"
     ".server_list[0].server_ip", "unspecified"),
    ("device_logical_id too big", [*DEV, "device_logical_id"], "2049",
     "$.server_group_list[2].server_list[0].device[0].device_logical_id", "outside 0..2048"),
    ("a port below 1024", [*SRV, "mgmt_port"], "80",
     "$.server_group_list[2].server_list[0].mgmt_port", "outside 1024..65535"),
    ("device_ip not an IP", [*DEV, "device_ip"], "-1",
     "$.server_group_list[2].server_list[0].device[0].device_ip", "is not an IP address"),
    ("super_device_id out of range", [*DEV, "super_device_id"], str(2**30 + 1),
     "$.server_group_list[2].server_list[0].device[0].super_device_id", "outside"),
    ("no devices", [*SRV, "device"], [], "$.server_group_list[2].server_list[0].device",
     "0 devices"),
    ("device missing", [*SRV, "device"], _DELETE,
     "$.server_group_list[2].server_list[0].device", "device is missing"),
    ("group_id not a number", [G, 3, "group_id"], "decode",
     "$.server_group_list[3].group_id", "is not an integer"),
    ("group_id repeated", [G, 3, "group_id"], "2", "$.server_group_list[3].group_id",
     "repeats group 2"),
    ("status initializing", ["status"], "initializing", "$.status", "get_group_id.py waits"),
    ("three coordinators", [G, 0, "server_list"],
     [{"server_ip": f"172.16.0.{i}"} for i in (1, 2, 3)], "$.server_group_list[0].server_list",
     "at most 2"),
    ("coordinator without an IP", [G, 0, "server_list", 0, "server_ip"], "coordinator",
     "$.server_group_list[0].server_list[0].server_ip", "is not an IP address"),
    ("deploy_server not a number", [G, 2, "deploy_server"], "P",
     "$.server_group_list[2].deploy_server", "is not an integer"),
    ("deploy_server missing", [G, 3, "deploy_server"], _DELETE,
     "$.server_group_list[3].deploy_server", "skips an instance without it"),
    ("a group of another id", [G, 1, "group_id"], "-1", "$.server_group_list[1].group_id",
     "neither the coordinators'"),
]


@pytest.mark.parametrize(("name", "path", "value", "where", "says"), BAD_CASES,
                         ids=[c[0] for c in BAD_CASES])
def test_each_rule_names_the_value_and_its_path(name: str, path: list[Any], value: Any,
                                                 where: str, says: str) -> None:
    doc = service()
    assert check_global_table(doc, STOCK) == []
    _set(doc, path, value)
    problems = check_global_table(doc, STOCK)
    assert any(p.path == where and says in p.message for p in problems), problems


@pytest.mark.parametrize(("doc", "says"), [
    ([], "must be a JSON object, got array"),
    ({}, "server_group_list is missing"),
    ({"server_group_list": {}}, "must be a JSON array"),
    ({"status": "completed", "server_group_list": [{"group_id": "1", "server_list": []}]},
     "no coordinator group"),
    ({"status": "completed", "server_group_list": [
        {"group_id": "0", "server_list": []}, {"group_id": "1", "server_list": []}]},
     "no instance group"),
])
def test_a_shapeless_document_is_reported_not_raised(doc: Any, says: str) -> None:
    assert any(says in p.message for p in check_global_table(doc, STOCK))


@pytest.mark.parametrize(("p_dist", "value", "says"), [
    (False, "2", "makes a distributed prefill instance, but p_node_config"
     ".enable_dist_dp_server is false"),
    (True, "0", "deploy_server \"0\" gives no role"),
    (True, "7", "deploy_server \"7\" gives no role"),
])
def test_deploy_server_against_equal_flags(p_dist: bool, value: str, says: str) -> None:
    # With differing flags every value means a consistent role (the role follows from
    # distributed or not); with equal flags a value can contradict them.
    flags = InstanceFlags(multi_node=True, p_distributed=p_dist, d_distributed=p_dist)
    doc = service(flags)
    assert check_global_table(doc, flags) == []
    doc[G][2]["deploy_server"] = value
    messages = [p.message for p in check_global_table(doc, flags)]
    assert len(messages) == 1 and says in messages[0], messages


def test_a_centralized_instance_must_hold_tp_dp_cp_devices() -> None:
    flags = InstanceFlags(multi_node=True, p_distributed=False, d_distributed=True,
                          p_devices=32)
    problems = check_global_table(service(flags), flags)
    assert [p.message for p in problems] == [
        "the prefill instance has 16 devices but p_node_config's tp_size*dp_size*cp_size is "
        "32: the controller's DP grouping fails"]
    fits = InstanceFlags(multi_node=True, p_distributed=False, d_distributed=True,
                         p_devices=16, d_devices=999)  # D is distributed: not counted
    assert check_global_table(service(fits), fits) == []


def test_hardware_type_only_matters_when_heterogeneous() -> None:
    doc = service()
    doc[G][2]["server_list"][0]["hardware_type"] = "800T A2"
    assert check_global_table(doc, STOCK) == []
    hetero = InstanceFlags(multi_node=True, p_distributed=False, d_distributed=True,
                           heterogeneous=True)
    assert any("hardware_type \"800T A2\" is not one of" in p.message
               for p in check_global_table(doc, hetero))


@pytest.mark.parametrize(("path", "says"), [
    ("/user/serverid/devindex/config/..data/global_ranktable.json", "contains '..'"),
    ("/shared/" + "x" * 260, "at most 256"),
    ("/shared/global ranktable.json", "characters the controller refuses: ' '"),
])
def test_the_controllers_path_check(path: str, says: str) -> None:
    why = check_table_path(path)
    assert why is not None and says in why
    assert check_table_path("/shared/.ascend-node/run-1/global_ranktable.json") is None


# ------------------------------------------------------------- deploy_server and roles


@pytest.mark.parametrize(("p_dist", "d_dist", "p_value", "d_value"), [
    (False, True, "0", "1"),   # the deployer's stock P=0, D=1
    (True, False, "1", "0"),
    (True, True, "2", "1"),    # both distributed
    (False, False, "0", "0"),  # both centralized: roles from node_machine_num
])
def test_deploy_server_follows_the_controllers_flags(p_dist: bool, d_dist: bool,
                                                     p_value: str, d_value: str) -> None:
    flags = InstanceFlags(multi_node=True, p_distributed=p_dist, d_distributed=d_dist)
    assert deploy_server_for("prefill", flags) == p_value
    assert deploy_server_for("decode", flags) == d_value
    for role, value, dist in (("prefill", p_value, p_dist), ("decode", d_value, d_dist)):
        got_role, got_dist = role_of(value, flags)
        assert got_dist == dist  # the controller splits (or not) as the instance runs
        assert got_role == (None if not (p_dist or d_dist) else role)


def test_flags_from_a_config_that_says_them_wrongly() -> None:
    bad = copy.deepcopy(SHIPPED_CONFIG)
    bad["multi_node_infer_config"]["p_node_config"]["enable_dist_dp_server"] = "false"
    with pytest.raises(ValueError, match=r"p_node_config\.enable_dist_dp_server is string"):
        flags_from_controller_config(bad)
    bad = copy.deepcopy(SHIPPED_CONFIG)
    bad["multi_node_infer_config"]["d_node_config"]["tp_size"] = 0
    with pytest.raises(ValueError, match=r"d_node_config\.tp_size is 0"):
        flags_from_controller_config(bad)
    assert flags_from_controller_config(SHIPPED_CONFIG).p_devices == 16


# ------------------------------------------------------------- the builder


def test_a_built_table_has_the_controllers_shape() -> None:
    doc = service()
    assert check_global_table(doc, STOCK) == []
    groups = doc[G]
    assert [g["group_id"] for g in groups] == ["0", "1", "2", "3"]
    assert groups[0]["server_list"] == [{"server_id": "192.168.0.1",
                                         "server_ip": "172.16.0.10"}]
    p, d = groups[2], groups[3]
    assert (p["deploy_server"], d["deploy_server"]) == ("0", "1")
    assert p["server_count"] == "2"
    first = p["server_list"][0]
    assert list(first) == ["device", "server_id", "server_ip"]  # ClusterD's key order
    assert (first["server_id"], first["server_ip"]) == ("192.168.1.10", "172.16.1.10")
    assert list(first["device"][0]) == ["device_id", "device_ip", "device_logical_id",
                                        "rank_id"]
    second = p["server_list"][1]["device"]
    assert [x["rank_id"] for x in second] == [str(r) for r in range(8, 16)]
    assert [x["device_logical_id"] for x in second] == [str(i) for i in range(8)]
    assert d["server_list"][0]["device"][0]["rank_id"] == "0"  # per instance
    values = json.dumps(doc)
    assert all(isinstance(v, str) for v in _leaves(doc)), values


def _leaves(value: Any) -> list[Any]:
    if isinstance(value, dict):
        return [x for v in value.values() for x in _leaves(v)]
    if isinstance(value, list):
        return [x for v in value for x in _leaves(v)]
    return [value]


def test_an_a3_service_carries_sdids_and_super_pods() -> None:
    doc = service(a3=True)
    assert doc["version"] == "1.2"
    assert check_global_table(doc, STOCK) == []
    p = doc[G][2]
    assert list(p["server_list"][0]["device"][0]) == [
        "device_id", "device_ip", "super_device_id", "device_logical_id", "rank_id"]
    assert p["super_pod_list"] == [{"super_pod_id": "0", "server_list": [
        {"server_id": "192.168.1.10"}, {"server_id": "192.168.1.11"}]}]


def test_every_pod_finds_its_group_as_get_group_id_does() -> None:
    doc = service()
    assert group_of(doc, "172.16.0.10") == 0
    assert group_of(doc, "172.16.0.11") == 1
    assert group_of(doc, "172.16.1.11") == 2  # a prefill pod
    assert group_of(doc, "172.16.2.10") == 2  # the decode pod
    assert group_of(doc, "172.16.9.9") == 255
    assert group_of({**doc, "status": "initializing"}, "172.16.0.10") is None


def test_group_numbers_hold_across_a_decode_restart() -> None:
    counts = {"prefill": 2, "decode": 1}
    p0, p1 = instance_table(0, 1, 8, subnet=1), instance_table(5, 1, 8, subnet=3)
    d_before, d_after = instance_table(0, 1, 8, subnet=2), instance_table(7, 1, 8, subnet=4)
    before = build_global_table(COORD, CTRL, [Instance("decode", 0, d_before),
                                              Instance("prefill", 1, p1),
                                              Instance("prefill", 0, p0)], counts, STOCK)
    during = build_global_table(COORD, CTRL, [Instance("prefill", 1, p1),
                                              Instance("prefill", 0, p0)], counts, STOCK)
    after = build_global_table(COORD, CTRL, [Instance("prefill", 0, p0),
                                             Instance("prefill", 1, p1),
                                             Instance("decode", 0, d_after)], counts, STOCK)
    assert [g["group_id"] for g in before[G]] == ["0", "1", "2", "3", "4"]
    assert [g["group_id"] for g in during[G]] == ["0", "1", "2", "3"]
    assert before[G][:4] == after[G][:4] == during[G]  # P groups untouched
    assert after[G][4]["server_list"][0]["server_ip"] == "172.16.4.17"
    assert group_id_of("decode", 0, counts) == "4"


@pytest.mark.parametrize(("instances", "says"), [
    ([Instance("prefill", 0, {**instance_table(0, 1, 8), "status": "initializing"})],
     "not completed"),
    ([Instance("prefill", 0, instance_table(0, 1, 8)),
      Instance("decode", 0, instance_table(0, 1, 8, a3=True))], "mix versions 1.0, 1.2"),
    ([Instance("prefill", 0, instance_table(0, 1, 8)),
      Instance("prefill", 0, instance_table(3, 1, 8))], "given twice"),
    ([Instance("prefill", 0, {"status": "completed", "server_list": []})], "has no servers"),
])
def test_tables_that_cannot_be_combined_are_refused(instances: list[Instance],
                                                    says: str) -> None:
    with pytest.raises(ClusterInconsistent, match=says):
        build_global_table(COORD, CTRL, instances, {"prefill": 1, "decode": 1}, STOCK)


def test_an_instance_outside_the_jobs_shape_is_refused() -> None:
    with pytest.raises(ValueError, match=r"decode instance 1 is outside 0\.\.0"):
        group_id_of("decode", 1, {"prefill": 1, "decode": 1})


def test_an_instance_table_not_starting_at_rank_0_is_refused() -> None:
    table = instance_table(0, 1, 2)
    for dev in table["server_list"][0]["device"]:
        dev["rank_id"] = str(int(dev["rank_id"]) + 8)
    with pytest.raises(ClusterInconsistent, match="does not start at rank 0"):
        build_global_table(COORD, CTRL, [Instance("prefill", 0, table)],
                           {"prefill": 1, "decode": 1}, STOCK)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(p=st.integers(1, 4), d=st.integers(1, 4), p_pods=st.integers(1, 3),
       d_pods=st.integers(1, 3), npus=st.sampled_from([1, 2, 8, 16]),
       p_dist=st.booleans(), d_dist=st.booleans(), a3=st.booleans())
def test_every_built_table_passes_the_controllers_rules(p: int, d: int, p_pods: int,
                                                        d_pods: int, npus: int, p_dist: bool,
                                                        d_dist: bool, a3: bool) -> None:
    flags = InstanceFlags(multi_node=True, p_distributed=p_dist, d_distributed=d_dist,
                          p_devices=p_pods * npus, d_devices=d_pods * npus)
    instances = [Instance("prefill", i, instance_table(i * 10, p_pods, npus, a3=a3,
                                                       subnet=10 + i)) for i in range(p)]
    instances += [Instance("decode", i, instance_table(i * 10, d_pods, npus, a3=a3,
                                                       subnet=50 + i)) for i in range(d)]
    doc = build_global_table(COORD, CTRL, instances, {"prefill": p, "decode": d}, flags)
    assert check_global_table(doc, flags) == []
    assert check_global_table(json.loads(render_global_table(doc)), flags) == []
    for inst in instances:
        for server in inst.table["server_list"]:
            assert group_of(doc, server["container_ip"]) == 2


# ------------------------------------------------------------- the file


def test_written_by_rename_with_the_controllers_mode(tmp_path: Path) -> None:
    path = tmp_path / "global_ranktable.json"
    write_global_table(path, service())
    first = os.stat(path)
    write_global_table(path, service(a3=True))
    second = os.stat(path)
    assert first.st_ino != second.st_ino  # a new file renamed onto the path
    assert oct(second.st_mode & 0o777) == "0o640"
    assert json.loads(path.read_text())["version"] == "1.2"
    assert validate_global_file(path, STOCK, check_owner_uid=os.getuid()) == []
    assert [p.name for p in tmp_path.iterdir()] == ["global_ranktable.json"]


def test_a_path_the_controller_refuses_is_never_written(tmp_path: Path) -> None:
    bad = tmp_path / "..data" / "global_ranktable.json"
    with pytest.raises(ConfigError, match=r"contains '\.\.'"):
        write_global_table(bad, service())
    assert not bad.parent.exists()


def test_the_files_rules(tmp_path: Path) -> None:
    path = tmp_path / "g.json"
    path.write_text(json.dumps(service()))
    path.chmod(0o644)
    link = tmp_path / "link.json"
    link.symlink_to(path)
    messages = [p.message for p in validate_global_file(path, STOCK,
                                                        check_owner_uid=os.getuid() + 1)]
    assert any("mode 0644 is wider than 0640" in m for m in messages)
    assert any(f"not {os.getuid() + 1}" in m for m in messages)
    assert any("is a symlink" in p.message for p in validate_global_file(link, STOCK))
    assert any("cannot read" in p.message for p in validate_global_file(tmp_path / "no"))
    junk = tmp_path / "junk.json"
    junk.write_text("{")
    junk.chmod(0o600)
    assert [p.path for p in validate_global_file(junk)] == ["$"]


_READER = """
import json, sys, time
from ascend_node.pd.motor_rules import check_global_table
path, stop = sys.argv[1], time.monotonic() + float(sys.argv[2])
reads = torn = 0
while time.monotonic() < stop:
    try:
        text = open(path).read()
    except FileNotFoundError:
        continue
    reads += 1
    try:
        doc = json.loads(text)
    except ValueError:
        torn += 1
        continue
    if check_global_table(doc):
        torn += 1
print(reads, torn)
"""


@pytest.mark.multiprocess
def test_a_reader_polling_the_file_never_sees_a_torn_table(tmp_path: Path) -> None:
    path = tmp_path / "global_ranktable.json"
    tables = [service(), service(a3=True)]
    write_global_table(path, tables[0])
    reader = subprocess.Popen([sys.executable, "-c", _READER, str(path), "3"],
                              stdout=subprocess.PIPE, text=True,
                              cwd=Path(__file__).resolve().parents[1])
    stop = threading.Event()

    def rewrite() -> None:
        i = 0
        while not stop.is_set():
            write_global_table(path, tables[i % 2])
            i += 1

    writer = threading.Thread(target=rewrite)
    writer.start()
    out, _ = reader.communicate(timeout=60)
    stop.set()
    writer.join()
    reads, torn = map(int, out.split())
    assert reads > 0 and torn == 0


# ------------------------------------------------------------- validate --global


runner = cli_runner()


def test_validate_global_on_the_controllers_tables(tmp_path: Path) -> None:
    table = tmp_path / "global_ranktable.json"
    shutil.copy(MOTOR / "global_rank_table_cross_node_a2.json", table)
    table.chmod(0o640)
    ok = runner.invoke(app, ["validate", "--global", str(table)], catch_exceptions=False)
    assert ok.exit_code == 0, ok.stdout + ok.stderr
    assert "valid for mindie-motor" in ok.stdout
    shipped = runner.invoke(app, ["validate", "--global", str(table), "--controller-config",
                                  str(MOTOR / "ms_controller.json"), "--json"])
    assert shipped.exit_code == 1
    out = json.loads(shipped.stdout)
    assert out["target"] == "mindie-motor"
    assert [p["path"] for p in out["problems"]] == ["$.server_group_list"]


@pytest.mark.parametrize(("args", "says"), [
    (["--controller-config", "x.json"], "--controller-config goes with --global"),
    (["--global", "--controller-config", "/nonexistent/ms.json"],
     "--controller-config /nonexistent/ms.json"),
])
def test_validate_global_usage_errors(tmp_path: Path, args: list[str], says: str) -> None:
    table = tmp_path / "g.json"
    table.write_text("{}")
    result = runner.invoke(app, ["validate", str(table), *args])
    assert result.exit_code == 2
    assert says in result.stderr
