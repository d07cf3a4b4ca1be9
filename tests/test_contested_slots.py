"""Twin pods without a settle wait on every start.

A pod publishes into an empty slot by exclusive create, so of two pods racing for one
index exactly one gets an uncontested slot; a pod that finds another pod's document in
its slot marks its own `contested`. Node 0 completes at once when no slot is contested
(after one fresh re-read), and waits a poll for the other pod to object when one is.
"""

from __future__ import annotations

import errno
import os
import threading
import time

import pytest

from ascend_node.atomic import atomic_write_bytes
from ascend_node.discover.identity import NodeIdentity
from ascend_node.rendezvous import assembler, cadence
from ascend_node.rendezvous.models import AttemptDoc, MemberDoc
from ascend_node.rendezvous.protocol import Rendezvous
from ascend_node.rendezvous.store import RunPaths, create_doc, read_slot, write_doc
from tests.rdzv_docs import RUN, data, member


def test_exclusive_write_creates_once_and_never_shows_a_partial_file(tmp_path):
    target = tmp_path / "slot.json"
    atomic_write_bytes(target, b'{"a": 1}\n', exclusive=True)
    with pytest.raises(FileExistsError):
        atomic_write_bytes(target, b'{"b": 2}\n', exclusive=True)
    assert target.read_bytes() == b'{"a": 1}\n'
    assert [p.name for p in tmp_path.iterdir()] == ["slot.json"]  # no temp left behind


def test_exactly_one_of_many_racing_writers_creates(tmp_path):
    target = tmp_path / "slot.json"
    wins: list[int] = []
    barrier = threading.Barrier(8)

    def race(i: int) -> None:
        barrier.wait()
        got = create_doc(target, member(2, incarnation=f"uid-{i}"), tmp_path)
        if got == "created":
            wins.append(i)

    threads = [threading.Thread(target=race, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(wins) == 1
    doc = read_slot(target, RUN, "a1")
    assert doc.doc.incarnation == f"uid-{wins[0]}"  # type: ignore[union-attr]


def test_a_filesystem_without_hard_links_is_reported_not_raised(tmp_path, monkeypatch):
    def no_links(*args, **kwargs):
        raise OSError(errno.EPERM, "Operation not permitted")

    monkeypatch.setattr(os, "link", no_links)
    assert create_doc(tmp_path / "slot.json", member(2), tmp_path) == "unsupported"
    assert list(tmp_path.iterdir()) == []


def _pod(tmp_path, index: int, incarnation: str, sleeps: list[float], nodes: int = 3
         ) -> Rendezvous:
    role = "master" if index == 0 else "worker"
    ident = NodeIdentity(role, max(index - 1, 0), 1, nodes - 1, data(index).pod_ip,
                         data(index).host_ip, incarnation)
    return Rendezvous(RunPaths(tmp_path, RUN), ident, data(index),
                      deadline=time.monotonic() + 20, timeout=20, progress_interval=1e9,
                      sleep=sleeps.append)


def _open_attempt(tmp_path, nodes: int = 3) -> RunPaths:
    paths = RunPaths(tmp_path, RUN)
    write_doc(paths.attempt_file, AttemptDoc(run_id=RUN, attempt_id="a1", opened_by="uid-0",
                                             node_count=nodes, master_count=1), tmp_path)
    return paths


def test_node0_completes_without_a_settle_wait_when_no_slot_is_contested(tmp_path):
    paths = _open_attempt(tmp_path)
    for i in (1, 2):
        create_doc(paths.slot("a1", i), member(i, nodes=3), tmp_path)
    sleeps: list[float] = []
    outcome = _pod(tmp_path, 0, "uid-0", sleeps).run()
    assert outcome.result == "table"
    assert sleeps == []  # not one poll, not one settle: everyone was there


def test_node0_waits_a_poll_when_a_slot_is_contested(tmp_path):
    paths = _open_attempt(tmp_path)
    create_doc(paths.slot("a1", 1), member(1, nodes=3), tmp_path)
    contested = member(2, nodes=3).model_copy(update={"contested": True})
    write_doc(paths.slot("a1", 2), contested, tmp_path)
    sleeps: list[float] = []
    run_dir = paths.attempt_file.parent
    before = os.stat(run_dir).st_mtime_ns
    outcome = _pod(tmp_path, 0, "uid-0", sleeps).run()
    assert outcome.result == "table"
    # a calm follower glances every GLANCE_EVERY s: node 0 nudges them all (the run
    # directory changes) and waits a glance and a poll for the pod whose slot was taken
    assert sleeps == [pytest.approx(cadence.settle_wait(0.2))]
    assert sleeps[0] >= 0.2 * assembler.SETTLE_POLLS
    assert os.stat(run_dir).st_mtime_ns != before


class _Stop(Exception):
    pass


def _stop(_s: float) -> None:
    raise _Stop


def _slot_after_first_poll(tmp_path, paths: RunPaths, incarnation: str):
    """Run node 2 (as `incarnation`) until its first nap, then read its slot."""
    pod = _pod(tmp_path, 2, incarnation, [])
    pod.sleep = _stop
    with pytest.raises(_Stop):
        pod.run()
    return read_slot(paths.slot("a1", 2), RUN, "a1").doc  # type: ignore[union-attr]


def test_a_pod_finding_another_pods_document_publishes_contested(tmp_path):
    paths = _open_attempt(tmp_path)
    create_doc(paths.slot("a1", 2), member(2, nodes=3, incarnation="uid-old"), tmp_path)

    doc = _slot_after_first_poll(tmp_path, paths, "uid-new")
    assert isinstance(doc, MemberDoc) and doc.incarnation == "uid-new" and doc.contested


def test_a_container_restart_into_its_own_slot_is_not_contested(tmp_path):
    paths = _open_attempt(tmp_path)
    old = member(2, nodes=3).model_copy(update={"data": data(2, base=40)})  # other data
    create_doc(paths.slot("a1", 2), old, tmp_path)

    doc = _slot_after_first_poll(tmp_path, paths, "uid-2")
    assert isinstance(doc, MemberDoc) and not doc.contested
    assert doc.data.digest() == data(2).digest()
