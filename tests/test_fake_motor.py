"""The fake MindIE-Motor coordinator and controller (ascend_node/sim/fake_motor.py).

The pure parts by tables of cases (against MindIE-Motor's own test tables); then both as
real processes on loopback addresses: the controller reads a live table written by rename,
keeps the last good one when a table breaks the loader's rules, sees a restarted decode pod
as a scale-in and a scale-out, and tells the coordinator; and each refuses to start where
the real one would not.
"""

from __future__ import annotations

import copy
import json
import os
import random
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any, Optional

import pytest

from ascend_node.pd.motor_rules import InstanceFlags, flags_from_controller_config
from ascend_node.sim import fake_motor as fm

MOTOR = Path(__file__).resolve().parents[1] / "fixtures" / "mindie-motor"


def shipped(name: str) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads((MOTOR / name).read_text())
    return doc


def multi_config(p_dist: bool = False, d_dist: bool = True, d_tp: int = 1) -> dict[str, Any]:
    config = shipped("ms_controller.json")
    multi = config["multi_node_infer_config"]
    multi["multi_node_infer_enable"] = True
    multi["p_node_config"].update(enable_dist_dp_server=p_dist, tp_size=1, dp_size=2)
    multi["d_node_config"].update(enable_dist_dp_server=d_dist, tp_size=d_tp, dp_size=2)
    return config


# --- pure -----------------------------------------------------------------------------------

@pytest.mark.parametrize("environ, config, expected", [
    ({"GLOBAL_RANK_TABLE_FILE_PATH": "/a/t.json"}, {"global_rank_table_file_path": "/b"},
     "/a/t.json"),
    ({}, {"global_rank_table_file_path": "/b/t.json"}, "/b/t.json"),
    ({"GLOBAL_RANK_TABLE_FILE_PATH": "  "}, {"global_rank_table_file_path": "/b"}, "/b"),
    ({}, {}, None),
])
def test_the_env_wins_over_the_config_key(environ: dict[str, str], config: dict[str, Any],
                                          expected: Optional[str]) -> None:
    assert fm.table_path_of(environ, config) == expected


@pytest.mark.parametrize("environ, fragment", [
    ({}, "MINDIE_MS_CONTROLLER_CONFIG_FILE_PATH is not set"),
    ({"MINDIE_MS_CONTROLLER_CONFIG_FILE_PATH": "/c", "MINDX_TASK_ID": "j",
      "MINDX_SERVER_IP": "1.2.3.4"}, "ClusterD"),
    ({"MINDIE_MS_CONTROLLER_CONFIG_FILE_PATH": "/c", "MINDX_TASK_ID": "j"}, None),
    ({"MINDIE_MS_CONTROLLER_CONFIG_FILE_PATH": "/c"}, None),
])
def test_the_controller_refuses_to_start(environ: dict[str, str],
                                         fragment: Optional[str]) -> None:
    why = fm.controller_refusal(environ)
    assert (why is None) if fragment is None else (why is not None and fragment in why)


@pytest.mark.parametrize("environ, config, expected", [
    ({}, {"rank_table_detecting_seconds": 5}, 5.0),
    ({}, {}, 5.0),
    ({"ASCEND_NODE_SIM_MOTOR_PERIOD": "0.2"}, {"rank_table_detecting_seconds": 5}, 0.2),
])
def test_the_period(environ: dict[str, str], config: dict[str, Any], expected: float) -> None:
    assert fm.period_of(environ, config) == expected


def test_a_period_that_is_not_positive_is_refused() -> None:
    with pytest.raises(fm.Refused, match="not positive"):
        fm.period_of({"ASCEND_NODE_SIM_MOTOR_PERIOD": "0"}, {})


def _stat(mode: int, uid: int = 1000) -> os.stat_result:
    return os.stat_result((mode, 0, 0, 1, uid, 0, 10, 0, 0, 0))


