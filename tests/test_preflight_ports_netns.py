"""HCCL's host ports checked for real: a process listens on one in a pod's own network
namespace (tests/netns_bed.py, root), and the agent running there finds it.

Two pods, each in its own namespace; a real socket listens on 60000 (HCCL's default first
host port) in the second only. Node 0 judges both nodes' facts: every node ends with 5,
naming the second node, the port and the variable that moves the range, and not the first
node, whose namespace has no listener (so the check reads the pod's own sockets, not the
host's).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.cluster_helpers import codes, explain, make_nodes, run
from tests.netns_bed import SUBNET, Netns

pytestmark = [pytest.mark.netns, pytest.mark.multiprocess]

LISTENER = ("import socket, time\n"
            "s = socket.socket()\n"
            "s.bind(('0.0.0.0', 60000))\n"
            "s.listen(1)\n"
            "print('ready', flush=True)\n"
            "time.sleep(300)\n")


def test_a_listener_on_hccls_port_in_one_pod_ends_every_node_with_5(
        tmp_path: Path, netns: Netns) -> None:
    names = [netns.pod(f"{SUBNET}.{60 + i}") for i in range(2)]
    listener = subprocess.Popen(["ip", "netns", "exec", names[1], sys.executable, "-c",
                                 LISTENER], stdout=subprocess.PIPE, text=True)
    try:
        assert listener.stdout is not None and listener.stdout.readline().strip() == "ready"
        nodes = make_nodes(tmp_path, 2, devices=2, timeout=60)
        for node, name in zip(nodes, names):
            node.argv = ["ip", "netns", "exec", name, *node.argv]
            # HCCL's own default range: these pods have namespaces of their own (the
            # simulator moves it above the shared machine's ephemeral range otherwise).
            node.env.pop("HCCL_IF_BASE_PORT")
        results = run(nodes, timeout=120)
    finally:
        listener.kill()
        listener.wait(timeout=20)
    assert codes(results) == [5, 5], explain(results)
    for r in results:
        assert ("HCCL host port(s) 60000 on worker 0 (node 1) already have a listener "
                "(HCCL's range 60000-60031, from default") in r.stderr, explain(results)
        assert "or move the range with HCCL_IF_BASE_PORT" in r.stderr
        assert "on master 0 (node 0) already have a listener" not in r.stderr
