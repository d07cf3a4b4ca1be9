"""Streaming every pod's log of a launched Job (the thin edge over `log_follow`'s bookkeeping).

One thread keeps the pods in view (a list, then a short watch, again and again: a pod
re-created by Volcano's RestartJob has a new uid and is a new stream read from its start);
each started pod's first container gets a reader thread holding one
`GET pods/<pod>/log?follow=true&timestamps=true[&sinceTime=]` (`Client.pod_log`). A reader
that has held its stream for `period_s` closes it and the next round reopens it after the
cursor (no stream held open forever, no line lost or repeated: `log_follow`). A stream that
ends by itself has been read to the log's end: the kubelet ends a `follow` stream only once the
container is no longer running (kubernetes v1.30.2 pkg/kubelet/kuberuntime/logs/logs.go,
`ReadLogs` -> `waitLogs` -> `isContainerRunning`: "Only keep following container log when
it is running").

Lines go to `write` (stdout: the pods' output is what a pipeline step prints; launch's own
progress stays on stderr, docs/launch.md) whole, one at a time, each prefixed
`[<task> <index>] `. Each thread has its own `Client` (a Client is not shared between
threads).
"""

from __future__ import annotations

import codecs
import contextlib
import http.client
import threading
import time
from typing import Any, Callable, Optional

from ascend_node.kube.client import Client, LogStream
from ascend_node.kube.errors import Forbidden, KubeError
from ascend_node.kube.resources import PODS
from ascend_node.launch.log_follow import LogBook, Open, pod_log
from ascend_node.launch.verdict import pod_task_index

PERIOD_S = 300.0  # the longest one log stream is held open before it is reopened
ROUND_S = 2  # the longest the pod watch of one round is held (a reopen waits at most this)


