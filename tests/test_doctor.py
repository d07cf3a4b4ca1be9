"""Doctor's checks, one function at a time, and `run_doctor` in-process.

Every fault is asserted through the set of non-ok check ids: a check that also fires for
someone else's fault would send the operator to the wrong fix.
"""

from __future__ import annotations

import dataclasses
import hashlib
import ipaddress
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, Callable, Optional

import psutil
import pytest
from hypothesis import given
from hypothesis import strategies as st

from ascend_node import doctor as d
from ascend_node.discover.devices import DeviceIds, parse_device_list
from ascend_node.errors import ConfigError, ToolError, UsageError
from ascend_node.handoff.outputs import StatusDoc, write_status
from ascend_node.ranktable import DeviceEntry, ServerEntry, build_rank_table, render_rank_table
from ascend_node.rendezvous.models import AttemptDoc, OutcomeDoc
from ascend_node.rendezvous.store import Missing, RunPaths, Valid, write_doc
from ascend_node.settings import resolve_settings
from ascend_node.sim.fake_tools import FakeDevice, install_tools, write_node_data
from ascend_node.status import serving_status
from ascend_node.tools import ToolResult

MINDIE_FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "mindie" / "config.json"
LOCAL_CHECKS = (d.check_ips, d.check_unique_ips, d.check_ip_family, d.check_link,
                d.check_health, d.check_tls)


def healthy(n: int = 4, base: str = "10.20.1.") -> list[d.DeviceState]:
    return [d.DeviceState(i, f"{base}{i + 10}", "255.255.255.0", link="UP", health="Success",
                          tls=0) for i in range(n)]


def replace(states: list[d.DeviceState], index: int, **changes: Any) -> list[d.DeviceState]:
    out = list(states)
    out[index] = dataclasses.replace(out[index], **changes)
    return out


def non_ok(results: list[d.CheckResult]) -> dict[str, str]:
    return {r.id: r.status for r in results if r.status in ("warn", "fail")}


# --------------------------------------------------------------------------- report


@pytest.mark.parametrize("statuses, code, state", [
    (["ok", "ok"], 0, "healthy"),
    (["ok", "warn"], 3, "degraded"),
    (["warn", "fail", "ok"], 1, "failed"),
    ([], 0, "healthy"),
    (["ok", "skip", "skip"], 0, "healthy"),
    (["skip", "warn"], 3, "degraded"),
])
def test_exit_code_is_the_worst_check(statuses: list[str], code: int, state: str) -> None:
    checks = tuple(d.CheckResult(f"c.{i}", s, "m") for i, s in enumerate(statuses))  # type: ignore[arg-type]
    report = d.DoctorReport("master 0 (node 0)", checks)
    assert report.exit_code == code
    doc = report.to_json()
    assert doc["status"] == state and doc["exit_code"] == code
    assert "schema_version" not in doc  # the CLI adds it
    assert doc["counts"] == {s: statuses.count(s) for s in ("ok", "skip", "warn", "fail")}


def test_text_has_one_line_per_check_with_cause_and_fix() -> None:
    link = d.check_link(replace(healthy(), 3, link="DOWN"))
    report = d.DoctorReport("worker 0 (node 1)", (d.ok("node.identity", "fine"), link))
    lines = report.format_text().splitlines()
    assert lines[0] == "ascend-node doctor: worker 0 (node 1)"
    assert lines[1].split() == ["ok", "node.identity", "fine"]
    assert lines[2].startswith("fail  device.link   device 3: link status DOWN")
    assert "fix: check the cable, optical module and switch port of device 3" in lines[3]
    assert "`hccn_tool -i 3 -link_stat -g`" in lines[3]
    assert lines[-1] == "failed: 1 fail, 0 warn, 1 ok, 0 skipped (exit 1)"


def test_checks_with_nothing_to_judge_skip_and_say_why() -> None:
    """No NPUs (a CPU-only machine): the device checks ran on nothing, which is not ok."""
    checks = [d.check_ips([]), d.check_unique_ips([]), d.check_ip_family([]),
              d.check_link([]), d.check_health([]), d.check_tls([]),
              d.check_hccn_conf([], {0: {"address": "10.20.1.10"}}, "", Path("/etc/hccn.conf"))]
    assert {c.id: (c.status, c.message) for c in checks} == {
        cid: ("skip", "no devices to check (see device.visible)")
        for cid in ("device.ip", "device.unique_ip", "device.ip_family", "device.link",
                    "device.net_health", "device.tls", "device.hccn_conf")}
    report = d.DoctorReport("n", (d.ok("node.identity", "fine"), *checks))
    assert report.exit_code == 0 and report.problems == {}
    assert report.to_json()["counts"] == {"ok": 1, "skip": 7, "warn": 0, "fail": 0}
    lines = report.format_text().splitlines()
    assert lines[2].split()[:2] == ["skip", "device.ip"]
    assert lines[-1] == "healthy: 0 fail, 0 warn, 1 ok, 7 skipped (exit 0)"


def test_address_checks_skip_when_no_device_has_a_usable_address() -> None:
    states = [dataclasses.replace(s, ip="", netmask="") for s in healthy(2)]
    assert d.check_ips(states).status == "fail"  # the one check that judges the absence
    for check in (d.check_unique_ips, d.check_ip_family):
        result = check(states)
        assert (result.status, result.message) == (
            "skip", "no usable device address to compare (see device.ip)")


def test_peer_comparisons_skip_without_peers() -> None:
    mine = facts(0)
    for check in (d.check_peer_versions, d.check_peer_duplicates, d.check_peer_family,
                  d.check_peer_netmask, d.check_peer_subnet, d.check_peer_tls):
        result = check([mine])
        assert (result.status, result.message) == (
            "skip", "no peer published facts to compare with (see peers.present)"), result
    assert d.check_peer_devices([mine], False).status == "skip"
    assert d.check_peers_present({}, 1, 1.0, 0.0).status == "skip"
    none = d.check_ping([], 0, 0, 1)
    assert (none.status, none.message) == ("skip", "no device pairs to ping (no peer devices)")
    skipped = d.check_ping([], 3, 0, 1)
    assert skipped.status == "skip" and "3 pairs skipped" in skipped.message


def test_several_findings_are_listed_each_on_its_own_line() -> None:
    states = replace(replace(healthy(), 1, link="DOWN"), 2, link="DOWN")
    text = d.DoctorReport("n", (d.check_link(states),)).format_text()
    assert "device.link 2 problems:" in text
    assert "- device 1: link status DOWN" in text and "- device 2: link status DOWN" in text


