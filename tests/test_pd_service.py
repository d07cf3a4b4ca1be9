"""The two levels of a PD service with real agent processes on one shared directory.

Each instance's pods run the ordinary `ascend-node ranktable` under their instance's run
id (`<run>-<task>`, the identity `pd.roles.instance_environ` gives them); the coordinator
runs `pd-announce`; the controller pod's `pd-table` writes the global table from the
instances' outcomes. A decode instance restarted with new addresses is rewritten into the
same group while a reader polls the file and never sees a torn or invalid table.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from ascend_node.pd.motor_configs import CONTROLLER_FILE, motor_files
from ascend_node.pd.motor_rules import InstanceFlags, check_global_table
from ascend_node.pd.roles import instance_environ, read_pd_identity
from ascend_node.pd.service import global_table_path, read_instance
from ascend_node.sim.cluster import SimNode, SimSpec, launch, prepare

pytestmark = pytest.mark.multiprocess

RUN = "svc"
# 1 P instance of 2 pods, 1 D instance of 1 pod (the proof shape), 4 NPUs each.
JOB = {"VC_COORDINATOR_NUM": "1", "VC_CONTROLLER_NUM": "1", "VC_PREFILL_0_NUM": "2",
       "VC_DECODE_0_NUM": "1"}


def controller_config(tmp: Path) -> Path:
    """The controller's configuration `manifest --kind mindie-pd` renders for this shape
    (pd.motor_configs): both instances centralized, node_machine_num 2 and 1."""
    path = tmp / CONTROLLER_FILE
    path.write_text(motor_files(2, 1, 4, str(global_table_path(tmp / "shared", RUN)))
                    [CONTROLLER_FILE])
    return path


def instance_pods(tmp: Path, task: str, subnet: int, generation: int = 0) -> list[SimNode]:
    """The pods of one instance, each with the identity its task gives it."""
    pods = int(JOB[f"VC_{task.upper().replace('-', '_')}_NUM"])
    spec = SimSpec(nodes=pods, devices=4, masters=0, run_id=f"{RUN}-{task}", timeout=40)
    nodes = prepare(spec, tmp / f"work-{task}-{generation}", tmp / "shared")
    for node in nodes:
        me = read_pd_identity({**JOB, "ASCEND_NODE_PD_TASK": task,
                               "VC_TASK_INDEX": str(node.index)})
        node.env.update(instance_environ(me, RUN))
        node.env.update({**JOB, "ASCEND_NODE_PD_TASK": task,
                         "K8S_POD_IP": f"172.16.{subnet}.{10 + node.index + 10 * generation}",
                         "K8S_HOST_IP": f"192.168.{subnet}.{10 + node.index}",
                         "ASCEND_NODE_JOB_VERSION": str(generation)})
        for device in node.devices:
            device.ip = f"10.{subnet}.{node.index + 10 * generation}.{device.device_id + 1}"
    return nodes


def agent(tmp: Path, *args: str, task: str, pod_ip: str) -> subprocess.Popen[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ASCEND_NODE_", "VC_"))}
    env.update({**JOB, "ASCEND_NODE_PD_TASK": task, "VC_TASK_INDEX": "0",
                "K8S_POD_IP": pod_ip, "K8S_HOST_IP": "192.168.0.1", "POD_UID": f"uid-{task}",
                "ASCEND_NODE_SHARED_DIR": str(tmp / "shared"), "ASCEND_NODE_RUN_ID": RUN,
                "ASCEND_NODE_TIMEOUT": "60"})
    return subprocess.Popen([sys.executable, "-m", "ascend_node", *args], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def flags_of(config: Path) -> InstanceFlags:
    from ascend_node.pd.controller_config import read_flags

    return read_flags(config)


def test_instances_meet_apart_and_the_controller_pod_writes_the_global_table(
        tmp_path: Path) -> None:
    (tmp_path / "shared").mkdir()
    config = controller_config(tmp_path)
    table_path = global_table_path(tmp_path / "shared", RUN)
    writer = agent(tmp_path, "pd-table", "--controller-config", str(config), "--once",
                   task="controller", pod_ip="172.16.0.11")
    results = launch([*instance_pods(tmp_path, "prefill-0", 1),
                      *instance_pods(tmp_path, "decode-0", 2)], timeout=60)
    assert [r.exit_code for r in results] == [0, 0, 0], [r.cause for r in results]
    announce = agent(tmp_path, "pd-announce", task="coordinator", pod_ip="172.16.0.10")
    assert announce.wait(30) == 0, announce.stderr.read() if announce.stderr else ""
    _, err = writer.communicate(timeout=60)
    assert writer.returncode == 0, err

    doc = json.loads(table_path.read_text())
    assert check_global_table(doc, flags_of(config)) == []
    groups = doc["server_group_list"]
    assert [g["group_id"] for g in groups] == ["0", "1", "2", "3"]
    assert groups[0]["server_list"] == [{"server_id": "192.168.0.1",
                                         "server_ip": "172.16.0.10"}]
    assert groups[1]["server_list"] == [{"server_id": "192.168.0.1",  # pd-table's own pod
                                         "server_ip": "172.16.0.11"}]
    prefill, decode = groups[2], groups[3]
    # both centralized: "0" for both, told apart by their servers (node_machine_num 2 and 1)
    assert (prefill["deploy_server"], decode["deploy_server"]) == ("0", "0")
    assert (len(prefill["server_list"]), len(decode["server_list"])) == (2, 1)
    assert [s["server_ip"] for s in prefill["server_list"]] == ["172.16.1.10", "172.16.1.11"]
    assert [s["server_id"] for s in prefill["server_list"]] == ["192.168.1.10", "192.168.1.11"]
    assert [d["rank_id"] for d in prefill["server_list"][1]["device"]] == ["4", "5", "6", "7"]
    assert decode["server_list"][0]["device"][0]["rank_id"] == "0"
    assert oct(table_path.stat().st_mode & 0o777) == "0o640"
    assert "global table written" in err


def test_a_restarted_decode_instance_is_rewritten_into_its_group(tmp_path: Path) -> None:
    (tmp_path / "shared").mkdir()
    config = controller_config(tmp_path)
    table_path = global_table_path(tmp_path / "shared", RUN)
    results = launch([*instance_pods(tmp_path, "prefill-0", 1),
                      *instance_pods(tmp_path, "decode-0", 2)], timeout=60)
    assert [r.exit_code for r in results] == [0, 0, 0], [r.cause for r in results]
    assert agent(tmp_path, "pd-announce", task="coordinator",
                 pod_ip="172.16.0.10").wait(30) == 0
    watcher = agent(tmp_path, "pd-table", "--controller-config", str(config), "--watch",
                    task="controller", pod_ip="172.16.0.11")
    try:
        deadline = time.monotonic() + 30
        while not table_path.exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        before = json.loads(table_path.read_text())
        seen: list[Any] = []
        stop = threading.Event()

        def poll() -> None:  # a controller-like reader, every 0.1 s
            while not stop.is_set():
                try:
                    seen.append(json.loads(table_path.read_text()))
                except ValueError as exc:  # a torn read
                    seen.append(exc)
                time.sleep(0.1)

        reader = threading.Thread(target=poll)
        reader.start()
        # The job restarts the decode task: new pods, new addresses, a new job version.
        again = launch(instance_pods(tmp_path, "decode-0", 2, generation=1), timeout=60)
        assert [r.exit_code for r in again] == [0], [r.cause for r in again]
        new_ip = "172.16.2.20"
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            doc = json.loads(table_path.read_text())
            if doc["server_group_list"][-1]["server_list"][0]["server_ip"] == new_ip:
                break
            time.sleep(0.1)
        stop.set()
        reader.join()
    finally:
        watcher.terminate()
        _, err = watcher.communicate(timeout=30)
    assert watcher.returncode == 143, err
    after = json.loads(table_path.read_text())
    assert after["server_group_list"][:3] == before["server_group_list"][:3]  # P untouched
    assert after["server_group_list"][3]["group_id"] == "3"
    assert after["server_group_list"][3]["server_list"][0]["server_ip"] == new_ip
    flags = flags_of(config)
    assert seen and all(isinstance(d, dict) and check_global_table(d, flags) == []
                        for d in seen), [d for d in seen if not isinstance(d, dict)][:3]
    assert read_instance(tmp_path / "shared", RUN, "decode-0").table is not None


def test_pd_table_times_out_naming_the_missing_instance(tmp_path: Path) -> None:
    (tmp_path / "shared").mkdir()
    config = controller_config(tmp_path)
    results = launch(instance_pods(tmp_path, "prefill-0", 1), timeout=60)
    assert [r.exit_code for r in results] == [0, 0]
    assert agent(tmp_path, "pd-announce", task="coordinator",
                 pod_ip="172.16.0.10").wait(30) == 0
    writer = agent(tmp_path, "pd-table", "--controller-config", str(config), "--once",
                   "--timeout", "3", task="controller", pod_ip="172.16.0.11")
    _, err = writer.communicate(timeout=60)
    assert writer.returncode == 4, err
    assert "still waiting after 3 s for: decode-0 (no attempt yet)" in err
    assert not global_table_path(tmp_path / "shared", RUN).exists()


def test_a_pd_server_boots_in_pd_mode(tmp_path: Path) -> None:
    (tmp_path / "shared").mkdir()
    spec = SimSpec(nodes=2, devices=4, masters=0, run_id=f"{RUN}-prefill-0", timeout=40,
                   boot=True)
    nodes = prepare(spec, tmp_path / "work", tmp_path / "shared")
    for node in nodes:
        me = read_pd_identity({**JOB, "ASCEND_NODE_PD_TASK": "prefill-0",
                               "VC_TASK_INDEX": str(node.index)})
        node.env.update({**instance_environ(me, RUN), **JOB,
                         "ASCEND_NODE_PD_TASK": "prefill-0"})
    results = launch(nodes, timeout=60)
    assert [r.exit_code for r in results] == [0, 0], [r.cause for r in results]
    for node in nodes:
        config = json.loads(Path(node.env["MIES_CONFIG_JSON_PATH"]).read_text())
        assert config["ServerConfig"]["inferMode"] == "dmi"
        assert config["BackendConfig"]["multiNodesInferEnabled"] is True  # its instance's
        daemon_env = dict(line.split("=", 1) for line in
                          Path(node.env["ASCEND_NODE_SIM_REPORT"]).read_text().splitlines()
                          if "=" in line)
        assert daemon_env["MIES_CONTAINER_MANAGEMENT_IP"] == node.env["K8S_POD_IP"]
        assert daemon_env["WORLD_SIZE"] == "8"
