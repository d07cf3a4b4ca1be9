"""A follower's waits say what *it* waits for, and a late pod hears its own start's verdict.

In-process runs of one follower against documents written by the test (the peers), with
an injected clock, so every message is checked without waiting for real timeouts.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from ascend_node.discover.identity import NodeIdentity
from ascend_node.errors import ClusterInconsistent, PeerTimeout
from ascend_node.rendezvous.models import ProgressDoc
from ascend_node.rendezvous.protocol import Rendezvous
from ascend_node.rendezvous.store import RunPaths, write_doc
from tests.rdzv_docs import RUN, abort_outcome, attempt, data, member, table_outcome

NODES = 4


class _Lines(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


@pytest.fixture
def logged() -> Iterator[list[str]]:
    """The rendezvous's log lines, caught on its own logger (the CLI's logging setup may
    stop propagation to the root logger that caplog listens on)."""
    logger = logging.getLogger("ascend_node.rendezvous")
    handler, level = _Lines(), logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    yield handler.lines
    logger.removeHandler(handler)
    logger.setLevel(level)


def follower(tmp_path: Path, index: int = 2, timeout: float = 30.0, polls_until_timeout: int = 5,
             ) -> Rendezvous:
    """Node `index`; its clock runs out after `polls_until_timeout` naps."""
    naps = [0]
    start = 1000.0

    def clock() -> float:
        return start + (timeout if naps[0] >= polls_until_timeout else naps[0] * 0.01)

    def sleep(_s: float) -> None:
        naps[0] += 1

    ident = NodeIdentity("worker", index - 1, 1, NODES - 1, data(index).pod_ip,
                         data(index).host_ip, f"uid-{index}")
    return Rendezvous(RunPaths(tmp_path, RUN), ident, data(index), deadline=start + timeout,
                      timeout=timeout, progress_interval=0.0, clock=clock, sleep=sleep)


def test_timeout_with_everyone_published_names_node0s_verdict(tmp_path, logged):
    paths = RunPaths(tmp_path, RUN)
    write_doc(paths.attempt_file, attempt(nodes=NODES), tmp_path)
    for i in range(NODES):
        if i != 2:
            write_doc(paths.slot("a1", i), member(i, nodes=NODES), tmp_path)
    # node 0's progress document is stale: it still lists this pod as missing
    write_doc(paths.progress("a1"), ProgressDoc(run_id=RUN, attempt_id="a1", node_count=NODES,
                                                present=(0, 1, 3), missing=(2,)), tmp_path)
    with pytest.raises(PeerTimeout) as err:
        follower(tmp_path).run()
    text = str(err.value)
    assert "missing: the verdict of master 0 (node 0)" in text
    assert "all 4 nodes had published" in text
    assert "0 of 4" not in text
    waiting = [line for line in logged if "waiting for" in line]
    assert waiting and all("worker 1 (node 2)" not in line for line in waiting), waiting
    assert "waiting for master 0 (node 0) to build the table" in waiting[-1]


def test_progress_line_leaves_this_pod_out_of_node0s_list(tmp_path, logged):
    paths = RunPaths(tmp_path, RUN)
    write_doc(paths.attempt_file, attempt(nodes=NODES), tmp_path)
    write_doc(paths.progress("a1"), ProgressDoc(run_id=RUN, attempt_id="a1", node_count=NODES,
                                                present=(0,), missing=(1, 2, 3)), tmp_path)
    with pytest.raises(PeerTimeout) as err:
        follower(tmp_path).run()
    lines = [line for line in logged if "node 0 still waits" in line]
    assert lines and "worker 0 (node 1), worker 2 (node 3)" in lines[-1]
    assert "worker 1 (node 2)" not in lines[-1]
    # node 0 itself never published in this test: it is named with the others
    want = "3 of 4 missing: master 0 (node 0), worker 0 (node 1), worker 2 (node 3)"
    assert want in str(err.value)


def _aborted_attempt(tmp_path: Path) -> Path:
    paths = RunPaths(tmp_path, RUN)
    write_doc(paths.attempt_file, attempt(nodes=NODES), tmp_path)
    write_doc(paths.outcome("a1"), abort_outcome("device IP 10.0.0.1 is used on node 1 and 3",
                                                 participants=("uid-0", "uid-1", "uid-3")),
              tmp_path)
    return paths.outcome("a1")


def test_a_pod_arriving_after_its_own_starts_abort_exits_5_at_once(tmp_path):
    """Seen at N = 128: discovery outlasted the abort grace; the pod must not wait 15 min."""
    pod = Rendezvous(RunPaths(tmp_path, RUN), follower(tmp_path).identity, data(2),
                     deadline=time.monotonic() + 30, timeout=30, sleep=lambda s: None)
    time.sleep(0.05)  # the agent started before node 0 wrote the abort
    _aborted_attempt(tmp_path)
    started = time.monotonic()
    with pytest.raises(ClusterInconsistent) as err:
        pod.run()
    assert time.monotonic() - started < 5
    assert "device IP 10.0.0.1" in str(err.value) and "after this pod started" in str(err.value)
    assert not list((tmp_path / ".ascend-node" / RUN).glob(".clock-*")), "probe left behind"


def test_an_abort_from_before_this_pod_started_is_history(tmp_path):
    outcome = _aborted_attempt(tmp_path)
    hour_ago = time.time() - 3600
    os.utime(outcome, (hour_ago, hour_ago))
    with pytest.raises(ClusterInconsistent) as err:  # stale-abort at the timeout, not at once
        follower(tmp_path, polls_until_timeout=3).run()
    assert "no new attempt opened within 30 s" in str(err.value)


def test_a_large_jobs_follower_names_node0_when_its_attempt_directory_never_comes(
        tmp_path, logged):
    """At N >= 64 a follower does not make node 0's attempt directory (cadence.joins_now):
    if node 0 wrote `attempt.json` and never made it, the follower says what it waits for
    while waiting and times out (exit 4) naming node 0 — having made nothing."""
    nodes = 64
    paths = RunPaths(tmp_path, RUN)
    write_doc(paths.attempt_file, attempt(nodes=nodes), tmp_path)
    ident = NodeIdentity("worker", 4, 1, nodes - 1, data(5).pod_ip, data(5).host_ip, "uid-5")
    now = [1000.0]

    def sleep(seconds: float) -> None:
        now[0] += max(seconds, 0.01)

    rdzv = Rendezvous(paths, ident, data(5), deadline=now[0] + 30, timeout=30,
                      progress_interval=0.0, clock=lambda: now[0], sleep=sleep)
    with pytest.raises(PeerTimeout) as err:
        rdzv.run()
    text = str(err.value)
    assert "timed out after 30 s" in text and "missing: master 0 (node 0)" in text, text
    assert "not yet made its directory" in text and str(paths.attempt_dir("a1")) in text
    assert err.value.exit_code == 4
    assert not (paths.root / "attempts").exists()
    assert any("not yet made its directory" in line for line in logged), logged


# ------------------------------------------------------------------ another job size (issue 36)


def test_a_table_of_another_size_is_waited_past_and_the_timeout_names_node0(tmp_path, logged):
    """The job re-deployed with 4 nodes under the run id of a 3-node one: worker 1's data
    is in the old table, which it must not take (nor call forged); it waits for node 0."""
    paths = RunPaths(tmp_path, RUN)
    write_doc(paths.attempt_file, attempt(nodes=3), tmp_path)
    for i in range(3):
        write_doc(paths.slot("a1", i), member(i, nodes=3, incarnation=f"old-{i}"), tmp_path)
    write_doc(paths.outcome("a1"), table_outcome([member(i, nodes=3) for i in range(3)]),
              tmp_path)
    with pytest.raises(PeerTimeout) as err:  # 4, not 5
        follower(tmp_path).run()
    assert str(err.value) == (
        "timed out after 30 s: attempt a1 is for 3 nodes (1 master), this pod's job has 4 "
        "nodes (1 master) (an earlier start's), and master 0 (node 0) never opened an "
        "attempt for this one; missing: master 0 (node 0)")
    assert any(line.startswith("waiting: attempt a1 completed for 3 nodes (1 master), this "
                               "pod's job has 4 nodes (1 master): an earlier start")
               for line in logged), logged
    assert '"incarnation":"old-2"' in paths.slot("a1", 2).read_text()  # nothing published


def test_an_abort_of_another_size_from_before_this_pod_started_is_history(tmp_path):
    paths = RunPaths(tmp_path, RUN)
    write_doc(paths.attempt_file, attempt(nodes=3), tmp_path)
    write_doc(paths.outcome("a1"), abort_outcome("device IP 10.0.0.1 is used twice",
                                                 participants=("old-0", "old-1")), tmp_path)
    hour_ago = time.time() - 3600
    os.utime(paths.outcome("a1"), (hour_ago, hour_ago))
    with pytest.raises(PeerTimeout) as err:  # a wait that ends in 4 naming node 0, not 5
        follower(tmp_path, polls_until_timeout=3).run()
    assert "missing: master 0 (node 0)" in str(err.value)


def test_an_abort_of_another_size_written_after_this_pod_started_is_its_starts(tmp_path):
    """Node 0 of this start sees another node count (the pods disagree on VC_WORKER_NUM)
    and aborted while this pod was discovering: 5 at once, with the abort's reason."""
    pod = Rendezvous(RunPaths(tmp_path, RUN), follower(tmp_path).identity, data(2),
                     deadline=time.monotonic() + 30, timeout=30, sleep=lambda s: None)
    time.sleep(0.05)
    paths = RunPaths(tmp_path, RUN)
    write_doc(paths.attempt_file, attempt(nodes=3), tmp_path)
    write_doc(paths.outcome("a1"), abort_outcome("worker 0 (node 1) sees 4 nodes (1 masters) "
                                                 "but node 0 sees 3 (1)",
                                                 participants=("uid-0", "uid-1")), tmp_path)
    with pytest.raises(ClusterInconsistent) as err:
        pod.run()
    assert str(err.value).startswith("attempt a1 was aborted: worker 0 (node 1) sees 4 nodes")
    assert "after this pod started" in str(err.value)


def test_an_open_attempt_of_another_size_is_joined_and_the_wait_says_both(tmp_path, logged):
    """It may be this start's node 0 disagreeing on the counts (it then aborts naming the
    difference), or an earlier start's that node 0 will replace: publish, and say so."""
    paths = RunPaths(tmp_path, RUN)
    write_doc(paths.attempt_file, attempt(nodes=3), tmp_path)
    with pytest.raises(PeerTimeout) as err:
        follower(tmp_path).run()
    assert paths.slot("a1", 2).exists()
    assert any("which master 0 (node 0) opened for 3 nodes (1 master) while this pod's job "
               "has 4 nodes (1 master)" in line for line in logged), logged
    assert "missing: master 0 (node 0)" in str(err.value)
