"""The global rank table as a file: written the way the controller can re-read it safely,
and judged as the controller's file check judges it.

The controller re-resolves the path on every read (realpath, `open(O_NOFOLLOW)`, fstat:
MindIE-Motor http_client_ctl/common/Util.cpp 228-330), so a new file renamed onto the
path is picked up on its next cycle and a reader never sees half of one. An in-place
rewrite (what ClusterD's callback does) can be read torn, and one of the controller's
readers does not survive that (RankTableLoader.cpp 818-827, inside a thread with no
handler). Hence: temp file in the same directory, fsync, rename (`atomic`), mode 0640, the
controller's owner.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Optional

from ascend_node.atomic import atomic_write_bytes
from ascend_node.errors import ConfigError
from ascend_node.pd.global_table import render_global_table
from ascend_node.pd.motor_rules import InstanceFlags, check_global_table, check_table_path
from ascend_node.ranktable import Problem, parse_table_json

MAX_FILE_SIZE = 101 * 1024 * 1024  # Util.cpp 27, 143
MODE = 0o640


def write_global_table(path: Path, doc: Mapping[str, Any],
                       owner: Optional[tuple[int, int]] = None) -> None:
    """Replace the table at `path` by rename; refuse a path the controller would refuse."""
    why = check_table_path(str(path))
    if why is not None:
        raise ConfigError(f"global rank table path {path}: {why}",
                          "point GLOBAL_RANK_TABLE_FILE_PATH at a plain path on a volume "
                          "the controller mounts (not through a ConfigMap's ..data link)")
    uid, gid = owner if owner else (None, None)
    try:
        # Through the API the table sits in the controller pod's own state directory
        # (`pd-table --rendezvous kube`), where nothing else made its directory.
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_bytes(path, render_global_table(doc).encode(), mode=MODE, uid=uid,
                           gid=gid)
    except OSError as exc:
        raise ConfigError(f"cannot write the global rank table {path}: "
                          f"{exc.strerror or exc}", "give pd-table a writable --out (or "
                          "state directory)") from exc


def validate_global_file(path: Path, flags: Optional[InstanceFlags] = None,
                         check_owner_uid: Optional[int] = None) -> list[Problem]:
    """The controller's file rules (path "file"), then its table rules; never raises."""
    messages, readable = file_rule_problems(path, check_owner_uid)
    problems = [Problem("file", message) for message in messages]
    if not readable:
        return problems
    try:
        raw = Path(path).read_bytes()
    except OSError as exc:
        problems.append(Problem("$", f"not JSON the controller can parse: {exc}"))
        return problems
    return problems + validate_global_text(raw, flags)


def validate_global_text(raw: bytes, flags: Optional[InstanceFlags] = None) -> list[Problem]:
    """The controller's table rules on a global table's bytes (`validate --global -`
    reads them from stdin): JSON naming each key once (`ranktable.parse_table_json`),
    then `check_global_table`."""
    doc, problems = parse_table_json(raw)
    if problems:
        return problems
    return check_global_table(doc, flags)


def file_rule_problems(path: Path, check_owner_uid: Optional[int] = None
                       ) -> tuple[list[str], bool]:
    """What MindIE-Motor's file check (Util.cpp 170-280, for the table and its own
    configuration alike) refuses in `path`, and whether its content can still be judged.

    The path check, the last component not a symlink, a regular file of at most 101 MiB,
    mode 0640 or stricter (the controller's default; `MINDIE_CHECK_INPUTFILES_PERMISSION=0`
    relaxes it, which we do not assume), owned by `check_owner_uid` when given."""
    problems: list[str] = []
    why = check_table_path(str(path))
    if why is not None:
        problems.append(why)
    try:
        info = os.lstat(path)
    except OSError as exc:
        return [*problems, f"cannot read {path}: {exc.strerror}"], False
    if stat.S_ISLNK(info.st_mode):
        return [*problems, f"{path} is a symlink: the controller opens it with "
                           "O_NOFOLLOW and refuses it"], False
    if not stat.S_ISREG(info.st_mode):
        return [*problems, f"{path} is not a regular file"], False
    if info.st_size > MAX_FILE_SIZE:
        return [*problems, f"{path} is {info.st_size} bytes; the controller reads at "
                           f"most {MAX_FILE_SIZE}"], False
    if stat.S_IMODE(info.st_mode) & ~MODE:
        problems.append(f"mode {stat.S_IMODE(info.st_mode):04o} is wider than 0640: the "
                        "controller refuses it (chmod 640)")
    if check_owner_uid is not None and info.st_uid != check_owner_uid:
        problems.append(f"owned by uid {info.st_uid}, not {check_owner_uid} (the "
                        "controller's uid)")
    return problems, True
