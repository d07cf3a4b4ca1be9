"""The file rules MindIE and atb_llm apply to RANK_TABLE_FILE before they parse it.

Checked before the table rules so `ascend-node validate` (and doctor) report a file MindIE
would refuse outright, e.g. a group-readable-and-writable mode, next to any content problems.

These are MindIE's rules (its C++ ``IsFileValid`` and atb_llm's path check,
MindIE-LLM @8b4871a), not HCCL's: with ``target="hccl"`` only what any reader needs
is judged (the file exists, is a regular file, is not empty, and is UTF-8 JSON), so
MindCluster's own ``hccl.json`` (written 0644, and seen in the pod through a mount)
passes for HCCL as it does for the training frameworks that read it. An owner asked for
explicitly (``check_owner_uid``) is checked for both targets: the caller chose it.
"""

from __future__ import annotations

import json
import os
import re
import stat
from typing import Any, Optional, Union

from ascend_node.ranktable.limits import Target
from ascend_node.ranktable.problems import Problem
from ascend_node.ranktable.validate import validate_rank_table

# File rules of MindIE's C++ IsFileValid and atb_llm's path check.
MAX_FILE_SIZE = 10 * 1024 * 1024
MAX_PATH_LENGTH = 256
_PATH_CHARS = re.compile(r"[0-9a-zA-Z_./-]*")


def validate_file(
    path: Union[str, os.PathLike[str]],
    target: Target = "mindie",
    check_owner_uid: Optional[int] = None,
) -> list[Problem]:
    """File rules (path "file"), then the table rules of ``target``.

    For ``target="mindie"`` this mirrors MindIE's file checks (MindIE-LLM
    src/utils/log/file_utils.cpp, atb_llm/utils/env.py @8b4871a): not a symlink, a
    regular file of 1 byte..10 MiB,
    mode 0640 or stricter in every permission triad, owned by ``check_owner_uid`` when given
    (MindIE wants the uid that runs it; root is not exempt), a real path of
    ``[0-9a-zA-Z_./-]`` only, a path of at most 256 characters. A symlink is reported and its
    target still checked, so one run lists everything to fix. Unparsable JSON is a problem at
    "$". For ``target="hccl"`` the mode, symlink, path and 10 MiB rules are MindIE's and
    are not applied (a file above 10 MiB is still not read: no rank table is that big).
    Never reads a FIFO or device node, never raises for a bad file.
    """
    problems: list[Problem] = []
    mindie = target == "mindie"
    text_path = os.fspath(path)

    def add(message: str) -> None:
        problems.append(Problem("file", message))

    if mindie and len(text_path) > MAX_PATH_LENGTH:
        add(
            f"path {text_path} is {len(text_path)} characters: MindIE ignores a "
            f"RANK_TABLE_FILE longer than {MAX_PATH_LENGTH}"
        )
    try:
        link_info = os.lstat(text_path)
    except OSError as exc:
        add(f"{text_path} cannot be read: {exc.strerror or exc}")
        return problems
    if mindie and stat.S_ISLNK(link_info.st_mode):
        add(f"{text_path} is a symlink: MindIE refuses links, copy the file instead")
    real = os.path.realpath(text_path)
    if mindie and _PATH_CHARS.fullmatch(real) is None:
        bad = sorted({ch for ch in real if _PATH_CHARS.fullmatch(ch) is None})
        shown = ", ".join(json.dumps(ch, ensure_ascii=False) for ch in bad)
        add(f"real path {real} contains {shown}: atb_llm allows only [0-9a-zA-Z_./-]")
    try:
        info = os.stat(text_path)
    except OSError as exc:
        add(f"{text_path} cannot be read: {exc.strerror or exc}")
        return problems
    if not stat.S_ISREG(info.st_mode):
        add(f"{text_path} is not a regular file")
        return problems
    mode = stat.S_IMODE(info.st_mode)
    owner, group, other = (mode >> 6) & 7, (mode >> 3) & 7, mode & 7
    if mindie and (owner > 6 or group > 4 or other > 0):
        add(f"{text_path} has mode {mode:04o}: MindIE requires 0640 or stricter")
    if check_owner_uid is not None and info.st_uid != check_owner_uid:
        add(
            f"{text_path} is owned by uid {info.st_uid}, not uid {check_owner_uid} that runs "
            "the server"
        )
    if info.st_size == 0:
        add(f"{text_path} is empty")
        return problems
    if info.st_size > MAX_FILE_SIZE:
        reader = "MindIE reads" if mindie else "validate reads"
        add(f"{text_path} is {info.st_size} bytes: {reader} at most {MAX_FILE_SIZE}")
        return problems
    try:
        with open(text_path, "rb") as handle:
            raw = handle.read(MAX_FILE_SIZE + 1)
    except OSError as exc:
        add(f"{text_path} cannot be read: {exc.strerror or exc}")
        return problems
    return problems + validate_text(raw, target)