@pytest.mark.parametrize("path, info, relaxed, fragment", [
    ("/s/t.json", _stat(0o100640), False, None),
    ("/s/t.json", _stat(0o100600), False, None),
    ("/s/t.json", _stat(0o100644), False, "mode 0644 is above 0640"),
    ("/s/t.json", _stat(0o100644), True, None),
    ("/s/t.json", _stat(0o100640, uid=0), False, "owned by uid 0"),
    ("/s/t.json", _stat(0o100640, uid=0), True, None),
    ("/s/t.json", _stat(0o120777), False, "symlink"),
    ("/s/t.json", None, False, "does not exist"),
    ("/s/..data/t.json", _stat(0o100640), False, "'..'"),
    ("/s/" + "a" * 260, _stat(0o100640), False, "at most 256"),
    ("/s/t json", _stat(0o100640), False, "characters"),
])
def test_the_path_and_file_check(path: str, info: Optional[os.stat_result], relaxed: bool,
                                 fragment: Optional[str]) -> None:
    why = fm.file_problem(path, info, 1000, relaxed)
    assert (why is None) if fragment is None else (why is not None and fragment in why), why


def test_nodes_of_the_controllers_own_multi_node_table() -> None:
    table = shipped("global_rank_table_cross_node_a2.json")
    config = multi_config()
    nodes = fm.nodes_of(table, config, flags_from_controller_config(config))
    # P (deploy "0", centralized): one node at its master; D (deploy "1", distributed,
    # tp 1): one node per device, management port initial_dist_server_port + 1.
    assert sorted(nodes) == ["127.0.0.10:10001", "127.0.0.12:10001", "127.0.0.2:1026",
                             "127.0.0.6:10001", "127.0.0.8:10001"]
    assert nodes["127.0.0.2:1026"].role == "prefill"
    assert nodes["127.0.0.2:1026"].devices == 2
    assert {n.role for i, n in nodes.items() if i.endswith(":10001")} == {"decode"}
    assert fm.instance_counts(nodes) == {"prefill": 1, "decode": 2, "undecided": 0}
    assert fm.coordinators_of(table) == ["127.0.0.98"]


def test_nodes_of_a_single_node_table_are_group_2s_servers() -> None:
    table = shipped("global_rank_table.json")
    config = shipped("ms_controller.json")
    nodes = fm.nodes_of(table, config, flags_from_controller_config(config))
    assert sorted(nodes) == ["127.0.0.2:1026", "127.0.0.3:1026"]
    assert {n.role for n in nodes.values()} == {None}


def _server(ip: str, ranks: list[int], port: Optional[str] = None) -> dict[str, Any]:
    server: dict[str, Any] = {"server_id": "192.168.0.1", "server_ip": ip, "device": [
        {"device_id": str(r), "device_ip": f"10.0.0.{r + 1}", "device_logical_id": str(r),
         "rank_id": str(r)} for r in ranks]}
    if port:
        server["mgmt_port"] = port
    return server


def _table(*groups: dict[str, Any]) -> dict[str, Any]:
    return {"version": "1.0", "status": "completed", "server_group_list": [
        {"group_id": "0", "server_list": [{"server_id": "192.168.0.1",
                                           "server_ip": "127.0.0.1"}]},
        {"group_id": "1", "server_list": []}, *groups]}


@pytest.mark.parametrize("group, d_tp, expected", [
    # centralized: the master is the server with the smallest rank, wherever it is listed
    ({"group_id": "2", "deploy_server": "0",
      "server_list": [_server("127.1.0.2", [2, 3]), _server("127.1.0.1", [0, 1])]},
     1, [("127.1.0.1:1026", 4)]),
    ({"group_id": "2", "deploy_server": "0",
      "server_list": [_server("127.1.0.1", [0, 1], port="2026")]},
     1, [("127.1.0.1:2026", 2)]),
    # distributed: tp*cp devices per node, ports from initial_dist_server_port on each server
    ({"group_id": "2", "deploy_server": "1",
      "server_list": [_server("127.1.0.1", [0, 1, 2, 3]), _server("127.1.0.2", [4, 5, 6, 7])]},
     2, [("127.1.0.1:10001", 2), ("127.1.0.1:10005", 2), ("127.1.0.2:10001", 2),
         ("127.1.0.2:10005", 2)]),
])
def test_nodes_of_one_group(group: dict[str, Any], d_tp: int,
                            expected: list[tuple[str, int]]) -> None:
    config = multi_config(d_tp=d_tp)
    nodes = fm.nodes_of(_table(group), config, flags_from_controller_config(config))
    assert sorted((i, n.devices) for i, n in nodes.items()) == expected


