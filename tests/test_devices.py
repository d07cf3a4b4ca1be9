"""Contract of ascend_node.discover.devices (and the tool runner under it).

Parsers run against real captures (fixtures/hccn/); every tool call is faked with
pytest-subprocess using those captures, except the tests that prove the real
`run_tool` path (a real executable script) and its timeout.
"""

from __future__ import annotations

import subprocess
import threading
from pathlib import Path
from typing import Any, Callable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ascend_node.discover.devices import (
    Device,
    check_device_ips,
    enumerate_devices,
    parse_davinci_names,
    parse_device_list,
    parse_hccn_conf,
    parse_hccn_ip,
    parse_link_status,
    parse_net_health,
    parse_npu_smi_mapping,
    parse_tls_switch,
    query_ips,
)
from ascend_node.errors import AscendNodeError, ConfigError, DeviceError, ToolError, UsageError
from ascend_node.tools import ToolResult, run_tool

Captures = Callable[[str], "dict[str, str]"]
HCCN = "/usr/local/Ascend/driver/tools/hccn_tool"
NPU_SMI = "/usr/local/bin/npu-smi"
A2 = "a2-worker-npu_info.txt"
KG = "kg-npu_info.txt"


def ip_cmd(dev_id: int, tool: str = HCCN) -> list[str]:
    return [tool, "-i", str(dev_id), "-ip", "-g"]


def ip6_cmd(dev_id: int, tool: str = HCCN) -> list[str]:
    """Asked only of a device whose `-ip -g` printed no address."""
    return [tool, "-i", str(dev_id), "-ip", "-inet6", "-g"]


# ------------------------------------------------------------------ parsers on captures


@pytest.mark.parametrize("dev_id", range(8))
def test_parse_hccn_ip_reads_every_device_of_the_a2_capture(
    hccn_capture: Captures, dev_id: int
) -> None:
    text = hccn_capture(A2)[f"hccn_tool -i {dev_id} -ip -g"]
    assert parse_hccn_ip(text) == (f"10.10.0.1{dev_id}", "255.255.255.0")


@pytest.mark.parametrize(
    ("dev_id", "expected"),
    [(0, ("192.161.200.10", "255.255.255.0")), (1, ("192.161.201.10", "255.255.255.0")),
     (2, ("", ""))],  # device 2 printed nothing at all: no IP configured
)
def test_parse_hccn_ip_on_the_kg_capture_including_a_device_without_ip(
    hccn_capture: Captures, dev_id: int, expected: tuple[str, str]
) -> None:
    assert parse_hccn_ip(hccn_capture(KG)[f"hccn_tool -i {dev_id} -ip -g"]) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # Found by prefix, not by line position; tolerant of spaces and CRLF.
        ("netmask:255.255.0.0\nipaddr:29.1.137.205\n", ("29.1.137.205", "255.255.0.0")),
        ("ipaddr : 10.0.0.1 \r\nnetmask : 255.255.255.0\r\n", ("10.0.0.1", "255.255.255.0")),
        ("some banner\nipaddr:10.0.0.1\n", ("10.0.0.1", "")),
        ("dev_id:0, get ip address failed\n", ("", "")),
        ("", ("", "")),
    ],
)
def test_parse_hccn_ip_variants(text: str, expected: tuple[str, str]) -> None:
    assert parse_hccn_ip(text) == expected


def test_parse_npu_smi_mapping_on_the_910a_capture(hccn_capture: Captures) -> None:
    assert parse_npu_smi_mapping(hccn_capture(KG)["npu-smi info -m"]) == tuple(range(8))


