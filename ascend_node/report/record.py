"""Writing this node's summary to the shared volume, after the outcome is decided.

Called by `bootstrap` when the rendezvous has returned or raised, and by `boot` just
before exec (or when it fails). It must never change what the node does: every failure
is logged at debug level and swallowed, the exit code is the caller's, and nothing here
runs inside the rendezvous. Its own time is recorded as the `summary` event (about a
millisecond on a local disk, a few round trips on NFS: docs/benchmarks.md).

The volume's clock: the node creates a probe file in the summary's directory and reads
its mtime, which the volume's server stamps, between two readings of the local clock;
`offset = mtime - midpoint`, good to half the probe's round trip plus the filesystem's
timestamp granularity (a few ms). Measured once per process: `boot` reuses the offset
its rendezvous measured. Every time in the summary is local time + offset; the slot's
publication time is the slot file's own mtime (no conversion).
"""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any, Optional

from ascend_node import __version__, events
from ascend_node.identity import NodeIdentity
from ascend_node.rendezvous.store import RunPaths
from ascend_node.report.summary import (
    MAX_CAUSE,
    ClockNote,
    NodeSummary,
    SummaryState,
    attempt_dir_name,
    spans_from_events,
    summary_name,
)

log = logging.getLogger("ascend_node.report")

# PID 1 started longer ago than this before the agent is not this container's start
# (the agent runs on a host, in a simulation, or in a long-lived container).
MAX_CONTAINER_LEAD = 3600.0

_offset: Optional[ClockNote] = None


def timeline_dir(paths: RunPaths, attempt_id: Optional[str]) -> Path:
    return paths.root / "timeline" / attempt_dir_name(attempt_id)


def summary_path(paths: RunPaths, attempt_id: Optional[str], index: int) -> Path:
    return timeline_dir(paths, attempt_id) / summary_name(index)


def measure_offset(directory: Path) -> ClockNote:
    """volume clock - local clock, by a probe file's mtime (see the module's docstring)."""
    from ascend_node.rendezvous.store import volume_clock_ns

    before = time.time()
    stamp = volume_clock_ns(directory)
    after = time.time()
    if stamp is None:
        return ClockNote(offset=0.0, uncertainty=0.0, source="local")
    return ClockNote(offset=round(stamp / 1e9 - (before + after) / 2, 6),
                     uncertainty=round((after - before) / 2, 6))


def container_start() -> tuple[Optional[float], str, Optional[float]]:
    """(the container's start or None, why, this process's start), local clock.

    The container's start is PID 1's, when PID 1 is the agent or one of its two nearest
    ancestors (`sh -c`, tini) and started at most MAX_CONTAINER_LEAD before it; anywhere
    else (a host, a simulation, `kubectl exec`) PID 1 says nothing about this start."""
    try:
        import psutil

        me = psutil.Process()
        own = me.create_time()
        chain = [me]
        while len(chain) < 3 and chain[-1].pid != 1:
            parent = chain[-1].parent()
            if parent is None:
                break
            chain.append(parent)
    except Exception:
        return None, "process start not readable", None
    init = next((p for p in chain if p.pid == 1), None)
    if init is None:
        return None, "PID 1 is not the agent or its parent's parent", own
    try:
        first = init.create_time()
    except Exception:
        return None, "PID 1 not readable", own
    if own - first > MAX_CONTAINER_LEAD:
        return None, (f"PID 1 started {own - first:.0f} s before the agent: not taken "
                      "as the container's start"), own
    return first, "the agent is PID 1" if init is me else "PID 1's start", own


def current_attempt(paths: RunPaths) -> Optional[str]:
    """The attempt node 0 opened last (after a failure the node does not know its own)."""
    from ascend_node.rendezvous.models import AttemptDoc
    from ascend_node.rendezvous.store import Valid, read_doc

    got = read_doc(paths.attempt_file, AttemptDoc, paths.run_id)
    return got.doc.attempt_id if isinstance(got, Valid) else None


def build_summary(
    paths: RunPaths, identity: NodeIdentity, command: str, state: SummaryState,
    attempt_id: Optional[str], clock: ClockNote, exc: Optional[BaseException] = None,
    run_events: Optional[list[dict[str, Any]]] = None,
) -> NodeSummary:
    """The document (reads the slot's mtime and PID 1's start; writes nothing)."""
    from ascend_node.rendezvous.store import file_mtime_ns

    off = clock.offset
    pid1, why, own = container_start()
    published = (file_mtime_ns(paths.slot(attempt_id, identity.global_index))
                 if attempt_id else None)
    exit_code, cause = None, ""
    if exc is not None:
        detail = events.failure_detail(exc)
        exit_code = int(detail.get("exit_code", 1))
        cause = str(detail.get("cause") or detail.get("error") or "")[:MAX_CAUSE]
    kept = events.current().kept if run_events is None else run_events
    return NodeSummary(
        run_id=paths.run_id, attempt_id=attempt_id, global_index=identity.global_index,
        name=identity.name[:64], node_count=identity.node_count,
        pod_ip=identity.pod_ip[:64], agent_version=__version__[:64],
        command="boot" if command == "boot" else "ranktable", state=state,
        exit_code=exit_code if exit_code is None or 0 <= exit_code <= 255 else 1,
        cause=cause, clock=clock,
        container_start=round(pid1 + off, 6) if pid1 is not None else None,
        container_start_source=why[:120],
        process_start=round(own + off, 6) if own is not None else None,
        published=published / 1e9 if published else None,
        written=round(time.time() + off, 6),
        phases=spans_from_events(kept, off),
    )


def leave_summary(
    shared_dir: Optional[Path], run_id: str, identity: NodeIdentity, command: str,
    state: SummaryState, attempt_id: Optional[str] = None,
    exc: Optional[BaseException] = None,
) -> Optional[Path]:
    """Write this node's summary; never raises. Returns where it went (None: not written)."""
    global _offset
    if shared_dir is None:
        return None
    started = time.time()
    outcome = "failed"
    try:
        from ascend_node.atomic import atomic_write_bytes
        from ascend_node.rendezvous.store import ensure_dir

        paths = RunPaths(shared_dir, run_id)
        if exc is not None and attempt_id is None:
            attempt_id = current_attempt(paths)
        directory = timeline_dir(paths, attempt_id)
        ensure_dir(directory, shared_dir)
        if _offset is None:
            _offset = measure_offset(directory)
        doc = build_summary(paths, identity, command, state, attempt_id, _offset, exc)
        path = directory / summary_name(identity.global_index)
        atomic_write_bytes(path, (doc.model_dump_json() + "\n").encode(), mode=0o644)
        outcome = "ok"
    except Exception as err:
        log.debug("no timeline summary: %s: %s", err.__class__.__name__, err)
        return None
    finally:
        events.record("summary", started, time.time(), outcome, state=state)
    return path
