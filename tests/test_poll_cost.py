"""What a poll costs, and the NFS rule: revalidate a directory before reading a file in it.

A Linux NFS client at default mounts caches negative lookups until the parent directory's
attributes expire (30-60 s); opening the directory first makes it look again (nfs(5)
`lookupcache`, close-to-open; measured: docs/rendezvous.md, "Network filesystems"). These
tests record every `os.open` of a waiting pod and check, poll by poll, that each file
another pod writes is read only after the directory holding it was opened in the same poll —
and that the cost stays O(1) for a follower.
"""

from __future__ import annotations

import hashlib
import os
import stat
import time
from pathlib import Path
from typing import Callable

import pytest

from ascend_node.discover.identity import NodeIdentity
from ascend_node.ranktable import build_rank_table, render_rank_table
from ascend_node.rendezvous import cadence, freshness
from ascend_node.rendezvous.models import AttemptDoc, OutcomeDoc, TableRecord
from ascend_node.rendezvous.participant import to_server
from ascend_node.rendezvous.protocol import Rendezvous
from ascend_node.rendezvous.store import RunPaths, write_doc
from tests.rdzv_docs import data, member


class _Stop(Exception):
    pass


Poll = list[tuple[str, str]]  # ("dir" | "file", path) in the order opened


def record_polls(tmp_path: Path, nodes: int, me: int, monkeypatch, polls: int = 6,
                 on_nap: Callable[[int], None] = lambda k: None, absent: tuple[int, ...] = ()
                 ) -> list[Poll]:
    """Run node `me` of an attempt where every node but the last is present; stop after
    `polls` sleeps and return what each poll opened ("dir", "file") or listed ("list":
    node 0 only; a follower that lists fails the test). `on_nap(k)` runs at the k-th
    sleep (the peers acting meanwhile)."""
    tmp_path.mkdir()
    paths = RunPaths(tmp_path, "run-1")
    write_doc(paths.attempt_file, AttemptDoc(run_id="run-1", attempt_id="a1", opened_by="uid-0",
                                             node_count=nodes, master_count=1), tmp_path)
    for index in range(nodes - 1):
        if index != me and index not in absent:
            write_doc(paths.slot("a1", index), member(index, nodes=nodes), tmp_path)
    ident = NodeIdentity("master" if me == 0 else "worker", max(me - 1, 0), 1, nodes - 1,
                         data(me).pod_ip, data(me).host_ip, f"uid-{me}")
    recorded: list[Poll] = []
    current: Poll = []
    real_open = os.open

    def recording_open(path, flags, *args, **kwargs):
        fd = real_open(path, flags, *args, **kwargs)
        kind = "dir" if stat.S_ISDIR(os.fstat(fd).st_mode) else "file"
        if not flags & (os.O_WRONLY | os.O_RDWR | os.O_CREAT):
            current.append((kind, str(path)))
        return fd

    real_scandir = os.scandir

    def no_listing(*args, **kwargs):
        raise AssertionError("a waiting follower listed a directory")

    def recording_scandir(path):
        current.append(("list", str(path)))
        return real_scandir(path)

    def sleep(_seconds: float) -> None:
        recorded.append(list(current))
        current.clear()
        if len(recorded) == polls:
            raise _Stop
        on_nap(len(recorded))

    monkeypatch.setattr(os, "open", recording_open)
    monkeypatch.setattr(os, "listdir", no_listing)
    monkeypatch.setattr(os, "scandir", recording_scandir if me == 0 else no_listing)
    rdzv = Rendezvous(paths, ident, data(me), deadline=time.monotonic() + 60, timeout=60,
                      progress_interval=1e9, sleep=sleep)
    with pytest.raises(_Stop):
        rdzv.run()
    monkeypatch.undo()
    return recorded


