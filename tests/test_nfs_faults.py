"""When the NFS server itself fails while pods wait (issue 29), on the real NFS bed.

tests/nfs_bed.py: a kernel nfsd in one User Mode Linux guest, two client guests (v4.2,
lease and grace 10 s); the server guest is frozen with SIGSTOP (a NAS that hangs or fails
over) and thawed with SIGCONT, or its nfsd threads are stopped and started again (a
server restart, with its grace period). Each test asserts what a pod's user relies on:
its exit code, that it came within `--timeout` + 10 s of the pod's start, and the message.
Before issue 29 a freeze longer than the lease, or past the deadline, left every pod
silent in a system call until the bed killed it minutes later.

Slow (a bed boots in ~10 s here, each test runs up to ~2 min): every test boots its own
bed — a freeze longer than ~20 s left the bed's clients without answers for good
(docs/reliability.md), which a shared bed would hand to the next test.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.nfs_bed import Bed, BedError, PodResult, explain, why_not

pytestmark = [pytest.mark.nfs, pytest.mark.multiprocess]

SLACK = 10.0  # no pod outlives its --timeout by more than this (the target)
SERVER = "NFS server 10.99.0.1"


def _bed(work: Path, options: str = "", lease: int = 10, vers: str = "4.2") -> Iterator[Bed]:
    reason = why_not()
    if reason:
        pytest.skip(reason)
    b = Bed(work, vers=vers, options=options, clients=2, lease=lease)
    try:
        try:
            b.start()
        except BedError as exc:
            pytest.fail(f"the NFS test bed did not come up: {exc}")
        yield b
    finally:
        b.close()


@pytest.fixture()
def bed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Bed]:
    yield from _bed(tmp_path_factory.mktemp("nfsbed-faults"))


@pytest.fixture()
def soft_bed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Bed]:
    # timeo in tenths of a second: a call the server does not answer fails with EIO after
    # `retrans` retransmissions (measured on the bed: ~20 s). NFS v3: no client state to
    # recover after the thaw (the bed's v4.2 clients did not come back from a freeze of
    # 20 s or more, soft or hard: docs/reliability.md)
    yield from _bed(tmp_path_factory.mktemp("nfsbed-soft"), "soft,timeo=10,retrans=2",
                    vers="3")


def _at(bed: Bed, seconds: float) -> None:
    """Sleep until `seconds` after the run's common start."""
    time.sleep(max(0.0, bed.last_start + seconds - time.time()))


def _waiting(bed: Bed, seconds: float, pods: tuple[int, ...] = (0, 1)) -> float:
    """Sleep until `seconds` after the start and until `pods` wait on the volume; the host
    time then. A fault set at a fixed second alone missed the pods a loaded machine
    started late (one met only the end of a freeze, and no call of its failed)."""
    _at(bed, seconds)
    return bed.wait_said(pods, "published", timeout=60)


def _cause(result: PodResult) -> str:
    lines = [x for x in result.stderr.splitlines() if x.startswith("ascend-node: error: ")]
    return lines[-1].removeprefix("ascend-node: error: ") if lines else ""


def _within_deadline(results: list[PodResult], timeout: float) -> None:
    for r in results:
        assert r.end - r.start <= timeout + SLACK, (
            f"node {r.index} took {r.end - r.start:.1f} s (--timeout {timeout:g} s)\n"
            + explain(results))


def _report(bed: Bed, name: str, results: list[PodResult], thawed: float) -> None:
    last = max(r.end for r in results)
    print(f"{name}: codes {[r.exit_code for r in results]}, last pod done "
          f"{last - bed.last_start:.1f} s after the start, {last - thawed:.1f} s after the "
          "server answered again")


def test_a_freeze_past_the_deadline_ends_every_pod_with_4_naming_the_volume(bed: Bed) -> None:
    timeout = 40.0
    nodes = bed.pods(3, run_id="freeze-past", timeout=timeout)[:2]  # node 2 never comes
    bed.start_run(nodes, hard_timeout=timeout + 60)
    _waiting(bed, 8)
    bed.freeze_server()
    try:
        results = bed.finish_run()
    finally:
        bed.thaw_server()
    thawed = time.time()
    _report(bed, "freeze 8 s -> end", results, thawed)
    assert [r.exit_code for r in results] == [4, 4], explain(results)
    _within_deadline(results, timeout)
    for r in results:
        cause = _cause(r)
        assert "the shared volume has not answered" in cause, explain(results)
        assert SERVER in cause and "/run/shared" in cause, cause
        assert "has not answered for" in r.stderr.split("ascend-node: error:")[0], (
            "no progress line said the volume had not answered\n" + explain(results))


