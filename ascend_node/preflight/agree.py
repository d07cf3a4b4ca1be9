"""Node 0's judgement of the node-wide facts (pure, table-tested; docs/preflight.md).

- an NPU still held after the member's bounded wait: a fault naming device, PID and name
  (HCCL fails with EJ0001, hiyouga/LlamaFactory #3839, #6646);
- a host port of HCCL's range that another process listens on: a fault naming the port
  and the variable that moves the range (Bind_Failed EJ0003, vllm-ascend #4725); a port a
  connection uses now, or one in the ephemeral range that is not reserved: warnings;
- a HCCL value CANN refuses, or an agreed HCCL setting, CANN or driver version that differs
  between nodes: a fault naming the nodes and both values (EI0006 time-outs 30 minutes
  later: vllm-ascend #2248, #486, #9447).

A member that published no facts (older agent, pre-flight off) is skipped, and one whose
value is unknown is left out of the comparison (with a warning).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Optional

from ascend_node.discover.hccl_ports import ranges_text
from ascend_node.discover.health import NodeFacts
from ascend_node.discover.identity import node_name

NODES_SHOWN = 6
HOLDERS_SHOWN = 4


def nodes_text(indices: Iterable[int], master_count: int) -> str:
    """`master 0 (node 0), worker 1 (node 2)` (the first few, then how many more)."""
    ordered = sorted(set(indices))
    shown = ", ".join(node_name(i, master_count) for i in ordered[:NODES_SHOWN])
    more = len(ordered) - NODES_SHOWN
    return shown + (f" and {more} more nodes" if more > 0 else "")


def _differs(what: str, values: Mapping[int, str], master_count: int,
             remedy: str) -> Optional[tuple[str, tuple[int, ...]]]:
    """One message when the nodes hold more than one value (smaller side first)."""
    sides: dict[str, list[int]] = {}
    for index, value in values.items():
        sides.setdefault(value, []).append(index)
    if len(sides) < 2:
        return None
    ordered = sorted(sides.items(), key=lambda kv: (len(kv[1]), kv[0]))
    spread = "; ".join(f"{value} on {nodes_text(where, master_count)}"
                       for value, where in ordered)
    return (f"{what} differs between nodes: {spread}; fix: {remedy}",
            tuple(sorted(values)))


Found = tuple[list[tuple[str, tuple[int, ...]]], list[str]]


def judge_node_facts(facts: Mapping[int, NodeFacts], master_count: int) -> Found:
    """(faults as (reason, nodes), warnings) over the members that published facts."""
    faults: list[tuple[str, tuple[int, ...]]] = []
    warnings: list[str] = []
    held = {i: f.holders for i, f in facts.items() if f.holders}
    if held:
        parts = []
        for index in sorted(held)[:NODES_SHOWN]:
            rows = held[index] or ()
            shown = ", ".join(f"device {h.device_id} PID {h.pid} "
                              f"({h.name or 'no name shown'})" for h in rows[:HOLDERS_SHOWN])
            more = len(rows) - HOLDERS_SHOWN
            parts.append(f"{node_name(index, master_count)}: {shown}"
                         + (f" and {more} more" if more > 0 else "")
                         + f" (still there after {facts[index].held_wait:.0f} s)")
        faults.append((
            "NPU held by another process (HCCL fails with EJ0001 `Failed to initialize the "
            f"HCCP process`): {'; '.join(parts)}; fix: end that process or let the previous "
            "pod on these NPUs finish terminating (`npu-smi info` lists it), or give the pod "
            "other NPUs, then restart the job", tuple(sorted(held))))
    for index in sorted(facts):
        f = facts[index]
        name = node_name(index, master_count)
        if f.hccl_problems:
            faults.append((f"HCCL setting CANN refuses on {name}: "
                           f"{'; '.join(f.hccl_problems)}; fix: correct the value in the "
                           "job's environment (the same on every pod)", (index,)))
        p = f.ports
        if p is None:
            continue
        mover = ("HCCL_HOST_SOCKET_PORT_RANGE" if p.variable == "HCCL_HOST_SOCKET_PORT_RANGE"
                 else "HCCL_IF_BASE_PORT")
        if p.listening:
            faults.append((
                f"HCCL host port(s) {ranges_text(p.listening)} on {name} already have a "
                f"listener (HCCL's range {p.ports}, from {p.variable}; its bind fails with "
                f"Bind_Failed EJ0003); fix: stop what listens there (another instance on "
                f"the host with hostNetwork?), or move the range with {mover}", (index,)))
        if p.busy:
            warnings.append(
                f"HCCL host port(s) {ranges_text(p.busy)} on {name} are used by a connection "
                f"now (HCCL's range {p.ports}); if it is still open when HCCL binds, HCCL "
                f"fails with EJ0003: reserve the range (net.ipv4.ip_local_reserved_ports) or "
                f"move it with {mover}")
    unreserved: dict[str, list[int]] = {}
    for index, f in facts.items():
        if f.ports is not None and f.ports.unreserved:
            shown = f.ports.unreserved
            text = (shown + ("" if shown == f.ports.ports else f" (of {f.ports.ports})")
                    + f" inside the ephemeral range {f.ports.ephemeral}")
            unreserved.setdefault(text, []).append(index)
    for text, where in sorted(unreserved.items()):
        ports = text.split(" ", 1)[0]
        warnings.append(
            f"HCCL host ports {text} are not in net.ipv4.ip_local_reserved_ports on "
            f"{nodes_text(where, master_count)}: an outgoing connection can take one before "
            f"HCCL binds it; fix: `sysctl -w net.ipv4.ip_local_reserved_ports={ports}` on "
            "the host (CANN's HCCL_IF_BASE_PORT docs ask for it)")
    names = sorted({k for f in facts.values() for k in f.hccl})
    for key in names:
        values = {i: f.hccl[key] for i, f in facts.items() if key in f.hccl}
        found = _differs(key, values, master_count,
                         f"set one {key} for every pod of the job (HCCL needs every rank "
                         "to agree; a mismatch fails link set-up with EI0006 much later)")
        if found:
            faults.append(found)
    for what, attr, remedy in (
            ("CANN toolkit version", "cann", "run one image (the same CANN) on every node"),
            ("NPU driver version", "driver", "install one driver version on every host, or "
             "schedule the job on hosts that share one")):
        values = {i: getattr(f, attr) for i, f in facts.items() if getattr(f, attr)}
        found = _differs(what, values, master_count, remedy)
        if found:
            faults.append(found)
    unknown = {i: f.unknown for i, f in facts.items() if f.unknown}
    for index in sorted(unknown)[:NODES_SHOWN]:
        warnings.append(f"{node_name(index, master_count)}: not checked: "
                        f"{'; '.join(unknown[index][:3])}")
    return faults, warnings

