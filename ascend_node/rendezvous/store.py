"""Where rendezvous documents live on the shared volume, and how they are read and written.

Layout (ours to choose; docs/design.md, "Files"):

    <shared>/ranktable-<run>.json                    final table (assembler only)
    <shared>/.ascend-node/<run>/attempt.json         current attempt (node 0 only)
    <shared>/.ascend-node/<run>/attempts/<id>/node-<g>.json   one per node (that node only)
    <shared>/.ascend-node/<run>/attempts/<id>/outcome.json    table or abort (node 0 only)
    <shared>/.ascend-node/<run>/attempts/<id>/progress.json   who is missing (node 0 only)
    <shared>/.ascend-node/<run>/attempts/<id>/reach-<g>.json  pre-flight pings (`preflight.reach`)

Every name is known in advance, so a follower never needs a directory listing (network
filesystems cache listings for tens of seconds); node 0 lists the attempt directory only
to learn which slots are new or replaced, right after revalidating it (`cadence`). A name
is not enough on NFS, whose client also caches *negative* lookups for 30-60 s at default
mounts: waiting readers revalidate the directory first (`rendezvous/freshness.py`).
Reads never follow a symlink (`O_NOFOLLOW`) and accept only regular files; writes are
temp file + fsync + rename in the same directory (`ascend_node.atomic`).
"""

from __future__ import annotations

import contextlib
import errno
import functools
import json
import os
import stat
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Generic, Literal, Optional, TypeVar, Union

from pydantic import BaseModel, TypeAdapter, ValidationError

from ascend_node.atomic import atomic_write_bytes
from ascend_node.discover.mounts import PSEUDO_FS_TYPES, Mount, mount_for
from ascend_node.errors import SharedVolumeError
from ascend_node.rendezvous.models import (
    ConflictDoc,
    FailureDoc,
    MemberDoc,
    SlotDoc,
)
from ascend_node.rendezvous.seal import AUTH, AuthProblem, RendezvousKey, seal, unseal, where_of
from ascend_node.rendezvous.volume_call import call, io_error, raise_if_io

MAX_DOC_BYTES = 64 * 1024 * 1024
T = TypeVar("T", bound=BaseModel)


@dataclass(frozen=True)
class Missing:
    path: Path


@dataclass(frozen=True)
class Invalid:
    path: Path
    reason: str
    auth: Optional[AuthProblem] = None  # set when the document failed authentication
    doc: Any = None  # with `auth`: the well-formed document that failed it (not trusted)

    def describe(self) -> str:
        return f"{self.path}: {self.reason}"


@dataclass(frozen=True)
class Valid(Generic[T]):
    path: Path
    doc: T
    stamp: tuple[int, int, int]  # (inode, size, mtime_ns) of what was read


Read = Union[Missing, Invalid, Valid[T]]
SlotAny = Union[MemberDoc, FailureDoc, ConflictDoc]


@dataclass(frozen=True)
class RunPaths:
    shared_dir: Path
    run_id: str

    @property
    def root(self) -> Path:
        return self.shared_dir / ".ascend-node" / self.run_id

    @property
    def attempt_file(self) -> Path:
        return self.root / "attempt.json"

    @property
    def shared_table(self) -> Path:
        return self.shared_dir / f"ranktable-{self.run_id}.json"

    def attempt_dir(self, attempt_id: str) -> Path:
        return self.root / "attempts" / attempt_id

    def slot(self, attempt_id: str, index: int) -> Path:
        return self.attempt_dir(attempt_id) / f"node-{index}.json"

    def outcome(self, attempt_id: str) -> Path:
        return self.attempt_dir(attempt_id) / "outcome.json"

    def progress(self, attempt_id: str) -> Path:
        return self.attempt_dir(attempt_id) / "progress.json"


def read_bytes_nofollow(path: Path, limit: int = MAX_DOC_BYTES) -> Union[bytes, Missing, Invalid]:
    """The file's bytes if it is a regular file reached without a final symlink. An I/O
    error of the volume (a soft mount's EIO, ETIMEDOUT) raises `VolumeIOError`: the file
    may well be there, so it is never reported as Missing."""
    with call("read", path):
        got = _read_bytes(path, limit)
    return got[0] if isinstance(got, tuple) else got


