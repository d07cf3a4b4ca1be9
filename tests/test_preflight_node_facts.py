"""Issue 28's checks, from the real output formats: held NPUs (npu-smi info), HCCL's host
ports (/proc/net/tcp, the port sysctls), HCCL settings and CANN/driver versions, node 0's
judgement of them, device ids for MindIE, and what boot changes in the server's env."""

from __future__ import annotations

import contextlib
import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ascend_node.discover.hccl_ports import (
    HostPorts,
    PortSpecError,
    Socket,
    host_ports,
    judge_ports,
    parse_proc_net_tcp,
    parse_reserved_ports,
    read_port_facts,
)
from ascend_node.discover.hccl_settings import (
    effective_settings,
    parse_driver_version,
    parse_toolkit_version,
    read_versions,
    setting_problems,
)
from ascend_node.discover.health import Holder, NodeFacts, NodeHealth, PortHealth
from ascend_node.discover.npu_processes import ProcessTableError, parse_npu_processes
from ascend_node.handoff.device_ids import mindie_device_problem
from ascend_node.handoff.server_env import describe_rootinfo, proxy_changes, rank_table_notes
from ascend_node.preflight.gather import gather_holders
from ascend_node.preflight.judge import judge_health
from ascend_node.rendezvous.models import MemberData
from ascend_node.tools import ToolResult
from tests.conftest import split_capture

NPU_SMI = Path(__file__).resolve().parent.parent / "fixtures" / "npu-smi"


def capture(name: str) -> str:
    return (NPU_SMI / name).read_text()


# ------------------------------------------------------------------ npu-smi info processes

@pytest.mark.parametrize(("name", "expected"), [
    ("a2-910b2-8npu-idle.txt", []),
    ("a2-910b4-npusmi26-container-idle.txt", []),
    ("a2-910b4-2npu-vllm-running.txt", [(0, 19334, "VLLMWorker_TP"),
                                        (1, 19341, "VLLMWorker_TP")]),
    # A3: NPU n chip c is physical device Phy-ID (2n + c); names are empty there.
    ("a3-16chip-vllm-running-noname.txt", [(0, 166929, ""), (1, 166925, ""), (2, 166922, ""),
                                           (3, 166923, ""), (4, 166928, ""), (5, 166927, ""),
                                           (6, 166926, ""), (7, 166924, "")]),
])
def test_process_table_of_each_capture(name, expected):
    got = [(p.device_id, p.pid, p.name) for p in parse_npu_processes(capture(name))]
    assert got == expected


def test_same_pid_on_both_chips_of_an_a3_card_is_listed_on_each_device():
    rows = parse_npu_processes(capture("a3-16chip-two-jobs-running.txt"))
    assert {p.device_id for p in rows if p.pid == 3328327} == {0, 1}
    assert {p.device_id for p in rows} == {0, 1, 2, 3, 12, 13, 14, 15}


def test_26x_running_row_reads_the_pid_in_container():
    # Not captured with processes: the 26.x header is (fixtures/npu-smi/README.md); a row
    # under it must have five columns, the fifth an integer.
    idle = capture("a2-910b4-npusmi26-container-idle.txt")
    row = ("| 0       0                 | 19334         | python3            | 512       "
           "            | 88                      |")
    running = idle.replace("| No running processes found in NPU 0" + " " * 78 + "|", row)
    assert row in running
    (p,) = parse_npu_processes(running)
    assert (p.device_id, p.pid, p.name, p.pid_in_container) == (0, 19334, "python3", 88)
    with pytest.raises(ProcessTableError, match="Process id in container"):
        parse_npu_processes(running.replace("| 88 ", "| -- "))


@pytest.mark.parametrize(("edit", "words"), [
    (lambda t: t.replace("Process id    | Process name", "PID | Name"), "no process table"),
    (lambda t: t.replace("| 19334         |", "| 19x34         |"), "unreadable process row"),
    (lambda t: t.replace("| 58472                   |", "|"), "columns"),
    (lambda t: t.replace("| 1       0      ", "| 5       0      "),
     "NPU 5 chip 0, which the device table does not list"),
])
def test_an_unknown_process_table_is_an_error_not_a_free_device(edit, words):
    text = edit(capture("a2-910b4-2npu-vllm-running.txt"))
    with pytest.raises(ProcessTableError, match=words):
        parse_npu_processes(text)


