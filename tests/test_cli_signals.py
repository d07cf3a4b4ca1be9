"""Issue 27: `simulate` stopped by a signal leaves nothing behind (a real `simulate`, real
node processes): SIGTERM (`timeout 10 ascend-node simulate ...` in a CI script) stops
every node process, removes the workspace, says so and exits 143; SIGINT exits 130."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

AGENT = [sys.executable, "-m", "ascend_node"]


def _as_in_a_terminal() -> None:
    """The child's SIGINT at its default, as a program started from a terminal has it. A
    runner that started these tests in the background of a non-interactive shell (`cmd &`)
    passes SIGINT on ignored, and Python then installs no Ctrl-C handler: the agent keeps
    an ignore it inherited, as `nohup` intends, and no SIGINT reaches it."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _started(proc: subprocess.Popen[str], nodes: int) -> tuple[Path, list[psutil.Process]]:
    """The workspace from the first stderr line, once every node process runs."""
    assert proc.stderr is not None
    first = proc.stderr.readline()
    found = re.search(r" in (/\S+)$", first.strip())
    assert found, first
    work = Path(found.group(1))
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        kids = psutil.Process(proc.pid).children(recursive=True)
        if len(kids) >= nodes and all((work / f"node-{i}" / "stderr.txt").exists()
                                      for i in (0, 2)):
            time.sleep(1.0)  # well into their wait for the absent node
            return work, psutil.Process(proc.pid).children(recursive=True)
        time.sleep(0.1)
    raise AssertionError("the node processes never started")


@pytest.mark.parametrize(("signum", "code"), [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_a_signal_stops_every_node_and_removes_the_workspace(signum: int, code: int) -> None:
    env = {k: v for k, v in os.environ.items() if k != "ASCEND_NODE_DEBUG"}
    proc = subprocess.Popen([*AGENT, "simulate", "--nodes", "3", "--devices", "1",
                             "--absent", "1", "--timeout", "90"], env=env, text=True,
                            preexec_fn=_as_in_a_terminal,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        work, kids = _started(proc, 2)
        assert work.is_dir()
        proc.send_signal(signum)
        _out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == code, err
    _gone, alive = psutil.wait_procs(kids, timeout=30)
    assert alive == [], f"node processes left running: {alive}"
    assert not work.exists(), f"workspace left behind: {work}"
    assert "Traceback" not in err
    said = {signal.SIGTERM: "terminated by signal 15 (SIGTERM)",
            signal.SIGINT: "interrupted by signal 2 (SIGINT)"}[signum]
    assert f"ascend-node: error: simulate {said}: every node stopped, workspace removed" \
        in err, err


@pytest.mark.parametrize(("signum", "code"), [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_a_signal_to_a_waiting_node_is_recorded_in_status_json(tmp_path: Path, signum: int,
                                                               code: int) -> None:
    import json

    from ascend_node.sim.fake_tools import write_node_data
    from tests.cluster_helpers import make_nodes

    node = make_nodes(tmp_path, 2, devices=1, timeout=90)[1]
    write_node_data(node.data_dir, node.devices)
    status = node.state_dir / "status.json"
    proc = subprocess.Popen(node.argv, env=node.env, stderr=subprocess.PIPE,
                            preexec_fn=_as_in_a_terminal,
                            stdout=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not status.exists():
            time.sleep(0.1)
        assert json.loads(status.read_text())["state"] == "in_progress"
        time.sleep(0.5)
        proc.send_signal(signum)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == code, err
    doc = json.loads(status.read_text())
    assert (doc["state"], doc["exit_code"]) == ("failed", code), doc
    got = subprocess.run([*AGENT, "status", "--state-dir", str(node.state_dir)], text=True,
                         capture_output=True, timeout=60)
    assert got.returncode == 1 and f"exited {code}" in got.stdout, got


def test_an_agent_started_with_sigint_ignored_keeps_waiting_and_sigterm_still_stops_it(
        tmp_path: Path) -> None:
    """`nohup ascend-node ...` (or `cmd &` in a script): the inherited ignore of SIGINT is
    kept, the node goes on waiting; SIGTERM, which nohup leaves alone, still ends it (143)."""
    import json

    from ascend_node.sim.fake_tools import write_node_data
    from tests.cluster_helpers import make_nodes

    node = make_nodes(tmp_path, 2, devices=1, timeout=90)[1]
    write_node_data(node.data_dir, node.devices)
    status = node.state_dir / "status.json"
    proc = subprocess.Popen(node.argv, env=node.env, stderr=subprocess.PIPE,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN),
                            stdout=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not status.exists():
            time.sleep(0.1)
        proc.send_signal(signal.SIGINT)
        with pytest.raises(subprocess.TimeoutExpired):
            proc.wait(timeout=2)
        assert json.loads(status.read_text())["state"] == "in_progress"
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 143, err