def validate_text(raw: bytes, target: Target = "mindie") -> list[Problem]:
    """The table rules of ``target`` on a table's bytes (`validate -` reads them from
    stdin, where no file rule applies): UTF-8 JSON whose every object names each key
    once, then `validate_rank_table`. Never raises for bad bytes."""
    if not raw:
        return [Problem("$", "no table: the text is empty")]
    doc, problems = parse_table_json(raw)
    if problems:
        return problems
    return validate_rank_table(doc, target)


def parse_table_json(raw: bytes) -> tuple[Any, list[Problem]]:
    """The document, or the problems (at "$", or at each repeated key's JSON path) that
    leave it without one meaning.

    A key repeated in one object (`{"server_count": "2", "server_count": "3"}`) is
    refused: which value counts is up to each reader (RFC 8259 section 4: "many
    implementations report the last name/value pair only. Other implementations report
    an error or fail to parse the object"), MindIE reads the table with its C++ config
    manager and again with atb_llm's Python, and Python's `json` silently keeps the last.
    A table that means one thing to `validate` and maybe another to MindIE is no table."""
    try:
        doc = json.loads(raw.decode("utf-8"), parse_constant=_reject_constant,
                         object_pairs_hook=_KeyedObject)
        repeated = _repeated_keys(doc, "$")
    except UnicodeDecodeError as exc:
        return None, [Problem("$", f"not UTF-8 text: byte {exc.start} is "
                                   f"{raw[exc.start]:#04x}")]
    except ValueError as exc:  # json.JSONDecodeError and _reject_constant
        return None, [Problem("$", f"not valid JSON: {exc}")]
    except RecursionError:
        return None, [Problem("$", "not valid JSON: nested too deeply")]
    return doc, repeated


class _KeyedObject(dict):  # type: ignore[type-arg]
    """A JSON object as `json` builds it (the last value of a key), remembering the keys
    its text named more than once and how often."""

    def __init__(self, pairs: list[tuple[str, Any]]) -> None:
        super().__init__(pairs)
        counts: dict[str, int] = {}
        for key, _ in pairs:
            counts[key] = counts.get(key, 0) + 1
        self.repeated = {key: n for key, n in counts.items() if n > 1}


def _repeated_keys(value: Any, path: str) -> list[Problem]:
    found: list[Problem] = []
    if isinstance(value, _KeyedObject):
        for key, times in value.repeated.items():
            found.append(Problem(
                f"{path}.{key}", f"key {key!r} appears {times} times in one object: which "
                "value counts depends on the reader (MindIE's C++ and Python readers "
                "need not agree); keep one"))
        for key, item in value.items():
            found.extend(_repeated_keys(item, f"{path}.{key}"))
    elif isinstance(value, list):
        for i, item in enumerate(value):
            found.extend(_repeated_keys(item, f"{path}[{i}]"))
    return found


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON value")