def _runner(outputs):
    calls = []

    def run(argv, timeout):
        calls.append(argv)
        text = outputs[min(len(calls), len(outputs)) - 1]
        return ToolResult(argv=tuple(argv), returncode=0, stdout=text, stderr="")
    return run, calls


class Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now

    def sleep(self, s):
        self.now += s


def test_a_holder_that_goes_within_the_wait_is_no_fault():
    busy, idle = capture("a2-910b4-2npu-vllm-running.txt"), capture("a2-910b2-8npu-idle.txt")
    run, calls = _runner([busy, busy, idle])
    clock = Clock()
    holders, waited, why = gather_holders([0, 1], "npu-smi", 5, 30.0, run, clock, clock.sleep)
    assert (holders, why) == ((), "") and waited == 2.0 and len(calls) == 3


def test_a_holder_still_there_after_the_wait_is_named():
    run, calls = _runner([capture("a2-910b4-2npu-vllm-running.txt")])
    clock = Clock()
    holders, waited, _ = gather_holders([1, 2], "npu-smi", 5, 3.0, run, clock, clock.sleep)
    assert holders == (Holder(device_id=1, pid=19341, name="VLLMWorker_TP", memory_mb=58472),)
    assert waited == 3.0 and len(calls) == 4


def test_another_pods_npus_are_not_ours():
    run, _ = _runner([capture("a2-910b4-2npu-vllm-running.txt")])
    clock = Clock()
    assert gather_holders([4, 5], "npu-smi", 5, 30.0, run, clock, clock.sleep)[0] == ()


def test_a_tool_that_prints_no_table_leaves_holders_unknown_with_its_words():
    run, _ = _runner(["npu-smi: unsupported\n"])
    holders, _, why = gather_holders([0], "npu-smi", 5, 30.0, run, Clock(), lambda s: None)
    assert holders is None and "no process table" in why and "unsupported" in why


# ------------------------------------------------------------------ ports

@pytest.mark.parametrize(("env", "cann", "expected"), [
    ({}, None, ("60000-60031", "default")),
    ({}, "8.0.RC3", ("60000-60015", "default")),
    ({}, "8.3.RC2", ("60000-60031", "default")),
    ({"HCCL_IF_BASE_PORT": "50000"}, "8.5.0", ("50000-50031", "HCCL_IF_BASE_PORT")),
    ({"HCCL_IF_BASE_PORT": "50000", "HCCL_HOST_SOCKET_PORT_RANGE": "61000,62000-62002"}, None,
     ("61000,62000-62002", "HCCL_HOST_SOCKET_PORT_RANGE")),
    ({"HCCL_HOST_SOCKET_PORT_RANGE": "auto"}, None, ("auto", "HCCL_HOST_SOCKET_PORT_RANGE")),
])
def test_which_host_ports_hccl_uses(env, cann, expected):
    got = host_ports(env, cann)
    assert (got.text, got.variable) == expected


@pytest.mark.parametrize(("env", "words"), [
    ({"HCCL_IF_BASE_PORT": "65521"}, "HCCL_IF_BASE_PORT='65521' is not an integer in [0, 65520]"),
    ({"HCCL_IF_BASE_PORT": "6e4"}, "HCCL_IF_BASE_PORT='6e4'"),
    ({"HCCL_HOST_SOCKET_PORT_RANGE": "60010-60000"}, "'60010-60000' is not within 1-65535"),
    ({"HCCL_HOST_SOCKET_PORT_RANGE": "60000-60010,60005"}, "its parts overlap"),
])
def test_a_port_variable_hccl_refuses_is_named(env, words):
    with pytest.raises(PortSpecError) as err:
        host_ports(env)
    assert words in str(err.value)


