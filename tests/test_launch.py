"""Contract of ascend_node.handoff.exec: a real exec (same PID), the env we give, 126/127."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from ascend_node.errors import ExecNotExecutable, ExecNotFound
from ascend_node.handoff.exec import (
    DEFAULT_MINDIE_DAEMON,
    check_interpreter,
    resolve_executable,
    write_termination_log,
)

REPO = Path(__file__).resolve().parents[1]

# The child: do what `boot` does just before exec — print, ignore/block signals the
# way a Python agent would have them — then exec. Errors are reported as JSON.
CHILD = textwrap.dedent(
    """
    import json, logging, os, signal, sys
    from ascend_node.handoff.exec import exec_command
    from ascend_node.errors import AscendNodeError
    logging.basicConfig(stream=sys.stderr, level=logging.INFO, format="%(message)s")
    argv, env = json.loads(sys.argv[1]), json.loads(sys.argv[2])
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    signal.signal(signal.SIGINT, lambda *a: None)
    signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGUSR1, signal.SIGTERM])
    signal.setitimer(signal.ITIMER_REAL, 3600)
    print("agent-pid", os.getpid())          # buffered: stdout is a pipe
    logging.info("agent-log-line")           # must reach stderr before exec
    try:
        exec_command(argv, env)
    except AscendNodeError as exc:
        print(json.dumps({"type": type(exc).__name__, "code": exc.exit_code,
                          "cause": exc.cause}))
        sys.exit(exc.exit_code)
    """
)


def run_child(argv: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    child_env = {"PYTHONPATH": str(REPO), "PATH": os.environ.get("PATH", os.defpath)}
    return subprocess.run(
        [sys.executable, "-c", CHILD, json.dumps(argv), json.dumps(env)],
        capture_output=True,
        text=True,
        env=child_env,
        timeout=30,
        check=False,
    )


def test_exec_keeps_the_pid_passes_env_and_argv_and_flushes_first() -> None:
    env = {"PATH": "/usr/bin:/bin", "RANK_TABLE_FILE": "/run/ascend-node/ranktable.json"}
    script = 'echo "server-pid $$ $RANK_TABLE_FILE $0 $1"'
    proc = run_child(["sh", "-c", script, "zero", "one"], env)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    agent_pid = lines[0].split()[1]
    assert lines[1] == f"server-pid {agent_pid} /run/ascend-node/ranktable.json zero one"
    assert "agent-log-line" in proc.stderr


def test_exec_gets_exactly_the_given_env() -> None:
    env = {"PATH": "/usr/bin:/bin", "ONLY_THIS": "x y\nz"}
    proc = run_child(["env", "-0"], env)
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout.split("\n", 1)[1]
    got = dict(item.split("=", 1) for item in out.split("\0") if item)
    assert got == env


def test_exec_restores_signal_dispositions_and_mask() -> None:
    # The probe is the exec'd process itself: grep reading its own /proc/self/status. A
    # shell around it (`sh -c "grep ... /proc/$$/status"`) would read the shell, which
    # blocks every signal while it waits for grep: the test would race with its probe.
    probe = ["grep", "-E", "^(SigBlk|SigIgn):", "/proc/self/status"]
    proc = run_child(probe, {"PATH": os.environ.get("PATH", "/usr/bin:/bin")})
    assert proc.returncode == 0, proc.stderr
    fields = dict(line.split(":", 1) for line in proc.stdout.splitlines()[1:3])
    assert int(fields["SigBlk"], 16) == 0, "no signal may stay blocked"
    assert int(fields["SigIgn"], 16) == 0, "no signal may stay ignored (SIGPIPE, SIGTERM...)"


def test_exec_cancels_a_pending_interval_timer() -> None:
    # Read the timer of the exec'd process itself (not of a child it starts).
    probe = "import signal; print(signal.getitimer(signal.ITIMER_REAL)[0])"
    proc = run_child([sys.executable, "-c", probe], {"PATH": "/usr/bin:/bin"})
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[1] == "0.0"


@pytest.mark.parametrize(
    ("argv", "make", "error", "code"),
    [
        (["definitely-not-a-command-xyz"], None, "ExecNotFound", 127),
        (["{tmp}/missing/server"], None, "ExecNotFound", 127),
        (["{tmp}/server"], "plain", "ExecNotExecutable", 126),
        (["{tmp}"], None, "ExecNotExecutable", 126),
        (["server"], "plain", "ExecNotExecutable", 126),
        (["{tmp}/server"], "no-shebang", "ExecNotExecutable", 126),
        (["{tmp}/server"], "bad-interpreter", "ExecNotFound", 127),
    ],
)
def test_exec_failures_follow_shell_exit_codes(
    tmp_path: Path, argv: list[str], make: str | None, error: str, code: int
) -> None:
    server = tmp_path / "server"
    if make == "plain":
        server.write_text("#!/bin/sh\necho hi\n")
        server.chmod(0o644)
    elif make == "no-shebang":
        server.write_bytes(b"\x00\x01\x02garbage")
        server.chmod(0o755)
    elif make == "bad-interpreter":
        server.write_text("#!/no/such/interpreter\n")
        server.chmod(0o755)
    argv = [a.format(tmp=tmp_path) for a in argv]
    proc = run_child(argv, {"PATH": f"{tmp_path}:/usr/bin:/bin"})
    assert proc.returncode == code, proc.stdout + proc.stderr
    report = json.loads(proc.stdout.splitlines()[-1])
    assert report["type"] == error
    assert report["cause"].startswith(f"exec {argv[0]} failed: ")


def test_resolve_uses_the_path_of_the_given_env_not_ours(tmp_path: Path) -> None:
    bindir = tmp_path / "vendor-bin"
    bindir.mkdir()
    tool = bindir / "mindieservice_daemon"
    tool.write_text("#!/bin/sh\n")
    tool.chmod(0o755)
    assert resolve_executable("mindieservice_daemon", {"PATH": f"/nonexistent:{bindir}"}) == str(
        tool
    )
    with pytest.raises(ExecNotFound, match="not found on PATH=/usr/bin"):
        resolve_executable("mindieservice_daemon", {"PATH": "/usr/bin"})


def test_resolve_skips_a_non_executable_and_takes_the_next(tmp_path: Path) -> None:
    first, second = tmp_path / "a", tmp_path / "b"
    first.mkdir()
    second.mkdir()
    (first / "tool").write_text("x")
    (first / "tool").chmod(0o644)
    (second / "tool").write_text("#!/bin/sh\n")
    (second / "tool").chmod(0o755)
    env = {"PATH": f"{first}:{second}"}
    assert resolve_executable("tool", env) == str(second / "tool")
    with pytest.raises(ExecNotExecutable, match=str(first / "tool")):
        resolve_executable("tool", {"PATH": str(first)})


def test_default_command_is_the_mindie_daemon() -> None:
    assert DEFAULT_MINDIE_DAEMON == (
        "/usr/local/Ascend/mindie/latest/mindie-service/bin/mindieservice_daemon"
    )


def test_termination_log_written_only_when_the_file_exists(tmp_path: Path) -> None:
    log = tmp_path / "termination-log"
    assert write_termination_log("peers missing", str(log)) is False
    assert not log.exists(), "must not create the file"
    log.write_text("previous, longer message")
    assert write_termination_log("worker 3 (node 4) missing", str(log)) is True
    assert log.read_text() == "worker 3 (node 4) missing"


def test_termination_log_caps_at_4096_bytes_on_a_char_boundary(tmp_path: Path) -> None:
    log = tmp_path / "termination-log"
    log.touch()
    assert write_termination_log("节" * 2000, str(log)) is True  # 6000 bytes of UTF-8
    data = log.read_bytes()
    assert len(data) <= 4096
    assert data.decode("utf-8") == "节" * (4096 // 3)


def test_termination_log_never_raises(tmp_path: Path) -> None:
    assert write_termination_log("x", str(tmp_path)) is False  # a directory
    assert write_termination_log("x", "/proc/self/nonexistent/termination-log") is False


def _bin_with(tmp_path: Path, name: str, target: str) -> Path:
    """A PATH directory whose `name` is `target` (a symlink, as venvs do)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    (bin_dir / name).symlink_to(target)
    return bin_dir


