"""Issue 29: a large job's follower asks the server for at most `cadence.WINDOW_RPCS` in
any `cadence.WINDOW` seconds of its wait, its join included; a small job's is not paced.

In-process runs of one follower against documents the test writes (node 0's attempt and
slot), with an injected clock and the jitter at its shortest naps (the worst case). What
the follower does between two naps is classified by the calls it makes — a glance (the
run directory opened alone), a look (attempt.json opened), a join (a look that creates
its slot) — and charged what the bed measured for each (`cadence.GLANCE_RPCS`,
`LOOK_PEAK_RPCS`, `NO_ATTEMPT_LOOK_RPCS`, `JOIN_RPCS`; bench/bench_nfs_burst.py --trace),
independently of the follower's own ledger. The bed's own counts are in
docs/rendezvous.md, "The start burst".
"""

from __future__ import annotations

import os
import random
from pathlib import Path

import pytest

from ascend_node.discover.identity import NodeIdentity
from ascend_node.rendezvous import cadence
from ascend_node.rendezvous.models import AttemptDoc
from ascend_node.rendezvous.protocol import Rendezvous
from ascend_node.rendezvous.store import RunPaths, write_doc
from tests.rdzv_docs import data, member

P = 0.2  # ASCEND_NODE_POLL_INTERVAL's default


class _Stop(Exception):
    pass


def run_follower(tmp_path: Path, nodes: int, seconds: float, node0_after: float = 0.0,
                 monkeypatch: pytest.MonkeyPatch | None = None,
                 dir_after: float | None = None, made: list[str] | None = None,
                 ) -> list[tuple[float, str]]:
    """Follower 1 of a job of `nodes` whose other pods never come, for `seconds` of its
    clock; node 0 opens its attempt `node0_after` s after the follower starts. Returns
    each stretch of calls between two naps: (its time, "glance" | "look" | "no-attempt
    look" | "join"), glances and looks of one stretch as separate entries.
    `dir_after`: node 0 writes `attempt.json` at the start but makes the attempt's
    directory (its own slot) only this many s later (math.inf: never); `made` collects
    the directories the follower makes."""
    assert monkeypatch is not None
    paths = RunPaths(tmp_path, "run-1")
    start = 1000.0
    now = [start]

    def open_attempt(slot: bool = True) -> None:
        if not paths.attempt_file.exists():
            write_doc(paths.attempt_file, AttemptDoc(run_id="run-1", attempt_id="a1",
                                                     opened_by="uid-0", node_count=nodes,
                                                     master_count=1), tmp_path)
        if slot:
            write_doc(paths.slot("a1", 0), member(0, nodes=nodes), tmp_path)

    if dir_after is not None:
        open_attempt(slot=False)
    elif node0_after <= 0:
        open_attempt()
    calls: list[tuple[str, str]] = []  # ("dir" | "read" | "create", path) since the last nap
    stretches: list[tuple[float, list[tuple[str, str]]]] = []
    node0 = [False]  # node 0 is writing: its calls are not the follower's
    real_open = os.open

    def recording_open(path, flags, *args, **kwargs):
        kind = ("create" if flags & os.O_CREAT else
                "dir" if flags & os.O_DIRECTORY else "read")
        calls.append((kind, str(path)))
        return real_open(path, flags, *args, **kwargs)

    began = [start]

    def sleep(seconds_: float) -> None:
        stretches.append((began[0], list(calls)))
        calls.clear()
        now[0] += seconds_
        began[0] = now[0]
        if node0_after > 0 and now[0] - start >= node0_after and not paths.attempt_file.exists():
            open_attempt()
            calls.clear()  # (node 0's writes, not the follower's)
        if (dir_after is not None and now[0] - start >= dir_after
                and not paths.attempt_dir("a1").exists()):
            node0[0] = True  # (node 0's writes, not the follower's)
            open_attempt()
            node0[0] = False
            calls.clear()
        if now[0] - start > seconds:
            raise _Stop

    real_mkdir = os.mkdir

    def recording_mkdir(path, *args, **kwargs):
        if made is not None and not node0[0]:
            made.append(str(path))
        return real_mkdir(path, *args, **kwargs)

    monkeypatch.setattr(os, "open", recording_open)
    monkeypatch.setattr(os, "mkdir", recording_mkdir)
    monkeypatch.setattr(random, "uniform", lambda a, b: a)  # the shortest naps
    ident = NodeIdentity("worker", 0, 1, nodes - 1, data(1).pod_ip, data(1).host_ip, "uid-1")
    rdzv = Rendezvous(paths, ident, data(1), deadline=now[0] + 600, timeout=600,
                      progress_interval=1e9, clock=lambda: now[0], sleep=sleep)
    with pytest.raises(_Stop):
        rdzv.run()
    monkeypatch.undo()
    root, attempt_file = str(paths.root), str(paths.attempt_file)
    events: list[tuple[float, str]] = []
    for at, stretch in stretches:
        # (a call is recorded before it is made: a failed open counts too)
        if stretch[:1] == [("dir", root)]:
            events.append((at - start, "glance"))
        if any(kind == "create" and "/attempts/" in path for kind, path in stretch):
            events.append((at - start, "join"))
        elif any(path == attempt_file for _, path in stretch):
            found = any("/attempts/" in path for _, path in stretch)
            events.append((at - start, "look" if found else "no-attempt look"))
    return events


COST = {"glance": cadence.GLANCE_RPCS, "look": cadence.LOOK_PEAK_RPCS,
        "no-attempt look": cadence.NO_ATTEMPT_LOOK_RPCS, "join": cadence.JOIN_RPCS}


