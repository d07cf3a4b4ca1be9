"""MindCluster's hccl.json, end to end: real agent processes wait while a separate process
writes the file the way the Ascend Operator does (in place: `initializing`, then
`completed`), including a half-written moment and a file that never completes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from ascend_node.events import read_events
from ascend_node.ranktable import validate_rank_table
from ascend_node.sim.cluster import SimNode, SimSpec, device_ip, host_ip, launch, pod_ip, prepare
from tests.cluster_helpers import codes, explain

pytestmark = pytest.mark.multiprocess

DEVICES = 8
OWNER = (4321, 4322)

# The writer: once every agent is waiting (its status.json says so), it rewrites the file
# in place (not atomically), step by step, at the given offsets.
WRITER = r"""
import json, os, sys, time
path, steps, waiting = sys.argv[1], json.loads(sys.argv[2]), sys.argv[3:]
give_up = time.monotonic() + 30
while time.monotonic() < give_up and not all(os.path.exists(w) for w in waiting):
    time.sleep(0.05)
start = time.monotonic()
for at, text in steps:
    time.sleep(max(0.0, at - (time.monotonic() - start)))
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as fh:
        fh.write(text)
"""


def mc_table(nodes: int, present: int, status: str) -> str:
    """hccl.json as MindCluster writes it for the simulated pods (pod UID as server_id)."""
    servers = [{
        "device": [{"device_id": str(d), "device_ip": device_ip(i, d),
                    "rank_id": str(i * DEVICES + d)} for d in range(DEVICES)],
        "server_id": str(uuid.UUID(int=i + 1)), "host_ip": host_ip(i),
        "container_ip": pod_ip(i), "hardware_type": "800I-A2-32G",
    } for i in range(present)]
    return json.dumps({"status": status, "server_list": servers,
                       "server_count": str(len(servers)), "version": "1.0"}, indent=4) + "\n"


def mc_nodes(tmp: Path, nodes: int = 2, timeout: float = 20.0, boot: bool = False,
             **env: str) -> tuple[list[SimNode], Path]:
    """Simulated pods reading MindCluster's file; as root, an init container preparing the
    table for uid 4321 (--file-owner), except with `boot`, whose daemon runs as us."""
    hccl = tmp / "mnt" / "config" / "hccl.json"
    extra = {"ASCEND_NODE_TABLE_SOURCE": "mindcluster", "ASCEND_NODE_HCCL_JSON": str(hccl),
             "ASCEND_NODE_PROGRESS_INTERVAL": "0.3", **env}
    if os.geteuid() == 0 and not boot:
        extra["ASCEND_NODE_FILE_OWNER"] = f"{OWNER[0]}:{OWNER[1]}"
    spec = SimSpec(nodes=nodes, devices=DEVICES, run_id="mc", timeout=timeout, boot=boot,
                   extra_env=extra)
    shared = tmp / "shared"
    shared.mkdir(parents=True, exist_ok=True)
    return prepare(spec, tmp / "work", shared), hccl


def start_writer(path: Path, steps: list[tuple[float, str]], nodes: list[SimNode]
                 ) -> subprocess.Popen[bytes]:
    waiting = [str(n.state_dir / "status.json") for n in nodes]
    return subprocess.Popen([sys.executable, "-c", WRITER, str(path), json.dumps(steps),
                             *waiting])


def test_waits_through_initializing_and_a_half_written_file_then_writes_mindies_table(
    tmp_path: Path
) -> None:
    nodes, hccl = mc_nodes(tmp_path)
    done = mc_table(2, 2, "completed")
    writer = start_writer(hccl, [(0.6, mc_table(2, 1, "initializing")),
                                 (1.8, done[: len(done) // 2]), (3.0, done)], nodes)
    started = time.monotonic()
    try:
        results = launch(nodes, 30)
    finally:
        writer.wait(timeout=30)
    assert codes(results) == [0, 0], explain(results)
    assert time.monotonic() - started < 15
    for r in results:
        assert "the file does not exist yet" in r.stderr
        assert ("status 'initializing', 1 of 2 servers listed; missing: worker 0 (node 1)"
                in r.stderr)
        assert "the file is not complete JSON" in r.stderr
    texts = {(r.state_dir / "ranktable.json").read_bytes() for r in results}
    assert len(texts) == 1
    table = json.loads(texts.pop())
    assert table["version"] == "1.0" and table["server_count"] == "2"
    assert [s["server_id"] for s in table["server_list"]] == [host_ip(0), host_ip(1)]
    assert validate_rank_table(table, "mindie") == []
    for node, r in zip(nodes, results):
        local = r.state_dir / "ranktable.json"
        st = local.stat()
        assert st.st_mode & 0o777 == 0o640
        if os.geteuid() == 0:
            assert (st.st_uid, st.st_gid) == OWNER
        node_dir = r.state_dir.parent
        assert (node_dir / "master").read_text() == pod_ip(0) + "\n"
        assert (node_dir / "world_size").read_text() == "16\n"
        env = json.loads((r.state_dir / "env.json").read_text())["env"]
        assert env["MIES_CONTAINER_IP"] == node.env["K8S_POD_IP"]
        assert env["RANK_TABLE_FILE"] == str(local)
        status = json.loads((r.state_dir / "status.json").read_text())
        assert (status["state"], status["attempt_id"]) == ("done", "mindcluster")
        phases = [e for e in read_events(r.state_dir) if e["phase"] != "run"]
        assert [e["phase"] for e in phases] == ["startup", "mindcluster", "outputs"]
        assert phases[1]["outcome"] == "ok" and phases[1]["path"] == str(hccl)
    # MindCluster's own file is left alone, and the shared volume is never touched.
    assert hccl.read_text() == done
    assert list((tmp_path / "shared").iterdir()) == []


def test_a_file_that_never_completes_times_out_with_exit_4(tmp_path: Path) -> None:
    nodes, hccl = mc_nodes(tmp_path, timeout=2.0)
    hccl.parent.mkdir(parents=True)
    hccl.write_text(mc_table(2, 1, "initializing"))
    started = time.monotonic()
    results = launch(nodes, 10)
    elapsed = time.monotonic() - started
    assert codes(results) == [4, 4], explain(results)
    assert elapsed < 8
    for r in results:
        assert r.last_error == "  hint: check that every pod of the job is running and that " \
            "MindCluster's ascend-operator manages the job; exit 4 is retryable"
        assert (f"ascend-node: error: timed out after 2 s waiting for MindCluster's rank table "
                f"{hccl}: status 'initializing', 1 of 2 servers listed; missing: worker 0 "
                "(node 1)") in r.stderr
        assert not (r.state_dir / "ranktable.json").exists()
        status = json.loads((r.state_dir / "status.json").read_text())
        assert (status["state"], status["exit_code"]) == ("failed", 4)
        wait = next(e for e in read_events(r.state_dir) if e["phase"] == "mindcluster")
        assert (wait["outcome"], wait["exit_code"]) == ("failed", 4)


def test_a_pod_missing_from_the_completed_file_is_inconsistent(tmp_path: Path) -> None:
    nodes, hccl = mc_nodes(tmp_path, nodes=3)
    hccl.parent.mkdir(parents=True)
    hccl.write_text(mc_table(3, 2, "completed"))  # pod 2 is not in it
    results = launch(nodes, 20)
    assert codes(results) == [0, 0, 5], explain(results)
    assert (f"has no server with container_ip {pod_ip(2)} (it lists {pod_ip(0)}, {pod_ip(1)})"
            in results[2].stderr)


def test_auto_takes_the_file_when_it_exists_and_boot_execs_mindie(tmp_path: Path) -> None:
    nodes, hccl = mc_nodes(tmp_path, boot=True, ASCEND_NODE_TABLE_SOURCE="auto")
    hccl.parent.mkdir(parents=True)
    hccl.write_text(mc_table(2, 2, "completed"))
    hccl.chmod(0o644)
    results = launch(nodes, 30)
    assert codes(results) == [0, 0], explain(results)
    for node, r in zip(nodes, results):
        assert f"rank table source: mindcluster (auto: MindCluster's {hccl} exists)" in r.stderr
        assert "Daemon start success!" in r.stdout
        report = (r.state_dir.parent / "daemon-report.txt").read_text().splitlines()
        env: dict[str, Any] = dict(ln.split("=", 1) for ln in report[1:] if "=" in ln)
        assert env["MIES_CONTAINER_IP"] == node.env["K8S_POD_IP"]
        assert env["MASTER_IP"] == pod_ip(0) and env["WORLD_SIZE"] == "16"
        assert env["RANK_TABLE_FILE"] == str(r.state_dir / "ranktable.json")
        config = json.loads((r.state_dir.parent / "config.json").read_text())
        assert config["BackendConfig"]["multiNodesInferEnabled"] is True
        assert config["BackendConfig"]["npuDeviceIds"] == [list(range(DEVICES))]
    assert list((tmp_path / "shared").iterdir()) == []


def test_a_launcher_gets_the_time_left_from_the_agents_start_with_mindclusters_table(
    tmp_path: Path
) -> None:
    """msrun's cluster wait follows the agent's own deadline whichever source made the
    table (it once counted from the machine's boot with MindCluster's file: 30 s)."""
    recorder = tmp_path / "bin" / "msrun"
    recorder.parent.mkdir()
    out = tmp_path / "msrun-args"
    recorder.write_text(f'#!/bin/sh\necho "$@" > {out}.$MIES_CONTAINER_IP\n')
    recorder.chmod(0o755)
    (recorder.parent / "python").symlink_to(sys.executable)
    site = tmp_path / "site" / "mindspore"
    site.mkdir(parents=True)
    (site / "__init__.py").write_text("")
    nodes, hccl = mc_nodes(tmp_path, timeout=600, boot=True, ASCEND_NODE_LAUNCHER="msrun")
    hccl.parent.mkdir(parents=True)
    hccl.write_text(mc_table(2, 2, "completed"))
    for node in nodes:
        node.env["PATH"] = f"{recorder.parent}:{node.env['PATH']}"
        node.env["PYTHONPATH"] = str(site.parent)
        node.argv = [sys.executable, "-m", "ascend_node", "boot", "--", "train.py"]
    results = launch(nodes, 600)
    assert codes(results) == [0, 0], explain(results)
    for node in nodes:
        args = (tmp_path / f"msrun-args.{node.env['K8S_POD_IP']}").read_text().split()
        (wait,) = [int(a.split("=", 1)[1]) for a in args if a.startswith("--cluster_time_out=")]
        # 600 s from the agent's start, less msrun's own start and exit and the time boot
        # took: far above the 30 s floor, never above the agent's own timeout
        assert 400 < wait < 600, args
    assert list((tmp_path / "shared").iterdir()) == []
