"""`simulate` without starting nodes: its options (usage errors name what was typed), the
progress lines, the summary of failures, and a closed stdout (for every command)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from ascend_node.cli import app
from ascend_node.errors import UsageError
from ascend_node.sim.cluster import NodeResult, SimReport, SimSpec
from ascend_node.sim.faults import KINDS, BadDevice
from ascend_node.sim.options import build_spec, parse_node_list
from ascend_node.sim.session import Progress, progress_line
from ascend_node.sim.summary import failures, format_report, report_json
from tests.cli_helpers import cli_runner

runner = cli_runner()


@pytest.mark.parametrize(("args", "cause"), [
    (["--super-pod-size", "2"], "--super-pod-size 2 needs --a3"),
    (["--masters", "5", "--nodes", "2"], "--masters 5 is more than --nodes 2"),
    (["--tool-delay", "-1"], "--tool-delay -1 is not a number of seconds >= 0"),
    (["--tool-delay", "nan"], "--tool-delay nan is not a number of seconds >= 0"),
    (["--timeout", "0"], "--timeout 0 is not a number of seconds > 0"),
    (["--timeout", "-3"], "--timeout -3 is not a number of seconds > 0"),
    (["--timeout", "inf"], "--timeout inf is not a number of seconds > 0"),
    (["--run-id", "team/job"], "run id 'team/job' (from --run-id) is not a safe file-name part"),
    (["--nodes", "4", "--absent", "4"], "--absent '4': there is no node 4 (--nodes 4: 0-3)"),
    (["--nodes", "4", "--absent", "1,x"], "--absent '1,x': 'x' is not a node index or range"),
    (["--nodes", "4", "--absent", "-1"], "--absent '-1': '-1' is not a node index or range"),
    (["--nodes", "4", "--absent", "3-1"], "--absent '3-1': range '3-1' runs backwards"),
    (["--nodes", "2", "--absent", "0-1"], "--absent '0-1' names every node: nothing would run"),
    (["--bad-device", "2:0:no-ip"], "--bad-device 2:0:no-ip: there is no node 2 (--nodes 2: 0-1)"),
    (["--bad-device", "0:8:no-ip"], "--bad-device 0:8:no-ip: there is no device 8 "
                                    "(--devices 8: 0-7)"),
    (["--a3", "--bad-device", "0:16:no-ip"],
     "--bad-device 0:16:no-ip: there is no device 16 (--devices 16: 0-15)"),
    (["--bad-device", "0:1:melted"], "--bad-device '0:1:melted': 'melted' is not a kind of fault"),
    (["--bad-device", "0-1"], "--bad-device '0-1' is not NODE:DEV:KIND"),
    (["--bad-device", "a:1:no-ip"], "--bad-device 'a:1:no-ip': node 'a' is not a number"),
    (["--bad-device", "0:1:unreachable"], "--bad-device 0:1:unreachable needs --boot"),
    (["--nodes", "1", "--bad-device", "0:0:dup-ip"],
     "--bad-device 0:0:dup-ip needs a second node (--nodes 2 or more)"),
    (["--nodes", "3", "--absent", "1", "--bad-device", "1:0:no-ip"],
     "--bad-device 1:0:no-ip: node 1 is --absent"),
    (["--bad-device", "0:0:no-ip", "--bad-device", "0:0:link-down"],
     "--bad-device 0:0:link-down: device 0 of node 0 is named twice"),
    (["--shared-dir", "/not/there"], "--shared-dir /not/there does not exist or is not a "
                                     "directory"),
    (["--table-out", "/missing/t.json"], "--table-out /missing/t.json: directory /missing "
                                         "does not exist"),
    (["--table-out", "/"], "--table-out / is a directory"),
])
def test_a_meaningless_combination_is_a_usage_error_naming_what_was_typed(args, cause):
    done = runner.invoke(app, ["simulate", *args], env={}, catch_exceptions=False)
    assert done.exit_code == 2, done.stderr
    lines = done.stderr.splitlines()
    assert lines[0] == f"ascend-node: error: {cause}", done.stderr
    assert len(lines) == 2 and lines[1].startswith("  hint: ")
    assert "ASCEND_NODE_" not in done.stderr  # what the sim passes on is not what was typed
    assert "simulate: starting" not in done.stderr  # refused before any node started


@pytest.mark.parametrize(("text", "nodes"), [
    ("2", {2}), ("1,3", {1, 3}), ("1-3", {1, 2, 3}), (" 0 , 2-3 ", {0, 2, 3}), ("2-2", {2}),
])
def test_absent_lists_take_indices_and_ranges(text, nodes):
    assert parse_node_list(text, 4) == frozenset(nodes)


def test_build_spec_carries_what_was_asked():
    spec = build_spec(nodes=4, devices=None, a3=True, super_pod_size=2, masters=2,
                      timeout=9, tool_delay=0.5, run_id="r1", boot=True, absent="3",
                      bad_devices=["1:15:tls-on", "0:0:unreachable"])
    assert (spec.nodes, spec.devices, spec.masters, spec.super_pod_size) == (4, 16, 2, 2)
    assert spec.absent == {3} and (spec.timeout, spec.tool_delay) == (9, 0.5)
    assert spec.bad_devices == (BadDevice(1, 15, "tls-on"), BadDevice(0, 0, "unreachable"))
    with pytest.raises(UsageError):
        build_spec(nodes=1, devices=None, a3=False, super_pod_size=0, masters=1, timeout=0,
                   tool_delay=0, run_id="r", boot=False, absent=None, bad_devices=[])


def test_help_names_every_kind_of_bad_device():
    done = runner.invoke(app, ["simulate", "--help"], env={"COLUMNS": "200"})
    assert done.exit_code == 0
    text = re.sub(r"-\s+", "-", " ".join(done.stdout.split()))  # help wraps at hyphens
    for kind in KINDS:
        assert kind in text, kind
    for option in ("--absent", "--bad-device", "--keep / --no-keep"):
        assert option in text


# ------------------------------------------------------------------ progress


def result(index: int, code: int, stderr: str = "", state: Path = Path("/w/node-0/state"),
           **kw) -> NodeResult:
    state = state.parent.parent / f"node-{index}" / "state"
    return NodeResult(index, code, 1.5, "", stderr, state, f"10.200.0.{10 + index}", **kw)


def test_the_progress_line_says_who_ended_who_runs_and_what_node_0_waits_for():
    spec = SimSpec(nodes=4, timeout=60, absent=frozenset({2}))
    line = progress_line(spec, 8.4, [result(1, 1)], [0, 3],
                         "2/4 present, waiting for worker 1 (node 2), worker 2 (node 3)")
    assert line == ("simulate: 8 s: 1/3 nodes ended (node 1 exit 1); waiting for nodes 0, 3 "
                    "(--timeout 60 s from each agent's start); node 0: 2/4 present, "
                    "waiting for worker 1 (node 2), worker 2 (node 3)")


@pytest.mark.parametrize(("starts", "now", "words"), [
    ({0: 100.0, 3: 102.0}, 110.0, "the last gives up in 52 s"),
    ({0: 100.0}, 110.0, "the last gives up in 50 s; node 3 still starting"),
    ({}, 110.0, "nodes 0, 3 still starting"),
    ({0: 100.0, 3: 100.0}, 160.2, "past it, ending"),
])
def test_the_progress_line_says_when_the_nodes_really_give_up(starts, now, words):
    """Issue 36: "they give up 3 s after they start" while they ran 11.8 s: the timeout
    counts from each agent's start, after Python's start-up, which takes seconds on a
    loaded machine. The line says when, from each node's own record of its start."""
    from ascend_node.sim.session import gives_up_note

    assert gives_up_note(60, starts, [0, 3], now) == words
    line = progress_line(SimSpec(nodes=4, timeout=60), 8.4, [], [0, 3], "",
                         gives_up_note(60, starts, [0, 3], now))
    assert f"(--timeout 60 s from each agent's start: {words})" in line


