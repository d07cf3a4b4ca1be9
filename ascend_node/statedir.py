"""This container's state dir and its status document, without pydantic.

Why a module of its own: `ascend-node status` is a startup probe run every few seconds in
every pod, so its start-up is paid again and again (issue 13: every command starts in
<= 150 ms). It needs only where the state dir is and what `status.json` says; importing
the settings model, the rank table package or pydantic for that would triple its time.
So the status document is a plain dataclass checked by hand on read, and the state dir
follows the same precedence as `settings` (flag, then ASCEND_NODE_STATE_DIR, then the
default; the tests hold the two to the same answers).

`status.json` is local to the container and has one writer (this agent); it is still
checked field by field on read, so a hand-edited or truncated file is reported, not trusted.
"""

from __future__ import annotations

import dataclasses
import json
import os
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from ascend_node.errors import ConfigError

STATE_DIR_ENV = "ASCEND_NODE_STATE_DIR"
DEFAULT_STATE_DIR = Path("/run/ascend-node")
STATUS_JSON = "status.json"
STATES = ("in_progress", "done", "failed")


def resolve_state_dir(flag: Optional[Path], environ: Mapping[str, str]) -> Path:
    """--state-dir, else ASCEND_NODE_STATE_DIR (blank = unset), else /run/ascend-node."""
    if flag is not None:
        return flag
    raw = environ.get(STATE_DIR_ENV, "").strip()
    return Path(raw) if raw else DEFAULT_STATE_DIR


def fallback_state_dirs(environ: Mapping[str, str], uid: int) -> list[Path]:
    """Where the agent keeps its state when the default cannot be written (a non-root
    image: /run belongs to root), in order: `$XDG_RUNTIME_DIR/ascend-node` (the user's
    runtime dir, when set), then `/tmp/ascend-node-<uid>` (a per-uid dir, mode 0750,
    refused unless that uid owns it)."""
    out = []
    xdg = environ.get("XDG_RUNTIME_DIR", "").strip()
    if xdg.startswith("/"):
        out.append(Path(xdg) / "ascend-node")
    out.append(Path(f"/tmp/ascend-node-{uid}"))
    return out


def unusable_dir(path: Path, uid: Optional[int] = None) -> Optional[str]:
    """None when `path` is (or can be made) a directory this process can write; else why.
    With `uid`, the directory must also be that uid's (a shared /tmp)."""
    try:
        path.mkdir(mode=0o750, parents=True, exist_ok=True)
    except OSError as exc:
        return exc.strerror or str(exc)
    if path.is_symlink() or not path.is_dir():
        return "not a directory"
    if uid is not None and path.stat().st_uid != uid:
        return f"owned by uid {path.stat().st_uid}, not {uid}"
    if not os.access(path, os.W_OK | os.X_OK):
        return "Permission denied"
    return None


def place_state_dir(path: Path, explicit: bool, environ: Mapping[str, str]
                    ) -> tuple[Path, Optional[str]]:
    """(the state dir to use, a note when it is a fallback). An explicit dir that cannot be
    written is a ConfigError; the default falls back (fallback_state_dirs)."""
    why = unusable_dir(path)
    if why is None:
        return path, None
    if explicit:
        raise ConfigError(f"cannot write state dir {path}: {why}",
                          "set --state-dir / ASCEND_NODE_STATE_DIR to a writable directory")
    uid = os.getuid()
    tried = [f"{path} ({why})"]
    for candidate in fallback_state_dirs(environ, uid):
        other = unusable_dir(candidate, uid if str(candidate).startswith("/tmp/") else None)
        if other is None:
            return candidate, (f"state dir {path} is not writable ({why}) for uid {uid}; "
                               f"using {candidate}")
        tried.append(f"{candidate} ({other})")
    raise ConfigError(f"no writable state dir: {'; '.join(tried)}",
                      "set --state-dir / ASCEND_NODE_STATE_DIR to a writable directory "
                      "(e.g. an emptyDir)")


def find_state_dir(flag: Optional[Path], environ: Mapping[str, str]) -> Path:
    """The state dir a reader (`status`, `env`) should look in: the explicit one, else the
    default, or the first fallback holding a status document (where a non-root agent
    wrote, place_state_dir). A few stat calls: the probes stay fast."""
    chosen = resolve_state_dir(flag, environ)
    if chosen != DEFAULT_STATE_DIR or flag is not None or _readable(chosen / STATUS_JSON):
        return chosen
    for candidate in fallback_state_dirs(environ, os.getuid()):
        if _readable(candidate / STATUS_JSON):
            return candidate
    return chosen


