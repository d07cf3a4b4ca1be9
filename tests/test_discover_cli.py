"""Contract of `ascend-node discover [--json]`: what this container is, where each value
came from, exact exit codes and messages, and that it writes nothing.

Every vendor tool is faked with pytest-subprocess, answering with the real captures in
fixtures/hccn/. CliRunner keeps stdout and stderr apart (`result.stdout`/`.stderr`).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Callable

import pytest

from ascend_node.cli import app
from tests.cli_helpers import cli_runner

Captures = Callable[[str], "dict[str, str]"]
HCCN = "/opt/ascend/driver/tools/hccn_tool"
NPU_SMI = "/opt/ascend/bin/npu-smi"
UID = "6f1c0e42-9a4b-4a67-8d3e-0c2a1b7e9f10"
CLEARED = ("ROLE", "POD_UID", "POD_IP", "MODEL_PATH", "KUBEFLOW_RUN_ID", "KFJ_RUN_ID",
           "ASCEND_VISIBLE_DEVICES")
CLEARED_PREFIXES = ("ASCEND_NODE_", "VC_", "VK_", "K8S_")


@pytest.fixture
def node_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> dict[str, str]:
    """worker 1 (node 2) of a 1-master + 2-worker job; cwd and every path in tmp_path."""
    for key in list(os.environ):
        if key in CLEARED or key.startswith(CLEARED_PREFIXES):
            monkeypatch.delenv(key)
    monkeypatch.chdir(tmp_path)
    env = {
        "ROLE": "worker", "VC_TASK_INDEX": "1", "VC_MASTER_NUM": "1", "VC_WORKER_NUM": "2",
        "K8S_POD_IP": "172.16.3.7", "K8S_HOST_IP": "192.168.10.12", "POD_UID": UID,
        "ASCEND_NODE_RUN_ID": "qwen-2x8",
        "ASCEND_NODE_HCCN_TOOL": HCCN, "ASCEND_NODE_NPU_SMI": NPU_SMI,
        "ASCEND_NODE_HCCN_CONF": str(tmp_path / "etc" / "hccn.conf"),
        "ASCEND_NODE_STATE_DIR": str(tmp_path / "state"),
        "ASCEND_NODE_SHARED_DIR": str(tmp_path / "shared"),
        "ASCEND_NODE_MASTER_FILE": str(tmp_path / "master"),
        "ASCEND_NODE_WORLD_SIZE_FILE": str(tmp_path / "world_size"),
        "ASCEND_VISIBLE_DEVICES": "Ascend910-0,Ascend910-1,Ascend910-2,Ascend910-3,"
                                  "Ascend910-4,Ascend910-5,Ascend910-6,Ascend910-7",
    }
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    (tmp_path / "shared").mkdir()
    return env


def fake_ips(fp: Any, blocks: dict[str, str], ids: range, tool: str = HCCN) -> None:
    # An A2/910 node outside any super pod: `npu-smi info -m` is the real kg capture; the
    # spod-info refusal is invented (no capture of it exists): a non-zero exit without SDID.
    kg = Path(__file__).parent.parent / "fixtures" / "hccn" / "kg-npu_info.txt"
    mapping = kg.read_text().split("npu-smi info -m\n", 1)[1].split("\n\n", 1)[0]
    fp.register([NPU_SMI, "info", "-m"], stdout=mapping + "\n", occurrences=2)
    fp.register([NPU_SMI, "info", "-t", "spod-info", "-i", "0", "-c", "0"],
                stderr="Error: this device does not support spod-info\n", returncode=255)
    for i in ids:
        fp.register([tool, "-i", str(i), "-ip", "-g"], stdout=blocks[f"hccn_tool -i {i} -ip -g"])
        fp.register([tool, "-i", str(i), "-ip", "-inet6", "-g"], stdout="")


def tree(root: Path) -> dict[str, float]:
    return {str(p.relative_to(root)): p.stat().st_mtime for p in sorted(root.rglob("*"))}


def run(*args: str) -> Any:
    return cli_runner().invoke(app, ["discover", *args])


def test_discover_json_reports_identity_devices_and_sources_and_writes_nothing(
    node_env: dict[str, str], fp: Any, hccn_capture: Captures, tmp_path: Path
) -> None:
    fake_ips(fp, hccn_capture("a2-worker-npu_info.txt"), range(8))
    before = tree(tmp_path)
    result = run("--json")
    assert (result.exit_code, result.stderr) == (0, "")
    doc = json.loads(result.stdout)
    assert doc["schema_version"] == 1
    assert doc["identity"] == {
        "role": "worker", "task_index": 1, "global_index": 2, "node_count": 3,
        "master_count": 1, "worker_count": 2, "name": "worker 1 (node 2)",
        "pod_ip": "172.16.3.7", "host_ip": "192.168.10.12", "incarnation": UID,
        "run_id": "qwen-2x8",
    }
    assert doc["devices"] == [
        {"device_id": i, "ip": f"10.10.0.1{i}", "netmask": "255.255.255.0",
         "ip_source": "hccn_tool"} for i in range(8)]
    assert doc["sources"] == {
        "role": "ROLE", "master_count": "VC_MASTER_NUM", "worker_count": "VC_WORKER_NUM",
        "task_index": "VC_TASK_INDEX", "pod_ip": "K8S_POD_IP", "host_ip": "K8S_HOST_IP",
        "incarnation": "POD_UID", "devices": "ASCEND_VISIBLE_DEVICES", "hccn_tool": HCCN,
        "run_id": "environment ASCEND_NODE_RUN_ID", "job_version": "not set",
        "job_instance": "not set",
    }
    assert tree(tmp_path) == before  # no state dir, no table, no master file, nothing
    assert all(fp.call_count([HCCN, "-i", str(i), "-ip", "-g"]) == 1 for i in range(8))


def test_discover_human_output_names_every_source(
    node_env: dict[str, str], fp: Any, hccn_capture: Captures
) -> None:
    fake_ips(fp, hccn_capture("a2-worker-npu_info.txt"), range(8))
    result = run("--devices", "0-1")
    assert (result.exit_code, result.stderr) == (0, "")
    lines = result.stdout.splitlines()
    assert lines[:6] == [
        "node      worker 1 (node 2) of 3  [ROLE, VC_TASK_INDEX]",
        "pod IP    172.16.3.7  [K8S_POD_IP]",
        "host IP   192.168.10.12  [K8S_HOST_IP]",
        f"instance  {UID}  [POD_UID]",
        "run id    qwen-2x8  [environment ASCEND_NODE_RUN_ID]",
        f"devices   2  [--devices; IPs from {HCCN}]",
    ]
    assert [ln.split() for ln in lines[6:8]] == [
        ["0", "10.10.0.10", "255.255.255.0", "[hccn_tool]"],
        ["1", "10.10.0.11", "255.255.255.0", "[hccn_tool]"],
    ]
    assert lines[8].startswith("super pod -  [device 0: `/opt/ascend/bin/npu-smi info -t "
                               "spod-info -i 0 -c 0` printed no SDID (exit 255")
    assert lines[9:] == ["table     from volume  [auto: no MindCluster file at "
                         "/user/serverid/devindex/config/hccl.json]; version auto [default]"]


def test_discover_enumerates_with_npu_smi_and_falls_back_to_hccn_conf(
    node_env: dict[str, str], fp: Any, hccn_capture: Captures, tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The kg capture: 8 chips from `npu-smi info -m`; device 2's `-ip -g` printed nothing.
    # Needs a machine without /dev/davinciN (enumeration tries /dev before npu-smi).
    monkeypatch.delenv("ASCEND_VISIBLE_DEVICES")
    blocks = dict(hccn_capture("kg-npu_info.txt"))
    fp.register([NPU_SMI, "info", "-m"], stdout=blocks["npu-smi info -m"])
    for i in range(3, 8):
        blocks[f"hccn_tool -i {i} -ip -g"] = f"ipaddr:192.161.20{i}.10\nnetmask:255.255.255.0\n"
    fake_ips(fp, blocks, range(8))
    conf = tmp_path / "etc" / "hccn.conf"
    conf.parent.mkdir()
    conf.write_text("address_2=192.161.202.10\nnetmask_2=255.255.255.0\n")
    result = run("--json")
    assert (result.exit_code, result.stderr) == (0, "")
    doc = json.loads(result.stdout)
    assert doc["sources"]["devices"] == "npu-smi info -m"
    assert [(d["device_id"], d["ip"], d["ip_source"]) for d in doc["devices"]] == [
        (i, f"192.161.20{i}.10", str(conf) if i == 2 else "hccn_tool") for i in range(8)]


def test_discover_falls_back_to_the_default_route_and_fallback_incarnation(
    node_env: dict[str, str], fp: Any, hccn_capture: Captures,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for key in ("K8S_POD_IP", "K8S_HOST_IP", "POD_UID"):
        monkeypatch.delenv(key)
    monkeypatch.setattr("ascend_node.discover.hostinfo.default_route_ip", lambda: "10.244.1.9")
    monkeypatch.setattr("ascend_node.discover.hostinfo.sandbox_facts",
                        lambda: ("job-worker-1", "boot-a", "net:[4026532281]"))
    fake_ips(fp, hccn_capture("a2-worker-npu_info.txt"), range(1))
    result = run("--json", "--devices", "0")
    assert (result.exit_code, result.stderr) == (0, "")
    doc = json.loads(result.stdout)
    assert (doc["identity"]["pod_ip"], doc["identity"]["host_ip"]) == ("10.244.1.9",
                                                                      "10.244.1.9")
    assert doc["identity"]["incarnation"].startswith("ns-")
    assert (doc["sources"]["pod_ip"], doc["sources"]["host_ip"]) == (
        "default-route interface", "pod IP (K8S_HOST_IP unset)")


def error_text(cause: str, hint: str) -> str:
    return f"ascend-node: error: {cause}\n  hint: {hint}\n"


@pytest.mark.parametrize(
    ("env", "args", "cause", "hint"),
    [
        ({"ROLE": None}, [], "ROLE is not set",
         "set ROLE=master or ROLE=worker in the task's container env"),
        ({"ROLE": "leader"}, [], "ROLE='leader' is not one of master, worker",
         "set ROLE=master or ROLE=worker (any case)"),
        ({"VC_WORKER_NUM": "2x"}, [], "VC_WORKER_NUM='2x' is not a non-negative integer",
         "set VC_WORKER_NUM to the number of pods in that task"),
        ({"VC_TASK_INDEX": "2"}, [],
         "VC_TASK_INDEX=2 is out of range for ROLE=worker with VC_WORKER_NUM=2",
         "the task index must be below VC_WORKER_NUM; check the task replicas"),
        ({"K8S_POD_IP": "127.0.0.1"}, [], "K8S_POD_IP='127.0.0.1' is unusable: loopback address",
         "it must be the pod's routable IP (downward API status.podIP / status.hostIP)"),
        ({"ASCEND_NODE_RUN_ID": "../other"}, [],
         "run id '../other' (from environment ASCEND_NODE_RUN_ID) is not a safe file-name part",
         "use 1-128 characters from [A-Za-z0-9_.-], starting with a letter or digit, "
         "without '..'"),
        ({"ASCEND_NODE_TOOL_TIMEOUT": "-3"}, [],
         "ASCEND_NODE_TOOL_TIMEOUT='-3' is invalid: -3 is not a finite number of seconds > 0",
         "fix or unset ASCEND_NODE_TOOL_TIMEOUT"),
        ({"ASCEND_VISIBLE_DEVICES": "npu0"}, [],
         "ASCEND_VISIBLE_DEVICES='npu0': 'npu0' is not a device id, range or AscendXXX-N name",
         "use e.g. 0-7, 0,1,2,3 or Ascend910-0,Ascend910-1"),
    ],
)
def test_discover_bad_environment_exits_1_naming_the_value(
    node_env: dict[str, str], fp: Any, monkeypatch: pytest.MonkeyPatch,
    env: dict[str, Any], args: list[str], cause: str, hint: str,
) -> None:
    for key, value in env.items():
        if value is None:
            monkeypatch.delenv(key)
        else:
            monkeypatch.setenv(key, value)
    result = run("--json", *args)
    assert (result.exit_code, result.stdout, result.stderr) == (1, "", error_text(cause, hint))


def test_discover_bad_devices_flag_is_a_usage_error(node_env: dict[str, str], fp: Any) -> None:
    result = run("--json", "--devices", "0-99")
    assert (result.exit_code, result.stdout, result.stderr) == (
        2, "", error_text("--devices='0-99': device id 64 is above 63",
                          "physical device ids run from 0 to 63"))


def test_discover_device_without_ip_exits_1_quoting_the_tool(
    node_env: dict[str, str], fp: Any, hccn_capture: Captures,
) -> None:
    fake_ips(fp, hccn_capture("kg-npu_info.txt"), range(3))
    result = run("--devices", "0-2")
    assert (result.exit_code, result.stdout) == (1, "")
    assert result.stderr == error_text(
        "device 2 has no usable RoCE IP (no address): `hccn_tool -i 2 -ip -g` printed nothing",
        "set it with `hccn_tool -i 2 -ip -s address <ip> netmask <mask>` "
        "or add address_2= to /etc/hccn.conf")


@pytest.mark.parametrize(
    ("printed", "cause"),
    [
        ({0: "ipaddr:10.0.0.1\n", 1: "ipaddr:10.0.0.1\n"},
         "devices 0 and 1 share the IP 10.0.0.1 (hccn_tool, hccn_tool)"),
        ({0: "ipaddr:10.0.0.1\n", 1: "ipaddr:2001:db8::1\n"},
         "devices mix IPv4 and IPv6 addresses (0=10.0.0.1, 1=2001:db8::1)"),
        ({0: "ipaddr:10.0.0.1\n", 1: "ipaddr:-1\n"},
         "device 1 has no usable RoCE IP (failed-query sentinel '-1' from hccn_tool): "
         '`hccn_tool -i 1 -ip -g` printed "ipaddr:-1"'),
    ],
)
def test_discover_invalid_device_ips_exit_1(
    node_env: dict[str, str], fp: Any, printed: dict[int, str], cause: str
) -> None:
    for i, text in printed.items():
        fp.register([HCCN, "-i", str(i), "-ip", "-g"], stdout=text)
        fp.register([HCCN, "-i", str(i), "-ip", "-inet6", "-g"], stdout="")
    result = run("--devices", "0,1")
    assert (result.exit_code, result.stdout) == (1, "")
    assert result.stderr.splitlines()[0] == f"ascend-node: error: {cause}"


def test_discover_tool_timeout_exits_1_naming_the_command(
    node_env: dict[str, str], fp: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    import subprocess

    def hang(process: Any) -> None:
        raise subprocess.TimeoutExpired(process.args, 4)

    monkeypatch.setenv("ASCEND_NODE_TOOL_TIMEOUT", "4")
    fp.register([HCCN, "-i", "0", "-ip", "-g"], callback=hang)
    result = run("--devices", "0")
    assert (result.exit_code, result.stdout) == (1, "")
    assert result.stderr.splitlines()[0] == (
        f"ascend-node: error: `{HCCN} -i 0 -ip -g` did not finish within 4 s, and "
        f"{node_env['ASCEND_NODE_HCCN_CONF']} has no address_0= to fall back on")


def test_discover_hccn_tool_flag_wins_over_environment(
    node_env: dict[str, str], fp: Any, hccn_capture: Captures
) -> None:
    other = "/srv/tools/hccn_tool"
    fake_ips(fp, hccn_capture("a2-worker-npu_info.txt"), range(1), tool=other)
    result = run("--json", "--devices", "0", "--hccn-tool", other)
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout)["sources"]["hccn_tool"] == other


def test_discover_unknown_option_is_a_usage_error(node_env: dict[str, str]) -> None:
    result = run("--bogus")
    assert result.exit_code == 2
    assert "--bogus" in result.stderr
    assert result.stdout == ""


def test_discover_reports_the_a3_super_pod_and_the_table_source(
    node_env: dict[str, str], fp: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # An A3 node with 16 devices; npu-smi output written from the facts (fixtures/npu-smi).
    npu_smi = Path(__file__).parent.parent / "fixtures" / "npu-smi"
    monkeypatch.setenv("ASCEND_VISIBLE_DEVICES", "0-15")
    hccl = tmp_path / "mc" / "hccl.json"
    hccl.parent.mkdir()
    hccl.write_text('{"status": "initializing"}')
    monkeypatch.setenv("ASCEND_NODE_HCCL_JSON", str(hccl))
    fp.register([NPU_SMI, "info", "-m"], stdout=(npu_smi / "a3-info-m.txt").read_text())
    for d in range(16):
        fp.register([NPU_SMI, "info", "-t", "spod-info", "-i", str(d // 2), "-c", str(d % 2)],
                    stdout=f"\tSDID                           : {300 + d}\n"
                           "\tSuper Pod ID                   : 4\n")
        fp.register([HCCN, "-i", str(d), "-ip", "-g"], stdout=f"ipaddr:10.30.0.{d + 1}\n",
                    occurrences=2)
    result = run("--json")
    assert (result.exit_code, result.stderr) == (0, "")
    doc = json.loads(result.stdout)
    assert [d["super_device_id"] for d in doc["devices"]] == list(range(300, 316))
    assert doc["table"] == {
        "source": "mindcluster", "source_why": f"auto: MindCluster's {hccl} exists",
        "hccl_json": str(hccl), "version_setting": "auto", "super_pod_id": "4",
        "super_pod": "super pod 4 (npu-smi info -t spod-info)",
    }
    forced = run("--json", "--table-source", "volume", "--table-version", "1.0")
    assert forced.exit_code == 0, forced.stderr
    table = json.loads(forced.stdout)["table"]
    assert (table["source"], table["source_why"]) == ("volume", "--table-source volume")
    assert (table["super_pod_id"], table["super_pod"]) == (None, "not asked (--table-version 1.0)")
