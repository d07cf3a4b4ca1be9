"""Pod IP detection on real interfaces: each simulated pod in its own network namespace.

Topology (all inside namespaces this test creates, nothing in the root namespace):

    hub netns:   br0 10.231.0.1/24  <- veth ends of every pod
    pod netns i: eth0 10.231.0.(10+i)/24, lo, default route via 10.231.0.1

Nothing is ever sent: the agent asks the kernel which source address its default route
would use (a UDP connect(), which sends no packet), so the test
checks the real default-route lookup instead of K8S_POD_IP/POD_IP, which are removed
from every pod's environment. Without POD_UID the fallback incarnation is derived from
the real network namespace too.

Skips with the exact error where namespaces are not permitted (not root, or
`ip netns add` fails). Namespaces are deleted by a finalizer, even on failure.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.cluster_helpers import codes, explain, make_nodes, run, table_of
from tests.netns_bed import SUBNET, SUBNET6, Netns, _ip, _must

pytestmark = [pytest.mark.netns, pytest.mark.multiprocess]


def _in_netns(nodes: list[Any], names: list[str], keep_uid: bool = True) -> None:
    """Run each node inside its namespace, with no pod IP in its environment."""
    for node, name in zip(nodes, names):
        for var in ("K8S_POD_IP", "POD_IP", "K8S_HOST_IP"):
            node.env.pop(var, None)
        if not keep_uid:
            node.env.pop("POD_UID", None)
        node.argv = ["ip", "netns", "exec", name, *node.argv]


def _discover(ns: str, tmp: Path, **env: str) -> subprocess.CompletedProcess[str]:
    node = make_nodes(tmp, 1, devices=1)[0]
    from ascend_node.sim.fake_tools import write_node_data

    write_node_data(node.data_dir, node.devices)
    drop = ("K8S_POD_IP", "K8S_HOST_IP", "POD_UID")
    full = {k: v for k, v in node.env.items() if k not in drop}
    full.update(env)
    return subprocess.run(
        ["ip", "netns", "exec", ns, sys.executable, "-m", "ascend_node", "discover", "--json"],
        env=full, capture_output=True, text=True, timeout=60,
    )


def test_each_pod_reports_its_own_default_route_address(tmp_path: Path, netns: Netns) -> None:
    addresses = [f"{SUBNET}.{10 + i}" for i in range(3)]
    names = [netns.pod(a) for a in addresses]
    nodes = make_nodes(tmp_path, 3, devices=2, timeout=30)
    _in_netns(nodes, names)
    results = run(nodes)
    assert codes(results) == [0, 0, 0], explain(results)
    for result, address in zip(results, addresses):
        out = json.loads(result.stdout)
        assert out["env"]["MIES_CONTAINER_IP"] == address
        table = json.loads(table_of(result))
        assert table["server_list"][result.index]["container_ip"] == address
        # K8S_HOST_IP unset: server_id is the pod IP too (docs/design.md, "The chain", step 1).
        assert table["server_list"][result.index]["server_id"] == address


def test_discover_names_the_default_route_interface_as_the_source(
    tmp_path: Path, netns: Netns,
) -> None:
    ns = netns.pod(f"{SUBNET}.21")
    done = _discover(ns, tmp_path)
    assert done.returncode == 0, done.stderr
    ident = json.loads(done.stdout)["identity"]
    assert ident["pod_ip"] == ident["host_ip"] == f"{SUBNET}.21"
    assert json.loads(done.stdout)["sources"]["pod_ip"] == "default-route interface"


def test_pod_ip_variable_wins_over_the_interface(tmp_path: Path, netns: Netns) -> None:
    ns = netns.pod(f"{SUBNET}.22")
    done = _discover(ns, tmp_path, POD_IP="10.231.0.99")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["identity"]["pod_ip"] == "10.231.0.99"


@pytest.mark.parametrize("family", ["IPv4", "IPv6"])
def test_a_default_route_without_gateway_still_gives_the_pod_ip(
    tmp_path: Path, netns: Netns, family: str,
) -> None:
    """`ip route add default dev eth0`: the kernel's source address for it is the pod IP."""
    if family == "IPv4":
        ns, expected = netns.pod(f"{SUBNET}.24", gateway=False), f"{SUBNET}.24"
    else:  # IPv6-only pod: the IPv4 address exists but has no default route
        ns = netns.pod(f"{SUBNET}.25", default_route=False, address6=f"{SUBNET6}25")
        _must("-n", ns, "-6", "route", "add", "default", "dev", "eth0")
        expected = f"{SUBNET6}25"
    routes = _ip("-n", ns, "-4" if family == "IPv4" else "-6", "route", "show", "default")
    assert "via" not in routes.stdout and "default dev eth0" in routes.stdout, routes.stdout
    done = _discover(ns, tmp_path)
    assert done.returncode == 0, done.stderr
    ident = json.loads(done.stdout)["identity"]
    assert ident["pod_ip"] == expected
    assert json.loads(done.stdout)["sources"]["pod_ip"] == "default-route interface"


