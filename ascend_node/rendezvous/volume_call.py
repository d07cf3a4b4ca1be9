"""Every call the agent makes on the shared volume, watched: a volume that stops answering
cannot stop the clock.

On a `hard` NFS mount (the default) a call to a server that does not answer waits in the
kernel until the server answers again — minutes, or forever — and a Python thread inside
that system call cannot be interrupted or cancelled. Measured on the NFS bed (issue 29):
with the server frozen, every waiting pod sat in one `open()`, printed nothing more and
outlived its `--timeout` by minutes, so Volcano never learnt anything.

So the work on the volume runs in a worker thread (`run_watched`), and the main thread only
waits for it with a timeout: it keeps the clock, the progress lines and the signals
(Python runs signal handlers in the main thread only). Each door on the volume
(`rendezvous/store.py`, `rendezvous/freshness.py`) marks the call it is in (`call`: what,
on which path, since when) so the main thread can say what has not answered, and for how
long. At the deadline the main thread raises `VolumeUnanswered` (exit 4, the contract's
code for a time-out), the command reports it, writes `status.json` and the termination
log (both local, not on the volume) and ends the process with `os._exit`, which does not
wait for the stuck thread (`abandoned`). The kernel allows that: since Linux 2.6.25 NFS
waits on a hard mount are `TASK_KILLABLE` — a fatal signal, as the process's exit sends
its other threads, ends them (nfs(5), "hard": the call "is interruptible by a fatal
signal"); the process then leaves at most a temp file that readers ignore (`atomic`).

Why a thread and not a child process per call: a call is a few microseconds on a local
disk and one round trip on NFS, and a rendezvous makes thousands; a thread hand-off of the
whole rendezvous costs nothing per call, where a process per call would cost a fork and a
pipe each time (and a child process for the whole rendezvous would have to ship every
document back). The mark costs about a microsecond (`bench/bench_volume_call.py`).

Soft mounts (`soft`, `softerr`) end an unanswered call with EIO or ETIMEDOUT instead:
`io_error` turns those errnos into `VolumeIOError`, never a "file absent" that would read
as a missing peer; the rendezvous retries within its deadline (`protocol.Rendezvous`).
"""

from __future__ import annotations

import errno
import logging
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Optional, TypeVar, Union

from ascend_node.discover.mounts import Mount, mount_of, parse_mountinfo
from ascend_node.errors import PeerTimeout, SharedVolumeError

log = logging.getLogger("ascend_node.rendezvous")

T = TypeVar("T")

STUCK_AFTER = 3.0
"""Seconds a single call may take before the main thread says the volume has not answered
(a healthy NFS round trip takes milliseconds; a loaded server, a few hundred)."""

GRACE = 2.0
"""Seconds past the deadline the main thread still waits for the worker, which reports its
own time-out (naming the missing nodes) within a poll when the volume answers."""

TICK = 0.25
"""Seconds between the main thread's looks at the worker."""

VOLUME_ERRNOS = frozenset({
    errno.EIO, errno.ETIMEDOUT, errno.ESTALE, errno.ENOLCK, errno.EREMOTEIO,
    errno.EHOSTDOWN, errno.EHOSTUNREACH, errno.ENETUNREACH, errno.ECONNREFUSED,
    errno.ECONNRESET,
})
"""What a network filesystem answers when its server did not (soft mounts: EIO, or
ETIMEDOUT with `softerr`; ESTALE after a server lost a file handle): the volume failed,
which says nothing about whether the file is there."""


class VolumeIOError(SharedVolumeError):
    """A call on the shared volume failed with an I/O error (soft mount, server gone):
    the file's presence is unknown. Retried within the deadline; exit 1 if it escapes."""

    def __init__(self, cause: str, hint: str, path: str, code: int) -> None:
        super().__init__(cause, hint)
        self.path = path
        self.errno = code


class VolumeUnanswered(PeerTimeout):
    """The deadline passed while the shared volume did not answer (exit 4, retryable)."""


@dataclass(frozen=True)
class Call:
    action: str
    path: str
    since: float


_Mark = tuple[str, Union[str, Path], float]
_in_flight: dict[int, _Mark] = {}  # thread id -> (action, path, since): cheap to set
_abandoned: list[threading.Thread] = []
_last_io_error: list[VolumeIOError] = []  # the latest only: named if the deadline comes
_now = time.monotonic
_ident = threading.get_ident