def _read_bytes(path: Path, limit: int
                ) -> Union[tuple[bytes, tuple[int, int, int]], Missing, Invalid]:
    """The bytes and the stamp (inode, size, mtime) of the file they were read from: the
    stamp comes from `fstat` of the open file, not from a `stat` of the name before it —
    on NFS a name's first `stat` is a LOOKUP (and an ACCESS of its directory) the OPEN
    does anyway (issue 29: the join's cost), and the two could see different files."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        return Missing(path)
    except OSError as exc:
        raise_if_io(exc, path, "open")
        if exc.errno == errno.ELOOP:
            return Invalid(path, "is a symbolic link (refused)")
        if exc.errno == errno.ENOTDIR:
            return Missing(path)
        return Invalid(path, f"cannot be opened: {exc.strerror}")
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            return Invalid(path, "is not a regular file (refused)")
        if st.st_size > limit:
            return Invalid(path, f"is {st.st_size} bytes, over the {limit} byte limit")
        chunks = []
        while True:
            chunk = os.read(fd, 1 << 20)
            if not chunk:
                break
            chunks.append(chunk)
            if sum(len(c) for c in chunks) > limit:
                return Invalid(path, f"grew over the {limit} byte limit while read")
        return b"".join(chunks), (st.st_ino, st.st_size, st.st_mtime_ns)
    except OSError as exc:
        raise_if_io(exc, path, "read")
        return Invalid(path, f"cannot be read: {exc.strerror}")
    finally:
        os.close(fd)


@functools.cache
def _slot_validator() -> Callable[[bytes], Any]:
    """Built on first use (the models defer theirs too): a pod pays for the schemas it
    reads, not for every document kind at import."""
    return TypeAdapter(SlotDoc).validate_json


def _validate(path: Path, raw: bytes, validate_json: Callable[[bytes], Any]
              ) -> Union[Any, Invalid]:
    """Fast path: pydantic parses and validates the bytes at once. Only a failure pays
    for a second, plain parse, to say *why* in words an operator can act on."""
    try:
        return validate_json(raw)
    except ValidationError as exc:
        first_error = _first_error(exc)
    try:
        data = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        return Invalid(path, f"is not valid JSON ({exc.__class__.__name__}: {exc}); "
                             "truncated or foreign")
    if isinstance(data, dict) and data.get("schema_version") not in (None, 1):
        return Invalid(path, f"has schema_version {data.get('schema_version')!r}, "
                             "this agent reads 1 (mixed agent versions?)")
    where = ".".join(str(p) for p in first_error["loc"]) or "document"
    return Invalid(path, f"fails validation at {where}: {first_error['msg']}")


def _first_error(exc: ValidationError) -> Any:
    """The error to report: a wrong `kind` first (it explains the rest), else the first.
    Deterministic across pydantic versions, whose error order differs."""
    errors = exc.errors()
    return next((e for e in errors if e["loc"][-1:] == ("kind",)), errors[0])


def _read(path: Path, validate_json: Callable[[bytes], Any], run_id: str,
          attempt_id: Optional[str] = None, key: Optional[RendezvousKey] = None
          ) -> Read[Any]:
    with call("read", path):
        got = _read_bytes(path, MAX_DOC_BYTES)
    if isinstance(got, (Missing, Invalid)):
        return got
    raw, stamp = got
    problem: Optional[AuthProblem] = None
    if key is not None or AUTH.encode() in raw:
        # Only signed documents (or a pod holding a key) pay for the second parse.
        raw, problem = _unsealed(path, raw, key)
    doc = _validate(path, raw, validate_json)
    if isinstance(doc, Invalid):
        return doc
    if getattr(doc, "run_id", run_id) != run_id:
        return Invalid(path, f"belongs to run {doc.run_id!r}, not {run_id!r}")
    if attempt_id is not None and doc.attempt_id != attempt_id:
        return Invalid(path, f"belongs to attempt {doc.attempt_id!r}, not {attempt_id!r}")
    if problem is not None:
        # Reported after the shape checks, so a torn or foreign-shaped file is named as
        # such; a well-formed document that fails here is a forgery or a key mismatch.
        return Invalid(path, problem.reason, problem, doc)
    return Valid(path, doc, stamp)


def _unsealed(path: Path, raw: bytes, key: Optional[RendezvousKey]
              ) -> tuple[bytes, Optional[AuthProblem]]:
    """The document's bytes without its `auth` member, and what failed about it."""
    try:
        data = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError):
        return raw, None  # `_validate` says why, in its words
    if not isinstance(data, dict):
        return raw, None
    problem = unseal(data, key, where_of(path))
    return json.dumps(data, separators=(",", ":")).encode(), problem


def read_doc(path: Path, model: type[T], run_id: str, key: Optional[RendezvousKey] = None
             ) -> Read[T]:
    """Read and validate one document; anything unexpected is Invalid with the reason.
    With `key`, an unsigned or wrongly signed document is Invalid too (`seal`); without,
    a signed one is (it comes from a pod holding a key this one lacks)."""
    return _read(path, model.model_validate_json, run_id, None, key)