def _readable(path: Path) -> bool:
    """A file this process may read (a root-only /run/ascend-node is not one for uid 1001)."""
    return os.access(path, os.R_OK)


def ensure_state_dir(state_dir: Path) -> None:
    """Create the state dir (mode 0750) and its parents; refuse a non-directory."""
    try:
        state_dir.mkdir(mode=0o750, parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError(
            f"cannot create state dir {state_dir}: {exc.strerror or exc}",
            "set --state-dir / ASCEND_NODE_STATE_DIR to a writable directory",
        ) from exc
    if state_dir.is_symlink() or not state_dir.is_dir():
        raise ConfigError(f"state dir {state_dir} is not a directory",
                          "point --state-dir at a directory")


@dataclass(frozen=True)
class StatusDoc:
    """`<state-dir>/status.json`, schema version 1."""

    state: str
    phase: str
    command: str
    exit_code: Optional[int] = None
    message: str = ""
    run_id: Optional[str] = None
    attempt_id: Optional[str] = None
    node: Optional[str] = None
    pid: int = field(default_factory=os.getpid)
    updated_at: float = field(default_factory=time.time)
    schema_version: int = 1

    def __post_init__(self) -> None:
        if self.state not in STATES:
            raise ValueError(f"state {self.state!r} is not one of {', '.join(STATES)}")

    def replace(self, **changes: Any) -> StatusDoc:
        return dataclasses.replace(self, **changes)

    def to_json(self) -> dict[str, Any]:
        return {"schema_version": self.schema_version, **{
            f.name: getattr(self, f.name) for f in dataclasses.fields(self)
            if f.name != "schema_version"}}


_TYPES: dict[str, tuple[type, ...]] = {
    "state": (str,), "phase": (str,), "command": (str,), "exit_code": (int, type(None)),
    "message": (str,), "run_id": (str, type(None)), "attempt_id": (str, type(None)),
    "node": (str, type(None)), "pid": (int,), "updated_at": (float, int),
}
_REQUIRED = ("state", "phase", "command")


def parse_status(raw: bytes) -> StatusDoc:
    """The document in `raw`; ValueError saying what is wrong (pure)."""
    try:
        doc = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as exc:
        raise ValueError(f"not JSON: {exc}") from None
    if not isinstance(doc, dict):
        raise ValueError("not a JSON object")
    if doc.get("schema_version") != 1:
        raise ValueError(f"schema_version {doc.get('schema_version')!r} is not 1")
    unknown = sorted(set(doc) - set(_TYPES) - {"schema_version"})
    if unknown:
        raise ValueError(f"unknown field {unknown[0]!r}")
    for name in _REQUIRED:
        if name not in doc:
            raise ValueError(f"field {name!r} is missing")
    for name, value in doc.items():
        types = _TYPES.get(name)
        if types and (not isinstance(value, types) or (
                isinstance(value, bool) and bool not in types)):
            raise ValueError(f"field {name!r} has the wrong type ({value!r})")
    values = {k: v for k, v in doc.items() if k != "schema_version"}
    if "updated_at" in values:
        values["updated_at"] = float(values["updated_at"])
    return StatusDoc(**values)


def write_status(state_dir: Path, status: StatusDoc) -> None:
    """Best effort when the state dir itself is the problem: never mask the real error."""
    from ascend_node.atomic import atomic_write_bytes  # writers only; `status` just reads

    try:
        ensure_state_dir(state_dir)
        atomic_write_bytes(state_dir / STATUS_JSON,
                           (json.dumps(status.to_json(), indent=2) + "\n").encode(),
                           mode=0o644, durable=False)
    except (ConfigError, OSError):
        pass


def read_status(state_dir: Path) -> Optional[StatusDoc]:
    """None when absent; ConfigError naming the file when it cannot be read or trusted."""
    path = state_dir / STATUS_JSON
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise ConfigError(f"cannot read {path}: {exc.strerror}", "check --state-dir") from exc
    try:
        return parse_status(raw)
    except ValueError as exc:
        raise ConfigError(f"{path} is not a valid {STATUS_JSON} ({exc})",
                          "run `ascend-node ranktable` or `boot` again to rewrite it") from exc