def _completed_or_named_the_volume(results: list[PodResult]) -> bool:
    return all(r.exit_code == 0 for r in results) or all(
        r.exit_code == 4 and "the shared volume" in _cause(r) and SERVER in _cause(r)
        and "missing" not in _cause(r) for r in results)


@pytest.mark.parametrize(("freeze", "thaw", "timeout", "must_complete"), [
    (5.0, 10.0, 60.0, True),     # short: the table within 15 s of the server answering
    # longer than the lease (10 s): the client must recover its state; on the bed's
    # kernel it does not within 90 s (docs/reliability.md), so: done, or 4 naming the volume
    (8.0, 38.0, 120.0, False),
], ids=["short", "longer-than-the-lease"])
def test_a_freeze_shorter_than_the_time_left_ends_in_the_table(
        bed: Bed, freeze: float, thaw: float, timeout: float, must_complete: bool) -> None:
    nodes = bed.pods(3, run_id=f"freeze-{thaw:g}", timeout=timeout)
    nodes[2].start_delay = thaw + 5  # arrives after the server answers again
    bed.start_run(nodes, hard_timeout=timeout + 60)
    frozen = _waiting(bed, freeze)
    bed.freeze_server()
    try:
        time.sleep(max(0.0, frozen + thaw - freeze - time.time()))
    finally:
        bed.thaw_server()
    thawed = time.time()
    results = bed.finish_run()
    _report(bed, f"freeze {freeze:g} -> {thaw:g} s", results, thawed)
    _within_deadline(results, timeout)
    if not must_complete:
        assert _completed_or_named_the_volume(results), explain(results)
        return
    assert [r.exit_code for r in results] == [0, 0, 0], explain(results)
    # node 2 starts 5 s after the thaw (a pod takes ~3 s to start in a guest): the
    # table within 15 s of the server answering, with the bed's slack
    assert max(r.end for r in results) - thawed <= 5 + 15 + SLACK, explain(results)


def test_an_nfsd_restart_mid_rendezvous_completes_or_names_the_volume(bed: Bed) -> None:
    timeout = 60.0
    nodes = bed.pods(3, run_id="restart", timeout=timeout)
    nodes[2].start_delay = 14.0
    bed.start_run(nodes, hard_timeout=timeout + 60)
    _at(bed, 6)
    bed.restart_nfsd(down=4)
    results = bed.finish_run()
    _report(bed, "nfsd restart 6 -> 10 s", results, bed.last_start + 10)
    _within_deadline(results, timeout)
    assert _completed_or_named_the_volume(results), explain(results)


def test_a_soft_mount_under_a_freeze_names_the_io_error(soft_bed: Bed) -> None:
    """EIO (or ESTALE) named with its path while the server is frozen, never read as a
    missing file; then the table, or 4 at the deadline naming the volume (the bed's soft
    clients did not come back after a 9 s freeze: docs/reliability.md)."""
    timeout = 60.0
    nodes = soft_bed.pods(3, run_id="soft", timeout=timeout)
    nodes[2].start_delay = 19.0
    soft_bed.start_run(nodes, hard_timeout=timeout + 60)
    frozen = _waiting(soft_bed, 5)
    soft_bed.freeze_server()
    try:
        time.sleep(max(0.0, frozen + 9 - time.time()))
    finally:
        soft_bed.thaw_server()
    thawed = time.time()
    results = soft_bed.finish_run()
    _report(soft_bed, f"soft mount, freeze {frozen - soft_bed.last_start:.1f} s for 9 s",
            results, thawed)
    _within_deadline(results, timeout)
    assert _completed_or_named_the_volume(results), explain(results)
    # the pods that waited through the freeze named what failed, with the path
    named = ("Input/output error (EIO", "Connection timed out (ETIMEDOUT",
             "Stale file handle (ESTALE")
    assert all(any(n in r.stderr for n in named) and "/run/shared" in r.stderr
               for r in results[:2]), explain(results)