def test_an_agents_start_is_read_from_its_own_events(tmp_path):
    from ascend_node import events
    from ascend_node.sim.session import agent_start

    assert agent_start(tmp_path) is None
    rec = events.Recorder.open(tmp_path, "ranktable", started=1234.5)
    rec.close()
    assert agent_start(tmp_path) == 1234.5


def test_progress_speaks_after_a_few_seconds_then_every_few(tmp_path):
    said: list[str] = []
    tick = Progress(SimSpec(nodes=2, run_id="p"), tmp_path, said.append, first=3, every=5)
    for elapsed in (0.1, 1.0, 2.9, 3.0, 3.1, 7.9, 8.0, 12.0, 13.1):
        tick(elapsed, [], [0, 1])
    assert [line.split(":")[1] for line in said] == [" 3 s", " 8 s", " 13 s"]
    tick(20.0, [result(0, 0), result(1, 0)], [])  # nothing left to wait for
    assert len(said) == 3


def test_progress_shows_node_0s_view_from_the_shared_volume(tmp_path):
    from ascend_node.rendezvous.models import AttemptDoc, ProgressDoc
    from ascend_node.rendezvous.store import RunPaths, write_doc

    paths = RunPaths(tmp_path, "p")
    write_doc(paths.attempt_file, AttemptDoc(run_id="p", attempt_id="1-abcd", opened_by="u",
                                             node_count=3, master_count=1), tmp_path)
    write_doc(paths.progress("1-abcd"), ProgressDoc(
        run_id="p", attempt_id="1-abcd", node_count=3, present=(0, 2), missing=(1,)), tmp_path)
    said: list[str] = []
    Progress(SimSpec(nodes=3, run_id="p"), tmp_path, said.append, first=0)(1.0, [], [0, 1, 2])
    assert said[0].endswith("; node 0: 2/3 present, waiting for worker 0 (node 1)")


