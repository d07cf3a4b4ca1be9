"""Issue 27: where the result cannot go, the command says so in one line (real processes,
real file descriptors): a closed stdout, a full disk, a reader that went away; and an
error names a value without echoing it whole."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

AGENT = [sys.executable, "-m", "ascend_node"]


def _run(args: list[str], env: dict[str, str] | None = None, **kw: object
         ) -> subprocess.CompletedProcess[str]:
    full = {**os.environ, **(env or {})}
    full.pop("ASCEND_NODE_DEBUG", None)
    return subprocess.run(AGENT + args, env=full, text=True, stderr=subprocess.PIPE,
                          timeout=120, **kw)  # type: ignore[call-overload]


def _one_error(stderr: str) -> str:
    assert "Traceback" not in stderr and "internal error" not in stderr, stderr
    lines = [ln for ln in stderr.splitlines() if ln.startswith("ascend-node: error: ")]
    assert len(lines) == 1, stderr
    return lines[0]


@pytest.mark.parametrize("args", [["version"], ["manifest"], ["--version"]])
def test_a_closed_stdout_is_one_line_and_exit_1(args: list[str]) -> None:
    got = _run(args, stdout=None, pass_fds=(), preexec_fn=lambda: os.close(1))
    assert got.returncode == 1
    assert "stdout is closed" in _one_error(got.stderr)


@pytest.mark.parametrize("args", [["version"], ["manifest"], ["manifest", "--json"]])
def test_a_full_stdout_names_the_errno(args: list[str]) -> None:
    if not Path("/dev/full").exists():
        pytest.skip("no /dev/full on this machine")
    with open("/dev/full", "w") as full:
        got = _run(args, stdout=full)
    assert got.returncode == 1
    line = _one_error(got.stderr)
    assert "No space left on device" in line and "errno 28" in line


def test_a_reader_that_went_away_ends_quietly_with_141() -> None:
    proc = subprocess.Popen([*AGENT, "manifest", "--nodes", "8"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.readline()
    proc.stdout.close()  # as `| head -1` does
    err = proc.stderr.read()
    assert proc.wait(timeout=120) in (0, 141)  # 0: it had written everything already
    assert err == ""


def test_an_error_names_a_long_value_without_echoing_it_whole(tmp_path: Path) -> None:
    got = _run(["env", "--state-dir", str(tmp_path)], stdout=subprocess.PIPE,
               env={"ASCEND_NODE_TIMEOUT": "9" * 50 + "x" * 5000})
    assert got.returncode == 1
    line = _one_error(got.stderr)
    assert line.startswith("ascend-node: error: ASCEND_NODE_TIMEOUT='99999")
    assert len(line) < 600 and "(5,050 characters) is invalid: " in line  # the cause stays


def test_a_long_cause_that_quotes_nothing_long_is_never_cut() -> None:
    from ascend_node.cli.app import clip_line

    cause = ("ascend-node: error: timed out after 5 s waiting for peers: attempt 1-a was "
             "aborted by this pod's own earlier failure (worker 0 (node 1) failed: device 2 "
             "has no usable RoCE IP (no address): `hccn_tool -i 2 -ip -g` printed \"" + "x" * 200
             + "\") and no new attempt opened")
    assert clip_line(cause) == cause
