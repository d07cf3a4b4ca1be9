"""Server- and device-level rank-table rules, and the cross-server ones (uniqueness, ranks)."""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Optional

from ascend_node.ranktable.limits import (
    HCCL_MAX_SERVER_ID,
    MINDIE_DEVICES_PER_SERVER,
    MINDIE_MAX_DEVICE_ID,
    MINDIE_MAX_RANK_ID,
)
from ascend_node.ranktable.problems import Checker
from ascend_node.ranktable.superpods import SuperPods
from ascend_node.ranktable.values import NOT_DECIMAL, ip_problem, is_decimal, kind_of, show

# Optional fields whose values are still read as strings by HCCL/MindCluster/MindSpore.
_OPTIONAL_SERVER_STRINGS = ("host_ip", "host_nic_ip")
_OPTIONAL_DEVICE_STRINGS = (
    "device_port",
    "backup_device_ip",
    "backup_device_port",
    "host_port",
)


@dataclass
class _Rank:
    path: str
    text: str
    value: int


class ServerListChecker:
    """Server- and device-level rules, plus the cross-server ones (uniqueness, ranks)."""

    def __init__(
        self, c: Checker, doc: Mapping[str, Any], version: Optional[str], servers: list[Any]
    ) -> None:
        self.c = c
        self.doc = doc
        self.version = version
        self.servers = servers
        self.total_devices = sum(
            len(s["device"])
            for s in servers
            if isinstance(s, Mapping) and isinstance(s.get("device"), list)
        )
        self.server_ids: dict[str, int] = {}
        self.container_ips: dict[str, int] = {}
        self.device_ips: dict[str, str] = {}
        self.first_family: Optional[tuple[int, str]] = None
        self.ranks: list[_Rank] = []
        self.ranks_by_server: dict[int, list[int]] = {}
        self.device_counts: dict[int, int] = {}
        self.rank_zero_servers: list[int] = []
        # Set when some device has no usable rank_id: gaps and blocks are then not judged,
        # since they would only echo the problem already reported for that device.
        self.ranks_incomplete = False
        self.pods = SuperPods(c, doc, version, servers)

    def device_ip_required(self) -> bool:
        if self.c.mindie:
            return True
        if self.version == "1.2" and self.pods.present:
            return self.pods.count > 1
        return len(self.servers) > 1

    def run(self) -> None:
        self.pods.check_list()
        for index, server in enumerate(self.servers):
            self.check_server(index, server)
        self.pods.check_membership(self.server_ids)
        self.check_ranks()
        if self.c.mindie:
            self.check_mindie_cross_server()

    # ------------------------------------------------------------------ server

    def check_server(self, index: int, server: Any) -> None:
        c = self.c
        path = f"$.server_list[{index}]"
        if not isinstance(server, Mapping):
            c.add(path, f"a server must be a JSON object, got {kind_of(server)} {show(server)}")
            return
        server_id = c.string(server, "server_id", path, required=True)
        if server_id is not None:
            self.check_server_id(index, path, server_id)
        container_ip = c.string(server, "container_ip", path, required=c.mindie)
        if container_ip is not None and c.mindie:
            self.check_container_ip(index, path, container_ip)
        for key in _OPTIONAL_SERVER_STRINGS:
            c.string(server, key, path, required=False)

        devices = server.get("device")
        if "device" not in server:
            c.add(f"{path}.device", "device is missing")
            return
        if not isinstance(devices, list):
            c.add(
                f"{path}.device",
                f"device must be a JSON array, got {kind_of(devices)} {show(devices)}",
            )
            return
        if not devices:
            c.add(f"{path}.device", f"server {show(server_id)} has no devices")
        self.device_counts[index] = len(devices)
        low, high = MINDIE_DEVICES_PER_SERVER
        if c.mindie and devices and not low <= len(devices) <= high:
            c.add(
                f"{path}.device",
                f"server {show(server_id)} has {len(devices)} devices: MindIE allows {low}..{high}",
            )
        device_ids: dict[str, str] = {}
        for dev_index, device in enumerate(devices):
            self.check_device(index, server_id, f"{path}.device[{dev_index}]", device, device_ids)

    def check_server_id(self, index: int, path: str, server_id: str) -> None:
        c = self.c
        if not server_id:
            c.add(f"{path}.server_id", "server_id is empty")
            return
        if len(server_id) > HCCL_MAX_SERVER_ID:
            c.add(
                f"{path}.server_id",
                f"server_id {show(server_id)} is {len(server_id)} characters: HCCL allows "
                f"at most {HCCL_MAX_SERVER_ID}",
            )
        if server_id in self.server_ids:
            c.add(
                f"{path}.server_id",
                f"server_id {show(server_id)} is also used by "
                f"server_list[{self.server_ids[server_id]}]",
            )
        else:
            self.server_ids[server_id] = index
        if c.mindie:
            try:
                ipaddress.ip_address(server_id)
            except ValueError:
                c.add(
                    f"{path}.server_id",
                    f"server_id {show(server_id)} is not an IP address (atb_llm rejects "
                    "host names)",
                )

    def check_container_ip(self, index: int, path: str, container_ip: str) -> None:
        c = self.c
        if not container_ip:
            c.add(f"{path}.container_ip", "container_ip is empty")
            return
        # Only "an address one can listen on": MindIE's own test table uses 127.0.0.1 here.
        try:
            if ipaddress.ip_address(container_ip).is_unspecified:
                c.add(
                    f"{path}.container_ip",
                    f"container_ip {show(container_ip)} is the unspecified address",
                )
        except ValueError:
            c.add(
                f"{path}.container_ip",
                f"container_ip {show(container_ip)} is not an IPv4 or IPv6 address",
            )
        if container_ip in self.container_ips:
            c.add(
                f"{path}.container_ip",
                f"container_ip {show(container_ip)} is also used by "
                f"server_list[{self.container_ips[container_ip]}]",
            )
        else:
            self.container_ips[container_ip] = index

    # ------------------------------------------------------------------ device

    def check_device(
        self,
        server_index: int,
        server_id: Optional[str],
        path: str,
        device: Any,
        device_ids: dict[str, str],
    ) -> None:
        c = self.c
        if not isinstance(device, Mapping):
            c.add(path, f"a device must be a JSON object, got {kind_of(device)} {show(device)}")
            self.ranks_incomplete = True
            return
        device_id = c.string(device, "device_id", path, required=True)
        if device_id is not None:
            self.check_device_id(path, server_id, device_id, device_ids)
        self.check_device_ip(path, device)
        rank_text = c.string(device, "rank_id", path, required=True)
        if rank_text is None:
            self.ranks_incomplete = True
        else:
            self.check_rank(server_index, path, rank_text)
        for key in _OPTIONAL_DEVICE_STRINGS:
            c.string(device, key, path, required=False)
        self.pods.check_device(server_id, path, device)

    def check_device_id(
        self,
        path: str,
        server_id: Optional[str],
        device_id: str,
        seen: dict[str, str],
    ) -> None:
        c = self.c
        if not is_decimal(device_id):
            c.add(
                f"{path}.device_id",
                f"device_id {show(device_id)} {NOT_DECIMAL}",
            )
            return
        if device_id in seen:
            c.add(
                f"{path}.device_id",
                f"device_id {show(device_id)} appears twice on server {show(server_id)} "
                f"(also {seen[device_id]})",
            )
        else:
            seen[device_id] = path
        if c.mindie and int(device_id) > MINDIE_MAX_DEVICE_ID:
            c.add(
                f"{path}.device_id",
                f"device_id {show(device_id)} is outside MindIE's range 0..{MINDIE_MAX_DEVICE_ID}",
            )

    def check_device_ip(self, path: str, device: Mapping[str, Any]) -> None:
        c = self.c
        required = self.device_ip_required()
        if not required and device.get("device_ip") == "":
            return  # optional and left blank (MindCluster does this inside one super pod)
        text = c.string(device, "device_ip", path, required=required)
        if text is None:
            return
        address, reason = ip_problem(text)
        if reason:
            c.add(f"{path}.device_ip", f"device_ip {show(text)} {reason}")
        if address is None:
            return
        key = str(address)
        if key in self.device_ips:
            c.add(
                f"{path}.device_ip",
                f"device_ip {show(text)} is also used by {self.device_ips[key]}",
            )
        else:
            self.device_ips[key] = path
        if self.first_family is None:
            self.first_family = (address.version, path)
        elif address.version != self.first_family[0]:
            c.add(
                f"{path}.device_ip",
                f"device_ip {show(text)} is IPv{address.version} but "
                f"{self.first_family[1]}.device_ip is IPv{self.first_family[0]}: HCCL needs "
                "one address family",
            )

    def check_rank(self, server_index: int, path: str, rank_text: str) -> None:
        c = self.c
        if rank_text == "0":
            self.rank_zero_servers.append(server_index)
        if not is_decimal(rank_text):
            c.add(
                f"{path}.rank_id",
                f"rank_id {show(rank_text)} {NOT_DECIMAL}"
                + (' (MindIE matches the master by the exact text "0")' if c.mindie else ""),
            )
            self.ranks_incomplete = True
            return
        value = int(rank_text)
        self.ranks.append(_Rank(path, rank_text, value))
        self.ranks_by_server.setdefault(server_index, []).append(value)
        if value >= self.total_devices:
            c.add(
                f"{path}.rank_id",
                f"rank_id {show(rank_text)} is not below the {self.total_devices} devices of "
                f"the table (ranks run 0..{self.total_devices - 1})",
            )
        if c.mindie and value > MINDIE_MAX_RANK_ID:
            c.add(
                f"{path}.rank_id",
                f"rank_id {show(rank_text)} is outside MindIE's range 0..{MINDIE_MAX_RANK_ID}",
            )

    # ------------------------------------------------------------ cross-server

    def check_ranks(self) -> None:
        c = self.c
        seen: dict[int, str] = {}
        for rank in self.ranks:
            if rank.value in seen:
                c.add(
                    f"{rank.path}.rank_id",
                    f"rank_id {show(rank.text)} is also used by {seen[rank.value]}",
                )
            else:
                seen[rank.value] = rank.path
        if self.ranks_incomplete:
            return
        missing = [r for r in range(self.total_devices) if r not in seen]
        if missing:
            shown = ", ".join(str(r) for r in missing[:5])
            more = f" and {len(missing) - 5} more" if len(missing) > 5 else ""
            c.add(
                "$.server_list",
                f"rank_id {shown}{more} missing: rank ids must run "
                f"0..{self.total_devices - 1} without gaps",
            )
        # Interleaving = two servers' rank ranges overlap; a sweep over the ranges sorted by
        # their start finds every overlap in O(S log S), whatever the rank values are.
        spans = sorted(
            (min(values), max(values), index) for index, values in self.ranks_by_server.items()
        )
        reach: Optional[tuple[int, int, int]] = None  # the span reaching furthest so far
        for low, high, index in spans:
            if reach is not None and low <= reach[1]:
                values = sorted(set(self.ranks_by_server[index]))
                shown = ",".join(str(v) for v in values[:10]) + (",..." if len(values) > 10 else "")
                c.add(
                    f"$.server_list[{index}]",
                    f"rank_ids {shown} of this server fall inside {reach[0]}..{reach[1]} of "
                    f"server_list[{reach[2]}]: ranks of different servers interleave",
                )
            if reach is None or high > reach[1]:
                reach = (low, high, index)

    def check_mindie_cross_server(self) -> None:
        c = self.c
        counts = self.device_counts
        if counts:
            first_index = min(counts)
            reference = counts[first_index]
            for index, count in counts.items():
                if count != reference:
                    c.add(
                        f"$.server_list[{index}].device",
                        f"server has {count} devices but server_list[{first_index}] has "
                        f"{reference}: MindIE needs the same count on every server",
                    )
        if not self.rank_zero_servers:
            c.add(
                "$.server_list",
                'no device has rank_id "0": MindIE finds no master server',
            )
            return
        holder = self.rank_zero_servers[0]
        if holder != 0:
            c.add(
                f"$.server_list[{holder}]",
                f'the server holding rank_id "0" is listed at position {holder}: MindIE takes '
                "the master from server_list[0]",
            )