PROC_TCP = """\
  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 00000000:EA60 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 1001 1
   1: 0100007F:EA61 0100007F:9C40 01 00000000:00000000 00:00000000 00000000     0        0 1002 1
   2: 0100007F:EA62 0100007F:9C41 06 00000000:00000000 00:00000000 00000000     0        0 0 3
"""


def test_proc_net_tcp_rows_give_port_and_state():
    got = [(s.port, s.state) for s in parse_proc_net_tcp(PROC_TCP)]
    assert got == [(60000, "LISTEN"), (60001, "ESTABLISHED"), (60002, "TIME_WAIT")]
    with pytest.raises(ValueError, match="unreadable"):
        parse_proc_net_tcp(PROC_TCP + "   3: garbage\n")


def test_listener_is_taken_connection_is_busy_time_wait_is_free():
    ports = HostPorts(tuple(range(60000, 60016)), "default", "60000-60015")
    facts = judge_ports(ports, parse_proc_net_tcp(PROC_TCP),
                        parse_reserved_ports("60000-60007"), (32768, 60999))
    assert facts.listening == (60000,) and facts.busy == (60001,)
    assert facts.unreserved == tuple(range(60008, 60016))
    outside = judge_ports(HostPorts((61000,), "x", "61000"), [Socket(61000, "TIME_WAIT", 0)],
                          frozenset(), (32768, 60999))
    assert (outside.listening, outside.busy, outside.unreserved) == ((), (), ())


def test_read_port_facts_from_kernel_files(tmp_path):
    (tmp_path / "tcp").write_text(PROC_TCP)
    (tmp_path / "ip_local_reserved_ports").write_text("\n")
    (tmp_path / "ip_local_port_range").write_text("32768\t60999\n")
    facts = read_port_facts({}, "8.0.RC1", tmp_path, tmp_path)  # no tcp6: an IPv4-only kernel
    assert facts.listening == (60000,) and facts.unreserved == tuple(range(60000, 60016))


# ------------------------------------------------------------------ settings and versions

@pytest.mark.parametrize(("env", "problems"), [
    ({}, []),
    ({"HCCL_CONNECT_TIMEOUT": "7200", "HCCL_BUFFSIZE": "1"}, []),
    ({"HCCL_CONNECT_TIMEOUT": "60"},
     ["HCCL_CONNECT_TIMEOUT='60' is not an integer in [120, 7200]"]),
    ({"HCCL_CONNECT_TIMEOUT": "2h"}, ["HCCL_CONNECT_TIMEOUT='2h' is not an integer"]),
    ({"HCCL_OP_EXPANSION_MODE": "AIV", "HCCL_EXEC_TIMEOUT": "1800"},
     ["HCCL_EXEC_TIMEOUT=1800 is more than 1091 s"]),
    ({"HCCL_OP_EXPANSION_MODE": "AIV", "HCCL_EXEC_TIMEOUT": "1000"}, []),
    ({"HCCL_BUFFSIZE": "0"}, ["HCCL_BUFFSIZE='0' is not an integer >= 1"]),
    ({"HCCL_NPU_SOCKET_PORT_RANGE": "auto"}, []),
    ({"HCCL_NPU_SOCKET_PORT_RANGE": "16666-16600"}, ["HCCL_NPU_SOCKET_PORT_RANGE='16666-16600'"]),
])
def test_values_cann_refuses(env, problems):
    got = setting_problems(env)
    assert len(got) == len(problems) and all(p in g for p, g in zip(problems, got)), got


def test_unset_and_default_are_the_same_value():
    assert effective_settings({}) == effective_settings({"HCCL_CONNECT_TIMEOUT": "120",
                                                         "HCCL_BUFFSIZE": " "})


