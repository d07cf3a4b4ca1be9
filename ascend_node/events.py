"""Where the time goes: one JSON line per phase in `<state-dir>/events.jsonl`.

An operator asking "why did this pod take 90 s to start" needs the answer per phase
(discovery, each `hccn_tool` call, rendezvous, install, set_env, config, exec) without
rerunning anything. So every bootstrap appends one JSON object a line:
`{"run", "phase", "start", "end", "outcome", ...detail}`; `start`/`end` are wall-clock
seconds (comparable across pods and restarts), `run` is new for every process, so a
container restart appends a new run that reads apart from the previous one.

Sub-phases are named `parent.child` (`discovery.hccn_tool`, and whatever the rendezvous
adds, e.g. `rendezvous.wait`); summaries indent them under their parent and leave them
out of one-line-per-node views.

The recorder must never cost the bootstrap anything: a write that fails (read-only or
full state dir) disables it silently; each event is one `write()` on an `O_APPEND`
descriptor (whole lines, even from the concurrent `hccn_tool` threads); the file is
trimmed to its newest half when it passes MAX_BYTES at the start of a run.

Use: `events.activate(Recorder.open(state_dir, "boot"))` once, then anywhere
`with events.phase("rendezvous.wait", waiting_for=3): ...` or `events.record(...)`;
before activation these are no-ops, so library code can call them unconditionally.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any, Optional

EVENTS_JSONL = "events.jsonl"
MAX_BYTES = 256 * 1024
KEPT_EVENTS = 512  # a run's events kept in memory for its shared summary (report/record.py)
CORE_KEYS = ("run", "phase", "start", "end", "outcome")
RUN_PHASE = "run"  # the first event of every run: command, pid, version



def _debug(message: str, *args: Any) -> None:
    # Imported here: `status` reads events and should not pay for `logging` at start-up.
    import logging

    logging.getLogger("ascend_node.events").debug(message, *args)


class Recorder:
    """Appends events of one run; every failure to write turns it into a no-op."""

    def __init__(self, path: Optional[Path], run: str) -> None:
        self.path = path
        self.run = run
        self._lock = threading.Lock()
        self._fd: Optional[int] = None
        # This run's events, also when the state dir cannot be written: the node's shared
        # summary (`ascend_node.report.record`) is built from them, without re-reading the file.
        self.kept: list[dict[str, Any]] = []
        if path is not None:
            try:
                _trim(path, MAX_BYTES)
                self._fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC,
                                   0o640)
            except OSError as exc:
                _debug("events disabled: cannot open %s: %s", path, exc)

    @classmethod
    def open(cls, state_dir: Path, command: str, started: Optional[float] = None,
             **detail: Any) -> Recorder:
        """A new run in `state_dir/events.jsonl` (its first event names the command).

        `started` is the process's start on the wall clock; the time from it to now is
        recorded as the `startup` phase (interpreter and imports).
        """
        now = time.time()
        run = f"{int(now * 1000):x}-{os.getpid()}"
        rec = cls(state_dir / EVENTS_JSONL, run)
        rec.record(RUN_PHASE, now, now, "start", command=command, pid=os.getpid(), **detail)
        if started is not None and started <= now:
            rec.record("startup", started, now, "ok")
        return rec

    @property
    def enabled(self) -> bool:
        return self._fd is not None

    def record(self, phase: str, start: float, end: float, outcome: str = "ok",
               **detail: Any) -> None:
        """Append one event; never raises."""
        if self.path is None:
            return
        event = {"run": self.run, "phase": phase, "start": round(start, 6),
                 "end": round(end, 6), "outcome": outcome,
                 **{k: v for k, v in detail.items() if k not in CORE_KEYS}}
        with self._lock:
            if len(self.kept) < KEPT_EVENTS:
                self.kept.append(event)
        if self._fd is None:
            return
        try:
            line = (json.dumps(event, default=str, separators=(",", ":")) + "\n").encode()
            with self._lock:
                if self._fd is not None:
                    os.write(self._fd, line)
        except (OSError, TypeError, ValueError) as exc:
            _debug("events disabled: cannot write %s: %s", self.path, exc)
            self.close()

    @contextmanager
    def phase(self, name: str, **detail: Any) -> Iterator[dict[str, Any]]:
        """Time the block; the yielded dict is extra detail, `outcome` in it overrides.

        An exception marks the phase failed with its exit code and cause, and propagates.
        """
        extra: dict[str, Any] = dict(detail)
        start = time.time()
        try:
            yield extra
        except BaseException as exc:
            self.record(name, start, time.time(), "failed", **extra, **failure_detail(exc))
            raise
        outcome = str(extra.pop("outcome", "ok"))
        self.record(name, start, time.time(), outcome, **extra)

    def close(self) -> None:
        with self._lock:
            fd, self._fd = self._fd, None
        if fd is not None:
            with suppress(OSError):
                os.close(fd)


def failure_detail(exc: BaseException) -> dict[str, Any]:
    """exit_code + cause of an AscendNodeError (duck-typed), else the exception's class."""
    code = getattr(exc, "exit_code", None)
    cause = getattr(exc, "cause", None)
    if isinstance(code, int) and isinstance(cause, str):
        return {"exit_code": code, "cause": cause}
    return {"error": f"{exc.__class__.__name__}: {exc}"[:500]}