@given(st.lists(st.integers(min_value=0, max_value=63), min_size=1, max_size=40))
def test_id_list_reads_back_as_the_same_ids(ids: list[int]) -> None:
    assert parse_device_list(d.id_list(ids)) == tuple(sorted(set(ids)))


# --------------------------------------------------------------------------- devices


@pytest.mark.parametrize("fault, expected", [
    (lambda s: s, {}),
    (lambda s: replace(s, 2, ip="", errors={"ip": "`hccn_tool -i 2 -ip -g` printed nothing"}),
     {"device.ip": "fail"}),
    (lambda s: replace(s, 2, ip="-1"), {"device.ip": "fail"}),
    (lambda s: replace(s, 2, ip="169.254.0.9"), {"device.ip": "fail"}),
    (lambda s: replace(s, 2, netmask=""), {"device.ip": "warn"}),
    (lambda s: replace(s, 3, link="DOWN"), {"device.link": "fail"}),
    (lambda s: replace(s, 3, link=None, errors={"link": "`x` did not finish within 10 s"}),
     {"device.link": "warn"}),
    (lambda s: replace(s, 1, health="Socket failed"), {"device.net_health": "fail"}),
    (lambda s: replace(s, 1, health="Init"), {}),
    (lambda s: replace(s, 0, tls=1), {"device.tls": "fail"}),
    (lambda s: replace(s, 0, tls=None, errors={"tls": "?"}), {"device.tls": "warn"}),
    (lambda s: replace(s, 3, ip=s[0].ip), {"device.unique_ip": "fail"}),
    (lambda s: replace(s, 3, ip="2001:db8::3", netmask="64"),
     {"device.ip_family": "fail"}),
], ids=["healthy", "no-ip", "sentinel", "link-local", "no-netmask", "link-down",
        "link-unknown", "net-health", "init-is-fine", "tls-mixed", "tls-unknown",
        "duplicate", "mixed-family"])
def test_each_device_fault_trips_only_its_check(
    fault: Callable[[list[d.DeviceState]], list[d.DeviceState]], expected: dict[str, str]
) -> None:
    states = fault(healthy())
    assert non_ok([check(states) for check in LOCAL_CHECKS]) == expected


def test_no_ip_names_the_device_the_tool_output_and_the_conf_value() -> None:
    states = replace(healthy(), 2, ip="", conf_ip="10.9.9.9",
                     errors={"ip": "`hccn_tool -i 2 -ip -g` printed nothing (exit 0)"})
    result = d.check_ips(states)
    assert result.message == (
        "device 2 has no RoCE IP: `hccn_tool -i 2 -ip -g` printed nothing (exit 0); "
        "/etc/hccn.conf says address_2=10.9.9.9 (HCCL compares the table with the NIC's own "
        "address, EI0014)")
    assert "address_2=/netmask_2= in /etc/hccn.conf" in result.remedy


def test_tls_remedy_is_the_sourced_command() -> None:
    result = d.check_tls(replace(healthy(), 0, tls=1))
    assert result.message == "TLS switch differs between devices: 0 on devices 1-3; 1 on devices 0"
    assert "`hccn_tool -i <id> -tls -s enable 0`" in result.remedy


@pytest.mark.parametrize("conf, expected", [
    (None, "skip"),
    ({0: {"address": "10.20.1.10", "netmask": "255.255.255.0"}}, "ok"),
    ({0: {"address": "10.20.1.99"}}, "warn"),
    ({1: {"address": "10.20.1.11", "netmask": "255.255.0.0"}}, "warn"),
])
def test_hccn_conf_against_the_live_values(conf: Any, expected: str) -> None:
    states = [dataclasses.replace(s, conf_ip=(conf or {}).get(s.device_id, {}).get("address", ""),
                                  conf_netmask=(conf or {}).get(s.device_id, {}).get("netmask", ""))
              for s in healthy()]
    result = d.check_hccn_conf(states, conf, "absent", Path("/etc/hccn.conf"))
    assert result.status == expected
    if expected == "warn":
        assert result.message.startswith(f"device {next(iter(conf))}: /etc/hccn.conf has ")


@pytest.mark.parametrize("used, env_ids, dev_ids, status, message", [
    (DeviceIds((0, 1, 2, 3), "ASCEND_VISIBLE_DEVICES"), (0, 1, 2, 3), (), "ok",
     "4 devices 0-3 (from ASCEND_VISIBLE_DEVICES); no /dev/davinciN to compare with"),
    (DeviceIds((0, 1, 2, 3), "ASCEND_VISIBLE_DEVICES"), (0, 1, 2, 3), (0, 1, 2, 3), "ok",
     "4 devices 0-3 (from ASCEND_VISIBLE_DEVICES); /dev/davinci0-3"),
    (DeviceIds(tuple(range(8)), "ASCEND_VISIBLE_DEVICES"), tuple(range(8)), (0, 1, 2, 3),
     "fail", "devices 4-7 (from ASCEND_VISIBLE_DEVICES) have no /dev/davinciN"),
    (DeviceIds((0, 1, 2, 3), "--devices"), (0, 1), (), "fail",
     "devices 2,3 (from --devices) are not in ASCEND_VISIBLE_DEVICES=0,1"),
    (DeviceIds((0, 1), "ASCEND_VISIBLE_DEVICES"), (0, 1), tuple(range(8)), "warn",
     "/dev also has davinci2-7, which ASCEND_VISIBLE_DEVICES=0,1 does not list (a privileged "
     "container sees every NPU of the host)"),
    (None, None, (), "fail", "no NPU visible"),
])
def test_visible_devices(used: Optional[DeviceIds], env_ids: Any, dev_ids: Any, status: str,
                         message: str) -> None:
    result = d.check_visible(used, "no NPU visible", env_ids, dev_ids)
    assert (result.status, result.message) == (status, message)


def test_device_states_from_the_fake_tool_and_a_real_capture(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, hccn_capture: Any
) -> None:
    hccn, _ = install_tools(tmp_path / "bin")
    data = tmp_path / "data"
    write_node_data(data, [FakeDevice(0, "10.0.0.1"), FakeDevice(1, None, link="DOWN", tls=1)])
    # Device 1 answers -net_health exactly as the captured real device did.
    (data / "1.net_health").write_text(hccn_capture("kg-npu_info.txt")[
        "hccn_tool -i 0 -net_health -g"])
    monkeypatch.setenv("ASCEND_NODE_SIM_DATA", str(data))
    states = d.query_device_states([0, 1], str(hccn), 10.0, {1: {"address": "10.0.0.2"}})
    assert states[0] == d.DeviceState(0, "10.0.0.1", "255.255.255.0", link="UP",
                                      health="Success", tls=0)
    one = states[1]
    assert (one.ip, one.conf_ip, one.link, one.health, one.tls) == (
        "", "10.0.0.2", "DOWN", "Socket failed", 1)
    assert one.errors["ip"].startswith(f"`{hccn} -i 1 -ip -g` printed nothing")


