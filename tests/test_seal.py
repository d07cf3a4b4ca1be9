"""The per-job rendezvous key: signing, checking, loading, and the cross-checks a
follower makes without one (issue: forged tables)."""

from __future__ import annotations

import json
import pickle
import random
import time
from pathlib import Path

import pytest

from ascend_node.discover.identity import NodeIdentity
from ascend_node.errors import ConfigError
from ascend_node.ranktable import build_rank_table, render_rank_table
from ascend_node.rendezvous import decide, freshness
from ascend_node.rendezvous.models import AttemptDoc, MemberDoc, OutcomeDoc, TableRecord
from ascend_node.rendezvous.participant import to_server
from ascend_node.rendezvous.protocol import Rendezvous
from ascend_node.rendezvous.seal import (
    RendezvousKey,
    key_id_of,
    load_key,
    seal,
    unseal,
    where_of,
)
from ascend_node.rendezvous.store import (
    Invalid,
    RunPaths,
    Valid,
    create_doc,
    read_doc,
    read_slot,
    write_doc,
)
from tests.open_recorder import files_read
from tests.rdzv_docs import RUN, data, member

SECRET = b"a3f9c2e17b5d4e08a6c1f2e3d4b5a697"
KEY = RendezvousKey(SECRET)
OTHER = RendezvousKey(b"0123456789abcdef0123456789abcdef")


# ---------------------------------------------------------------------- seal / unseal


def test_a_signed_payload_verifies_where_it_was_signed_and_nowhere_else() -> None:
    payload = {"kind": "member", "n": 1, "nested": {"b": [1, 2.5, None], "a": "é"}}
    sealed = seal(payload, KEY, ".ascend-node/r/attempts/a1/node-1.json")
    assert set(sealed["auth"]) == {"key_id", "hmac"}
    assert sealed["auth"]["key_id"] == KEY.key_id
    # what the reader parses back from the file
    again = json.loads(json.dumps(sealed, separators=(",", ":")))
    assert unseal(dict(again), KEY, ".ascend-node/r/attempts/a1/node-1.json") is None
    moved = unseal(dict(again), KEY, ".ascend-node/r/attempts/a1/node-2.json")
    assert moved is not None and moved.kind == "forged"


@pytest.mark.parametrize(("change", "kind"), [
    (lambda d: d.update(n=2), "forged"),
    (lambda d: d["auth"].update(hmac="0" * 64), "forged"),
    (lambda d: d.pop("auth"), "unsigned"),
    (lambda d: d["auth"].update(key_id=OTHER.key_id), "other-key"),
    (lambda d: d.update(auth="x"), "forged"),
])
def test_any_change_fails_with_a_named_reason(change, kind) -> None:
    sealed = seal({"kind": "outcome", "n": 1}, KEY, "w")
    change(sealed)
    problem = unseal(sealed, KEY, "w")
    assert problem is not None and problem.kind == kind


def test_without_a_key_unsigned_passes_and_signed_is_a_mismatch() -> None:
    assert unseal({"n": 1}, None, "w") is None
    problem = unseal(seal({"n": 1}, KEY, "w"), None, "w")
    assert problem is not None and problem.kind == "no-key" and problem.mismatch
    assert KEY.key_id in problem.reason


def test_the_key_never_shows() -> None:
    assert SECRET.decode() not in repr(KEY) and KEY.key_id in repr(KEY)
    with pytest.raises(TypeError):
        pickle.dumps(KEY)
    # the id is a hash of a hash, not a prefix or a plain hash of the key
    import hashlib
    assert KEY.key_id == key_id_of(SECRET)
    assert KEY.key_id not in hashlib.sha256(SECRET).hexdigest()


def test_where_is_the_path_from_the_run_root_whatever_the_mount() -> None:
    a = where_of(Path("/mnt/a/.ascend-node/r/attempts/x/node-1.json"))
    b = where_of(Path("/models/.ascend-node/r/attempts/x/node-1.json"))
    assert a == b == ".ascend-node/r/attempts/x/node-1.json"


# ---------------------------------------------------------------------- loading


def test_load_key_from_env_or_file_and_refuses_weak_or_double(tmp_path: Path) -> None:
    assert load_key({}, None) is None
    assert load_key({"ASCEND_NODE_RENDEZVOUS_KEY": " "}, None) is None
    env_key = load_key({"ASCEND_NODE_RENDEZVOUS_KEY": SECRET.decode() + "\n"}, None)
    assert env_key is not None and env_key.key_id == KEY.key_id
    secret = tmp_path / "key"
    secret.write_bytes(SECRET + b"\n")
    file_key = load_key({}, secret)
    assert file_key is not None and file_key.key_id == KEY.key_id
    with pytest.raises(ConfigError, match="both ASCEND_NODE_RENDEZVOUS_KEY and a key file"):
        load_key({"ASCEND_NODE_RENDEZVOUS_KEY": SECRET.decode()}, secret)
    with pytest.raises(ConfigError, match="unusable: a rendezvous key is 16") as short:
        load_key({"ASCEND_NODE_RENDEZVOUS_KEY": "short"}, None)
    assert "short" not in short.value.cause.replace("unusable", "")
    with pytest.raises(ConfigError, match="cannot open the rendezvous key file"):
        load_key({}, tmp_path / "absent")