def assert_each_read_follows_its_dir(polls: list[Poll]) -> None:
    for number, poll in enumerate(polls):
        seen_dirs: set[str] = set()
        for kind, path in poll:
            if kind == "dir":
                seen_dirs.add(path)
            elif kind == "list":
                assert path in seen_dirs, f"poll {number} listed {path} unrevalidated: {poll}"
            else:
                assert str(Path(path).parent) in seen_dirs, (
                    f"poll {number} read {path} before revalidating its directory: {poll}")


def test_a_follower_of_a_large_job_glances_from_its_start(tmp_path, monkeypatch):
    """Issue 29: at N >= 64 the first seconds cost no more than the calm wait: after its
    first look and its publish, every poll is one open of the run directory."""
    polls = record_polls(tmp_path / "n64", 64, 63, monkeypatch)
    paths = RunPaths(tmp_path / "n64", "run-1")
    for poll in polls[2:]:
        assert poll == [("dir", str(paths.root))], poll


def test_follower_poll_is_constant_and_revalidates_first(tmp_path, monkeypatch):
    small = record_polls(tmp_path / "n4", 4, 3, monkeypatch)[2:]  # after publishing
    # 63: the largest job whose followers still look at every poll of their first seconds
    # (from 64 they glance from the start: the test below)
    large = record_polls(tmp_path / "n63", 63, 62, monkeypatch)[2:]
    assert [len(p) for p in small] == [len(p) for p in large]
    for poll in large:
        dirs = [p for kind, p in poll if kind == "dir"]
        files = [p for kind, p in poll if kind == "file"]
        # one open per directory watched (run dir, attempt dir), then attempt.json and
        # its own slot (outcome.json does not exist yet, so it is no open that succeeds)
        assert len(dirs) == 2 and len(set(dirs)) == 2, poll
        assert len(files) == 2, poll
    assert_each_read_follows_its_dir(small + large)


def _slot_reads(poll: Poll) -> list[str]:
    return [Path(p).name for kind, p in poll if kind == "file" and "node-" in p]


def test_node0_revalidates_before_reading_slots(tmp_path, monkeypatch):
    polls = record_polls(tmp_path / "n8", 8, 0, monkeypatch)[1:]
    assert_each_read_follows_its_dir(polls)
    for poll in polls:
        dirs = [p for kind, p in poll if kind == "dir"]
        assert len(dirs) == len(set(dirs)) <= 2, poll  # once per directory per poll
        listed = [p for kind, p in poll if kind == "list"]
        assert all(p in dirs for p in listed), poll  # a listing follows its revalidation


def test_node0_reads_a_slot_once_and_then_only_new_slots(tmp_path, monkeypatch):
    """Node 0's cost per poll grows with the slots that are new, not with N: a slot read
    and validated once is not read again in the attempt while the directory's listing
    shows it unchanged; a slot that arrives later is the only one read."""
    paths = RunPaths(tmp_path / "n16", "run-1")

    def node14_arrives(k: int) -> None:
        if k == 3:
            write_doc(paths.slot("a1", 14), member(14, nodes=16), tmp_path / "n16")

    polls = record_polls(tmp_path / "n16", 16, 0, monkeypatch, polls=8,
                         on_nap=node14_arrives, absent=(14,))
    # the first poll (publishing its own slot, then the first look) reads the 14 present
    # slots (0-13) once; later polls read nothing, except node 14's slot once it is there
    first = _slot_reads(polls[0]) + _slot_reads(polls[1])
    assert sorted(set(first)) == sorted(f"node-{i}.json" for i in range(14))
    assert len(first) == len(set(first))  # each once
    later = [name for poll in polls[2:] for name in _slot_reads(poll)]
    assert later == ["node-14.json"]
    # and with nothing new, a poll is two directory opens and no listing at all
    quiet = polls[-1]
    assert [kind for kind, _ in quiet] == ["dir", "dir"], quiet