def peak_window(events: list[tuple[float, str]], window: float = cadence.WINDOW) -> float:
    """The most RPCs any `window` s hold (every window starting at an event)."""
    return max(sum(COST[k] for t, k in events if start <= t < start + window)
               for start, _ in events)


@pytest.mark.parametrize("nodes", [64, 128, 1024])
@pytest.mark.parametrize("node0_after", [0.0, 2.0])
def test_no_window_of_a_large_jobs_follower_holds_more_than_the_budget(
        tmp_path, monkeypatch, nodes, node0_after):
    """The join (its first look, node 0's slot, its publish) stands alone in its window,
    whether node 0's attempt was there at the follower's first look or came after it
    had glanced for a while; glances and looks then stay within the budget too."""
    events = run_follower(tmp_path, nodes, 30.0, node0_after, monkeypatch)
    kinds = [k for _, k in events]
    assert kinds.count("join") == 1, events
    assert peak_window(events) <= cadence.WINDOW_RPCS, events
    joined = next(t for t, k in events if k == "join")
    after = [t for t, k in events if k == "glance" and t > joined]
    # the wait the budget costs is bounded: glances resume once the join leaves the window
    assert after and after[0] <= joined + cadence.WINDOW + cadence.GLANCE_EVERY, events
    # and then come every GLANCE_EVERY (the shortest nap), a look every LOOK_EVERY
    late = [t for t, k in events if k == "glance" and t > joined + cadence.WINDOW + 1]
    gaps = [b - a for a, b in zip(late, late[1:])]
    assert max(gaps) <= cadence.GLANCE_EVERY * 1.2 + cadence.WINDOW / 2, gaps
    assert len(late) >= (late[-1] - late[0]) / (cadence.GLANCE_EVERY * 1.2 + 0.5)


def test_a_pod_that_came_before_node0_joins_within_a_window_of_the_attempt(
        tmp_path, monkeypatch):
    """The price of the budget for a pod that glanced before the attempt opened: its join
    waits until its glances have left the window, never longer."""
    events = run_follower(tmp_path, 64, 20.0, 2.0, monkeypatch)
    joined = next(t for t, k in events if k == "join")
    assert 2.0 <= joined <= 2.0 + cadence.GLANCE_EVERY * 1.2 + cadence.WINDOW, events


@pytest.mark.parametrize("nodes", [2, 8, 31])
def test_a_small_jobs_follower_is_not_paced(tmp_path, monkeypatch, nodes):
    """N <= 31: the fast polls of before — a full look every poll interval for the first
    FAST_FOR s, the publish included, whatever they cost (sub-second lag)."""
    events = run_follower(tmp_path, nodes, 8.0, 0.0, monkeypatch)
    looks = [t for t, k in events if k in ("look", "join")]
    assert [k for _, k in events].count("join") == 1
    gaps = [b - a for a, b in zip(looks, looks[1:])]
    assert max(gaps) <= P + 1e-9, gaps
    assert len(looks) >= 8.0 / P - 2


def test_the_window_budget_is_what_the_issue_asks():
    """5 RPC/s over any 5 s window (issue 29's target), and a join fits in it alone."""
    assert cadence.WINDOW_RPCS / cadence.WINDOW == 5.0
    assert cadence.GLANCE_RPCS + cadence.JOIN_RPCS <= cadence.WINDOW_RPCS
    assert cadence.paced(64) and not cadence.paced(63) and not cadence.paced(8)



def test_on_a_fuse_volume_a_large_jobs_follower_keeps_its_cadence(tmp_path, monkeypatch):
    """sshfs caches attributes, so every poll there is a full look (docs/rendezvous.md,
    "Poll cost"); the pacing's costs are an NFS server's: it does not apply."""
    from ascend_node.rendezvous import freshness
    monkeypatch.setattr(freshness, "attributes_are_current", lambda *a, **k: False)
    events = run_follower(tmp_path, 64, 10.0, 0.0, monkeypatch)
    looks = [t for t, k in events if k in ("look", "join")]
    gaps = [b - a for a, b in zip(looks, looks[1:])]
    assert max(gaps) <= cadence.GLANCE_EVERY + 1e-9, gaps


@pytest.mark.parametrize("nodes", [64, 1024])
def test_a_large_jobs_follower_that_meets_the_attempt_before_its_directory_makes_none(
        tmp_path, monkeypatch, nodes):
    """Pods started together: the follower reads node 0's `attempt.json` a few round trips
    before node 0 makes the attempt's directory (with its own slot). Making it itself
    would cost two CREATEs and their look-ups on top of the join, over the budget (~29
    RPCs in one window on the bed): it makes no directory, looks again when the window
    has room for its join, and joins once, into node 0's directory."""
    made: list[str] = []
    events = run_follower(tmp_path, nodes, 20.0, monkeypatch=monkeypatch, dir_after=0.3,
                          made=made)
    assert made == [], made
    kinds = [k for _, k in events]
    assert kinds.count("join") == 1, events
    assert peak_window(events) <= cadence.WINDOW_RPCS, events
    # the price: the join waits until the first look has left its window, no longer
    joined = next(t for t, k in events if k == "join")
    assert 0.3 <= joined <= cadence.WINDOW + cadence.GLANCE_EVERY * 1.2, events


def test_a_small_jobs_follower_still_joins_at_once_into_an_attempt_without_directory(
        tmp_path, monkeypatch):
    """N < 64 is not paced: its first look publishes, making the directory (unchanged)."""
    made: list[str] = []
    events = run_follower(tmp_path, 8, 1.0, monkeypatch=monkeypatch, dir_after=0.5,
                          made=made)
    assert (0.0, "join") in events, events
    assert str(RunPaths(tmp_path, "run-1").attempt_dir("a1")) in made
