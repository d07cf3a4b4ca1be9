"""Following every pod's log without losing or repeating a line (pure bookkeeping).

The seed's launcher restarts `stern --since 10s` every hour, which loses what was written
while no stream was open for more than 10 s and prints again what the last 10 s held
(github.com/tencentmusic/cube-studio at 852a7bd2, job-template/job/volcano/launcher.py).
Here each pod's log
is read with `timestamps=true`: every line the API returns starts with the time the container
runtime took it (RFC 3339 with nanoseconds; Kubernetes API, `PodLogOptions.timestamps`).
After a stream drops (or `launch` closes it on purpose so no stream is held open forever) it is
reopened with `sinceTime` — whole seconds, the floor of the last printed line's time, because
the API's `sinceTime` is a `metav1.Time` — and the overlap is dropped by a cursor: the last
printed time and how many lines carried exactly it (one write of several lines can share one
timestamp, so equal times are counted, not compared).

A pod is followed by its uid: a pod re-created under the same name (Volcano's RestartJob) is a
new stream read from its start; the old pod's stream is read to its end first if it is still
readable. A stream that ends because its container ended is final: its last line is printed
even without a trailing newline, and the pod is done.

This module decides; the command opens the streams (`kube` client) and prints.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from typing import Optional

_TIME = re.compile(
    r"^(\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2})(?:\.(\d{1,9}))?(Z|[+-]\d{2}:\d{2}) (.*)$", re.S)


def parse_line(line: str) -> Optional[tuple[int, str, str]]:
    """(nanoseconds since the epoch, the timestamp text, the line's own text) of one line as
    `timestamps=true` returns it; None for a line without a timestamp (not from the API)."""
    match = _TIME.match(line)
    if match is None:
        return None
    base, frac, zone, text = match.groups()
    try:
        when = datetime.fromisoformat(base + ("+00:00" if zone == "Z" else zone))
    except ValueError:
        return None
    seconds = int(when.astimezone(timezone.utc).timestamp())
    nanos = seconds * 1_000_000_000 + int((frac or "").ljust(9, "0"))
    return nanos, line[: len(line) - len(text) - 1], text


def since_time(nanos: int) -> str:
    """`sinceTime` for a resume after the line at `nanos`: the whole second it is in (UTC)."""
    return datetime.fromtimestamp(nanos // 1_000_000_000, tz=timezone.utc).strftime(
        "%Y-%m-%dT%H:%M:%SZ")


@dataclass(frozen=True)
class Cursor:
    """Where a pod's printed log ends: the last printed line's time and how many printed lines
    carried exactly that time. `last` None: nothing printed yet."""

    last: Optional[int] = None
    repeats: int = 0

    def since(self) -> Optional[str]:
        return None if self.last is None else since_time(self.last)


@dataclass(frozen=True)
class Resume:
    """What a reopened stream re-sends that was printed: every line before `floor` and the
    first `skip` lines at exactly `floor` (the cursor when the stream was opened). Kept apart
    from the cursor: within one stream, a later line at the cursor's time is new."""

    floor: Optional[int] = None
    skip: int = 0


def advance(cursor: Cursor, resume: Resume,
            lines: list[str]) -> tuple[Cursor, Resume, list[str]]:
    """The lines of a stream not printed yet, the cursor after them and what is left to skip.

    A line without a timestamp cannot be placed and is printed as it is (never lost).
    """
    out: list[str] = []
    last, repeats = cursor.last, cursor.repeats
    floor, skip = resume.floor, resume.skip
    for line in lines:
        parsed = parse_line(line)
        if parsed is None:
            out.append(line)
            continue
        nanos, _, text = parsed
        if floor is not None and nanos < floor:
            continue
        if floor is not None and nanos == floor and skip > 0:
            skip -= 1
            continue
        floor = None  # past the overlap: everything after is new
        if nanos == last:
            repeats += 1
        else:
            last, repeats = nanos, 1
        out.append(text)
    return Cursor(last, repeats), Resume(floor, skip), out


@dataclass(frozen=True)
class Open:
    """A stream for the command to open: GET .../pods/<name>/log?container=<c>&follow=true
    &timestamps=true[&sinceTime=<since>]."""

    uid: str
    name: str
    since: Optional[str]


@dataclass
class _Stream:
    name: str
    prefix: str
    cursor: Cursor = field(default_factory=Cursor)
    resume: Resume = field(default_factory=Resume)
    fragment: str = ""  # a line not yet ended by a newline
    open: bool = False
    ended: bool = False  # the pod's container has terminated: its stream will end for good
    done: bool = False


class LogBook:
    """Every pod's stream, by uid. `pods` tells it which pods exist (from a pod watch);
    `wanted` which streams to open now; `feed` the text a stream read; `closed` that a
    stream ended. Each returns the lines to print, prefixed `[<task> <index>] `."""

    def __init__(self) -> None:
        self._streams: dict[str, _Stream] = {}

    def pod(self, uid: str, name: str, task: str, index: Optional[int], ended: bool) -> None:
        """A pod as the watch shows it; `ended` once its container terminated (its log then
        has an end a stream can reach)."""
        stream = self._streams.get(uid)
        if stream is None:
            where = f"{task} {index}" if index is not None else (task or name)
            stream = self._streams[uid] = _Stream(name, f"[{where}] ")
        stream.ended = stream.ended or ended

    def wanted(self, started: set[str]) -> list[Open]:
        """Streams to open: each pod in `started` (uids whose container has run) that is not
        open and not done, resuming after its cursor."""
        out = []
        for uid, stream in self._streams.items():
            if uid in started and not stream.open and not stream.done:
                stream.open = True
                stream.resume = Resume(stream.cursor.last, stream.cursor.repeats)
                out.append(Open(uid, stream.name, stream.cursor.since()))
        return out

    def feed(self, uid: str, text: str) -> list[str]:
        """Text a stream read (any chunking): the complete new lines, prefixed."""
        stream = self._streams[uid]
        data = stream.fragment + text
        *complete, stream.fragment = data.split("\n")
        stream.cursor, stream.resume, lines = advance(stream.cursor, stream.resume, complete)
        return [stream.prefix + line for line in lines]

    def closed(self, uid: str, clean_end: bool) -> list[str]:
        """A stream ended. It was read to the log's end when it ended cleanly (the response
        finished, no error) after the pod's container ended: the last line is printed even
        without a newline and the pod is done. Otherwise it dropped (an error, a timeout, or
        `launch` closed it so no stream is held open forever): the unfinished line is
        discarded, to be read again whole when `wanted` reopens the stream after the cursor."""
        stream = self._streams[uid]
        stream.open = False
        if clean_end and stream.ended:
            lines: list[str] = []
            if stream.fragment:
                stream.cursor, stream.resume, lines = advance(stream.cursor, stream.resume,
                                                              [stream.fragment])
            stream.fragment, stream.done = "", True
            return [stream.prefix + line for line in lines]
        stream.fragment = ""
        return []

    def gone(self, uid: str) -> None:
        """The pod was deleted and its log cannot be read any more: stop wanting it."""
        if uid in self._streams:
            self._streams[uid] = replace(self._streams[uid], done=True, open=False)

    def known(self) -> list[str]:
        """Every pod's uid the book has seen."""
        return list(self._streams)

    def done(self, uid: str) -> bool:
        return uid in self._streams and self._streams[uid].done

    def all_done(self) -> bool:
        return all(s.done for s in self._streams.values())


@dataclass(frozen=True)
class PodLog:
    """What the log follower needs of a pod as the API shows it: which stream (uid, name, the
    first app container: the one the Job's command runs in, whose exit code the policies
    read), its place in the Job, whether the container has run (a log to open) and has ended
    (a log with an end)."""

    uid: str
    name: str
    container: str
    started: bool
    ended: bool


def pod_log(pod: dict[str, object]) -> Optional[PodLog]:
    """The log state of one pod (None without a uid or a container: nothing to read)."""
    meta = pod.get("metadata") or {}
    spec = pod.get("spec") or {}
    status = pod.get("status") or {}
    assert isinstance(meta, dict) and isinstance(spec, dict) and isinstance(status, dict)
    containers = spec.get("containers") or []
    if not meta.get("uid") or not containers:
        return None
    first = str(containers[0].get("name", ""))
    started = ended = False
    for cs in status.get("containerStatuses") or []:
        if cs.get("name") != first:
            continue
        state = cs.get("state") or {}
        ended = "terminated" in state
        started = ended or "running" in state
    if status.get("phase") in ("Succeeded", "Failed") and not started:
        ended = True  # ended without its container running (e.g. an init container failed)
    return PodLog(str(meta["uid"]), str(meta.get("name", "")), first, started, ended)
