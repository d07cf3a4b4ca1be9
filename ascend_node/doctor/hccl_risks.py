"""Doctor's view of the failures the pre-flight catches at start-up (docs/preflight.md,
issue 28): processes on this node's NPUs, HCCL's host ports, HCCL settings CANN refuses,
the CANN/driver versions, and what the server's environment would get wrong (proxies, a
rank table from elsewhere, device ids MindIE cannot use).

The same parsers and rules as the pre-flight (`discover.npu_processes`, `hccl_ports`,
`hccl_settings`, `handoff.device_ids`, `handoff.server_env`); doctor judges one node, so
what must agree across nodes is `--peers`' business (versions are published there).
Doctor may run beside a live server: with the server running, its NPUs are held and its
HCCL may listen on the range, so those findings soften to warnings.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Callable, Optional

from ascend_node.discover.hccl_ports import PortSpecError, ranges_text, read_port_facts
from ascend_node.discover.hccl_settings import Versions, effective_settings, setting_problems
from ascend_node.discover.npu_processes import (
    ProcessTableError,
    describe_holder,
    holders_of,
    parse_npu_processes,
)
from ascend_node.doctor.report import CheckResult, Finding, Status, skip, verdict
from ascend_node.errors import ToolError
from ascend_node.handoff.device_ids import mindie_device_problem
from ascend_node.handoff.server_env import (
    HCCL_ROOTINFO,
    proxy_changes,
    rank_table_notes,
    rootinfo_note,
)
from ascend_node.tools import ToolResult, run_tool, shown_output


def check_npu_processes(ids: Sequence[int], npu_smi: str, timeout: float,
                        server_pid: Optional[int],
                        runner: Callable[..., ToolResult] = run_tool) -> CheckResult:
    """`npu.processes`: `npu-smi info` lists no process on this node's devices (EJ0001)."""
    cid = "npu.processes"
    if not ids:
        return skip(cid, "no devices to check (see device.visible)")
    try:
        res = runner([npu_smi, "info"], timeout=timeout)
        rows = holders_of(parse_npu_processes(res.stdout), ids)
    except ToolError as exc:
        return skip(cid, f"not checked: {exc.cause}")
    except ProcessTableError as exc:
        return skip(cid, f"not checked: `{npu_smi} info` (exit {res.returncode}): {exc}; "
                    f"printed {shown_output(res.stdout + res.stderr, 120)}")
    if server_pid is not None:
        shown = "; ".join(describe_holder(p) for p in rows[:4])
        return CheckResult(cid, "ok", f"the server (pid {server_pid}) runs; npu-smi lists "
                           f"{len(rows)} process(es) on these NPUs" + (f": {shown}" if shown
                                                                       else ""))
    findings = [Finding("warn", describe_holder(p) + " (npu-smi info); HCCL fails with EJ0001 "
                        "while it holds the device",
                        "end that process, or wait for the previous pod on these NPUs to "
                        "finish terminating") for p in rows]
    return verdict(cid, findings, f"no process on devices {ranges_text(ids)} (npu-smi info)")


