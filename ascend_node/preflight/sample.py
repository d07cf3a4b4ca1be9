"""Which peer devices each node pings, and what a ping's output means (pure).

The sample (`sample_pairs`): `max(peers, local devices)` pairs, at most `PAIR_LIMIT`.
Pair j goes to peer `(me + 1 + j) mod (N-1)` steps round the ring — the next nodes, so
every peer is pinged at least once up to `PAIR_LIMIT + 1` nodes, and above that every node
is still pinged by its `PAIR_LIMIT` predecessors — from local device slot
`(2 me + 1 + j) mod D` to the peer's device in the same slot (HCCL's inter-node traffic
runs between same-slot devices, one RoCE plane each). A node's pairs use every local
slot once before any twice, and a peer pinged by several nodes is pinged on a different
slot by each (`peer + source mod D`), so the cluster as a whole covers the planes.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Union

from ascend_node.discover.hccn import PingPair, parse_ping
from ascend_node.discover.identity import node_name
from ascend_node.errors import ToolError
from ascend_node.preflight.models import PingRecord
from ascend_node.tools import ToolResult

PAIR_LIMIT = 64
"""Pings per node: all run at once, so the time is one ping's, whatever the sample."""
SHOWN = 4


def table_devices(table: Mapping[str, Any]) -> list[list[tuple[int, str]]]:
    """(device_id, device_ip) of every server, in table order (= global node order)."""
    out = []
    for server in table.get("server_list", []):
        devs = [(int(d["device_id"]), str(d["device_ip"])) for d in server.get("device", [])]
        out.append(sorted(devs))
    return out


def sample_pairs(servers: Sequence[Sequence[tuple[int, str]]], me: int,
                 limit: int = PAIR_LIMIT) -> list[PingPair]:
    n = len(servers)
    local = list(servers[me]) if 0 <= me < n else []
    if n < 2 or not local:
        return []
    count = min(max(n - 1, len(local)), limit)
    pairs = []
    seen = set()
    for j in range(count):
        peer = (me + 1 + j % (n - 1)) % n
        remote = servers[peer]
        if not remote:
            continue
        slot = (2 * me + 1 + j) % len(local)
        dev_id, _ip = local[slot]
        peer_dev, peer_ip = remote[slot % len(remote)]
        key = (dev_id, peer, peer_dev)
        if key not in seen:
            seen.add(key)
            pairs.append(PingPair(dev_id, peer, peer_dev, peer_ip))
    return pairs


def classify(me: int, pair: PingPair, res: Union[ToolResult, ToolError]) -> PingRecord:
    """`0 received` is unreachable; a timeout or an unreadable answer is unknown (a
    wedged tool is no proof of a broken path); some loss is ok with a note."""
    def rec(result: str, detail: str = "") -> PingRecord:
        return PingRecord(source=me, device_id=pair.device_id, peer=pair.peer,
                          peer_device=pair.peer_device, address=pair.address,
                          result=result, detail=detail[:500])  # type: ignore[arg-type]

    if isinstance(res, ToolError):
        return rec("unknown", res.cause)
    text = res.stdout + res.stderr
    summary = parse_ping(text)
    if summary is None:
        shown = text.strip().replace("\n", "\\n")[:160]
        return rec("unknown", f"no ping summary (exit {res.returncode}): {shown!r}")
    sent, received, loss = summary
    if received == 0:
        return rec("unreachable", f"{sent} sent, 0 received, {loss:.2f}% loss")
    return rec("ok", f"{loss:.2f}% loss" if loss > 0 else "")


def pair_text(r: PingRecord, master_count: int) -> str:
    """`worker 0 (node 1) device 3 -> master 0 (node 0) device 3 (10.20.1.3)`."""
    return (f"{node_name(r.source, master_count)} device {r.device_id} -> "
            f"{node_name(r.peer, master_count)} device {r.peer_device} ({r.address})")


def describe_unreachable(records: Sequence[PingRecord], master_count: int) -> str:
    ordered = sorted(records, key=lambda r: (r.source, r.device_id, r.peer, r.peer_device))
    shown = "; ".join(f"{pair_text(r, master_count)}: {r.detail}" for r in ordered[:SHOWN])
    more = len(ordered) - SHOWN
    return (f"{len(ordered)} sampled device pair(s) unreachable over RoCE: {shown}"
            + (f"; and {more} more" if more > 0 else ""))


WARNINGS_SHOWN = 16


def reach_warnings(records: Sequence[PingRecord], master_count: int) -> list[str]:
    """Unknown answers and partial loss: reported, never fatal (the first few, then how
    many more, so a wedged tool on every node cannot flood the logs)."""
    out = []
    for r in sorted(records, key=lambda r: (r.source, r.device_id, r.peer, r.peer_device)):
        if r.result == "unknown":
            out.append(f"{pair_text(r, master_count)}: no answer ({r.detail})")
        elif r.result == "ok" and r.detail:
            out.append(f"{pair_text(r, master_count)}: {r.detail}")
    if len(out) > WARNINGS_SHOWN:
        more = len(out) - WARNINGS_SHOWN
        out = [*out[:WARNINGS_SHOWN], f"and {more} more sampled pairs with packet loss or "
               "no answer"]
    return out
