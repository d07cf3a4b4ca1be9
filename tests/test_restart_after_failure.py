"""A container restart of the pod whose local failure aborted the attempt (same POD_UID, the
cause fixed on the host) does not repeat the old verdict, and the cluster converges.

The rules (docs/rendezvous.md "Container restart after a local failure"): a pod only ever
undoes its own failure document (it is its slot's only writer); once the attempt is closed,
that pod waits for a new attempt instead of exiting 5 with its own old cause; node 0 opens
a new attempt when it restarts after an abort caused by a local failure (the one verdict a
restart can cure); every other pod's verdict on the aborted attempt stands until then.
Real agent processes on a real shared directory; restarts keep each pod's POD_UID.
"""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import pytest

from tests.cluster_helpers import attempt_doc, codes, explain, make_nodes, run, shared_table

pytestmark = pytest.mark.multiprocess

NO_IP = "device 2 has no usable RoCE IP"


def _restart_node0_and_wait_for_a_new_attempt(nodes, old: str, results: list) -> threading.Thread:
    """Start node 0's restart in the background; return once it has opened a new attempt
    (read from attempt.json: a condition, not a delay)."""
    thread = threading.Thread(target=lambda: results.extend(run([nodes[0]], 120)), daemon=True)
    thread.start()
    shared = Path(nodes[0].env["ASCEND_NODE_SHARED_DIR"])
    path = shared / ".ascend-node" / nodes[0].env["ASCEND_NODE_RUN_ID"] / "attempt.json"
    end = time.monotonic() + 120
    while time.monotonic() < end and thread.is_alive():
        try:
            if json.loads(path.read_text())["attempt_id"] != old:
                return thread
        except (OSError, ValueError, KeyError):
            pass
        time.sleep(0.1)
    thread.join(5)
    pytest.fail(f"node 0 opened no new attempt: {explain(results)}")


def test_a_follower_fixed_and_restarted_waits_and_the_cluster_converges(tmp_path: Path) -> None:
    nodes = make_nodes(tmp_path, 3, timeout=60)
    address = nodes[1].devices[2].ip
    nodes[1].devices[2].ip = None
    first = run(nodes)
    assert codes(first) == [5, 1, 5], explain(first)
    aborted = attempt_doc(tmp_path)["attempt_id"]

    nodes[1].devices[2].ip = address  # fixed on the host; the container restarts
    nodes[1].env["ASCEND_NODE_TIMEOUT"] = "5"
    [alone] = run([nodes[1]])
    assert alone.exit_code == 4, explain([alone])
    assert (f"attempt {aborted} was aborted by this pod's own earlier failure (worker 0 "
            f"(node 1) failed: {NO_IP}") in alone.stderr
    assert "and no new attempt opened" in alone.stderr
    assert "exit 4 is retryable" in alone.stderr

    # A peer that exited 5: its verdict stands for now. (Had it arrived after the verdict
    # the first time, it took no part and waits for a new attempt until its timeout, then
    # exits 5 with the same reason: the short timeout keeps that case short.)
    nodes[2].env["ASCEND_NODE_TIMEOUT"] = "8"
    [other] = run([nodes[2]])
    assert other.exit_code == 5, explain([other])
    assert f"attempt {aborted} was aborted: worker 0 (node 1) failed: {NO_IP}" in other.stderr

    nodes[1].env["ASCEND_NODE_TIMEOUT"] = nodes[2].env["ASCEND_NODE_TIMEOUT"] = "60"
    zero: list = []
    thread = _restart_node0_and_wait_for_a_new_attempt(nodes, aborted, zero)
    rest = run(nodes[1:])
    thread.join(120)
    assert codes(zero) + codes(rest) == [0, 0, 0], explain(zero + rest)
    assert attempt_doc(tmp_path)["attempt_id"] != aborted
    server = shared_table(tmp_path)["server_list"][1]
    assert address in [d["device_ip"] for d in server["device"]]


def test_node0_fixed_and_restarted_opens_a_new_attempt(tmp_path: Path) -> None:
    nodes = make_nodes(tmp_path, 2, timeout=60)
    address = nodes[0].devices[2].ip
    nodes[0].devices[2].ip = None
    first = run(nodes)
    assert codes(first) == [1, 5], explain(first)
    assert f"master 0 (node 0) failed: {NO_IP}" in first[1].stderr
    aborted = attempt_doc(tmp_path)["attempt_id"]

    nodes[0].devices[2].ip = address
    zero: list = []
    thread = _restart_node0_and_wait_for_a_new_attempt(nodes, aborted, zero)
    [follower] = run([nodes[1]])
    thread.join(120)
    assert [*codes(zero), follower.exit_code] == [0, 0], explain([*zero, follower])
    assert "was aborted by a local failure, which a restart may have cured" in zero[0].stderr


def test_a_restart_that_still_fails_reports_its_cause_not_the_old_verdict(
        tmp_path: Path) -> None:
    nodes = make_nodes(tmp_path, 2, timeout=60)
    nodes[1].devices[2].ip = None
    first = run(nodes)
    assert codes(first) == [5, 1], explain(first)
    [again] = run([nodes[1]])  # not fixed: exit 1 with the local cause, at once
    assert again.exit_code == 1, explain([again])
    assert f"ascend-node: error: {NO_IP}" in again.stderr
    assert "was aborted" not in again.stderr
