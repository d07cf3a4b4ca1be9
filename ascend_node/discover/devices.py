"""The NPUs this container sees, by physical id, and each one's RoCE IP.

Parsers are pure and tolerant: they find values by their prefix (`ipaddr:`), never by
line position, because `hccn_tool` output varies across driver versions and prints
nothing at all for a device with no IP (a capture in Ascend/mind-cluster
component/ascend-faultdiag/test/st_module_testcase/kg_parse/npu_info_before.txt).
Callers of the vendor tools sit at the bottom of the module and query every device
concurrently: with 16 devices and a 200 ms tool, a sequential loop costs 3.2 s of every
pod start.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Callable, Optional

from ascend_node import events
from ascend_node.discover.netcheck import IPAddress, family, parse_ip, unusable_reason
from ascend_node.errors import DeviceError, ToolError, refused_value
from ascend_node.tools import ToolResult, run_tool, shown_output, which

MAX_DEVICE_ID = 63  # MindIE's device_id range [0, 63] (MindIE-LLM ranktable_config.cpp)
DEFAULT_HCCN_TOOL = "/usr/local/Ascend/driver/tools/hccn_tool"
DEFAULT_NPU_SMI = "/usr/local/bin/npu-smi"
HCCN_CONF = "/etc/hccn.conf"


@dataclass(frozen=True)
class Device:
    device_id: int
    ip: str
    netmask: str
    ip_source: str  # "hccn_tool", or the hccn.conf path the address came from


@dataclass(frozen=True)
class DeviceIds:
    ids: tuple[int, ...]
    source: str


# --------------------------------------------------------------------------- parsers


def parse_device_list(spec: str, source: str = "--devices") -> tuple[int, ...]:
    """`0,1,2,3`, `0-7`, `Ascend910-0,Ascend910-1`, or a mix; sorted, unique.

    The `Ascend910-N` form is what Ascend Docker Runtime puts in ASCEND_VISIBLE_DEVICES
    from the device plugin's annotation; N is the physical id (Ascend/mind-cluster
    docs/zh/scheduling/06_api/13_environment_variable_description.md). A refused
    list is a usage error (2) when `source` is the flag, a configuration error (1) when it
    came from the environment (`errors.refused_value`).
    """
    text = spec.strip()
    if not text:
        raise refused_value(source, f"{source}={spec!r} lists no devices",
                            "use e.g. 0-7 or 0,1,2,3")
    ids: set[int] = set()
    for raw in text.split(","):
        item = raw.strip()
        named = re.fullmatch(r"Ascend[0-9A-Za-z]*-([0-9]{1,3})", item)
        if named:
            ids.add(int(named.group(1)))
            continue
        rng = re.fullmatch(r"([0-9]{1,3})\s*-\s*([0-9]{1,3})", item)
        if rng:
            lo, hi = int(rng.group(1)), int(rng.group(2))
            if lo > hi:
                raise refused_value(source,
                    f"{source}={spec!r}: range {item!r} runs backwards",
                    "write ranges low-high, e.g. 0-7",
                )
            ids.update(range(lo, hi + 1))
            continue
        if re.fullmatch(r"[0-9]{1,3}", item):
            ids.add(int(item))
            continue
        raise refused_value(source,
            f"{source}={spec!r}: {item!r} is not a device id, range or AscendXXX-N name",
            "use e.g. 0-7, 0,1,2,3 or Ascend910-0,Ascend910-1",
        )
    too_big = sorted(i for i in ids if i > MAX_DEVICE_ID)
    if too_big:
        raise refused_value(source,
            f"{source}={spec!r}: device id {too_big[0]} is above {MAX_DEVICE_ID}",
            "physical device ids run from 0 to 63",
        )
    return tuple(sorted(ids))


def parse_davinci_names(names: Sequence[str]) -> tuple[int, ...]:
    """Physical ids from `/dev` entries: `davinci3` yes, `davinci_manager` no."""
    ids = {int(m.group(1)) for n in names if (m := re.fullmatch(r"davinci([0-9]{1,3})", n))}
    return tuple(sorted(i for i in ids if i <= MAX_DEVICE_ID))


def _npu_smi_rows(text: str) -> list[dict[str, str]]:
    """Rows of `npu-smi info -m` as {header: cell}, parsed by header (the columns vary:
    Ascend/mind-cluster .../ascend_fd_tk/core/common/chip_generation.py).

    Columns are separated by two or more spaces or tabs; lines before the header are
    skipped.
    """
    header: Optional[list[str]] = None
    rows: list[dict[str, str]] = []
    for line in text.splitlines():
        cells = [c.strip() for c in re.split(r"\t+|\s{2,}", line.strip()) if c.strip()]
        if not cells:
            continue
        if header is None:
            if "NPU ID" in cells and any(c.startswith("Chip") for c in cells):
                header = cells
            continue
        rows.append(dict(zip(header, cells)))
    return rows


def _physical_id(row: Mapping[str, str]) -> Optional[int]:
    value = row.get("Chip Phy-ID") or row.get("Chip Logic ID")
    if value is not None and re.fullmatch(r"[0-9]{1,3}", value):
        number = int(value)
        return number if number <= MAX_DEVICE_ID else None
    return None


def parse_npu_smi_mapping(text: str) -> tuple[int, ...]:
    """Physical chip ids from `npu-smi info -m`, parsed by header (see `_npu_smi_rows`).

    A3 prints `Chip Phy-ID`; older cards print only `Chip Logic ID`, equal to the physical
    id on a whole node. `Mcu` rows (logic id `-`) are skipped.
    """
    ids = {pid for row in _npu_smi_rows(text) if (pid := _physical_id(row)) is not None}
    return tuple(sorted(ids))


def parse_npu_chip_map(text: str) -> dict[int, tuple[int, int]]:
    """Physical id -> (NPU ID, Chip ID) from `npu-smi info -m`: the `-i`/`-c` pair that
    `npu-smi info -t ... -i <npu> -c <chip>` takes for that device (hicann/hccl
    docs/zh/user_guide/.../rank_table_config_a3.md, spod-info).

    On A3 a module (NPU ID) holds two dies (Chip ID 0 and 1), each its own device.
    """
    out: dict[int, tuple[int, int]] = {}
    for row in _npu_smi_rows(text):
        pid = _physical_id(row)
        npu, chip = row.get("NPU ID", ""), row.get("Chip ID", "")
        if pid is None or not npu.isdigit() or not chip.isdigit():
            continue
        out.setdefault(pid, (int(npu), int(chip)))
    return out


def parse_hccn_ip(text: str) -> tuple[str, str]:
    """(ip, netmask) from `hccn_tool -i N -ip -g`; ("", "") when it printed no `ipaddr:`.

    Also reads the IPv6 form of `-ip -inet6 -g` (`ipv6_address:` / `prefix_length:`,
    Ascend/mind-cluster faultdiag rc_parse_job.py); the prefix length stands in for the netmask.
    """
    ip = netmask = ""
    for line in text.splitlines():
        key, sep, value = line.strip().partition(":")
        if not sep:
            continue
        key = key.strip().lower()
        if key in ("ipaddr", "ipv6_address") and not ip:
            ip = value.strip()
        elif key in ("netmask", "prefix_length") and not netmask:
            netmask = value.strip()
    return ip, netmask


def parse_hccn_conf(text: str) -> dict[int, dict[str, str]]:
    """`address_0=…`, `netmask_0=…` lines of /etc/hccn.conf, keyed by physical id."""
    out: dict[int, dict[str, str]] = {}
    for line in text.splitlines():
        m = re.fullmatch(r"\s*([a-z_]+?)_([0-9]{1,3})\s*=\s*(.*?)\s*", line)
        if m:
            out.setdefault(int(m.group(2)), {})[m.group(1)] = m.group(3)
    return out


def parse_link_status(text: str) -> Optional[str]:
    """`link status: UP` -> "UP" (None if absent)."""
    m = re.search(r"link status\s*:\s*(\S+)", text, re.IGNORECASE)
    return m.group(1).upper() if m else None


def parse_net_health(text: str) -> Optional[str]:
    """`net health status: Success` -> "Success" (None if absent)."""
    m = re.search(r"net health status\s*:\s*(.+)", text, re.IGNORECASE)
    return m.group(1).strip() if m else None


def parse_netdetect(text: str) -> Optional[str]:
    """`netdetect address: 11.12.165.1` -> "11.12.165.1" (None if absent; format from
    a captured `hccn_tool -i N -netdetect -g`, fixtures/hccn/a2-910b3-deploy-doc-returns.txt)."""
    m = re.search(r"netdetect address\s*:\s*(\S+)", text, re.IGNORECASE)
    return m.group(1) if m else None


def parse_tls_switch(text: str) -> Optional[int]:
    """`tls switch[0](0:disable, 1:enable)` -> 0 (None if absent)."""
    m = re.search(r"tls switch\[([0-9])\]", text)
    return int(m.group(1)) if m else None


EXIT_MARK = "[hccn_tool exit "
"""How `query_ips` notes, in the text a query printed, that the tool itself failed."""


def tool_exit(text: str) -> tuple[str, Optional[int]]:
    """(what the tool printed, its failing exit status or None) from `query_ips`'s text."""
    lines = text.splitlines()
    kept = [ln for ln in lines if not (ln.startswith(EXIT_MARK) and ln.endswith("]"))]
    codes = [ln[len(EXIT_MARK):-1] for ln in lines
             if ln.startswith(EXIT_MARK) and ln.endswith("]")]
    status = int(codes[0]) if codes and codes[0].lstrip("-").isdigit() else None
    return "\n".join(kept), status


