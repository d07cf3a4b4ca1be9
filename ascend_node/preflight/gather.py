"""A member's own device health, gathered once at start-up for the rendezvous.

The same probes as `doctor` (`doctor.local.query_device_states`: `hccn_tool -i N -link
-g`, `-net_health -g`, `-tls -g`, concurrently, each with the tool timeout) and the same
parsers; a probe that fails leaves the value unknown with the tool's words, never an
error: the pre-flight must not turn a tool quirk into a failed start-up.

Beside them, the node-wide facts (`gather_node`): the processes `npu-smi info` lists on
this node's devices (after a bounded wait for them to end), HCCL's host ports in this
network namespace, the HCCL settings and the CANN/driver versions.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Callable, Optional

from ascend_node.discover.hccl_ports import (
    PROC_NET,
    PROC_SYS_NET,
    PortSpecError,
    ranges_text,
    read_port_facts,
)
from ascend_node.discover.hccl_settings import effective_settings, read_versions, setting_problems
from ascend_node.discover.hccn import DeviceState, query_device_states
from ascend_node.discover.health import DeviceHealth, Holder, NodeFacts, NodeHealth, PortHealth
from ascend_node.discover.netcheck import family
from ascend_node.discover.npu_processes import (
    ProcessTableError,
    describe_holder,
    holders_of,
    parse_npu_processes,
)
from ascend_node.errors import ToolError
from ascend_node.tools import ToolResult, run_tool, shown_output

log = logging.getLogger("ascend_node.preflight")

PROBES = ("link", "net_health", "tls")
MAX_WORKERS = 32


def to_health(states: Sequence[DeviceState], ips: Sequence[str]) -> NodeHealth:
    """Pure: the published form of the gathered states (IP family from the device IPs)."""
    fams = {family(ip) for ip in ips if ip}
    return NodeHealth(
        ip_family=6 if fams == {6} else 4,
        devices=tuple(DeviceHealth(
            device_id=s.device_id,
            link=(s.link or None) and s.link[:32],
            health=(s.health or None) and s.health[:64],
            tls=s.tls if s.tls is not None and 0 <= s.tls <= 9 else None,
            unknown="; ".join(f"{k}: {v}" for k, v in sorted(s.errors.items()))[:500],
        ) for s in states),
    )


def gather_health(ids: Sequence[int], ips: Sequence[str], hccn_tool: str, tool_timeout: float,
                  runner: Callable[..., ToolResult] = run_tool) -> NodeHealth:
    # One round for all probes (8 NPUs: 24 calls), so they finish within the IP queries
    # they run beside; bounded for 16-NPU nodes.
    workers = min(MAX_WORKERS, len(PROBES) * len(ids))
    states = query_device_states(ids, hccn_tool, tool_timeout, {}, runner,
                                 max_workers=max(1, workers), probes=PROBES)
    return to_health(states, ips)


# ------------------------------------------------------------------ node-wide facts

HOLD_POLL = 1.0
"""Seconds between two looks at `npu-smi info` while a device is held."""


def gather_holders(ids: Sequence[int], npu_smi: str, tool_timeout: float, hold_wait: float,
                   runner: Callable[..., ToolResult] = run_tool,
                   clock: Callable[[], float] = time.monotonic,
                   sleep: Callable[[float], object] = time.sleep,
                   stop: Optional[threading.Event] = None,
                   ) -> tuple[Optional[tuple[Holder, ...]], float, str]:
    """The processes on this node's devices once the bounded wait is over: (holders or
    None when unknown, seconds waited, why unknown). A holder that goes within
    `hold_wait` (the previous pod's container still being torn down) is no fault.
    `stop` ends the wait early (the start-up failed elsewhere)."""
    started = clock()
    logged = False
    while True:
        try:
            res = runner([npu_smi, "info"], timeout=tool_timeout)
            rows = holders_of(parse_npu_processes(res.stdout), ids)
        except ToolError as exc:
            return None, clock() - started, f"npu processes: {exc.cause}"[:300]
        except ProcessTableError as exc:
            shown = shown_output(res.stdout + res.stderr, 120)
            return None, clock() - started, (f"npu processes: `{npu_smi} info` (exit "
                                             f"{res.returncode}): {exc}; printed {shown}")[:300]
        waited = clock() - started
        if not rows or waited >= hold_wait or (stop is not None and stop.is_set()):
            return tuple(Holder(device_id=p.device_id, pid=p.pid, name=p.name[:64],
                                memory_mb=p.memory_mb) for p in rows), waited, ""
        if not logged:
            logged = True
            log.info("pre-flight: %s; waiting up to %.0f s for it to end",
                     "; ".join(describe_holder(p) for p in rows[:4]), hold_wait)
        pause = min(HOLD_POLL, max(0.0, hold_wait - waited))
        if stop is not None:
            stop.wait(pause)
        else:
            sleep(pause)


def gather_node(ids: Sequence[int], npu_smi: str, environ: Mapping[str, str],
                ascend_root: Path, tool_timeout: float, hold_wait: float,
                runner: Callable[..., ToolResult] = run_tool,
                proc_net: Path = PROC_NET, proc_sys: Path = PROC_SYS_NET,
                stop: Optional[threading.Event] = None) -> NodeFacts:
    """Holders, host ports, HCCL settings and versions; never raises for a fact it
    cannot find (the reason goes to `unknown`)."""
    unknown: list[str] = []
    versions = read_versions(ascend_root)
    unknown.extend(versions.problems)
    ports: Optional[PortHealth] = None
    problems = setting_problems(environ)
    try:
        found = read_port_facts(environ, versions.cann, proc_net, proc_sys)
        low, high = found.ephemeral
        ports = PortHealth(variable=found.ports.variable, ports=found.ports.text[:200],
                           listening=found.listening[:256], busy=found.busy[:256],
                           unreserved=ranges_text(found.unreserved)[:400],
                           ephemeral=f"{low}-{high}")
    except PortSpecError as exc:
        problems.append(str(exc))
    except (OSError, ValueError) as exc:
        unknown.append(f"host ports: {exc}"[:300])
    holders, waited, why = gather_holders(ids, npu_smi, tool_timeout, hold_wait, runner,
                                          stop=stop)
    if why:
        unknown.append(why)
    return NodeFacts(holders=holders, held_wait=round(waited, 3), ports=ports,
                     hccl=effective_settings(environ),
                     hccl_problems=tuple(p[:300] for p in problems[:16]),
                     cann=versions.cann and versions.cann[:64],
                     driver=versions.driver and versions.driver[:64],
                     unknown=tuple(unknown[:16]))
