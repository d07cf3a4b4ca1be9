"""`ascend-node clean`: remove one run's state from the shared volume.

Deletes only what the agent creates for that run — `.ascend-node/<run>/` and
`ranktable-<run>.json` — and never follows a symlink out of the shared directory.
"""

from __future__ import annotations

import os
import shutil
import stat
from pathlib import Path

from ascend_node.rendezvous.store import RunPaths, volume_error


def clean_run(shared_dir: Path, run_id: str) -> list[str]:
    paths = RunPaths(shared_dir, run_id)
    done: list[str] = []
    for target in (paths.root, paths.shared_table):
        try:
            st = os.lstat(target)
        except FileNotFoundError:
            done.append(f"absent   {target}")
            continue
        try:
            if stat.S_ISDIR(st.st_mode):
                shutil.rmtree(target)
            else:
                os.unlink(target)  # a regular file, or a planted symlink itself
        except OSError as exc:
            raise volume_error(exc, target, "remove") from exc
        done.append(f"removed  {target}")
    return done
