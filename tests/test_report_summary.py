"""The node summary: written after the outcome, on the volume's clock, bounded; read
back validated, with everything hostile or foreign left out and named."""

from __future__ import annotations

import json
import os
import time

import pytest

from ascend_node import events
from ascend_node.discover.identity import NodeIdentity
from ascend_node.rendezvous import store
from ascend_node.report import record
from ascend_node.report.collect import collect
from ascend_node.report.record import MAX_PHASES, spans_from_events
from tests.report_cases import ATTEMPT, RUN, node


@pytest.fixture(autouse=True)
def fresh_offset(monkeypatch):
    monkeypatch.setattr(record, "_offset", None)  # measured once per process


def identity(index: int = 0, nodes: int = 2) -> NodeIdentity:
    role = "master" if index == 0 else "worker"
    return NodeIdentity(role=role, task_index=index if index == 0 else index - 1,
                        master_count=1, worker_count=nodes - 1, pod_ip=f"10.0.0.{index}",
                        host_ip="10.1.0.1", incarnation=f"pod-{index}")


def test_spans_are_shifted_to_the_volume_clock_and_bounded():
    evs = [{"run": "r", "phase": "run", "start": 100.0, "end": 100.0},
           {"run": "r", "phase": "discovery", "start": 100.0, "end": 101.5},
           {"run": "r", "phase": "discovery.hccn_tool", "start": 100.1, "end": 101.0,
            "device": 3},
           {"run": "r", "phase": "Bad Name", "start": 100.0, "end": 101.0},
           {"run": "r", "phase": "outputs", "start": 102.0, "end": 101.0},  # ends first
           {"run": "r", "phase": "install", "start": "soon", "end": 103.0}]
    spans = spans_from_events(evs, offset=-40.0)
    assert [(s["name"], s["start"], s["end"], s["device"]) for s in spans] == [
        ("discovery", 60.0, 61.5, None), ("discovery.hccn_tool", 60.1, 61.0, 3)]
    many = [{"phase": "discovery.hccn_tool", "start": 1.0 + i, "end": 2.0 + i}
            for i in range(MAX_PHASES * 2)]
    assert len(spans_from_events(many, 0.0)) == MAX_PHASES


def test_a_node_leaves_a_valid_summary_on_the_volume_clock(tmp_path, monkeypatch):
    shared = tmp_path / "shared"
    shared.mkdir()
    # A volume whose clock runs 100 s ahead of this node's.
    monkeypatch.setattr(store, "volume_clock_ns", lambda d: time.time_ns() + 100 * 10**9)
    rec = events.Recorder.open(tmp_path / "state", "ranktable")
    previous = events.activate(rec)
    try:
        now = time.time()
        events.record("discovery", now - 2.0, now - 1.0)
        events.record("rendezvous", now - 1.0, now, "ok", attempt="a-1")
        where = record.leave_summary(shared, "r1", identity(0), "ranktable", "table", "a-1")
    finally:
        events.activate(previous).close()
    assert where == shared / ".ascend-node" / "r1" / "timeline" / "a-1" / "node-0.json"
    assert where.stat().st_size < 4096 and (where.stat().st_mode & 0o777) == 0o644
    got = collect(shared, "r1", "a-1")
    assert got.ignored == () and len(got.summaries) == 1
    doc = got.summaries[0]
    assert doc.state == "table" and doc.exit_code is None and doc.name == "master 0 (node 0)"
    assert 99.9 < doc.clock.offset < 100.1 and doc.clock.source == "probe"
    discovery = next(p for p in doc.phases if p.name == "discovery")
    assert abs(discovery.start - (now - 2.0 + doc.clock.offset)) < 1e-3
    assert abs(doc.written - (time.time() + 100)) < 5
    # Its own cost is recorded, as every phase is.
    assert [e["outcome"] for e in rec.kept if e["phase"] == "summary"] == ["ok"]


