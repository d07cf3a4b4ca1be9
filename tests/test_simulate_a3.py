"""`simulate --a3`: real agent processes on fake A3 nodes build rank table v1.2 through the
shared volume, and a cluster that is half super pod, half not, is refused (exit 5)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from ascend_node.ranktable import validate_rank_table
from ascend_node.sim.cluster import SimSpec, launch, pod_ip, prepare
from tests.cluster_helpers import codes, explain

pytestmark = pytest.mark.multiprocess


def test_simulate_a3_builds_a_valid_v1_2_table_with_two_super_pods(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "ascend_node", "simulate", "--a3", "--nodes", "4",
         "--super-pod-size", "2", "--shared-dir", str(tmp_path), "--json"],
        capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["ok"] and doc["identical_tables"] and doc["a3"] and doc["table_version"] == "1.2"
    assert doc["devices_per_node"] == 16
    table = doc["ranktable"]
    assert table["version"] == "1.2"
    assert [p["super_pod_id"] for p in table["super_pod_list"]] == ["0", "1"]
    assert [len(p["server_list"]) for p in table["super_pod_list"]] == [2, 2]
    assert [d["super_device_id"] for d in table["server_list"][1]["device"]] == [
        str(16 + d) for d in range(16)]
    assert validate_rank_table(table, "mindie") == []
    written = json.loads((tmp_path / "ranktable-sim.json").read_text())
    assert written == table


def test_simulate_a3_names_table_v1_2_in_its_summary(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "ascend_node", "simulate", "--a3", "--nodes", "2",
         "--devices", "2", "--super-pod-size", "1", "--shared-dir", str(tmp_path)],
        capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert (f"rank table v1.2 (A3, 2 super pods): {tmp_path / 'ranktable-sim.json'} "
            "(--json prints it, --table-out FILE copies it)") in proc.stdout.splitlines()


def a3_spec(nodes: int, **env: str) -> SimSpec:
    return SimSpec(nodes=nodes, devices=4, run_id="a3", timeout=20, a3=True,
                   extra_env={"ASCEND_NODE_PROGRESS_INTERVAL": "1", **env})


def test_a_node_outside_the_super_pod_makes_the_cluster_inconsistent(tmp_path: Path) -> None:
    (tmp_path / "shared").mkdir()
    nodes = prepare(a3_spec(3), tmp_path / "work", tmp_path / "shared")
    nodes[2].seat = None  # an A2-like node: npu-smi refuses spod-info
    for device in nodes[2].devices:
        device.sdid = None
    results = launch(nodes, 30)
    assert codes(results) == [5, 5, 5], explain(results)
    words = ("master 0 (node 0), worker 0 (node 1) report an A3 super pod but worker 1 "
             "(node 2) does not")
    assert all(words in r.stderr for r in results), explain(results)
    assert not (tmp_path / "shared" / "ranktable-a3.json").exists()


def test_table_version_1_0_ignores_super_pods(tmp_path: Path) -> None:
    (tmp_path / "shared").mkdir()
    nodes = prepare(a3_spec(2, ASCEND_NODE_TABLE_VERSION="1.0"), tmp_path / "work",
                    tmp_path / "shared")
    results = launch(nodes, 30)
    assert codes(results) == [0, 0], explain(results)
    table = json.loads((tmp_path / "shared" / "ranktable-a3.json").read_text())
    assert table["version"] == "1.0" and "super_pod_list" not in table
    assert table["server_list"][0]["container_ip"] == pod_ip(0)


def test_table_version_1_2_on_nodes_without_super_pod_fails_naming_the_device(
    tmp_path: Path
) -> None:
    (tmp_path / "shared").mkdir()
    spec = SimSpec(nodes=2, devices=4, run_id="a2", timeout=20,
                   extra_env={"ASCEND_NODE_TABLE_VERSION": "1.2"})
    results = launch(prepare(spec, tmp_path / "work", tmp_path / "shared"), 30)
    assert set(codes(results)) <= {1, 5} and 1 in codes(results), explain(results)
    assert ("--table-version 1.2, but device 0: `" in results[0].stderr
            and "info -t spod-info -i 0 -c 0` printed no SDID (exit 255" in results[0].stderr)


def test_super_pods_interleaved_in_node_order_are_listed_contiguously(tmp_path: Path) -> None:
    from ascend_node.sim.cluster import sdid
    from ascend_node.sim.fake_tools import SuperPodSeat

    (tmp_path / "shared").mkdir()
    nodes = prepare(a3_spec(4), tmp_path / "work", tmp_path / "shared")
    for node in nodes:  # nodes 0 and 2 in super pod 0, nodes 1 and 3 in super pod 1
        node.seat = SuperPodSeat(node.index % 2, 2, node.index // 2)
        for device in node.devices:
            device.sdid = sdid(node.seat, device.device_id)
    results = launch(nodes, 30)
    assert codes(results) == [0, 0, 0, 0], explain(results)
    table = json.loads((tmp_path / "shared" / "ranktable-a3.json").read_text())
    assert [s["container_ip"] for s in table["server_list"]] == [
        pod_ip(0), pod_ip(2), pod_ip(1), pod_ip(3)]
    assert validate_rank_table(table, "mindie") == []
    assert len({(r.state_dir / "ranktable.json").read_bytes() for r in results}) == 1


def test_a_job_rendered_for_a3_on_nodes_without_a_super_pod_warns_on_every_pod_and_in_report(
    tmp_path: Path
) -> None:
    # Issue 36: `manifest --a3` pods without npu-smi (or on A2 nodes) quietly built a v1.0
    # table. The manifest sets ASCEND_NODE_A3=1; every node still agrees on v1.0 (all say
    # "no super pod"), but each says so, and `report` leads with the warning.
    (tmp_path / "shared").mkdir()
    spec = SimSpec(nodes=2, devices=4, run_id="a3-missing", timeout=20,
                   extra_env={"ASCEND_NODE_A3": "1"})
    results = launch(prepare(spec, tmp_path / "work", tmp_path / "shared"), 30)
    assert codes(results) == [0, 0], explain(results)
    warning = "rendered for Atlas A3 (ASCEND_NODE_A3, manifest --a3), but this node reports " \
              "no super pod ("
    for r in results:
        assert warning in r.stderr, explain(results)
        assert "the rank table will be v1.0, not the v1.2 an A3 SuperPoD needs" in r.stderr
    table = json.loads((tmp_path / "shared" / "ranktable-a3-missing.json").read_text())
    assert table["version"] == "1.0"
    report = subprocess.run(
        [sys.executable, "-m", "ascend_node", "report", "--shared-dir",
         str(tmp_path / "shared"), "--run-id", "a3-missing"],
        capture_output=True, text=True, timeout=60)
    assert report.returncode == 0, report.stderr
    lines = [ln for ln in report.stdout.splitlines() if ln.startswith("warning (2 of 2 nodes")]
    assert len(lines) == 1 and warning in lines[0], report.stdout
    # a node that does report its super pod says nothing of the kind
    (tmp_path / "a3").mkdir()
    (tmp_path / "a3" / "shared").mkdir()
    fine = launch(prepare(a3_spec(2, ASCEND_NODE_A3="1"), tmp_path / "a3" / "work",
                          tmp_path / "a3" / "shared"), 30)
    assert codes(fine) == [0, 0], explain(fine)
    assert not any("rendered for Atlas A3" in r.stderr for r in fine)
