"""The end of a follower's wait (issue 29): one listing instead of every slot.

Node 0 records in each outcome record the stamp (inode, size, mtime_ns) of the slot it
built the entry from; a follower accepting the table lists the attempt directory once and
reads only the slots whose stamp differs or that are gone, plus its cross-check sample
(docs/rendezvous.md, "The end of the wait"). In-process runs against real files, with an
injected clock so the timeouts cost nothing.
"""

from __future__ import annotations

import hashlib
import random
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Optional

import pytest

from ascend_node.discover.identity import NodeIdentity
from ascend_node.errors import PeerTimeout
from ascend_node.ranktable import build_rank_table, render_rank_table
from ascend_node.rendezvous import decide, freshness
from ascend_node.rendezvous.models import AttemptDoc, MemberDoc, OutcomeDoc, TableRecord
from ascend_node.rendezvous.participant import to_server
from ascend_node.rendezvous.protocol import Rendezvous
from ascend_node.rendezvous.seal import RendezvousKey
from ascend_node.rendezvous.store import (
    Invalid,
    RunPaths,
    Valid,
    create_doc,
    read_doc,
    write_doc,
)
from tests.open_recorder import files_read
from tests.rdzv_docs import RUN, data, member

A = (1001, 900, 1_700_000_000_000_000_000)


def _record(index: int, stamp: Optional[tuple[int, int, int]] = A) -> TableRecord:
    return TableRecord(global_index=index, incarnation=f"uid-{index}", digest="0" * 64,
                       slot_stamp=stamp)


# ------------------------------------------------------------------ the pure decision


@pytest.mark.parametrize(("records", "listed", "named"), [
    pytest.param([_record(1)], {1: A}, [], id="unchanged"),
    pytest.param([_record(1)], {1: (2002, A[1], A[2])}, [1], id="new inode"),
    pytest.param([_record(1)], {1: (A[0], A[1], A[2] + 1)}, [1], id="same inode, new mtime"),
    pytest.param([_record(1)], {1: (A[0], A[1] + 7, A[2])}, [1], id="same inode, new size"),
    pytest.param([_record(1), _record(2)], {2: A}, [1], id="slot gone"),
    pytest.param([_record(1)], {1: A, 99: (5, 5, 5)}, [], id="slot added, not in the table"),
    pytest.param([_record(1), _record(2)], None, [1, 2], id="no listing: every node"),
    pytest.param([_record(1, None), _record(2)], {1: A, 2: A}, [1],
                 id="a record without a stamp (an older outcome)"),
    pytest.param([], {1: A}, [], id="no records"),
])
def test_changed_since_verdict_names_every_slot_that_may_hold_other_data(
        records: Sequence[TableRecord], listed, named: list[int]) -> None:
    assert decide.changed_since_verdict(records, listed) == named


# ------------------------------------------------------------------ a follower's acceptance

NODES = 12
ME = 5
LATE = 9  # the re-created peer: outside ME's sample below


def _fixed_rng() -> object:
    """`random.randint` for `cross_check_sample`: picks 1, 2, 3, 4 (so the sample of
    node 5 of 12 is 0, 6, 7, 1, 2, 3, 4 and never LATE)."""
    picks = iter(range(1, 100))

    def randint(a: int, b: int) -> int:
        return next(picks)
    return randint


def _table(members: Sequence[MemberDoc],
           stamps: Optional[dict[int, tuple[int, int, int]]]) -> OutcomeDoc:
    text = render_rank_table(build_rank_table([to_server(m.data) for m in members]))
    return OutcomeDoc(
        run_id=RUN, attempt_id="a1", result="table",
        members=tuple(TableRecord(global_index=m.data.global_index, incarnation=m.incarnation,
                                  digest=m.data.digest(),
                                  slot_stamp=None if stamps is None
                                  else stamps[m.data.global_index])
                      for m in members),
        ranktable_text=text, ranktable_sha256=hashlib.sha256(text.encode()).hexdigest())


def completed(tmp_path: Path, nodes: int = NODES, stamps: bool = True) -> RunPaths:
    """A completed attempt: every slot published, the outcome recording their stamps
    (as node 0's settle listing saw them) unless `stamps` is false."""
    paths = RunPaths(tmp_path, RUN)
    write_doc(paths.attempt_file, AttemptDoc(run_id=RUN, attempt_id="a1", opened_by="uid-0",
                                             node_count=nodes, master_count=1), tmp_path)
    members = [member(i, nodes=nodes) for i in range(nodes)]
    for m in members:
        create_doc(paths.slot("a1", m.data.global_index), m, tmp_path)
    listed = freshness.list_files(paths.attempt_dir("a1")) or {}
    recorded = {i: listed[paths.slot("a1", i).name] for i in range(nodes)} if stamps else None
    write_doc(paths.outcome("a1"), _table(members, recorded), tmp_path)
    return paths


