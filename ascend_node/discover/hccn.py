"""`hccn_tool` queries beyond a device's IP: link, net health, TLS switch, and ping.

Shared by `doctor` (which judges them one node at a time) and the start-up pre-flight
(which publishes them for node 0): each probe runs concurrently with the others, each call
with its own timeout, and is parsed by the `devices` parsers (formats: Ascend/mind-cluster
docs/en/faultdiag/user_guide/03_collecting_logs.md and its faultdiag test captures). A
module of its own so the start-up path does not import the whole doctor.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Callable, Optional, Union

from ascend_node.discover import devices as dev
from ascend_node.discover.netcheck import family, unusable_reason
from ascend_node.errors import ToolError
from ascend_node.tools import ToolResult, run_tool, shown_output

# MindCluster treats both as healthy (Ascend/mind-cluster
# component/ascend-common/devmanager/common/constants.go).
HEALTHY_NET = ("Success", "Init")
PING_WORKERS = 16


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
    netdetect: Optional[str] = None  # asked by doctor only (explains net health Init)
    errors: Mapping[str, str] = field(default_factory=dict)

    @property
    def usable_ip(self) -> bool:
        return bool(self.ip) and unusable_reason(self.ip) is None


def printed(res: ToolResult) -> str:
    """What a tool printed, cut to one line: the cause when its output had no usable value."""
    return f"`{res.command}` printed {shown_output(res.stdout + res.stderr, 160)} " \
        f"(exit {res.returncode})"


def query_device_states(
    ids: Sequence[int], hccn_tool: str, tool_timeout: float, conf: Mapping[int, Mapping[str, str]],
    runner: Callable[..., ToolResult] = run_tool, max_workers: int = 16,
    probes: Sequence[str] = ("ip", "link", "net_health", "tls"),
) -> list[DeviceState]:
    """Every probe of every device, concurrently, each call with its own timeout.
    (The pre-flight asks all but `ip`, which discovery already has.)"""

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
                slot["errors"]["ip"] = printed(res)
            continue
        parsed: Any = {"link": dev.parse_link_status, "net_health": dev.parse_net_health,
                       "tls": dev.parse_tls_switch, "netdetect": dev.parse_netdetect}[what](text)
        if parsed is None:
            slot["errors"][what] = printed(res)
        else:
            slot["health" if what == "net_health" else what] = parsed
    out = []
    for i in ids:
        entry = conf.get(i, {})
        out.append(DeviceState(device_id=i, conf_ip=entry.get("address", ""),
                               conf_netmask=entry.get("netmask", ""), **by_dev[i]))
    return out


@dataclass(frozen=True)
class PingPair:
    device_id: int
    peer: int
    peer_device: int
    address: str


_PING_SUMMARY = re.compile(
    r"(\d+)\s+packets transmitted,\s*(\d+)\s+received,\s*([0-9.]+)%\s*packet loss")


def parse_ping(text: str) -> Optional[tuple[int, int, float]]:
    """(transmitted, received, loss %) from hccn_tool's ping summary line, else None."""
    m = _PING_SUMMARY.search(text)
    return (int(m.group(1)), int(m.group(2)), float(m.group(3))) if m else None


def ping_argv(hccn_tool: str, pair: PingPair) -> list[str]:
    """IPv4: `-ping -g address X`; IPv6: `-ping -inet6 -g ipv6_address X`.

    Sources: vllm-ascend docs/source/installation.md (the IPv4 check), the Ascend Rec SDK
    FAQ (the IPv6 form); the loss line is what Ascend/mind-cluster's zh FAQ quotes."""
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
