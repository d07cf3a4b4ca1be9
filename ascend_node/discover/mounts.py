"""The mount table: which filesystem holds a path, from `/proc/self/mountinfo` (proc(5)).

Shared by doctor (`volume.mount` judges the shared directory's filesystem) and the
rendezvous, which names a pseudo-filesystem of the kernel (`/proc`, `/sys`, ...) given as
the shared directory instead of reporting the bare errno its first write gets there.
Parsing is pure; `mount_for` is the one function that reads the file, and only on the
paths that need it (an error, or a follower's one check before it waits).
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Optional

_OCTAL = re.compile(r"\\([0-7]{3})")

PSEUDO_FS_TYPES = frozenset({
    "proc", "sysfs", "cgroup", "cgroup2", "devpts", "devtmpfs", "debugfs", "tracefs",
    "securityfs", "pstore", "bpf", "configfs", "fusectl", "mqueue", "binfmt_misc",
    "efivarfs", "selinuxfs", "nsfs", "rpc_pipefs", "autofs",
})
"""Filesystem types (mountinfo's type field) that the kernel synthesizes: nothing written
there reaches another pod, and most refuse to create files at all."""


@dataclass(frozen=True)
class Mount:
    mount_point: str
    fs_type: str
    source: str
    options: Mapping[str, Optional[str]] = field(default_factory=dict)

    def describe(self) -> str:
        shown = ",".join(k if v is None else f"{k}={v}" for k, v in self.options.items())
        return f"{self.fs_type} {self.source} on {self.mount_point} ({shown})"


def _unescape(text: str) -> str:
    return _OCTAL.sub(lambda m: chr(int(m.group(1), 8)), text)


def _options(*groups: str) -> dict[str, Optional[str]]:
    out: dict[str, Optional[str]] = {}
    for group in groups:
        for item in group.split(","):
            if item:
                key, sep, value = item.partition("=")
                out[key] = value if sep else None
    return out


def parse_mountinfo(text: str) -> list[Mount]:
    """Every well-formed line of /proc/<pid>/mountinfo, in order (later mounts shadow
    earlier ones on the same point). Per-mount and superblock options are merged:
    NFS reports `vers`, `lookupcache`, `ac*` and `nocto` among the superblock ones."""
    mounts = []
    for line in text.splitlines():
        left, sep, right = line.partition(" - ")
        fields, tail = left.split(), right.split()
        if not sep or len(fields) < 6 or len(tail) < 2:
            continue
        super_options = tail[2] if len(tail) > 2 else ""
        mounts.append(Mount(_unescape(fields[4]), tail[0], _unescape(tail[1]),
                            _options(fields[5], super_options)))
    return mounts


def mount_of(path: str, mounts: Sequence[Mount]) -> Optional[Mount]:
    """The mount that holds `path` (already resolved): the longest mount point that
    is a path prefix of it, the last one listed winning on ties."""
    best: Optional[Mount] = None
    for mount in mounts:
        point = mount.mount_point.rstrip("/") or "/"
        inside = path == point or path.startswith(point + "/") or point == "/"
        if inside and (best is None or len(point) >= len(best.mount_point.rstrip("/") or "/")):
            best = mount
    return best


def pseudo_filesystem(path: str, mountinfo: str) -> Optional[Mount]:
    """The mount holding `path` (already resolved) when it is a kernel pseudo-filesystem."""
    mount = mount_of(path, parse_mountinfo(mountinfo))
    return mount if mount is not None and mount.fs_type in PSEUDO_FS_TYPES else None


def mount_for(path: str, proc_root: str = "/proc") -> Optional[Mount]:
    """The mount holding `path` in this process's mount table (None when unreadable)."""
    try:
        with open(os.path.join(proc_root, "self", "mountinfo"), encoding="utf-8",
                  errors="replace") as fh:
            text = fh.read()
    except OSError:
        return None
    return mount_of(os.path.realpath(path), parse_mountinfo(text))