def test_missing_directory_is_revalidated_from_the_nearest_ancestor(tmp_path, monkeypatch):
    """A directory that did not exist when a pod looked is a cached negative lookup in
    its parent: revalidate the ancestors from the trusted root down, stopping at the
    first one still missing."""
    (tmp_path / "a").mkdir()
    opened: list[str] = []
    real_open = os.open

    def recording_open(path, flags, *args, **kwargs):
        opened.append(str(path))
        return real_open(path, flags, *args, **kwargs)

    monkeypatch.setattr(os, "open", recording_open)
    assert freshness.revalidate_dir(tmp_path / "a" / "b" / "c", tmp_path) is False
    assert opened == [str(tmp_path / "a" / "b" / "c"), str(tmp_path), str(tmp_path / "a"),
                      str(tmp_path / "a" / "b")]
    opened.clear()
    (tmp_path / "a" / "b" / "c").mkdir(parents=True)
    assert freshness.revalidate_dir(tmp_path / "a" / "b" / "c", tmp_path) is True
    assert opened == [str(tmp_path / "a" / "b" / "c")]  # known directory: one open


def test_revalidation_never_follows_a_symlinked_directory(tmp_path):
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "run").symlink_to(tmp_path / "elsewhere")
    assert freshness.revalidate_dir(tmp_path / "run", tmp_path) is False


def test_freshness_opens_each_directory_once_per_poll(tmp_path, monkeypatch):
    (tmp_path / "d").mkdir()
    opened: list[str] = []
    real_open = os.open
    monkeypatch.setattr(os, "open", lambda p, f, *a, **k: opened.append(str(p)) or
                        real_open(p, f, *a, **k))
    fresh = freshness.Freshness(tmp_path)
    for name in ("x.json", "y.json", "z.json"):
        fresh.file(tmp_path / "d" / name)
    assert opened == [str(tmp_path / "d")]
    fresh.new_poll()
    fresh.file(tmp_path / "d" / "x.json")
    assert opened == [str(tmp_path / "d")] * 2


def test_a_directory_watched_for_long_is_listed_now_and_then(tmp_path, monkeypatch):
    """The same-tick fallback: a listing replaces negative entries an open cannot."""
    watched = tmp_path / "attempt"
    watched.mkdir()
    for i in range(100):
        (watched / f"node-{i}.json").write_text("{}")
    now = [0.0]
    listings: list[str] = []
    real_scandir = os.scandir

    def recording_scandir(path):
        listings.append(str(path))
        return real_scandir(path)

    monkeypatch.setattr(os, "scandir", recording_scandir)
    fresh = freshness.Freshness(tmp_path, clock=lambda: now[0])

    def poll_at(t: float) -> None:
        now[0] = t
        fresh.new_poll()
        fresh.dir(watched)

    poll_at(0.0)
    poll_at(1.9)
    assert listings == []  # a short wait costs opens only
    poll_at(2.0)
    assert listings == [str(watched)]
    # next listing no sooner than LIST_EVERY + LIST_PER_ENTRY x the 100 entries seen
    gap = freshness.LIST_EVERY + freshness.LIST_PER_ENTRY * 100
    poll_at(2.0 + gap - 0.01)
    assert len(listings) == 1
    poll_at(2.0 + gap)
    assert len(listings) == 2


def _real_outcome(nodes: int) -> OutcomeDoc:
    """The verdict node 0 would write for `nodes` members of tests.rdzv_docs."""
    members = [member(i, nodes=nodes) for i in range(nodes)]
    text = render_rank_table(build_rank_table([to_server(m.data) for m in members], "auto"))
    return OutcomeDoc(run_id="run-1", attempt_id="a1", result="table",
                      members=tuple(TableRecord(global_index=m.data.global_index,
                                                incarnation=m.incarnation,
                                                digest=m.data.digest()) for m in members),
                      ranktable_text=text,
                      ranktable_sha256=hashlib.sha256(text.encode()).hexdigest())


