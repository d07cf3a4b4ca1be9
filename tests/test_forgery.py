"""A writer on the shared volume that is not part of the job (issue: forged tables).

Real agents (one process per node) meet on a temp directory while `tests.forger.Forger`
writes there with nothing but the documents' public shapes. Each scenario acts at a
protocol moment: a slot published, node 0 stopped (SIGSTOP) before it writes its
verdict, followers stopped after they published so the forger's document is what they
read when they resume. The contract checked every time:

- without a key: no pod exits 0 holding a table other than the one node 0 built; a
  forgery that is caught ends in 5 naming the foreign document and its path;
- with a key (`ASCEND_NODE_RENDEZVOUS_KEY`): added documents are ignored and the job
  completes with the real table; documents kept replaced end in 4 or 5 naming them;
  pods with different keys, or one without, end in 5 naming the mismatch.
"""

from __future__ import annotations

import json
import os
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Optional

import pytest

from ascend_node.rendezvous.seal import key_id_of
from ascend_node.sim.cluster import SimNode, SimSpec, prepare
from tests.cluster_helpers import make_nodes
from tests.forger import Forger, digest
from tests.freeze import freeze
from tests.test_faults import Proc, explain, start

pytestmark = pytest.mark.multiprocess

KEY = "6b1f0c2a9e4d47c8a3b5e0f1d2c3b4a5968778695a4b3c2d1e0f"  # random, 52 hex characters
OTHER_KEY = "0f1e2d3c4b5a69788796a5b4c3d2e1f0a9b8c7d6e5f40312"


@pytest.fixture
def procs() -> Iterator[list[Proc]]:
    """Every process a test starts is continued and ended by its own pid at the end."""
    started: list[Proc] = []
    yield started
    for p in started:
        if p.popen.poll() is None:
            os.kill(p.popen.pid, signal.SIGCONT)
            p.popen.kill()
            p.popen.wait()


def _job(tmp_path: Path, n: int, key: Optional[str], timeout: float = 30) -> list[SimNode]:
    extra = {"ASCEND_NODE_RENDEZVOUS_KEY": key} if key else {}
    return make_nodes(tmp_path, n, devices=2, timeout=timeout, **extra)


def _start(procs: list[Proc], node: SimNode, env: Optional[dict[str, str]] = None) -> Proc:
    p = start(node, env=env)
    procs.append(p)
    return p


def _stop(p: Proc) -> None:
    freeze(p.popen.pid)  # every thread stopped (the volume call runs in a worker thread)


def _cont(p: Proc) -> None:
    os.kill(p.popen.pid, signal.SIGCONT)


def _wait_in_stderr(p: Proc, text: str, forger: Forger) -> None:
    forger._until(lambda: text in p.stderr, f"node {p.node.index} to log {text!r}")


def _table(p: Proc) -> bytes:
    return (p.node.state_dir / "ranktable.json").read_bytes()


def _finish(procs: list[Proc], timeout: float = 60) -> dict[int, int]:
    return {p.node.index: p.wait(timeout) for p in procs}


def _assert_no_forged_table(procs: list[Proc], codes: dict[int, int]) -> None:
    """The contract: whoever exits 0 holds the table node 0 built, never a forged one."""
    winners = [p for p in procs if codes[p.node.index] == 0]
    node0 = next((p for p in procs if p.node.index == 0), None)
    for p in winners:
        text = _table(p)
        assert b"192.0.2." not in text, f"node {p.node.index} exited 0 with a forged table"
        if node0 is not None and codes[0] == 0:
            assert text == _table(node0), f"node {p.node.index} holds another table than node 0"
    assert set(codes.values()) <= {0, 4, 5}, explain(procs)


# ---------------------------------------------------------------------- without a key


