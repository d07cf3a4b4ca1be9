"""Error types that carry the contract's exit code and a hint.

Every failure a user can cause or meet ends as one of these. The CLI maps them to
a one-line cause plus a hint on stderr and the exit code of the contract (see
docs/design.md, "Exit codes"), which Volcano job policies act on: 4 is retryable
(RestartJob), 5 is not (AbortJob). Domain code raises; only the command line (`cli/app.py`) exits.
"""

from __future__ import annotations

from typing import ClassVar


class AscendNodeError(Exception):
    """Base class: a cause (one line, naming the value at fault) and a hint."""

    exit_code: ClassVar[int] = 1

    def __init__(self, cause: str, hint: str = "") -> None:
        super().__init__(cause)
        self.cause = cause
        self.hint = hint

    def __str__(self) -> str:
        return self.cause


class ConfigError(AscendNodeError):
    """Bad environment or settings value (exit 1)."""


class ToolError(AscendNodeError):
    """A vendor tool (hccn_tool, npu-smi, pip, bash) failed or timed out (exit 1)."""


class DeviceError(AscendNodeError):
    """A device is unusable for HCCL: no IP, duplicate, wrong family (exit 1)."""


class SharedVolumeError(AscendNodeError):
    """The shared volume cannot be written or holds something we refuse (exit 1)."""


class InvalidInputError(AscendNodeError):
    """A file given by the user is invalid (e.g. `validate` on a bad table) (exit 1)."""


class UsageError(AscendNodeError):
    """Command-line usage error (exit 2)."""

    exit_code: ClassVar[int] = 2


def refused_value(source: str, cause: str, hint: str = "") -> AscendNodeError:
    """A value the agent refuses, by where it was written: on the command line (`source`
    names a flag: `--devices`, `flag --timeout`) it is a usage error (2), like an unknown
    option; from the environment or a file it is a configuration error (1)."""
    on_command_line = source.startswith(("--", "flag "))
    return (UsageError if on_command_line else ConfigError)(cause, hint)


class Degraded(AscendNodeError):
    """Some checks warn (doctor/status only, exit 3)."""

    exit_code: ClassVar[int] = 3


class PeerTimeout(AscendNodeError):
    """Peers did not all arrive before --timeout (exit 4, retryable)."""

    exit_code: ClassVar[int] = 4


class ClusterInconsistent(AscendNodeError):
    """The cluster cannot form a valid table: duplicate index, IP collision... (exit 5)."""

    exit_code: ClassVar[int] = 5


class ExecNotExecutable(AscendNodeError):
    """The command to exec exists but is not executable (exit 126)."""

    exit_code: ClassVar[int] = 126


class ExecNotFound(AscendNodeError):
    """The command to exec was not found (exit 127)."""

    exit_code: ClassVar[int] = 127


class Terminated(AscendNodeError):
    """SIGTERM arrived while waiting (exit 143)."""

    exit_code: ClassVar[int] = 143


class Interrupted(AscendNodeError):
    """SIGINT (Ctrl-C) arrived (exit 130, as a shell reports it)."""

    exit_code: ClassVar[int] = 130