@pytest.mark.parametrize("p_machines, d_machines, roles, counts", [
    # P's 2 servers, D's 1: told apart (what manifest --kind mindie-pd renders for 1p2-1d1)
    (2, 1, {"2": "prefill", "3": "decode"}, (1, 1, 0)),
    # configured the other way round: the same table reads with P and D swapped
    (1, 2, {"2": "decode", "3": "prefill"}, (1, 1, 0)),
    # equal: nothing tells them apart, the role manager's to pick
    (1, 1, {"2": None, "3": None}, (0, 0, 2)),
])
def test_both_centralized_roles_come_from_node_machine_num(
        p_machines: int, d_machines: int, roles: dict[str, Optional[str]],
        counts: tuple[int, int, int]) -> None:
    config = multi_config(p_dist=False, d_dist=False)
    multi = config["multi_node_infer_config"]
    multi["p_node_config"]["node_machine_num"] = p_machines
    multi["d_node_config"]["node_machine_num"] = d_machines
    table = _table({"group_id": "2", "deploy_server": "0",
                    "server_list": [_server("127.1.0.1", [0]), _server("127.1.0.2", [1])]},
                   {"group_id": "3", "deploy_server": "0",
                    "server_list": [_server("127.1.1.1", [0])]})
    nodes = fm.nodes_of(table, config, flags_from_controller_config(config))
    assert {n.group: n.role for n in nodes.values()} == roles
    # one node per instance, at its master, spanning its servers and their devices
    assert {n.group: (n.id, n.servers, n.devices) for n in nodes.values()} == {
        "2": ("127.1.0.1:1026", 2, 2), "3": ("127.1.1.1:1026", 1, 1)}
    got = fm.instance_counts(nodes)
    assert (got["prefill"], got["decode"], got["undecided"]) == counts


def _node(node_id: str, group: str = "3", devices: int = 1) -> fm.MotorNode:
    ip, port = node_id.split(":")
    return fm.MotorNode(node_id, group, "decode", ip, int(port), devices)


@pytest.mark.parametrize("before, after, expected", [
    ([], ["a:1"], ([], ["a:1"])),
    (["a:1", "b:1"], ["a:1", "c:1"], (["b:1"], ["c:1"])),  # a restarted pod: new IP
    (["a:1"], ["a:1"], ([], [])),
    (["a:1", "b:1"], [], (["a:1", "b:1"], [])),
])
def test_changes(before: list[str], after: list[str],
                 expected: tuple[list[str], list[str]]) -> None:
    assert fm.changes({i: _node(i) for i in before}, {i: _node(i) for i in after}) == expected


def test_a_node_whose_devices_changed_is_removed_and_added() -> None:
    assert fm.changes({"a:1": _node("a:1")}, {"a:1": _node("a:1", devices=2)}) == (
        ["a:1"], ["a:1"])


@pytest.mark.parametrize("argv, expected", [
    (["coordinator"], [("127.0.0.1", 1025), ("127.0.0.1", 1026)]),
    (["coordinator", "10.0.0.5", "10.0.0.6"], [("10.0.0.5", 1025), ("10.0.0.6", 1026)]),
    (["coordinator", "10.0.0.5"], [("10.0.0.5", 1025), ("127.0.0.1", 1026)]),
])
def test_the_coordinators_listen_addresses(argv: list[str],
                                           expected: list[tuple[str, int]]) -> None:
    assert fm.listen_addresses(argv, shipped("ms_coordinator.json")) == expected


def test_a_controller_look_ignores_a_bad_table_and_keeps_the_last_good_one(
        tmp_path: Path) -> None:
    config = multi_config()
    path = tmp_path / "t.json"
    posts: list[tuple[str, int, Any]] = []

    def post(address: str, port: int, body: Any) -> Optional[str]:
        posts.append((address, port, body))
        return None

    table = _table({"group_id": "2", "deploy_server": "0",
                    "server_list": [_server("127.1.0.1", [0, 1])]},
                   {"group_id": "3", "deploy_server": "1",
                    "server_list": [_server("127.1.1.1", [0, 1])]})
    controller = fm.Controller({"GLOBAL_RANK_TABLE_FILE_PATH": str(path)}, config, post)
    controller.look()
    assert controller.nodes is None and controller.last_problem is not None
    assert "does not exist" in controller.last_problem
    write_by_rename(path, table)
    controller.look()
    assert controller.nodes is not None and len(controller.nodes) == 3
    assert [(a, p) for a, p, _ in posts] == [("127.0.0.1", 1026)]
    bad = copy.deepcopy(table)
    bad["server_group_list"][3]["server_list"][0]["device"][0]["rank_id"] = 0  # a number
    write_by_rename(path, bad)
    controller.look()
    assert "rank_id must be a JSON string" in (controller.last_problem or "")
    assert controller.nodes is not None and len(controller.nodes) == 3  # the last good one
    assert len(posts) == 1  # nothing new to tell