def _trim(path: Path, limit: int) -> None:
    """Keep the newest half (whole lines) of a file grown past `limit`."""
    try:
        size = path.stat().st_size
    except FileNotFoundError:
        return
    if size <= limit:
        return
    from ascend_node.atomic import atomic_write_bytes

    with open(path, "rb") as fh:
        fh.seek(size - limit // 2)
        tail = fh.read()
    cut = tail.find(b"\n")
    atomic_write_bytes(path, tail[cut + 1:] if cut >= 0 else b"", mode=0o640)


# ------------------------------------------------------------------ the active recorder

_NULL = Recorder(None, "")
_current = _NULL


def start_run(state_dir: Path, command: str, started: float, run_id: str,
              **detail: Any) -> None:
    """A new run in `<state-dir>/events.jsonl`; `started` is the agent's monotonic start."""
    recorder = Recorder.open(state_dir, command, started=time.time() - (time.monotonic() - started),
                             run_id=run_id, **detail)
    activate(recorder).close()  # the previous one, when the chain reruns in-process


def activate(recorder: Recorder) -> Recorder:
    """Make `recorder` the one `phase`/`record` write to; returns the previous one."""
    global _current
    previous, _current = _current, recorder
    return previous


def deactivate() -> None:
    global _current
    _current.close()
    _current = _NULL


def current() -> Recorder:
    return _current


def phase(name: str, **detail: Any) -> Any:
    """`with events.phase("name", key=value) as extra:` on the active recorder."""
    return _current.phase(name, **detail)


def record(phase_name: str, start: float, end: float, outcome: str = "ok",
           **detail: Any) -> None:
    _current.record(phase_name, start, end, outcome, **detail)


WARNING_PHASE = "warning"


def warn(text: str) -> None:
    """A warning worth more than a log line: logged, and kept as a `warning` event, which
    the node's shared summary carries to `report` (report/record.py)."""
    import logging

    logging.getLogger("ascend_node").warning("%s", text)
    now = time.time()
    _current.record(WARNING_PHASE, now, now, "warn", warning=text)


# ------------------------------------------------------------------ reading


def parse_events(lines: Iterable[str]) -> list[dict[str, Any]]:
    """The well-formed events among `lines` (a torn or foreign line is skipped)."""
    out = []
    for line in lines:
        try:
            event = json.loads(line)
        except ValueError:
            continue
        if (isinstance(event, dict) and isinstance(event.get("run"), str)
                and isinstance(event.get("phase"), str)
                and isinstance(event.get("start"), (int, float))
                and isinstance(event.get("end"), (int, float))):
            out.append(event)
    return out


def read_events(state_dir: Path) -> list[dict[str, Any]]:
    """Every readable event of `state_dir` (empty when there is no file)."""
    try:
        with open(state_dir / EVENTS_JSONL, encoding="utf-8", errors="replace") as fh:
            return parse_events(fh)
    except OSError:
        return []


def last_run(events: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The events of the newest run (the run whose first event is latest)."""
    runs: dict[str, list[dict[str, Any]]] = {}
    for event in events:
        runs.setdefault(str(event["run"]), []).append(dict(event))
    if not runs:
        return []
    newest = max(runs.values(), key=lambda evs: min(float(e["start"]) for e in evs))
    return sorted(newest, key=lambda e: float(e["start"]))


def summarize(events: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Per phase of one run, in order of first start: seconds, outcome, count.

    A phase seen several times (concurrent `hccn_tool` calls) spans its first start to
    its last end; its outcome is the first that is not ok.
    """
    phases: dict[str, dict[str, Any]] = {}
    for event in sorted(events, key=lambda e: float(e["start"])):
        name = str(event["phase"])
        if name == RUN_PHASE:
            continue
        start, end = float(event["start"]), float(event["end"])
        outcome = str(event.get("outcome", "ok"))
        cur = phases.get(name)
        if cur is None:
            phases[name] = {"phase": name, "start": start, "end": end, "outcome": outcome,
                            "count": 1}
            continue
        cur["start"], cur["end"] = min(cur["start"], start), max(cur["end"], end)
        cur["count"] += 1
        if cur["outcome"] == "ok":
            cur["outcome"] = outcome
    rows = list(phases.values())
    for row in rows:
        row["seconds"] = round(max(0.0, row["end"] - row["start"]), 3)
    return rows


def format_summary(events: Iterable[Mapping[str, Any]]) -> list[str]:
    """Text lines for `status`: one per phase, sub-phases indented, then the total."""
    evs = list(events)
    rows = summarize(evs)
    if not rows:
        return []
    lines = []
    for row in rows:
        depth = row["phase"].count(".")
        label = ("  " * depth) + row["phase"].rsplit(".", 1)[-1]
        calls = f"  ({row['count']} calls)" if row["count"] > 1 else ""
        lines.append(f"  {label:<22} {row['seconds']:>8.3f} s  {row['outcome']}{calls}")
    top = [r for r in rows if "." not in r["phase"]]
    total = max(r["end"] for r in top) - min(r["start"] for r in top) if top else 0.0
    lines.append(f"  {'total':<22} {total:>8.3f} s")
    return lines


def top_level_seconds(events: Iterable[Mapping[str, Any]]) -> dict[str, float]:
    """{phase: seconds} of the top-level phases of one run (for one-line-per-node views)."""
    return {r["phase"]: r["seconds"] for r in summarize(events) if "." not in r["phase"]}
