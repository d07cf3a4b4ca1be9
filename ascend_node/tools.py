"""The one place that runs external programs: always an argv list, always a timeout.

Vendor tools (`hccn_tool`, `npu-smi`) can hang when the driver is wedged; a bootstrap
agent that hangs with them is worse than one that fails with the command it ran.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Optional

from ascend_node.errors import ToolError

DEFAULT_TOOL_TIMEOUT = 10.0  # ASCEND_NODE_TOOL_TIMEOUT is read by settings.py
_REAP_GRACE = 1.0  # seconds to reap a killed tool before leaving it behind


@dataclass(frozen=True)
class ToolResult:
    argv: tuple[str, ...]
    returncode: int
    stdout: str
    stderr: str

    @property
    def command(self) -> str:
        return " ".join(self.argv)


def run_tool(
    argv: Sequence[str],
    timeout: float = DEFAULT_TOOL_TIMEOUT,
    env: Optional[Mapping[str, str]] = None,
    input_text: Optional[str] = None,
) -> ToolResult:
    """Run `argv`, capture text output; raise ToolError on timeout or a missing binary.

    A non-zero exit is *not* an error here: callers decide, because `hccn_tool`
    prints useful text even when it fails.
    """
    args = [str(a) for a in argv]
    try:
        proc = subprocess.Popen(
            args,
            stdin=subprocess.PIPE if input_text is not None else subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            errors="replace",
            env=dict(env) if env is not None else None,
        )
    except FileNotFoundError as exc:
        raise ToolError(
            f"`{args[0]}` not found",
            "mount /usr/local/Ascend/driver into the container or set the tool path",
        ) from exc
    except PermissionError as exc:
        raise ToolError(
            f"`{args[0]}` is not executable ({exc.strerror})",
            "check the file mode of the tool",
        ) from exc
    except OSError as exc:
        raise ToolError(f"`{args[0]}` could not be started: {exc.strerror or exc}") from exc
    try:
        stdout, stderr = proc.communicate(input_text, timeout=timeout)
    except subprocess.TimeoutExpired as exc:
        _abandon(proc)
        raise ToolError(
            f"`{' '.join(args)}` did not finish within {timeout:g} s",
            "the driver may be busy or wedged; check `npu-smi info`, or raise "
            "ASCEND_NODE_TOOL_TIMEOUT",
        ) from exc
    return ToolResult(tuple(args), proc.returncode, stdout, stderr)


def _abandon(proc: subprocess.Popen[str]) -> None:
    """Kill a timed-out tool and reap it, but never wait on it unbounded.

    `subprocess.run` waits without limit after its kill. A tool stuck inside the
    driver (uninterruptible sleep) does not die from SIGKILL until the driver lets
    go, and a grandchild can hold the pipes open: either would turn our timeout
    into a hang. After a short grace the process is left to the kernel (or tini).
    """
    proc.kill()
    try:
        proc.communicate(timeout=_REAP_GRACE)
    except subprocess.TimeoutExpired:
        for stream in (proc.stdout, proc.stderr):
            if stream is not None:
                stream.close()


def shown_output(text: str, limit: int = 200) -> str:
    """What a tool printed, for a one-line message: quoted, readable, and each line once.

    The same error often comes back from two queries of one device (`-ip -g`, then
    `-ip -inet6 -g`), and a message that escapes newlines inside a repr() shows `\\n`
    soup. Each distinct non-blank line appears once, in order, whitespace collapsed, joined
    by " | "; control characters are shown as `\\xNN`; the whole is cut at `limit`.
    """
    lines: list[str] = []
    for raw in text.splitlines():
        line = " ".join(raw.split())
        line = "".join(ch if ch.isprintable() else f"\\x{ord(ch):02x}" for ch in line)
        if line and line not in lines:
            lines.append(line)
    if not lines:
        return "nothing"
    joined = " | ".join(lines)
    if len(joined) > limit:
        joined = joined[: limit - 3] + "..."
    return f'"{joined}"'


def which(name: str, path: Optional[str] = None) -> Optional[str]:
    """Like shutil.which, kept here so every tool lookup has one home."""
    import shutil

    return shutil.which(name, path=path if path is not None else os.environ.get("PATH"))
