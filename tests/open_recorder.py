"""What a pod reads from the volume, counted in-process: each regular file opened for
reading is an OPEN, READ and CLOSE on NFS (docs/rendezvous.md, "Poll cost"), so tests of
the read budget count these names instead of timing anything."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest


@contextmanager
def files_read(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """The names of the regular files `os.open`ed for reading while the block runs, in
    order (directories and writes are not counted)."""
    opened: list[str] = []
    real_open = os.open

    def recording_open(path, flags, *args, **kwargs):  # type: ignore[no-untyped-def]
        fd = real_open(path, flags, *args, **kwargs)
        if not stat.S_ISDIR(os.fstat(fd).st_mode) and not flags & (os.O_WRONLY | os.O_CREAT):
            opened.append(Path(path).name)
        return fd

    monkeypatch.setattr(os, "open", recording_open)
    try:
        yield opened
    finally:
        monkeypatch.setattr(os, "open", real_open)