def test_a_failing_tool_call_is_reported_for_its_device_only() -> None:
    def runner(argv: list[str], timeout: float) -> ToolResult:
        if argv[2] == "1" and argv[3] == "-link":
            raise ToolError(f"`{' '.join(argv)}` did not finish within {timeout:g} s")
        text = {"-ip": "ipaddr:10.0.0.{i}\nnetmask:255.255.255.0\n",
                "-link": "link status: UP\n", "-net_health": "net health status: Success\n",
                "-tls": "dev_id:{i}, tls switch[0](0:disable, 1:enable)\n"}[argv[3]]
        return ToolResult(tuple(argv), 0, text.format(i=argv[2]), "")

    states = d.query_device_states([0, 1, 2], "hccn_tool", 2.0, {}, runner)
    assert [s.link for s in states] == ["UP", None, "UP"]
    assert states[1].errors == {"link": "`hccn_tool -i 1 -link -g` did not finish within 2 s"}
    assert [s.ip for s in states] == ["10.0.0.0", "10.0.0.1", "10.0.0.2"]
    assert non_ok([c(states) for c in LOCAL_CHECKS]) == {"device.link": "warn"}


# --------------------------------------------------------------------------- rank table


def make_table(pod_ips: list[str], devs: int = 4) -> str:
    servers = [ServerEntry(g, ip, f"10.100.0.{g + 10}",
                           tuple(DeviceEntry(i, f"10.20.{g}.{i + 10}") for i in range(devs)))
               for g, ip in enumerate(pod_ips)]
    return render_rank_table(build_rank_table(servers))


def table_checks(path: Optional[Path], pod_ip: str, states: list[d.DeviceState],
                 paths: Optional[RunPaths] = None, environ: Optional[dict[str, str]] = None,
                 target: str = "mindie") -> dict[str, str]:
    env = environ if environ is not None else (
        {"RANK_TABLE_FILE": str(path)} if path is not None else {})
    where = d.table_in_use(env, Path("/nonexistent-state"))
    problems = d.validate_file(where.path, target, os.getuid()) if where.path else []
    data = where.path.read_bytes() if where.path and where.path.is_file() else None
    table = json.loads(data) if data else None
    results = [d.check_table_file(where, problems),
               d.check_table_content(where, problems, target, data is not None),
               d.check_table_member(table, pod_ip, states),
               d.check_table_stale(where, data, d.read_run_state(paths),
                                   paths.shared_table if paths else None)]
    return non_ok(results)


@pytest.fixture
def table_file(tmp_path: Path) -> Path:
    path = tmp_path / "ranktable.json"
    path.write_text(make_table(["10.200.0.10", "10.200.0.11"]))
    path.chmod(0o640)
    return path


def node0() -> list[d.DeviceState]:
    return healthy(4, base="10.20.0.")


def test_a_good_table_passes_every_table_check(table_file: Path) -> None:
    assert table_checks(table_file, "10.200.0.10", node0()) == {}


def test_no_table_yet_is_not_a_problem() -> None:
    assert table_checks(None, "10.200.0.10", node0()) == {}


def test_rank_table_file_named_but_missing_fails_the_file_check_only(tmp_path: Path) -> None:
    got = table_checks(tmp_path / "nope.json", "10.200.0.10", node0())
    assert got == {"ranktable.file": "fail"}


@pytest.mark.parametrize("mode", [0o644, 0o660, 0o666])
def test_mode_above_0640_fails_only_the_file_check(table_file: Path, mode: int) -> None:
    table_file.chmod(mode)
    assert table_checks(table_file, "10.200.0.10", node0()) == {"ranktable.file": "fail"}
    where = d.table_in_use({"RANK_TABLE_FILE": str(table_file)}, Path("/x"))
    result = d.check_table_file(where, d.validate_file(table_file, "mindie", os.getuid()))
    assert f"has mode {mode:04o}" in result.message
    assert result.remedy.startswith(f"chmod 640 {table_file}")


def test_for_hccl_a_0644_table_passes_the_file_check(table_file: Path) -> None:
    """Training (no multi-node MindIE config): HCCL reads the table; MindIE's 0640 rule
    is not HCCL's, so MindCluster's 0644 hccl.json is fine."""
    table_file.chmod(0o644)
    assert table_checks(table_file, "10.200.0.10", node0(), target="hccl") == {}


def test_symlink_fails_the_file_check_and_the_content_is_still_judged(table_file: Path) -> None:
    link = table_file.with_name("link.json")
    link.symlink_to(table_file)
    assert table_checks(link, "10.200.0.10", node0()) == {"ranktable.file": "fail"}


def test_foreign_owner_fails_the_file_check(table_file: Path) -> None:
    os.chown(table_file, 4321, 4321)  # the tests run as root, like an init container
    assert table_checks(table_file, "10.200.0.10", node0()) == {"ranktable.file": "fail"}


def test_invalid_content_fails_only_the_content_check(tmp_path: Path) -> None:
    path = tmp_path / "t.json"
    doc = json.loads(make_table(["10.200.0.10", "10.200.0.11"]))
    doc["status"] = "initializing"
    path.write_text(json.dumps(doc))
    path.chmod(0o600)
    assert table_checks(path, "10.200.0.10", node0()) == {"ranktable.valid": "fail"}


def test_table_without_this_pod_fails_the_member_check(table_file: Path) -> None:
    assert table_checks(table_file, "10.200.0.99", node0()) == {"ranktable.member": "fail"}


def test_table_with_other_device_ips_fails_the_member_check(table_file: Path) -> None:
    states = replace(node0(), 1, ip="10.20.0.99")
    where = d.table_in_use({"RANK_TABLE_FILE": str(table_file)}, Path("/x"))
    assert where.source == "RANK_TABLE_FILE"
    result = d.check_table_member(json.loads(table_file.read_text()), "10.200.0.10", states)
    assert result.status == "fail"
    assert result.message == ("device 1: the table says 10.20.0.11, the NIC has 10.20.0.99 "
                              "(HCCL EI0014)")


def test_state_dir_copy_is_used_when_rank_table_file_is_unset(tmp_path: Path) -> None:
    assert d.table_in_use({}, tmp_path).path is None
    (tmp_path / "ranktable.json").write_text("{}")
    assert d.table_in_use({}, tmp_path) == d.TableInUse(tmp_path / "ranktable.json",
                                                        "state dir", False)


