"""Writing this node's summary to the shared volume, after the outcome is decided.

Called by `chain.table` when the rendezvous has returned or raised, and by `boot` just
before exec (or when it fails). It must never change what the node does: every failure
is logged at debug level and swallowed, the exit code is the caller's, and nothing here
runs inside the rendezvous. Its own time is recorded as the `summary` event (a few ms:
docs/benchmarks.md), except before exec, whose event stays the run's last. The document
is built as plain JSON (no pydantic model build on a pod's start path);
`summary.NodeSummary` is its schema, which readers validate against.

The volume's clock: the node creates a probe file in the summary's directory and reads
its mtime, which the volume's server stamps, between two readings of the local clock;
`offset = mtime - midpoint`, good to half the probe's round trip plus the filesystem's
timestamp granularity (a few ms). Measured once per process: `boot` reuses the offset
its rendezvous measured. Every time in the summary is local time + offset; the slot's
publication time is the slot file's own mtime (no conversion).
"""

from __future__ import annotations

import json
import logging
import os
import re
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, Literal, Optional

from ascend_node import __version__, events
from ascend_node.discover.identity import NodeIdentity
from ascend_node.rendezvous.store import RunPaths

log = logging.getLogger("ascend_node.report")

SummaryState = Literal["table", "exec", "failed"]
MAX_SUMMARY_BYTES = 64 * 1024  # an 8-NPU boot writes about 2.3 KiB, a 16-NPU one 3.5 KiB
MAX_PHASES = 160  # a boot records about 15 events plus one per NPU
MAX_CAUSE = 300
MAX_WARNING = 600
PHASE_PATTERN = r"^[a-z_]{1,32}(\.[a-z_]{1,32}){0,2}$"
_PHASE = re.compile(PHASE_PATTERN)

# PID 1 started longer ago than this before the agent is not this container's start
# (the agent runs on a host, in a simulation, or in a long-lived container).
MAX_CONTAINER_LEAD = 3600.0

_offset: Optional[tuple[float, float, str]] = None  # (offset, uncertainty, source)


def timeline_dir(paths: RunPaths, attempt_id: Optional[str]) -> Path:
    return paths.root / "timeline" / attempt_dir_name(attempt_id)


def attempt_dir_name(attempt_id: Optional[str]) -> str:
    return attempt_id or "none"


def summary_name(global_index: int) -> str:
    return f"node-{global_index}.json"


def measure_offset(directory: Path) -> tuple[float, float, str]:
    """(volume clock - local clock, uncertainty, source), by a probe file's mtime."""
    from ascend_node.rendezvous import store

    before = time.time()
    stamp = store.volume_clock_ns(directory)
    after = time.time()
    if stamp is None:
        return 0.0, 0.0, "local"
    return round(stamp / 1e9 - (before + after) / 2, 6), round((after - before) / 2, 6), \
        "probe"


def proc_start(pid: int, proc: Path = Path("/proc"), now: Optional[float] = None
               ) -> Optional[tuple[float, int]]:
    """(start on this process's wall clock, parent pid) of `pid`, from /proc (Linux),
    None when unreadable. The start is `now` minus the process's age (uptime minus its
    start, both in the kernel's boot clock): not /proc/stat's `btime`, which is whole
    seconds, and right even when this process's clock is not the kernel's (libfaketime).
    psutil would cost a pod ~25 ms of import for less."""
    try:
        stat = (proc / str(pid) / "stat").read_text()
        fields = stat[stat.rindex(")") + 2:].split()
        ticks, ppid = int(fields[19]), int(fields[1])
        uptime = float((proc / "uptime").read_text().split()[0])
        wall = time.time() if now is None else now
        return wall - (uptime - ticks / os.sysconf("SC_CLK_TCK")), ppid
    except (OSError, ValueError, IndexError):
        return None


def container_start(pid: Optional[int] = None, proc: Path = Path("/proc"),
                    now: Optional[float] = None
                    ) -> tuple[Optional[float], str, Optional[float]]:
    """(the container's start or None, why, this process's start), local clock.

    The container's start is PID 1's, when PID 1 is the agent or one of its two nearest
    ancestors (`sh -c`, tini) and started at most MAX_CONTAINER_LEAD before it; anywhere
    else (a host, a simulation, `kubectl exec`) PID 1 says nothing about this start."""
    me = os.getpid() if pid is None else pid
    wall = time.time() if now is None else now
    own = proc_start(me, proc, wall)
    if own is None:
        return None, "process start not readable", None
    chain = [me]
    current: Optional[tuple[float, int]] = own
    while chain[-1] != 1 and len(chain) < 3 and current is not None:
        chain.append(current[1])
        current = proc_start(chain[-1], proc, wall) if chain[-1] != 1 else current
    if 1 not in chain:
        return None, "PID 1 is not the agent or its parent's parent", own[0]
    first = own if me == 1 else proc_start(1, proc, wall)
    if first is None:
        return None, "PID 1 not readable", own[0]
    if own[0] - first[0] > MAX_CONTAINER_LEAD:
        return None, (f"PID 1 started {own[0] - first[0]:.0f} s before the agent: not taken "
                      "as the container's start"), own[0]
    return first[0], "the agent is PID 1" if me == 1 else "PID 1's start", own[0]


