"""`ascend-node doctor`: read-only health checks of this node and, through the shared
volume, of its peers.

Why it exists: when a multi-node job does not come up, HCCL reports a connect timeout on
some rank minutes later, and MindIE a vague "init rank table config error". The causes are
few and each is checkable from inside a container in seconds: a RoCE link that is down, a
device without an address, two devices with one address, netmasks or TLS switches that
differ between nodes, a rank table that is stale or that MindIE refuses for its mode, a
config.json that disagrees with the table, a process from the previous attempt still
holding the NPUs. Doctor runs every check, never stops at the first problem, and prints one
line per check with the exact cause and the remedy.

Shape: gathering (tool calls, file reads, the peers' facts) is kept apart from judging.
Every `check_*` function is pure over what was gathered and returns one `CheckResult`, so
each is table-tested alone; `run_doctor` gathers, calls them and never raises for a failed
check (only for settings that make checking impossible, e.g. `--peers` without a shared
directory). Its only write is this node's facts file under
`<shared>/.ascend-node/<run>/doctor/node-<g>.json` (with `--peers`).

Remedies quote `hccn_tool` commands only where a public source gives them
(ascend-facts.md); otherwise they describe the fix.
"""

from __future__ import annotations

import hashlib
import ipaddress
import json
import os
import re
import stat
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Literal, Optional, Union

from pydantic import BaseModel, ConfigDict, Field

from ascend_node import __version__
from ascend_node import devices as dev
from ascend_node.errors import AscendNodeError, ConfigError, ToolError
from ascend_node.identity import NodeIdentity, node_name
from ascend_node.netcheck import family, parse_ip, unusable_reason
from ascend_node.ranktable import Problem, local_server, validate_file
from ascend_node.rendezvous.models import AttemptDoc, OutcomeDoc
from ascend_node.rendezvous.store import (
    Invalid,
    Missing,
    RunPaths,
    Valid,
    read_bytes_nofollow,
    read_doc,
    write_doc,
)
from ascend_node.settings import Settings
from ascend_node.tools import ToolResult, run_tool

Status = Literal["ok", "warn", "fail"]
_SEVERITY: dict[str, int] = {"ok": 0, "warn": 1, "fail": 2}
EXIT_CODES: dict[str, int] = {"ok": 0, "warn": 3, "fail": 1}

PING_PAIR_LIMIT = 64
"""At most this many (local device, peer device) pings: 64 nodes x 16 NPUs would be
16,000 pairs; a deterministic sample still finds a broken switch port or plane."""
PING_WORKERS = 16
PEER_POLL = 0.2
FACTS_MAX_AGE = 600.0
"""Peer facts older than this (seconds, by the peer's clock) describe an earlier state of
the cluster; doctor waits for fresh ones and, failing that, uses them with a warning."""
HEALTHY_NET = ("Success", "Init")  # MindCluster treats both as healthy (facts §1.1)
TLS_FIX = ("set one value on every card of every node, e.g. `hccn_tool -i <id> -tls -s "
           "enable 0` for each device (MindIE's FAQ); HCCL refuses mixed TLS switches (EI0016)")
IP_FIX = ("give the device a RoCE address on the host (hccn_tool's IP setting, or "
          "address_{i}=/netmask_{i}= in /etc/hccn.conf applied by the driver)")


# --------------------------------------------------------------------------- results


@dataclass(frozen=True)
class Finding:
    """One problem a check found (one device, one pair, one file)."""

    status: Status
    cause: str
    remedy: str = ""


@dataclass(frozen=True)
class CheckResult:
    """One line of the report: a stable id, the verdict, what was seen, what to do."""

    id: str
    status: Status
    message: str
    remedy: str = ""
    findings: tuple[Finding, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id, "status": self.status, "message": self.message,
            "remedy": self.remedy,
            "findings": [{"status": f.status, "cause": f.cause, "remedy": f.remedy}
                         for f in self.findings],
        }


def verdict(check_id: str, findings: Sequence[Finding], ok_message: str) -> CheckResult:
    """Fold findings into one result: worst status, every cause, each remedy once."""
    bad = [f for f in findings if f.status != "ok"]
    if not bad:
        return CheckResult(check_id, "ok", ok_message)
    status: Status = max((f.status for f in bad), key=lambda s: _SEVERITY[s])
    remedies: list[str] = []
    for f in bad:
        if f.remedy and f.remedy not in remedies:
            remedies.append(f.remedy)
    return CheckResult(check_id, status, "; ".join(f.cause for f in bad),
                       " / ".join(remedies), tuple(bad))


def ok(check_id: str, message: str) -> CheckResult:
    return CheckResult(check_id, "ok", message)


@dataclass(frozen=True)
class DoctorReport:
    """Everything doctor found; `exit_code` is 0 healthy, 3 degraded (a warn), 1 failed."""

    node: Optional[str]
    checks: tuple[CheckResult, ...]
    facts: dict[str, Any] = field(default_factory=dict)

    @property
    def status(self) -> Status:
        worst = max((_SEVERITY[c.status] for c in self.checks), default=0)
        return ("ok", "warn", "fail")[worst]

    @property
    def exit_code(self) -> int:
        return EXIT_CODES[self.status]

    def check(self, check_id: str) -> CheckResult:
        return next(c for c in self.checks if c.id == check_id)

    @property
    def problems(self) -> dict[str, Status]:
        return {c.id: c.status for c in self.checks if c.status != "ok"}

    def to_json(self) -> dict[str, Any]:
        counts = {s: sum(c.status == s for c in self.checks) for s in ("ok", "warn", "fail")}
        state = {"ok": "healthy", "warn": "degraded", "fail": "failed"}[self.status]
        return {"node": self.node, "status": state, "exit_code": self.exit_code,
                "counts": counts, "checks": [c.to_json() for c in self.checks],
                "facts": self.facts}

    def format_text(self) -> str:
        lines = [f"ascend-node doctor: {self.node or 'unknown node'}"]
        width = max((len(c.id) for c in self.checks), default=10)
        pad = " " * (6 + width + 1)
        for c in self.checks:
            if len(c.findings) <= 1:
                lines.append(f"{c.status:<5} {c.id:<{width}} {c.message}")
            else:
                lines.append(f"{c.status:<5} {c.id:<{width}} {len(c.findings)} problems:")
                lines.extend(f"{pad}- {f.cause}" for f in c.findings)
            if c.remedy:
                lines.append(f"{pad}fix: {c.remedy}")
        counts = self.to_json()["counts"]
        state = {"ok": "healthy", "warn": "degraded", "fail": "failed"}[self.status]
        lines.append(f"{state}: {counts['fail']} fail, {counts['warn']} warn, "
                     f"{counts['ok']} ok (exit {self.exit_code})")
        return "\n".join(lines)