def come_back(paths: RunPaths, nodes: int = NODES, timeout: float = 30.0) -> Rendezvous:
    """Node ME coming back with its own data (a container restart: same incarnation, its
    slot still there); its clock runs out after a few naps."""
    naps = [0]

    def clock() -> float:
        return 1000.0 + (timeout if naps[0] >= 5 else naps[0] * 0.01)

    def sleep(_s: float) -> None:
        naps[0] += 1

    ident = NodeIdentity("worker", ME - 1, 1, nodes - 1, data(ME).pod_ip, data(ME).host_ip,
                         f"uid-{ME}")
    return Rendezvous(paths, ident, data(ME), deadline=1000.0 + timeout, timeout=timeout,
                      progress_interval=1e9, clock=clock, sleep=sleep)


def recreate(paths: RunPaths, index: int, nodes: int = NODES) -> None:
    """Peer `index` re-created with another pod IP: it leaves its new data in its slot."""
    write_doc(paths.slot("a1", index),
              member(index, nodes=nodes, incarnation=f"uid-{index}-new", pod="10.210.0.99"),
              paths.shared_dir)


def test_the_sample_of_these_tests_misses_the_re_created_peer() -> None:
    sample = decide.cross_check_sample(ME, NODES, _fixed_rng())  # type: ignore[arg-type]
    assert LATE not in sample and len(sample) == 7


def test_a_re_created_peer_outside_the_sample_is_found_by_the_listing(tmp_path, monkeypatch
                                                                      ) -> None:
    """Only the listing can name node 9 here (the sample does not read it): the pod that
    comes back must wait for a new attempt and time out (4), not take the table whose
    entry for node 9 holds an address that no longer exists."""
    paths = completed(tmp_path)
    recreate(paths, LATE)
    monkeypatch.setattr(random, "randint", _fixed_rng())
    with pytest.raises(PeerTimeout) as caught:
        come_back(paths).run()
    assert ("attempt a1's table no longer matches worker 8 (node 9) (re-created with new "
            "data)") in caught.value.cause
    assert "the job must be restarted" in caught.value.hint


def test_a_slot_rewritten_in_place_with_other_data_is_found(tmp_path, monkeypatch) -> None:
    """Same inode, other bytes: a write in place changes the size or the mtime."""
    paths = completed(tmp_path)
    slot = paths.slot("a1", LATE)
    new = member(LATE, nodes=NODES, pod="10.210.0.199").model_dump_json().encode()
    inode = slot.stat().st_ino
    with open(slot, "r+b") as f:
        f.truncate(0)
        f.write(new)
    assert slot.stat().st_ino == inode
    monkeypatch.setattr(random, "randint", _fixed_rng())
    with pytest.raises(PeerTimeout, match=r"no longer matches worker 8 \(node 9\)"):
        come_back(paths).run()


def _opens_of(paths: RunPaths, monkeypatch, nodes: int = NODES) -> tuple[OutcomeDoc, list[str]]:
    """Run node ME coming back to a completed attempt; the files it opened for reading."""
    monkeypatch.setattr(random, "randint", _fixed_rng())
    with files_read(monkeypatch) as opened:
        outcome = come_back(paths, nodes).run()
    return outcome, opened


def test_an_unchanged_job_costs_the_sample_and_nothing_of_n(tmp_path, monkeypatch) -> None:
    paths = completed(tmp_path)
    outcome, opened = _opens_of(paths, monkeypatch)
    assert outcome.result == "table"
    others = sorted(n for n in opened if n.startswith("node-") and n != f"node-{ME}.json")
    assert others == sorted(f"node-{i}.json" for i in (0, 6, 7, 1, 2, 3, 4)), others


def test_a_slot_replaced_with_the_same_data_is_read_and_the_table_taken(tmp_path, monkeypatch
                                                                        ) -> None:
    """A peer's container restart republishes identical data (a new inode): read, and
    the table still holds."""
    paths = completed(tmp_path)
    write_doc(paths.slot("a1", LATE), member(LATE, nodes=NODES), tmp_path)
    outcome, opened = _opens_of(paths, monkeypatch)
    assert outcome.result == "table"
    assert opened.count(f"node-{LATE}.json") == 1


def test_a_slot_gone_since_the_verdict_is_read_and_named(tmp_path, monkeypatch) -> None:
    """A slot removed after node 0 read it: the table lists a node whose slot is gone,
    which only another writer can have done (exit 5 naming the slot), as when every
    slot was read."""
    from ascend_node.errors import ClusterInconsistent

    paths = completed(tmp_path)
    paths.slot("a1", LATE).unlink()
    monkeypatch.setattr(random, "randint", _fixed_rng())
    with pytest.raises(ClusterInconsistent, match=r"node-9\.json"):
        come_back(paths).run()


def test_where_listings_cannot_be_trusted_every_slot_is_read(tmp_path, monkeypatch) -> None:
    """FUSE (sshfs) may list a directory's old entries: no listing, every slot read."""
    paths = completed(tmp_path)
    recreate(paths, LATE)
    listed: list[str] = []
    real_list = freshness.list_files
    monkeypatch.setattr(freshness, "attributes_are_current", lambda *a, **k: False)
    monkeypatch.setattr("ascend_node.rendezvous.participant.list_files",
                        lambda p: listed.append(str(p)) or real_list(p))
    monkeypatch.setattr(random, "randint", _fixed_rng())
    with pytest.raises(PeerTimeout, match=r"no longer matches worker 8 \(node 9\)"):
        come_back(paths).run()
    assert listed == []