def run_paths(tmp_path: Path, table: Optional[str], outcome: Optional[str]) -> RunPaths:
    """A run whose shared table is `table` and whose current attempt ended in `outcome`
    ("table:<text>", "abort", or None for still assembling)."""
    shared = tmp_path / "shared"
    shared.mkdir(exist_ok=True)
    paths = RunPaths(shared, "r1")
    if table is not None:
        paths.shared_table.write_text(table)
    write_doc(paths.attempt_file, AttemptDoc(run_id="r1", attempt_id="a2", opened_by="x",
                                             node_count=2, master_count=1), shared)
    if outcome == "abort":
        write_doc(paths.outcome("a2"), OutcomeDoc(run_id="r1", attempt_id="a2", result="abort",
                                                  reason="node 1 has no IP"), shared)
    elif outcome is not None:
        text = outcome.split(":", 1)[1]
        write_doc(paths.outcome("a2"), OutcomeDoc(
            run_id="r1", attempt_id="a2", result="table", ranktable_text=text,
            ranktable_sha256=hashlib.sha256(text.encode()).hexdigest()), shared)
    return paths


OLD = make_table(["10.200.0.10", "10.200.0.11"])
NEW = make_table(["10.200.0.10", "10.200.0.12"])


@pytest.mark.parametrize("shared, outcome, expected, words", [
    (OLD, "table:" + OLD, {}, "is the table of attempt a2"),
    (NEW, "table:" + NEW, {"ranktable.stale": "fail"}, "differs from the run's shared table"),
    (None, "table:" + NEW, {"ranktable.stale": "fail"},
     "is not the table of the current attempt a2"),
    (OLD, None, {"ranktable.stale": "warn"}, "attempt a2 of the run is still assembling"),
    (OLD, "abort", {"ranktable.stale": "fail"}, "a2 was aborted (node 1 has no IP)"),
])
def test_stale_table(tmp_path: Path, table_file: Path, shared: Optional[str],
                     outcome: Optional[str], expected: dict[str, str], words: str) -> None:
    paths = run_paths(tmp_path, shared, outcome)
    assert table_checks(table_file, "10.200.0.10", node0(), paths) == expected
    data = table_file.read_bytes()
    where = d.table_in_use({"RANK_TABLE_FILE": str(table_file)}, Path("/x"))
    result = d.check_table_stale(where, data, d.read_run_state(paths), paths.shared_table)
    assert words in result.message


# --------------------------------------------------------------------------- MindIE


def mindie_state(tmp_path: Path, edit: Callable[[dict[str, Any]], None] = lambda c: None,
                 mode: int = 0o640) -> d.MindieState:
    config = json.loads(MINDIE_FIXTURE.read_text())
    edit(config)
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    path.chmod(mode)
    return d.read_mindie_state({"MIES_CONFIG_JSON_PATH": str(path)})


def multi(config: dict[str, Any]) -> None:
    config["BackendConfig"]["multiNodesInferEnabled"] = True


def eight(config: dict[str, Any]) -> None:
    multi(config)
    config["BackendConfig"]["npuDeviceIds"] = [list(range(8))]
    config["BackendConfig"]["ModelDeployConfig"]["ModelConfig"][0]["worldSize"] = 8


def mindie_checks(m: d.MindieState, servers: Optional[int], nodes: Optional[int],
                  table: bool, local: int) -> dict[str, str]:
    return non_ok([d.check_mindie_config(m, os.getuid()),
                   d.check_mindie_multinode(m, servers, nodes, table),
                   d.check_mindie_devices(m, local)])


def test_no_mindie_config_is_not_a_mindie_container(tmp_path: Path) -> None:
    m = d.read_mindie_state({"MIES_INSTALL_PATH": str(tmp_path)})
    assert mindie_checks(m, 2, 2, True, 8) == {}
    result = d.check_mindie_config(m, 0)
    assert result.status == "skip" and result.message.startswith("no MindIE config at ")


def test_explicit_mindie_config_that_is_missing_fails(tmp_path: Path) -> None:
    m = d.read_mindie_state({"MIES_CONFIG_JSON_PATH": str(tmp_path / "nope.json")})
    assert mindie_checks(m, 2, 2, True, 8) == {"mindie.config": "fail"}


@pytest.mark.parametrize("edit, servers, nodes, table, local, expected", [
    (eight, 2, 2, True, 8, {}),
    (lambda c: None, 1, 1, False, 4, {}),  # MindIE's shipped file on a 4-NPU single node
    (lambda c: None, 2, 2, True, 4, {"mindie.multinode": "fail"}),
    (multi, 1, 1, True, 4, {"mindie.multinode": "fail"}),
    (multi, None, 2, False, 4, {"mindie.multinode": "fail"}),  # multi-node but no table
    (multi, 2, 2, True, 8, {"mindie.devices": "fail"}),  # npuDeviceIds [[0..3]] on 8 NPUs
    (lambda c: (eight(c), c["BackendConfig"]["ModelDeployConfig"]["ModelConfig"][0].update(
        worldSize=4)), 2, 2, True, 8, {"mindie.devices": "fail"}),
    (lambda c: (eight(c), c["BackendConfig"].update(modelInstanceNumber=2)), 2, 2, True, 8,
     {"mindie.devices": "fail"}),
], ids=["consistent", "single-node", "flag-off", "flag-on-one-node", "no-table",
        "ids-vs-local", "worldsize", "instances"])
def test_mindie_config_against_the_table(
    tmp_path: Path, edit: Callable[[dict[str, Any]], None], servers: Optional[int],
    nodes: Optional[int], table: bool, local: int, expected: dict[str, str],
) -> None:
    assert mindie_checks(mindie_state(tmp_path, edit), servers, nodes, table, local) == expected


def test_mindie_config_mode_0644_fails_the_config_check(tmp_path: Path) -> None:
    m = mindie_state(tmp_path, eight, mode=0o644)
    assert mindie_checks(m, 2, 2, True, 8) == {"mindie.config": "fail"}
    assert d.check_mindie_config(m, os.getuid()).remedy == f"chmod 640 {m.path}"


def test_mindie_startup_on_the_shipped_config_names_https_and_the_weights(
        tmp_path: Path) -> None:
    m = mindie_state(tmp_path)
    result = d.check_mindie_startup(m, {"MIES_INSTALL_PATH": str(tmp_path / "mindie")},
                                    os.getuid())
    assert result.status == "fail"
    assert result.findings[0].cause == (
        f"ServerConfig.tlsCert file {tmp_path}/mindie/security/certs/server.pem does not exist")
    assert len([f for f in result.findings if "Tls" in f.cause or "tls" in f.cause]) == 16
    assert "modelWeightPath" in result.findings[-1].cause
    assert "--no-https" in result.remedy and "MODEL_PATH" in result.remedy