def id_list(ids: Sequence[int]) -> str:
    """`0-3,6` for [0, 1, 2, 3, 6]: short enough for a one-line cause."""
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


# --------------------------------------------------------------------------- devices


@dataclass(frozen=True)
class DeviceState:
    """What the driver tools and hccn.conf say about one NPU (gathered, not judged).

    `errors[what]` holds why a probe (`ip`, `link`, `net_health`, `tls`) gave no value:
    the tool error, or what the tool printed when it had no recognisable line.
    """

    device_id: int
    ip: str = ""
    netmask: str = ""
    conf_ip: str = ""
    conf_netmask: str = ""
    link: Optional[str] = None
    health: Optional[str] = None
    tls: Optional[int] = None
    errors: Mapping[str, str] = field(default_factory=dict)

    @property
    def usable_ip(self) -> bool:
        return bool(self.ip) and unusable_reason(self.ip) is None


def _printed(res: ToolResult) -> str:
    text = (res.stdout + res.stderr).strip().replace("\n", "\\n")
    return f"`{res.command}` printed {text[:160]!r} (exit {res.returncode})"


def query_device_states(
    ids: Sequence[int], hccn_tool: str, tool_timeout: float, conf: Mapping[int, Mapping[str, str]],
    runner: Callable[..., ToolResult] = run_tool, max_workers: int = 16,
) -> list[DeviceState]:
    """Every probe of every device, concurrently, each call with its own timeout."""
    probes = ("ip", "link", "net_health", "tls")

    def one(job: tuple[int, str]) -> tuple[int, str, Union[ToolResult, ToolError]]:
        dev_id, what = job
        try:
            return dev_id, what, dev.probe(dev_id, what, hccn_tool, tool_timeout, runner)
        except ToolError as exc:
            return dev_id, what, exc

    jobs = [(i, w) for i in ids for w in probes]
    workers = max(1, min(max_workers, len(jobs)))
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="doctor") as pool:
        answers = list(pool.map(one, jobs))
    by_dev: dict[int, dict[str, Any]] = {i: {"errors": {}} for i in ids}
    for dev_id, what, res in answers:
        slot = by_dev[dev_id]
        if isinstance(res, ToolError):
            slot["errors"][what] = res.cause
            continue
        text = res.stdout + res.stderr
        if what == "ip":
            slot["ip"], slot["netmask"] = dev.parse_hccn_ip(res.stdout)
            if not slot["ip"]:
                slot["errors"]["ip"] = _printed(res)
            continue
        parsed: Any = {"link": dev.parse_link_status, "net_health": dev.parse_net_health,
                       "tls": dev.parse_tls_switch}[what](text)
        if parsed is None:
            slot["errors"][what] = _printed(res)
        else:
            slot["health" if what == "net_health" else what] = parsed
    out = []
    for i in ids:
        entry = conf.get(i, {})
        out.append(DeviceState(device_id=i, conf_ip=entry.get("address", ""),
                               conf_netmask=entry.get("netmask", ""), **by_dev[i]))
    return out


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
    return ok("device.ip_family", f"IPv{next(iter(fams))}" if fams else "no addresses")


def check_link(states: Sequence[DeviceState]) -> CheckResult:
    """`device.link`: `hccn_tool -i N -link -g` says UP for every device."""
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
    """`device.net_health`: Success (or Init, which MindCluster also treats as healthy)."""
    findings = []
    for s in states:
        i = s.device_id
        fix = (f"fix device {i}'s link and address first; then check its network path to the "
               f"detect address (netdetect_{i} in /etc/hccn.conf)")
        if s.health is None:
            findings.append(Finding("warn", f"device {i}: net health unknown: "
                                    f"{s.errors.get('net_health', '?')}", fix))
        elif s.health not in HEALTHY_NET:
            findings.append(Finding("fail", f"device {i}: net health status {s.health} "
                                    f"(`hccn_tool -i {i} -net_health -g`)", fix))
    return verdict("device.net_health", findings,
                   f"{len(states)} devices Success/Init")


