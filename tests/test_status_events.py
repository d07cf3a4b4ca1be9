"""`status` shows where a start's time went; status.json is read without the settings model.

Issue 13: an operator sees at once why a start took 90 s (`status`, `status --json`), and
the probe path stays light (statedir.py instead of pydantic).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from ascend_node.cli import app
from ascend_node.errors import ConfigError
from ascend_node.settings import resolve_settings
from ascend_node.statedir import (
    DEFAULT_STATE_DIR,
    StatusDoc,
    parse_status,
    read_status,
    resolve_state_dir,
    write_status,
)
from tests.cli_helpers import cli_runner
from tests.cluster_helpers import codes, explain, make_nodes, run

runner = cli_runner()


def invoke(*args: str, env: dict[str, str] | None = None):
    return runner.invoke(app, list(args), env=env or {}, catch_exceptions=False)


# ------------------------------------------------------------------ state dir


@pytest.mark.parametrize(("flag", "environ"), [
    (None, {}),
    (None, {"ASCEND_NODE_STATE_DIR": "/tmp/s1"}),
    (None, {"ASCEND_NODE_STATE_DIR": "  /tmp/s2  "}),
    (None, {"ASCEND_NODE_STATE_DIR": "   "}),  # blank = unset
    (Path("/tmp/flag"), {"ASCEND_NODE_STATE_DIR": "/tmp/env"}),  # the flag wins
])
def test_the_light_state_dir_agrees_with_the_settings_model(flag, environ):
    expected = resolve_settings({"state_dir": flag}, environ).state_dir
    assert resolve_state_dir(flag, environ) == expected
    if flag is None and not environ.get("ASCEND_NODE_STATE_DIR", "").strip():
        assert expected == DEFAULT_STATE_DIR


# ------------------------------------------------------------------ status.json


def test_status_round_trips(tmp_path):
    doc = StatusDoc(state="failed", phase="rendezvous", command="boot", exit_code=4,
                    message="timed out", run_id="r", node="worker 1 (node 2)", pid=7)
    write_status(tmp_path, doc)
    assert read_status(tmp_path) == doc
    assert json.loads((tmp_path / "status.json").read_text())["schema_version"] == 1


GOOD = {"schema_version": 1, "state": "done", "phase": "exec", "command": "boot", "pid": 3,
        "updated_at": 1.5}


@pytest.mark.parametrize(("raw", "why"), [
    (b"{", "not JSON"),
    (b"[]", "not a JSON object"),
    (json.dumps({**GOOD, "schema_version": 2}).encode(), "schema_version 2 is not 1"),
    (json.dumps({k: v for k, v in GOOD.items() if k != "phase"}).encode(),
     "field 'phase' is missing"),
    (json.dumps({**GOOD, "state": "sleeping"}).encode(), "state 'sleeping' is not one of"),
    (json.dumps({**GOOD, "pid": "3"}).encode(), "field 'pid' has the wrong type"),
    (json.dumps({**GOOD, "exit_code": True}).encode(), "field 'exit_code' has the wrong type"),
    (json.dumps({**GOOD, "color": "red"}).encode(), "unknown field 'color'"),
])
def test_a_bad_status_file_is_named_not_trusted(tmp_path, raw, why):
    with pytest.raises(ValueError, match=re.escape(why)):
        parse_status(raw)
    (tmp_path / "status.json").write_bytes(raw)
    with pytest.raises(ConfigError, match=r"is not a valid status\.json"):
        read_status(tmp_path)
    result = invoke("status", "--state-dir", str(tmp_path))
    assert result.exit_code == 1
    assert f"{tmp_path / 'status.json'} is not a valid status.json" in result.stderr
    assert "Traceback" not in result.stderr


def test_status_with_a_damaged_events_file_still_answers(tmp_path):
    write_status(tmp_path, StatusDoc(state="done", phase="ranktable", command="ranktable"))
    (tmp_path / "events.jsonl").write_bytes(b'{"run": "r", "pha\n\xff\xfe garbage\n')
    result = invoke("status", "--state-dir", str(tmp_path), "--json")
    assert result.exit_code == 0
    doc = json.loads(result.stdout)
    assert doc["events"] == [] and doc["phases"] == []


# ------------------------------------------------------------------ real runs


@pytest.mark.multiprocess
def test_status_shows_the_phases_of_the_newest_run_after_a_restart(tmp_path):
    nodes = make_nodes(tmp_path, 2, devices=3)
    first = run(nodes)
    assert codes(first) == [0, 0], explain(first)
    again = run([nodes[1]])  # a container restart of node 1: same table, a new run
    assert codes(again) == [0], explain(again)
    state = str(nodes[1].state_dir)

    text = invoke("status", "--state-dir", state)
    assert text.exit_code == 0, text.stdout
    out = text.stdout.splitlines()
    assert out[0].startswith("done: rank table ready")
    names = [ln.split()[0] for ln in out[1:]]
    # `summary`: this node's timeline summary on the shared volume (`ascend-node report`).
    assert names == ["startup", "discovery", "hccn_tool", "rendezvous", "summary", "outputs",
                     "total"]
    assert out[3].startswith("    hccn_tool") and out[3].endswith("(3 calls)")  # indented

    doc = json.loads(invoke("status", "--state-dir", state, "--json").stdout)
    runs = {e["run"] for e in doc["events"]}
    assert len(runs) == 1  # only the newest run
    all_runs = {json.loads(ln)["run"]
                for ln in (nodes[1].state_dir / "events.jsonl").read_text().splitlines()}
    assert len(all_runs) == 2 and runs < all_runs
    by_phase = {p["phase"]: p for p in doc["phases"]}
    assert by_phase["discovery.hccn_tool"]["count"] == 3
    assert by_phase["rendezvous"]["outcome"] == "ok"
    tools = [e for e in doc["events"] if e["phase"] == "discovery.hccn_tool"]
    assert sorted(e["device"] for e in tools) == [0, 1, 2]
    start = next(e for e in doc["events"] if e["phase"] == "run")
    assert start["command"] == "ranktable" and start["run_id"] == "t"
    rdzv = next(e for e in doc["events"] if e["phase"] == "rendezvous")
    assert rdzv["node"] == "worker 0 (node 1)" and rdzv["attempt"]


@pytest.mark.multiprocess
def test_a_timed_out_start_says_so_in_its_events(tmp_path):
    # 5 s: the rendezvous phase still lasts seconds after a discovery slowed by a loaded
    # machine (the timeout counts from the agent's start)
    nodes = make_nodes(tmp_path, 2, devices=1, timeout=5)
    results = run([nodes[1]])  # node 0 never comes
    assert codes(results) == [4], explain(results)
    doc = json.loads(invoke("status", "--state-dir", str(nodes[1].state_dir),
                            "--json").stdout)
    rdzv = next(e for e in doc["events"] if e["phase"] == "rendezvous")
    assert rdzv["outcome"] == "failed" and rdzv["exit_code"] == 4
    assert "master 0 (node 0)" in rdzv["cause"]
    assert rdzv["end"] - rdzv["start"] >= 1.0
