"""Run `ascend-node` with a shared volume that freezes on a local disk (tests only).

A fake of the one thing the fast tests cannot have for real: an NFS server that stops
answering (the real one is `tests/nfs_bed.py`, marker `nfs`). While the file named by
FROZEN_VOLUME_FLAG exists, every call on a path below FROZEN_VOLUME_ROOT (open, stat,
lstat, mkdir, scandir, listdir, statvfs, rename, link, unlink, utime, and Python's own
`open()`) either waits until the file
is gone — a `hard` mount whose server froze — or, with FROZEN_VOLUME_ERRNO=EIO (or
ETIMEDOUT), fails with that errno: a `soft` mount's answer. Everything else (the state
dir, the fake devices) is untouched. FROZEN_VOLUME_TERMLOG moves Kubernetes' termination
log (/dev/termination-log) to a file the test can read; FROZEN_VOLUME_WAIT shortens how
long `report` and `clean` wait for the volume (`volume_call.OPERATOR_WAIT`);
FROZEN_VOLUME_HIT names a file created the first time a call meets the frozen volume (a
test that ends an outage once a pod has met it, whatever the machine's load).

    python tests/frozen_volume.py ranktable --json
"""

from __future__ import annotations

import errno
import os
import sys
import time
from pathlib import Path
from typing import Any, Callable

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

ROOT = os.environ.get("FROZEN_VOLUME_ROOT", "")
FLAG = os.environ.get("FROZEN_VOLUME_FLAG", "")
ERRNO = getattr(errno, os.environ.get("FROZEN_VOLUME_ERRNO", ""), 0) if os.environ.get(
    "FROZEN_VOLUME_ERRNO") else 0
HIT = os.environ.get("FROZEN_VOLUME_HIT", "")


def _on_volume(path: Any) -> bool:
    if isinstance(path, int) or not ROOT:
        return False
    text = os.fsdecode(path) if isinstance(path, (bytes, os.PathLike, str)) else ""
    return os.path.abspath(text).startswith(ROOT)


def _frozen() -> bool:
    return bool(FLAG) and _real_stat is not None and _exists(FLAG)


def _exists(path: str) -> bool:
    try:
        _real_stat(path)
    except OSError:
        return False
    return True


def _wrap(real: Callable[..., Any]) -> Callable[..., Any]:
    def call(path: Any, *args: Any, **kwargs: Any) -> Any:
        if _on_volume(path):
            while _frozen():
                if HIT and not _exists(HIT):
                    _real_close(_real_open(HIT, os.O_CREAT | os.O_WRONLY, 0o644))
                if ERRNO:
                    raise OSError(ERRNO, os.strerror(ERRNO), os.fsdecode(path))
                time.sleep(0.05)
        return real(path, *args, **kwargs)
    return call


_real_stat = os.stat
_real_open = os.open
_real_close = os.close


def install() -> None:
    """Patch this process only (run as a script: importing this module changes nothing)."""
    for name in ("open", "stat", "lstat", "mkdir", "scandir", "statvfs", "rename", "link",
                 "unlink", "utime", "rmdir", "listdir"):
        setattr(os, name, _wrap(getattr(os, name)))
    # Python's own open() (pathlib, zipfile, a plain `open(path, "rb")`) too.
    import builtins
    import io

    builtins.open = io.open = _wrap(io.open)  # type: ignore[assignment]
    # Python 3.9's pathlib calls os through an accessor that took its functions when
    # pathlib was imported (3.11 and later look them up on os at each call): wrap those too,
    # or a Path.stat() on the volume would answer while os.stat() waits.
    import pathlib

    accessor = getattr(pathlib, "_NormalAccessor", None)
    if accessor is not None:
        for name in ("open", "stat", "lstat", "mkdir", "scandir", "rename", "link", "unlink",
                     "utime", "rmdir", "listdir", "replace"):
            real = accessor.__dict__.get(name)
            if callable(real):
                setattr(accessor, name, staticmethod(_wrap(real)))
    if os.environ.get("FROZEN_VOLUME_WAIT"):
        # How long `report`/`clean` wait for the volume (60 s in production).
        from ascend_node.rendezvous import volume_call

        volume_call.OPERATOR_WAIT = float(os.environ["FROZEN_VOLUME_WAIT"])
    if os.environ.get("FROZEN_VOLUME_TERMLOG"):
        from ascend_node.handoff import exec as handoff_exec

        handoff_exec.write_termination_log.__defaults__ = (
            os.environ["FROZEN_VOLUME_TERMLOG"],)


if __name__ == "__main__":
    install()
    from ascend_node.cli import main

    main(sys.argv[1:])