def read_slot(path: Path, run_id: str, attempt_id: str, key: Optional[RendezvousKey] = None
              ) -> Read[SlotAny]:
    """A node's slot: a member, failure or conflict document of this attempt."""
    return _read(path, _slot_validator(), run_id, attempt_id, key)


def ensure_dir(path: Path, trusted_root: Path) -> None:
    """Create `path` below `trusted_root`, refusing any component that is not a real dir.

    A symlink planted as `.ascend-node/<run>` could send our writes anywhere.
    """
    rel = path.relative_to(trusted_root)
    current = trusted_root
    for part in rel.parts:
        current = current / part
        try:
            with call("create directory", current):
                os.mkdir(current, 0o755)
        except FileExistsError:
            pass
        except OSError as exc:
            raise volume_error(exc, current, "create directory") from exc
        try:
            with call("inspect", current):
                st = os.lstat(current)
        except OSError as exc:
            raise volume_error(exc, current, "inspect") from exc
        if not stat.S_ISDIR(st.st_mode):
            what = "a symbolic link" if stat.S_ISLNK(st.st_mode) else "not a directory"
            raise SharedVolumeError(
                f"{current} is {what}, refused",
                "remove it, or run `ascend-node clean` for this run",
            )


def check_real_dirs(trusted_root: Path, path: Path) -> bool:
    """Every existing component of `path` below `trusted_root` must be a real directory;
    True when all of them exist (a writer into `path` then need not `ensure_dir` it).

    `O_NOFOLLOW` guards only the last component of a read; a symlink planted as
    `.ascend-node/<run>` or as an attempt directory would otherwise redirect every read.
    Components that do not exist yet are fine (the writer creates them safely).
    """
    current = trusted_root
    for part in path.relative_to(trusted_root).parts:
        current = current / part
        try:
            with call("inspect", current):
                st = os.lstat(current)
        except FileNotFoundError:
            return False
        except OSError as exc:
            raise volume_error(exc, current, "inspect") from exc
        if not stat.S_ISDIR(st.st_mode):
            what = "a symbolic link" if stat.S_ISLNK(st.st_mode) else "not a directory"
            raise SharedVolumeError(
                f"{current} is {what}, refused",
                "remove it, or run `ascend-node clean` for this run",
            )
    return True


def check_writable(shared_dir: Path) -> None:
    """Fail at once on a read-only mount, instead of waiting for peers until the timeout."""
    try:
        with call("inspect", shared_dir):
            flags = os.statvfs(shared_dir).f_flag
    except OSError as exc:
        raise volume_error(exc, shared_dir, "inspect") from exc
    if flags & os.ST_RDONLY:  # volume_error names a pseudo-filesystem (/sys) first
        raise volume_error(OSError(errno.EROFS, os.strerror(errno.EROFS)), shared_dir,
                           "write to")
    pseudo = _pseudo_mount(shared_dir)
    if pseudo is not None:
        raise _pseudo_error(pseudo, shared_dir, "write to", None)


def volume_error(exc: OSError, path: Path, action: str) -> SharedVolumeError:
    """Turn an OSError on the shared volume into a one-line cause with a remedy.

    A kernel pseudo-filesystem given as the shared directory (`/proc`, `/sys`) answers
    with ENOENT or EACCES, which would read as a missing or locked-down directory: the
    mount table names what it really is (read only here, on the error path). An I/O
    error of the volume itself (EIO, ETIMEDOUT...) is a `VolumeIOError`, which the
    rendezvous retries within its deadline (`volume_call`); it is told first, as the
    mount table's lookup resolves the path through the volume that failed.
    """
    failed = io_error(exc, path, action)
    if failed is not None:
        return failed
    pseudo = _pseudo_mount(path)
    if pseudo is not None:
        return _pseudo_error(pseudo, path, action, exc)
    hints = {
        errno.EROFS: "the shared volume is mounted read-only; mount the PVC read-write",
        errno.ENOSPC: "the shared volume is full; free space on the PVC",
        errno.EDQUOT: "the shared volume's quota is exhausted; free space on the PVC",
        errno.EACCES: "the agent's user cannot write there; check the PVC's owner and mode",
        errno.EPERM: "the agent's user cannot write there; check the PVC's owner and mode",
    }
    return SharedVolumeError(
        f"cannot {action} {path}: {exc.strerror or exc}",
        hints.get(exc.errno or 0, "check the shared volume (--shared-dir)"),
    )