def test_parse_npu_smi_mapping_prefers_phy_id_and_skips_mcu_rows() -> None:
    # A3 layout: `Chip Phy-ID` before `Chip Name`; the Mcu row has `-` ids (Ascend/mind-cluster
    # component/ascend-faultdiag/.../ascend_fd_tk/core/common/chip_generation.py).
    pad = " " * 24
    rows = [["NPU ID", "Chip ID", "Chip Logic ID", "Chip Phy-ID", "Chip Name"]]
    rows += [[str(n), str(c), str(2 * n + c), str(2 * n + c + 16), "Ascend910"]
             for n in range(2) for c in range(2)]
    rows += [["0", "2", "-", "-", "Mcu"]]
    text = "\n".join("\t" + pad.join(r) for r in rows) + "\n"
    assert parse_npu_smi_mapping(text) == (16, 17, 18, 19)


def test_parse_npu_smi_mapping_ascend950_layout_without_logic_id() -> None:
    text = ("\tNPU ID    Slot ID    Chip ID    Chip Phy-ID    Chip Name\n"
            "\t0         0          0          3              Ascend950\n")
    assert parse_npu_smi_mapping(text) == (3,)


@pytest.mark.parametrize("text", ["", "npu-smi: command failed\n", "\tNPU ID  Chip ID\n\t0  0\n"])
def test_parse_npu_smi_mapping_without_a_chip_table_finds_nothing(text: str) -> None:
    assert parse_npu_smi_mapping(text) == ()


def test_parse_net_health_on_the_capture(hccn_capture: Captures) -> None:
    assert parse_net_health(hccn_capture(KG)["hccn_tool -i 0 -net_health -g"]) == "Socket failed"


def test_link_status_is_not_read_from_link_stat_history(hccn_capture: Captures) -> None:
    # `-link_stat -g` holds LINK UP/DOWN *records*; only `-link -g` says the current state.
    assert parse_link_status(hccn_capture(A2)["hccn_tool -i 0 -link_stat -g"]) is None
    assert parse_link_status("link status: UP\n") == "UP"
    assert parse_link_status("link status: down\n") == "DOWN"


def test_parse_tls_switch_on_the_documented_line() -> None:
    line = ("dev_id:0, tls switch[0](0:disable, 1:enable), tls preconfigured[1](0:non-preset, "
            "1:preset), tls alarm time threshold[60]days\n")
    assert parse_tls_switch(line) == 0
    assert parse_tls_switch("nothing here") is None


def test_parse_hccn_conf_keys_by_physical_id() -> None:
    text = ("address_0=29.1.137.205\nnetmask_0=255.255.0.0\nnetdetect_0=29.1.0.1\n"
            "gateway_0=29.1.0.1\nsend_arp_status_0=1\ntls_enable_0=0\n"
            "# comment\n\naddress_12 = 29.1.137.217 \n")
    assert parse_hccn_conf(text) == {
        0: {"address": "29.1.137.205", "netmask": "255.255.0.0", "netdetect": "29.1.0.1",
            "gateway": "29.1.0.1", "send_arp_status": "1", "tls_enable": "0"},
        12: {"address": "29.1.137.217"},
    }


def test_parse_davinci_names_takes_only_numbered_devices() -> None:
    names = ["davinci_manager", "davinci12", "devmm_svm", "hisi_hdc", "davinci0", "davinci3",
             "davinci", "davinci99", "xdavinci1"]
    assert parse_davinci_names(names) == (0, 3, 12)


# ------------------------------------------------------------------ device lists


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ("0,1,2,3", (0, 1, 2, 3)),
        ("0-7", tuple(range(8))),
        ("Ascend910-0,Ascend910-1", (0, 1)),  # Ascend Docker Runtime's form
        ("Ascend910B-6,Ascend910B-2", (2, 6)),
        (" 4 , 0-1 ,Ascend910-9", (0, 1, 4, 9)),
        ("3,3,1-3", (1, 2, 3)),
        ("0 - 15", tuple(range(16))),
        ("63", (63,)),
    ],
)
def test_parse_device_list_accepts_real_forms(spec: str, expected: tuple[int, ...]) -> None:
    assert parse_device_list(spec, "ASCEND_VISIBLE_DEVICES") == expected