def test_versions_from_the_captures(tmp_path):
    blocks = split_capture(capture("a2-mindie-2.1-container-versions.txt"))
    assert parse_toolkit_version(blocks["cat /usr/local/Ascend/ascend-toolkit/latest/"
                                        "version.cfg"]) == "8.2.RC2"
    assert parse_driver_version(blocks["cat /usr/local/Ascend/driver/version.info"]) == \
        "24.1.rc2.2"
    info = split_capture(capture("a3-16chip-two-jobs-running.txt"))
    assert parse_toolkit_version(info["cat /usr/local/Ascend/ascend-toolkit/latest/"
                                      "aarch64-linux/ascend_toolkit_install.info"]) == "8.5.0"
    # On disk as in a container: install.info only (no version.cfg), and a broken driver file.
    arch = tmp_path / "ascend-toolkit" / "latest" / "aarch64-linux"
    arch.mkdir(parents=True)
    (arch / "ascend_toolkit_install.info").write_text(
        info["cat /usr/local/Ascend/ascend-toolkit/latest/aarch64-linux/"
             "ascend_toolkit_install.info"])
    (tmp_path / "driver").mkdir()
    (tmp_path / "driver" / "version.info").write_text("garbage\n")
    got = read_versions(tmp_path)
    assert got.cann == "8.5.0" and got.driver is None
    assert "no `Version=` line" in got.problems[0]
    assert read_versions(tmp_path / "absent") == read_versions(tmp_path / "absent2")


# ------------------------------------------------------------------ node 0's judgement

def node(**facts) -> NodeHealth:
    return NodeHealth(ip_family=4, devices=(), node=NodeFacts(**facts))


HCCL = effective_settings({})


def test_held_npu_is_a_fault_naming_device_pid_and_name():
    verdict = judge_health({
        0: node(holders=(), hccl=HCCL),
        1: node(holders=(Holder(device_id=3, pid=19334, name="VLLMWorker_TP"),
                         Holder(device_id=5, pid=7)), held_wait=30.0, hccl=HCCL),
    }, 1)
    (fault,) = verdict.faults
    assert fault.nodes == (1,)
    assert ("worker 0 (node 1): device 3 PID 19334 (VLLMWorker_TP), device 5 PID 7 "
            "(no name shown) (still there after 30 s)") in fault.reason
    assert "EJ0001" in fault.reason


def test_listener_is_a_fault_naming_port_and_the_variable_that_moves_it():
    taken = PortHealth(variable="HCCL_HOST_SOCKET_PORT_RANGE", ports="61000-61031",
                       listening=(61000, 61001), ephemeral="32768-60999")
    verdict = judge_health({0: node(ports=taken), 1: node()}, 1)
    (fault,) = verdict.faults
    assert fault.nodes == (0,)
    assert fault.reason.startswith("HCCL host port(s) 61000-61001 on master 0 (node 0) "
                                   "already have a listener")
    assert "move the range with HCCL_HOST_SOCKET_PORT_RANGE" in fault.reason


def test_unreserved_ports_are_one_warning_for_every_node_alike():
    ports = PortHealth(variable="default", ports="60000-60031",
                       unreserved="60000-60031", ephemeral="32768-60999")
    verdict = judge_health({0: node(ports=ports), 1: node(ports=ports)}, 1)
    assert verdict.faults == ()
    (warning,) = verdict.warnings
    assert warning.startswith("HCCL host ports 60000-60031 inside the ephemeral range "
                              "32768-60999 are not in net.ipv4.ip_local_reserved_ports on "
                              "master 0 (node 0), worker 0 (node 1)")
    assert "sysctl -w net.ipv4.ip_local_reserved_ports=60000-60031" in warning


def test_a_setting_that_differs_names_the_nodes_and_both_values():
    odd = {**HCCL, "HCCL_CONNECT_TIMEOUT": "600"}
    verdict = judge_health({0: node(hccl=HCCL), 1: node(hccl=HCCL), 2: node(hccl=odd)}, 1)
    (fault,) = verdict.faults
    assert fault.reason.startswith(
        "HCCL_CONNECT_TIMEOUT differs between nodes: 600 on worker 1 (node 2); 120 on "
        "master 0 (node 0), worker 0 (node 1); fix: set one HCCL_CONNECT_TIMEOUT")
    assert fault.nodes == (0, 1, 2)


