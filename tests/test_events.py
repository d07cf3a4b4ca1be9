"""events.jsonl: the recorder of where the time goes, and its readers (issue 13, part 3)."""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path

import pytest

from ascend_node import events
from ascend_node.errors import PeerTimeout
from ascend_node.events import (
    EVENTS_JSONL,
    MAX_BYTES,
    Recorder,
    format_summary,
    last_run,
    parse_events,
    read_events,
    summarize,
    top_level_seconds,
)


def lines(state: Path) -> list[dict]:
    return [json.loads(ln) for ln in (state / EVENTS_JSONL).read_text().splitlines()]


def test_a_run_records_its_start_its_startup_and_each_phase_with_detail(tmp_path):
    started = time.time() - 0.25
    rec = Recorder.open(tmp_path, "ranktable", started=started, run_id="job-1")
    with rec.phase("discovery", devices=8) as detail:
        detail["node"] = "master 0 (node 0)"
    with rec.phase("discovery.hccn_tool", device=3) as detail:
        detail["outcome"] = "no ip"
    rec.close()
    got = lines(tmp_path)
    assert [e["phase"] for e in got] == ["run", "startup", "discovery", "discovery.hccn_tool"]
    assert {e["run"] for e in got} == {rec.run}
    first = got[0]
    assert first["outcome"] == "start" and first["command"] == "ranktable"
    assert first["pid"] == os.getpid() and first["run_id"] == "job-1"
    assert got[1]["start"] == pytest.approx(started, abs=1e-3)
    assert got[1]["end"] - got[1]["start"] >= 0.25
    assert got[2]["outcome"] == "ok" and got[2]["devices"] == 8
    assert got[2]["node"] == "master 0 (node 0)"
    assert got[3]["outcome"] == "no ip" and got[3]["device"] == 3
    for event in got:
        assert list(event)[:5] == ["run", "phase", "start", "end", "outcome"]
        assert event["end"] >= event["start"]


def test_detail_never_overrides_the_core_keys(tmp_path):
    rec = Recorder.open(tmp_path, "x")
    rec.record("p", 1.0, 2.0, "ok", run="forged")
    assert lines(tmp_path)[-1] == {"run": rec.run, "phase": "p", "start": 1.0, "end": 2.0,
                                   "outcome": "ok"}


def test_a_failing_phase_records_exit_code_and_cause_and_still_raises(tmp_path):
    rec = Recorder.open(tmp_path, "ranktable")
    with pytest.raises(PeerTimeout), rec.phase("rendezvous", nodes=4):
        raise PeerTimeout("timed out after 900 s waiting for worker 2 (node 3)", "retry")
    with pytest.raises(KeyError), rec.phase("outputs"):
        raise KeyError("x")
    failed = lines(tmp_path)[-2:]
    assert failed[0]["outcome"] == "failed" and failed[0]["exit_code"] == 4
    assert failed[0]["cause"].startswith("timed out after 900 s") and failed[0]["nodes"] == 4
    assert failed[1]["outcome"] == "failed" and failed[1]["error"] == "KeyError: 'x'"


@pytest.mark.parametrize("where", ["missing dir", "a directory in the way", "full disk"])
def test_a_recorder_that_cannot_write_never_breaks_the_bootstrap(tmp_path, where):
    if where == "missing dir":
        rec = Recorder.open(tmp_path / "no" / "such", "boot")
    elif where == "a directory in the way":
        (tmp_path / EVENTS_JSONL).mkdir()
        rec = Recorder.open(tmp_path, "boot")
    else:
        if not Path("/dev/full").exists():
            pytest.skip("/dev/full is missing")
        rec = Recorder(Path("/dev/full"), "r")
        assert rec.enabled  # opening works; the write fails with ENOSPC
    with rec.phase("discovery"):
        pass
    rec.record("exec", 1.0, 1.0, "exec")
    assert not rec.enabled