def test_a_calm_follower_glances_and_sees_the_verdict_at_its_next_poll(tmp_path, monkeypatch):
    """Once calm, a waiting follower's poll is one directory open (a GETATTR on NFS), with
    a full look every LOOK_EVERY s; node 0's verdict, announced by a nudge of the run
    directory, is taken at the very next poll."""
    nodes, me = 4, 2
    paths = RunPaths(tmp_path, "run-1")
    write_doc(paths.attempt_file, AttemptDoc(run_id="run-1", attempt_id="a1", opened_by="uid-0",
                                             node_count=nodes, master_count=1), tmp_path)
    for index in (0, 1, 3):
        write_doc(paths.slot("a1", index), member(index, nodes=nodes), tmp_path)
    now = [1000.0]
    polls: list[tuple[float, Poll]] = []
    current: Poll = []
    real_open = os.open

    def recording_open(path, flags, *args, **kwargs):
        fd = real_open(path, flags, *args, **kwargs)
        if not flags & (os.O_WRONLY | os.O_RDWR | os.O_CREAT):
            current.append(("dir" if stat.S_ISDIR(os.fstat(fd).st_mode) else "file",
                            str(path)))
        return fd

    published_at: list[int] = []

    def sleep(seconds: float) -> None:
        polls.append((now[0], list(current)))
        current.clear()
        now[0] += seconds
        if now[0] >= 1040.0 and not published_at:
            write_doc(paths.outcome("a1"), _real_outcome(nodes), tmp_path)
            freshness.nudge(paths.root)
            published_at.append(len(polls))

    monkeypatch.setattr(os, "open", recording_open)
    ident = NodeIdentity("worker", me - 1, 1, nodes - 1, data(me).pod_ip, data(me).host_ip,
                         f"uid-{me}")
    rdzv = Rendezvous(paths, ident, data(me), deadline=now[0] + 600, timeout=600,
                      progress_interval=1e9, clock=lambda: now[0], sleep=sleep)
    outcome = rdzv.run()
    monkeypatch.undo()
    assert outcome.result == "table"
    assert len(polls) == published_at[0]  # no nap between the nudge and the verdict
    calm = [(t, poll) for t, poll in polls if 1000.0 + cadence.FAST_FOR + 0.5 <= t < 1040.0]
    glances = [poll for _, poll in calm if len(poll) == 1]
    assert all(poll == [("dir", str(paths.root))] for poll in glances)
    span = calm[-1][0] - calm[0][0]
    opens = sum(len(poll) for _, poll in calm)
    # a glance per GLANCE_EVERY (+-20 %) and a full look (5 opens) per LOOK_EVERY
    assert len(calm) - len(glances) <= span / cadence.LOOK_EVERY + 1
    assert opens / span <= 1.25 / cadence.GLANCE_EVERY + 5 / cadence.LOOK_EVERY


def _node0_naps(tmp_path: Path, nodes: int, present: tuple[int, ...], naps: int,
                on_nap: Callable[[int, float], None] = lambda k, now: None) -> list[float]:
    """Node 0's naps (fake clock, advanced by each nap) in an attempt where the slots
    `present` are in; `on_nap(k, now)` runs at the k-th nap."""
    tmp_path.mkdir(exist_ok=True)
    paths = RunPaths(tmp_path, "run-1")
    write_doc(paths.attempt_file, AttemptDoc(run_id="run-1", attempt_id="a1", opened_by="uid-0",
                                             node_count=nodes, master_count=1), tmp_path)
    for index in present:
        write_doc(paths.slot("a1", index), member(index, nodes=nodes), tmp_path)
    ident = NodeIdentity("master", 0, 1, nodes - 1, data(0).pod_ip, data(0).host_ip, "uid-0")
    now = [1000.0]
    got: list[float] = []

    def sleep(seconds: float) -> None:
        got.append(seconds)
        now[0] += seconds
        if len(got) == naps:
            raise _Stop
        on_nap(len(got), now[0])

    rdzv = Rendezvous(paths, ident, data(0), deadline=now[0] + 600, timeout=600,
                      progress_interval=1e9, clock=lambda: now[0], sleep=sleep)
    with pytest.raises(_Stop):
        rdzv.run()
    return got