def test_no_key_outcome_forged_before_node0_fails_loudly_and_nobody_takes_it(
        tmp_path: Path, procs: list[Proc]) -> None:
    """The first forgery of the issue: every slot published, an outcome with node 2's
    device IPs replaced written before node 0 writes its own (node 0 is held stopped)."""
    nodes = _job(tmp_path, 3, key=None)
    forger = Forger(tmp_path / "shared")
    p0 = _start(procs, nodes[0])
    forger.wait_for_slots([0])
    _stop(p0)
    p1, p2 = _start(procs, nodes[1]), _start(procs, nodes[2])
    slots = forger.wait_for_slots([0, 1, 2])
    forged = forger.outcome_from_slots(slots, 3, Forger.retarget_devices(2))
    forger.plant(forger.outcome_path, forged)
    outcome = str(forger.outcome_path)
    codes = {1: p1.wait(60), 2: p2.wait(60)}
    _cont(p0)
    codes[0] = p0.wait(60)
    _assert_no_forged_table(procs, codes)
    assert codes == {0: 5, 1: 5, 2: 5}, explain(procs)
    # The bystander names the document and the slot it contradicts.
    assert f"{outcome} is not the table node 0 built" in p1.stderr, p1.stderr
    assert str(forger.slot_path(2)) in p1.stderr
    # Node 0 finds the foreign verdict and aborts the attempt, naming it.
    assert f"{outcome} holds a table verdict node 0 did not write" in p0.stderr, p0.stderr


def _held_followers(tmp_path: Path, procs: list[Proc], n: int, key: Optional[str],
                    timeout: float = 30, running: int = 0) -> tuple[Forger, list[Proc]]:
    """Node 0 is stopped once its slot is in; then the followers start, the first
    `running` of them left running and the rest stopped once their slot is in. Node 0
    is continued when all are in place, so it completes (and exits 0) while the stopped
    followers have not yet read its verdict. Returns the stopped followers."""
    nodes = _job(tmp_path, n, key=key, timeout=timeout)
    forger = Forger(tmp_path / "shared")
    p0 = _start(procs, nodes[0])
    forger.wait_for_slots([0])
    _stop(p0)
    held = []
    for node in nodes[1:]:
        p = _start(procs, node)
        forger.wait_for_slots([node.index])
        if node.index > running:
            _stop(p)
            held.append(p)
    _cont(p0)
    for p in procs:
        if p not in held:
            assert p.wait(60) == 0, explain(procs)
    return forger, held


def test_no_key_node0s_entry_edited_after_node0_exits(tmp_path: Path, procs: list[Proc]
                                                       ) -> None:
    """The second forgery of the issue: node 0's own outcome, only node 0's device IPs
    changed in the table text and the sha256 recomputed, every other field as node 0
    wrote it, read by followers after node 0 has exited 0."""
    forger, followers = _held_followers(tmp_path, procs, 4, key=None)
    real = forger.wait_for_outcome()
    forger.plant(forger.outcome_path, Forger.with_table(real, Forger.retarget_devices(0)))
    for p in followers:
        _cont(p)
    codes = _finish(procs)
    _assert_no_forged_table(procs, codes)
    assert codes == {0: 0, 1: 5, 2: 5, 3: 5}, explain(procs)
    for p in followers:
        assert f"{forger.outcome_path} is not the table node 0 built" in p.stderr, p.stderr
        assert "master 0 (node 0)" in p.stderr


def test_no_key_node0s_slot_and_entry_both_forged_after_node0_exits(
        tmp_path: Path, procs: list[Proc]) -> None:
    """A forger that also rewrites node 0's slot (and the record's digest) to match its
    table: followers compare with node 0's slot as they read it before publishing."""
    forger, followers = _held_followers(tmp_path, procs, 3, key=None)
    real = forger.wait_for_outcome()
    slot0 = forger.read(forger.slot_path(0))
    assert slot0 is not None
    fake_data = json.loads(json.dumps(slot0["data"]))
    for n, dev in enumerate(fake_data["devices"]):
        dev["device_ip"] = f"192.0.2.{10 + n}"
    forger.plant(forger.slot_path(0), {**slot0, "data": fake_data})
    forged = Forger.with_table(real, Forger.retarget_devices(0))
    forged["members"][0] = {**forged["members"][0], "digest": digest(fake_data)}
    forger.plant(forger.outcome_path, forged)
    for p in followers:
        _cont(p)
    codes = _finish(procs)
    _assert_no_forged_table(procs, codes)
    assert codes == {0: 0, 1: 5, 2: 5}, explain(procs)
    for p in followers:
        assert "its record for master 0 (node 0) is not the data node 0 published" in p.stderr