def check_device_ips(devices: Sequence[Device], raw: Mapping[int, str]) -> None:
    """Reject what HCCL or MindIE would reject later, naming the device (step 2 of the
    chain in docs/design.md).

    `raw` holds what the tool printed for each device, quoted in the message so the
    operator sees the evidence, not our interpretation of it. Duplicates are compared
    as addresses, not strings: `2001:db8::1` and `2001:0db8::1` are one NIC address.
    """
    seen: dict[IPAddress, Device] = {}
    for dev in devices:
        text, exit_status = tool_exit(raw.get(dev.device_id, ""))
        printed = shown_output(text)
        reason = unusable_reason(dev.ip) if dev.ip != "-1" else "failed-query sentinel"
        if reason is not None and exit_status is not None and not dev.ip:
            raise DeviceError(
                f"device {dev.device_id} has no RoCE IP: `hccn_tool -i {dev.device_id} -ip -g` "
                f"failed with exit {exit_status} and printed {printed}",
                "the tool failed, not the address: run that command in the container and "
                "check the driver mounts (/usr/local/Ascend/driver) and --hccn-tool",
            )
        if reason is not None:
            value = f" {dev.ip!r} from {dev.ip_source}" if dev.ip else ""
            # The set command is the one Ascend's multi-node guides give for "配置device IP"
            # (`hccn_tool -i 0 -ip -s address 192.168.100.101 netmask 255.255.255.0`).
            raise DeviceError(
                f"device {dev.device_id} has no usable RoCE IP ({reason}{value}): "
                f"`hccn_tool -i {dev.device_id} -ip -g` printed {printed}",
                f"set it with `hccn_tool -i {dev.device_id} -ip -s address <ip> netmask <mask>` "
                f"or add address_{dev.device_id}= to /etc/hccn.conf",
            )
        addr = parse_ip(dev.ip)
        assert addr is not None  # unusable_reason accepted it
        first = seen.get(addr)
        if first is not None:
            raise DeviceError(
                f"devices {first.device_id} and {dev.device_id} share the IP {dev.ip} "
                f"({first.ip_source}, {dev.ip_source})",
                "every NPU needs its own RoCE IP; fix the addresses with hccn_tool or "
                "/etc/hccn.conf on the host",
            )
        seen[addr] = dev
    families = {family(d.ip) for d in devices}
    if len(families) > 1:
        listing = ", ".join(f"{d.device_id}={d.ip}" for d in devices)
        raise DeviceError(
            f"devices mix IPv4 and IPv6 addresses ({listing})",
            "HCCL needs one address family on every rank (EI0001)",
        )


