"""Hostile shared-volume content: never trusted, never followed, reported by path.

Two levels:
- the store's readers on each kind of bad file (exact `Invalid` reason, path kept);
- real agents finding such a file where a peer's slot, the attempt, the outcome, the
  run directory or the shared table belongs: they log `ignoring <path>: <reason>`, never
  act on it, and the planted file's target is never written through.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Callable

import pytest

from ascend_node.errors import SharedVolumeError
from ascend_node.rendezvous.models import AttemptDoc, MemberDoc, OutcomeDoc
from ascend_node.rendezvous.store import (
    MAX_DOC_BYTES,
    Invalid,
    Missing,
    Valid,
    ensure_dir,
    read_bytes_nofollow,
    read_doc,
    read_slot,
    write_doc,
)
from tests import rdzv_docs as docs
from tests.cluster_helpers import make_nodes
from tests.test_faults import Proc, check_tables, check_volume, explain, start

RUN = docs.RUN
GOOD_MEMBER = docs.member(1).model_dump_json()
GOOD_ATTEMPT = docs.attempt().model_dump_json()


def _json(**changes: object) -> str:
    data = json.loads(GOOD_MEMBER)
    data.update(changes)
    return json.dumps(data)


# ------------------------------------------------------------------ the readers


def _matches(reason: str, expected: str) -> bool:
    """`expected` is the reason's start; text after `…` must follow somewhere later
    (the decoder's own words, whatever prefix the store puts before them)."""
    head, *rest = expected.split("…")
    if not reason.startswith(head):
        return False
    at = len(head)
    for part in rest:
        at = reason.find(part, at)
        if at < 0:
            return False
    return True

Plant = Callable[[Path], None]


def _write(text: str) -> Plant:
    return lambda p: p.write_text(text)


def _symlink_to_valid(p: Path) -> None:
    target = p.parent / "elsewhere.json"
    target.write_text(GOOD_MEMBER)
    p.symlink_to(target)


def _huge(p: Path) -> None:
    with open(p, "wb") as fh:  # sparse: no disk space used
        fh.truncate(MAX_DOC_BYTES + 1)


SLOT_CASES: list[tuple[str, Plant, str]] = [
    ("truncated JSON",  # cut inside a string value, as a torn write would leave it
     _write(GOOD_MEMBER[: GOOD_MEMBER.index('"incarnation":"') + len('"incarnation":"') + 3]),
     "is not valid JSON (…Unterminated string starting at"),
    ("empty file", _write(""),
     "is not valid JSON (…Expecting value: line 1 column 1"),
    ("not UTF-8", lambda p: p.write_bytes(b"\xff\xfe{}"),
     "is not valid JSON (…'utf-8' codec can't decode byte 0xff"),
    ("a JSON array", _write("[1, 2]"), "fails validation at document: Input should be"),
    ("schema version 2", _write(_json(schema_version=2)),
     "has schema_version 2, this agent reads 1 (mixed agent versions?)"),
    ("schema version as text", _write(_json(schema_version="1")),
     "has schema_version '1', this agent reads 1 (mixed agent versions?)"),
    ("another run id", _write(_json(run_id="other-run")),
     "belongs to run 'other-run', not 'run-1'"),
    ("another attempt", _write(_json(attempt_id="a0")), "belongs to attempt 'a0', not 'a1'"),
    ("an unknown kind", _write(_json(kind="table")),
     "fails validation at document: Input tag 'table' found using 'kind' does not match"),
    ("an extra field", _write(_json(owner="me")),
     "fails validation at member.owner: Extra inputs are not permitted"),
    ("a bad incarnation", _write(_json(incarnation="../x")),
     "fails validation at member.incarnation: String should match pattern"),
    ("a symlink to a valid document", _symlink_to_valid, "is a symbolic link (refused)"),
    ("a dangling symlink", lambda p: p.symlink_to(p.parent / "nowhere"),
     "is a symbolic link (refused)"),
    ("a FIFO", lambda p: os.mkfifo(p), "is not a regular file (refused)"),
    ("a directory", lambda p: p.mkdir(), "is not a regular file (refused)"),
    ("a huge file", _huge,
     f"is {MAX_DOC_BYTES + 1} bytes, over the {MAX_DOC_BYTES} byte limit"),
]


@pytest.mark.parametrize(("case", "plant", "reason"), SLOT_CASES,
                         ids=[c[0].replace(" ", "-") for c in SLOT_CASES])
def test_slot_reader_refuses_and_names_the_path(
    tmp_path: Path, case: str, plant: Plant, reason: str,
) -> None:
    path = tmp_path / "node-1.json"
    plant(path)
    started = time.monotonic()
    got = read_slot(path, RUN, "a1")
    assert time.monotonic() - started < 2, "a reader must never block (FIFO)"
    assert isinstance(got, Invalid), got
    assert got.path == path
    assert _matches(got.reason, reason), got.reason
    assert got.describe().startswith(f"{path}: ")


@pytest.mark.parametrize(("case", "plant", "reason"), [
    ("truncated JSON", _write(GOOD_ATTEMPT[:-5]), "is not valid JSON (…Expecting"),
    ("schema version 2", _write(GOOD_ATTEMPT.replace('"schema_version":1',
                                                     '"schema_version":2')),
     "has schema_version 2, this agent reads 1"),
    ("another run id", _write(GOOD_ATTEMPT.replace('"run_id":"run-1"', '"run_id":"x"')),
     "belongs to run 'x', not 'run-1'"),
    ("a member where the attempt belongs", _write(GOOD_MEMBER),
     "fails validation at kind: Input should be 'attempt'"),
    ("a symlink", lambda p: p.symlink_to("/etc/hostname"), "is a symbolic link (refused)"),
    ("a FIFO", lambda p: os.mkfifo(p), "is not a regular file (refused)"),
    ("a huge file", _huge, "is 67108865 bytes, over the 67108864 byte limit"),
])
def test_document_reader_refuses_and_names_the_path(
    tmp_path: Path, case: str, plant: Plant, reason: str,
) -> None:
    path = tmp_path / "attempt.json"
    plant(path)
    got = read_doc(path, AttemptDoc, RUN)
    assert isinstance(got, Invalid) and got.path == path, got
    assert _matches(got.reason, reason), got.reason


def test_a_missing_file_or_missing_directory_is_missing_not_invalid(tmp_path: Path) -> None:
    assert read_doc(tmp_path / "attempt.json", AttemptDoc, RUN) == Missing(
        tmp_path / "attempt.json")
    (tmp_path / "file").write_text("x")
    assert isinstance(read_bytes_nofollow(tmp_path / "file" / "below"), Missing)


def test_a_valid_document_reads_back(tmp_path: Path) -> None:
    path = tmp_path / "node-1.json"
    path.write_text(GOOD_MEMBER)
    got = read_slot(path, RUN, "a1")
    assert isinstance(got, Valid) and got.doc == docs.member(1)


@pytest.mark.parametrize("where", [".ascend-node", ".ascend-node/run-1",
                                   ".ascend-node/run-1/attempts"])
def test_a_symlinked_directory_is_refused_and_nothing_is_written_through_it(
    tmp_path: Path, where: str,
) -> None:
    shared, elsewhere = tmp_path / "shared", tmp_path / "elsewhere"
    shared.mkdir()
    elsewhere.mkdir()
    link = shared / where
    link.parent.mkdir(parents=True, exist_ok=True)
    link.symlink_to(elsewhere)
    target = shared / ".ascend-node" / RUN / "attempts" / "a1" / "node-1.json"
    with pytest.raises(SharedVolumeError) as err:
        write_doc(target, docs.member(1), shared)
    assert err.value.cause == f"{link} is a symbolic link, refused"
    assert "ascend-node clean" in err.value.hint
    assert list(elsewhere.iterdir()) == []


def test_a_file_where_a_directory_belongs_is_refused(tmp_path: Path) -> None:
    (tmp_path / ".ascend-node").write_text("not a dir")
    with pytest.raises(SharedVolumeError) as err:
        ensure_dir(tmp_path / ".ascend-node" / RUN, tmp_path)
    assert err.value.cause == f"{tmp_path / '.ascend-node'} is not a directory, refused"


# ------------------------------------------------------------------ real agents


def _wait_for(cond: Callable[[], bool], what: str, timeout: float = 30) -> None:
    end = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < end, f"timed out waiting for {what}"
        time.sleep(0.05)


def _attempt_id(shared: Path) -> str:
    path = shared / ".ascend-node" / "t" / "attempt.json"
    _wait_for(lambda: isinstance(read_doc(path, AttemptDoc, "t"), Valid), "attempt.json")
    got = read_doc(path, AttemptDoc, "t")
    assert isinstance(got, Valid)
    # Node 0 makes the attempt's directory after it wrote attempt.json: a file planted
    # into it needs the directory (on a loaded machine the gap is long enough to see).
    attempt_dir = path.parent / "attempts" / got.doc.attempt_id
    _wait_for(attempt_dir.is_dir, f"{attempt_dir}")
    return got.doc.attempt_id


def _decoy_member(shared: Path, attempt_id: str) -> str:
    """A *valid* member document for node 1 of this attempt, with a foreign pod IP."""
    doc = docs.member(1, attempt=attempt_id, nodes=3).model_copy(update={"run_id": "t"})
    data = doc.data.model_copy(update={"pod_ip": "10.231.9.9"})
    return MemberDoc.model_validate({**doc.model_dump(), "data": data.model_dump()}
                                    ).model_dump_json()


E2E_SLOT_CASES = ["truncated", "schema-2", "other-run", "symlink-to-valid", "fifo", "huge"]


@pytest.mark.multiprocess
@pytest.mark.parametrize("case", E2E_SLOT_CASES)
def test_planted_slot_is_ignored_by_name_and_replaced_by_its_owner(
    tmp_path: Path, case: str,
) -> None:
    # 90 s: a safety net, not a bound under test (every pod is to exit 0); the steps
    # between the first pods' start and the last one's can take 30 s on a loaded machine
    nodes = make_nodes(tmp_path, 3, devices=2, timeout=90)
    shared = tmp_path / "shared"
    procs: list[Proc] = []
    try:
        procs += [start(nodes[0]), start(nodes[2])]
        aid = _attempt_id(shared)
        slot = shared / ".ascend-node" / "t" / "attempts" / aid / "node-1.json"
        # attempt.json comes first; the directory with the first slot published into it
        _wait_for(slot.parent.is_dir, "the attempt directory")
        decoy = tmp_path / "decoy.json"
        decoy.write_text(_decoy_member(shared, aid))
        text = decoy.read_text()
        tmp = slot.parent / "planting"
        if case == "truncated":
            tmp.write_text(text[:40])
        elif case == "schema-2":
            tmp.write_text(text.replace('"schema_version":1', '"schema_version":2'))
        elif case == "other-run":
            tmp.write_text(text.replace('"run_id":"t"', '"run_id":"other"'))
        elif case == "symlink-to-valid":
            tmp.symlink_to(decoy)
        elif case == "fifo":
            os.mkfifo(tmp)
        else:
            _huge(tmp)
        os.rename(tmp, slot)  # appears at once, as a peer's file would
        reason = {
            "truncated": "is not valid JSON", "schema-2": "has schema_version 2",
            "other-run": "belongs to run 'other', not 't'",
            "symlink-to-valid": "is a symbolic link (refused)",
            "fifo": "is not a regular file (refused)",
            "huge": "is 67108865 bytes, over the 67108864 byte limit",
        }[case]
        line = f"ignoring {slot}: {reason}"
        _wait_for(lambda: line in procs[0].stderr, f"node 0 to log {line!r}")
        assert procs[0].popen.poll() is None and procs[1].popen.poll() is None
        procs.append(start(nodes[1]))
        codes = {p.node.index: p.wait(90) for p in procs}
        assert codes == {0: 0, 1: 0, 2: 0}, explain(procs)
        table = check_tables(shared, nodes, codes)
        assert table is not None and b"10.231.9.9" not in table
        assert decoy.read_text() == text  # the link's target was never written through
        assert not slot.is_symlink()
        check_volume(shared)
    finally:
        for p in procs:
            if p.popen.poll() is None:
                p.popen.kill()
                p.popen.wait()


@pytest.mark.multiprocess
@pytest.mark.parametrize("case", ["truncated", "symlink-to-decoy", "other-run"])
def test_planted_attempt_is_never_joined(tmp_path: Path, case: str) -> None:
    nodes = make_nodes(tmp_path, 2, devices=2, timeout=30)
    shared = tmp_path / "shared"
    root = shared / ".ascend-node" / "t"
    root.mkdir(parents=True)
    decoy = docs.attempt("decoy", nodes=2).model_copy(update={"run_id": "t"})
    decoy_file = tmp_path / "decoy-attempt.json"
    decoy_file.write_text(decoy.model_dump_json())
    if case == "truncated":
        (root / "attempt.json").write_text(decoy.model_dump_json()[:30])
    elif case == "symlink-to-decoy":
        (root / "attempt.json").symlink_to(decoy_file)
    else:
        (root / "attempt.json").write_text(
            decoy.model_copy(update={"run_id": "other"}).model_dump_json())
    nodes[0].start_delay = 0.8  # the follower meets the planted file first
    procs = [start(nodes[1])]
    try:
        time.sleep(0.8)
        procs.append(start(nodes[0]))
        codes = {p.node.index: p.wait(90) for p in procs}
        assert codes == {0: 0, 1: 0}, explain(procs)
        assert check_tables(shared, nodes, codes) is not None
        attempt = json.loads((root / "attempt.json").read_text())
        assert attempt["attempt_id"] != "decoy" and not (root / "attempt.json").is_symlink()
        assert decoy_file.read_text() == decoy.model_dump_json()
        assert f"ignoring {root / 'attempt.json'}: " in procs[0].stderr + procs[1].stderr
    finally:
        for p in procs:
            if p.popen.poll() is None:
                p.popen.kill()
                p.popen.wait()


@pytest.mark.multiprocess
def test_planted_abort_outcome_behind_a_symlink_is_not_followed(tmp_path: Path) -> None:
    """A valid abort for the current attempt, reachable only through a symlink."""
    # 90 s: a safety net, not a bound under test (every pod is to exit 0); the steps
    # between the first pods' start and the last one's can take 30 s on a loaded machine
    nodes = make_nodes(tmp_path, 3, devices=2, timeout=90)
    shared = tmp_path / "shared"
    procs = [start(nodes[0]), start(nodes[1])]
    try:
        aid = _attempt_id(shared)
        target = tmp_path / "abort.json"
        target.write_text(OutcomeDoc(run_id="t", attempt_id=aid, result="abort",
                                     reason="SENTINEL-ABORT").model_dump_json())
        outcome = shared / ".ascend-node" / "t" / "attempts" / aid / "outcome.json"
        outcome.symlink_to(target)
        _wait_for(lambda: f"ignoring {outcome}: is a symbolic link (refused)"
                  in procs[1].stderr, "node 1 to refuse the planted outcome")
        procs.append(start(nodes[2]))
        codes = {p.node.index: p.wait(90) for p in procs}
        assert codes == {0: 0, 1: 0, 2: 0}, explain(procs)
        assert "SENTINEL-ABORT" not in "".join(p.stderr for p in procs)
    finally:
        for p in procs:
            if p.popen.poll() is None:
                p.popen.kill()
                p.popen.wait()


@pytest.mark.multiprocess
def test_symlink_at_the_shared_table_path_is_replaced_not_written_through(
    tmp_path: Path,
) -> None:
    nodes = make_nodes(tmp_path, 2, devices=2, timeout=30)
    shared = tmp_path / "shared"
    victim = tmp_path / "precious.txt"
    victim.write_text("keep me\n")
    (shared / "ranktable-t.json").symlink_to(victim)
    procs = [start(n) for n in nodes]
    codes = {p.node.index: p.wait(30) for p in procs}
    assert codes == {0: 0, 1: 0}, explain(procs)
    assert victim.read_text() == "keep me\n"
    assert not (shared / "ranktable-t.json").is_symlink()
    assert check_tables(shared, nodes, codes) == (shared / "ranktable-t.json").read_bytes()


@pytest.mark.multiprocess
def test_symlinked_run_directory_stops_node0_with_1_naming_it(tmp_path: Path) -> None:
    nodes = make_nodes(tmp_path, 2, devices=2, timeout=3)
    shared = tmp_path / "shared"
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (shared / ".ascend-node").mkdir()
    (shared / ".ascend-node" / "t").symlink_to(elsewhere)
    procs = [start(n) for n in nodes]
    codes = {p.node.index: p.wait(30) for p in procs}
    assert codes == {0: 1, 1: 1}, explain(procs)
    for proc in procs:  # followers refuse it too, at once, instead of reading through it
        assert (f"ascend-node: error: {shared}/.ascend-node/t is a symbolic link, refused"
                in proc.stderr)
    assert "hint: remove it, or run `ascend-node clean` for this run" in procs[0].stderr
    assert list(elsewhere.iterdir()) == []