def test_a_failure_is_summarised_with_its_exit_code_and_the_current_attempt(tmp_path):
    from ascend_node.errors import PeerTimeout
    from ascend_node.rendezvous.models import AttemptDoc

    shared = tmp_path
    paths = store.RunPaths(shared, "r1")
    store.write_doc(paths.attempt_file, AttemptDoc(run_id="r1", attempt_id="a-7",
                                                   opened_by="pod-0", node_count=2,
                                                   master_count=1), shared)
    exc = PeerTimeout("timed out after 5 s waiting for peers: 1 of 2 missing: worker 0 "
                      "(node 1)", "hint")
    where = record.leave_summary(shared, "r1", identity(0), "boot", "failed", exc=exc)
    assert where is not None and where.parent.name == "a-7"
    doc = collect(shared, "r1").summaries[0]
    assert (doc.state, doc.exit_code, doc.command) == ("failed", 4, "boot")
    assert doc.cause.startswith("timed out after 5 s")


def test_a_summary_that_cannot_be_written_changes_nothing(tmp_path):
    (tmp_path / ".ascend-node" / "r1").mkdir(parents=True)
    (tmp_path / ".ascend-node" / "r1" / "timeline").write_text("in the way")
    rec = events.Recorder.open(tmp_path / "state", "ranktable")
    previous = events.activate(rec)
    try:
        assert record.leave_summary(tmp_path, "r1", identity(1), "ranktable", "table",
                                    "a-1") is None
    finally:
        events.activate(previous).close()
    assert [e["outcome"] for e in rec.kept if e["phase"] == "summary"] == ["failed"]
    assert record.leave_summary(None, "r1", identity(1), "ranktable", "table") is None


def put(directory, name: str, data: bytes) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / name).write_bytes(data)


def test_hostile_and_foreign_summaries_are_left_out_and_named(tmp_path):
    directory = tmp_path / ".ascend-node" / RUN / "timeline" / ATTEMPT
    good = node(0, count=16).model_dump_json().encode()
    put(directory, "node-0.json", good)
    (tmp_path / "elsewhere.json").write_bytes(good)
    os.symlink(tmp_path / "elsewhere.json", directory / "node-1.json")
    put(directory, "node-2.json", b" " * (70 * 1024))
    other_schema = json.loads(node(3, count=16).model_dump_json())
    other_schema["schema_version"] = 2
    put(directory, "node-3.json", json.dumps(other_schema).encode())
    put(directory, "node-4.json", node(4, count=16).model_copy(update={"run_id": "other"})
        .model_dump_json().encode())
    put(directory, "node-5.json", node(6, count=16).model_dump_json().encode())
    put(directory, "node-7.json", good[:100])
    backwards = json.loads(node(8, count=16).model_dump_json())
    backwards["phases"][0]["end"] = backwards["phases"][0]["start"] - 5
    put(directory, "node-8.json", json.dumps(backwards).encode())
    extra = json.loads(node(10, count=16).model_dump_json())
    extra["script"] = "<img src=x onerror=alert(1)>"
    put(directory, "node-10.json", json.dumps(extra).encode())
    os.mkfifo(directory / "node-11.json")
    put(directory, "notes.txt", b"hello")
    put(directory, ".node-0.json.tmp-1-abcd", b"{")  # a writer's temp file: not ours
    got = collect(tmp_path, RUN, ATTEMPT)
    assert [s.global_index for s in got.summaries] == [0]
    reasons = {os.path.basename(i.path): i.reason for i in got.ignored}
    expected = {
        "node-1.json": "symbolic link",
        "node-2.json": "over the 65536 byte limit",
        "node-3.json": "schema_version 2",
        "node-4.json": "belongs to run 'other'",
        "node-5.json": "is node 6's summary under node 5's name",
        "node-7.json": "not valid JSON",
        "node-8.json": "ends before it starts",
        "node-10.json": "fails validation at script",
        "node-11.json": "not a regular file",
        "notes.txt": "not named node-<index>.json",
    }
    assert set(reasons) == set(expected)
    for name, words in expected.items():
        assert words in reasons[name], (name, reasons[name])


