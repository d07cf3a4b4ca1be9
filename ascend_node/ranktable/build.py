"""Build the HCCL v1.0 rank table from the run's membership.

The builder is pure and linear in the number of devices. Every table it makes must pass
`validate_rank_table` (the two encode the same rules, ascend-facts.md §2, §3.2), and the
tests hold the two to that.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ascend_node.errors import ClusterInconsistent


@dataclass(frozen=True)
class DeviceEntry:
    """One NPU of one server, by physical id, with its RoCE address."""

    device_id: int
    device_ip: str


@dataclass(frozen=True)
class ServerEntry:
    """One node that is already known to be a member of the run."""

    global_index: int
    pod_ip: str
    host_ip: str
    devices: tuple[DeviceEntry, ...]


def build_rank_table(servers: Sequence[ServerEntry]) -> dict[str, Any]:
    """The HCCL v1.0 rank table for these servers, with every value a JSON string.

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
        entries = [
            {
                "device_id": str(device.device_id),
                "device_ip": device.device_ip,
                "rank_id": str(next_rank + offset),
            }
            for offset, device in enumerate(devices)
        ]
        next_rank += len(devices)
        server_list.append(
            {
                "server_id": server.host_ip if use_host_ip else server.pod_ip,
                "container_ip": server.pod_ip,
                "device": entries,
            }
        )
    return {
        "version": "1.0",
        "status": "completed",
        "server_count": str(len(server_list)),
        "server_list": server_list,
    }