# --------------------------------------------------------------------------- callers


def resolve_tool(configured: Optional[str], name: str, fallback: str) -> str:
    """The configured path, else `name` on PATH, else the vendor's install path."""
    if configured:
        return configured
    return which(name) or fallback


def enumerate_devices(
    explicit: Optional[str],
    environ: Mapping[str, str],
    npu_smi: str,
    tool_timeout: float,
    dev_dir: str = "/dev",
    explicit_source: str = "--devices",
) -> DeviceIds:
    """Physical ids: --devices, else ASCEND_VISIBLE_DEVICES, else /dev/davinciN, else npu-smi.

    `explicit_source` names where `explicit` came from (the flag or ASCEND_NODE_DEVICES),
    so an error quotes the setting the operator actually wrote.
    """
    if explicit:
        return DeviceIds(parse_device_list(explicit, explicit_source), explicit_source)
    visible = environ.get("ASCEND_VISIBLE_DEVICES", "").strip()
    if visible:
        ids = parse_device_list(visible, "ASCEND_VISIBLE_DEVICES")
        return DeviceIds(ids, "ASCEND_VISIBLE_DEVICES")
    try:
        names = os.listdir(dev_dir)
    except OSError:
        names = []
    ids = parse_davinci_names(names)
    if ids:
        return DeviceIds(ids, f"{dev_dir}/davinci*")
    try:
        result = run_tool([npu_smi, "info", "-m"], timeout=tool_timeout)
    except ToolError as exc:
        raise DeviceError(
            f"no NPU visible: ASCEND_VISIBLE_DEVICES unset, no {dev_dir}/davinciN, "
            f"and {exc.cause}",
            "request huawei.com/Ascend910 resources for the pod, or pass --devices",
        ) from exc
    ids = parse_npu_smi_mapping(result.stdout)
    if not ids:
        raise DeviceError(
            f"no NPU visible: `{result.command}` listed no chips "
            f"(exit {result.returncode}, printed {shown_output(result.stdout + result.stderr)})",
            "request huawei.com/Ascend910 resources for the pod, or pass --devices",
        )
    return DeviceIds(ids, "npu-smi info -m")