# ---------------------------------------------------------------------- the store


def test_store_signs_with_a_key_and_refuses_what_fails(tmp_path: Path) -> None:
    paths = RunPaths(tmp_path, RUN)
    slot = paths.slot("a1", 1)
    assert create_doc(slot, member(1), tmp_path, key=KEY) == "created"
    assert json.loads(slot.read_text())["auth"]["key_id"] == KEY.key_id
    assert isinstance(read_slot(slot, RUN, "a1", KEY), Valid)
    for key, kind in ((None, "no-key"), (OTHER, "other-key")):
        got = read_slot(slot, RUN, "a1", key)
        assert isinstance(got, Invalid) and got.auth is not None and got.auth.kind == kind
    # a valid signed document copied to another slot fails: it is bound to its place
    other = paths.slot("a1", 2)
    other.write_bytes(slot.read_bytes())
    got = read_slot(other, RUN, "a1", KEY)
    assert isinstance(got, Invalid) and got.auth is not None and got.auth.kind == "forged"
    # unsigned: as every document was before keys
    write_doc(paths.attempt_file, AttemptDoc(run_id=RUN, attempt_id="a1", opened_by="u",
                                             node_count=2, master_count=1), tmp_path)
    assert "auth" not in paths.attempt_file.read_text()
    assert isinstance(read_doc(paths.attempt_file, AttemptDoc, RUN), Valid)
    got = read_doc(paths.attempt_file, AttemptDoc, RUN, KEY)
    assert isinstance(got, Invalid) and "is not signed with the job's rendezvous key" in got.reason


def test_a_torn_signed_file_is_named_as_torn_not_as_forged(tmp_path: Path) -> None:
    slot = tmp_path / ".ascend-node" / RUN / "attempts" / "a1" / "node-1.json"
    write_doc(slot, member(1), tmp_path, key=KEY)
    slot.write_bytes(slot.read_bytes()[:40])
    got = read_slot(slot, RUN, "a1", KEY)
    assert isinstance(got, Invalid) and got.auth is None and "not valid JSON" in got.reason


# ---------------------------------------------------------------------- cross-checks


def _outcome(members: list[MemberDoc], edit=None,
             stamps: dict[int, tuple[int, int, int]] | None = None) -> OutcomeDoc:
    table = build_rank_table([to_server(m.data) for m in members])
    if edit is not None:
        edit(table)
    text = render_rank_table(table)
    import hashlib
    return OutcomeDoc(run_id=RUN, attempt_id="a1", result="table",
                      members=tuple(TableRecord(global_index=m.data.global_index,
                                                incarnation=m.incarnation,
                                                digest=m.data.digest(),
                                                slot_stamp=(stamps or {}).get(
                                                    m.data.global_index))
                                    for m in members),
                      ranktable_text=text,
                      ranktable_sha256=hashlib.sha256(text.encode()).hexdigest())


def _retarget(index: int):
    def edit(table):
        for dev in table["server_list"][index]["device"]:
            dev["device_ip"] = "192.0.2.1" + dev["device_id"]
    return edit


MEMBERS = [member(i, nodes=4) for i in range(4)]


def test_cross_check_passes_node0s_table_and_names_a_forged_entry() -> None:
    real = _outcome(MEMBERS)
    slots = {i: MEMBERS[i] for i in range(4)}
    assert decide.outcome_consistency(real, 4, 1) is None
    assert decide.cross_check(real, slots, 1) is None
    forged = _outcome(MEMBERS, _retarget(2))
    assert decide.outcome_consistency(forged, 4, 1) is None  # self-consistent...
    got = decide.cross_check(forged, slots, 1)  # ...but not what node 2 published
    assert got is not None and got.index == 2 and "worker 1 (node 2)" in got.reason
    assert decide.cross_check(forged, {1: MEMBERS[1], 3: MEMBERS[3]}, 1) is None  # unsampled


