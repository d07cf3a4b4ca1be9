"""Real agent processes leave their summaries, and `report` tells their story: a slow
node named with its slow tool calls, a node that never came, a volume where no summary
can be written (the job starts the same)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from ascend_node.sim.cluster import SimSpec, launch, prepare

pytestmark = pytest.mark.multiprocess


def report(shared, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "ascend_node", "report", "--shared-dir",
                           str(shared), "--run-id", "sim", *args],
                          capture_output=True, text=True, timeout=60)


def test_a_node_with_slow_hccn_tool_calls_is_named_as_the_last_arrival(tmp_path):
    shared = tmp_path / "shared"
    shared.mkdir()
    spec = SimSpec(nodes=3, devices=4, timeout=120, command=("boot", "--", "true"),
                   extra_env={"ASCEND_NODE_PREFLIGHT": "off"})
    nodes = prepare(spec, tmp_path, shared)
    # Node 2's four hccn_tool calls take 5 s each: more than any start-up on a loaded machine.
    nodes[2].env["ASCEND_NODE_SIM_DELAY"] = "5"
    results = launch(nodes, spec.timeout)
    assert [r.exit_code for r in results] == [0, 0, 0], [r.stderr for r in results]
    done = report(shared, "--json")
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    assert doc["missing"] == [] and doc["ignored"] == []
    assert [s["state"] for s in doc["summaries"]] == ["exec"] * 3
    last = doc["words"][0]
    assert last.startswith("last arrival: worker 1 (node 2) published ")
    assert "its discovery took" in last and "4 x hccn_tool -ip at 5." in last
    # Every node's phases lie on one axis, in the order a boot goes through them.
    for row in doc["rows"]:
        phases = [b["phase"] for b in row["bars"]]
        assert phases[:2] == ["startup", "discovery"] and phases[-1] == "exec"
        starts = [b["start"] for b in row["bars"]]
        assert starts == sorted(starts) and starts[0] >= 0
    text = report(shared).stdout
    assert "2 w1" in text and "DDDDD" in text.splitlines()[4]


def test_a_node_that_never_came_is_listed_and_the_timeout_is_summarised(tmp_path):
    shared = tmp_path / "shared"
    shared.mkdir()
    # 12 s, not less: node 1 must arrive before node 0 gives up, on a loaded machine too
    spec = SimSpec(nodes=3, devices=2, timeout=12)
    nodes = prepare(spec, tmp_path, shared)
    results = launch(nodes[:2], spec.timeout)  # node 2's pod never starts
    assert [r.exit_code for r in results] == [4, 4]
    done = report(shared)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[1] == "never arrived (1): worker 1 (node 2)"  # the cause leads
    assert lines[2].startswith("first failure: ") and ", exit 4: timed out after 12 s" in lines[2]
    assert any(ln.startswith("then node ") and ": exit 4: timed out after 12 s" in ln
               for ln in lines)
    row = next(ln for ln in lines if ln.startswith("0 m0"))
    assert "exit 4" in row
    assert next(ln for ln in lines if ln.startswith("2 w1")).endswith("never arrived")


def test_a_volume_that_refuses_the_summaries_starts_the_job_all_the_same(tmp_path):
    shared = tmp_path / "shared"
    (shared / ".ascend-node" / "sim").mkdir(parents=True)
    (shared / ".ascend-node" / "sim" / "timeline").write_text("not a directory")
    done = subprocess.run([sys.executable, "-m", "ascend_node", "simulate", "--nodes", "2",
                           "--devices", "2", "--shared-dir", str(shared), "--report"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "2 nodes x 2 NPUs: 2 ok, identical tables on every node" in done.stdout
    assert "no timeline: " in done.stdout and "is not a directory" in done.stdout
    alone = report(shared)
    assert alone.returncode == 1 and "Traceback" not in alone.stderr
    assert "timeline is not a directory, refused" in alone.stderr


def test_nodes_whose_clocks_are_hours_apart_line_up_on_the_volume_clock(tmp_path):
    """Each node under libfaketime with its own offset: the summaries carry the offset
    each measured, and the timeline spans seconds, not hours."""
    import shutil

    faketime = shutil.which("faketime")
    if faketime is None:
        pytest.skip("faketime is not installed (Debian package faketime; "
                    "scripts/ci-setup-sshfs installs it as root)")
    shared = tmp_path / "shared"
    shared.mkdir()
    skews = {"-7h": 7 * 3600, "+0": 0, "+5h": -5 * 3600}
    spec = SimSpec(nodes=3, devices=2, timeout=60)
    nodes = prepare(spec, tmp_path, shared)
    for node, skew in zip(nodes, skews):
        node.argv = [faketime, "-f", skew, *node.argv]
    results = launch(nodes, spec.timeout)
    assert [r.exit_code for r in results] == [0, 0, 0], [r.stderr for r in results]
    done = report(shared, "--json")
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    offsets = [s["clock"]["offset"] for s in doc["summaries"]]
    for got, want in zip(offsets, skews.values()):
        assert abs(got - want) < 60, offsets  # volume - local: minus the node's skew
    assert doc["span"] < 600  # seconds of a start, not the hours between the clocks
    published = [s["published"] for s in doc["summaries"]]
    firsts = [row["bars"][0]["start"] for row in doc["rows"]]
    assert max(published) - min(published) < 120 and max(firsts) < 120


def test_simulate_report_draws_the_simulated_job(tmp_path):
    done = subprocess.run([sys.executable, "-m", "ascend_node", "simulate", "--nodes", "3",
                           "--devices", "2", "--tool-delay", "0.3", "--shared-dir",
                           str(tmp_path), "--report"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    verdict = next(i for i, ln in enumerate(lines) if "identical tables on every node" in ln)
    timeline = lines[verdict + 2:]  # after the verdict and the table's path
    assert timeline[0].startswith("run sim, attempt ") and "3 of 3 nodes" in timeline[0]
    assert [ln.split()[:2] for ln in timeline[2:5]] == [["0", "m0"], ["1", "w0"], ["2", "w1"]]
    assert any(ln.startswith("last arrival: ") for ln in timeline)
    (tmp_path / "j").mkdir()  # simulate creates no --shared-dir (issue 27)
    as_json = subprocess.run([sys.executable, "-m", "ascend_node", "simulate", "--nodes", "2",
                              "--devices", "2", "--shared-dir", str(tmp_path / "j"),
                              "--report", "--json"],
                             capture_output=True, text=True, timeout=120)
    doc = json.loads(as_json.stdout)
    assert doc["ok"] and len(doc["timeline"]["rows"]) == 2