class call:
    """Mark the current thread as inside `action` on `path` until the block ends (a
    dict store and a clock read: about a microsecond, `bench/bench_volume_call.py`)."""

    __slots__ = ("_action", "_ident", "_path", "_prev")

    def __init__(self, action: str, path: Union[str, Path]) -> None:
        self._action = action
        self._path = path

    def __enter__(self) -> None:
        ident = self._ident = _ident()
        self._prev = _in_flight.get(ident)
        _in_flight[ident] = (self._action, self._path, _now())

    def __exit__(self, *exc: object) -> None:
        if self._prev is None:
            del _in_flight[self._ident]
        else:
            _in_flight[self._ident] = self._prev


def in_flight(thread: threading.Thread) -> Optional[Call]:
    """The call `thread` is in on the volume, if any."""
    mark = _in_flight.get(thread.ident or -1)
    return None if mark is None else Call(mark[0], str(mark[1]), mark[2])


def abandoned() -> bool:
    """True when a worker was left inside a call: the process must end with `os._exit`
    (a normal exit would wait on nothing, but may block flushing what that thread holds)."""
    return any(t.is_alive() for t in _abandoned)


def io_error(exc: OSError, path: Union[str, Path], action: str) -> Optional[VolumeIOError]:
    """`exc` as a `VolumeIOError` when it says the volume failed (not the file); else None."""
    if exc.errno not in VOLUME_ERRNOS:
        return None
    return VolumeIOError(
        f"cannot {action} {path}: {exc.strerror or exc} ({errno.errorcode.get(exc.errno, '?')}"
        f"{server_note(str(path))})",
        "the shared volume's server did not answer (a soft mount gives up with EIO or "
        "ETIMEDOUT): check the NFS server and the network to it",
        str(path), exc.errno or 0)


def raise_if_io(exc: OSError, path: Union[str, Path], action: str) -> None:
    """Raise `VolumeIOError` for a volume failure; return for anything else (ENOENT...)."""
    err = io_error(exc, path, action)
    if err is not None:
        raise err from exc


def mount_holding(path: str, mountinfo: Optional[str] = None) -> Optional[Mount]:
    """The mount holding `path`, read from /proc/self/mountinfo (local, never the volume:
    the path is made absolute by text, not resolved through the filesystem)."""
    if mountinfo is None:
        try:
            with open("/proc/self/mountinfo", encoding="utf-8", errors="replace") as fh:
                mountinfo = fh.read()
        except OSError:
            return None
    return mount_of(os.path.abspath(path), parse_mountinfo(mountinfo))


def nfs_server(mount: Mount) -> Optional[str]:
    """The server of an NFS mount: `addr=` of its options, else the host of its source."""
    if not mount.fs_type.startswith("nfs"):
        return None
    addr = mount.options.get("addr")
    if addr:
        return addr
    host, sep, _ = mount.source.rpartition(":")
    return host.strip("[]") if sep and host else None


def server_note(path: str, mountinfo: Optional[str] = None) -> str:
    """`, NFS server 10.99.0.1` (or `, nfs4 … on …`) for messages; empty on a local disk."""
    mount = mount_holding(path, mountinfo)
    if mount is None:
        return ""
    server = nfs_server(mount)
    if server is not None:
        return f", NFS server {server}"
    if mount.fs_type in ("ext4", "xfs", "btrfs", "tmpfs", "overlay"):
        return ""
    return f", {mount.fs_type} {mount.source}"


def describe(stuck: Optional[Call], fallback: Union[str, Path]) -> str:
    """`open of /shared/.ascend-node/r/attempt.json, NFS server 10.99.0.1`."""
    if stuck is None:
        return f"{fallback}{server_note(str(fallback))}"
    return f"{stuck.action} of {stuck.path}{server_note(stuck.path)}"


def stall_line(stuck: Call, seconds: float) -> str:
    return (f"the shared volume has not answered for {seconds:.0f} s "
            f"({describe(stuck, stuck.path)})")


