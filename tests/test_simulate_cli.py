"""`ascend-node simulate`: the main job on the built-in simulation, as a user runs it."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

pytestmark = pytest.mark.multiprocess


def simulate(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "ascend_node", "simulate", *args],
                          capture_output=True, text=True, timeout=120)


def test_simulate_prints_the_table_per_node_results_and_timing(tmp_path):
    done = simulate("--nodes", "3", "--devices", "2", "--shared-dir", str(tmp_path))
    assert done.returncode == 0, done.stderr
    out = done.stdout
    table = json.loads(out[: out.index("\n}\n") + 3])
    assert table["server_count"] == "3"
    assert [d["rank_id"] for s in table["server_list"] for d in s["device"]] == [
        str(i) for i in range(6)]
    assert "node  exit  seconds  message" in out
    assert "3 nodes x 2 NPUs: 3 ok, identical tables on every node" in out
    assert (tmp_path / "ranktable-sim.json").read_text() == out[: out.index("\n}\n") + 3]


def test_simulate_json_and_a_second_run_on_the_same_volume_reuses_the_table(tmp_path):
    first = simulate("--nodes", "2", "--devices", "4", "--shared-dir", str(tmp_path), "--json")
    assert first.returncode == 0, first.stderr
    doc = json.loads(first.stdout)
    assert doc["schema_version"] == 1 and doc["ok"] and doc["identical_tables"]
    assert [r["exit_code"] for r in doc["results"]] == [0, 0]
    assert doc["ranktable"]["server_count"] == "2"
    attempt = (tmp_path / ".ascend-node" / "sim" / "attempt.json").read_bytes()
    again = simulate("--nodes", "2", "--devices", "4", "--shared-dir", str(tmp_path), "--json")
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout)["ranktable"] == doc["ranktable"]
    assert (tmp_path / ".ascend-node" / "sim" / "attempt.json").read_bytes() == attempt


def test_simulate_boot_runs_the_whole_chain_into_the_fake_daemon(tmp_path):
    done = simulate("--nodes", "2", "--devices", "2", "--boot", "--shared-dir", str(tmp_path))
    assert done.returncode == 0, done.stderr
    assert "2 nodes x 2 NPUs: 2 ok, identical tables on every node" in done.stdout


def test_simulate_rejects_a_bad_node_count():
    done = simulate("--nodes", "0")
    assert done.returncode == 2
    assert "--nodes" in done.stderr


def test_the_summary_says_how_many_nodes_hold_the_table(tmp_path):
    from ascend_node.sim.cluster import NodeResult, SimReport, SimSpec, format_report

    results = []
    for index, code in enumerate((0, 4)):
        state = tmp_path / f"node-{index}"
        state.mkdir()
        if code == 0:
            (state / "ranktable.json").write_text("{}\n")
        results.append(NodeResult(index, code, 1.0, "", "ascend-node: error: timed out", state))
    text = format_report(SimReport(SimSpec(nodes=2), tmp_path, results, 1.0, None))
    assert "2 nodes x 8 NPUs: 1 ok, 1/2 nodes hold the table" in text
    assert "    1     4     1.00  ascend-node: error: timed out" in text