def check_tls(states: Sequence[DeviceState]) -> CheckResult:
    """`device.tls`: one TLS switch value on every local device."""
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

    A stale file is a warning, not a failure: the live value wins (facts §1.2), but a
    script that reads the file (hccl_tools, HIXL) would build a wrong table from it.
    """
    if conf is None:
        return ok("device.hccn_conf", f"not checked: {note}")
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


# --------------------------------------------------------------------------- rank table


@dataclass(frozen=True)
class TableInUse:
    path: Optional[Path]
    source: str  # "RANK_TABLE_FILE", "RANKTABLEFILE" or "state dir"
    required: bool  # named by the environment: absence is a failure


def table_in_use(environ: Mapping[str, str], state_dir: Path) -> TableInUse:
    for var in ("RANK_TABLE_FILE", "RANKTABLEFILE"):
        value = environ.get(var, "").strip()
        if value:
            return TableInUse(Path(value), var, True)
    local = state_dir / "ranktable.json"
    if os.path.lexists(local):
        return TableInUse(local, "state dir", False)
    return TableInUse(None, "state dir", False)


def check_table_file(where: TableInUse, problems: Sequence[Problem]) -> CheckResult:
    """`ranktable.file`: the file rules MindIE applies before it parses (mode <= 0640,
    owner, not a symlink, path characters, size)."""
    if where.path is None:
        return ok("ranktable.file", "no rank table in use yet (RANK_TABLE_FILE unset, no "
                  "state-dir copy): bootstrap has not completed here")
    findings = [Finding("fail", p.message, _file_fix(p.message, where.path))
                for p in problems if p.path == "file"]
    return verdict("ranktable.file", findings,
                   f"{where.path} (from {where.source}): regular file, mode and owner accepted")


def _file_fix(message: str, path: Path) -> str:
    if "mode" in message:
        return f"chmod 640 {path} (MindIE requires 0640 or stricter)"
    if "owned by" in message:
        return "give the file to the uid that runs the server (--file-owner for an init container)"
    if "symlink" in message:
        return f"replace the link {path} with a copy of the file"
    if "cannot be read" in message:
        return "run `ascend-node ranktable` (or boot) to write it, or fix RANK_TABLE_FILE"
    return "rewrite it with `ascend-node ranktable`"


def check_table_content(
    where: TableInUse, problems: Sequence[Problem], target: str, readable: bool = True,
) -> CheckResult:
    """`ranktable.valid`: the table passes HCCL's (and for MindIE, MindIE's) rules."""
    if where.path is None:
        return ok("ranktable.valid", "no rank table in use yet")
    if not readable:
        return ok("ranktable.valid", "content not checked: the file cannot be read "
                  "(see ranktable.file)")
    findings = [Finding("fail", f"{p.path}: {p.message}",
                        f"`ascend-node validate --for {target} {where.path}` lists every "
                        "problem; regenerate the table with `ascend-node ranktable`")
                for p in problems if p.path != "file"]
    return verdict("ranktable.valid", findings, f"valid for {target}")


def check_table_member(
    table: Optional[Mapping[str, Any]], pod_ip: Optional[str], states: Sequence[DeviceState],
) -> CheckResult:
    """`ranktable.member`: this node's entry is in the table (container_ip = pod IP) and
    lists exactly its devices with their live addresses (HCCL EI0014 otherwise)."""
    cid = "ranktable.member"
    if table is None:
        return ok(cid, "no readable rank table to look into")
    if not pod_ip:
        return CheckResult(cid, "warn", "this node's pod IP is unknown (see node.identity)")
    try:
        server = local_server(table, pod_ip)
    except AscendNodeError as exc:
        return CheckResult(cid, "fail", exc.cause, exc.hint)
    if server is None:
        listed = [str(s.get("container_ip")) for s in table.get("server_list", [])
                  if isinstance(s, dict)]
        return CheckResult(
            cid, "fail", f"no server has container_ip {pod_ip} (this pod's IP); the table "
            f"lists {', '.join(listed[:8]) or 'none'}",
            "the table was built for other pods (a re-created pod gets a new IP): run "
            "`ascend-node ranktable` again on every node")
    findings = []
    rows = {str(d.get("device_id")): str(d.get("device_ip", ""))
            for d in server.get("device", []) if isinstance(d, dict)}
    live = {str(s.device_id): s for s in states}
    if set(rows) != set(live):
        findings.append(Finding(
            "fail", f"the table lists devices {','.join(sorted(rows, key=_num))} for this "
            f"node, but it uses {','.join(sorted(live, key=_num))}",
            "regenerate the table with `ascend-node ranktable` on every node"))
    for did, table_ip in sorted(rows.items(), key=lambda kv: _num(kv[0])):
        state = live.get(did)
        if state is not None and state.ip and parse_ip(state.ip) != parse_ip(table_ip):
            findings.append(Finding(
                "fail", f"device {did}: the table says {table_ip}, the NIC has {state.ip} "
                "(HCCL EI0014)", "regenerate the table with `ascend-node ranktable`"))
    return verdict(cid, findings, f"this node ({pod_ip}) is in the table with "
                   f"{len(rows)} devices matching the live addresses")


def _num(text: str) -> int:
    return int(text) if text.isdigit() else 1 << 30


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@dataclass(frozen=True)
class RunState:
    """What the shared volume says about the run's current table (gathered)."""

    shared_table: Union[bytes, Missing, Invalid, None]  # None: no shared dir / run id
    attempt: Optional[AttemptDoc] = None
    outcome: Optional[OutcomeDoc] = None
    note: str = ""


def read_run_state(paths: Optional[RunPaths]) -> RunState:
    if paths is None:
        return RunState(None, note="no shared directory or run id configured")
    table = read_bytes_nofollow(paths.shared_table)
    got = read_doc(paths.attempt_file, AttemptDoc, paths.run_id)
    if not isinstance(got, Valid):
        note = got.describe() if isinstance(got, Invalid) else "no attempt file"
        return RunState(table, note=note)
    out = read_doc(paths.outcome(got.doc.attempt_id), OutcomeDoc, paths.run_id)
    return RunState(table, got.doc, out.doc if isinstance(out, Valid) else None)


def check_table_stale(
    where: TableInUse, local: Optional[bytes], run: RunState, shared_path: Optional[Path],
) -> CheckResult:
    """`ranktable.stale`: the table in use is the run's current one: same sha256 as the
    shared table and as the current attempt's outcome (a restarted job or a re-created
    pod leaves an older table behind, and HCCL then waits for peers that moved)."""
    cid = "ranktable.stale"
    fix = ("run `ascend-node ranktable` (or restart the pod through `boot`) so this node "
           "takes the current table")
    if where.path is None or local is None:
        return ok(cid, "no rank table in use yet")
    if run.shared_table is None:
        return ok(cid, f"not compared: {run.note}")
    mine = _sha(local)
    findings = []
    if isinstance(run.shared_table, bytes) and _sha(run.shared_table) != mine:
        findings.append(Finding(
            "fail", f"{where.path} (sha256 {mine[:12]}) differs from the run's shared table "
            f"{shared_path} (sha256 {_sha(run.shared_table)[:12]})", fix))
    elif isinstance(run.shared_table, Invalid):
        findings.append(Finding("warn", f"shared table {run.shared_table.describe()}",
                                "run `ascend-node clean` and restart the job"))
    if run.attempt is not None:
        aid = run.attempt.attempt_id
        if run.outcome is None:
            findings.append(Finding(
                "warn", f"attempt {aid} of the run is still assembling; {where.path} comes "
                "from an earlier attempt and will be replaced", fix))
        elif run.outcome.result == "abort":
            findings.append(Finding(
                "fail", f"the current attempt {aid} was aborted ({run.outcome.reason}); "
                f"{where.path} comes from an earlier attempt", fix))
        elif run.outcome.ranktable_sha256 != mine and not findings:
            findings.append(Finding(
                "fail", f"{where.path} (sha256 {mine[:12]}) is not the table of the current "
                f"attempt {aid} (sha256 {run.outcome.ranktable_sha256[:12]})", fix))
    current = f"attempt {run.attempt.attempt_id}" if run.attempt else "the shared table"
    return verdict(cid, findings, f"sha256 {mine[:12]} is the table of {current}")


# --------------------------------------------------------------------------- MindIE


@dataclass(frozen=True)
class MindieState:
    path: Path
    explicit: bool
    config: Optional[dict[str, Any]]
    error: str = ""
    mode: Optional[int] = None
    uid: Optional[int] = None
    symlink: bool = False