def _pseudo_mount(path: Path) -> Optional[Mount]:
    with call("resolve", path):  # `mount_for` resolves symlinks: calls on the volume
        mount = mount_for(str(path))
    return mount if mount is not None and mount.fs_type in PSEUDO_FS_TYPES else None


def _pseudo_error(mount: Mount, path: Path, action: str, exc: Optional[OSError]
                  ) -> SharedVolumeError:
    why = f" ({exc.strerror or exc})" if exc is not None else ""
    return SharedVolumeError(
        f"cannot {action} {path}: {mount.mount_point} is a {mount.fs_type} pseudo-filesystem "
        f"of the kernel, not a shared volume{why}",
        "point --shared-dir (ASCEND_NODE_SHARED_DIR, else MODEL_PATH) at the mount of the "
        "job's shared PVC",
    )


def write_doc(path: Path, doc: BaseModel, trusted_root: Path, mode: int = 0o644,
              key: Optional[RendezvousKey] = None) -> None:
    """Atomically publish one document (the caller is its only writer), signed with
    `key` when there is one."""
    ensure_dir(path.parent, trusted_root)
    try:
        with call("write", path):
            atomic_write_bytes(path, encode(doc, path, key), mode=mode)
    except OSError as exc:
        raise volume_error(exc, path, "write") from exc


Created = Literal["created", "exists", "unsupported"]

# What a filesystem without hard links answers to link(): the caller cannot create
# exclusively there and must assume the worst (someone else may be in the slot).
_NO_LINKS = {errno.EPERM, errno.EOPNOTSUPP, errno.ENOTSUP, errno.ENOSYS}


def create_doc(path: Path, doc: BaseModel, trusted_root: Path, mode: int = 0o644,
               key: Optional[RendezvousKey] = None, parent_checked: bool = False,
               durable: bool = True) -> Created:
    """Publish `doc` only if nothing is at `path` yet, atomically (a complete file is
    hard-linked to the name): "created", "exists" (nothing written), or "unsupported"
    when the filesystem has no hard links (nothing written). `parent_checked`: the
    caller has just seen every directory above `path` exist as a real one
    (`check_real_dirs` True), so they are not created and inspected again (on NFS a
    `mkdir` of an existing name and its `lstat` each cost a round trip: a follower's
    join at N >= 64, docs/rendezvous.md "The start burst").

    `durable=False` (a member's slot): no fsync of the data nor of the directory. The
    directory's fsync is an open of it (a GETATTR on NFS, one more round trip of the
    join) and flushes nothing there: an NFS server commits every change but an UNSTABLE
    WRITE to stable storage before it answers (RFC 1813's "stable storage" rule, which
    NFSv4 keeps), so the LINK and the REMOVE are stable when they return; the client's
    close flushes and commits the data before the LINK is sent (close-to-open), so no
    reader sees the name without the bytes, here or on a local disk. A slot describes
    one start of its pod, which a restart after a crash of the machine publishes anew
    (as `status.json`); node 0's verdict stays durable."""
    if not parent_checked:
        ensure_dir(path.parent, trusted_root)
    try:
        with call("create", path):
            atomic_write_bytes(path, encode(doc, path, key), mode=mode, exclusive=True,
                               durable=durable)
    except FileExistsError:
        return "exists"
    except OSError as exc:
        if exc.errno in _NO_LINKS:
            return "unsupported"
        raise volume_error(exc, path, "write") from exc
    return "created"


def encode(doc: BaseModel, path: Path, key: Optional[RendezvousKey] = None) -> bytes:
    """The bytes `write_doc` puts at `path`: compact JSON, with `auth` under a key."""
    payload = seal(doc.model_dump(mode="json"), key, where_of(path))
    return (json.dumps(payload, separators=(",", ":")) + "\n").encode()


def volume_clock_ns(directory: Path) -> Optional[int]:
    """The shared volume's own clock, read as the mtime of a probe file created in
    `directory` and removed at once (None when that cannot be done). Pods on different
    hosts compare times on the volume by this clock, never by their own."""
    with call("create a probe file in", directory):
        try:
            fd, name = tempfile.mkstemp(prefix=".clock-", dir=directory)
        except OSError:
            return None
        try:
            return os.fstat(fd).st_mtime_ns
        except OSError:
            return None
        finally:
            os.close(fd)
            with contextlib.suppress(OSError):
                os.unlink(name)


def file_mtime_ns(path: Path) -> Optional[int]:
    try:
        with call("inspect", path):
            return os.stat(path, follow_symlinks=False).st_mtime_ns
    except OSError:
        return None
