"""Capture what the vendor `set_env.sh` scripts would add to the server's environment.

CANN, ATB, MindIE and ATB-Models each ship a `set_env.sh` that images normally `source`
in an entrypoint shell. We exec the server from Python, so we run them the same way
a shell would — all in ONE bash process, in order, each `source`d by its real path —
then read the resulting environment with `env -0` and return the difference to the
starting environment, which `boot` applies to the exec'd process.

Why it is done this way:
- the scripts find their install dir from `BASH_SOURCE` (ATB's also insists the path
  contains `set_env.sh`), so they must be sourced by bash from where they live, not
  copied or read by us;
- later scripts read what earlier ones exported (ATB runs `python3` found through the
  CANN PATH), so they share one shell, in the vendor order;
- a sourced script sees the caller's positional parameters, and ATB's parses them for
  `--cxx_abi=`: positional parameters are cleared before each `source`;
- scripts print chatter on stdout; it is sent to stderr so that stdout carries only
  our sentinel and the NUL-separated `env -0` dump (values may contain newlines).

Bash's own bookkeeping (`_`, `SHLVL`, `PWD`, `OLDPWD`) is not part of the result.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Optional

from ascend_node.errors import ConfigError, ToolError
from ascend_node.tools import run_tool

DEFAULT_ASCEND_ROOT = "/usr/local/Ascend"
SET_ENV_OVERRIDE = "ASCEND_NODE_SET_ENV"
DEFAULT_SET_ENV_TIMEOUT = 120.0

# Sourced in this order; within a group the first script that exists wins (old and
# new install layouts of the same component — sourcing both would stack two CANNs).
SET_ENV_GROUPS: tuple[tuple[str, ...], ...] = (
    ("ascend-toolkit/set_env.sh", "cann/set_env.sh"),  # CANN
    ("nnal/atb/set_env.sh",),  # ATB
    ("mindie/set_env.sh",),  # MindIE
    ("atb-models/set_env.sh", "llm_model/set_env.sh"),  # ATB-Models (2.x / 1.0.RCx)
)

_BASH_NOISE = frozenset({"_", "SHLVL", "PWD", "OLDPWD"})
_SENTINEL = "__ascend_node_env__"
_SOURCING = "__ascend_node_sourcing__"
_FAILED = "__ascend_node_failed__"
_STDERR_TAIL = 5

# $@ = the scripts. Variables are prefixed so no vendor script can clash with them
# (and none is exported unless a script turned on `set -a`; those are filtered out).
_WRAPPER = f"""
__ASCEND_NODE_SCRIPTS=("$@")
set --
for __ASCEND_NODE_I in "${{!__ASCEND_NODE_SCRIPTS[@]}}"; do
    printf '\\n{_SOURCING} %s\\n' "$__ASCEND_NODE_I" >&2
    source "${{__ASCEND_NODE_SCRIPTS[$__ASCEND_NODE_I]}}" >&2
    __ASCEND_NODE_RC=$?
    if [ "$__ASCEND_NODE_RC" -ne 0 ]; then
        printf '\\n{_FAILED} %s %s\\n' "$__ASCEND_NODE_I" "$__ASCEND_NODE_RC" >&2
        exit 97
    fi