def test_cross_check_slot_states() -> None:
    real = _outcome(MEMBERS)
    newer = member(2, nodes=4, base=50, incarnation="uid-new")  # a re-created peer
    assert decide.cross_check(real, {2: newer}, 1) is None  # the outdated check waits
    node0_other = member(0, nodes=4, base=50)
    got = decide.cross_check(real, {0: node0_other}, 1)
    assert got is not None and "not the data node 0 published" in got.reason
    for state, words in ((None, "whose slot is missing"), ("is not signed", "is not signed")):
        got = decide.cross_check(real, {3: state}, 1)
        assert got is not None and words in got.reason and got.index == 3


@pytest.mark.parametrize(("change", "words"), [
    (lambda o: o.model_copy(update={"ranktable_sha256": "0" * 64}), "sha256"),
    (lambda o: o.model_copy(update={"members": o.members[:3]}), "member records"),
    (lambda o: _outcome(MEMBERS, lambda t: t["server_list"][1]["device"][0].update(
        rank_id="99")), "rank ids"),
    (lambda o: _outcome(MEMBERS, lambda t: t.update(server_count="3")), "server_count"),
])
def test_outcome_consistency_names_what_node0_would_never_write(change, words) -> None:
    got = decide.outcome_consistency(change(_outcome(MEMBERS)), 4, 1)
    assert got is not None and words in got.reason


def test_cross_check_sample_is_everyone_when_small_and_bounded_when_large() -> None:
    assert decide.cross_check_sample(2, 5, lambda a, b: a) == [0, 1, 3, 4]
    picks = iter([7, 7, 500, 3, 900, 11, 12])
    sample = decide.cross_check_sample(5, 1024, lambda a, b: next(picks))
    assert sample[:3] == [0, 6, 7] and len(sample) == len(set(sample)) == 7
    assert 5 not in sample
    counter = iter(range(100, 200))
    last = decide.cross_check_sample(1023, 1024, lambda a, b: next(counter))
    assert last == [0, 1, 2, 100, 101, 102, 103]


# ---------------------------------------------------------------------- what it costs


@pytest.mark.parametrize("changed", [0, 2], ids=["nothing changed", "2 slots changed"])
@pytest.mark.parametrize("nodes", [12, 64])
def test_acceptance_reads_each_slot_once_and_nothing_more_per_poll(tmp_path, monkeypatch,
                                                                   nodes, changed) -> None:
    """The follower's extra reads happen once, and do not grow with N: node 0's slot
    before publishing; at acceptance one listing of the attempt directory, then its
    cross-check sample and the slots whose stamp changed since node 0 recorded it
    (docs/rendezvous.md, "The end of the wait"); polls before the verdict read no slot
    but its own. Opens of other members' slots = the sample (7) + the changed slots."""
    paths = RunPaths(tmp_path, RUN)
    write_doc(paths.attempt_file, AttemptDoc(run_id=RUN, attempt_id="a1", opened_by="uid-0",
                                             node_count=nodes, master_count=1), tmp_path)
    members = [member(i, nodes=nodes) for i in range(nodes)]
    for m in members[:-1]:
        if m.data.global_index != 5:
            create_doc(paths.slot("a1", m.data.global_index), m, tmp_path)
    # Outside node 5's sample (0, 6, 7 and the picks 1-4 below): only the listing names them.
    replaced = [nodes - 2 - k for k in range(changed)]
    polls = 0

    def sleep(_s: float) -> None:
        nonlocal polls
        polls += 1
        if polls == 3:  # the last node arrives and node 0 writes the verdict
            create_doc(paths.slot("a1", nodes - 1), members[-1], tmp_path)
            listed = freshness.list_files(paths.attempt_dir("a1")) or {}
            write_doc(paths.outcome("a1"), _outcome(
                members, stamps={i: listed[f"node-{i}.json"] for i in range(nodes)}),
                tmp_path)
            for index in replaced:  # a peer's container restart: the same data, anew
                write_doc(paths.slot("a1", index), members[index], tmp_path)

    picks = iter(range(1, 100))
    monkeypatch.setattr(random, "randint", lambda a, b: next(picks))
    ident = NodeIdentity("worker", 4, 1, nodes - 1, data(5).pod_ip, data(5).host_ip, "uid-5")
    with files_read(monkeypatch) as opened:
        outcome = Rendezvous(paths, ident, data(5), deadline=time.monotonic() + 60,
                             timeout=60, progress_interval=1e9, sleep=sleep).run()
    assert outcome.result == "table"
    slot_reads = [n for n in opened if n.startswith("node-")]
    others = [n for n in slot_reads if n != "node-5.json"]
    sample = [0, 6, 7, 1, 2, 3, 4]
    assert sorted(others) == sorted(f"node-{i}.json" for i in sample + replaced), others
    assert len(others) == 7 + changed
    assert others.count("node-0.json") == 1  # read before publishing, reused at acceptance
    assert opened.count("outcome.json") == 1