def test_no_key_entry_of_an_exited_follower_edited(tmp_path: Path, procs: list[Proc]) -> None:
    """Forging only the entries of nodes that have exited: node 1 took the real table
    and left; the others compare node 1's entry with node 1's slot."""
    forger, held = _held_followers(tmp_path, procs, 4, key=None, running=1)
    real = forger.wait_for_outcome()
    forger.plant(forger.outcome_path, Forger.with_table(real, Forger.retarget_devices(1)))
    for p in held:
        _cont(p)
    codes = _finish(procs)
    _assert_no_forged_table(procs, codes)
    assert codes == {0: 0, 1: 0, 2: 5, 3: 5}, explain(procs)
    for p in held:
        assert "the table's entry for worker 0 (node 1) does not hold" in p.stderr, p.stderr
        assert str(forger.slot_path(1)) in p.stderr


def test_no_key_slot_forged_for_a_node_not_arrived(tmp_path: Path, procs: list[Proc]) -> None:
    """Without a key node 0 cannot tell a forged slot from a pod: it builds its table
    with it. Everyone who exits 0 still holds node 0's table; the real pod refuses it."""
    nodes = _job(tmp_path, 3, key=None, timeout=12)
    forger = Forger(tmp_path / "shared")
    p0, p1 = _start(procs, nodes[0]), _start(procs, nodes[1])
    slots = forger.wait_for_slots([0, 1])
    forger.plant(forger.slot_path(2), forger.member_for(2, slots[1], "10.250.0.2"))
    assert p0.wait(60) == 0 and p1.wait(60) == 0, explain(procs)
    assert _table(p0) == _table(p1)
    p2 = _start(procs, nodes[2])
    codes = _finish(procs)
    assert codes[2] in (4, 5), explain(procs)
    assert "worker 1 (node 2)" in p2.stderr


def test_no_key_attempt_replaced_while_node0_waits(tmp_path: Path, procs: list[Proc]) -> None:
    nodes = _job(tmp_path, 2, key=None)
    forger = Forger(tmp_path / "shared")
    p0 = _start(procs, nodes[0])
    forger.wait_for_slots([0])
    attempt = forger.read(forger.root / "attempt.json")
    assert attempt is not None
    forger.plant(forger.root / "attempt.json",
                 {**attempt, "attempt_id": "1-forged00", "opened_by": "forged-0"})
    assert p0.wait(60) == 5, explain(procs)
    assert "two live pods claim master 0 (node 0)" in p0.stderr


# ---------------------------------------------------------------------- with a key


def test_key_outcome_planted_before_node0_is_ignored_and_the_job_completes(
        tmp_path: Path, procs: list[Proc]) -> None:
    nodes = _job(tmp_path, 3, key=KEY)
    forger = Forger(tmp_path / "shared")
    p0 = _start(procs, nodes[0])
    forger.wait_for_slots([0])
    _stop(p0)
    p1, p2 = _start(procs, nodes[1]), _start(procs, nodes[2])
    slots = forger.wait_for_slots([0, 1, 2])
    forger.plant(forger.outcome_path,
                 forger.outcome_from_slots(slots, 3, Forger.retarget_devices(2)))
    ignored = f"ignoring {forger.outcome_path}: is not signed with the job's rendezvous key"
    _wait_in_stderr(p1, ignored, forger)
    _wait_in_stderr(p2, ignored, forger)
    _cont(p0)
    codes = _finish(procs)
    assert codes == {0: 0, 1: 0, 2: 0}, explain(procs)
    _assert_no_forged_table(procs, codes)


