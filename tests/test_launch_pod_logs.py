"""launch's log streaming (`launch/pod_logs.py`) over a stand-in API client: what it opens,
when it reopens (after the cursor, never a line twice), what ends a log, and a 403 said once.
The same code against the real API server and the node agent: tests/test_kube_launch_logs.py."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any, Optional

from ascend_node.kube.errors import Forbidden
from ascend_node.launch.pod_logs import PodLogs

T = "2025-12-05T12:00:00.{:09d}Z {}\n"


def pod(uid: str, state: str = "running") -> dict[str, Any]:
    return {"metadata": {"uid": uid, "name": "j-worker-0",
                         "annotations": {"volcano.sh/task-spec": "worker"}},
            "spec": {"containers": [{"name": "training"}]},
            "status": {"phase": "Running", "containerStatuses": [
                {"name": "training", "state": {state: {}}}]}}


class Stream:
    """Sends its chunks, then ends (`hold`: blocks until closed instead)."""

    def __init__(self, chunks: list[str], hold: bool) -> None:
        self.chunks, self.hold, self.closed = [c.encode() for c in chunks], hold, False
        self.shut = threading.Event()

    def read(self) -> bytes:
        if self.chunks:
            return self.chunks.pop(0)
        if self.hold:
            self.shut.wait(10)
        return b""

    def close(self) -> None:
        self.closed = True
        self.shut.set()


class World:
    def __init__(self, pods: list[dict[str, Any]], streams: list[Any]) -> None:
        self.pods, self.streams = pods, streams
        self.opens: list[tuple[str, Optional[str]]] = []
        self.recreate_on_open = False


class FakeClient:
    def __init__(self, world: World) -> None:
        self.world = world

    def list(self, res: Any, label_selector: Optional[str] = None,
             field_selector: Optional[str] = None) -> dict[str, Any]:
        items = list(self.world.pods)
        if field_selector is not None:
            name = field_selector.removeprefix("metadata.name=")
            items = [p for p in items if p["metadata"]["name"] == name]
        return {"metadata": {"resourceVersion": "1"}, "items": items}

    def watch(self, *args: Any, **kwargs: Any) -> Iterator[dict[str, Any]]:
        time.sleep(0.05)
        return iter(())

    def pod_log(self, name: str, container: str, since: Optional[str]) -> Stream:
        self.world.opens.append((name, since))
        if self.world.recreate_on_open:  # Volcano re-creates the pod under its name now
            self.world.recreate_on_open = False
            self.world.pods = [pod("u2")]
        nxt = self.world.streams.pop(0) if self.world.streams else Stream([], True)
        if isinstance(nxt, Exception):
            raise nxt
        assert isinstance(nxt, Stream)
        return nxt


def run(world: World, period_s: float = 300.0, until: float = 1.0
        ) -> tuple[list[str], list[str], PodLogs]:
    out: list[str] = []
    said: list[str] = []
    logs = PodLogs(lambda: FakeClient(world), "j", out.append, said.append,  # type: ignore
                   period_s=period_s)
    logs.start()
    time.sleep(until)
    logs.finish(read_to_end=True, timeout=5)
    return out, said, logs


def test_a_log_that_ends_by_itself_is_read_once_to_its_last_line() -> None:
    world = World([pod("u1")], [Stream([T.format(1, "a"), T.format(2, "b"),
                                        "2025-12-05T12:00:01.000000000Z last"], False)])
    out, said, logs = run(world)
    assert out == ["[worker 0] a", "[worker 0] b", "[worker 0] last"]
    assert world.opens == [("j-worker-0", None)] and said == []
    assert logs.book.all_done()


def test_a_stream_held_past_the_period_is_reopened_after_the_cursor() -> None:
    first = Stream([T.format(1, "a") + T.format(1, "b")], True)  # two lines, one time
    second = Stream([T.format(1, "a"), T.format(1, "b"), T.format(1, "c"), T.format(5, "d")],
                    False)
    world = World([pod("u1")], [first, second])
    out, _, _ = run(world, period_s=0.2, until=1.5)
    assert out == ["[worker 0] a", "[worker 0] b", "[worker 0] c", "[worker 0] d"]
    assert world.opens[:2] == [("j-worker-0", None), ("j-worker-0", "2025-12-05T12:00:00Z")]


def test_a_pod_not_started_is_not_opened_and_one_deleted_is_given_up() -> None:
    world = World([pod("u1", "waiting")], [])
    logs = PodLogs(lambda: FakeClient(world), "j", [].append, [].append)  # type: ignore
    logs.start()
    time.sleep(0.5)
    assert world.opens == []
    world.pods = []  # deleted before it ran
    time.sleep(0.5)
    logs.finish(read_to_end=True, timeout=5)
    assert logs.book.all_done()


def test_a_forbidden_log_is_said_once_and_given_up() -> None:
    denied = Forbidden('the API server forbids get pods/log "j-worker-0" in namespace "ns" '
                       "(403 Forbidden); the agent's Role needs the rule {...}")
    world = World([pod("u1"), pod("u2")], [denied, denied])
    world.pods[1]["metadata"]["name"] = "j-worker-1"
    started = time.monotonic()
    out, said, logs = run(world, until=0.8)
    assert out == [] and logs.book.all_done()
    assert said == ['not following the pods\' logs: the API server forbids get pods/log '
                    '"j-worker-0" in namespace "ns" (403 Forbidden); the launcher\'s Role '
                    "needs the rule {...}"]
    assert time.monotonic() - started < 5


def test_a_reopen_that_meets_a_pod_recreated_under_its_name_reads_only_the_new_pods_log(
        ) -> None:
    """The log API names a pod, not its uid: the reopen of u1's stream, opened as Volcano
    re-created the pod (u2), would be u2's log counted as u1's. u1 is given up, and u2's
    own stream reads u2's log once, from its start."""
    first = Stream([T.format(1, "old a")], True)
    wrong = Stream([T.format(7, "new x"), T.format(8, "new y")], False)  # u2's, by name
    own = Stream([T.format(7, "new x"), T.format(8, "new y")], False)
    world = World([pod("u1")], [first, wrong, own])

    def recreate_at_the_reopen() -> None:
        while len(world.opens) < 1:
            time.sleep(0.01)
        world.recreate_on_open = True

    threading.Thread(target=recreate_at_the_reopen, daemon=True).start()
    out, _, logs = run(world, period_s=0.2, until=1.5)
    assert out == ["[worker 0] old a", "[worker 0] new x", "[worker 0] new y"]
    assert world.opens[:3] == [("j-worker-0", None), ("j-worker-0", "2025-12-05T12:00:00Z"),
                               ("j-worker-0", None)]
    assert logs.book.all_done()