def spans_from_events(evs: Iterable[Mapping[str, Any]], offset: float,
                      limit: int = MAX_PHASES) -> list[dict[str, Any]]:
    """The run's events as spans on the volume's clock (local + `offset`), in order of
    start; the `run` marker and anything malformed are left out, the list is cut at
    `limit`."""
    out: list[dict[str, Any]] = []
    for event in sorted(evs, key=lambda e: _number(e.get("start"))):
        name = event.get("phase")
        start, end = _number(event.get("start")), _number(event.get("end"))
        if (not isinstance(name, str) or name in ("run", events.WARNING_PHASE)
                or not _PHASE.match(name)
                or start <= 0 or end < start):
            continue
        device = event.get("device")
        out.append({"name": name, "start": round(start + offset, 6),
                    "end": round(end + offset, 6),
                    "outcome": str(event.get("outcome", "ok"))[:32],
                    "device": device if isinstance(device, int) and not isinstance(
                        device, bool) and 0 <= device <= 63 else None})
        if len(out) >= limit:
            break
    return out


def _number(value: Any) -> float:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) \
        else -1.0


def current_attempt(paths: RunPaths) -> Optional[str]:
    """The attempt node 0 opened last (after a failure the node does not know its own)."""
    from ascend_node.rendezvous.models import AttemptDoc
    from ascend_node.rendezvous.store import Valid, read_doc

    got = read_doc(paths.attempt_file, AttemptDoc, paths.run_id)
    return got.doc.attempt_id if isinstance(got, Valid) else None


def build_summary(
    paths: RunPaths, identity: NodeIdentity, command: str, state: SummaryState,
    attempt_id: Optional[str], clock: tuple[float, float, str],
    exc: Optional[BaseException] = None, run_events: Optional[list[dict[str, Any]]] = None,
) -> dict[str, Any]:
    """The document (reads the slot's mtime and the process starts; writes nothing)."""
    from ascend_node.rendezvous.store import file_mtime_ns

    published = (file_mtime_ns(paths.slot(attempt_id, identity.global_index))
                 if attempt_id else None)
    return summary_document(paths.run_id, identity, command, state, attempt_id, clock,
                            published, exc, run_events)


def summary_document(
    run_id: str, identity: NodeIdentity, command: str, state: SummaryState,
    attempt_id: Optional[str], clock: tuple[float, float, str], published: Optional[int],
    exc: Optional[BaseException] = None, run_events: Optional[list[dict[str, Any]]] = None,
) -> dict[str, Any]:
    """The document from what the caller read: `published` is the slot's publication in
    ns on the summary's clock (None: not known; through the API there is no file mtime)."""
    off = clock[0]
    pid1, why, own = container_start()
    exit_code, cause = None, ""
    if exc is not None:
        detail = events.failure_detail(exc)
        code = detail.get("exit_code", 1)
        exit_code = code if isinstance(code, int) and 0 <= code <= 255 else 1
        cause = str(detail.get("cause") or detail.get("error") or "")[:MAX_CAUSE]
    kept = events.current().kept if run_events is None else run_events
    warning = next((str(e.get("warning", ""))[:MAX_WARNING] for e in kept
                    if e.get("phase") == events.WARNING_PHASE), "")
    return {
        "schema_version": 1, "kind": "node-summary", "run_id": run_id,
        "attempt_id": attempt_id, "global_index": identity.global_index,
        "name": identity.name[:64], "node_count": identity.node_count,
        "pod_ip": identity.pod_ip[:64], "agent_version": __version__[:64],
        "command": "boot" if command == "boot" else "ranktable", "state": state,
        "exit_code": exit_code, "cause": cause, "warning": warning,
        "clock": {"offset": clock[0], "uncertainty": clock[1], "source": clock[2]},
        "container_start": round(pid1 + off, 6) if pid1 is not None else None,
        "container_start_source": why[:120],
        "process_start": round(own + off, 6) if own is not None else None,
        "published": published / 1e9 if published else None,
        "written": round(time.time() + off, 6),
        "phases": spans_from_events(kept, off),
    }


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
        data = (json.dumps(doc, separators=(",", ":")) + "\n").encode()
        if len(data) > MAX_SUMMARY_BYTES:
            raise ValueError(f"{len(data)} bytes, over {MAX_SUMMARY_BYTES}")
        path = directory / summary_name(identity.global_index)
        atomic_write_bytes(path, data, mode=0o644, durable=False)
        outcome = "ok"
    except Exception as err:  # the summary never changes the outcome
        log.debug("no timeline summary: %s: %s", err.__class__.__name__, err)
        return None
    finally:
        if state != "exec":  # `exec` stays the last event of a run (docs/events.md)
            events.record("summary", started, time.time(), outcome, state=state)
    return path