done
printf '{_SENTINEL}\\0'
exec env -0
"""


@dataclass(frozen=True)
class EnvDelta:
    """What sourcing `scripts` did to the environment."""

    changed: dict[str, str]  # variables set or given a new value
    unset: tuple[str, ...]  # variables present before and gone after
    scripts: tuple[str, ...]  # what was sourced, in order
    # What the scripts printed (stdout and stderr, in order). Worth logging: ATB's
    # script prints "There is no 'set_env.sh' to import" and still returns 0.
    output: tuple[str, ...] = ()

    def apply(self, env: Mapping[str, str]) -> dict[str, str]:
        """`env` with this delta applied (a new dict)."""
        result = {k: v for k, v in env.items() if k not in self.unset}
        result.update(self.changed)
        return result


def default_set_env_scripts(root: str = DEFAULT_ASCEND_ROOT) -> list[str]:
    """The vendor scripts that exist under `root`, in sourcing order."""
    found: list[str] = []
    for group in SET_ENV_GROUPS:
        for relative in group:
            candidate = os.path.join(root, relative)
            if os.path.isfile(candidate):
                found.append(candidate)
                break
    return found


def set_env_scripts_from_env(
    environ: Mapping[str, str], root: str = DEFAULT_ASCEND_ROOT
) -> list[str]:
    """`ASCEND_NODE_SET_ENV` (os.pathsep list, in order; empty = source nothing) when
    set, else the scripts found under `root`. A listed script that is missing is an
    error: the operator asked for it by name."""
    raw = environ.get(SET_ENV_OVERRIDE)
    if raw is None:
        return default_set_env_scripts(root)
    scripts = [os.path.abspath(p.strip()) for p in raw.split(os.pathsep) if p.strip()]
    for script in scripts:
        if not os.path.isfile(script):
            raise ConfigError(
                f"{SET_ENV_OVERRIDE} lists {script}, which is not a file",
                f"fix the list ({os.pathsep}-separated paths) or unset it to probe {root}",
            )
    return scripts


def _script_stderr(stderr: str, index: int) -> list[str]:
    """The stderr lines printed while script `index` was being sourced."""
    lines: list[str] = []
    current = -1
    for line in stderr.splitlines():
        if line.startswith(_SOURCING + " "):
            current = int(line.split()[1])
            continue
        if line.startswith(_FAILED + " "):
            continue
        if current == index and line.strip():
            lines.append(line.rstrip())
    return lines


def _last_sourced(stderr: str) -> int:
    last = -1
    for line in stderr.splitlines():
        if line.startswith(_SOURCING + " "):
            last = int(line.split()[1])
    return last


def _failure(scripts: Sequence[str], index: int, what: str, stderr: str) -> ToolError:
    script = scripts[index] if 0 <= index < len(scripts) else "a set_env.sh script"
    tail = _script_stderr(stderr, index)[-_STDERR_TAIL:]
    detail = f": {' | '.join(tail)}" if tail else " (no output)"
    return ToolError(
        f"`source {script}` {what}{detail}",
        f"fix the script or its install, or leave it out with {SET_ENV_OVERRIDE}="
        f"<{os.pathsep}-separated scripts>",
    )


def parse_env0(data: str) -> dict[str, str]:
    """`env -0` output → dict (values may contain newlines and '=')."""
    result: dict[str, str] = {}
    for item in data.split("\0"):
        if not item:
            continue
        name, sep, value = item.partition("=")
        if sep:
            result[name] = value
    return result


def diff_env(
    before: Mapping[str, str], after: Mapping[str, str]
) -> tuple[dict[str, str], tuple[str, ...]]:
    """(set or changed, unset) going from `before` to `after`, bash noise ignored."""
    changed = {
        k: v
        for k, v in after.items()
        if k not in _BASH_NOISE and not k.startswith("__ASCEND_NODE_") and before.get(k) != v
    }
    unset = tuple(sorted(k for k in before if k not in after and k not in _BASH_NOISE))
    return changed, unset


def capture_set_env(
    scripts: Sequence[str],
    base_env: Optional[Mapping[str, str]] = None,
    *,
    timeout: float = DEFAULT_SET_ENV_TIMEOUT,
    bash: str = "bash",
) -> EnvDelta:
    """Source `scripts` in one bash started with `base_env` (default: ours) and return
    what they changed. A script whose `source` returns non-zero, or that exits the
    shell, ends with ToolError naming it and quoting its last stderr lines."""
    start = dict(os.environ if base_env is None else base_env)
    paths = tuple(os.path.abspath(s) for s in scripts)
    if not paths:
        return EnvDelta({}, (), ())
    argv = [bash, "--noprofile", "--norc", "-c", _WRAPPER, "ascend-node-set-env", *paths]
    try:
        result = run_tool(argv, timeout=timeout, env=start)
    except ToolError as exc:
        if "did not finish" in exc.cause:
            raise ToolError(
                f"sourcing {', '.join(paths)} did not finish within {timeout:g} s",
                "a set_env.sh is waiting for something (a python3 import, a network path)",
            ) from None
        raise ToolError(
            f"cannot run bash to source set_env scripts: {exc.cause}",
            "the vendor set_env.sh scripts need bash; install it in the image",
        ) from None

    for line in result.stderr.splitlines():
        if line.startswith(_FAILED + " "):
            _, failed_index, status = line.split()
            raise _failure(paths, int(failed_index), f"failed with status {status}", result.stderr)
    _, sentinel, dump = result.stdout.rpartition(_SENTINEL + "\0")
    if result.returncode != 0 or not sentinel:
        raise _failure(
            paths,
            _last_sourced(result.stderr),
            f"exited the shell (status {result.returncode})",
            result.stderr,
        )
    changed, unset = diff_env(start, parse_env0(dump))
    output = tuple(
        line.rstrip()
        for line in result.stderr.splitlines()
        if line.strip() and not line.startswith((_SOURCING + " ", _FAILED + " "))
    )
    return EnvDelta(changed, unset, paths, output)
