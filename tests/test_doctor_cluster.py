"""Injected faults in simulated multi-node runs: N real `ascend-node doctor --peers --json`
processes on one shared directory, each with its own fake NPUs.

Each fault must be found by the right check and by no other, on exactly the nodes that
can see it: the operator reading any node's report goes straight to the cause.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Callable

import pytest

from ascend_node.sim.cluster import NodeResult, SimNode, SimSpec, device_ip, launch, prepare

pytestmark = pytest.mark.multiprocess

DOCTOR = ("doctor", "--peers", "--json")


def cluster(tmp: Path, nodes: int = 2, devices: int = 4, peer_wait: float = 10.0
            ) -> list[SimNode]:
    spec = SimSpec(nodes=nodes, devices=devices, run_id="t", timeout=20.0, command=DOCTOR,
                   extra_env={"ASCEND_NODE_PROGRESS_INTERVAL": "1"})
    shared = tmp / "shared"
    shared.mkdir(parents=True, exist_ok=True)
    sim = prepare(spec, tmp / "work", shared)
    for node in sim:
        node.argv += ["--peer-wait", f"{peer_wait:g}"]
    return sim


def bootstrap(nodes: list[SimNode]) -> None:
    """Run `ranktable` on every node first, so each holds the run's table."""
    saved = [n.argv for n in nodes]
    for n in nodes:
        n.argv = [sys.executable, "-m", "ascend_node", "ranktable"]
    results = launch(nodes, 30)
    assert [r.exit_code for r in results] == [0] * len(nodes), [r.stderr for r in results]
    for n, argv in zip(nodes, saved):
        n.argv = argv


def reports(results: list[NodeResult]) -> list[dict]:
    out = []
    for r in results:
        try:
            doc = json.loads(r.stdout)
        except json.JSONDecodeError:
            pytest.fail(f"node {r.index} exit {r.exit_code}: no JSON; stderr {r.stderr[-1500:]}")
        assert doc["schema_version"] == 1
        assert r.exit_code == doc["exit_code"], r.stderr
        out.append(doc)
    return out


def problems(doc: dict) -> dict[str, str]:
    return {c["id"]: c["status"] for c in doc["checks"] if c["status"] in ("warn", "fail")}


def local_table(node: SimNode) -> Path:
    return node.state_dir / "ranktable.json"


# --------------------------------------------------------------------------- faults


def link_down(nodes: list[SimNode]) -> None:
    nodes[1].devices[3].link = "DOWN"


def no_ip(nodes: list[SimNode]) -> None:
    nodes[1].devices[2].ip = None


def duplicate_ip_across_nodes(nodes: list[SimNode]) -> None:
    nodes[1].devices[2].ip = device_ip(0, 2)


def netmask_mismatch(nodes: list[SimNode]) -> None:
    for dev in nodes[1].devices:
        dev.netmask = "255.255.0.0"


def tls_mismatch(nodes: list[SimNode]) -> None:
    for dev in nodes[1].devices:
        dev.tls = 1


def unreachable_peer(nodes: list[SimNode]) -> None:
    """Nodes 0 and 2 cannot reach each other (a broken switch path); node 1 reaches both."""
    for a, b in ((0, 2), (2, 0)):
        for dev in nodes[a].devices:
            dev.unreachable = tuple(device_ip(b, i) for i in range(len(nodes[b].devices)))


def device_count_mismatch(nodes: list[SimNode]) -> None:
    del nodes[1].devices[3]
    nodes[1].env["ASCEND_VISIBLE_DEVICES"] = "0,1,2"


def stale_rank_table(nodes: list[SimNode]) -> None:
    """Node 1 holds a table that is no longer the run's: another node's device moved."""
    path = local_table(nodes[1])
    table = json.loads(path.read_text())
    table["server_list"][0]["device"][0]["device_ip"] = "10.20.9.9"
    path.write_text(json.dumps(table, indent=2))  # keeps the inode's mode 0640


def rank_table_mode_0644(nodes: list[SimNode]) -> None:
    local_table(nodes[1]).chmod(0o644)


def nothing(nodes: list[SimNode]) -> None:
    pass


def hccl_env_mismatch(nodes: list[SimNode]) -> None:
    nodes[1].env["HCCL_CONNECT_TIMEOUT"] = "600"


def cann_version_mismatch(nodes: list[SimNode]) -> None:
    nodes[1].cann = "8.2.RC1"  # its fake toolkit's version.cfg


def npu_busy(nodes: list[SimNode]) -> None:
    nodes[1].devices[2].holders.append((4242, "python3", 61440))


