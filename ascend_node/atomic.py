"""Atomic file replacement: readers see the old file or the new one, never a torn one.

Every file the agent writes is read by someone who cannot cope with half a file:
peers polling the shared volume (NFS, CephFS), MindIE reading its `config.json` and
the rank table, probes reading `status.json`. So every write goes the same way:

1. create a temp file *in the target's directory* with `O_CREAT|O_EXCL` (a rename is
   only atomic within one filesystem, and EXCL means we never write through a file or
   symlink someone else planted under our temp name);
2. write everything, set mode and owner on the open descriptor (`fchmod`/`fchown`;
   without an owner to set, the temp is created with its mode and `fchmod` only repairs
   what the umask took), so the file never appears under its final name with the wrong
   mode or owner — MindIE rejects a config or rank table that is group-writable or owned
   by another uid;
3. `fsync` the data, `rename` over the target, `fsync` the directory so the rename
   itself survives a crash;
4. on any failure, remove the temp file: nothing half-written is ever left behind.

Errors: this module raises the `OSError` it met (PermissionError, FileNotFoundError,
IsADirectoryError, `OSError(ENOSPC)`...) unchanged. It cannot know whether the path
is the shared volume (SharedVolumeError), the state dir or MindIE's config (ConfigError),
and the exit code and hint depend on that — so the caller wraps it, naming the path.

A symlink at the target path is *replaced* by a regular file (rename does not follow
links). That is deliberate: MindIE refuses symlinked config and rank-table files.
"""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
import stat
from typing import Optional, Union

PathLike = Union[str, "os.PathLike[str]"]

# Filesystems that cannot fsync a directory say so with one of these; the data is
# already fsynced and renamed, so there is nothing better to do than carry on.
_DIR_FSYNC_UNSUPPORTED = {errno.EINVAL, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EBADF}


def _temp_name(target: str) -> str:
    directory, base = os.path.split(target)
    # A leading dot keeps temps out of `ls` and out of globs like `*.json`; pid and
    # random suffix keep concurrent writers (threads, pods on a shared volume) apart.
    return os.path.join(directory, f".{base}.tmp-{os.getpid()}-{secrets.token_hex(4)}")


def _fsync_dir(directory: str) -> None:
    flags = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(directory or ".", flags)
    except OSError as exc:
        if exc.errno in _DIR_FSYNC_UNSUPPORTED or exc.errno == errno.EACCES:
            return
        raise
    try:
        os.fsync(fd)
    except OSError as exc:
        if exc.errno not in _DIR_FSYNC_UNSUPPORTED:
            raise
    finally:
        os.close(fd)


def atomic_write_bytes(
    path: PathLike,
    data: bytes,
    mode: int = 0o640,
    uid: Optional[int] = None,
    gid: Optional[int] = None,
    *,
    exclusive: bool = False,
    durable: bool = True,
) -> None:
    """Replace `path` with `data` atomically, as a regular file with `mode` (umask ignored).

    `uid`/`gid`: owner to give the file (None = leave as created, i.e. the running
    uid and its group). Changing the owner needs root (or CAP_CHOWN); otherwise the
    PermissionError is raised and nothing is written.

    `exclusive`: create `path` only if nothing is there (FileExistsError otherwise),
    still never showing a partial file: the complete temp file is hard-linked to the
    name, which the server does atomically (the classic NFS-safe exclusive create).

    `durable=False`: no fsync of the data nor of the directory. Readers still see the old
    file or the new one, never a torn one (the rename is atomic whatever the disk does);
    what is given up is only that the new file survives a crash of the machine. For files
    that are rewritten on every start and describe that start (`status.json`, the
    pre-flight's verdict, the timeline summary): two fsyncs each are two disk flushes (two
    NFS COMMITs on the shared volume) on every pod's critical path, for a file whose loss
    in a crash costs nothing, because the pod starts again and writes it anew.
    """
    if not 0 <= mode <= 0o7777:
        raise ValueError(f"mode {mode:#o} is not a permission mode")
    target = os.fspath(path)
    directory = os.path.dirname(target)
    temp = _temp_name(target)
    flags = (
        os.O_WRONLY
        | os.O_CREAT
        | os.O_EXCL
        | getattr(os, "O_CLOEXEC", 0)
        | getattr(os, "O_NOFOLLOW", 0)
    )
    owned = uid is not None or gid is not None
    # Created with its final mode when nobody else is to own it: a separate `fchmod` is
    # a SETATTR round trip on NFS (issue 29: a follower's publish), needed only when the
    # umask took bits away. A file to be given away is private until its owner is set.
    fd = os.open(temp, flags, 0o600 if owned else mode)
    try:
        try:
            view = memoryview(data)
            while view:
                written = os.write(fd, view)
                view = view[written:]
            if owned or stat.S_IMODE(os.fstat(fd).st_mode) != mode:
                os.fchmod(fd, mode)
            if owned:
                os.fchown(fd, -1 if uid is None else uid, -1 if gid is None else gid)
                # chown clears set-id bits; re-apply the mode the caller asked for.
                os.fchmod(fd, mode)
            if durable:
                os.fsync(fd)
        finally:
            os.close(fd)
        if exclusive:
            _link_exclusive(temp, target)
            os.unlink(temp)
        else:
            os.replace(temp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temp)
        raise
    if durable:
        _fsync_dir(directory)


def _link_exclusive(temp: str, target: str) -> None:
    try:
        os.link(temp, target, follow_symlinks=False)
    except FileExistsError:
        raise
    except OSError:
        # NFS may report a failure for a LINK whose reply was lost and retransmitted
        # although the server made the link: two names on the temp file say it did.
        with contextlib.suppress(OSError):
            if os.stat(temp, follow_symlinks=False).st_nlink == 2:
                return
        raise


def atomic_write_text(
    path: PathLike,
    text: str,
    mode: int = 0o640,
    uid: Optional[int] = None,
    gid: Optional[int] = None,
    encoding: str = "utf-8",
) -> None:
    """`atomic_write_bytes` for text (UTF-8 by default, newlines written as given)."""
    atomic_write_bytes(path, text.encode(encoding), mode=mode, uid=uid, gid=gid)