def test_an_outcome_without_stamps_is_checked_against_every_slot(tmp_path, monkeypatch
                                                                 ) -> None:
    """An outcome written before stamps existed: every slot is read, as then."""
    paths = completed(tmp_path, stamps=False)
    outcome, opened = _opens_of(paths, monkeypatch)
    assert outcome.result == "table"
    others = sorted(n for n in opened if n.startswith("node-") and n != f"node-{ME}.json")
    assert others == sorted(f"node-{i}.json" for i in range(NODES) if i != ME)


# ------------------------------------------------------------------ what node 0 records


@pytest.mark.parametrize("key", [None, RendezvousKey(b"a3f9c2e17b5d4e08a6c1f2e3d4b5a697")],
                         ids=["no key", "key"])
def test_node0_records_each_slots_stamp_and_a_key_signs_them(tmp_path, key) -> None:
    nodes = 4
    paths = RunPaths(tmp_path, RUN)
    ident = NodeIdentity("master", 0, 1, nodes - 1, data(0).pod_ip, data(0).host_ip, "uid-0")
    rdzv = Rendezvous(paths, ident, data(0), deadline=time.monotonic() + 60, timeout=60,
                      progress_interval=1e9, key=key)
    peers_published = [False]

    def sleep(_s: float) -> None:
        if not peers_published[0]:  # the attempt is open: the peers publish
            peers_published[0] = True
            aid = read_doc(paths.attempt_file, AttemptDoc, RUN, key)
            assert isinstance(aid, Valid)
            for i in range(1, nodes):
                create_doc(paths.slot(aid.doc.attempt_id, i),
                           member(i, attempt=aid.doc.attempt_id, nodes=nodes), tmp_path,
                           key=key)

    rdzv.sleep = sleep
    outcome = rdzv.run()
    listed = freshness.list_files(paths.attempt_dir(outcome.attempt_id)) or {}
    assert [r.slot_stamp for r in outcome.members] == [
        listed[paths.slot(outcome.attempt_id, i).name] for i in range(nodes)]
    if key is None:
        return
    # The stamps are inside what is signed: one changed stamp fails authentication.
    path = paths.outcome(outcome.attempt_id)
    text = path.read_text()
    stamp = outcome.members[2].slot_stamp
    assert stamp is not None
    path.write_text(text.replace(f"[{stamp[0]},", f"[{stamp[0] + 1},", 1))
    got = read_doc(path, OutcomeDoc, RUN, key)
    assert isinstance(got, Invalid) and got.auth is not None and got.auth.kind == "forged"


# ------------------------------------------------------------------ a follower's timeout


def _waiting(tmp_path: Path, absent: Sequence[int]) -> RunPaths:
    """An open attempt without a verdict: every slot published but `absent`."""
    paths = RunPaths(tmp_path, RUN)
    write_doc(paths.attempt_file, AttemptDoc(run_id=RUN, attempt_id="a1", opened_by="uid-0",
                                             node_count=NODES, master_count=1), tmp_path)
    for i in range(NODES):
        if i not in absent:
            create_doc(paths.slot("a1", i), member(i, nodes=NODES), tmp_path)
    return paths


def _timeout_opens(paths: RunPaths, monkeypatch) -> tuple[str, list[str]]:
    with files_read(monkeypatch) as opened, pytest.raises(PeerTimeout) as caught:
        come_back(paths).run()
    return caught.value.cause, opened


def test_a_timeout_names_the_absent_slots_from_one_listing(tmp_path, monkeypatch) -> None:
    """Pods of a job time out together: naming the missing nodes must not read every
    slot in each of them. Only its own slot is read (every poll), no other."""
    paths = _waiting(tmp_path, absent=(3, 10))
    cause, opened = _timeout_opens(paths, monkeypatch)
    assert "2 of 12 missing: worker 2 (node 3), worker 9 (node 10)" in cause
    assert {n for n in opened if n.startswith("node-")} == {f"node-{ME}.json"}


@pytest.mark.parametrize("fuse", [False, True], ids=["every slot there", "FUSE"])
def test_a_timeout_reads_every_slot_when_a_listing_cannot_tell(tmp_path, monkeypatch, fuse
                                                               ) -> None:
    """Every slot there (node 0's verdict, or a slot's content, is what is missing), or
    a listing that cannot be trusted: every slot is read, as before."""
    paths = _waiting(tmp_path, absent=(3,) if fuse else ())
    if fuse:
        monkeypatch.setattr(freshness, "attributes_are_current", lambda *a, **k: False)
    else:
        paths.slot("a1", 3).write_text("{not json")
    cause, opened = _timeout_opens(paths, monkeypatch)
    assert "1 of 12 missing: worker 2 (node 3)" in cause
    assert {n for n in opened if n.startswith("node-")} == {
        f"node-{i}.json" for i in range(NODES) if not (fuse and i == 3)}
