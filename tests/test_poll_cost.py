"""A waiting follower's poll costs O(1) file operations and never lists a directory."""

from __future__ import annotations

import os
import time

import pytest

from ascend_node.identity import NodeIdentity
from ascend_node.rendezvous import store
from ascend_node.rendezvous.models import AttemptDoc
from ascend_node.rendezvous.protocol import Rendezvous
from ascend_node.rendezvous.store import RunPaths, write_doc
from tests.rdzv_docs import data, member


class _Stop(Exception):
    pass


def opens_per_poll(tmp_path, nodes: int, monkeypatch) -> list[int]:
    tmp_path.mkdir()
    paths = RunPaths(tmp_path, "run-1")
    write_doc(paths.attempt_file, AttemptDoc(run_id="run-1", attempt_id="a1", opened_by="uid-0",
                                             node_count=nodes, master_count=1), tmp_path)
    for index in range(nodes - 1):  # everyone but the last node is present already
        write_doc(paths.slot("a1", index), member(index, nodes=nodes), tmp_path)
    me = nodes - 1
    ident = NodeIdentity("worker", me - 1, 1, nodes - 1, data(me).pod_ip, data(me).host_ip,
                         f"uid-{me}")
    counts: list[int] = []
    opened = [0]
    real_open = os.open

    def counting_open(*args, **kwargs):
        opened[0] += 1
        return real_open(*args, **kwargs)

    def no_listing(*args, **kwargs):
        raise AssertionError("a follower listed a directory")

    def sleep(_seconds: float) -> None:
        counts.append(opened[0])
        opened[0] = 0
        if len(counts) == 6:
            raise _Stop

    monkeypatch.setattr(store.os, "open", counting_open)
    monkeypatch.setattr(os, "listdir", no_listing)
    monkeypatch.setattr(os, "scandir", no_listing)
    rdzv = Rendezvous(paths, ident, data(me), deadline=time.monotonic() + 60, timeout=60,
                      progress_interval=1e9, sleep=sleep)
    with pytest.raises(_Stop):
        rdzv.run()
    return counts[2:]  # steady state, after publishing


def test_poll_cost_does_not_grow_with_the_cluster(tmp_path, monkeypatch):
    small = opens_per_poll(tmp_path / "n4", 4, monkeypatch)
    large = opens_per_poll(tmp_path / "n64", 64, monkeypatch)
    assert small == large, (small, large)
    assert min(large) >= 1 and max(large) <= 3  # attempt, outcome (absent), own slot