def test_launch_ticks_while_nodes_run_and_kills_one_that_outlives_its_timeout(tmp_path):
    """`sleep` stands in for an agent that never gives up: killed after its timeout plus
    the grace, reported as a shell would (128 + 9) with the reason as its last line."""
    from ascend_node.sim.cluster import launch, prepare

    (tmp_path / "shared").mkdir()
    nodes = prepare(SimSpec(nodes=2, devices=1, run_id="k", timeout=0.5), tmp_path / "w",
                    tmp_path / "shared")
    nodes[0].argv = [sys.executable, "-c", "pass"]
    nodes[1].argv = ["sleep", "60"]
    ticks: list[tuple[list[int], list[int]]] = []
    results = launch(nodes, 0.5, lambda _t, ended, waiting: ticks.append(
        ([r.index for r in ended], list(waiting))), grace=0.5)
    assert [r.exit_code for r in results] == [0, 137]
    assert results[1].cause == ("ascend-node simulate: killed: still running 1 s after it "
                                "started (its --timeout is 0.5 s)")
    assert ticks[-1] == ([0, 1], [])
    assert any(1 in waiting for _, waiting in ticks)  # ticks came while node 1 ran
    assert all(sorted(ended + waiting) == [0, 1] for ended, waiting in ticks)


# ------------------------------------------------------------------ summary

TIMEOUT = ("ascend-node: error: timed out after 4 s waiting for peers: 1 of 4 missing: "
           "worker 1 (node 2)\n  hint: check that those pods are running\n")


def report(tmp: Path, results: list[NodeResult], kept: bool = True, **spec: object
           ) -> SimReport:
    return SimReport(SimSpec(**spec), tmp / "shared", results, 4.2, None,  # type: ignore[arg-type]
                     workspace=tmp, workspace_kept=kept)


def test_failures_show_cause_hint_and_log_grouped_root_cause_first(tmp_path):
    aborted = ("ascend-node: error: worker 0 (node 1) failed: device 2 has no usable RoCE IP\n"
               "  hint: fix the cause, then restart the whole job\n")
    own = ("12:00:01 [node 1 10.200.0.11] discovering\n"
           "ascend-node: error: device 2 has no usable RoCE IP\n  hint: set it with hccn_tool\n")
    results = [result(i, code, err, tmp_path / "node-0" / "state")
               for i, (code, err) in enumerate([(5, aborted), (1, own), (5, aborted)])]
    text = format_report(report(tmp_path, results, nodes=3), keep=None)
    assert text.splitlines()[4:11] == [
        "node 1: exit 1: device 2 has no usable RoCE IP",
        "  hint: set it with hccn_tool",
        f"  log: {tmp_path}/node-1/stderr.txt",
        "nodes 0, 2: exit 5: worker 0 (node 1) failed: device 2 has no usable RoCE IP",
        "  hint: fix the cause, then restart the whole job",
        f"  logs: {tmp_path}/node-{{0,2}}/stderr.txt",
        f"3 nodes x 8 NPUs: 0 ok, 3 failed, 0/3 nodes hold the table, 4.20 s wall; shared dir "
        f"{tmp_path}/shared",
    ]
    assert text.splitlines()[-1] == (
        f"workspace kept because a node failed (--no-keep removes it): {tmp_path} "
        "(node-N/stderr.txt: node N's log, node-N/state: its state dir)")
    assert [f.nodes for f in failures(report(tmp_path, results, nodes=3))] == [(1,), (0, 2)]


