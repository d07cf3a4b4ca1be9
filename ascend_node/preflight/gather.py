"""A member's own device health, gathered once at start-up for the rendezvous.

The same probes as `doctor` (`doctor.local.query_device_states`: `hccn_tool -i N -link
-g`, `-net_health -g`, `-tls -g`, concurrently, each with the tool timeout) and the same
parsers; a probe that fails leaves the value unknown with the tool's words, never an
error: the pre-flight must not turn a tool quirk into a failed start-up.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Callable

from ascend_node.discover.hccn import DeviceState, query_device_states
from ascend_node.discover.health import DeviceHealth, NodeHealth
from ascend_node.discover.netcheck import family
from ascend_node.tools import ToolResult, run_tool

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
