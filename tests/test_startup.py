"""Start-up: the hot commands import only what they use; `--version` works (issue 13).

Timing itself is measured by bench/bench_startup.py (it varies with the machine's load);
what a test can hold without flaking is the cause of slow starts: which modules a command
imports. Each case runs the real `python -m ascend_node` with `-X importtime` and reads the
list of modules it imported.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from ascend_node import __version__

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"

# None of these is needed to print help, a version, a probe's answer or a lint result.
HEAVY = ("pydantic", "pydantic_core", "rich", "psutil", "logging", "typer.rich_utils",
         "ascend_node.settings", "ascend_node.handoff.outputs", "ascend_node.rendezvous",
         "ascend_node.chain.table", "ascend_node.discover.devices")


def imported(args: list[str], env: dict[str, str]
             ) -> tuple[set[str], subprocess.CompletedProcess[str]]:
    done = subprocess.run([sys.executable, "-X", "importtime", "-m", "ascend_node", *args],
                          capture_output=True, text=True, timeout=60, env=env)
    modules = set()
    for line in done.stderr.splitlines():
        if line.startswith("import time:") and "|" in line:
            name = line.rsplit("|", 1)[1].strip()
            if name != "imported package":
                modules.add(name)
    return modules, done


@pytest.fixture
def state(tmp_path: Path) -> Path:
    """A finished bootstrap's state dir, with events."""
    state = tmp_path / "state"
    state.mkdir()
    (state / "status.json").write_text(json.dumps({
        "schema_version": 1, "state": "done", "phase": "ranktable", "command": "ranktable",
        "exit_code": 0, "message": "rank table ready", "pid": 1, "updated_at": 1.0}))
    (state / "events.jsonl").write_text(json.dumps({
        "run": "r", "phase": "discovery", "start": 1.0, "end": 2.0, "outcome": "ok"}) + "\n")
    return state


@pytest.mark.parametrize("args", [
    ["--help"], ["--version"], ["version"], ["status"], ["status", "--json"],
    ["validate", "TABLE"], ["validate", "--help"],
])
def test_hot_commands_import_only_what_they_use(tmp_path, state, args):
    table = tmp_path / "rt.json"
    shutil.copy(FIXTURES / "ranktables" / "ranktable-2x8.json", table)
    table.chmod(0o640)
    args = [str(table) if a == "TABLE" else a for a in args]
    env = {**os.environ, "ASCEND_NODE_STATE_DIR": str(state)}
    modules, done = imported(args, env)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "ascend_node.cli" in modules  # the measurement itself works
    heavy = sorted(m for m in modules
                   if any(m == h or m.startswith(h + ".") for h in HEAVY))
    assert heavy == [], f"`ascend-node {' '.join(args)}` imports {heavy}"


def test_an_in_progress_status_still_checks_the_process(tmp_path):
    """psutil is skipped for a finished bootstrap only; a live one still needs it."""
    (tmp_path / "status.json").write_text(json.dumps({
        "schema_version": 1, "state": "in_progress", "phase": "rendezvous",
        "command": "boot", "pid": os.getpid()}))
    modules, done = imported(["status", "--state-dir", str(tmp_path)], dict(os.environ))
    assert done.returncode == 3, done.stderr
    assert "psutil" in modules and "in_progress" in done.stdout


@pytest.mark.parametrize("args", [["--version"], ["version"]])
def test_version_as_flag_and_as_command(args):
    done = subprocess.run([sys.executable, "-m", "ascend_node", *args],
                          capture_output=True, text=True, timeout=60)
    assert (done.returncode, done.stdout, done.stderr) == (0, f"{__version__}\n", "")


def test_help_lists_the_version_flag_and_every_command_in_plain_text():
    done = subprocess.run([sys.executable, "-m", "ascend_node", "--help"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0
    assert "--version" in done.stdout
    for command in ("discover", "ranktable", "boot", "validate", "status", "simulate", "report",
                    "manifest", "version"):
        assert f"  {command} " in done.stdout
    assert "\x1b[" not in done.stdout and "╭" not in done.stdout  # no rich boxes or colours


# Not needed by a pod on the shared volume with the pre-flight off: MindCluster's wait and
# conversion, the pre-flight's gathering, judging and pings, the doctor, the report.
NOT_ON_THE_VOLUME_PATH = ("ascend_node.sources.mindcluster_file", "ascend_node.sources.mindcluster",
                          "ascend_node.preflight.gather", "ascend_node.preflight.judge",
                          "ascend_node.preflight.reach", "ascend_node.preflight.stage",
                          "ascend_node.doctor",
                          # The pod writes its timeline summary; reading and drawing
                          # them (pydantic schema, renderers) is the operator's.
                          "ascend_node.report.summary", "ascend_node.report.collect",
                          "ascend_node.report.timeline", "ascend_node.report.text",
                          "ascend_node.report.html", "ascend_node.report.cli")


@pytest.mark.parametrize("preflight, expect_gather", [("off", False), ("strict", True)])
def test_ranktable_imports_the_preflight_only_when_it_runs(tmp_path, preflight, expect_gather):
    """A one-node `ranktable` imports what its table source and pre-flight policy use."""
    from ascend_node.sim.cluster import SimSpec, prepare
    from ascend_node.sim.fake_tools import write_node_data

    shared = tmp_path / "shared"
    shared.mkdir()
    node = prepare(SimSpec(nodes=1, devices=2, run_id="imp", timeout=20), tmp_path / "w",
                   shared)[0]
    write_node_data(node.data_dir, node.devices)
    modules, done = imported(["ranktable"], {**node.env, "ASCEND_NODE_PREFLIGHT": preflight})
    assert done.returncode == 0, done.stderr[-2000:]
    assert "ascend_node.rendezvous.assembler" in modules  # it did meet (alone)
    assert ("ascend_node.preflight.gather" in modules) is expect_gather
    unexpected = sorted(m for m in modules if any(m == h or m.startswith(h + ".")
                                                  for h in NOT_ON_THE_VOLUME_PATH))
    allowed = {"ascend_node.preflight.gather", "ascend_node.preflight.judge"} if expect_gather \
        else set()
    assert [m for m in unexpected if m not in allowed] == []
