"""Build the HCCL rank table (v1.0, or v1.2 for an A3 SuperPoD) from the run's membership.

The builder is pure and linear in the number of devices. Every table it makes must pass
`validate_rank_table` (the two encode the same rules, listed in `ascend_node.ranktable`), and the
tests hold the two to that.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Optional

from ascend_node.errors import ClusterInconsistent
from ascend_node.ranktable.version import (
    NodeSuperPodReport,
    VersionConflict,
    choose_table_version,
)


@dataclass(frozen=True)
class DeviceEntry:
    """One NPU of one server, by physical id, with its RoCE address."""

    device_id: int
    device_ip: str
    super_device_id: Optional[int] = None  # SDID, A3 SuperPoD only


@dataclass(frozen=True)
class ServerEntry:
    """One node that is already known to be a member of the run."""

    global_index: int
    pod_ip: str
    host_ip: str
    devices: tuple[DeviceEntry, ...]
    super_pod_id: Optional[str] = None  # A3 SuperPoD only


def build_rank_table(servers: Sequence[ServerEntry], version: str = "auto") -> dict[str, Any]:
    """The HCCL rank table for these servers, with every value a JSON string.

    ``version`` is the requested format (``auto``, ``1.0``, ``1.2``; see
    `choose_table_version`). v1.2 adds each device's ``super_device_id`` and a
    ``super_pod_list``; the servers of one super pod are listed contiguously (super pods
    in the order of their lowest node index, nodes in order inside each), and rank ids
    follow that list exactly as in v1.0, so node 0 still holds rank 0.

    Servers follow global node order, devices follow physical id, and rank ids run
    contiguously from 0 with per-server offsets that are prefix sums of the actual device
    counts, so no two servers' rank ranges interleave and rank 0 (the MindIE master) is the
    first server. ``server_id`` is the host IP when every host IP is distinct, otherwise
    every server uses its pod IP: one rule for the whole table, because pods sharing a host
    (or reporting no host IP) would otherwise collide. ``container_ip`` is the pod IP, the
    value exported as ``MIES_CONTAINER_IP``.

    Raises `ClusterInconsistent` for inputs no valid table can come from (no servers, a
    repeated global index, a server without devices, a device id repeated on one server);
    cross-server conflicts such as duplicate device IPs are left to `validate_rank_table`.
    """
    if not servers:
        raise ClusterInconsistent(
            "no servers to build a rank table from",
            "the membership is empty; check that the nodes published to the shared volume",
        )
    ordered = sorted(servers, key=lambda s: s.global_index)
    for before, after in zip(ordered, ordered[1:]):
        if before.global_index == after.global_index:
            raise ClusterInconsistent(
                f"node {after.global_index} appears twice (pod IPs {before.pod_ip} and "
                f"{after.pod_ip})",
                "two pods claim the same global node index; check ROLE/VC_TASK_INDEX",
            )
    chosen = choose_table_version(
        version, {s.global_index: _report(s) for s in ordered})
    if isinstance(chosen, VersionConflict):
        raise ClusterInconsistent(chosen.reason, "every node of a run must agree on the "
                                  "rank-table format; see --table-version")
    if chosen == "1.2":
        ordered = _group_by_super_pod(ordered)
    host_ips = [s.host_ip for s in ordered]
    use_host_ip = len(set(host_ips)) == len(host_ips)

    server_list: list[dict[str, Any]] = []
    next_rank = 0
    for server in ordered:
        devices = sorted(server.devices, key=lambda d: d.device_id)
        if not devices:
            raise ClusterInconsistent(
                f"node {server.global_index} (pod IP {server.pod_ip}) has no devices",
                "every member needs at least one NPU",
            )
        for before_dev, after_dev in zip(devices, devices[1:]):
            if before_dev.device_id == after_dev.device_id:
                raise ClusterInconsistent(
                    f"node {server.global_index} lists device {after_dev.device_id} twice",
                    "check the device list given to that node",
                )
        entries: list[dict[str, Any]] = [
            {
                "device_id": str(device.device_id),
                "device_ip": device.device_ip,
                "rank_id": str(next_rank + offset),
            }
            for offset, device in enumerate(devices)
        ]
        if chosen == "1.2":
            for entry, device in zip(entries, devices):
                if device.super_device_id is None:
                    raise ClusterInconsistent(
                        f"node {server.global_index} reports super pod {server.super_pod_id} "
                        f"but no SDID for device {device.device_id}",
                        "check `npu-smi info -t spod-info` on that node",
                    )
                entry["super_device_id"] = str(device.super_device_id)
        next_rank += len(devices)
        server_list.append(
            {
                "server_id": server.host_ip if use_host_ip else server.pod_ip,
                "container_ip": server.pod_ip,
                "device": entries,
            }
        )
    table: dict[str, Any] = {
        "version": chosen,
        "status": "completed",
        "server_count": str(len(server_list)),
        "server_list": server_list,
    }
    if chosen == "1.2":
        pods: dict[str, list[dict[str, str]]] = {}
        for server, entry in zip(ordered, server_list):
            pods.setdefault(str(server.super_pod_id), []).append(
                {"server_id": entry["server_id"]})
        table["super_pod_list"] = [
            {"super_pod_id": pod_id, "server_list": members} for pod_id, members in pods.items()
        ]
    return table


def _report(server: ServerEntry) -> NodeSuperPodReport:
    return NodeSuperPodReport(
        server.super_pod_id,
        tuple(d.super_device_id for d in server.devices if d.super_device_id is not None),
    )


def _group_by_super_pod(ordered: Sequence[ServerEntry]) -> list[ServerEntry]:
    """Servers of one super pod next to each other: pods by lowest node index, stable."""
    first_seen: dict[Optional[str], int] = {}
    for position, server in enumerate(ordered):
        first_seen.setdefault(server.super_pod_id, position)
    return sorted(ordered, key=lambda s: (first_seen[s.super_pod_id], s.global_index))