def test_the_lower_metric_default_route_decides(tmp_path: Path, netns: Netns) -> None:
    """Two default routes on two addresses: the kernel's choice, not the first interface."""
    ns = netns.pod(f"{SUBNET}.26", default_route=False)
    _must("-n", ns, "addr", "add", f"{SUBNET}.27/24", "dev", "eth0")
    _must("-n", ns, "route", "add", "default", "dev", "eth0", "metric", "200")
    _must("-n", ns, "route", "add", "default", "dev", "eth0", "src", f"{SUBNET}.27",
          "metric", "100")
    done = _discover(ns, tmp_path)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["identity"]["pod_ip"] == f"{SUBNET}.27"


@pytest.mark.parametrize("setup", ["loopback only", "address but no default route"])
def test_no_default_route_exits_1_naming_the_variables(
    tmp_path: Path, netns: Netns, setup: str,
) -> None:
    if setup == "loopback only":
        ns = netns.pod(None)
    else:
        ns = netns.pod(f"{SUBNET}.23", default_route=False)
    done = _discover(ns, tmp_path)
    assert done.returncode == 1, done.stderr
    assert ("ascend-node: error: no pod IP: K8S_POD_IP and POD_IP are unset and no interface "
            "holds a default route") in done.stderr
    assert "hint: map K8S_POD_IP from the downward API field status.podIP" in done.stderr


def test_without_pod_uid_the_namespace_keeps_the_incarnation_across_restarts(
    tmp_path: Path, netns: Netns,
) -> None:
    """Container restart = same netns: same incarnation, same table, no new attempt."""
    addresses = [f"{SUBNET}.{30 + i}" for i in range(2)]
    names = [netns.pod(a) for a in addresses]
    nodes = make_nodes(tmp_path, 2, devices=2, timeout=30)
    _in_netns(nodes, names, keep_uid=False)
    first = run(nodes)
    assert codes(first) == [0, 0], explain(first)
    attempt = (tmp_path / "shared" / ".ascend-node" / "t" / "attempt.json").read_bytes()
    slot = json.loads(next((tmp_path / "shared" / ".ascend-node" / "t" / "attempts")
                           .glob("*/node-1.json")).read_text())
    assert slot["incarnation"].startswith("ns-")
    for index in (1, 0):
        again = run([nodes[index]])
        assert codes(again) == [0], explain(again)
        assert table_of(again[0]) == table_of(first[0])
    after = (tmp_path / "shared" / ".ascend-node" / "t" / "attempt.json").read_bytes()
    assert after == attempt


def test_a_new_namespace_is_a_new_incarnation(tmp_path: Path, netns: Netns) -> None:
    one, two = netns.pod(f"{SUBNET}.40"), netns.pod(f"{SUBNET}.40")
    incs = []
    for ns in (one, two):
        done = _discover(ns, tmp_path / ns)
        assert done.returncode == 0, done.stderr
        incs.append(json.loads(done.stdout)["identity"]["incarnation"])
    assert incs[0] != incs[1] and all(i.startswith("ns-") for i in incs)
