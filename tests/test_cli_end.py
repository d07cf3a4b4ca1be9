"""Issue 30: a pod's command ends without the interpreter's teardown (`cli.app.end_now`),
and nothing a caller relies on changes: the exit code, every byte written to stdout and
stderr, the exit handlers (logging's flush), and a thread the interpreter would wait for.
Real processes."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

AGENT = [sys.executable, "-m", "ascend_node"]


def _python(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], text=True,
                          capture_output=True, timeout=120)


PRELUDE = """
import atexit, sys, threading, time
from ascend_node.cli.app import end_now
atexit.register(lambda: print("exit handler ran", flush=True))
sys.stdout.write("buffered result")  # no newline, not flushed
sys.stderr.write("a log line")
"""


@pytest.mark.parametrize(("code", "exit_code"), [
    ("0", 0), ("None", 0), ("3", 3), ("5", 5), ("141", 141), ("256 + 4", 4),
])
def test_the_code_the_output_and_the_exit_handlers_are_kept(code: str, exit_code: int
                                                            ) -> None:
    got = _python(PRELUDE + f"end_now({code})\nprint('not reached')\n")
    assert got.returncode == exit_code
    assert got.stdout == "buffered resultexit handler ran\n"
    assert got.stderr == "a log line"


def test_a_thread_the_interpreter_waits_for_keeps_the_normal_exit() -> None:
    got = _python(PRELUDE + textwrap.dedent("""
    def late():
        time.sleep(0.3)
        print("thread done", flush=True)
    threading.Thread(target=late).start()
    end_now(0)
    print("normal exit")
    """))
    assert got.returncode == 0
    assert got.stdout.endswith("normal exit\nthread done\nexit handler ran\n")


def test_a_daemon_thread_does_not_hold_the_exit() -> None:
    got = _python(PRELUDE + textwrap.dedent("""
    threading.Thread(target=time.sleep, args=(60,), daemon=True).start()
    end_now(2)
    """))
    assert got.returncode == 2
    assert got.stdout == "buffered resultexit handler ran\n"


def test_a_message_as_the_code_keeps_the_normal_exit() -> None:
    got = _python(PRELUDE + "end_now('a message')\nraise SystemExit('a message')\n")
    assert got.returncode == 1
    assert got.stderr.endswith("a message\n")


def test_a_pod_command_ends_with_its_whole_result_and_its_code(tmp_path: Path) -> None:
    """`status --json` on a node where nothing ran: exit 3 (docs/cli.md), every line."""
    env = {**os.environ}
    env.pop("ASCEND_NODE_DEBUG", None)
    got = subprocess.run([*AGENT, "status", "--state-dir", str(tmp_path), "--json"], env=env,
                         text=True, capture_output=True, timeout=120)
    assert got.returncode == 3
    assert got.stdout.rstrip().endswith("}") and '"state": "not_started"' in got.stdout


def test_a_pod_command_that_fails_keeps_its_one_line_and_its_code(tmp_path: Path) -> None:
    env = {**os.environ}
    env.pop("ASCEND_NODE_DEBUG", None)
    got = subprocess.run([*AGENT, "env", "--state-dir", str(tmp_path)], env=env, text=True,
                         capture_output=True, timeout=120)
    assert got.returncode == 1
    assert got.stderr.startswith("ascend-node: error: no completed bootstrap")
    assert "hint:" in got.stderr