def test_key_slot_forged_for_a_node_not_arrived_is_ignored(tmp_path: Path, procs: list[Proc]
                                                           ) -> None:
    nodes = _job(tmp_path, 3, key=KEY)
    forger = Forger(tmp_path / "shared")
    p0, _p1 = _start(procs, nodes[0]), _start(procs, nodes[1])
    slots = forger.wait_for_slots([0, 1])
    forger.plant(forger.slot_path(2), forger.member_for(2, slots[1], "10.250.0.2"))
    _wait_in_stderr(p0, f"ignoring {forger.slot_path(2)}: is not signed", forger)
    _start(procs, nodes[2])
    codes = _finish(procs)
    assert codes == {0: 0, 1: 0, 2: 0}, explain(procs)
    _assert_no_forged_table(procs, codes)


def test_key_attempt_and_progress_forged_while_node0_waits(tmp_path: Path, procs: list[Proc]
                                                           ) -> None:
    nodes = _job(tmp_path, 3, key=KEY)
    forger = Forger(tmp_path / "shared")
    p0 = _start(procs, nodes[0])
    forger.wait_for_slots([0])
    aid = forger.attempt_id()
    attempt = forger.read(forger.root / "attempt.json")
    assert attempt is not None
    progress = forger.root / "attempts" / aid / "progress.json"
    forger.plant(progress, {"schema_version": 1, "run_id": "t", "kind": "progress",
                            "attempt_id": aid, "node_count": 3, "present": [0, 1, 2],
                            "missing": []})
    forged_attempt = {k: v for k, v in attempt.items() if k != "auth"}
    forger.plant(forger.root / "attempt.json",
                 {**forged_attempt, "attempt_id": "1-forged00", "opened_by": "forged-0"})
    _wait_in_stderr(p0, f"ignoring {forger.root / 'attempt.json'}: is not signed", forger)
    _start(procs, nodes[1])
    _start(procs, nodes[2])
    codes = _finish(procs)
    assert codes == {0: 0, 1: 0, 2: 0}, explain(procs)
    _assert_no_forged_table(procs, codes)


def test_key_outcome_replaced_after_node0_exits_ends_in_5_naming_it(
        tmp_path: Path, procs: list[Proc]) -> None:
    """Replacing node 0's documents denies service; it never splits the job."""
    forger, followers = _held_followers(tmp_path, procs, 3, key=KEY, timeout=15)
    real = forger.wait_for_outcome()
    unsigned = {k: v for k, v in real.items() if k != "auth"}
    forger.plant(forger.outcome_path, Forger.with_table(unsigned, Forger.retarget_devices(0)))
    for p in followers:
        _cont(p)
    codes = _finish(procs)
    _assert_no_forged_table(procs, codes)
    assert codes == {0: 0, 1: 5, 2: 5}, explain(procs)
    for p in followers:
        assert f"ignored as unauthenticated: {forger.outcome_path}: is not signed" in p.stderr


def test_key_outcome_held_by_a_forger_never_splits(tmp_path: Path, procs: list[Proc]) -> None:
    """A forger that keeps its outcome in place (re-planted whenever replaced): pods
    that saw node 0's verdict in between use it; the others end in 4 or 5 naming it."""
    nodes = _job(tmp_path, 3, key=KEY, timeout=15)
    forger = Forger(tmp_path / "shared")
    p0 = _start(procs, nodes[0])
    forger.wait_for_slots([0])
    _stop(p0)
    _start(procs, nodes[1])
    _start(procs, nodes[2])
    slots = forger.wait_for_slots([0, 1, 2])
    forger.hold(forger.outcome_path,
                forger.outcome_from_slots(slots, 3, Forger.retarget_devices(2)))
    _cont(p0)
    try:
        codes = _finish(procs)
    finally:
        forger.stop()
    _assert_no_forged_table(procs, codes)
    for p in procs:
        if codes[p.node.index] != 0:
            assert str(forger.outcome_path) in p.stderr, explain(procs)
            assert "not signed" in p.stderr


# ---------------------------------------------------------------------- key mismatches