def test_a_process_start_is_just_before_its_first_line_on_its_own_clock():
    """Not /proc/stat's whole-second `btime` (psutil's way, up to 1 s off): the start
    precedes the interpreter's first line by its start-up only."""
    import subprocess
    import sys

    code = ("import time; first = time.time()\n"
            "import os; from ascend_node.report.record import proc_start\n"
            "start, ppid = proc_start(os.getpid()); print(first - start, ppid == os.getppid())")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout.split()
    assert -0.02 <= float(out[0]) < 5.0 and out[1] == "True"  # a clock tick is 10 ms
    assert record.proc_start(2**22 + 7) is None  # no such process


def fake_proc(root, table: dict[int, tuple[int, int]], uptime: float = 100_000.0) -> None:
    """/proc with `pid: (ppid, start ticks)` (100 ticks a second on this machine)."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "uptime").write_text(f"{uptime:.2f} 12345.67\n")
    for pid, (ppid, ticks) in table.items():
        (root / str(pid)).mkdir()
        rest = ["S", str(ppid)] + ["0"] * 17 + [str(ticks)] + ["0"] * 10
        (root / str(pid) / "stat").write_text(f"{pid} (a (weird) name) {' '.join(rest)}\n")


@pytest.mark.parametrize("table, pid, expect, taken", [
    # The agent is PID 1 (the image's ENTRYPOINT).
    ({1: (0, 5000)}, 1, "the agent is PID 1", True),
    # sh -c "... && ascend-node boot": PID 1 is the parent, started 30 s before.
    ({1: (0, 2000), 40: (1, 5000)}, 40, "PID 1's start", True),
    # tini -> sh -> agent.
    ({1: (0, 2000), 7: (1, 2100), 40: (7, 5000)}, 40, "PID 1's start", True),
    # A host or a simulation: PID 1 far up the tree.
    ({1: (0, 100), 5: (1, 200), 6: (5, 300), 40: (6, 5000)}, 40, "is not the agent", False),
    # PID 1 two hours older than the agent: a long-lived container, not this start.
    ({1: (0, 100), 40: (1, 100 + 7200 * 100)}, 40, "before the agent", False),
])
def test_the_container_start_is_taken_from_pid_1_only_when_it_is_this_start(
        tmp_path, table, pid, expect, taken):
    if os.sysconf("SC_CLK_TCK") != 100:
        pytest.skip("the fake /proc is written in 100 ticks a second")
    fake_proc(tmp_path, table)
    now = 2_000_000.0  # the wall clock when uptime was 100000 s
    start, why, own = record.container_start(pid, tmp_path, now)
    assert expect in why
    assert own == pytest.approx(now - 100_000 + table[pid][1] / 100)
    assert start == (pytest.approx(now - 100_000 + table[1][1] / 100) if taken else None)


class Odd(Exception):
    exit_code = 300  # not a process exit code
    cause = "x" * 5000


@pytest.mark.parametrize("exc", [None, Odd(), ValueError("boom " * 400), KeyboardInterrupt()])
def test_whatever_a_node_meets_its_summary_validates(tmp_path, exc):
    """The writer builds plain JSON; the reader's model must accept every document it
    can build (long names and causes cut, odd exit codes mapped, odd events dropped)."""
    from ascend_node.report.summary import NodeSummary

    ident = NodeIdentity(role="worker", task_index=7, master_count=1, worker_count=9,
                         pod_ip="fe80::1%" + "eth0" * 40, host_ip="h", incarnation="p")
    evs = [{"phase": "discovery", "start": 10.0, "end": 11.0, "device": True},
           {"phase": "discovery.hccn_tool", "start": 10.0, "end": 10.5, "device": 99},
           {"phase": "x" * 40, "start": 10.0, "end": 10.5},
           {"phase": "config", "start": 12.0, "end": 12.0, "outcome": "o" * 100}]
    doc = record.build_summary(store.RunPaths(tmp_path, "r1"), ident, "boot",
                               "failed" if exc else "exec", "a-1", (5.0, 0.001, "probe"),
                               exc, evs)
    got = NodeSummary.model_validate_json(json.dumps(doc))
    assert [p.name for p in got.phases] == ["discovery", "discovery.hccn_tool", "config"]
    assert all(p.device is None for p in got.phases) and got.phases[0].start == 15.0
    if exc is not None:
        assert got.exit_code == 1 and 0 < len(got.cause) <= 300
