"""The `peers.ping` check: a sampled ping matrix between this node's devices and the
same-slot devices of its peers, through `hccn_tool -ping` (the RoCE path, not the pod
network)."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Union

from ascend_node.discover.hccn import PING_WORKERS as PING_WORKERS
from ascend_node.discover.hccn import PingPair as PingPair
from ascend_node.discover.hccn import parse_ping as parse_ping
from ascend_node.discover.hccn import ping_argv as ping_argv
from ascend_node.discover.hccn import printed
from ascend_node.discover.hccn import run_pings as run_pings
from ascend_node.discover.identity import node_name
from ascend_node.doctor.facts import DoctorFacts, usable
from ascend_node.doctor.report import CheckResult, Finding, skip, verdict
from ascend_node.errors import ToolError
from ascend_node.tools import ToolResult

PING_PAIR_LIMIT = 64
"""At most this many (local device, peer device) pings: 64 nodes x 16 NPUs would be
16,000 pairs; a deterministic sample still finds a broken switch port or plane."""


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
            if not (usable(d) and d.link in (None, "UP") and usable(r)
                    and r.link in (None, "UP")):
                skipped += 1
                continue
            pairs.append(PingPair(d.device_id, peer.global_index, r.device_id, r.ip))
    if len(pairs) <= limit:
        return pairs, skipped, 0

    def key(p: PingPair) -> str:
        text = f"{mine.global_index}|{p.device_id}|{p.peer}|{p.peer_device}"
        return hashlib.sha256(text.encode()).hexdigest()

    chosen = sorted(sorted(pairs, key=key)[:limit],
                    key=lambda p: (p.peer, p.device_id))
    return chosen, skipped, len(pairs) - limit


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
            findings.append(Finding("warn", f"{what}: no ping summary; {printed(res)}", fix))
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
    if not results:
        return skip("peers.ping", f"no device pairs to ping{tail or ' (no peer devices)'}")
    return verdict("peers.ping", findings, f"{len(results)} pairs answer{tail}")