def query_ips(
    ids: Sequence[int],
    hccn_tool: str,
    tool_timeout: float,
    hccn_conf: Optional[str] = HCCN_CONF,
    max_workers: int = 16,
    runner: Callable[..., ToolResult] = run_tool,
) -> tuple[list[Device], dict[int, str]]:
    """Each device's IP via `hccn_tool -i <id> -ip -g`, concurrently; hccn.conf fallback.

    The live tool value is preferred: hccn.conf can be stale (vllm-project/vllm-ascend
    PR #16847; HCCL compares the live NIC IP, EI0014). The file is
    the fallback both when the tool prints no `ipaddr:` and when it cannot run at all
    (driver tools not mounted, a call that times out), as MindSpore's hccl_tools does;
    a device that neither answers is a ToolError naming its command.
    Returns the devices in `ids` order and the raw text each query printed (for messages).
    """

    def one(dev_id: int) -> tuple[int, str, str, str, Optional[ToolError]]:
        with events.phase("discovery.hccn_tool", device=dev_id) as detail:
            answer = query(dev_id)
            detail["outcome"] = ("failed" if answer[4] is not None
                                 else "ok" if answer[1] else "no ip")
            return answer

    def query(dev_id: int) -> tuple[int, str, str, str, Optional[ToolError]]:
        try:
            res = runner([hccn_tool, "-i", str(dev_id), "-ip", "-g"], timeout=tool_timeout)
        except ToolError as exc:
            return dev_id, "", "", "", exc
        ip, mask = parse_hccn_ip(res.stdout)
        printed = res.stdout + res.stderr
        if not ip and res.returncode != 0:
            # The tool failed, which is not the same as a device without an address: the
            # message must name the exit status, and the hint the tool (check_device_ips).
            printed += f"\n{EXIT_MARK}{res.returncode}]\n"
        if not ip:
            # An IPv6-only RoCE port answers only the -inet6 query.
            try:
                res6 = runner([hccn_tool, "-i", str(dev_id), "-ip", "-inet6", "-g"],
                              timeout=tool_timeout)
            except ToolError:
                res6 = None
            if res6 is not None:
                ip, mask = parse_hccn_ip(res6.stdout)
                printed += res6.stdout + res6.stderr
        return dev_id, ip, mask, printed, None

    workers = max(1, min(max_workers, len(ids)))
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="hccn") as pool:
        answers = list(pool.map(one, ids))

    conf: dict[int, dict[str, str]] = {}
    if hccn_conf and any(not ip for _, ip, _, _, _ in answers):
        try:
            with open(hccn_conf, encoding="utf-8", errors="replace") as fh:
                conf = parse_hccn_conf(fh.read())
        except OSError:
            conf = {}
    devices: list[Device] = []
    raw: dict[int, str] = {}
    for dev_id, ip, mask, printed, failure in answers:
        raw[dev_id] = printed
        if ip:
            devices.append(Device(dev_id, ip, mask, "hccn_tool"))
            continue
        entry = conf.get(dev_id, {})
        address = entry.get("address", "")
        if failure is not None and not address:
            raise ToolError(
                f"{failure.cause}, and {hccn_conf or 'no hccn.conf'} has no "
                f"address_{dev_id}= to fall back on",
                failure.hint,
            ) from failure
        source = hccn_conf if address and hccn_conf else "hccn_tool"
        devices.append(Device(dev_id, address, entry.get("netmask", ""), source))
    return devices, raw


def probe(
    dev_id: int, what: str, hccn_tool: str, tool_timeout: float,
    runner: Callable[..., ToolResult] = run_tool,
) -> ToolResult:
    """Optional probes (`-link`, `-net_health`, `-tls`) used by doctor."""
    return runner([hccn_tool, "-i", str(dev_id), f"-{what}", "-g"], timeout=tool_timeout)


def id_list(ids: Sequence[int]) -> str:
    """`0-3,6` for [0, 1, 2, 3, 6]: short enough for a one-line cause (the inverse of
    `parse_device_list`)."""
    out: list[str] = []
    run: list[int] = []
    for i in sorted(set(ids)):
        if run and i == run[-1] + 1:
            run.append(i)
            continue
        if run:
            out.append(f"{run[0]}-{run[-1]}" if len(run) > 2 else ",".join(map(str, run)))
        run = [i]
    if run:
        out.append(f"{run[0]}-{run[-1]}" if len(run) > 2 else ",".join(map(str, run)))
    return ",".join(out)
