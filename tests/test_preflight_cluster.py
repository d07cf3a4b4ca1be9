"""Pre-flight with N real agent processes and fake NPUs: each fault ends every node with 5,
naming the nodes and devices on each side; a healthy cluster starts and says so."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from ascend_node.preflight.sample import sample_pairs, table_devices
from ascend_node.sim.cluster import SimSpec, device_ip, prepare
from tests.cluster_helpers import codes, explain, make_nodes, run, shared_table

pytestmark = pytest.mark.multiprocess


def boot_nodes(tmp, nodes=3, devices=4, **env):
    spec = SimSpec(nodes=nodes, devices=devices, run_id="t", timeout=30, boot=True,
                   extra_env={"ASCEND_NODE_PROGRESS_INTERVAL": "1", **env})
    shared = tmp / "shared"
    shared.mkdir(parents=True, exist_ok=True)
    return prepare(spec, tmp / "work", shared)


def status_json(node):
    out = subprocess.run([sys.executable, "-m", "ascend_node", "status", "--json",
                          "--state-dir", str(node.state_dir)], capture_output=True, text=True,
                         env=node.env, check=False)
    return json.loads(out.stdout)


def attempt_files(tmp):
    return {p.name for p in (tmp / "shared" / ".ascend-node" / "t" / "attempts").glob("*/*")}


def test_tls_switch_differing_on_one_node_ends_every_node_with_5(tmp_path):
    nodes = make_nodes(tmp_path, 3)
    for d in nodes[2].devices:
        d.tls = 1
    results = run(nodes)
    assert codes(results) == [5, 5, 5], explain(results)
    for r in results:
        assert ("TLS switch differs between devices (HCCL fails with EI0016): switch 1 on "
                "worker 1 (node 2) devices 0-3; switch 0 on master 0 (node 0) devices 0-3, "
                "worker 0 (node 1) devices 0-3") in r.stderr, explain([r])
        assert "`hccn_tool -i <dev> -tls -s enable 0` for each device of worker 1 (node 2)" \
            in r.stderr
    assert not (tmp_path / "shared" / "ranktable-t.json").exists()


def test_a_link_down_on_a_table_device_ends_every_node_with_5(tmp_path):
    nodes = make_nodes(tmp_path, 3)
    nodes[1].devices[2].link = "DOWN"
    results = run(nodes)
    assert codes(results) == [5, 5, 5], explain(results)
    for r in results:
        assert "RoCE link DOWN on worker 0 (node 1) device 2, which the table uses" in r.stderr


def test_warn_and_off_let_a_tls_mismatch_through(tmp_path):
    for policy in ("warn", "off"):
        nodes = make_nodes(tmp_path / policy, 2, ASCEND_NODE_PREFLIGHT=policy)
        nodes[1].devices[0].tls = 1
        results = run(nodes)
        assert codes(results) == [0, 0], explain(results)
        said = ["TLS switch differs" in r.stderr for r in results]
        assert said == ([True, True] if policy == "warn" else [False, False])


def test_net_health_fault_is_a_warning_on_every_node(tmp_path):
    nodes = make_nodes(tmp_path, 2)
    nodes[0].devices[3].health = "Fault"
    results = run(nodes)
    assert codes(results) == [0, 0], explain(results)
    for r in results:
        assert ("warning: pre-flight: net health Fault (not Success/Init) on master 0 (node 0) "
                "device 3") in r.stderr
        doc = json.loads((r.state_dir / "preflight.json").read_text())
        assert doc["policy"] == "strict" and "net health Fault" in doc["cluster"]["warnings"][0]


def test_one_unreachable_peer_device_ends_every_node_with_5(tmp_path):
    nodes = boot_nodes(tmp_path)
    table_like = {"server_list": [
        {"device": [{"device_id": str(d), "device_ip": device_ip(n, d)} for d in range(4)]}
        for n in range(3)]}
    pair = sample_pairs(table_devices(table_like), 2)[0]
    nodes[2].unreachable = {pair.address}
    results = run(nodes)
    assert codes(results) == [5, 5, 5], explain(results)
    want = (f"pre-flight: 1 sampled device pair(s) unreachable over RoCE: worker 1 (node 2) "
            f"device {pair.device_id} -> {'master 0' if pair.peer == 0 else 'worker 0'} "
            f"(node {pair.peer}) device {pair.peer_device} ({pair.address}): 3 sent, 0 "
            "received, 100.00% loss")
    for r, node in zip(results, nodes):
        assert want in r.stderr, explain([r])
        assert not (node.state_dir.parent / "daemon-report.txt").exists()  # never exec'd
        st = status_json(node)
        assert st["state"] == "failed" and st["exit_code"] == 1
        assert st["status"]["exit_code"] == 5
        [event] = [e for e in st["events"] if e["phase"] == "preflight"]
        assert event["outcome"] == "failed" and event["exit_code"] == 5
        [bad] = st["preflight"]["reach"]["unreachable"]
        assert (bad["source"], bad["device"], bad["peer"], bad["address"]) == (
            2, pair.device_id, pair.peer, pair.address)


def test_unreachable_under_warn_starts_the_server_and_reports(tmp_path):
    nodes = boot_nodes(tmp_path, nodes=2, ASCEND_NODE_PREFLIGHT="warn")
    nodes[0].unreachable = {device_ip(1, 1)}
    results = run(nodes)
    assert codes(results) == [0, 0], explain(results)
    for r in results:
        assert "unreachable over RoCE: master 0 (node 0) device 1 -> worker 0 (node 1) " \
            "device 1" in r.stderr
        assert "(going on: --preflight warn)" in r.stderr


def test_a_healthy_cluster_boots_and_status_shows_the_pings(tmp_path):
    nodes = boot_nodes(tmp_path)
    results = run(nodes)
    assert codes(results) == [0, 0, 0], explain(results)
    assert {"reach-0.json", "reach-1.json", "reach-2.json", "reach.json"} <= attempt_files(
        tmp_path)
    for node in nodes:
        st = status_json(node)
        assert st["state"] == "done"
        reach = st["preflight"]["reach"]
        assert reach["ok"] and reach["verdict_from_node0"]
        assert reach["pings_in_cluster"] == 12  # max(2 peers, 4 devices) on each of 3 nodes
        assert {p["result"] for p in reach["pings_from_this_node"]} == {"ok"}
        assert reach["warnings"] == [] and reach["unreachable"] == []
        [event] = [e for e in st["events"] if e["phase"] == "preflight"]
        assert (event["outcome"], event["cluster_pings"], event["unreachable"]) == ("ok", 12, 0)


def test_preflight_off_pings_nothing(tmp_path):
    nodes = boot_nodes(tmp_path, nodes=2, ASCEND_NODE_PREFLIGHT="off")
    nodes[0].unreachable = {device_ip(1, 1)}
    results = run(nodes)
    assert codes(results) == [0, 0], explain(results)
    assert not {f for f in attempt_files(tmp_path) if f.startswith("reach")}


def test_a_restart_with_changed_net_health_gets_the_same_table(tmp_path):
    """Health is published beside the member data, not in its digest."""
    nodes = make_nodes(tmp_path, 2)
    nodes[1].devices[0].health = "Init"
    assert codes(run(nodes)) == [0, 0]
    before = shared_table(tmp_path)
    attempt = json.loads((tmp_path / "shared" / ".ascend-node" / "t" / "attempt.json")
                         .read_text())["attempt_id"]
    nodes[1].devices[0].health = "Success"
    [again] = run([nodes[1]])
    assert again.exit_code == 0, explain([again])
    assert f"rank table ready (attempt {attempt}" in again.stderr
    assert shared_table(tmp_path) == before
