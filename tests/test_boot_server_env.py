"""`boot`'s changes to the server's environment (issue 28, items 4-6), end to end: proxies
unset for a multi-node MindIE server, an image's own RANK_TABLE_FILE replaced and named,
both printed with --verbose and recorded in env.json; and a pod whose NPUs multi-node
MindIE cannot use refused before the rendezvous."""

from __future__ import annotations

import json

import pytest

from ascend_node.sim.fake_tools import FakeDevice
from tests.test_boot_e2e import boot_nodes, report, start_all

pytestmark = pytest.mark.multiprocess

PROXY = "http://proxy.example:3128"


def test_proxies_are_unset_and_a_leftover_table_is_named(tmp_path):
    nodes = boot_nodes(tmp_path, http_proxy=PROXY, HTTPS_PROXY=PROXY, no_proxy="localhost",
                       RANK_TABLE_FILE="/home/old/hccl.json")
    for node in nodes:
        node.argv.insert(node.argv.index("boot") + 1, "--verbose")
    procs, outs = start_all(nodes)
    for node, proc, (_out, err) in zip(nodes, procs, outs):
        text = err.decode()
        assert proc.returncode == 0, text
        _pid, env = report(node)
        assert "http_proxy" not in env and "HTTPS_PROXY" not in env
        assert env["no_proxy"] == "localhost"  # not a proxy: kept
        ours = str(node.state_dir / "ranktable.json")
        assert env["RANK_TABLE_FILE"] == ours
        doc = json.loads((node.state_dir / "env.json").read_text())
        assert doc["unset"] == ["http_proxy", "HTTPS_PROXY"]
        assert (f"the image's environment sets RANK_TABLE_FILE=/home/old/hccl.json; the server "
                f"gets this job's table {ours} instead") in doc["notes"]
        assert "server environment: unset http_proxy, HTTPS_PROXY for the server" in text
        script = (node.state_dir / "source_mul_env.sh").read_text()
        assert "unset HTTPS_PROXY\nunset http_proxy\n" in script


def test_a_pod_whose_npus_do_not_start_at_0_is_refused_before_the_rendezvous(tmp_path):
    nodes = boot_nodes(tmp_path)
    bad = nodes[1]
    bad.devices = [FakeDevice(i, f"10.20.2.{i}") for i in range(4, 8)]
    bad.env["ASCEND_VISIBLE_DEVICES"] = "4-7"
    procs, outs = start_all(nodes)
    results = [p.returncode for p in procs]
    errs = [e.decode() for _o, e in outs]
    assert results == [5, 1], errs
    assert ("ascend-node: error: MindIE multi-node cannot use devices 4-7 (from "
            "ASCEND_VISIBLE_DEVICES)") in errs[1]
    assert "request whole nodes" in errs[1]
    assert "MindIE multi-node cannot use devices 4-7" in errs[0]  # node 0 names its cause
    assert not (bad.state_dir / "ranktable.json").exists()
    assert not (tmp_path / "shared" / "ranktable-b.json").exists()


def test_a_hccl_value_cann_refuses_is_this_pods_config_error_before_the_rendezvous(tmp_path):
    from tests.cluster_helpers import make_nodes, run

    nodes = make_nodes(tmp_path, 2, devices=2, timeout=30)
    nodes[1].env["HCCL_BUFFSIZE"] = "0"
    results = run(nodes, timeout=90)
    assert [r.exit_code for r in results] == [5, 1], [r.stderr[-800:] for r in results]
    cause = "HCCL setting CANN refuses: HCCL_BUFFSIZE='0' is not an integer >= 1 (MB)"
    assert f"ascend-node: error: {cause}" in results[1].stderr
    assert cause in results[0].stderr  # node 0 ends the attempt naming it