def test_mindie_startup_passes_what_boot_would_exec(tmp_path: Path) -> None:
    weights = tmp_path / "weights"
    weights.mkdir()
    (weights / "config.json").write_text("{}")

    def plain(config: dict[str, Any]) -> None:
        config["ServerConfig"]["httpsEnabled"] = False
        config["BackendConfig"]["ModelDeployConfig"]["ModelConfig"][0]["modelWeightPath"] = (
            str(weights))

    m = mindie_state(tmp_path, plain)
    result = d.check_mindie_startup(m, {}, os.getuid())
    assert result.status == "ok", result.message
    assert "passes MindIE's start-up rules" in result.message
    # Not a MindIE container: nothing judged is a skip, never an ok (doctor.md; issue 27).
    assert d.check_mindie_startup(d.read_mindie_state({"MIES_INSTALL_PATH": str(tmp_path)}),
                                  {}, 0).status == "skip"


def test_mindie_startup_sees_the_agents_environment(tmp_path: Path) -> None:
    # What the server gets: the agent's env.json (MIES_CONTAINER_IP, ...) over this shell's.
    from ascend_node.doctor.runner import _server_env
    from ascend_node.handoff.outputs import write_env

    write_env(tmp_path, {"MIES_CONTAINER_IP": "10.0.0.2"}, None)
    env = _server_env({"MIES_INSTALL_PATH": "/x"}, tmp_path)
    assert env == {"MIES_INSTALL_PATH": "/x", "MIES_CONTAINER_IP": "10.0.0.2"}
    assert _server_env({"A": "1"}, tmp_path / "none") == {"A": "1"}


# --------------------------------------------------------------------------- processes


def fake_proc(root: Path, pid: int, ppid: int, comm: str, fds: dict[str, str]) -> None:
    base = root / str(pid)
    (base / "fd").mkdir(parents=True)
    (base / "comm").write_text(comm + "\n")
    (base / "stat").write_text(f"{pid} ({comm} x) S {ppid} {pid} {pid} 0 -1\n")
    for fd, target in fds.items():
        os.symlink(target, base / "fd" / fd)


@pytest.fixture
def proc(tmp_path: Path) -> Path:
    root = tmp_path / "proc"
    fake_proc(root, 1, 0, "tini", {"0": "/dev/null"})
    fake_proc(root, 40, 1, "mindieservice_d", {"3": "/dev/davinci0", "4": "/dev/davinci_manager"})
    fake_proc(root, 41, 40, "python3", {"5": "/dev/davinci1", "6": "/dev/davinci2"})
    fake_proc(root, 77, 1, "python3 old", {"9": "/dev/davinci3", "10": "socket:[123]"})
    (root / "self").mkdir()
    (root / "sys").mkdir()
    return root


def test_finds_every_process_holding_a_davinci_device(proc: Path) -> None:
    holders, hidden = d.find_npu_holders(str(proc))
    assert holders == [d.Holder(40, "mindieservice_d", (0,)), d.Holder(41, "python3", (1, 2)),
                       d.Holder(77, "python3 old", (3,))]
    assert hidden == 0


def test_without_a_running_server_every_holder_is_reported(proc: Path) -> None:
    holders, hidden = d.find_npu_holders(str(proc))
    result = d.check_npu_holders(holders, hidden, None, str(proc))
    assert result.status == "warn"
    assert [f.cause for f in result.findings] == [
        "pid 40 (mindieservice_d) holds /dev/davinci0", "pid 41 (python3) holds /dev/davinci1,2",
        "pid 77 (python3 old) holds /dev/davinci3"]
    assert "`kill 40`" in result.findings[0].remedy


def test_the_server_boot_started_and_its_children_are_expected(proc: Path, tmp_path: Path
                                                               ) -> None:
    state = tmp_path / "state"
    write_status(state, StatusDoc(state="done", phase="exec", command="boot", pid=40))
    holders, hidden = d.find_npu_holders(str(proc))
    # pid 40 lives in the fake /proc only: vouch for it as the real /proc would
    server = d._server_pid(state, runs=lambda doc: True)
    result = d.check_npu_holders(holders, hidden, server, str(proc))
    assert result.status == "warn"
    assert [f.cause for f in result.findings] == ["pid 77 (python3 old) holds /dev/davinci3"]


def test_a_finished_ranktable_run_does_not_vouch_for_anyone(tmp_path: Path) -> None:
    write_status(tmp_path, StatusDoc(state="done", phase="ranktable", command="ranktable",
                                     pid=40))
    assert d._server_pid(tmp_path) is None


