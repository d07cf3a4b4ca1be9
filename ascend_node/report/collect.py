"""Reading every node's summary of one attempt from the shared volume.

Read-only, run anywhere the volume is mounted. Like every shared document, a summary is
trusted only after validation: a symlink, a special file, an oversized or truncated
file, another schema, run, attempt or node than its name says, or times out of order is
left out and reported (`Ignored`), never drawn. Listing the directory is fine here: the
report is not on any pod's start path.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from pydantic import ValidationError

from ascend_node.errors import ConfigError
from ascend_node.rendezvous.store import (
    Invalid,
    Missing,
    RunPaths,
    check_real_dirs,
    file_mtime_ns,
    read_bytes_nofollow,
)
from ascend_node.report.record import (
    MAX_SUMMARY_BYTES,
    attempt_dir_name,
    current_attempt,
    timeline_dir,
)
from ascend_node.report.summary import NodeSummary

MAX_FILES = 4096  # more names than any job has nodes: the rest is not read
MAX_SPREAD = 86400.0  # a summary whose times span more than a day is not a job's start
_NAME = re.compile(r"^node-(0|[1-9][0-9]{0,5})\.json$")


@dataclass(frozen=True)
class Ignored:
    path: str
    reason: str

    def line(self) -> str:
        return f"{self.path}: {self.reason}"


@dataclass(frozen=True)
class Collected:
    """What the volume holds about one attempt (times on the volume's clock)."""

    run_id: str
    attempt_id: Optional[str]
    directory: Path
    summaries: tuple[NodeSummary, ...]
    ignored: tuple[Ignored, ...] = ()
    node_count: int = 0
    slot_published: dict[int, float] = field(default_factory=dict)  # slot mtimes
    decided: Optional[float] = None  # outcome.json's mtime: the table (or abort) was written
    opened: Optional[float] = None  # attempt.json's mtime, when it names this attempt
    decision: Optional[str] = None  # what outcome.json says: "table" or "abort"


def validate_summary(raw: bytes, run_id: str, attempt: str, index: int) -> NodeSummary:
    """The summary in `raw` for node `index` of `attempt`; ValueError saying why not (pure)."""
    try:
        doc = NodeSummary.model_validate_json(raw)
    except ValidationError as exc:
        try:
            data = json.loads(raw.decode("utf-8"))
        except (UnicodeDecodeError, ValueError):
            raise ValueError("is not valid JSON (truncated or foreign)") from None
        if isinstance(data, dict) and data.get("schema_version") != 1:
            raise ValueError(f"has schema_version {data.get('schema_version')!r}, this agent "
                             "reads 1 (mixed agent versions?)") from None
        if isinstance(data, dict) and data.get("kind") != "node-summary":
            raise ValueError(f"is not a node summary (kind {data.get('kind')!r})") from None
        err = exc.errors()[0]
        where = ".".join(str(p) for p in err["loc"]) or "document"
        raise ValueError(f"fails validation at {where}: {err['msg']}") from None
    if doc.run_id != run_id:
        raise ValueError(f"belongs to run {doc.run_id!r}, not {run_id!r}")
    if attempt_dir_name(doc.attempt_id) != attempt:
        raise ValueError(f"belongs to attempt {doc.attempt_id!r}, not {attempt!r}")
    if doc.global_index != index:
        raise ValueError(f"is node {doc.global_index}'s summary under node {index}'s name")
    if doc.global_index >= doc.node_count:
        raise ValueError(f"names node {doc.global_index} of a {doc.node_count}-node job")
    times = [t for t in (doc.container_start, doc.process_start, doc.published) if t]
    times += [t for p in doc.phases for t in (p.start, p.end)]
    if any(p.end < p.start for p in doc.phases):
        raise ValueError("has a phase that ends before it starts")
    if times and (max(times) - min(times) > MAX_SPREAD or max(times) > doc.written + 60):
        raise ValueError("has times more than a day apart or after it was written")
    return doc


def available_attempts(paths: RunPaths) -> list[str]:
    try:
        return sorted(e.name for e in os.scandir(paths.root / "timeline")
                      if e.is_dir(follow_symlinks=False))[:20]
    except OSError:
        return []


def newest_attempt(paths: RunPaths) -> Optional[str]:
    """Without attempt.json (a volume copied elsewhere, a cleaned run): the attempt whose
    summaries changed last, unless nodes left some under `none`."""
    try:
        dirs = [e for e in os.scandir(paths.root / "timeline")
                if e.is_dir(follow_symlinks=False)]
    except OSError:
        return None
    if not dirs or any(e.name == "none" for e in dirs):
        return None
    return max(dirs, key=lambda e: e.stat(follow_symlinks=False).st_mtime_ns).name


def collect(shared_dir: Path, run_id: str, attempt: Optional[str] = None) -> Collected:
    """Every node's summary of `attempt` (default: the current attempt, else `none`)."""
    paths = RunPaths(shared_dir, run_id)
    check_real_dirs(shared_dir, paths.root / "timeline")
    current = current_attempt(paths)
    chosen = attempt or current or newest_attempt(paths)  # None: nodes that met no attempt
    directory = timeline_dir(paths, chosen)
    check_real_dirs(shared_dir, directory)
    try:
        entries = sorted(os.scandir(directory), key=lambda e: e.name)
    except FileNotFoundError:
        known = available_attempts(paths)
        which = (f"attempt {chosen!r}" if chosen else
                 "no attempt opened (and no node left a summary outside one)")
        raise ConfigError(
            f"no node summaries for run {run_id!r}, {which} in {directory.parent}",
            (f"attempts with summaries: {', '.join(known)} (--attempt)" if known else
             "check --shared-dir and --run-id; nodes leave summaries when their "
             "rendezvous ends"),
        ) from None
    except OSError as exc:
        raise ConfigError(f"cannot read {directory}: {exc.strerror or exc}",
                          "check --shared-dir") from exc
    summaries: list[NodeSummary] = []
    ignored: list[Ignored] = []
    for number, entry in enumerate(entries):
        if entry.name.startswith("."):
            continue  # a writer's temp file (atomic.py)
        if number >= MAX_FILES:
            ignored.append(Ignored(str(directory), f"{len(entries) - MAX_FILES} more "
                                   "files not read"))
            break
        path = Path(entry.path)
        match = _NAME.match(entry.name)
        if not match:
            ignored.append(Ignored(str(path), "is not named node-<index>.json"))
            continue
        raw = read_bytes_nofollow(path, MAX_SUMMARY_BYTES)
        if isinstance(raw, Missing):
            continue
        if isinstance(raw, Invalid):
            ignored.append(Ignored(str(path), raw.reason))
            continue
        try:
            summaries.append(validate_summary(raw, run_id, attempt_dir_name(chosen),
                                              int(match.group(1))))
        except ValueError as exc:
            ignored.append(Ignored(str(path), str(exc)))
    node_count = max((s.node_count for s in summaries), default=0)
    counts = sorted({s.node_count for s in summaries})
    if len(counts) > 1:
        ignored.append(Ignored(str(directory), "summaries disagree on the node count "
                               f"({', '.join(map(str, counts))}); drawing {node_count}"))
    slot_published: dict[int, float] = {}
    decided, decision = None, None
    if chosen is not None:
        have = {s.global_index for s in summaries}
        for index in range(min(node_count, 65536)):
            if index not in have:
                stamp = file_mtime_ns(paths.slot(chosen, index))
                if stamp:
                    slot_published[index] = stamp / 1e9
        outcome = file_mtime_ns(paths.outcome(chosen))
        decided = outcome / 1e9 if outcome else None
        decision = outcome_result(paths.outcome(chosen)) if outcome else None
    stamp = file_mtime_ns(paths.attempt_file) if chosen is not None and chosen == current \
        else None
    return Collected(run_id, chosen, directory, tuple(summaries), tuple(ignored),
                     node_count, slot_published, decided,
                     stamp / 1e9 if stamp else None, decision)


def outcome_result(path: Path) -> Optional[str]:
    """`table` or `abort`, as outcome.json says, for the report's words only (a signed
    document is read without its key: the report never acts on it); None when unreadable."""
    raw = read_bytes_nofollow(path)
    if not isinstance(raw, bytes):
        return None
    try:
        doc = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        return None
    result = doc.get("result") if isinstance(doc, dict) else None
    return result if result in ("table", "abort") else None