def check_hccl_ports(environ: Mapping[str, str], cann: Optional[str], proc_root: str,
                     server_running: bool) -> CheckResult:
    """`hccl.ports`: nothing listens on HCCL's host ports in this network namespace; the
    message says whether the range is reserved against ephemeral use."""
    cid = "hccl.ports"
    try:
        facts = read_port_facts(environ, cann, Path(proc_root, "net"),
                                Path(proc_root, "sys", "net", "ipv4"))
    except PortSpecError as exc:
        return CheckResult(cid, "fail", str(exc), "give the variable a value HCCL accepts")
    except (OSError, ValueError) as exc:
        return skip(cid, f"not checked: {exc}")
    p = facts.ports
    if not p.ports:
        return CheckResult(cid, "ok", f"{p.variable}=auto: the OS picks HCCL's host ports")
    mover = ("HCCL_HOST_SOCKET_PORT_RANGE" if p.variable == "HCCL_HOST_SOCKET_PORT_RANGE"
             else "HCCL_IF_BASE_PORT")
    findings = []
    if facts.listening:
        status: Status = "warn" if server_running else "fail"
        findings.append(Finding(
            status, f"port(s) {ranges_text(facts.listening)} of HCCL's range {p.text} (from "
            f"{p.variable}) already have a listener"
            + (" (the server runs: it may be HCCL's own)" if server_running else
               "; HCCL's bind would fail with EJ0003"),
            f"stop what listens there, or move the range with {mover}"))
    if facts.busy:
        findings.append(Finding(
            "warn", f"port(s) {ranges_text(facts.busy)} of HCCL's range are used by a "
            "connection now", "reserve the range with net.ipv4.ip_local_reserved_ports"))
    low, high = facts.ephemeral
    reserved = ("reserved" if not facts.unreserved else
                f"{ranges_text(facts.unreserved)} not reserved against the ephemeral range "
                f"{low}-{high} (`sysctl -w net.ipv4.ip_local_reserved_ports="
                f"{ranges_text(facts.unreserved)}` on the host, as CANN asks)")
    return verdict(cid, findings, f"HCCL's host ports {p.text} (from {p.variable}) are free; "
                   f"{reserved}")


def check_hccl_settings(environ: Mapping[str, str]) -> CheckResult:
    """`hccl.settings`: no HCCL value CANN refuses at run time."""
    problems = setting_problems(environ)
    values = effective_settings(environ)
    shown = ", ".join(f"{k}={v}" for k, v in values.items())
    return verdict("hccl.settings",
                   [Finding("fail", p, "correct it in the job's environment, the same on "
                            "every pod") for p in problems],
                   f"{shown} (every node must run with the same values: --peers compares "
                   "versions, the pre-flight compares these)")


def check_versions(versions: Versions, root: Path) -> CheckResult:
    """`software.versions`: the CANN toolkit and driver this container runs."""
    findings = [Finding("warn", p, "check the install under " + str(root))
                for p in versions.problems]
    if versions.cann is None and versions.driver is None and not findings:
        return skip("software.versions", f"no version files under {root}")
    return verdict("software.versions", findings,
                   f"CANN {versions.cann or 'unknown'}, driver {versions.driver or 'unknown'} "
                   "(every node must run the same)")


def check_server_env(environ: Mapping[str, str], ids: Sequence[int], source: str,
                     mindie_multinode: bool, node_count: Optional[int],
                     table: Optional[str], rootinfo: Path = Path(HCCL_ROOTINFO)
                     ) -> CheckResult:
    """`server.env`: what `boot` changes or notes in the server's environment, judged
    here: proxies, a rank table from elsewhere, device ids multi-node MindIE cannot use."""
    findings = []
    launcher = "mindie" if mindie_multinode else "other"
    nodes = node_count or (2 if mindie_multinode else 1)
    problem = mindie_device_problem(ids, source, environ, launcher, nodes)
    if problem is not None:
        findings.append(Finding("fail", *problem))
    for note in proxy_changes(environ, launcher, nodes).notes:
        if note.startswith("unset"):
            findings.append(Finding("warn", note.replace("unset", "set:", 1),
                                    "`boot` unsets them for the server; a server started "
                                    "another way must not get them"))
    for note in rank_table_notes(environ, table):
        findings.append(Finding("warn", note, "`boot` replaces it; unset it in the image"))
    found = rootinfo_note(rootinfo, table)
    if found:
        findings.append(Finding("warn", found, "remove the mount from the container "
                                "runtime's configuration"))
    return verdict("server.env", findings, "no proxy, no rank table from elsewhere, device "
                   "ids usable by the server")


__all__ = ["check_hccl_ports", "check_hccl_settings", "check_npu_processes",
           "check_server_env", "check_versions"]
