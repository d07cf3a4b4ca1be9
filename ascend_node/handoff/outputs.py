"""The files a bootstrap leaves in the container: table copy, env script, status.

`RANK_TABLE_FILE` points at the local copy, which MindIE checks strictly (MindIE-LLM
src/utils/log/file_utils.cpp and atb_llm/utils/env.py @8b4871a (2026-04), run on test
files): a regular file, not a link, owned by the uid that runs the server, mode 0640 or
stricter, a path of `[0-9a-zA-Z_./-]` no longer than 256. Everything here is written
atomically, so a SIGTERM or a full disk leaves the previous file or none, never half of one.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal, Optional, TypeVar

from pydantic import BaseModel, ConfigDict, ValidationError

from ascend_node.atomic import atomic_write_bytes
from ascend_node.errors import ConfigError, SharedVolumeError
from ascend_node.ranktable import master_ip, world_size
from ascend_node.statedir import (  # the status document lives apart so `status` starts fast
    STATUS_JSON,
    StatusDoc,
    ensure_state_dir,
    read_status,
    write_status,
)

ENV_SCRIPT = "source_mul_env.sh"
ENV_JSON = "env.json"
LOCAL_TABLE = "ranktable.json"
_SAFE_PATH = re.compile(r"^[0-9a-zA-Z_./-]{1,256}$")

class EnvDoc(BaseModel):
    model_config = ConfigDict(defer_build=True, extra="forbid")
    schema_version: Literal[1] = 1
    env: dict[str, str]
    # What boot took out of the server's environment, and what it noticed (issue 28).
    unset: list[str] = []
    notes: list[str] = []


def check_table_path(path: Path) -> None:
    """MindIE/atb_llm refuse paths with other characters, or longer than 256."""
    text = str(path)
    if not _SAFE_PATH.fullmatch(text):
        raise ConfigError(
            f"local rank table path {text!r} has characters outside [0-9a-zA-Z_./-] or is "
            "longer than 256",
            "MindIE refuses such paths; choose a plain --state-dir such as /run/ascend-node",
        )


def _write(path: Path, data: bytes, mode: int, owner: Optional[tuple[int, int]]) -> None:
    """One of the pod's own outputs (local table, master and world-size files, env script
    and env.json): whole or not at all, but not flushed to disk (`durable=False`).

    Each is written anew by every start before anything reads it: the agent is the
    container's entrypoint (it writes them, then execs the server), and in the
    init-container variant a pod whose node restarts runs its init containers again. A
    crash of the machine therefore loses nothing a reader would see, while the ten fsyncs
    (file and directory, five files) were on every pod's path from the verdict to holding
    the table: ~2-8 ms each on the development disk, more when pods share a disk (issue
    30, docs/benchmarks.md). The shared table and the rendezvous documents stay durable:
    other pods and later starts read them."""
    uid, gid = owner if owner is not None else (None, None)
    try:
        atomic_write_bytes(path, data, mode=mode, uid=uid, gid=gid, durable=False)
    except PermissionError as exc:
        if owner is not None:
            raise ConfigError(
                f"cannot give {path} to {uid}:{gid}: {exc.strerror}",
                "--file-owner needs the agent to run as root (an init container)",
            ) from exc
        raise ConfigError(f"cannot write {path}: {exc.strerror}",
                          "check the directory's owner and mode") from exc
    except OSError as exc:
        raise SharedVolumeError(f"cannot write {path}: {exc.strerror or exc}",
                                "check free space and that the directory is writable") from exc


def table_env(
    local_table: Path, table: Mapping[str, Any], container_ip: str
) -> dict[str, str]:
    """The values `source_mul_env.sh` exports (docs/design.md, "The chain", step 5)."""
    return {
        "RANK_TABLE_FILE": str(local_table),
        "RANKTABLEFILE": str(local_table),
        "MIES_CONTAINER_IP": container_ip,
        "MASTER_IP": master_ip(table),
        "WORLD_SIZE": str(world_size(table)),
    }


def render_env_script(env: Mapping[str, str], unset: Sequence[str] = ()) -> str:
    """`export NAME='value'` lines (and `unset NAME` for what the server must not get),
    safe for sh and bash whatever the value holds."""
    lines = ["# Written by ascend-node; source it from sh or bash."]
    for name in [*sorted(env), *sorted(unset)]:
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
            raise ConfigError(f"environment name {name!r} cannot be exported",
                              "names must match [A-Za-z_][A-Za-z0-9_]*")
    lines += [f"unset {name}" for name in sorted(unset)]
    for name in sorted(env):
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
            raise ConfigError(f"environment name {name!r} cannot be exported",
                              "names must match [A-Za-z_][A-Za-z0-9_]*")
        lines.append(f"export {name}={shlex.quote(env[name])}")
    return "\n".join(lines) + "\n"


def write_table_outputs(
    state_dir: Path,
    table_text: str,
    table: Mapping[str, Any],
    container_ip: str,
    master_file: Path,
    world_size_file: Path,
    owner: Optional[tuple[int, int]],
) -> dict[str, str]:
    """Local table copy, master and world-size files, env script and its JSON twin."""
    ensure_state_dir(state_dir)
    local = state_dir / LOCAL_TABLE
    check_table_path(local)
    _write(local, table_text.encode(), 0o640, owner)
    env = table_env(local, table, container_ip)
    for path, value in ((master_file, env["MASTER_IP"]), (world_size_file, env["WORLD_SIZE"])):
        # The file goes into a directory that exists (a mount, the image's /): a mistyped
        # path is named, never created anywhere as root (issue 27).
        if not path.parent.is_dir():
            raise ConfigError(f"cannot write {path}: directory {path.parent} does not exist",
                              "set --master-file / --world-size-file to a path in an "
                              "existing directory")
        _write(path, (value + "\n").encode(), 0o644, None)
    write_env(state_dir, env, owner)
    return env


def write_env(state_dir: Path, env: Mapping[str, str], owner: Optional[tuple[int, int]],
              unset: Sequence[str] = (), notes: Sequence[str] = ()) -> None:
    _write(state_dir / ENV_SCRIPT, render_env_script(env, unset).encode(), 0o640, owner)
    doc = EnvDoc(env=dict(env), unset=list(unset), notes=list(notes))
    # `unset`/`notes` only when boot changed or noticed something: env.json stays the
    # contract's file otherwise.
    empty = {k for k in ("unset", "notes") if not getattr(doc, k)}
    _write(state_dir / ENV_JSON, (doc.model_dump_json(indent=2, exclude=empty) + "\n").encode(),
           0o640, owner)


M = TypeVar("M", bound=BaseModel)


def _read_local(path: Path, model: type[M]) -> Optional[M]:
    """A document of this container's state dir; None when absent, ConfigError when bad."""
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise ConfigError(f"cannot read {path}: {exc.strerror}", "check --state-dir") from exc
    try:
        return model.model_validate_json(raw)
    except ValidationError as exc:
        raise ConfigError(f"{path} is not a valid {path.name} ({exc.errors()[0]['msg']})",
                          "run `ascend-node ranktable` or `boot` again to rewrite it") from exc


def read_env(state_dir: Path) -> Optional[dict[str, str]]:
    doc = _read_local(state_dir / ENV_JSON, EnvDoc)
    return doc.env if doc is not None else None


__all__ = [
    "ENV_JSON", "ENV_SCRIPT", "LOCAL_TABLE", "STATUS_JSON", "EnvDoc", "StatusDoc",
    "check_table_path", "ensure_state_dir", "read_env", "read_status", "render_env_script",
    "table_env", "write_env", "write_status", "write_table_outputs",
]