class PodLogs:
    """Every pod log of Job `job` to `write`, from `start` until `finish`."""

    def __init__(self, make_client: Callable[[], Client], job: str,
                 write: Callable[[str], None], say: Callable[[str], None],
                 period_s: float = PERIOD_S) -> None:
        self.make_client, self.job, self.write, self.say = make_client, job, write, say
        self.forbidden = False
        self.period_s = period_s
        self.book = LogBook()
        self.lock = threading.Lock()  # the book and the output
        self.stop = threading.Event()
        self.ending = threading.Event()  # the verdict is in: a log that cannot be opened is lost
        self.streams: dict[str, tuple[LogStream, float]] = {}  # uid -> (stream, opened at)
        self.readers: list[threading.Thread] = []
        self.thread = threading.Thread(target=self._run, name="pod-logs", daemon=True)

    def start(self) -> None:
        self.thread.start()

    def finish(self, read_to_end: bool, timeout: float = 30.0) -> None:
        """Stop following: with `read_to_end` first wait (at most `timeout`) until every
        pod's log was read to its end; then close every stream."""
        end = time.monotonic() + timeout
        self.ending.set()
        if read_to_end:  # a round now, not at the watch's end: the ended pods' last reads
            with contextlib.suppress(KubeError):
                self._round(self.make_client().list(
                    PODS, label_selector=f"volcano.sh/job-name={self.job}").get("items") or [])
        while read_to_end and time.monotonic() < end:
            with self.lock:
                if self.book.all_done():
                    break
            time.sleep(0.1)
        self.stop.set()
        with self.lock:
            open_now = [s for s, _ in self.streams.values()]
        for stream in open_now:
            stream.close()
        # the pods' thread is not waited for: it may sit in its short watch (ROUND_S) and
        # ends at the next round; it opens nothing once `stop` is set
        with self.lock:
            readers = list(self.readers)
        for reader in readers:
            reader.join(timeout=10)

    def _emit(self, lines: list[str]) -> None:
        for line in lines:
            self.write(line)

    # -- the pods ------------------------------------------------------------------------
    def _run(self) -> None:
        client = self.make_client()
        selector = f"volcano.sh/job-name={self.job}"
        while not self.stop.is_set():
            try:
                listed = client.list(PODS, label_selector=selector)
                self._round(listed.get("items") or [])
                for _event in client.watch(PODS, listed["metadata"].get("resourceVersion"),
                                           label_selector=selector, timeout_seconds=ROUND_S):
                    break
            except KubeError:
                self.stop.wait(1.0)  # the API is away for a moment: the next round sees

    def _round(self, pods: list[dict[str, Any]]) -> None:
        now = time.monotonic()
        with self.lock:
            seen, started = set(), set()
            for pod in pods:
                state = pod_log(pod)
                if state is None:
                    continue
                task, index = pod_task_index(pod)
                self.book.pod(state.uid, state.name, task, index, state.ended)
                seen.add(state.uid)
                if state.started:
                    started.add(state.uid)
                elif state.ended:
                    self.book.gone(state.uid)  # ended without running: no log
            for uid in self.book.known():
                if uid not in seen and uid not in self.streams:
                    self.book.gone(uid)  # deleted: its log is no longer served
            opens = [] if self.stop.is_set() else self.book.wanted(started)
            overdue = [s for s, at in self.streams.values() if now - at > self.period_s]
        for stream in overdue:
            stream.close()  # reopened after the cursor by a later round
        containers = {(p.get("metadata") or {}).get("uid"): p for p in pods}
        for op in opens:
            state = pod_log(containers[op.uid])
            assert state is not None
            reader = threading.Thread(target=self._read, args=(op, state.container),
                                      name=f"log-{op.name}", daemon=True)
            with self.lock:  # started before `finish` can see it: join needs a started thread
                self.readers = [r for r in self.readers if r.is_alive()]
                reader.start()
                self.readers.append(reader)

    # -- one stream ----------------------------------------------------------------------
    def _read(self, op: Open, container: str) -> None:
        clean = False
        stream: Optional[LogStream] = None
        try:
            client = self.make_client()
            stream = client.pod_log(op.name, container, op.since)
            with self.lock:
                self.streams[op.uid] = (stream, time.monotonic())
            if self.stop.is_set():
                return
            if not _still_there(client, op):
                # The log API takes a pod's name, not its uid: Volcano re-created the pod
                # under that name since the round that asked for this stream (a RestartJob),
                # so the stream may be the new pod's, which a stream of its own reads from its
                # start. The pod this stream was for is deleted: its log is no longer served.
                with self.lock:
                    self.book.gone(op.uid)
                return
            decoder = codecs.getincrementaldecoder("utf-8")("replace")
            while True:
                data = stream.read()
                if not data:
                    clean = not stream.closed
                    if clean:  # the kubelet ends a follow only when the container has
                        with self.lock:  # exited: this is the log's end (never reopened,
                            # so a reopen by name can never read a re-created pod's log)
                            self.book.pod(op.uid, op.name, "", None, ended=True)
                    break
                with self.lock:
                    self._emit(self.book.feed(op.uid, decoder.decode(data)))
        except Forbidden as exc:  # the Role lacks pods/log: said once, logs given up
            with self.lock:
                self.book.gone(op.uid)
                if not self.forbidden:
                    self.forbidden = True
                    cause = exc.cause.replace("the agent's Role", "the launcher's Role")
                    self.say(f"not following the pods' logs: {cause}")
        except KubeError:
            clean = False  # refused (not started yet) or unanswered: reopened later ...
            if self.ending.is_set():
                with self.lock:  # ... unless the Job has ended: its node no longer serves it
                    self.book.gone(op.uid)
        except (OSError, http.client.HTTPException, ValueError):
            clean = False  # cut, or closed by us: reopened after the cursor
        finally:
            if stream is not None:
                with contextlib.suppress(OSError):
                    stream.close()
            with self.lock:
                self.streams.pop(op.uid, None)
                self._emit(self.book.closed(op.uid, clean))


def _still_there(client: Client, op: Open) -> bool:
    """Whether the pod named `op.name` is still the one of `op.uid`, read after its stream was
    opened: names are unique at any instant, so if it is, the stream opened before is its
    own. A list by name (the launcher's Role holds pods list, not get)."""
    listed = client.list(PODS, field_selector=f"metadata.name={op.name}").get("items") or []
    return any((p.get("metadata") or {}).get("uid") == op.uid for p in listed)