@pytest.mark.parametrize(
    ("spec", "cause"),
    [
        ("", "--devices='' lists no devices"),
        ("  ", "--devices='  ' lists no devices"),
        ("7-0", "--devices='7-0': range '7-0' runs backwards"),
        ("0,,1", "--devices='0,,1': '' is not a device id, range or AscendXXX-N name"),
        ("npu0", "--devices='npu0': 'npu0' is not a device id, range or AscendXXX-N name"),
        ("-1", "--devices='-1': '-1' is not a device id, range or AscendXXX-N name"),
        ("all", "--devices='all': 'all' is not a device id, range or AscendXXX-N name"),
        ("64", "--devices='64': device id 64 is above 63"),
        ("0-99", "--devices='0-99': device id 64 is above 63"),
    ],
)
def test_parse_device_list_rejects_with_the_value(spec: str, cause: str) -> None:
    with pytest.raises(UsageError) as err:  # from the flag: a usage error (2)
        parse_device_list(spec)
    assert err.value.cause == cause
    assert err.value.exit_code == 2
    with pytest.raises(ConfigError) as env_err:  # from the environment: configuration (1)
        parse_device_list(spec, "ASCEND_VISIBLE_DEVICES")
    assert env_err.value.cause == cause.replace("--devices", "ASCEND_VISIBLE_DEVICES", 1)
    assert env_err.value.exit_code == 1


# ------------------------------------------------------------------ validation


def dev(dev_id: int, ip: str, source: str = "hccn_tool") -> Device:
    return Device(dev_id, ip, "255.255.255.0", source)


@pytest.mark.parametrize(
    ("devices", "raw", "cause"),
    [
        ([dev(0, "10.0.0.1"), dev(2, "")], {2: ""},
         "device 2 has no usable RoCE IP (no address): `hccn_tool -i 2 -ip -g` printed nothing"),
        ([dev(0, "-1")], {0: "ipaddr:-1\n"},
         "device 0 has no usable RoCE IP (failed-query sentinel '-1' from hccn_tool): "
         "`hccn_tool -i 0 -ip -g` printed \"ipaddr:-1\""),
        ([dev(1, "0.0.0.0")], {1: "ipaddr:0.0.0.0\nnetmask:0.0.0.0\n"},
         "device 1 has no usable RoCE IP (unspecified address '0.0.0.0' from hccn_tool): "
         "`hccn_tool -i 1 -ip -g` printed \"ipaddr:0.0.0.0 | netmask:0.0.0.0\""),
        ([dev(3, "169.254.3.3")], {3: "ipaddr:169.254.3.3\n"},
         "device 3 has no usable RoCE IP (link-local address '169.254.3.3' from hccn_tool): "
         "`hccn_tool -i 3 -ip -g` printed \"ipaddr:169.254.3.3\""),
        ([dev(4, "fe80::4", "/etc/hccn.conf")], {4: ""},
         "device 4 has no usable RoCE IP (link-local address 'fe80::4' from /etc/hccn.conf): "
         "`hccn_tool -i 4 -ip -g` printed nothing"),
        ([dev(5, "127.0.0.1")], {5: "ipaddr:127.0.0.1\n"},
         "device 5 has no usable RoCE IP (loopback address '127.0.0.1' from hccn_tool): "
         "`hccn_tool -i 5 -ip -g` printed \"ipaddr:127.0.0.1\""),
        ([dev(6, "10.0.0.300")], {6: "ipaddr:10.0.0.300\n"},
         "device 6 has no usable RoCE IP (not an IPv4/IPv6 address '10.0.0.300' from "
         "hccn_tool): `hccn_tool -i 6 -ip -g` printed \"ipaddr:10.0.0.300\""),
        ([dev(0, "10.0.0.1"), dev(1, "10.0.0.1", "/etc/hccn.conf")], {},
         "devices 0 and 1 share the IP 10.0.0.1 (hccn_tool, /etc/hccn.conf)"),
        ([dev(0, "2001:db8::1"), dev(1, "2001:0db8:0::1")], {},
         "devices 0 and 1 share the IP 2001:0db8:0::1 (hccn_tool, hccn_tool)"),
        ([dev(0, "10.0.0.1"), dev(1, "2001:db8::2")], {},
         "devices mix IPv4 and IPv6 addresses (0=10.0.0.1, 1=2001:db8::2)"),
    ],
)
def test_check_device_ips_rejects_naming_the_device_and_what_it_printed(
    devices: list[Device], raw: dict[int, str], cause: str
) -> None:
    with pytest.raises(DeviceError) as err:
        check_device_ips(devices, raw)
    assert err.value.cause == cause
    assert err.value.exit_code == 1
    assert err.value.hint