def read_mindie_state(environ: Mapping[str, str]) -> MindieState:
    from ascend_node import mindie

    path = mindie.config_path_from_env(environ)
    explicit = bool(environ.get("MIES_CONFIG_JSON_PATH", "").strip())
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return MindieState(path, explicit, None, "absent")
    except OSError as exc:
        return MindieState(path, explicit, None, f"cannot be read: {exc.strerror}")
    link = stat.S_ISLNK(info.st_mode)
    try:
        real = os.stat(path)
        config = mindie.load_config(path)
    except (ConfigError, OSError) as exc:
        cause = exc.cause if isinstance(exc, ConfigError) else str(exc.strerror)
        return MindieState(path, explicit, None, cause, symlink=link)
    return MindieState(path, explicit, config, "", stat.S_IMODE(real.st_mode), real.st_uid,
                       link)


def check_mindie_config(m: MindieState, owner_uid: int) -> CheckResult:
    """`mindie.config`: readable JSON, and a file MindIE accepts (mode <= 0640, owner, no link)."""
    cid = "mindie.config"
    if m.config is None and m.error == "absent":
        if m.explicit:
            return CheckResult(cid, "fail", f"MIES_CONFIG_JSON_PATH={m.path} does not exist",
                               "point MIES_CONFIG_JSON_PATH at MindIE's config.json")
        return ok(cid, f"no MindIE config at {m.path} (not a MindIE container)")
    if m.config is None:
        return CheckResult(cid, "fail", f"{m.path}: {m.error}",
                           "fix the file or restore MindIE's default config.json")
    findings = []
    if m.symlink:
        findings.append(Finding("fail", f"{m.path} is a symlink: MindIE refuses links",
                                "let `ascend-node boot` write a regular copy"))
    if m.mode is not None and ((m.mode >> 6) & 7 > 6 or (m.mode >> 3) & 7 > 4 or m.mode & 7):
        findings.append(Finding("fail", f"{m.path} has mode {m.mode:04o}: MindIE requires "
                                "0640 or stricter", f"chmod 640 {m.path}"))
    if m.uid is not None and m.uid != owner_uid:
        findings.append(Finding("fail", f"{m.path} is owned by uid {m.uid}, not uid "
                                f"{owner_uid} that runs the server",
                                "give it to the server's uid (--file-owner)"))
    return verdict(cid, findings, f"{m.path} readable, mode and owner accepted")


def _backend(config: Mapping[str, Any]) -> Mapping[str, Any]:
    backend = config.get("BackendConfig")
    return backend if isinstance(backend, Mapping) else {}


def check_mindie_multinode(
    m: MindieState, server_count: Optional[int], node_count: Optional[int], table_used: bool,
) -> CheckResult:
    """`mindie.multinode`: multiNodesInferEnabled agrees with the table's server_count
    (MindIE decides multi-node from that flag alone)."""
    cid = "mindie.multinode"
    if m.config is None:
        return ok(cid, "no MindIE config")
    enabled = _backend(m.config).get("multiNodesInferEnabled")
    count = server_count if server_count is not None else node_count
    where = "the rank table's server_count" if server_count is not None else "the job's nodes"
    if count is None:
        return CheckResult(cid, "warn", "node count unknown (no rank table, no identity)")
    fix = "set BackendConfig.multiNodesInferEnabled accordingly (`ascend-node boot` does)"
    if count > 1 and enabled is not True:
        return CheckResult(cid, "fail", f"{where} is {count} but "
                           f"BackendConfig.multiNodesInferEnabled is {json.dumps(enabled)}", fix)
    if count <= 1 and enabled is True:
        return CheckResult(cid, "fail", f"{where} is {count} but multiNodesInferEnabled is "
                           "true", fix)
    if count > 1 and not table_used:
        return CheckResult(cid, "fail", "multiNodesInferEnabled is true but no rank table is in "
                           "use (RANK_TABLE_FILE unset, no state-dir copy)",
                           "run `ascend-node ranktable` or start through `ascend-node boot`")
    return ok(cid, f"multiNodesInferEnabled={json.dumps(enabled)} for {count} node(s)")


def check_mindie_devices(m: MindieState, local_count: int) -> CheckResult:
    """`mindie.devices`: npuDeviceIds, modelInstanceNumber and worldSize agree with the
    local device count (MindIE checks them at parse time even in multi-node mode)."""
    cid = "mindie.devices"
    if m.config is None:
        return ok(cid, "no MindIE config")
    backend = _backend(m.config)
    ids = backend.get("npuDeviceIds")
    deploy = backend.get("ModelDeployConfig")
    models = deploy.get("ModelConfig") if isinstance(deploy, Mapping) else None
    world = models[0].get("worldSize") if (isinstance(models, list) and models
                                           and isinstance(models[0], Mapping)) else None
    fix = (f"set npuDeviceIds to [[0..{local_count - 1}]], modelInstanceNumber to 1 and "
           f"worldSize to {local_count} (`ascend-node boot` does)")
    findings = []
    if not (isinstance(ids, list) and ids and all(isinstance(g, list) for g in ids)):
        findings.append(Finding("fail", f"BackendConfig.npuDeviceIds is {json.dumps(ids)}, "
                                "not a list of device-id lists", fix))
    else:
        if backend.get("modelInstanceNumber") != len(ids):
            findings.append(Finding("fail", f"modelInstanceNumber "
                                    f"{json.dumps(backend.get('modelInstanceNumber'))} != "
                                    f"{len(ids)} npuDeviceIds groups", fix))
        if len(ids[0]) != local_count:
            findings.append(Finding("fail", f"npuDeviceIds[0] has {len(ids[0])} devices, this "
                                    f"node has {local_count}", fix))
        if world != len(ids[0]):
            findings.append(Finding("fail", f"ModelConfig[0].worldSize {json.dumps(world)} != "
                                    f"{len(ids[0])} devices in npuDeviceIds[0]", fix))
    return verdict(cid, findings, f"npuDeviceIds and worldSize match {local_count} devices")


# --------------------------------------------------------------------------- processes


@dataclass(frozen=True)
class Holder:
    pid: int
    comm: str
    devices: tuple[int, ...]


_DAVINCI = re.compile(r"/dev/davinci([0-9]{1,3})")


