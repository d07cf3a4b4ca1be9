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
every 22 s at N = 1000). A stall of this kind then lasts seconds, not forever.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Callable

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def _open_close(path: Path) -> bool:
    """True when `path` opened as a real directory (and was thereby revalidated)."""
    try:
        fd = os.open(path, _DIR_FLAGS)
    except OSError:
        # Missing, a symlink (ELOOP) or not a directory: the readers below report
        # those with the path; revalidation has nothing to add.
        return False
    os.close(fd)
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
        with os.scandir(path) as entries:
            return sum(1 for _ in entries)
    except OSError:
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

    def new_poll(self) -> None:
        """Forget what was revalidated: the next read of each directory looks again."""
        self._done.clear()

    def dir(self, path: Path) -> bool:
        """Revalidate `path` unless this poll already did; True when it exists."""
        known = self._done.get(path)
        if known is None:
            known = self._done[path] = revalidate_dir(path, self.trusted_root)
            if known:
                self._maybe_list(path)
        return known

    def _maybe_list(self, path: Path) -> None:
        now = self.clock()
        due = self._next_listing.get(path)
        if due is None:  # first sight: the open suffices until the directory is watched long
            self._next_listing[path] = now + LIST_EVERY
        elif now >= due:
            self._next_listing[path] = now + LIST_EVERY + LIST_PER_ENTRY * _listed(path)

    def file(self, path: Path) -> Path:
        """Revalidate the directory holding `path`, then hand `path` back for reading."""
        self.dir(path.parent)
        return path