def test_check_device_ips_accepts_a_real_node(hccn_capture: Captures) -> None:
    blocks = hccn_capture(A2)
    raw = {i: blocks[f"hccn_tool -i {i} -ip -g"] for i in range(8)}
    devices = [dev(i, parse_hccn_ip(raw[i])[0]) for i in range(8)]
    check_device_ips(devices, raw)  # no exception
    check_device_ips([dev(0, "2001:db8::1"), dev(1, "2001:db8::2")], {})


# ------------------------------------------------------------------ enumeration


def test_enumerate_prefers_explicit_then_visible_then_dev_then_npu_smi(
    tmp_path: Path, fp: Any, hccn_capture: Captures
) -> None:
    (tmp_path / "davinci5").touch()
    (tmp_path / "davinci_manager").touch()
    env = {"ASCEND_VISIBLE_DEVICES": "Ascend910-2,Ascend910-3"}
    got = enumerate_devices("0-1", env, NPU_SMI, 1.0, dev_dir=str(tmp_path))
    assert (got.ids, got.source) == ((0, 1), "--devices")
    got = enumerate_devices("0,4", env, NPU_SMI, 1.0, str(tmp_path), "ASCEND_NODE_DEVICES")
    assert (got.ids, got.source) == ((0, 4), "ASCEND_NODE_DEVICES")
    got = enumerate_devices(None, env, NPU_SMI, 1.0, dev_dir=str(tmp_path))
    assert (got.ids, got.source) == ((2, 3), "ASCEND_VISIBLE_DEVICES")
    got = enumerate_devices(None, {}, NPU_SMI, 1.0, dev_dir=str(tmp_path))
    assert (got.ids, got.source) == ((5,), f"{tmp_path}/davinci*")
    fp.register([NPU_SMI, "info", "-m"], stdout=hccn_capture(KG)["npu-smi info -m"])
    got = enumerate_devices(None, {}, NPU_SMI, 1.0, dev_dir=str(tmp_path / "empty"))
    assert (got.ids, got.source) == (tuple(range(8)), "npu-smi info -m")
    assert fp.call_count([NPU_SMI, "info", "-m"]) == 1