def test_an_absent_node_has_its_row_and_a_removed_workspace_names_no_log(tmp_path):
    results = [result(i, 4, TIMEOUT, tmp_path / "node-0" / "state") for i in (0, 1, 3)]
    rep = report(tmp_path, results, kept=False, nodes=4, devices=2, absent=frozenset({2}))
    lines = format_report(rep, keep=False).splitlines()
    assert lines[3].split() == ["2", "-", "10.200.0.12", "2", "-", "absent", "(never",
                                "started)"]
    assert lines[5:] == [
        "nodes 0, 1, 3: exit 4: timed out after 4 s waiting for peers: 1 of 4 missing: "
        "worker 1 (node 2)",
        "  hint: check that those pods are running",
        "4 nodes x 2 NPUs: 0 ok, 3 failed, 1 absent, 0/3 nodes hold the table, 4.20 s wall",
    ]
    doc = report_json(rep)
    assert doc["absent"] == [2] and doc["workspace_kept"] is False and doc["shared_dir"] is None
    assert doc["results"][2] == {"node": 2, "absent": True, "exit_code": None, "seconds": None,
                                 "cause": None, "hint": None, "message": None, "log": None}
    row = doc["results"][0]
    assert (row["exit_code"], row["log"]) == (4, None)
    assert row["cause"] == ("timed out after 4 s waiting for peers: 1 of 4 missing: "
                            "worker 1 (node 2)")
    assert row["hint"] == "check that those pods are running"


def test_json_carries_cause_hint_and_log_apart(tmp_path):
    results = [result(0, 0, state=tmp_path / "node-0" / "state", table=b"{}"),
               result(1, 4, TIMEOUT, tmp_path / "node-0" / "state")]
    doc = report_json(report(tmp_path, results, nodes=2))
    assert doc["results"][0]["cause"] is None and doc["results"][0]["hint"] is None
    assert doc["results"][1]["log"] == str(tmp_path / "node-1" / "stderr.txt")
    assert doc["results"][1]["hint"] == "check that those pods are running"
    json.dumps(doc)  # serializable as it is


def test_a_table_names_its_version_and_super_pods(tmp_path):
    table = {"version": "1.2", "server_count": "2", "server_list": [],
             "super_pod_list": [{"super_pod_id": "0"}, {"super_pod_id": "1"}]}
    results = [result(i, 0, state=tmp_path / "node-0" / "state", table=b"t") for i in (0, 1)]
    rep = SimReport(SimSpec(nodes=2, devices=16, a3=True), tmp_path / "shared", results, 1.0,
                    json.dumps(table), workspace=tmp_path, workspace_kept=False)
    assert format_report(rep).splitlines()[-1] == (
        "rank table v1.2 (A3, 2 super pods): --json prints it, --table-out FILE copies it")
    assert report_json(rep)["table_version"] == "1.2"


def test_the_summary_names_the_table_out_file_instead_of_advising_it(tmp_path):
    """Issue 36: with `--table-out FILE` the summary still said "--table-out FILE copies
    it"."""
    results = [result(i, 0, state=tmp_path / "node-0" / "state", table=b"t") for i in (0, 1)]
    rep = SimReport(SimSpec(nodes=2, devices=1), tmp_path / "gone", results, 1.0,
                    '{"version": "1.0"}', workspace=tmp_path, workspace_kept=False)
    out = tmp_path / "t.json"
    assert format_report(rep, True, out).splitlines()[-1] == (
        f"rank table v1.0: copied to {out}; --json prints it")
    assert "--table-out" not in format_report(rep, True, out)
    shared = tmp_path / "shared"
    shared.mkdir()
    kept = SimReport(SimSpec(nodes=2, devices=1), shared, results, 1.0, '{"version": "1.0"}',
                     workspace=tmp_path, workspace_kept=True)
    assert (f"rank table v1.0: {shared / 'ranktable-sim.json'} (copied to {out}; --json "
            "prints it)") in format_report(kept, True, out).splitlines()


# ------------------------------------------------------------------ a closed stdout


def test_a_closed_stdout_ends_any_command_quietly_as_cat_does():
    """`ascend-node manifest --json | head -0`: the reader is gone before the first write.
    The command ends with 141 (128 + SIGPIPE, what a shell reports for `cat`), nothing
    on stderr, no traceback."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        done = subprocess.run([sys.executable, "-m", "ascend_node", "manifest", "--json"],
                              stdout=write_end, stderr=subprocess.PIPE, text=True, timeout=60)
    finally:
        os.close(write_end)
    assert (done.returncode, done.stderr) == (141, "")
