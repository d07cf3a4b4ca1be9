"""Hand the container over to the real server with exec (the last step of `boot`).

`ascend-node` is a pre-start hook, not an init: after it the server must *be* the
container's main process (same PID, so signals from the kubelet and tini reach it and
its exit code is the pod's), never a child of ours. Before exec we undo what Python
changed in the process that exec would otherwise hand on:

- buffered stdout/stderr and logging handlers are flushed (exec discards buffers);
- signal dispositions go back to SIG_DFL: exec resets *handlers* by itself, but an
  ignored signal stays ignored in the new program — Python ignores SIGPIPE and
  SIGXFSZ at start-up, and a server that inherits SIG_IGN for SIGPIPE or SIGTERM
  behaves differently from one started by the kubelet;
- the signal mask is emptied (a blocked mask survives exec);
- a pending interval timer is cancelled (it survives exec and would SIGALRM the server).

Exec failures follow shell conventions (tini does the same): not found → 127,
found but not executable → 126.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import signal
import stat
import subprocess
import sys
from collections.abc import Mapping, Sequence
from typing import NoReturn, Optional

from ascend_node import pydantic_plugins
from ascend_node.errors import ExecNotExecutable, ExecNotFound

DEFAULT_MINDIE_DAEMON = "/usr/local/Ascend/mindie/latest/mindie-service/bin/mindieservice_daemon"
TERMINATION_LOG = "/dev/termination-log"
# Kubernetes keeps at most 4096 bytes of a termination message.
_TERMINATION_LOG_MAX = 4096


def _is_executable_file(path: str) -> bool:
    try:
        st = os.stat(path)
    except OSError:
        return False
    return stat.S_ISREG(st.st_mode) and os.access(path, os.X_OK)


def resolve_executable(name: str, env: Mapping[str, str]) -> str:
    """The file `exec` would run for `name`, searched on the PATH of `env` (the env the
    server gets, not ours — set_env scripts add the vendor bin dirs to it).

    Raises ExecNotFound (127) when nothing by that name exists, ExecNotExecutable (126)
    when something exists but cannot be executed (a directory, no x bit).
    """
    if not name:
        raise ExecNotFound("the command to exec is empty", "give a command after `--`")
    if "/" in name:
        if not os.path.lexists(name):
            raise ExecNotFound(
                f"exec {name} failed: No such file or directory",
                "check the path, or mount the package that provides it",
            )
        if not _is_executable_file(name):
            raise ExecNotExecutable(
                f"exec {name} failed: not an executable regular file",
                f"check its mode (chmod +x {name}) and that it is not a directory",
            )
        return name
    path = env.get("PATH", os.defpath)
    found_unusable: Optional[str] = None
    for directory in path.split(os.pathsep):
        candidate = os.path.join(directory or ".", name)
        if _is_executable_file(candidate):
            return candidate
        if found_unusable is None and os.path.lexists(candidate):
            found_unusable = candidate
    if found_unusable is not None:
        raise ExecNotExecutable(
            f"exec {name} failed: {found_unusable} is not executable",
            f"check its mode (chmod +x {found_unusable})",
        )
    raise ExecNotFound(
        f"exec {name} failed: not found on PATH={path}",
        "give the full path, or source the set_env.sh that adds it to PATH",
    )


# Finds the module without importing it: ~50 ms instead of MindSpore's ~3 s import.
_FIND_MODULE = ("import importlib.util, sys; "
                "sys.exit(0 if importlib.util.find_spec(sys.argv[1]) else 3)")


def check_interpreter(interpreter: str, module: str, launcher: str, env: Mapping[str, str],
                      timeout: float = 30.0) -> str:
    """The interpreter `launcher` will start (resolved on the server's PATH) can find
    `module`; returns its path.

    msrun starts its workers as a bare `python`: if the first `python` on PATH lacks
    MindSpore, every worker dies with ModuleNotFoundError after the agent has handed
    over, and msrun exits 1 naming none of this. Raises ExecNotFound (127) when the
    interpreter or the module is missing, ExecNotExecutable (126) when it cannot run.
    """
    path = env.get("PATH", os.defpath)
    try:
        program = resolve_executable(interpreter, env)
    except ExecNotFound:
        raise ExecNotFound(
            f"{launcher} starts its workers with `{interpreter}`, which is not on "
            f"PATH={path}",
            f"put the environment that has {module} first on PATH") from None
    try:
        done = subprocess.run([program, "-c", _FIND_MODULE, module], env=dict(env),
                              stdin=subprocess.DEVNULL, capture_output=True, text=True,
                              timeout=timeout)
    except subprocess.TimeoutExpired:
        raise ExecNotExecutable(
            f"{program} did not answer within {timeout:g} s (looking for {module})",
            "check the interpreter on PATH") from None
    except OSError as exc:
        raise ExecNotExecutable(f"cannot run {program}: {exc.strerror or exc}",
                                "check the interpreter on PATH and its #! line") from exc
    if done.returncode == 3:
        raise ExecNotFound(
            f"{launcher} starts its workers with `{interpreter}` from PATH, and {program} "
            f"cannot import {module} (PATH={path})",
            f"put the environment that has {module} first on PATH, or install {module} "
            f"for {program}")
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or [f"exit {done.returncode}"])[-1]
        raise ExecNotExecutable(f"{program} failed looking for {module}: {last}",
                                "check the interpreter on PATH")
    return program


def flush_output() -> None:
    """Flush every logging handler and the std streams (exec drops unflushed buffers)."""
    loggers = [logging.getLogger()]
    loggers += [
        lg for lg in logging.Logger.manager.loggerDict.values() if isinstance(lg, logging.Logger)
    ]
    for lg in loggers:
        for handler in lg.handlers:
            with contextlib.suppress(Exception):
                handler.flush()
    for stream in (sys.stdout, sys.stderr):
        if stream is not None:
            with contextlib.suppress(Exception):
                stream.flush()


def restore_default_signals() -> None:
    """SIG_DFL for every catchable signal, an empty mask, no pending interval timer."""
    with contextlib.suppress(OSError, ValueError):
        signal.setitimer(signal.ITIMER_REAL, 0)
    for sig in signal.valid_signals():
        if sig in (signal.SIGKILL, signal.SIGSTOP):
            continue
        # OSError/ValueError: a signal number the OS reserves (e.g. glibc's
        # real-time signals for threads), or we are not on the main thread.
        with contextlib.suppress(OSError, ValueError, RuntimeError):
            if signal.getsignal(sig) is not signal.SIG_DFL:
                signal.signal(sig, signal.SIG_DFL)
    with contextlib.suppress(OSError, ValueError):
        signal.pthread_sigmask(signal.SIG_SETMASK, [])


def exec_command(argv: Sequence[str], env: Mapping[str, str]) -> NoReturn:
    """Replace this process with `argv` (a list, never a shell string) under `env`.

    `argv[0]` is resolved on `env["PATH"]`; argv is passed on unchanged. Returns only
    by raising ExecNotFound (127) / ExecNotExecutable (126); the caller maps those to
    the exit code (and may call `write_termination_log` first).
    """
    args = [str(a) for a in argv]
    if not args:
        raise ExecNotFound("no command to exec", "give a command after `--`")
    program = resolve_executable(args[0], env)
    final_env = {str(k): str(v) for k, v in pydantic_plugins.handed_on(env).items()}
    flush_output()
    restore_default_signals()
    try:
        os.execve(program, args, final_env)
    except OSError as exc:
        if exc.errno in (errno.ENOENT, errno.ENOTDIR):
            raise ExecNotFound(
                f"exec {program} failed: {exc.strerror}",
                "the file or its interpreter (#! line) is missing",
            ) from exc
        hint = "check the file mode and the #! line"
        if exc.errno == errno.ENOEXEC:
            hint = "the file is not a binary and has no #! line; add one or run it with sh"
        raise ExecNotExecutable(f"exec {program} failed: {exc.strerror}", hint) from exc


def write_termination_log(message: str, path: str = TERMINATION_LOG) -> bool:
    """Write a one-line cause for Kubernetes' termination message; True when written.

    Only an existing file is written (kubelet creates it; outside Kubernetes there is
    none and we must not create files under /dev). Never raises: this runs on the way
    out of a failure and must not hide it.
    """
    try:
        data = message.encode("utf-8", errors="replace")
        if len(data) > _TERMINATION_LOG_MAX:
            data = data[:_TERMINATION_LOG_MAX].decode("utf-8", errors="ignore").encode()
        flags = os.O_WRONLY | os.O_TRUNC | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)
        fd = os.open(path, flags)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
        finally:
            os.close(fd)
    except Exception:
        return False
    return True
