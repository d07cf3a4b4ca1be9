"""Node 0's judgement of the health facts the members published (pure, table-tested).

HCCL needs one TLS switch on every device of every node (EI0016 at root-info init) and
every device's RoCE link UP; a net health other than Success or Init (MindCluster treats
both as healthy: Ascend/mind-cluster component/ascend-common/devmanager/common/
constants.go) often recovers and is reported, not fatal. The node-wide facts (held NPUs,
host ports, HCCL settings, versions) are judged by `agree`. A member that published no facts
(preflight off there, or an older agent) is skipped: its absence is not evidence of a fault.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from ascend_node.discover.devices import id_list
from ascend_node.discover.hccn import HEALTHY_NET
from ascend_node.discover.health import NodeHealth
from ascend_node.discover.identity import node_name
from ascend_node.preflight.agree import judge_node_facts

TLS_REMEDY = ("set one value on every device of every node, e.g. `hccn_tool -i <dev> -tls -s "
              "enable 0` for each device of {nodes} (MindIE's FAQ), then restart the job")
NODES_SHOWN = 6


@dataclass(frozen=True)
class Fault:
    """A cluster that cannot work: the reason (with the remedy) and the nodes at fault."""

    reason: str
    nodes: tuple[int, ...]


@dataclass(frozen=True)
class HealthVerdict:
    faults: tuple[Fault, ...] = ()
    warnings: tuple[str, ...] = field(default=())


def _where(groups: Mapping[int, Sequence[int]], master_count: int) -> str:
    """`master 0 (node 0) devices 0-7, worker 1 (node 2) device 3` (first few nodes)."""
    parts = []
    for index in sorted(groups)[:NODES_SHOWN]:
        ids = sorted(groups[index])
        noun = "device" if len(ids) == 1 else "devices"
        parts.append(f"{node_name(index, master_count)} {noun} {id_list(ids)}")
    more = len(groups) - NODES_SHOWN
    return ", ".join(parts) + (f" and {more} more nodes" if more > 0 else "")


def judge_health(health: Mapping[int, NodeHealth], master_count: int) -> HealthVerdict:
    """Faults (TLS mismatch, link DOWN) and warnings (net health, unknown values) over
    the members present; every message names nodes and devices."""
    faults: list[Fault] = []
    warnings: list[str] = []
    tls: dict[int, dict[int, list[int]]] = {}
    down: dict[int, list[int]] = {}
    unhealthy: dict[str, dict[int, list[int]]] = {}
    unknown: dict[int, list[int]] = {}
    for index in sorted(health):
        for d in health[index].devices:
            if d.tls is not None:
                tls.setdefault(d.tls, {}).setdefault(index, []).append(d.device_id)
            if d.link is not None and d.link.upper() != "UP":
                down.setdefault(index, []).append(d.device_id)
            if d.health is not None and d.health not in HEALTHY_NET:
                unhealthy.setdefault(d.health, {}).setdefault(index, []).append(d.device_id)
            if d.tls is None or d.link is None or d.health is None:
                unknown.setdefault(index, []).append(d.device_id)
    if len(tls) > 1:
        # The smaller side is the likelier outlier: name it first and in the remedy.
        sides = sorted(tls.items(), key=lambda kv: (sum(map(len, kv[1].values())), kv[0]))
        spread = "; ".join(f"switch {value} on {_where(where, master_count)}"
                           for value, where in sides)
        remedy = TLS_REMEDY.format(nodes=_where(sides[0][1], master_count))
        nodes = tuple(sorted({i for _v, where in sides for i in where}))
        faults.append(Fault(f"TLS switch differs between devices (HCCL fails with EI0016): "
                            f"{spread}; fix: {remedy}", nodes))
    if down:
        faults.append(Fault(
            f"RoCE link DOWN on {_where(down, master_count)}, which the table uses (see "
            "`hccn_tool -i <dev> -link -g`); fix: check the cable, optical module and switch "
            "port (history: `hccn_tool -i <dev> -link_stat -g`), or give the pod other NPUs",
            tuple(sorted(down))))
    for status, where in sorted(unhealthy.items()):
        warnings.append(f"net health {status} (not Success/Init) on "
                        f"{_where(where, master_count)}: `hccn_tool -i <dev> -net_health -g`; "
                        "check the device's address and its detect address (netdetect_<dev> "
                        "in /etc/hccn.conf)")
    if unknown:
        warnings.append(f"link, net health or TLS switch unknown on "
                        f"{_where(unknown, master_count)} (hccn_tool gave no value); "
                        "not checked there")
    facts = {i: h.node for i, h in health.items() if h.node is not None}
    if facts:
        node_faults, node_warnings = judge_node_facts(facts, master_count)
        faults.extend(Fault(reason, nodes) for reason, nodes in node_faults)
        warnings.extend(node_warnings)
    return HealthVerdict(tuple(faults), tuple(warnings))


def apply_policy(verdict: HealthVerdict, policy: str) -> HealthVerdict:
    """`strict` keeps the faults; `warn` turns them into warnings; `off` drops everything."""
    if policy == "off":
        return HealthVerdict()
    if policy == "warn":
        return HealthVerdict((), tuple(f.reason for f in verdict.faults) + verdict.warnings)
    return verdict
