"""Make a network filesystem show what another pod just created, before we look for it.

A Linux NFS client mounted with the default options (`lookupcache=all`) caches every
lookup, *negative ones included*, until the parent directory's cached attributes expire:
`acdirmin` 30 s, growing to `acdirmax` 60 s while the directory looks unchanged (nfs(5)).
A pod that opened `outcome.json` before node 0 wrote it keeps getting ENOENT for up to a
minute. Measured on two real clients of a kernel nfsd (docs/rendezvous.md, benchmarks.md): opening
and closing the parent directory right before the `open()` makes the client revalidate
the directory (close-to-open applies to directories too), notice that it changed, drop
the cached lookups below it and see the file within one poll; `stat()` of the directory
does not help. Listing the directory works as well, but costs a READDIR that grows with
the number of entries, where an open is one attribute round trip whatever the size.

A directory that did not exist when a pod first looked is a cached negative lookup in
*its* parent, so when the directory itself cannot be opened we walk down from the
trusted root, revalidating each level, and stop at the first one that is still missing.

On local disks and sshfs (which caches no negative lookups) the open costs a few
microseconds and changes nothing, so the same code runs everywhere.

One case the open cannot cover (measured on the test bed, `bench/bench_nfs_visibility.py`):
when two changes to a directory land in one tick of the server's timestamp clock, the
directory's mtime does not move between them, so a client that cached the attributes in
that tick (typically the post-op attributes of its own create) sees "unchanged" and keeps
its negative entry — on NFS v3 until the directory changes again, which in a finished
rendezvous may be never. A listing (READDIRPLUS) replaces the stale entries. So a
directory that is watched for long is also listed now and then: at most every
`LIST_EVERY` seconds, and no more often than `LIST_PER_ENTRY` seconds per entry it held
last time, which bounds what each waiting pod asks of the server to 50 entries a second
at any N (N followers listing an attempt directory of N slots: every 3.3 s at N = 64,
every 22 s at N = 1000); a calm follower lists only at its full looks (`cadence`), at
most every 5 s. A stall of this kind then lasts seconds, not forever.

`glance` is the cheap half of `cadence`: one directory open whose attributes say whether
anything changed; `nudge` is node 0's way of making that so.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Callable, Optional

from ascend_node.rendezvous.volume_call import call, raise_if_io

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC

Stamp = tuple[str, int, int, int, int, int]
"""What a glance compares: the directory looked at, its inode, mtime, ctime, size, links."""


def _stamp_and_device(path: Path) -> Optional[tuple[Stamp, int]]:
    """Open `path` as a real directory (revalidating it, one GETATTR on NFS) and return
    the attributes it now has, and the device number of the filesystem holding it; None
    when it is missing or not a real directory."""
    with call("open", path):
        try:
            fd = os.open(path, _DIR_FLAGS)
        except OSError as exc:
            raise_if_io(exc, path, "open")
            return None
        try:
            st = os.fstat(fd)
        except OSError as exc:
            raise_if_io(exc, path, "inspect")
            return None
        finally:
            os.close(fd)
    return ((str(path), st.st_ino, st.st_mtime_ns, st.st_ctime_ns, st.st_size, st.st_nlink),
            st.st_dev)


def nudge(path: Path) -> None:
    """Change directory `path`'s attributes so that every pod glancing at it sees a
    difference (`cadence`: "look now"). Its mtime is set to the server's time; should that
    equal what it was (a change in the same tick of the server's clock), to one microsecond
    later, so a glance can never mistake the nudge for no change. Best effort: a pod that
    misses it looks within `cadence.LOOK_EVERY` anyway."""
    with call("set the time of", path):
        _nudge(path)


def _nudge(path: Path) -> None:
    try:
        fd = os.open(path, _DIR_FLAGS)
    except OSError:
        return
    try:
        before = os.fstat(fd)
        os.utime(fd)
        after = os.fstat(fd)
        if after.st_mtime_ns == before.st_mtime_ns:
            os.utime(fd, ns=(after.st_atime_ns, before.st_mtime_ns + 1_000))
    except OSError:
        pass
    finally:
        os.close(fd)


def attributes_are_current(path: Path, mountinfo: Optional[str] = None,
                           device: Optional[int] = None) -> bool:
    """False when `path` lies on a FUSE filesystem (sshfs and the like): those cache a
    directory's attributes and listing for seconds (sshfs: `cache_timeout`, 20 s), so a
    glance or a listing may not show a change that a lookup by name shows at once. NFS,
    local disks and the rest revalidate on open. Reads /proc/self/mountinfo (proc(5)):
    the mount whose device number (`major:minor`) is `device` — the `st_dev` of a file
    already opened there, so no call on the volume is needed (a `realpath` of `path` is a
    GETATTR of each component on NFS: issue 29, the join's cost) — else the longest mount
    point holding `path`; when it cannot be read, True."""
    if mountinfo is None:
        try:
            mountinfo = Path("/proc/self/mountinfo").read_text(encoding="utf-8",
                                                               errors="replace")
        except OSError:
            return True
    if device is not None:
        wanted = f"{os.major(device)}:{os.minor(device)}"
        for line in mountinfo.splitlines():
            left, sep, right = line.partition(" - ")
            fields, tail = left.split(), right.split()
            if sep and len(fields) >= 5 and tail and fields[2] == wanted:
                return not tail[0].startswith("fuse")
    with call("resolve", path):  # resolving symlinks: calls on the volume
        real = os.path.realpath(path)
    best, fs_type = -1, ""
    for line in mountinfo.splitlines():
        left, sep, right = line.partition(" - ")
        fields, tail = left.split(), right.split()
        if not sep or len(fields) < 5 or not tail:
            continue
        point = fields[4].replace("\\040", " ").rstrip("/") or "/"
        inside = real == point or real.startswith(point + "/") or point == "/"
        if inside and len(point) >= best:
            best, fs_type = len(point), tail[0]
    return not fs_type.startswith("fuse")


def list_files(path: Path) -> Optional[dict[str, tuple[int, int, int]]]:
    """Each regular file in directory `path` -> (inode, size, mtime_ns): one listing
    (READDIR/READDIRPLUS, a few entries' worth of RPCs per hundred entries) instead of a
    lookup per name. None when the directory cannot be listed."""
    out: dict[str, tuple[int, int, int]] = {}
    try:
        with call("list", path), os.scandir(path) as entries:
            for entry in entries:
                try:
                    st = entry.stat(follow_symlinks=False)
                except OSError as exc:
                    raise_if_io(exc, path / entry.name, "inspect")
                    continue
                out[entry.name] = (st.st_ino, st.st_size, st.st_mtime_ns)
    except OSError as exc:
        raise_if_io(exc, path, "list")
        return None
    return out


def _open_close(path: Path) -> bool:
    """True when `path` opened as a real directory (and was thereby revalidated)."""
    try:
        with call("open", path):
            fd = os.open(path, _DIR_FLAGS)
            os.close(fd)
    except OSError as exc:
        # Missing, a symlink (ELOOP) or not a directory: the readers below report
        # those with the path; revalidation has nothing to add. An I/O error of the
        # volume is not "missing" (`volume_call`).
        raise_if_io(exc, path, "open")
        return False
    return True


def revalidate_dir(path: Path, trusted_root: Path) -> bool:
    """Revalidate `path` (a directory at or below `trusted_root`) and return whether it exists.

    One directory open when the directory is known; when it is not, one open per level
    from `trusted_root` down to the first level that is still missing.
    """
    if _open_close(path):
        return True
    current = trusted_root
    if not _open_close(current):
        return False
    for part in path.relative_to(trusted_root).parts:
        current = current / part
        if not _open_close(current):
            return False
    return True


LIST_EVERY = 2.0
"""Seconds between listings of a watched directory (the same-tick fallback), at least."""

LIST_PER_ENTRY = 0.02
"""Seconds added to that interval per entry the directory held at its last listing."""


def _listed(path: Path) -> int:
    """List `path` (a READDIR that refreshes the client's entries); how many it held."""
    try:
        with call("list", path), os.scandir(path) as entries:
            return sum(1 for _ in entries)
    except OSError as exc:
        raise_if_io(exc, path, "list")
        return 0


class Freshness:
    """Revalidates each watched directory at most once per poll.

    A poll reads several files of one directory (a follower's attempt directory holds
    the outcome, progress and its own slot): one open of the directory serves them all,
    so the cost per poll is one directory open per directory watched, not per file,
    plus a listing of it every few seconds while it stays watched (see above).
    """

    def __init__(self, trusted_root: Path,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.trusted_root = trusted_root
        self.clock = clock
        self._done: dict[Path, bool] = {}
        self._next_listing: dict[Path, float] = {}
        self._current: Optional[bool] = None
        self._device: Optional[int] = None  # of the volume, from the first glance

    @property
    def attributes_current(self) -> bool:
        """Whether glances and listings of this volume can be trusted (once per pod)."""
        if self._current is None:
            self._current = attributes_are_current(self.trusted_root, device=self._device)
        return self._current

    def new_poll(self) -> None:
        """Forget what was revalidated: the next read of each directory looks again."""
        self._done.clear()

    def dir(self, path: Path) -> bool:
        """Revalidate `path` unless this poll already did; True when it exists."""
        known = self._done.get(path)
        if known is None:
            known = self._done[path] = revalidate_dir(path, self.trusted_root)
            if known:
                self.maybe_list(path)
        return known

    def maybe_list(self, path: Path) -> None:
        """List `path` if it has been watched for long enough since its last listing."""
        now = self.clock()
        due = self._next_listing.get(path)
        if due is None:  # first sight: the open suffices until the directory is watched long
            self._next_listing[path] = now + LIST_EVERY
        elif now >= due:
            self._next_listing[path] = now + LIST_EVERY + LIST_PER_ENTRY * _listed(path)

    def glance(self, path: Path) -> Optional[Stamp]:
        """The attributes of directory `path`, or of its deepest existing ancestor up to the
        trusted root when it does not exist yet: one directory open, whatever the depth
        (an ancestor's failed opens hit the client's cached negative entries). A `path`
        that exists counts as revalidated for this poll (no listing: a caller that goes on
        to read from it calls `maybe_list`)."""
        current = path
        while True:
            got = _stamp_and_device(current)
            if got is not None:
                if current == path:
                    self._done[path] = True
                self._device = got[1]
                return got[0]
            if current == self.trusted_root or current.parent == current:
                return None
            current = current.parent

    def opened(self, path: Path) -> bool:
        """Whether this poll has opened `path` as an existing directory (a glance or a
        revalidation), without asking the volume again."""
        return self._done.get(path, False)

    def relist(self, path: Path) -> None:
        """List `path` now (a listing replaces stale cached entries, see above)."""
        if self.dir(path):
            self._next_listing[path] = (self.clock() + LIST_EVERY
                                        + LIST_PER_ENTRY * _listed(path))

    def file(self, path: Path) -> Path:
        """Revalidate the directory holding `path`, then hand `path` back for reading."""
        self.dir(path.parent)
        return path