def test_node0_polls_quicker_while_the_last_slot_of_a_start_burst_is_missing(tmp_path):
    """Issue 30: the last pod's publish -> node 0's verdict is on every pod's path. With one
    slot missing, node 0 naps a quarter poll (+-20 %) for `cadence.FAST_FOR` s after the
    last but one arrived, then the poll interval again; with two missing, the poll
    interval throughout (`cadence.node0_nap`)."""
    poll = 0.2
    naps = _node0_naps(tmp_path / "one", 4, (1, 2), 400)
    quick = [n for n in naps if n <= poll / 4 * 1.2 + 1e-9]
    assert all(poll / 4 * 0.8 - 1e-9 <= n for n in quick)
    assert naps[:len(quick)] == quick  # the quick naps first, then never again
    assert cadence.FAST_FOR - poll <= sum(quick) <= cadence.FAST_FOR + poll / 4 * 1.2
    assert all(poll * 0.8 - 1e-9 <= n <= poll * 1.2 + 1e-9 for n in naps[len(quick):])
    assert len(naps) > len(quick) + 10
    two = _node0_naps(tmp_path / "two", 4, (1,), 30)
    assert all(poll * 0.8 - 1e-9 <= n <= poll * 1.2 + 1e-9 for n in two)


def test_node0_quick_polls_start_when_the_last_but_one_slot_arrives(tmp_path):
    paths = RunPaths(tmp_path, "run-1")

    def node2_arrives(k: int, now: float) -> None:
        if k == 60:  # 12 s of polls with two missing
            write_doc(paths.slot("a1", 2), member(2, nodes=4), tmp_path)

    naps = _node0_naps(tmp_path, 4, (1,), 90, node2_arrives)
    assert all(n >= 0.2 * 0.8 - 1e-9 for n in naps[:60])
    assert all(n <= 0.05 * 1.2 + 1e-9 for n in naps[61:])


def test_a_follower_looks_every_quarter_poll_in_the_first_poll_after_its_publish(tmp_path):
    """Issue 30: node 0 answers the last slot within a quarter poll, so the pod that
    published last looks again a quarter poll later (+-20 %) until one poll interval has
    passed since its publish, then at the poll interval (`cadence.after_publish_nap`)."""
    nodes, me, poll = 4, 2, 0.2
    paths = RunPaths(tmp_path, "run-1")
    write_doc(paths.attempt_file, AttemptDoc(run_id="run-1", attempt_id="a1", opened_by="uid-0",
                                             node_count=nodes, master_count=1), tmp_path)
    for index in (0, 1):
        write_doc(paths.slot("a1", index), member(index, nodes=nodes), tmp_path)
    ident = NodeIdentity("worker", me - 1, 1, nodes - 1, data(me).pod_ip, data(me).host_ip,
                         f"uid-{me}")
    now = [1000.0]
    naps: list[float] = []

    def sleep(seconds: float) -> None:
        naps.append(seconds)
        now[0] += seconds
        if len(naps) == 12:
            raise _Stop

    rdzv = Rendezvous(paths, ident, data(me), deadline=now[0] + 600, timeout=600,
                      progress_interval=1e9, clock=lambda: now[0], sleep=sleep)
    with pytest.raises(_Stop):
        rdzv.run()
    assert paths.slot("a1", me).exists()
    quick = [n for n in naps if n <= poll / 4 * 1.2 + 1e-9]
    assert naps[:len(quick)] == quick and 3 <= len(quick) <= 5, naps
    assert all(poll / 4 * 0.8 - 1e-9 <= n for n in quick)
    assert all(poll * 0.8 - 1e-9 <= n <= poll * 1.2 + 1e-9 for n in naps[len(quick):]), naps