def test_check_interpreter_finds_a_module_on_the_jobs_path(tmp_path: Path) -> None:
    bin_dir = _bin_with(tmp_path, "python", sys.executable)
    site = tmp_path / "site" / "mindspore"
    site.mkdir(parents=True)
    (site / "__init__.py").write_text("raise SystemExit('imported: the check must not import')")
    env = {"PATH": str(bin_dir), "PYTHONPATH": str(site.parent)}
    assert check_interpreter("python", "mindspore", "msrun", env) == str(bin_dir / "python")


@pytest.mark.parametrize(("setup", "code", "message"), [
    ("no module", 127, "msrun starts its workers with `python` from PATH, and {bin}/python "
                       "cannot import mindspore (PATH={bin})"),
    ("no python", 127, "msrun starts its workers with `python`, which is not on PATH={bin}"),
    ("broken python", 126, "{bin}/python failed looking for mindspore: "),
])
def test_check_interpreter_failures_name_path(
    tmp_path: Path, setup: str, code: int, message: str,
) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    if setup == "no module":
        _bin_with(tmp_path, "python", sys.executable)
    elif setup == "broken python":
        script = bin_dir / "python"
        script.write_text("#!/bin/sh\necho 'python: bad magic number' >&2\nexit 1\n")
        script.chmod(0o755)
    env = {"PATH": str(bin_dir)}
    with pytest.raises((ExecNotFound, ExecNotExecutable)) as info:
        check_interpreter("python", "mindspore", "msrun", env)
    assert info.value.exit_code == code
    assert message.format(bin=bin_dir) in info.value.cause