# --- real processes -------------------------------------------------------------------------

def loopback() -> str:
    return f"127.{random.randint(32, 250)}.{random.randint(1, 250)}.{random.randint(2, 250)}"


def start(role: str, env: dict[str, str], *args: str) -> subprocess.Popen[str]:
    base = {k: v for k, v in os.environ.items()
            if not k.startswith(("ASCEND_NODE_", "MINDX_", "MINDIE_", "GLOBAL_RANK"))}
    return subprocess.Popen([sys.executable, "-m", "ascend_node.sim.fake_motor", role, *args],
                            env={**base, **env}, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def wait_for(predicate: Any, timeout: float = 30.0) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.1)
    return predicate()


def lines(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def write_by_rename(path: Path, doc: Any) -> None:
    temp = path.with_name(path.name + ".tmp")
    temp.write_text(json.dumps(doc))
    temp.chmod(0o640)
    os.replace(temp, path)


def stop(process: subprocess.Popen[str]) -> str:
    process.terminate()
    out, _ = process.communicate(timeout=30)
    return out


@pytest.mark.multiprocess
def test_the_controller_follows_the_live_table_and_tells_the_coordinator(
        tmp_path: Path) -> None:
    coordinator_ip = loopback()
    coordinator_config = tmp_path / "ms_coordinator.json"
    coordinator_config.write_text(json.dumps(shipped("ms_coordinator.json")))
    controller_config = tmp_path / "ms_controller.json"
    controller_config.write_text(json.dumps(multi_config()))
    table_path = tmp_path / "global_ranktable.json"
    coordinator_state, controller_state = tmp_path / "coordinator.jsonl", tmp_path / "c.jsonl"
    coordinator = start("coordinator", {
        "MINDIE_MS_COORDINATOR_CONFIG_FILE_PATH": str(coordinator_config),
        "ASCEND_NODE_SIM_MOTOR_STATE": str(coordinator_state)}, coordinator_ip, coordinator_ip)
    controller = None
    try:
        assert wait_for(lambda: lines(coordinator_state)), coordinator.stderr
        with urllib.request.urlopen(f"http://{coordinator_ip}:1026/v2/health/ready",
                                    timeout=5) as answer:
            assert answer.status == 200
        table = _table({"group_id": "2", "deploy_server": "0",
                        "server_list": [_server("127.1.0.1", [0]),
                                        _server("127.1.0.2", [1])]},
                       {"group_id": "3", "deploy_server": "1",
                        "server_list": [_server("127.1.1.1", [0, 1])]})
        table["server_group_list"][0]["server_list"][0]["server_ip"] = coordinator_ip
        write_by_rename(table_path, table)
        controller = start("controller", {
            "MINDIE_MS_CONTROLLER_CONFIG_FILE_PATH": str(controller_config),
            "GLOBAL_RANK_TABLE_FILE_PATH": str(table_path),
            "ASCEND_NODE_SIM_MOTOR_PERIOD": "0.2",
            "ASCEND_NODE_SIM_MOTOR_STATE": str(controller_state)})
        first = wait_for(lambda: [x for x in lines(controller_state)
                                  if x["event"] == "accepted"])
        assert first, lines(controller_state)
        assert first[0]["groups"] == ["0", "1", "2", "3"]
        assert (first[0]["prefill"], first[0]["decode"]) == (1, 1)
        assert first[0]["nodes"] == ["127.1.0.1:1026", "127.1.1.1:10001", "127.1.1.1:10005"]
        told = wait_for(lambda: [x for x in lines(coordinator_state)
                                 if x["event"] == "refresh"])
        assert told and len(told[-1]["instances"]) == 3

        # A table that breaks the loader's rules is ignored; the service keeps running.
        broken = copy.deepcopy(table)
        broken["server_group_list"][3]["group_id"] = 3  # a number
        write_by_rename(table_path, broken)
        assert wait_for(lambda: [x for x in lines(controller_state)
                                 if x["event"] == "ignored"])
        # The decode pod restarted with a new IP: scale-in of the old, scale-out of the new.
        restarted = copy.deepcopy(table)
        restarted["server_group_list"][3]["server_list"][0]["server_ip"] = "127.1.1.9"
        write_by_rename(table_path, restarted)
        after = wait_for(lambda: [x for x in lines(controller_state)
                                  if x["event"] == "accepted" and x["scale_in"]])
        assert after, lines(controller_state)
        assert all(n.startswith("127.1.1.1:") for n in after[0]["scale_in"])
        assert all(n.startswith("127.1.1.9:") for n in after[0]["scale_out"])
        assert (after[0]["prefill"], after[0]["decode"]) == (1, 1)
        assert wait_for(lambda: [x for x in lines(coordinator_state) if x["event"] == "refresh"
                                 and any(i["server_ip"] == "127.1.1.9"
                                         for i in x["instances"])])
    finally:
        if controller is not None:
            out = stop(controller)
        stop(coordinator)
    assert controller is not None
    assert "scale-in: node 127.1.1.1:" in out and "scale-out: node 127.1.1.9:" in out
    assert "rank table ignored" in out and "group_id must be a JSON string" in out


@pytest.mark.multiprocess
@pytest.mark.parametrize("role, env, args, fragment", [
    ("controller", {}, (), "MINDIE_MS_CONTROLLER_CONFIG_FILE_PATH is not set"),
    ("controller", {"MINDIE_MS_CONTROLLER_CONFIG_FILE_PATH": "{controller}",
                    "MINDX_TASK_ID": "job", "MINDX_SERVER_IP": "10.0.0.1"}, (), "ClusterD"),
    ("coordinator", {}, (), "MINDIE_MS_COORDINATOR_CONFIG_FILE_PATH is not set"),
    ("coordinator", {"MINDIE_MS_COORDINATOR_CONFIG_FILE_PATH": "{bad_coordinator}"}, (),
     "deploy_mode"),
])
def test_a_fake_refuses_to_start_with_one_line(tmp_path: Path, role: str, env: dict[str, str],
                                               args: tuple[str, ...], fragment: str) -> None:
    controller = tmp_path / "ms_controller.json"
    controller.write_text(json.dumps(multi_config()))
    bad = shipped("ms_coordinator.json")
    bad["digs_scheduler_config"]["deploy_mode"] = "nonsense"
    bad_coordinator = tmp_path / "ms_coordinator.json"
    bad_coordinator.write_text(json.dumps(bad))
    env = {k: v.format(controller=controller, bad_coordinator=bad_coordinator)
           for k, v in env.items()}
    process = start(role, env, *args)
    _, err = process.communicate(timeout=30)
    assert process.returncode == 1
    assert len(err.strip().splitlines()) == 1 and fragment in err, err


def test_the_installed_scripts_exec_the_fakes(tmp_path: Path) -> None:
    scripts = fm.install_motor_fakes(tmp_path / "bin")
    # the names the rendered PD pods exec (issue 36: the fakes were ms_coordinator/_controller)
    from ascend_node.jobspec.pd_job import CONTROLLER_DAEMON, COORDINATOR_DAEMON

    assert {role: p.name for role, p in scripts.items()} == {
        "coordinator": COORDINATOR_DAEMON, "controller": CONTROLLER_DAEMON}
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MINDIE_", "ASCEND_NODE_"))}
    env["ASCEND_NODE_SIM_PYTHON"] = sys.executable
    done = subprocess.run([str(scripts["controller"])], env=env, capture_output=True,
                          text=True, timeout=30)
    assert done.returncode == 1
    assert "fake controller: MINDIE_MS_CONTROLLER_CONFIG_FILE_PATH is not set" in done.stderr


def test_flags_used_by_the_tests_are_the_stock_deployers() -> None:
    assert flags_from_controller_config(multi_config()) == InstanceFlags(
        multi_node=True, p_distributed=False, d_distributed=True, p_devices=2, d_devices=2)
