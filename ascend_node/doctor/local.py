"""Checks of this node's own NPUs: visible, addressed, linked, healthy, one TLS switch.

The driver tools are asked once per (device, probe), concurrently and each call with its own
timeout (`query_device_states`); the `check_*` functions then judge the gathered
`DeviceState`s and never call a tool themselves.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Optional

from ascend_node.discover import devices as dev
from ascend_node.discover.hccn import HEALTHY_NET as HEALTHY_NET
from ascend_node.discover.hccn import DeviceState as DeviceState
from ascend_node.discover.hccn import printed as printed
from ascend_node.discover.hccn import query_device_states as query_device_states
from ascend_node.discover.net_health import explain as explain_health
from ascend_node.discover.netcheck import family, parse_ip, unusable_reason
from ascend_node.doctor.report import CheckResult, Finding, id_list, skip, verdict

TLS_FIX = ("set one value on every card of every node, e.g. `hccn_tool -i <id> -tls -s "
           "enable 0` for each device (MindIE's FAQ); HCCL refuses mixed TLS switches (EI0016)")
NO_DEVICES = "no devices to check (see device.visible)"
NO_ADDRESSES = "no usable device address to compare (see device.ip)"
IP_FIX = ("give the device a RoCE address on the host (hccn_tool's IP setting, or "
          "address_{i}=/netmask_{i}= in /etc/hccn.conf applied by the driver)")


def read_hccn_conf(path: Path) -> tuple[Optional[dict[int, dict[str, str]]], str]:
    """(entries, note): None when the file is absent or unreadable, with why."""
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            return dev.parse_hccn_conf(fh.read()), ""
    except FileNotFoundError:
        return None, f"{path} is not present in this container"
    except OSError as exc:
        return None, f"{path} cannot be read: {exc.strerror or exc}"


def check_visible(
    used: Optional[dev.DeviceIds], error: str, env_ids: Optional[Sequence[int]],
    dev_ids: Sequence[int], dev_dir: str = "/dev",
) -> CheckResult:
    """`device.visible`: the devices in use exist as /dev/davinciN and are the ones the
    runtime was asked for (ASCEND_VISIBLE_DEVICES)."""
    cid = "device.visible"
    fix_mount = ("the container runtime did not mount them: check the pod's NPU resource "
                 "request and ASCEND_VISIBLE_DEVICES")
    if used is None:
        return CheckResult(cid, "fail", error,
                           "request NPU resources for the pod, or pass --devices")
    findings: list[Finding] = []
    ids = list(used.ids)
    if dev_ids:
        absent = sorted(set(ids) - set(dev_ids))
        if absent:
            findings.append(Finding("fail", f"devices {id_list(absent)} (from {used.source}) "
                                    f"have no {dev_dir}/davinciN", fix_mount))
    if env_ids is not None and used.source != "ASCEND_VISIBLE_DEVICES":
        outside = sorted(set(ids) - set(env_ids))
        if outside:
            findings.append(Finding(
                "fail", f"devices {id_list(outside)} (from {used.source}) are not in "
                f"ASCEND_VISIBLE_DEVICES={id_list(env_ids)}",
                "use only the NPUs the runtime gave this container"))
    if env_ids is not None and dev_ids:
        extra = sorted(set(dev_ids) - set(env_ids))
        if extra:
            findings.append(Finding(
                "warn", f"{dev_dir} also has davinci{id_list(extra)}, which "
                f"ASCEND_VISIBLE_DEVICES={id_list(env_ids)} does not list (a privileged "
                "container sees every NPU of the host)",
                "give the pod only its own NPUs, or pass --devices"))
    seen = (f"{dev_dir}/davinci{id_list(dev_ids)}" if dev_ids
            else f"no {dev_dir}/davinciN to compare with")
    return verdict(cid, findings,
                   f"{len(ids)} devices {id_list(ids)} (from {used.source}); {seen}")


def check_ips(states: Sequence[DeviceState]) -> CheckResult:
    """`device.ip`: every device has a usable RoCE address and a netmask."""
    if not states:
        return skip("device.ip", NO_DEVICES)
    findings = []
    for s in states:
        i = s.device_id
        conf = f"; /etc/hccn.conf says address_{i}={s.conf_ip}" if s.conf_ip else ""
        if not s.ip:
            why = s.errors.get("ip", "no ipaddr: line")
            findings.append(Finding(
                "fail", f"device {i} has no RoCE IP: {why}{conf} (HCCL compares the table "
                "with the NIC's own address, EI0014)", IP_FIX.format(i=i)))
            continue
        reason = unusable_reason(s.ip) if s.ip != "-1" else "failed-query sentinel"
        if reason is not None:
            findings.append(Finding("fail", f"device {i} has IP {s.ip!r}: {reason}",
                                    IP_FIX.format(i=i)))
            continue
        try:
            ipaddress.ip_network(f"{s.ip}/{s.netmask}", strict=False)
        except ValueError:
            findings.append(Finding(
                "warn", f"device {i} ({s.ip}) has no valid netmask ({s.netmask!r})",
                IP_FIX.format(i=i)))
    good = [s for s in states if s.usable_ip]
    listing = ", ".join(f"{s.device_id}={_cidr(s)}" for s in good)
    return verdict("device.ip", findings, f"{len(good)} devices with IPs: {listing}")


def _cidr(s: DeviceState) -> str:
    try:
        return f"{s.ip}/{ipaddress.ip_network(f'{s.ip}/{s.netmask}', strict=False).prefixlen}"
    except ValueError:
        return s.ip


def check_unique_ips(states: Sequence[DeviceState]) -> CheckResult:
    """`device.unique_ip`: no two local devices share an address (compared as addresses)."""
    if not states:
        return skip("device.unique_ip", NO_DEVICES)
    seen: dict[Any, int] = {}
    findings = []
    for s in states:
        addr = parse_ip(s.ip) if s.usable_ip else None
        if addr is None:
            continue
        if addr in seen:
            findings.append(Finding(
                "fail", f"devices {seen[addr]} and {s.device_id} share the IP {s.ip}",
                "every NPU needs its own RoCE IP; fix the addresses on the host"))
        else:
            seen[addr] = s.device_id
    if not seen:
        return skip("device.unique_ip", NO_ADDRESSES)
    return verdict("device.unique_ip", findings, f"{len(seen)} distinct device IPs")


def check_ip_family(states: Sequence[DeviceState]) -> CheckResult:
    """`device.ip_family`: IPv4 or IPv6, not both (HCCL EI0001)."""
    fams: dict[int, list[int]] = {}
    for s in states:
        if s.usable_ip:
            fams.setdefault(family(s.ip), []).append(s.device_id)
    if len(fams) > 1:
        cause = "devices mix address families: " + "; ".join(
            f"IPv{f} on {id_list(d)}" for f, d in sorted(fams.items()))
        return CheckResult("device.ip_family", "fail", cause,
                           "give every device an address of one family (HCCL EI0001)")
    if not fams:
        return skip("device.ip_family", NO_DEVICES if not states else NO_ADDRESSES)
    return CheckResult("device.ip_family", "ok", f"IPv{next(iter(fams))}")


def check_link(states: Sequence[DeviceState]) -> CheckResult:
    """`device.link`: `hccn_tool -i N -link -g` says UP for every device."""
    if not states:
        return skip("device.link", NO_DEVICES)
    findings = []
    for s in states:
        i = s.device_id
        fix = (f"check the cable, optical module and switch port of device {i} "
               f"(its history: `hccn_tool -i {i} -link_stat -g`)")
        if s.link is None:
            findings.append(Finding("warn", f"device {i}: link status unknown: "
                                    f"{s.errors.get('link', '?')}", fix))
        elif s.link != "UP":
            findings.append(Finding("fail", f"device {i}: link status {s.link} "
                                    f"(`hccn_tool -i {i} -link -g`)", fix))
    return verdict("device.link", findings, f"{len(states)} links UP")


def check_health(states: Sequence[DeviceState]) -> CheckResult:
    """`device.net_health`: Success (or Init, which MindCluster also treats as healthy);
    every other state with its cause and remedy (`discover.net_health`), and Init with the
    reason when the detection address says why (`-netdetect -g`)."""
    if not states:
        return skip("device.net_health", NO_DEVICES)
    findings = []
    notes = []
    for s in states:
        i = s.device_id
        fix = (f"fix device {i}'s link and address first; then check its network path to the "
               f"detect address (netdetect_{i} in /etc/hccn.conf)")
        if s.health is None:
            findings.append(Finding("warn", f"device {i}: net health unknown: "
                                    f"{s.errors.get('net_health', '?')}", fix))
            continue
        cause, remedy = explain_health(s.health, i, s.netdetect)
        if s.health not in HEALTHY_NET:
            findings.append(Finding("fail", f"device {i}: net health status {s.health} "
                                    f"(`hccn_tool -i {i} -net_health -g`): {cause}",
                                    remedy or fix))
        elif s.health == "Init":
            notes.append(f"device {i} Init: {cause}")
    message = f"{len(states)} devices Success/Init"
    if notes:
        message += "; " + "; ".join(notes[:4]) + (f"; and {len(notes) - 4} more Init"
                                                  if len(notes) > 4 else "")
    return verdict("device.net_health", findings, message)


def check_tls(states: Sequence[DeviceState]) -> CheckResult:
    """`device.tls`: one TLS switch value on every local device."""
    if not states:
        return skip("device.tls", NO_DEVICES)
    findings = []
    by_value: dict[int, list[int]] = {}
    for s in states:
        if s.tls is None:
            findings.append(Finding("warn", f"device {s.device_id}: TLS switch unknown: "
                                    f"{s.errors.get('tls', '?')}", TLS_FIX))
        else:
            by_value.setdefault(s.tls, []).append(s.device_id)
    if len(by_value) > 1:
        spread = "; ".join(f"{v} on devices {id_list(d)}" for v, d in sorted(by_value.items()))
        findings.append(Finding("fail", f"TLS switch differs between devices: {spread}",
                                TLS_FIX))
    value = ", ".join(str(v) for v in sorted(by_value)) or "-"
    return verdict("device.tls", findings, f"tls switch [{value}] on every device")


def check_hccn_conf(
    states: Sequence[DeviceState], conf: Optional[Mapping[int, Mapping[str, str]]], note: str,
    conf_path: Path,
) -> CheckResult:
    """`device.hccn_conf`: /etc/hccn.conf agrees with the live addresses when present.

    A stale file is a warning, not a failure: the live value wins (HCCL compares the NIC's
    IP, EI0014 in hicann/hccl fault_diagnosis/rank_table_load_fail.md), but a
    script that reads the file (hccl_tools, HIXL) would build a wrong table from it.
    """
    if conf is None:
        return skip("device.hccn_conf", f"not checked: {note}")
    if not states:
        return skip("device.hccn_conf", NO_DEVICES)
    findings = []
    for s in states:
        i = s.device_id
        fix = (f"update address_{i}=/netmask_{i}= in {conf_path} on the host to the live "
               "values (scripts that read the file would use the stale one)")
        if s.ip and s.conf_ip and parse_ip(s.conf_ip) != parse_ip(s.ip):
            findings.append(Finding("warn", f"device {i}: {conf_path} has "
                                    f"address_{i}={s.conf_ip}, the NIC has {s.ip}", fix))
        elif s.netmask and s.conf_netmask and s.conf_netmask != s.netmask:
            findings.append(Finding("warn", f"device {i}: {conf_path} has "
                                    f"netmask_{i}={s.conf_netmask}, the NIC has {s.netmask}",
                                    fix))
    return verdict("device.hccn_conf", findings, f"{conf_path} agrees with the live addresses")
