"""A held NPU at start-up, with real agent processes: a holder that goes within the hold
wait (the previous pod still terminating) is waited for and the start goes on; one that
stays past it ends every node with 5 naming device, PID and name (test_simulate_faults)."""

from __future__ import annotations

import threading
import time

import pytest

from ascend_node.sim.cluster import launch
from ascend_node.sim.fake_tools import npu_smi_info_text, write_node_data
from tests.cluster_helpers import codes, explain, make_nodes

pytestmark = pytest.mark.multiprocess


def test_a_holder_that_ends_within_the_wait_is_waited_for(tmp_path, monkeypatch):
    nodes = make_nodes(tmp_path, 2, devices=2, timeout=60,
                       ASCEND_NODE_PREFLIGHT_HOLD_WAIT="45")
    busy = nodes[1]
    busy.devices[1].holders.append((31337, "old_server", 60000))
    write_node_data(busy.data_dir, busy.devices)
    info = busy.data_dir / "npu-smi-info"
    assert "31337" in info.read_text()
    busy.devices[1].holders.clear()
    idle = npu_smi_info_text(busy.devices, False)

    def release() -> None:
        # The "previous pod" ends once node 1 has seen it (its log says it waits).
        log = busy.state_dir.parent / "stderr.txt"
        deadline = time.monotonic() + 50
        while time.monotonic() < deadline:
            if log.exists() and "waiting up to 45 s" in log.read_text(errors="replace"):
                break
            time.sleep(0.1)
        info.write_text(idle)

    # launch() writes each node's data files first: keep node 1's busy table.
    original = write_node_data

    def keep_busy(data_dir, devices, seat=None, unreachable=()):
        if data_dir != busy.data_dir:
            original(data_dir, devices, seat, unreachable)

    import ascend_node.sim.cluster as cluster

    monkeypatch.setattr(cluster, "write_node_data", keep_busy)
    releaser = threading.Thread(target=release)
    releaser.start()
    try:
        results = launch(nodes, 90)
    finally:
        releaser.join()
    assert codes(results) == [0, 0], explain(results)
    log = results[1].stderr
    assert ("pre-flight: device 1: PID 31337 (old_server, 60000 MB); waiting up to 45 s for "
            "it to end") in log