def test_enumerate_names_the_setting_it_rejects(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as err:
        enumerate_devices(None, {"ASCEND_VISIBLE_DEVICES": "0,x"}, NPU_SMI, 1.0, str(tmp_path))
    assert err.value.cause == (
        "ASCEND_VISIBLE_DEVICES='0,x': 'x' is not a device id, range or AscendXXX-N name")
    with pytest.raises(ConfigError) as err:
        enumerate_devices("9-1", {}, NPU_SMI, 1.0, str(tmp_path), "ASCEND_NODE_DEVICES")
    assert err.value.cause == "ASCEND_NODE_DEVICES='9-1': range '9-1' runs backwards"


def test_enumerate_without_any_npu_says_what_it_tried(tmp_path: Path, fp: Any) -> None:
    fp.register([NPU_SMI, "info", "-m"], stdout="", stderr="dcmi init failed\n", returncode=255)
    with pytest.raises(DeviceError) as err:
        enumerate_devices(None, {}, NPU_SMI, 1.0, dev_dir=str(tmp_path))
    assert err.value.cause == (
        f"no NPU visible: `{NPU_SMI} info -m` listed no chips "
        '(exit 255, printed "dcmi init failed")')


def test_enumerate_when_npu_smi_is_missing(tmp_path: Path) -> None:
    missing = str(tmp_path / "bin" / "npu-smi")
    with pytest.raises(DeviceError) as err:
        enumerate_devices(None, {}, missing, 1.0, dev_dir=str(tmp_path))
    assert err.value.cause == (
        f"no NPU visible: ASCEND_VISIBLE_DEVICES unset, no {tmp_path}/davinciN, "
        f"and `{missing}` not found")


# ------------------------------------------------------------------ querying IPs


def test_query_ips_through_run_tool_with_the_real_a2_output(
    fp: Any, hccn_capture: Captures
) -> None:
    blocks = hccn_capture(A2)
    for i in range(8):
        fp.register(ip_cmd(i), stdout=blocks[f"hccn_tool -i {i} -ip -g"])
    devices, raw = query_ips(range(8), HCCN, 2.0, hccn_conf=None)
    assert devices == [Device(i, f"10.10.0.1{i}", "255.255.255.0", "hccn_tool")
                       for i in range(8)]
    assert raw == {i: blocks[f"hccn_tool -i {i} -ip -g"] for i in range(8)}
    assert all(fp.call_count(ip_cmd(i)) == 1 for i in range(8))


def test_query_ips_falls_back_to_hccn_conf_for_a_device_without_ip(
    fp: Any, hccn_capture: Captures, tmp_path: Path
) -> None:
    blocks = hccn_capture(KG)
    for i in range(3):
        fp.register(ip_cmd(i), stdout=blocks[f"hccn_tool -i {i} -ip -g"])
    fp.register(ip6_cmd(2), stdout="")
    conf = tmp_path / "hccn.conf"
    # hccn.conf is stale for device 0: the live tool value wins.
    conf.write_text("address_0=1.1.1.1\naddress_2=192.161.202.10\nnetmask_2=255.255.255.0\n")
    devices, _ = query_ips([0, 1, 2], HCCN, 2.0, hccn_conf=str(conf))
    assert devices == [
        Device(0, "192.161.200.10", "255.255.255.0", "hccn_tool"),
        Device(1, "192.161.201.10", "255.255.255.0", "hccn_tool"),
        Device(2, "192.161.202.10", "255.255.255.0", str(conf)),
    ]


def test_query_ips_device_without_ip_anywhere_is_rejected_by_check(
    fp: Any, hccn_capture: Captures, tmp_path: Path
) -> None:
    blocks = hccn_capture(KG)
    for i in range(3):
        fp.register(ip_cmd(i), stdout=blocks[f"hccn_tool -i {i} -ip -g"])
    fp.register(ip6_cmd(2), stdout="")
    devices, raw = query_ips([0, 1, 2], HCCN, 2.0, hccn_conf=str(tmp_path / "absent.conf"))
    assert devices[2] == Device(2, "", "", "hccn_tool")
    with pytest.raises(DeviceError) as err:
        check_device_ips(devices, raw)
    assert err.value.cause == (
        "device 2 has no usable RoCE IP (no address): `hccn_tool -i 2 -ip -g` printed nothing")


def test_query_ips_tool_failure_falls_back_or_names_the_command(tmp_path: Path) -> None:
    def broken(argv: list[str], timeout: float) -> ToolResult:
        raise ToolError(f"`{' '.join(argv)}` did not finish within {timeout:g} s", "hint")

    conf = tmp_path / "hccn.conf"
    conf.write_text("address_0=29.1.137.205\nnetmask_0=255.255.0.0\n")
    devices, _ = query_ips([0], HCCN, 3.0, hccn_conf=str(conf), runner=broken)
    assert devices == [Device(0, "29.1.137.205", "255.255.0.0", str(conf))]
    with pytest.raises(ToolError) as err:
        query_ips([0, 1], HCCN, 3.0, hccn_conf=str(conf), runner=broken)
    assert err.value.cause == (
        f"`{HCCN} -i 1 -ip -g` did not finish within 3 s, and {conf} has no address_1= "
        "to fall back on")


class InFlight:
    """A fake runner that counts concurrent calls; a barrier makes overlap certain."""

    def __init__(self, parties: int) -> None:
        self.lock = threading.Lock()
        self.now = 0
        self.peak = 0
        self.barrier = threading.Barrier(parties, timeout=10) if parties > 1 else None

    def __call__(self, argv: list[str], timeout: float) -> ToolResult:
        with self.lock:
            self.now += 1
            self.peak = max(self.peak, self.now)
        try:
            if self.barrier is not None:
                self.barrier.wait()  # breaks (test fails) if calls never overlap
            return ToolResult(tuple(argv), 0, f"ipaddr:10.1.0.{argv[2]}\n", "")
        finally:
            with self.lock:
                self.now -= 1


@pytest.mark.parametrize(("bound", "count"), [(4, 8), (16, 16), (2, 6), (16, 5)])
def test_query_ips_runs_concurrently_within_the_pool_bound(bound: int, count: int) -> None:
    # The barrier only opens when min(bound, count) calls are in flight together: a
    # sequential loop breaks it, and a pool wider than the bound shows up in `peak`.
    runner = InFlight(min(bound, count))
    devices, _ = query_ips(range(count), HCCN, 1.0, None, max_workers=bound, runner=runner)
    assert [d.ip for d in devices] == [f"10.1.0.{i}" for i in range(count)]
    assert runner.peak == min(bound, count)
    assert 1 < runner.peak <= bound


def test_query_ips_with_one_worker_is_sequential() -> None:
    runner = InFlight(1)
    query_ips(range(8), HCCN, 1.0, None, max_workers=1, runner=runner)
    assert runner.peak == 1


# ------------------------------------------------------------------ run_tool


def test_run_tool_timeout_is_a_tool_error_naming_the_command(fp: Any) -> None:
    def hang(process: Any) -> None:
        raise subprocess.TimeoutExpired(process.args, 0.5)

    fp.register(ip_cmd(3), callback=hang)
    with pytest.raises(ToolError) as err:
        run_tool(ip_cmd(3), timeout=0.5)
    assert err.value.cause == f"`{HCCN} -i 3 -ip -g` did not finish within 0.5 s"
    assert "ASCEND_NODE_TOOL_TIMEOUT" in err.value.hint


def test_run_tool_really_stops_a_hung_tool(tmp_path: Path) -> None:
    tool = tmp_path / "hccn_tool"
    tool.write_text("#!/bin/sh\nexec sleep 30\n")
    tool.chmod(0o755)
    with pytest.raises(ToolError) as err:
        run_tool([str(tool), "-i", "0", "-ip", "-g"], timeout=0.2)
    assert err.value.cause == f"`{tool} -i 0 -ip -g` did not finish within 0.2 s"


def test_run_tool_real_process_output_and_exit_code(tmp_path: Path) -> None:
    tool = tmp_path / "hccn_tool"
    tool.write_text("#!/bin/sh\necho \"ipaddr:10.0.0.$2\"\necho oops >&2\nexit 3\n")
    tool.chmod(0o755)
    res = run_tool([str(tool), "-i", "7", "-ip", "-g"], timeout=5)
    assert (res.returncode, res.stdout, res.stderr) == (3, "ipaddr:10.0.0.7\n", "oops\n")


def test_run_tool_stdin_is_the_given_text_or_empty() -> None:
    # A tool that reads stdin must not wait on the agent's terminal.
    assert run_tool(["/bin/sh", "-c", "cat"], timeout=5, input_text="hi\n").stdout == "hi\n"
    assert run_tool(["/bin/sh", "-c", "cat"], timeout=5).stdout == ""
    res = run_tool(["/bin/sh", "-c", 'echo "$X"'], timeout=5, env={"X": "from-env"})
    assert res.stdout == "from-env\n"


@pytest.mark.parametrize("mode", [None, 0o644])
def test_run_tool_missing_or_not_executable(tmp_path: Path, mode: Any) -> None:
    tool = tmp_path / "hccn_tool"
    if mode is not None:
        tool.write_text("#!/bin/sh\n")
        tool.chmod(mode)
    with pytest.raises(ToolError) as err:
        run_tool([str(tool)], timeout=1)
    expected = f"`{tool}` not found" if mode is None else f"`{tool}` is not executable"
    assert err.value.cause.startswith(expected)


# ------------------------------------------------------------------ never crash


NEAR_VALID = st.lists(st.sampled_from([*"0123456789,- ", "Ascend910-", "B"])).map("".join)


@settings(max_examples=400, deadline=None)
@given(st.one_of(st.text(), NEAR_VALID))
def test_parse_device_list_returns_ids_or_config_error(spec: str) -> None:
    try:
        ids = parse_device_list(spec)
    except UsageError as exc:
        assert exc.cause.startswith(f"--devices={spec!r}")
        return
    assert ids
    assert ids == tuple(sorted(set(ids)))
    assert all(0 <= i <= 63 for i in ids)


@settings(max_examples=200, deadline=None)
@given(st.text())
def test_text_parsers_never_crash(text: str) -> None:
    ip, mask = parse_hccn_ip(text)
    assert "\n" not in ip and "\n" not in mask
    assert all(0 <= i <= 63 for i in parse_npu_smi_mapping(text))
    assert all(isinstance(k, int) for k in parse_hccn_conf(text))
    parse_link_status(text)
    parse_net_health(text)
    parse_tls_switch(text)
    parse_davinci_names(text.split())


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 63), st.one_of(
    st.text(max_size=40), st.ip_addresses().map(str))), max_size=6))