def test_versions_that_differ_are_faults_and_unknown_ones_are_left_out():
    verdict = judge_health({0: node(cann="8.3.RC2", driver="25.2.0"),
                            1: node(cann="8.3.RC2", driver="24.1.rc2.2"),
                            2: node(cann=None, driver="25.2.0")}, 1)
    (fault,) = verdict.faults
    assert fault.reason.startswith("NPU driver version differs between nodes: 24.1.rc2.2 on "
                                   "worker 0 (node 1); 25.2.0 on master 0 (node 0), worker 1 "
                                   "(node 2)")


def test_a_refused_value_is_a_fault_of_its_node():
    verdict = judge_health({0: node(hccl_problems=("HCCL_BUFFSIZE='0' is not an integer",))}, 1)
    assert verdict.faults[0].reason.startswith(
        "HCCL setting CANN refuses on master 0 (node 0): HCCL_BUFFSIZE='0'")


def test_members_without_facts_are_skipped():
    plain = NodeHealth(ip_family=4, devices=())
    assert judge_health({0: plain, 1: node(cann="8.3.RC2")}, 1).faults == ()


def test_the_facts_stay_out_of_the_member_digest():
    fields = set(MemberData.model_fields)
    assert "health" not in fields and "node" not in fields


# ------------------------------------------------------------------ device ids (item 5)

@pytest.mark.parametrize(("ids", "env", "launcher", "nodes", "words"), [
    ((0, 1, 2, 3), {}, "mindie", 2, None),
    ((10, 12, 14, 16), {}, "mindie", 2, "MindIE multi-node cannot use devices 10,12,14,16"),
    ((4, 5, 6, 7), {}, "mindie", 2, "MindIE multi-node cannot use devices 4-7"),
    ((4, 5, 6, 7), {}, "mindie", 1, None),  # one node: no rank table for MindIE
    ((4, 5, 6, 7), {}, "torch", 2, None),  # training launchers read the table themselves
    ((0, 1), {"ASCEND_RT_VISIBLE_DEVICES": "1,0"}, "mindie", 2,
     "ASCEND_RT_VISIBLE_DEVICES='1,0' renumbers"),
    ((0, 1), {"ASCEND_RT_VISIBLE_DEVICES": "0,1"}, "mindie", 2, None),
])
def test_which_pods_multi_node_mindie_refuses(ids, env, launcher, nodes, words):
    got = mindie_device_problem(ids, "ASCEND_VISIBLE_DEVICES", env, launcher, nodes)
    if words is None:
        assert got is None
    else:
        assert got is not None and words in got[0] and got[1]


# ------------------------------------------------------------------ server env (items 4, 6)

def test_proxies_are_unset_for_multi_node_mindie_and_kept_with_a_note_otherwise():
    env = {"http_proxy": "http://proxy:3128", "HTTPS_PROXY": "http://proxy:3128",
           "no_proxy": "localhost", "ftp_proxy": ""}
    got = proxy_changes(env, "mindie", 2)
    assert got.unset == ("http_proxy", "HTTPS_PROXY")
    assert got.notes[0].startswith("unset http_proxy, HTTPS_PROXY for the server")
    kept = proxy_changes(env, "torch", 2)
    assert kept.unset == () and "kept http_proxy, HTTPS_PROXY" in kept.notes[0]
    assert proxy_changes({}, "mindie", 2).notes == ()


def test_an_image_rank_table_is_named_with_what_replaced_it():
    env = {"RANK_TABLE_FILE": "/home/old/hccl.json", "RANKTABLEFILE": "/run/x/ranktable.json"}
    notes = rank_table_notes(env, "/run/x/ranktable.json")
    assert notes == ("the image's environment sets RANK_TABLE_FILE=/home/old/hccl.json; the "
                     "server gets this job's table /run/x/ranktable.json instead",)


def test_a_mounted_rootinfo_is_described():
    text = json.dumps({"version": "1.0", "server_list": [{}, {}]})
    note = describe_rootinfo(text, "/run/x/ranktable.json")
    assert note is not None
    assert note.startswith("/etc/hccl_rootinfo.json is present (version 1.0, 2 server(s))")
    assert "RANK_TABLE_FILE=/run/x/ranktable.json" in note
    assert describe_rootinfo(None, "/x") is None
    assert "unreadable as JSON" in (describe_rootinfo("{", None) or "")


