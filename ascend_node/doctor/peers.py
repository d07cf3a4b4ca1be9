"""Cluster comparisons over every node's published facts (`peers.*` checks).

HCCL needs one address family, unique device IPs and one TLS switch across the whole job;
MindIE needs the same device count everywhere. Each check here is pure over the facts.
"""

from __future__ import annotations

import ipaddress
import time
from collections.abc import Mapping, Sequence
from typing import Any

from ascend_node.discover.identity import node_name
from ascend_node.discover.netcheck import family, parse_ip
from ascend_node.doctor.facts import DoctorFacts, PeerRead, usable
from ascend_node.doctor.local import TLS_FIX
from ascend_node.doctor.report import CheckResult, Finding, id_list, ok, skip, verdict
from ascend_node.rendezvous.store import Invalid, Missing

NO_PEERS = "no peer published facts to compare with (see peers.present)"


def _alone(check_id: str, facts: Sequence[DoctorFacts]) -> CheckResult | None:
    """A skip when only this node's facts are at hand: a comparison needs two."""
    return skip(check_id, NO_PEERS) if len(facts) < 2 else None


def check_peers_present(
    reads: Mapping[int, PeerRead], master_count: int, wait: float, fresh_after: float,
) -> CheckResult:
    """`peers.present`: every peer published facts (i.e. runs doctor too), fresh ones."""
    if not reads:
        return skip("peers.present", "no peers: a one-node job")
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
    if (alone := _alone("peers.devices", facts)) is not None:
        return alone
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
    if (alone := _alone("peers.version", facts)) is not None:
        return alone
    versions: dict[str, list[str]] = {}
    for f in facts:
        versions.setdefault(f.agent_version, []).append(f"node {f.global_index}")
    if len(versions) > 1:
        return CheckResult("peers.version", "warn", f"agent versions differ: {_nodes(versions)}",
                           "use one image (one ascend-node version) for every pod of the job")
    return ok("peers.version", f"ascend-node {next(iter(versions), '?')} on every node")



def check_peer_hccl(facts: Sequence[DoctorFacts]) -> CheckResult:
    """`peers.hccl`: one value of each HCCL setting that must agree, one CANN and one driver
    version on every node (the pre-flight's rule, `preflight.agree`: EI0006 much later)."""
    if (alone := _alone("peers.hccl", facts)) is not None:
        return alone
    from ascend_node.discover.health import NodeFacts
    from ascend_node.preflight.agree import judge_node_facts

    master_count = facts[0].master_count
    faults, _warnings = judge_node_facts(
        {f.global_index: NodeFacts(hccl=f.hccl, cann=f.cann, driver=f.driver) for f in facts},
        master_count)
    findings = [Finding("fail", *reason.split("; fix: ", 1)) for reason, _nodes in faults]
    return verdict("peers.hccl", findings, "one value of each HCCL setting, one CANN and one "
                   "driver version on every node that reports them")


def check_peer_duplicates(facts: Sequence[DoctorFacts]) -> CheckResult:
    """`peers.duplicate_ip`: no device address on two nodes (HCCL needs unique device_ip)."""
    if (alone := _alone("peers.duplicate_ip", facts)) is not None:
        return alone
    owners: dict[Any, list[str]] = {}
    for f in facts:
        for d in f.devices:
            addr = parse_ip(d.ip) if usable(d) else None
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
    if (alone := _alone("peers.ip_family", facts)) is not None:
        return alone
    fams: dict[int, list[str]] = {}
    for f in facts:
        for fam in sorted({family(d.ip) for d in f.devices if usable(d)}):
            fams.setdefault(fam, []).append(f"node {f.global_index}")
    if len(fams) > 1:
        return CheckResult("peers.ip_family", "fail",
                           "nodes mix address families: " + _nodes(
                               {f"IPv{k}": v for k, v in sorted(fams.items())}),
                           "give every device of the job an address of one family (EI0001)")
    if not fams:
        return skip("peers.ip_family", "no node reported a usable device address")
    return ok("peers.ip_family", f"IPv{next(iter(fams))} on every node")


def check_peer_netmask(facts: Sequence[DoctorFacts]) -> CheckResult:
    """`peers.netmask`: the same netmask for the same device slot on every node."""
    if (alone := _alone("peers.netmask", facts)) is not None:
        return alone
    findings = []
    slots: dict[tuple[int, int], dict[str, list[str]]] = {}
    for f in facts:
        for pos, d in enumerate(sorted(f.devices, key=lambda x: x.device_id)):
            if usable(d) and d.netmask:  # mixed families are peers.ip_family's concern
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
    if (alone := _alone("peers.subnet", facts)) is not None:
        return alone
    findings = []
    slots: dict[tuple[int, str], dict[str, list[str]]] = {}
    for f in facts:
        for pos, d in enumerate(sorted(f.devices, key=lambda x: x.device_id)):
            if not (usable(d) and d.netmask):
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
    if (alone := _alone("peers.tls", facts)) is not None:
        return alone
    values: dict[int, list[str]] = {}
    for f in facts:
        for v in sorted({d.tls for d in f.devices if d.tls is not None}):
            values.setdefault(v, []).append(f"node {f.global_index}")
    if len(values) > 1:
        return CheckResult("peers.tls", "fail", f"TLS switch differs between nodes: "
                           f"{_nodes(values)}", TLS_FIX)
    if not values:
        return skip("peers.tls", "no node reported a TLS switch (see device.tls)")
    return ok("peers.tls", f"tls switch [{next(iter(values))}] on every node")
