"""`ascend-node simulate`: the main job on the built-in simulation, as a user runs it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.multiprocess


def simulate(*args: str, tmp: Path | None = None) -> subprocess.CompletedProcess[str]:
    """`ascend-node simulate ARGS`; with `tmp`, its workspace goes there (TMPDIR)."""
    env = {**os.environ, "TMPDIR": str(tmp)} if tmp is not None else None
    return subprocess.run([sys.executable, "-m", "ascend_node", "simulate", *args],
                          capture_output=True, text=True, timeout=300, env=env)


def workspaces(tmp: Path) -> list[Path]:
    return sorted(tmp.glob("ascend-node-sim-*"))


def test_simulate_prints_one_line_per_server_and_where_the_time_went(tmp_path):
    out_file = tmp_path / "out" / "table.json"
    out_file.parent.mkdir()
    shared = tmp_path / "shared"
    shared.mkdir()
    done = simulate("--nodes", "3", "--devices", "2", "--shared-dir", str(shared),
                    "--table-out", str(out_file), tmp=tmp_path)
    assert done.returncode == 0, done.stderr
    # Something at once on stderr (a first run compiles the package in every node).
    assert done.stderr.startswith("simulate: starting 3 nodes x 2 NPUs in "
                                  f"{tmp_path}/ascend-node-sim-"), done.stderr
    assert workspaces(tmp_path) == []  # every node succeeded: the workspace is gone
    lines = done.stdout.splitlines()
    assert '"server_list"' not in done.stdout  # the table is not printed by default
    header = lines[0].split()
    assert header[:8] == ["node", "server", "pod", "IP", "devices", "ranks", "exit", "seconds"]
    assert {"startup", "discovery", "rendezvous", "outputs"} <= set(header[8:])
    for index, ranks in enumerate(("0-1", "2-3", "4-5")):
        cells = lines[1 + index].split()
        assert cells[:6] == [str(index), f"10.100.0.{10 + index}", f"10.200.0.{10 + index}",
                             "2", ranks, "0"]
        assert all(float(c) >= 0 for c in cells[6:])
    assert "3 nodes x 2 NPUs: 3 ok, identical tables on every node" in done.stdout
    shared_table = shared / "ranktable-sim.json"
    # named where it was copied, not advised (issue 36)
    assert (f"rank table v1.0: {shared_table} (copied to {out_file}; --json prints it)"
            in done.stdout.splitlines())
    table = json.loads(out_file.read_text())
    assert out_file.read_text() == shared_table.read_text()
    assert [d["rank_id"] for s in table["server_list"] for d in s["device"]] == [
        str(i) for i in range(6)]
    assert len(lines) == 6  # header, 3 servers, verdict, table path: nothing else


def test_simulate_table_out_into_a_missing_directory_is_one_line(tmp_path):
    done = simulate("--nodes", "1", "--devices", "1", "--shared-dir", str(tmp_path),
                    "--table-out", str(tmp_path / "nope" / "t.json"))
    # Refused before any node runs (issue 27), naming the flag: a usage error.
    assert done.returncode == 2
    assert (f"error: --table-out {tmp_path / 'nope' / 't.json'}: directory "
            f"{tmp_path / 'nope'} does not exist") in done.stderr
    assert "simulate: starting" not in done.stderr
    assert "Traceback" not in done.stderr


def test_simulate_json_and_a_second_run_on_the_same_volume_reuses_the_table(tmp_path):
    first = simulate("--nodes", "2", "--devices", "4", "--shared-dir", str(tmp_path), "--json")
    assert first.returncode == 0, first.stderr
    doc = json.loads(first.stdout)
    assert doc["schema_version"] == 1 and doc["ok"] and doc["identical_tables"]
    assert [r["exit_code"] for r in doc["results"]] == [0, 0]
    assert doc["ranktable"]["server_count"] == "2"
    for index, result in enumerate(doc["results"]):
        assert result["server"] == f"10.100.0.{10 + index}"
        assert result["ranks"] == ("0-3", "4-7")[index] and result["devices"] == 4
        assert {"discovery", "rendezvous", "outputs"} <= set(result["phases"])
        assert all(v >= 0 for v in result["phases"].values())
    attempt = (tmp_path / ".ascend-node" / "sim" / "attempt.json").read_bytes()
    again = simulate("--nodes", "2", "--devices", "4", "--shared-dir", str(tmp_path), "--json")
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout)["ranktable"] == doc["ranktable"]
    assert (tmp_path / ".ascend-node" / "sim" / "attempt.json").read_bytes() == attempt


def test_simulate_boot_runs_the_whole_chain_into_the_fake_daemon(tmp_path):
    done = simulate("--nodes", "2", "--devices", "2", "--boot", "--shared-dir", str(tmp_path))
    assert done.returncode == 0, done.stderr
    assert "2 nodes x 2 NPUs: 2 ok, identical tables on every node" in done.stdout
    header = done.stdout.splitlines()[0].split()
    assert header[-5:] == ["outputs", "preflight", "install", "set_env", "config"]


def test_simulate_rejects_a_bad_node_count():
    done = simulate("--nodes", "0")
    assert done.returncode == 2
    assert "--nodes" in done.stderr