# ------------------------------------------------------------------ net health (item 7)

HCCN = NPU_SMI.parent / "hccn"


def test_net_health_and_netdetect_from_the_captures():
    from ascend_node.discover.devices import parse_net_health, parse_netdetect
    from ascend_node.discover.net_health import STATES, explain

    deploy = (HCCN / "a2-910b3-deploy-doc-returns.txt").read_text()
    assert parse_netdetect(deploy) == "11.12.165.1"
    init = parse_net_health((HCCN / "doc-faultdiag-device0-example.txt").read_text())
    assert init == "Init"
    assert "not a broken link" in explain(init, 0, "0.0.0.0")[0]
    assert "11.12.165.1" in explain(init, 0, "11.12.165.1")[0]
    failed = parse_net_health(split_capture((HCCN / "kg-npu_info.txt").read_text())[
        "hccn_tool -i 0 -net_health -g"])
    assert failed == "Socket failed"
    assert explain(failed, 0, None) == (STATES["socket fail"][0],
                                        STATES["socket fail"][1].format(i=0))
    for state in ("Success", "Socket fail", "Receive timeout", "Unreachable", "Time exceeded",
                  "Fault", "Init", "Thread error", "Detect ip set", "Unknown"):
        cause, _ = explain(state, 3, None)
        assert "does not know" not in cause, state
    assert "does not know ('Bogus')" in explain("Bogus", 3, None)[0]


def test_gather_node_names_what_it_could_not_find(tmp_path):
    from ascend_node.preflight.gather import gather_node

    run, _ = _runner(["dcmi init failed\n"])
    facts = gather_node([0, 1], "npu-smi", {"HCCL_IF_BASE_PORT": "x"}, tmp_path / "none", 5,
                        0.0, run, proc_net=tmp_path, proc_sys=tmp_path)
    assert facts.holders is None and facts.cann is None and facts.driver is None
    assert facts.ports is None
    assert facts.hccl_problems == ("HCCL_IF_BASE_PORT='x' is not an integer in [0, 65520]",)
    assert any("no process table" in u for u in facts.unknown)
    # A kernel without /proc/net/tcp: the ports are unknown, with the reason.
    ok = gather_node([0], "npu-smi", {}, tmp_path, 5, 0.0, run, proc_net=tmp_path,
                     proc_sys=tmp_path)
    assert ok.ports is None and any(u.startswith("host ports:") for u in ok.unknown)


# ------------------------------------------------------------------ any text



@settings(max_examples=300, deadline=None)
@given(st.text(max_size=400))
def test_parsers_fail_only_with_their_own_error(text):
    from ascend_node.discover.hccl_settings import VersionFileError

    for parse, allowed in ((parse_npu_processes, ProcessTableError),
                           (parse_proc_net_tcp, ValueError),
                           (parse_reserved_ports, PortSpecError),
                           (parse_toolkit_version, VersionFileError),
                           (parse_driver_version, VersionFileError)):
        with contextlib.suppress(allowed):
            parse(text)
    for name in ("HCCL_IF_BASE_PORT", "HCCL_HOST_SOCKET_PORT_RANGE"):
        with contextlib.suppress(PortSpecError):
            host_ports({name: text})
    setting_problems({"HCCL_CONNECT_TIMEOUT": text, "HCCL_NPU_SOCKET_PORT_RANGE": text})
    # An npu-smi table with that text as a process name still parses or fails cleanly.
    with contextlib.suppress(ProcessTableError):
        parse_npu_processes(capture("a2-910b4-2npu-vllm-running.txt").replace(
            "VLLMWorker_TP", text.replace("\n", " "), 1))


def test_unicode_digits_are_not_ports():
    with pytest.raises(PortSpecError):
        host_ports({"HCCL_IF_BASE_PORT": "\uff16\uff10\uff10\uff10\uff10"})  # fullwidth