Fault = Callable[[list[SimNode]], None]
CATALOGUE: list[tuple[str, Fault, int, bool, dict[int, dict[str, str]]]] = [
    # name, fault, nodes, bootstrap first, {node: non-ok checks} (nodes not listed: none)
    ("healthy", nothing, 2, True, {}),
    ("link-down", link_down, 2, False, {1: {"device.link": "fail"}}),
    ("no-ip", no_ip, 2, False, {1: {"device.ip": "fail"}}),
    ("duplicate-ip", duplicate_ip_across_nodes, 2, False,
     {0: {"peers.duplicate_ip": "fail"}, 1: {"peers.duplicate_ip": "fail"}}),
    ("netmask", netmask_mismatch, 2, False,
     {0: {"peers.netmask": "warn"}, 1: {"peers.netmask": "warn"}}),
    ("tls", tls_mismatch, 2, False, {0: {"peers.tls": "fail"}, 1: {"peers.tls": "fail"}}),
    ("unreachable", unreachable_peer, 3, False,
     {0: {"peers.ping": "fail"}, 2: {"peers.ping": "fail"}}),
    ("stale-table", stale_rank_table, 2, True, {1: {"ranktable.stale": "fail"}}),
    ("device-count", device_count_mismatch, 2, False,
     {0: {"peers.devices": "fail"}, 1: {"peers.devices": "fail"}}),
    # No MindIE config here, so doctor judges the table by HCCL's rules: 0640 is MindIE's
    # rule alone (MindCluster's own hccl.json is 0644), so a 0644 table is no fault.
    ("table-0644-hccl", rank_table_mode_0644, 2, True, {}),
    # Issue 28: what every node must share, and a process holding an NPU.
    ("hccl-env", hccl_env_mismatch, 2, False,
     {0: {"peers.hccl": "fail"}, 1: {"peers.hccl": "fail"}}),
    ("cann-version", cann_version_mismatch, 2, False,
     {0: {"peers.hccl": "fail"}, 1: {"peers.hccl": "fail"}}),
    ("npu-busy", npu_busy, 2, False, {1: {"npu.processes": "warn"}}),
]


@pytest.mark.parametrize("name, fault, n, boot, expected", CATALOGUE,
                         ids=[c[0] for c in CATALOGUE])
def test_fault_is_found_by_its_check_only(
    tmp_path: Path, name: str, fault: Fault, n: int, boot: bool,
    expected: dict[int, dict[str, str]],
) -> None:
    nodes = cluster(tmp_path, nodes=n)
    if boot:
        bootstrap(nodes)
    fault(nodes)
    docs = reports(launch(nodes, 30))
    got = {i: problems(doc) for i, doc in enumerate(docs)}
    assert got == {i: expected.get(i, {}) for i in range(n)}
    for i, doc in enumerate(docs):
        statuses = set(expected.get(i, {}).values())
        want = 1 if "fail" in statuses else 3 if "warn" in statuses else 0
        assert doc["exit_code"] == want
        counts = doc["counts"]
        assert counts["ok"] + counts["skip"] == len(doc["checks"]) - len(expected.get(i, {}))
        assert sum(counts.values()) == len(doc["checks"])
        assert sorted(doc["facts"]["peers_read"]) == [j for j in range(n) if j != i]


def test_reports_name_the_cause_and_the_fix(tmp_path: Path) -> None:
    nodes = cluster(tmp_path, nodes=2)
    link_down(nodes)
    unreachable = device_ip(0, 1)
    nodes[1].devices[1].unreachable = (unreachable,)
    docs = reports(launch(nodes, 30))
    by_id = {c["id"]: c for c in docs[1]["checks"]}
    assert by_id["device.link"]["message"] == (
        "device 3: link status DOWN (`hccn_tool -i 3 -link -g`)")
    assert "`hccn_tool -i 3 -link_stat -g`" in by_id["device.link"]["remedy"]
    assert by_id["peers.ping"]["message"] == (
        f"device 1 -> master 0 (node 0) device 1 ({unreachable}): unreachable "
        "(3 sent, 0 received, 100.00% loss)")
    # Node 0 skips the pair to node 1's down device instead of blaming the network.
    ping0 = {c["id"]: c for c in docs[0]["checks"]}["peers.ping"]
    assert ping0["status"] == "ok"
    assert ping0["message"] == ("3 pairs answer (1 pairs skipped (a device without IP or link; "
                                "see its check))")


def test_missing_peer_is_named_after_the_wait(tmp_path: Path) -> None:
    nodes = cluster(tmp_path, nodes=3, peer_wait=1.0)
    docs = reports(launch(nodes[:2], 30))
    for doc in docs:
        assert problems(doc) == {"peers.present": "warn"}
        present = {c["id"]: c for c in doc["checks"]}["peers.present"]
        assert present["message"] == "worker 1 (node 2) published no facts within 1 s"
        assert doc["exit_code"] == 3


def test_text_output_and_exit_code(tmp_path: Path) -> None:
    nodes = cluster(tmp_path, nodes=2)
    tls_mismatch(nodes)
    for node in nodes:
        node.argv.remove("--json")
    results = launch(nodes, 30)
    assert [r.exit_code for r in results] == [1, 1]
    lines = results[0].stdout.splitlines()
    assert lines[0] == "ascend-node doctor: master 0 (node 0)"
    tls = next(ln for ln in lines if " peers.tls " in ln)
    assert tls.split()[0] == "fail"
    assert tls.endswith("TLS switch differs between nodes: 0 on node 0; 1 on node 1")
    assert lines[-1].startswith("failed: 1 fail, 0 warn, ")


def test_large_cluster_pings_a_bounded_sample(tmp_path: Path) -> None:
    nodes = cluster(tmp_path, nodes=6, devices=16)
    docs = reports(launch(nodes, 60))
    for doc in docs:
        assert problems(doc) == {}
        assert doc["facts"]["pings"] == 64  # 5 peers x 16 devices = 80 pairs, sampled
    published = tmp_path / "shared" / ".ascend-node" / "t" / "doctor"
    assert sorted(p.name for p in published.iterdir()) == [f"node-{i}.json" for i in range(6)]