def test_check_device_ips_accepts_or_raises_device_error(pairs: list[tuple[int, str]]) -> None:
    devices = [Device(i, ip, "", "hccn_tool") for i, ip in pairs]
    try:
        check_device_ips(devices, {i: ip for i, ip in pairs})
    except AscendNodeError as exc:
        assert isinstance(exc, DeviceError)
        assert exc.cause.startswith("device")


def test_query_ips_reads_an_ipv6_only_device_from_the_inet6_query(fp: Any) -> None:
    # `ipv6_address:` / `prefix_length:`, as Ascend/mind-cluster's faultdiag parses them
    # (component/ascend-faultdiag/.../ascend_fd/pkg/parse/root_cluster/rc_parse_job.py).
    fp.register(ip_cmd(0), stdout="\n")
    fp.register(ip6_cmd(0), stdout="ipv6_address:2001:db8::10\nprefix_length:64\n")
    devices, raw = query_ips([0], HCCN, 2.0, hccn_conf=None)
    assert devices == [Device(0, "2001:db8::10", "64", "hccn_tool")]
    assert "ipv6_address:2001:db8::10" in raw[0]


@pytest.mark.parametrize("printed", ["", "Error: invalid device id 1 or command -ip"])
def test_a_tool_that_fails_is_named_with_its_exit_status_not_as_a_missing_address(
    fp: Any, printed: str
) -> None:
    """`--hccn-tool /bin/false`, a driver that is not mounted: the tool failed (issue 27);
    the message names its exit status and the hint the tool, not `set an IP`."""
    fp.register(ip_cmd(1), stdout=printed, returncode=255)
    fp.register(ip6_cmd(1), stdout=printed, returncode=255)
    devices, raw = query_ips([1], HCCN, 2.0, hccn_conf=None)
    with pytest.raises(DeviceError) as err:
        check_device_ips(devices, raw)
    assert err.value.cause.startswith(
        "device 1 has no RoCE IP: `hccn_tool -i 1 -ip -g` failed with exit 255 and printed "
        + (f'"{printed}"' if printed else "nothing")), err.value.cause
    assert "the tool failed" in err.value.hint and "set it with" not in err.value.hint