def test_processes_that_cannot_be_inspected_are_counted(
    proc: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = os.listdir

    def listdir(path: Any) -> list[str]:
        if str(path).endswith("/77/fd"):
            raise PermissionError(13, "Permission denied")
        return real(path)

    monkeypatch.setattr(d.os, "listdir", listdir)
    holders, hidden = d.find_npu_holders(str(proc))
    assert [h.pid for h in holders] == [40, 41] and hidden == 1
    write = d.check_npu_holders([], hidden, None, str(proc))
    assert write.message == "no process holds an NPU; 1 processes not inspectable (permissions)"


# --------------------------------------------------------------------------- peers


def facts(g: int, n: int = 2, devs: int = 4, **dev_changes: Any) -> d.DoctorFacts:
    return d.DoctorFacts(
        run_id="r1", global_index=g, node_count=n, master_count=1, name=f"node {g}",
        pod_ip=f"10.200.0.{10 + g}", agent_version="0.1.0", published_at=time.time(),
        devices=tuple(d.FactDevice(**{"device_id": i,
                                      "ip": str(ipaddress.ip_address("10.20.1.0") + g * 16 + i),
                                      "netmask": "255.255.255.0", "link": "UP",
                                      "health": "Success", "tls": 0, **dev_changes})
                      for i in range(devs)))


def peer_checks(everyone: list[d.DoctorFacts], allow_uneven: bool = False) -> dict[str, str]:
    return non_ok([d.check_peer_devices(everyone, allow_uneven), d.check_peer_versions(everyone),
                   d.check_peer_duplicates(everyone), d.check_peer_family(everyone),
                   d.check_peer_netmask(everyone), d.check_peer_subnet(everyone),
                   d.check_peer_tls(everyone)])


def with_device(f: d.DoctorFacts, index: int, **changes: Any) -> d.DoctorFacts:
    devices = list(f.devices)
    devices[index] = devices[index].model_copy(update=changes)
    return f.model_copy(update={"devices": tuple(devices)})


@pytest.mark.parametrize("nodes, expected", [
    ([facts(0), facts(1)], {}),
    ([facts(0), with_device(facts(1), 2, ip="10.20.1.2")], {"peers.duplicate_ip": "fail"}),
    ([facts(0), facts(1, netmask="255.255.0.0")], {"peers.netmask": "warn"}),
    ([facts(0), facts(1, tls=1)], {"peers.tls": "fail"}),
    ([facts(0), facts(1, devs=3)], {"peers.devices": "fail"}),
    ([facts(0), facts(1).model_copy(update={"agent_version": "0.2.0"})],
     {"peers.version": "warn"}),
    ([facts(0), with_device(facts(1), 0, ip="10.30.1.16")], {"peers.subnet": "warn"}),
    ([facts(0), with_device(facts(1), 0, ip="2001:db8::5", netmask="64")],
     {"peers.ip_family": "fail"}),
], ids=["healthy", "duplicate", "netmask", "tls", "count", "version", "subnet", "family"])
def test_each_cluster_fault_trips_only_its_check(nodes: list[d.DoctorFacts],
                                                 expected: dict[str, str]) -> None:
    assert peer_checks(nodes) == expected


def test_uneven_counts_are_fine_when_allowed() -> None:
    assert peer_checks([facts(0), facts(1, devs=3)], allow_uneven=True) == {}


def test_cluster_messages_name_the_nodes() -> None:
    tls = d.check_peer_tls([facts(0), facts(1, tls=1), facts(2)])
    assert tls.message == "TLS switch differs between nodes: 0 on node 0, node 2; 1 on node 1"
    dup = d.check_peer_duplicates([facts(0), with_device(facts(1), 2, ip="10.20.1.2")])
    assert dup.message == "10.20.1.2 is used by node 0 device 2 and node 1 device 2"
    mask = d.check_peer_netmask([facts(0), facts(1, netmask="255.255.0.0")])
    assert mask.message == ("netmasks differ for device slot(s) 0-3: 255.255.255.0 on node 0; "
                            "255.255.0.0 on node 1")


def test_ping_pairs_use_same_slot_devices_and_skip_known_problems() -> None:
    mine = with_device(facts(0), 1, link="DOWN")
    peers = [with_device(facts(1), 2, ip=""), facts(2, devs=2)]
    pairs, skipped, sampled_out = d.ping_pairs(mine, peers)
    assert [(p.device_id, p.peer, p.peer_device, p.address) for p in pairs] == [
        (0, 1, 0, "10.20.1.16"), (3, 1, 3, "10.20.1.19"), (0, 2, 0, "10.20.1.32")]
    assert (skipped, sampled_out) == (3, 0)  # local 1 twice, peer 1's device 2


def test_large_clusters_are_sampled_deterministically() -> None:
    everyone = [facts(g, n=64, devs=16) for g in range(64)]
    mine, peers = everyone[5], everyone[:5] + everyone[6:]
    first, skipped, out = d.ping_pairs(mine, peers)
    again, _, _ = d.ping_pairs(mine, list(reversed(peers)))
    assert first == again and len(first) == d.PING_PAIR_LIMIT
    assert (skipped, out) == (0, 63 * 16 - 64)
    assert all(p.device_id == p.peer_device for p in first)
    assert len({p.peer for p in first}) > 20 and len({p.device_id for p in first}) > 8


def test_ping_argv_per_family() -> None:
    v4 = d.PingPair(3, 1, 3, "10.0.0.9")
    v6 = d.PingPair(0, 1, 0, "2001:db8::9")
    assert d.ping_argv("hccn_tool", v4) == ["hccn_tool", "-i", "3", "-ping", "-g", "address",
                                            "10.0.0.9"]
    assert d.ping_argv("hccn_tool", v6) == ["hccn_tool", "-i", "0", "-ping", "-inet6", "-g",
                                            "ipv6_address", "2001:db8::9"]


@pytest.mark.parametrize("text, expected", [
    ("device 3 PING 10.0.0.9\nrecv seq=0,time=1.418000ms\n"
     "3 packets transmitted, 3 received, 0.00% packet loss\n", (3, 3, 0.0)),
    ("recv time out seq=0\n3 packets transmitted, 0 received, 100.00% packet loss\n",
     (3, 0, 100.0)),
    ("3 packets transmitted, 2 received, 33.33% packet loss", (3, 2, 33.33)),
    ("Error: invalid device id", None),
])
def test_parse_ping(text: str, expected: Any) -> None:
    assert d.parse_ping(text) == expected


@given(st.text())
def test_parse_ping_never_raises(text: str) -> None:
    d.parse_ping(text)


def test_ping_verdicts() -> None:
    pair = d.PingPair(0, 1, 0, "10.0.0.9")

    def res(out: str) -> ToolResult:
        return ToolResult(("hccn_tool",), 0, out, "")

    lost = res("3 packets transmitted, 0 received, 100.00% packet loss\n")
    some = res("3 packets transmitted, 2 received, 33.33% packet loss\n")
    good = res("3 packets transmitted, 3 received, 0.00% packet loss\n")
    assert d.check_ping([(pair, good)], 0, 0, 1).status == "ok"
    assert d.check_ping([(pair, some)], 0, 0, 1).status == "warn"
    fail = d.check_ping([(pair, lost), (pair, good)], 2, 5, 1)
    assert fail.status == "fail"
    assert fail.message == ("device 0 -> worker 0 (node 1) device 0 (10.0.0.9): unreachable "
                            "(3 sent, 0 received, 100.00% loss)")
    timeout = d.check_ping([(pair, ToolError("`x` did not finish within 10 s"))], 0, 0, 1)
    assert timeout.status == "warn"
    assert d.check_ping([], 2, 5, 1).message == (
        "no device pairs to ping (2 pairs skipped (a device without IP or link; see its check); "
        "5 more pairs not sampled)")


def test_pings_run_concurrently_with_bounded_workers() -> None:
    active, peak, lock = [0], [0], threading.Lock()

    def runner(argv: list[str], timeout: float) -> ToolResult:
        with lock:
            active[0] += 1
            peak[0] = max(peak[0], active[0])
        time.sleep(0.05)
        with lock:
            active[0] -= 1
        return ToolResult(tuple(argv), 0, "3 packets transmitted, 3 received, 0.00% packet loss",
                          "")

    pairs = [d.PingPair(i % 16, i // 16 + 1, i % 16, f"10.0.{i}.1") for i in range(40)]
    started = time.monotonic()
    out = d.run_pings(pairs, "hccn_tool", 1.0, runner, workers=8)
    assert [p for p, _ in out] == pairs
    assert peak[0] == 8
    assert time.monotonic() - started < 40 * 0.05 / 2


def test_collect_waits_for_a_late_peer_and_gives_up_on_a_missing_one(tmp_path: Path) -> None:
    paths = RunPaths(tmp_path, "r1")
    late = facts(1, n=3)

    def publish() -> None:
        time.sleep(0.3)
        write_doc(d.facts_path(paths, 1), late, tmp_path)

    thread = threading.Thread(target=publish)
    thread.start()
    started = time.monotonic()
    reads = d.collect_peer_facts(paths, 0, 3, wait=1.0, fresh_after=0.0)
    thread.join()
    assert 0.9 <= time.monotonic() - started < 2.0
    assert isinstance(reads[1], Valid) and reads[1].doc == late
    assert isinstance(reads[2], Missing)
    present = d.check_peers_present(reads, 1, 1.0, 0.0)
    assert (present.status, present.message) == ("warn", "worker 1 (node 2) published no facts "
                                                 "within 1 s")


def test_old_facts_are_used_but_reported(tmp_path: Path) -> None:
    paths = RunPaths(tmp_path, "r1")
    old = facts(1).model_copy(update={"published_at": time.time() - 3600})
    write_doc(d.facts_path(paths, 1), old, tmp_path)
    reads = d.collect_peer_facts(paths, 0, 2, wait=0.3, fresh_after=time.time() - 600)
    assert isinstance(reads[1], Valid)
    present = d.check_peers_present(reads, 1, 0.3, time.time() - 600)
    assert present.status == "warn" and "worker 0 (node 1): facts are 36" in present.message


def test_foreign_facts_are_reported_not_trusted(tmp_path: Path) -> None:
    paths = RunPaths(tmp_path, "r1")
    path = d.facts_path(paths, 1)
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps({**facts(1).model_dump(mode="json"), "schema_version": 2}))
    reads = d.collect_peer_facts(paths, 0, 2, wait=0.2, fresh_after=0.0)
    present = d.check_peers_present(reads, 1, 0.2, 0.0)
    assert present.status == "warn" and "schema_version 2" in present.message


# --------------------------------------------------------------------------- run_doctor


@pytest.fixture
def node_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    hccn, npu_smi = install_tools(tmp_path / "bin")
    data = tmp_path / "data"
    write_node_data(data, [FakeDevice(i, f"10.20.1.{i}") for i in range(4)])
    monkeypatch.setenv("ASCEND_NODE_SIM_DATA", str(data))
    (tmp_path / "shared").mkdir()
    return {"ROLE": "master", "VC_TASK_INDEX": "0", "VC_MASTER_NUM": "1", "VC_WORKER_NUM": "0",
            "K8S_POD_IP": "10.200.0.10", "POD_UID": "u1", "ASCEND_VISIBLE_DEVICES": "0-3",
            "ASCEND_NODE_HCCN_TOOL": str(hccn), "ASCEND_NODE_NPU_SMI": str(npu_smi),
            "ASCEND_NODE_STATE_DIR": str(tmp_path / "state"),
            "ASCEND_NODE_HCCN_CONF": str(tmp_path / "hccn.conf"),
            "MIES_INSTALL_PATH": str(tmp_path / "mindie"),
            "ASCEND_NODE_SHARED_DIR": str(tmp_path / "shared"), "ASCEND_NODE_RUN_ID": "r1"}


def doctor(env: dict[str, str], tmp_path: Path, peers: bool = False, **flags: Any
           ) -> d.DoctorReport:
    settings = resolve_settings(flags, env)
    proc = tmp_path / "proc"
    (proc / "self").mkdir(parents=True, exist_ok=True)
    mountinfo = proc / "self" / "mountinfo"
    if not mountinfo.exists():
        mountinfo.write_text(f"30 1 8:1 / / rw,relatime - ext4 /dev/sda1 rw\n"
                             f"31 30 0:40 / {tmp_path} rw - tmpfs tmpfs rw\n")
    return d.run_doctor(settings, env, peers=peers, peer_wait=0.5, proc_root=str(proc),
                        dev_dir=str(tmp_path / "dev"))


def tree(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*")
            if p.is_file() and "proc" not in p.parts}


def test_healthy_single_node_is_exit_0_and_writes_nothing(node_env: dict[str, str],
                                                          tmp_path: Path) -> None:
    before = tree(tmp_path)
    report = doctor(node_env, tmp_path)
    assert report.problems == {} and report.exit_code == 0
    assert [c.id for c in report.checks] == [
        "node.identity", "table.source", "volume.mount", "volume.probe", "volume.cost",
        "volume.writers",
        "device.visible",
        "device.ip", "device.unique_ip", "device.ip_family", "device.link", "device.net_health",
        "device.tls", "device.hccn_conf", "ranktable.file",
        "ranktable.valid", "ranktable.member", "ranktable.stale", "mindie.config",
        "mindie.multinode", "mindie.devices", "mindie.startup", "process.npu_holders",
        "npu.processes", "hccl.ports", "hccl.settings", "software.versions", "server.env"]
    assert tree(tmp_path) == before


PROC_TCP = (
    "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  "
    "timeout inode\n"
    "   0: 00000000:EA60 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0 "
    "       0 1001 1\n")


def test_issue_28_faults_each_land_on_their_check(node_env: dict[str, str],
                                                  tmp_path: Path) -> None:
    # A held NPU (npu-smi info's table), a listener on HCCL's first port (a fake /proc of
    # this namespace) and a value CANN refuses: each lands on its check, naming it.
    data = Path(os.environ["ASCEND_NODE_SIM_DATA"])
    devices = [FakeDevice(i, f"10.20.1.{i}") for i in range(4)]
    devices[2].holders.append((4242, "python3", 512))
    write_node_data(data, devices)
    proc = tmp_path / "proc"
    (proc / "net").mkdir(parents=True)
    (proc / "net" / "tcp").write_text(PROC_TCP)
    ipv4 = proc / "sys" / "net" / "ipv4"
    ipv4.mkdir(parents=True)
    (ipv4 / "ip_local_reserved_ports").write_text("60000-60031\n")
    (ipv4 / "ip_local_port_range").write_text("32768\t60999\n")
    env = {**node_env, "HCCL_CONNECT_TIMEOUT": "60"}
    report = doctor(env, tmp_path)
    assert {k: v for k, v in report.problems.items()
            if k in ("npu.processes", "hccl.ports", "hccl.settings")} == {
        "npu.processes": "warn", "hccl.ports": "fail", "hccl.settings": "fail"}
    assert "device 2: PID 4242 (python3, 512 MB)" in report.check("npu.processes").message
    assert ("port(s) 60000 of HCCL's range 60000-60031 (from default) already have a "
            "listener") in report.check("hccl.ports").message
    assert "HCCL_CONNECT_TIMEOUT='60'" in report.check("hccl.settings").message


def _ended_pid() -> int:
    """The pid of a process that has ended (and been reaped)."""
    done = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)
    return int(done.stdout)


def test_a_recorded_server_pid_that_is_gone_vouches_for_nothing(
        node_env: dict[str, str], tmp_path: Path) -> None:
    # Issue 36: a kept simulation's status.json names a server that has ended. doctor said
    # "npu.processes ok: the server (pid N) runs" and turned a real HCCL listener into a
    # warning, while `status --serving` on the same state said the server is gone.
    data = Path(os.environ["ASCEND_NODE_SIM_DATA"])
    devices = [FakeDevice(i, f"10.20.1.{i}") for i in range(4)]
    devices[2].holders.append((4242, "python3", 512))
    write_node_data(data, devices)
    proc = tmp_path / "proc"
    (proc / "net").mkdir(parents=True)
    (proc / "net" / "tcp").write_text(PROC_TCP)
    ipv4 = proc / "sys" / "net" / "ipv4"
    ipv4.mkdir(parents=True)
    (ipv4 / "ip_local_reserved_ports").write_text("60000-60031\n")
    (ipv4 / "ip_local_port_range").write_text("32768\t60999\n")
    gone = _ended_pid()
    state = Path(node_env["ASCEND_NODE_STATE_DIR"])
    write_status(state, StatusDoc(state="done", phase="exec", command="boot", pid=gone))
    assert serving_status(state, {}).detail == f"the server boot exec'd (pid {gone}) is gone"
    report = doctor(node_env, tmp_path)
    processes = report.check("npu.processes")
    assert processes.status == "warn", processes.message
    assert f"pid {gone}" not in processes.message
    assert "device 2: PID 4242 (python3, 512 MB)" in processes.message
    assert report.check("hccl.ports").status == "fail", report.check("hccl.ports").message


def test_a_recorded_pid_now_another_process_s_vouches_for_nothing(tmp_path: Path) -> None:
    # A pid the kernel handed to a process that started after the record was written is
    # not the server: this very process, recorded as if it had written status.json an
    # hour before it started.
    started = psutil.Process().create_time()
    write_status(tmp_path, StatusDoc(state="done", phase="exec", command="boot",
                                     pid=os.getpid(), updated_at=started - 3600))
    assert d._server_pid(tmp_path) is None
    assert serving_status(tmp_path, {}).state == "abnormal"
    write_status(tmp_path, StatusDoc(state="done", phase="exec", command="boot",
                                     pid=os.getpid()))
    assert d._server_pid(tmp_path) == os.getpid()  # the writer itself, still running


def test_net_health_states_are_explained(node_env: dict[str, str], tmp_path: Path) -> None:
    data = Path(os.environ["ASCEND_NODE_SIM_DATA"])
    write_node_data(data, [FakeDevice(0, "10.20.1.0", health="Init"),
                           FakeDevice(1, "10.20.1.1", health="Receive timeout"),
                           FakeDevice(2, "10.20.1.2"), FakeDevice(3, "10.20.1.3")])
    check = doctor(node_env, tmp_path).check("device.net_health")
    assert check.status == "fail"
    assert ("device 1: net health status Receive timeout (`hccn_tool -i 1 -net_health -g`): "
            "the probe was sent but no answer came back in time") in check.message
    write_node_data(data, [FakeDevice(0, "10.20.1.0", health="Init"),
                           *[FakeDevice(i, f"10.20.1.{i}") for i in range(1, 4)]])
    init = doctor(node_env, tmp_path).check("device.net_health")
    assert init.status == "ok"
    assert ("device 0 Init: no detection address is configured (netdetect address 0.0.0.0), "
            "so the probe never ran; this is not a broken link") in init.message


def test_a_device_without_ip_does_not_stop_the_other_checks(node_env: dict[str, str],
                                                            tmp_path: Path) -> None:
    data = Path(os.environ["ASCEND_NODE_SIM_DATA"])
    write_node_data(data, [FakeDevice(0, "10.20.1.0"), FakeDevice(1, None, link="DOWN"),
                           FakeDevice(2, "10.20.1.2"), FakeDevice(3, "10.20.1.3", tls=1)])
    report = doctor(node_env, tmp_path)
    assert report.problems == {"device.ip": "fail", "device.link": "fail", "device.tls": "fail"}
    assert report.exit_code == 1
    assert [x["link"] for x in report.to_json()["facts"]["devices"]] == ["UP", "DOWN", "UP", "UP"]


def test_missing_hccn_tool_is_reported_per_check_not_raised(node_env: dict[str, str],
                                                            tmp_path: Path) -> None:
    report = doctor(node_env, tmp_path, hccn_tool=str(tmp_path / "no-such-tool"))
    assert report.problems == {"device.ip": "fail", "device.link": "warn",
                               "device.net_health": "warn", "device.tls": "warn"}
    assert "no-such-tool` not found" in report.check("device.link").message


def test_peers_without_a_shared_dir_is_unusable(node_env: dict[str, str], tmp_path: Path) -> None:
    env = {k: v for k, v in node_env.items() if k != "ASCEND_NODE_SHARED_DIR"}
    with pytest.raises(ConfigError, match="no shared directory"):
        doctor(env, tmp_path, peers=True)
    assert doctor(env, tmp_path).exit_code == 0  # local checks need none


def test_bad_devices_setting_is_unusable(node_env: dict[str, str], tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="'7-2'"):  # given as the flag
        doctor(node_env, tmp_path, devices="7-2")


def test_bad_identity_is_a_failed_check_locally(node_env: dict[str, str], tmp_path: Path) -> None:
    env = {k: v for k, v in node_env.items() if k != "ROLE"}
    report = doctor(env, tmp_path)
    assert report.problems == {"node.identity": "fail"}
    assert report.check("node.identity").message == "ROLE is not set"
    with pytest.raises(ConfigError, match="ROLE is not set"):
        doctor(env, tmp_path, peers=True)


def test_one_node_with_peers_publishes_its_facts_and_has_no_one_to_compare(
    node_env: dict[str, str], tmp_path: Path
) -> None:
    report = doctor(node_env, tmp_path, peers=True)
    assert report.problems == {}
    path = tmp_path / "shared" / ".ascend-node" / "r1" / "doctor" / "node-0.json"
    published = json.loads(path.read_text())
    assert published["schema_version"] == 1 and published["kind"] == "doctor_facts"
    assert [x["ip"] for x in published["devices"]] == [f"10.20.1.{i}" for i in range(4)]
    ping = report.check("peers.ping")
    assert (ping.status, ping.message) == ("skip", "no device pairs to ping (no peer devices)")
    assert report.check("peers.present").status == "skip"