def _ppid(proc_root: str, pid: int) -> Optional[int]:
    try:
        with open(os.path.join(proc_root, str(pid), "stat"), encoding="utf-8",
                  errors="replace") as fh:
            text = fh.read()
    except OSError:
        return None
    fields = text.rpartition(")")[2].split()
    return int(fields[1]) if len(fields) > 1 and fields[1].isdigit() else None


def find_npu_holders(proc_root: str, skip_pids: Sequence[int] = ()) -> tuple[list[Holder], int]:
    """Processes with an open /dev/davinciN, and how many could not be inspected.

    Reads `<proc_root>/<pid>/fd/*` links only, so a test can build a fake tree of real
    symlinks; a process that exits mid-scan is skipped.
    """
    holders = []
    hidden = 0
    try:
        names = os.listdir(proc_root)
    except OSError:
        return [], 0
    for name in sorted(names, key=lambda n: (len(n), n)):
        if not name.isdigit() or int(name) in skip_pids:
            continue
        fd_dir = os.path.join(proc_root, name, "fd")
        try:
            fds = os.listdir(fd_dir)
        except PermissionError:
            hidden += 1
            continue
        except OSError:
            continue
        found: set[int] = set()
        for fd in fds:
            try:
                target = os.readlink(os.path.join(fd_dir, fd))
            except OSError:
                continue
            m = _DAVINCI.fullmatch(target)
            if m:
                found.add(int(m.group(1)))
        if found:
            try:
                with open(os.path.join(proc_root, name, "comm"), encoding="utf-8",
                          errors="replace") as fh:
                    comm = fh.read().strip()
            except OSError:
                comm = "?"
            holders.append(Holder(int(name), comm, tuple(sorted(found))))
    return holders, hidden


def descends_from(proc_root: str, pid: int, root: int, limit: int = 64) -> bool:
    current: Optional[int] = pid
    for _ in range(limit):
        if current is None or current <= 0:
            return False
        if current == root:
            return True
        current = _ppid(proc_root, current)
    return False


def check_npu_holders(holders: Sequence[Holder], hidden: int, server_pid: Optional[int],
                      proc_root: str) -> CheckResult:
    """`process.npu_holders`: no process outside the server this agent started holds an NPU.

    A process left from the previous attempt keeps the devices busy and HCCL fails on the
    relaunch (EJ0001, vllm-ascend #10599). The server `boot` exec'd (the pid in
    status.json, state done) and its children are expected holders; anything else is
    reported. A warning, not a failure: doctor cannot tell a leftover from a tool an
    operator started on purpose.
    """
    cid = "process.npu_holders"
    expected = [h for h in holders
                if server_pid is not None and descends_from(proc_root, h.pid, server_pid)]
    others = [h for h in holders if h not in expected]
    findings = [Finding("warn", f"pid {h.pid} ({h.comm}) holds /dev/davinci{id_list(h.devices)}",
                        f"if it is left from an earlier run, stop it (`kill {h.pid}`) and "
                        "wait until it has exited before relaunching: HCCL fails while "
                        "another process holds the NPUs (EJ0001)") for h in others]
    note = f"; {hidden} processes not inspectable (permissions)" if hidden else ""
    held = (f"only the server (pid {server_pid}) and its children hold NPUs" if expected
            else "no process holds an NPU")
    return verdict(cid, findings, held + note)


# --------------------------------------------------------------------------- peers