def test_concurrent_threads_write_whole_lines(tmp_path):
    rec = Recorder.open(tmp_path, "discover")

    def work(device: int) -> None:
        for i in range(200):
            with rec.phase("discovery.hccn_tool", device=device, i=i, pad="x" * 300):
                pass

    threads = [threading.Thread(target=work, args=(d,)) for d in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    got = lines(tmp_path)  # every line parses
    assert len(got) == 1 + 8 * 200
    assert sorted((e["device"], e["i"]) for e in got[1:]) == [
        (d, i) for d in range(8) for i in range(200)]


def test_the_file_stays_small_and_keeps_whole_newest_lines(tmp_path):
    path = tmp_path / EVENTS_JSONL
    old = [json.dumps({"run": "old", "phase": "p", "start": i, "end": i, "outcome": "ok",
                       "pad": "y" * 200}) for i in range(3000)]
    path.write_text("\n".join(old) + "\n")
    assert path.stat().st_size > MAX_BYTES
    rec = Recorder.open(tmp_path, "boot")
    rec.close()
    assert path.stat().st_size <= MAX_BYTES // 2 + 1000
    got = lines(tmp_path)  # the cut fell on a line boundary
    kept = [e["start"] for e in got if e["run"] == "old"]
    assert kept == list(range(3000 - len(kept), 3000))  # the newest, in order
    assert got[-1]["run"] == rec.run


def test_a_container_restart_appends_a_new_run_and_readers_take_the_newest(tmp_path):
    first = Recorder.open(tmp_path, "boot")
    with first.phase("discovery"):
        pass
    first.close()
    time.sleep(0.01)
    second = Recorder.open(tmp_path, "boot")
    with second.phase("discovery"):
        pass
    with second.phase("rendezvous"):
        pass
    second.close()
    assert first.run != second.run
    all_events = read_events(tmp_path)
    assert len({e["run"] for e in all_events}) == 2
    newest = last_run(all_events)
    assert {e["run"] for e in newest} == {second.run}
    assert [e["phase"] for e in newest] == ["run", "discovery", "rendezvous"]


def test_torn_and_foreign_lines_are_skipped():
    good = {"run": "r", "phase": "p", "start": 1, "end": 2, "outcome": "ok"}
    text = [json.dumps(good), '{"run": "r", "phase": "p", "sta', "[]", "null",
            json.dumps({**good, "start": "1"}), json.dumps({**good, "run": 5}), ""]
    assert parse_events(text) == [good]
    assert read_events(Path("/nonexistent")) == []


def test_summary_spans_concurrent_calls_and_keeps_the_first_bad_outcome():
    evs = [
        {"run": "r", "phase": "run", "start": 0.0, "end": 0.0, "outcome": "start"},
        {"run": "r", "phase": "discovery", "start": 1.0, "end": 1.5, "outcome": "ok"},
        {"run": "r", "phase": "discovery.hccn_tool", "start": 1.1, "end": 1.3,
         "outcome": "ok"},
        {"run": "r", "phase": "discovery.hccn_tool", "start": 1.0, "end": 1.4,
         "outcome": "no ip"},
        {"run": "r", "phase": "discovery.hccn_tool", "start": 1.2, "end": 1.25,
         "outcome": "failed"},
        {"run": "r", "phase": "rendezvous", "start": 1.5, "end": 3.5, "outcome": "failed"},
    ]
    rows = {r["phase"]: r for r in summarize(evs)}
    assert list(rows) == ["discovery", "discovery.hccn_tool", "rendezvous"]
    tool = rows["discovery.hccn_tool"]
    assert (tool["seconds"], tool["count"], tool["outcome"]) == (0.4, 3, "no ip")
    assert top_level_seconds(evs) == {"discovery": 0.5, "rendezvous": 2.0}
    text = format_summary(evs)
    assert text[0].split() == ["discovery", "0.500", "s", "ok"]
    assert text[1].startswith("    hccn_tool") and text[1].endswith("(3 calls)")
    assert text[-1].split() == ["total", "2.500", "s"]
    assert format_summary([]) == []


def test_module_level_calls_are_no_ops_until_a_recorder_is_active(tmp_path):
    events.deactivate()
    with events.phase("discovery") as detail:
        detail["x"] = 1
    events.record("exec", 1.0, 1.0)
    assert not (tmp_path / EVENTS_JSONL).exists()
    rec = Recorder.open(tmp_path, "boot")
    previous = events.activate(rec)
    try:
        with events.phase("rendezvous.wait", waiting_for=3):
            pass
        assert events.current() is rec
    finally:
        events.deactivate()
        events.activate(previous)
    assert lines(tmp_path)[-1]["phase"] == "rendezvous.wait"
    assert lines(tmp_path)[-1]["waiting_for"] == 3