def test_a_pod_without_the_key_and_pods_with_it_end_in_5(tmp_path: Path, procs: list[Proc]
                                                         ) -> None:
    nodes = _job(tmp_path, 2, key=KEY, timeout=10)
    forger = Forger(tmp_path / "shared")
    p0 = _start(procs, nodes[0])
    forger.wait_for_slots([0])
    p1 = _start(procs, nodes[1], env={"ASCEND_NODE_RENDEZVOUS_KEY": ""})
    codes = _finish(procs)
    assert codes == {0: 5, 1: 5}, explain(procs)
    kid = key_id_of(KEY.encode())
    assert f"is signed with a rendezvous key (key id {kid}) but this pod has none" in p1.stderr
    assert f"{forger.slot_path(1)}: is not signed with the job's rendezvous key" in p0.stderr
    for p in procs:
        assert KEY not in p.stderr


def test_pods_with_different_keys_end_in_5_naming_both_key_ids(
        tmp_path: Path, procs: list[Proc]) -> None:
    nodes = _job(tmp_path, 2, key=KEY, timeout=10)
    forger = Forger(tmp_path / "shared")
    p0 = _start(procs, nodes[0])
    forger.wait_for_slots([0])
    p1 = _start(procs, nodes[1], env={"ASCEND_NODE_RENDEZVOUS_KEY": OTHER_KEY})
    codes = _finish(procs)
    assert codes == {0: 5, 1: 5}, explain(procs)
    mine, theirs = key_id_of(KEY.encode()), key_id_of(OTHER_KEY.encode())
    assert f"signed with another rendezvous key (key id {theirs}; this pod's is {mine})" \
        in p0.stderr
    assert f"signed with another rendezvous key (key id {mine}; this pod's is {theirs})" \
        in p1.stderr


def test_the_key_reaches_no_log_file_volume_or_server_environment(tmp_path: Path) -> None:
    """`boot` with the key in a file and in the environment of different pods: the key
    is in no log line, status, event, file on the shared volume, or the environment the
    (fake) MindIE daemon was started with."""
    key_file = tmp_path / "secret" / "rendezvous-key"
    key_file.parent.mkdir()
    key_file.write_text(KEY + "\n")
    spec = SimSpec(nodes=2, devices=2, run_id="t", timeout=30, boot=True,
                   extra_env={"ASCEND_NODE_RENDEZVOUS_KEY": KEY})
    shared = tmp_path / "shared"
    shared.mkdir()
    nodes = prepare(spec, tmp_path / "work", shared)
    del nodes[1].env["ASCEND_NODE_RENDEZVOUS_KEY"]
    nodes[1].env["ASCEND_NODE_RENDEZVOUS_KEY_FILE"] = str(key_file)
    started = [start(n) for n in nodes]
    codes = [p.wait(60) for p in started]
    assert codes == [0, 0], explain(started)
    seen = [f for f in tmp_path.rglob("*") if f.is_file() and f.parent != key_file.parent]
    reports = [n.env["ASCEND_NODE_SIM_REPORT"] for n in nodes]
    for report in reports:
        text = Path(report).read_text()
        assert "pid=" in text and "ASCEND_NODE_RENDEZVOUS_KEY=" not in text
    signed = json.loads((shared / ".ascend-node" / "t" / "attempt.json").read_text())
    assert signed["auth"]["key_id"] == key_id_of(KEY.encode())
    for path in seen:
        assert KEY.encode() not in path.read_bytes(), f"the key is in {path}"


def test_node0_without_the_key_stops_at_the_first_signed_slot(tmp_path: Path,
                                                               procs: list[Proc]) -> None:
    nodes = _job(tmp_path, 2, key=None, timeout=10)
    forger = Forger(tmp_path / "shared")
    p0 = _start(procs, nodes[0])
    forger.wait_for_slots([0])
    p1 = _start(procs, nodes[1], env={"ASCEND_NODE_RENDEZVOUS_KEY": KEY})
    assert p0.wait(60) == 5, explain(procs)
    kid = key_id_of(KEY.encode())
    assert (f"{forger.slot_path(1)}: is signed with a rendezvous key (key id {kid}) but this "
            "pod has none") in p0.stderr
    assert p1.wait(60) == 5, explain(procs)
    assert f"{forger.root / 'attempt.json'}: is not signed" in p1.stderr