class FactDevice(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    device_id: int = Field(ge=0, le=63)
    ip: str = Field(max_length=64)
    netmask: str = Field(max_length=64)
    link: Optional[str] = Field(default=None, max_length=32)
    health: Optional[str] = Field(default=None, max_length=64)
    tls: Optional[int] = None


class DoctorFacts(BaseModel):
    """What one node tells its peers: its devices as the driver reports them."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    schema_version: Literal[1] = 1
    kind: Literal["doctor_facts"] = "doctor_facts"
    run_id: str = Field(pattern=r"^[A-Za-z0-9_.:-]{1,128}$")
    global_index: int = Field(ge=0)
    node_count: int = Field(ge=1)
    master_count: int = Field(ge=0)
    name: str = Field(max_length=64)
    pod_ip: str = Field(max_length=64)
    agent_version: str = Field(max_length=64)
    published_at: float
    devices: tuple[FactDevice, ...] = Field(max_length=64)
    local: dict[str, Status] = Field(default_factory=dict)


def facts_path(paths: RunPaths, index: int) -> Path:
    return paths.root / "doctor" / f"node-{index}.json"


def make_facts(run_id: str, ident: NodeIdentity, states: Sequence[DeviceState],
               local: Mapping[str, Status], now: float) -> DoctorFacts:
    return DoctorFacts(
        run_id=run_id, global_index=ident.global_index, node_count=ident.node_count,
        master_count=ident.master_count, name=ident.name, pod_ip=ident.pod_ip,
        agent_version=__version__, published_at=now,
        devices=tuple(FactDevice(device_id=s.device_id, ip=s.ip[:64], netmask=s.netmask[:64],
                                 link=(s.link or None) and s.link[:32],
                                 health=(s.health or None) and s.health[:64], tls=s.tls)
                      for s in states),
        local=dict(local))


PeerRead = Union[Valid[DoctorFacts], Invalid, Missing]


def collect_peer_facts(
    paths: RunPaths, me: int, node_count: int, wait: float, fresh_after: float,
    clock: Callable[[], float] = time.monotonic, sleep: Callable[[float], None] = time.sleep,
) -> dict[int, PeerRead]:
    """Each peer's facts, re-reading known names (no directory listing) until all are
    present and fresh or `wait` seconds have passed."""
    deadline = clock() + wait
    got: dict[int, PeerRead] = {}
    pending = [i for i in range(node_count) if i != me]
    while True:
        for i in list(pending):
            read = read_doc(facts_path(paths, i), DoctorFacts, paths.run_id)
            got[i] = read
            if isinstance(read, Valid) and read.doc.published_at >= fresh_after:
                pending.remove(i)
        if not pending or clock() >= deadline:
            return got
        sleep(min(PEER_POLL, max(0.0, deadline - clock())))


def check_peers_present(
    reads: Mapping[int, PeerRead], master_count: int, wait: float, fresh_after: float,
) -> CheckResult:
    """`peers.present`: every peer published facts (i.e. runs doctor too), fresh ones."""
    findings = []
    for i, r in sorted(reads.items()):
        who = node_name(i, master_count)
        if isinstance(r, Missing):
            findings.append(Finding("warn", f"{who} published no facts within {wait:g} s",
                                    "run `ascend-node doctor --peers` on every node at once"))
        elif isinstance(r, Invalid):
            findings.append(Finding("warn", f"{who}: {r.describe()}",
                                    "run the same agent version on every node"))
        elif r.doc.published_at < fresh_after:
            age = max(0.0, time.time() - r.doc.published_at)
            findings.append(Finding("warn", f"{who}: facts are {age:.0f} s old",
                                    "run `ascend-node doctor --peers` on every node at once"))
    return verdict("peers.present", findings, f"{len(reads)} peers published facts")


def _nodes(values: Mapping[Any, list[str]]) -> str:
    return "; ".join(f"{v} on {', '.join(who)}" for v, who in values.items())


def check_peer_devices(facts: Sequence[DoctorFacts], allow_uneven: bool) -> CheckResult:
    """`peers.devices`: the same number of NPUs on every node (MindIE needs it)."""
    counts: dict[int, list[str]] = {}
    for f in facts:
        counts.setdefault(len(f.devices), []).append(f"node {f.global_index}")
    if len(counts) > 1:
        cause = f"device counts differ: {_nodes(counts)}"
        if allow_uneven:
            return ok("peers.devices", f"{cause} (allowed: --allow-uneven-devices)")
        return CheckResult("peers.devices", "fail", cause,
                           "give every pod the same NPU count, or allow uneven counts "
                           "for training (--allow-uneven-devices)")
    return ok("peers.devices", f"{next(iter(counts), 0)} devices on each of {len(facts)} nodes")


def check_peer_versions(facts: Sequence[DoctorFacts]) -> CheckResult:
    """`peers.version`: one agent version everywhere (documents are versioned, but a mixed
    rollout is the first suspect when nodes disagree)."""
    versions: dict[str, list[str]] = {}
    for f in facts:
        versions.setdefault(f.agent_version, []).append(f"node {f.global_index}")
    if len(versions) > 1:
        return CheckResult("peers.version", "warn", f"agent versions differ: {_nodes(versions)}",
                           "use one image (one ascend-node version) for every pod of the job")
    return ok("peers.version", f"ascend-node {next(iter(versions), '?')} on every node")


def _usable(d: FactDevice) -> bool:
    return bool(d.ip) and unusable_reason(d.ip) is None


def check_peer_duplicates(facts: Sequence[DoctorFacts]) -> CheckResult:
    """`peers.duplicate_ip`: no device address on two nodes (HCCL needs unique device_ip)."""
    owners: dict[Any, list[str]] = {}
    for f in facts:
        for d in f.devices:
            addr = parse_ip(d.ip) if _usable(d) else None
            if addr is not None:
                owners.setdefault(addr, []).append(f"node {f.global_index} device {d.device_id}")
    findings = [Finding("fail", f"{addr} is used by {' and '.join(who)}",
                        "every NPU of the job needs its own RoCE IP; fix the addresses "
                        "on the hosts")
                for addr, who in owners.items()
                if len({w.split(' device')[0] for w in who}) > 1]
    return verdict("peers.duplicate_ip", findings,
                   f"{len(owners)} device IPs, distinct across nodes")


def check_peer_family(facts: Sequence[DoctorFacts]) -> CheckResult:
    """`peers.ip_family`: one address family across the whole job (HCCL EI0001)."""
    fams: dict[int, list[str]] = {}
    for f in facts:
        for fam in sorted({family(d.ip) for d in f.devices if _usable(d)}):
            fams.setdefault(fam, []).append(f"node {f.global_index}")
    if len(fams) > 1:
        return CheckResult("peers.ip_family", "fail",
                           "nodes mix address families: " + _nodes(
                               {f"IPv{k}": v for k, v in sorted(fams.items())}),
                           "give every device of the job an address of one family (EI0001)")
    return ok("peers.ip_family", f"IPv{next(iter(fams), '?')} on every node")


def check_peer_netmask(facts: Sequence[DoctorFacts]) -> CheckResult:
    """`peers.netmask`: the same netmask for the same device slot on every node."""
    findings = []
    slots: dict[tuple[int, int], dict[str, list[str]]] = {}
    for f in facts:
        for pos, d in enumerate(sorted(f.devices, key=lambda x: x.device_id)):
            if _usable(d) and d.netmask:  # mixed families are peers.ip_family's concern
                slots.setdefault((pos, family(d.ip)), {}).setdefault(d.netmask, []).append(
                    f"node {f.global_index}")
    bad = {key: masks for key, masks in slots.items() if len(masks) > 1}
    if bad:
        groups: dict[str, list[int]] = {}
        for (pos, _fam), masks in bad.items():
            groups.setdefault(_nodes(masks), []).append(pos)
        for spread, positions in groups.items():
            findings.append(Finding(
                "warn", f"netmasks differ for device slot(s) {id_list(positions)}: {spread}",
                "use the netmask of the RoCE network on every node (netmask_N in "
                "/etc/hccn.conf on the hosts)"))
    return verdict("peers.netmask", findings, "one netmask per device slot on every node")


def check_peer_subnet(facts: Sequence[DoctorFacts]) -> CheckResult:
    """`peers.subnet`: same-slot devices with equal netmasks are on one subnet; otherwise
    their RoCE traffic needs a gateway (a warning: routed planes exist)."""
    findings = []
    slots: dict[tuple[int, str], dict[str, list[str]]] = {}
    for f in facts:
        for pos, d in enumerate(sorted(f.devices, key=lambda x: x.device_id)):
            if not (_usable(d) and d.netmask):
                continue
            try:
                net = str(ipaddress.ip_network(f"{d.ip}/{d.netmask}", strict=False))
            except ValueError:
                continue
            slots.setdefault((pos, d.netmask), {}).setdefault(net, []).append(
                f"node {f.global_index}")
    for (pos, _mask), nets in sorted(slots.items()):
        if len(nets) > 1:
            findings.append(Finding(
                "warn", f"device slot {pos} is on different subnets: {_nodes(nets)}",
                "put same-slot devices on one subnet, or configure a gateway "
                "(gateway_N in /etc/hccn.conf)"))
    return verdict("peers.subnet", findings, "same-slot devices share a subnet on every node")


def check_peer_tls(facts: Sequence[DoctorFacts]) -> CheckResult:
    """`peers.tls`: one TLS switch value across every device of every node (EI0016)."""
    values: dict[int, list[str]] = {}
    for f in facts:
        for v in sorted({d.tls for d in f.devices if d.tls is not None}):
            values.setdefault(v, []).append(f"node {f.global_index}")
    if len(values) > 1:
        return CheckResult("peers.tls", "fail", f"TLS switch differs between nodes: "
                           f"{_nodes(values)}", TLS_FIX)
    return ok("peers.tls", f"tls switch [{next(iter(values), '-')}] on every node")


@dataclass(frozen=True)
class PingPair:
    device_id: int
    peer: int
    peer_device: int
    address: str


def ping_pairs(mine: DoctorFacts, peers: Sequence[DoctorFacts], limit: int = PING_PAIR_LIMIT
               ) -> tuple[list[PingPair], int, int]:
    """(pairs to ping, pairs skipped for a known local/peer problem, pairs left out by sampling).

    Each local device pings the same-slot device of every peer. A device already known to
    be down or without an address is skipped: its own check names the cause once. Above
    `limit`, a hash-ordered sample keeps runs repeatable and spreads over devices and peers.
    """
    local = sorted(mine.devices, key=lambda d: d.device_id)
    pairs, skipped = [], 0
    for peer in sorted(peers, key=lambda f: f.global_index):
        remote = sorted(peer.devices, key=lambda d: d.device_id)
        for pos, d in enumerate(local):
            if pos >= len(remote):
                continue
            r = remote[pos]
            if not (_usable(d) and d.link in (None, "UP") and _usable(r)
                    and r.link in (None, "UP")):
                skipped += 1
                continue
            pairs.append(PingPair(d.device_id, peer.global_index, r.device_id, r.ip))
    if len(pairs) <= limit:
        return pairs, skipped, 0

    def key(p: PingPair) -> str:
        return _sha(f"{mine.global_index}|{p.device_id}|{p.peer}|{p.peer_device}".encode())

    chosen = sorted(sorted(pairs, key=key)[:limit],
                    key=lambda p: (p.peer, p.device_id))
    return chosen, skipped, len(pairs) - limit


_PING_SUMMARY = re.compile(
    r"(\d+)\s+packets transmitted,\s*(\d+)\s+received,\s*([0-9.]+)%\s*packet loss")


def parse_ping(text: str) -> Optional[tuple[int, int, float]]:
    """(transmitted, received, loss %) from hccn_tool's ping summary line, else None."""
    m = _PING_SUMMARY.search(text)
    return (int(m.group(1)), int(m.group(2)), float(m.group(3))) if m else None


def ping_argv(hccn_tool: str, pair: PingPair) -> list[str]:
    """IPv4: `-ping -g address X`; IPv6: `-ping -inet6 -g ipv6_address X` (facts §1.1)."""
    if family(pair.address) == 6:
        return [hccn_tool, "-i", str(pair.device_id), "-ping", "-inet6", "-g",
                "ipv6_address", pair.address]
    return [hccn_tool, "-i", str(pair.device_id), "-ping", "-g", "address", pair.address]


def run_pings(pairs: Sequence[PingPair], hccn_tool: str, timeout: float,
              runner: Callable[..., ToolResult] = run_tool, workers: int = PING_WORKERS,
              ) -> list[tuple[PingPair, Union[ToolResult, ToolError]]]:
    def one(p: PingPair) -> tuple[PingPair, Union[ToolResult, ToolError]]:
        try:
            return p, runner(ping_argv(hccn_tool, p), timeout=timeout)
        except ToolError as exc:
            return p, exc

    if not pairs:
        return []
    with ThreadPoolExecutor(max_workers=max(1, min(workers, len(pairs))),
                            thread_name_prefix="ping") as pool:
        return list(pool.map(one, pairs))


def check_ping(results: Sequence[tuple[PingPair, Union[ToolResult, ToolError]]],
               skipped: int, sampled_out: int, master_count: int) -> CheckResult:
    """`peers.ping`: every pinged peer device answers (RoCE path through the switch)."""
    findings = []
    for p, res in results:
        what = (f"device {p.device_id} -> {node_name(p.peer, master_count)} device "
                f"{p.peer_device} ({p.address})")
        fix = (f"check the RoCE path between device {p.device_id} here and device "
               f"{p.peer_device} of node {p.peer}: both links UP, same subnet or a gateway, "
               "switch ports and VLAN")
        if isinstance(res, ToolError):
            findings.append(Finding("warn", f"{what}: {res.cause}", fix))
            continue
        summary = parse_ping(res.stdout + res.stderr)
        if summary is None:
            findings.append(Finding("warn", f"{what}: no ping summary; {_printed(res)}", fix))
        elif summary[1] == 0:
            findings.append(Finding("fail", f"{what}: unreachable ({summary[0]} sent, 0 "
                                    f"received, {summary[2]:.2f}% loss)", fix))
        elif summary[2] > 0:
            findings.append(Finding("warn", f"{what}: {summary[2]:.2f}% packet loss", fix))
    notes = []
    if skipped:
        notes.append(f"{skipped} pairs skipped (a device without IP or link; see its check)")
    if sampled_out:
        notes.append(f"{sampled_out} more pairs not sampled")
    tail = f" ({'; '.join(notes)})" if notes else ""
    return verdict("peers.ping", findings, f"{len(results)} pairs answer{tail}")


# --------------------------------------------------------------------------- run


def _identity(environ: Mapping[str, str]) -> NodeIdentity:
    from ascend_node.bootstrap import identify

    return identify(environ)


def run_doctor(
    settings: Settings,
    environ: Mapping[str, str],
    peers: bool,
    peer_wait: float = 10.0,
    proc_root: str = "/proc",
    *,
    dev_dir: str = "/dev",
    runner: Callable[..., ToolResult] = run_tool,
) -> DoctorReport:
    """Run every check; raise only when the settings make checking impossible
    (ConfigError: a bad --devices, or --peers without a shared directory and run id)."""
    started_wall = time.time()
    paths: Optional[RunPaths] = None
    if peers:
        from ascend_node.bootstrap import require_rendezvous_settings

        shared, run_id = require_rendezvous_settings(settings)
        paths = RunPaths(shared, run_id)
    elif settings.shared_dir is not None and settings.run_id and settings.shared_dir.is_dir():
        paths = RunPaths(settings.shared_dir, settings.run_id)
    if settings.devices:
        dev.parse_device_list(settings.devices, settings.sources.get("devices", "--devices"))
    checks: list[CheckResult] = []

    ident: Optional[NodeIdentity] = None
    try:
        ident = _identity(environ)
        checks.append(ok("node.identity", f"{ident.name} of {ident.node_count}, pod IP "
                         f"{ident.pod_ip}, host IP {ident.host_ip}"))
    except AscendNodeError as exc:
        if peers:
            raise
        checks.append(CheckResult("node.identity", "fail", exc.cause, exc.hint))

    # Devices.
    npu_smi = dev.resolve_tool(settings.npu_smi, "npu-smi", dev.DEFAULT_NPU_SMI)
    hccn_tool = dev.resolve_tool(settings.hccn_tool, "hccn_tool", dev.DEFAULT_HCCN_TOOL)
    used: Optional[dev.DeviceIds] = None
    error = ""
    try:
        used = dev.enumerate_devices(settings.devices, environ, npu_smi, settings.tool_timeout,
                                     dev_dir, settings.sources.get("devices", "--devices"))
    except AscendNodeError as exc:
        error = exc.cause
    env_ids: Optional[tuple[int, ...]] = None
    visible = environ.get("ASCEND_VISIBLE_DEVICES", "").strip()
    if visible:
        try:
            env_ids = dev.parse_device_list(visible, "ASCEND_VISIBLE_DEVICES")
        except AscendNodeError as exc:
            error = error or exc.cause
    try:
        dev_ids = dev.parse_davinci_names(os.listdir(dev_dir))
    except OSError:
        dev_ids = ()
    checks.append(check_visible(used, error, env_ids, dev_ids, dev_dir))
    conf, conf_note = read_hccn_conf(settings.hccn_conf)
    states = (query_device_states(used.ids, hccn_tool, settings.tool_timeout, conf or {}, runner)
              if used else [])
    checks += [check_ips(states), check_unique_ips(states), check_ip_family(states),
               check_link(states), check_health(states), check_tls(states),
               check_hccn_conf(states, conf, conf_note, settings.hccn_conf)]

    # Rank table and MindIE.
    mindie_state = read_mindie_state(environ)
    multinode = (mindie_state.config is not None
                 and _backend(mindie_state.config).get("multiNodesInferEnabled") is True)
    target = "mindie" if multinode else "hccl"
    where = table_in_use(environ, settings.state_dir)
    owner_uid = settings.file_owner[0] if settings.file_owner else os.getuid()
    problems: list[Problem] = []
    local_bytes: Optional[bytes] = None
    table: Optional[dict[str, Any]] = None
    if where.path is not None:
        problems = validate_file(where.path, target, check_owner_uid=owner_uid)  # type: ignore[arg-type]
        first = read_bytes_nofollow(where.path)
        local_bytes = first if isinstance(first, bytes) else _read_following(where.path)
        if local_bytes is not None:
            try:
                loaded = json.loads(local_bytes.decode("utf-8"))
                table = loaded if isinstance(loaded, dict) else None
            except (UnicodeDecodeError, ValueError):
                table = None
    checks += [check_table_file(where, problems), check_table_content(where, problems, target,
                                                          local_bytes is not None),
               check_table_member(table, ident.pod_ip if ident else None, states),
               check_table_stale(where, local_bytes, read_run_state(paths),
                                 paths.shared_table if paths else None)]
    server_count = _server_count(table)
    checks += [check_mindie_config(mindie_state, owner_uid),
               check_mindie_multinode(mindie_state, server_count,
                                      ident.node_count if ident else None, where.path is not None),
               check_mindie_devices(mindie_state, len(states))]

    # Processes.
    server_pid = _server_pid(settings.state_dir)
    skip = (os.getpid(),) if os.path.realpath(proc_root) == "/proc" else ()
    holders, hidden = find_npu_holders(proc_root, skip)
    checks.append(check_npu_holders(holders, hidden, server_pid, proc_root))

    facts: dict[str, Any] = {}
    if peers and paths is not None and ident is not None:
        local = {c.id: c.status for c in checks}
        mine = make_facts(paths.run_id, ident, states, local, time.time())
        write_doc(facts_path(paths, ident.global_index), mine, paths.shared_dir)
        fresh_after = started_wall - FACTS_MAX_AGE
        reads = collect_peer_facts(paths, ident.global_index, ident.node_count, peer_wait,
                                   fresh_after)
        peer_facts = [r.doc for r in reads.values() if isinstance(r, Valid)]
        everyone = sorted([mine, *peer_facts], key=lambda f: f.global_index)
        checks += [check_peers_present(reads, ident.master_count, peer_wait, fresh_after),
                   check_peer_devices(everyone, settings.allow_uneven_devices),
                   check_peer_versions(everyone), check_peer_duplicates(everyone),
                   check_peer_family(everyone), check_peer_netmask(everyone),
                   check_peer_subnet(everyone), check_peer_tls(everyone)]
        pairs, skipped, sampled_out = ping_pairs(mine, peer_facts)
        results = run_pings(pairs, hccn_tool, settings.tool_timeout, runner)
        checks.append(check_ping(results, skipped, sampled_out, ident.master_count))
        facts = {"published": str(facts_path(paths, ident.global_index)),
                 "peers_read": sorted(i for i, r in reads.items() if isinstance(r, Valid)),
                 "pings": len(results)}

    node = ident.name if ident else None
    facts.update({"devices": [{"device_id": s.device_id, "ip": s.ip, "netmask": s.netmask,
                               "link": s.link, "net_health": s.health, "tls": s.tls}
                              for s in states],
                  "rank_table": str(where.path) if where.path else None,
                  "hccn_tool": hccn_tool})
    return DoctorReport(node, tuple(checks), facts)


def _read_following(path: Path) -> Optional[bytes]:
    """The table's bytes even through a symlink (ranktable.file already reports the link;
    the other checks still judge the content, so one run lists everything)."""
    try:
        if not stat.S_ISREG(os.stat(path).st_mode):
            return None
        with open(path, "rb") as fh:
            return fh.read(16 * 1024 * 1024)
    except OSError:
        return None


def _server_count(table: Optional[Mapping[str, Any]]) -> Optional[int]:
    if table is None:
        return None
    servers = table.get("server_list")
    return len(servers) if isinstance(servers, list) else None


def _server_pid(state_dir: Path) -> Optional[int]:
    from ascend_node.outputs import read_status

    try:
        status = read_status(state_dir)
    except ConfigError:
        return None
    if status is None or status.state != "done" or status.command != "boot":
        return None
    return status.pid


__all__ = ["CheckResult", "DoctorFacts", "DoctorReport", "Finding", "run_doctor"]