def run_watched(
    work: Callable[[], T], deadline: float, where: Union[str, Path], timeout: float,
    progress_every: float = 10.0,
    on_stall: Optional[Callable[[str], None]] = None,
    clock: Callable[[], float] = time.monotonic,
    grace: float = GRACE,
    name: str = "volume",
    what: str = "the peers' state could not be read",
    stuck_only: bool = False,
) -> T:
    """`work()` in a worker thread; its result or its exception. While the worker sits in
    one call on the volume for `STUCK_AFTER` s or more, logs (and hands `on_stall`) a line
    saying so, every `progress_every` s; once `deadline` + `grace` passes, raises
    `VolumeUnanswered` naming the call (or `where`) and `what` could not be done, and
    leaves the worker behind. `stuck_only`: past the deadline, wait on while the worker
    is not stuck on the volume (work with bounds of its own, e.g. a pip install whose
    child has a time-out: only a stuck call on the volume is cut short)."""
    box: dict[str, object] = {}
    done = threading.Event()

    def body() -> None:
        try:
            box["value"] = work()
        except BaseException as exc:  # handed to the main thread, re-raised there
            box["error"] = exc
        finally:
            done.set()

    worker = threading.Thread(target=body, name=name, daemon=True)
    worker.start()
    last_note = -1e18
    try:
        while not done.wait(TICK):
            now = clock()
            stuck = in_flight(worker)
            if (stuck is not None and now - stuck.since >= STUCK_AFTER
                    and now - last_note >= progress_every):
                last_note = now
                line = stall_line(stuck, now - stuck.since)
                log.warning("%s", line)
                if on_stall is not None:
                    on_stall(line)
            if now >= deadline + grace and not (
                    stuck_only and (stuck is None or now - stuck.since < STUCK_AFTER)):
                raise unanswered(stuck, where, timeout, now, what)
    except BaseException:
        if not done.is_set():
            _abandoned.append(worker)  # SIGTERM, or the deadline: do not wait for it
        raise
    if "error" in box:
        raise box["error"]  # type: ignore[misc]
    return box["value"]  # type: ignore[return-value]


OPERATOR_WAIT = 60.0
"""Seconds `report` and `clean` (commands without a `--timeout`) wait for a shared volume
that does not answer before they exit 4 naming it: far more than reading or removing a
1,024-node run takes on a healthy NFS server (a few thousand round trips), far less than
an operator waits before suspecting a hang."""


def bounded(work: Callable[[], T], seconds: float, where: Union[str, Path], what: str,
            name: str = "volume") -> T:
    """`work()` watched with a deadline `seconds` from now, for the commands that have no
    `--timeout` of their own (`report`, `clean`, `doctor`): a volume that does not answer
    ends them with exit 4 naming it, instead of a hang."""
    return run_watched(work, time.monotonic() + seconds, where, seconds,
                       progress_every=max(seconds / 3, STUCK_AFTER), grace=0.0, name=name,
                       what=what)


def unanswered(stuck: Optional[Call], where: Union[str, Path], timeout: float,
               now: float, what_failed: str = "the peers' state could not be read"
               ) -> VolumeUnanswered:
    if stuck is not None:
        what = (f"the shared volume has not answered for {now - stuck.since:.0f} s "
                f"({describe(stuck, where)})")
    else:
        what = f"the shared volume did not answer in time ({describe(None, where)})"
    if _last_io_error:
        what += f"; its last I/O error: {_last_io_error[0].cause}"
    return VolumeUnanswered(
        f"timed out after {timeout:g} s: {what}; {what_failed}",
        "the shared volume (its NFS server or storage) stopped answering; check it, "
        "then restart the job; exit 4 is retryable",
    )


RETRY_EVERY = 1.0
"""Seconds between tries after the volume failed a call with an I/O error (a soft mount's
EIO or ETIMEDOUT has already waited `timeo` times `retrans` in the kernel)."""


def retrying(work: Callable[[], T], deadline: float, timeout: float,
             clock: Callable[[], float] = time.monotonic,
             sleep: Callable[[float], None] = time.sleep) -> T:
    """`work()`, tried again every `RETRY_EVERY` s while it fails with `VolumeIOError`
    (each distinct failure logged once) until `deadline`, then `VolumeUnanswered` naming
    the last failure. A time-out of `work` itself after such failures says so too: the
    volume's errors may be why the peers did not arrive."""
    failed: Optional[VolumeIOError] = None
    failures = 0
    while True:
        try:
            return work()
        except VolumeIOError as exc:
            _last_io_error[:] = [exc]
            failures += 1
            if failed is None or failed.cause != exc.cause:
                log.warning("%s; retrying until the deadline", exc.cause)
            failed = exc
        except PeerTimeout as exc:
            if failed is None or isinstance(exc, VolumeUnanswered):
                raise
            raise type(exc)(f"{exc.cause}; the shared volume failed {failures} time(s) "
                            f"with I/O errors meanwhile, the last: {failed.cause}",
                            exc.hint) from exc
        if clock() >= deadline:
            raise VolumeUnanswered(
                f"timed out after {timeout:g} s: the shared volume failed {failures} "
                f"time(s) with I/O errors, the last: {failed.cause}",
                "the shared volume (its NFS server or storage) did not answer; check it, "
                "then restart the job; exit 4 is retryable",
            ) from failed
        sleep(min(RETRY_EVERY, max(0.0, deadline - clock())))
