"""HCCL rank table: build it, render it byte-identically, and lint it.

Why one module does all three: the builder and the validator encode the same rules
(ascend-facts.md §2, §3.2; mindie-checks.md). Every table `build_rank_table` makes must
pass `validate_rank_table`, and the tests hold the two to that.

The builder is pure and linear in the number of devices. The validator is pure, never
raises on any input, and reports every problem it finds, each with a JSON path and a one-line
message that names the bad value (`ascend-node validate` prints them all at once, so an
operator fixes a hand-written table in one pass instead of one MindIE restart per mistake).

Decisions the facts leave open (documented here because `validate` users meet them):

* ``target="mindie"`` applies HCCL's rules *and* MindIE's. MindIE's model runner hands the
  same file (``RANK_TABLE_FILE``) to HCCL, so a table MindIE accepts but HCCL rejects still
  fails at start-up, only later and with a vaguer message.
* ``version`` and ``status`` are required for both targets. MindIE's C++ never reads them,
  but HCCL picks the schema by ``version`` and a ``status`` other than ``"completed"`` marks
  a table that is still being assembled (MindCluster writes ``"initializing"`` until every pod
  is in). MindIE's own test table (upstream ``ranktable-2x8.json``) carries both
  (``"1.0"``/``"completed"``), so it validates with zero problems for either target.
* ``server_count`` is optional for HCCL v1.2 tables (the A3 SuperPoD format) and required
  otherwise; MindIE always reads it.
* ``device_ip`` is required by HCCL only when devices talk over RoCE between servers: v1.0
  (and v1.2 without ``super_pod_list``) with more than one server, v1.2 with more than one
  super pod. MindIE checks it on every device, so ``target="mindie"`` always requires it.
* ``container_ip`` is not an HCCL field. For MindIE it must be an IP address other than
  ``0.0.0.0``/``::``, not just non-empty (loopback stays allowed: MindIE's own test table uses
  ``127.0.0.1``): it has to equal ``MIES_CONTAINER_IP``, which becomes the address the server
  listens on, and the first server's ``container_ip`` becomes ``MASTER_IP``, which atb_llm
  validates as an IP. Duplicate ``container_ip`` values are a MindIE problem (the local server
  becomes ambiguous; MindIE silently takes the last match).
* Device IPs that no RoCE NIC can have (loopback, multicast, besides the documented
  ``0.0.0.0``/``::`` and link-local) are rejected for both targets.
* The same ``device_id`` on different servers is normal (every 8-card node has 0..7); only a
  repeat *within* one server is a problem.
"""

from __future__ import annotations

import ipaddress
import json
import os
import re
import stat
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from json.encoder import encode_basestring_ascii as _quote
from typing import Any, Literal, Optional, Union

from ascend_node.errors import ClusterInconsistent, InvalidInputError

Target = Literal["mindie", "hccl"]
IPAddress = Union[ipaddress.IPv4Address, ipaddress.IPv6Address]

SUPPORTED_VERSIONS = ("1.0", "1.2")
# HCCL: server_id is at most 64 characters (rank_table_config docs).
HCCL_MAX_SERVER_ID = 64
# MindIE reads every rank-table string with a 256-character limit.
MINDIE_MAX_STRING = 256
MINDIE_SERVER_COUNT = (2, 60)
MINDIE_DEVICES_PER_SERVER = (1, 32)
MINDIE_MAX_DEVICE_ID = 63
MINDIE_MAX_RANK_ID = 511
# File rules of MindIE's C++ IsFileValid and atb_llm's path check.
MAX_FILE_SIZE = 10 * 1024 * 1024
MAX_PATH_LENGTH = 256
_PATH_CHARS = re.compile(r"[0-9a-zA-Z_./-]*")
# 18 digits keep int() cheap and safe (Python limits int() of long strings); no field of a
# rank table comes anywhere near that.
_DECIMAL = re.compile(r"0|[1-9][0-9]{0,17}")
_NOT_DECIMAL = "is not a canonical decimal number (digits only, no leading zero, up to 18)"
# Values quoted in messages are cut here, so a 10 MiB garbage string makes a readable line.
_SHOW_LIMIT = 60

# Optional fields whose values are still read as strings by HCCL/MindCluster/MindSpore.
_OPTIONAL_SERVER_STRINGS = ("host_ip", "host_nic_ip")
_OPTIONAL_DEVICE_STRINGS = (
    "device_port",
    "backup_device_ip",
    "backup_device_port",
    "host_port",
)


# --------------------------------------------------------------------------- build


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


def render_rank_table(table: Mapping[str, Any]) -> str:
    """Canonical text of a table: every node renders equal tables to identical bytes.

    The text is exactly ``json.dumps(table, indent=2, ensure_ascii=True) + "\n"``: insertion
    order is kept (no key sorting) so the file reads in the order the HCCL docs show, and
    ``ensure_ascii`` keeps the bytes independent of the locale. The stdlib encoder falls back
    to pure Python when indenting, which costs most of the time for thousands of servers, so
    the common shapes (dicts with string keys, lists, scalars) are rendered here with the C
    string escaper; anything else goes to ``json.dumps`` itself.
    """
    try:
        return _render(table, "") + "\n"
    except (_Unrenderable, RecursionError):
        return json.dumps(table, indent=2, ensure_ascii=True) + "\n"


class _Unrenderable(Exception):
    """A value the fast path does not mirror exactly; json.dumps decides instead."""


def _render(value: object, indent: str) -> str:
    if isinstance(value, str):
        return _quote(value)
    if isinstance(value, dict):
        if not value:
            return "{}"
        inner = indent + "  "
        parts = []
        for key, item in value.items():
            if not isinstance(key, str):
                raise _Unrenderable
            parts.append(f"{inner}{_quote(key)}: {_render(item, inner)}")
        return "{\n" + ",\n".join(parts) + "\n" + indent + "}"
    if isinstance(value, (list, tuple)):
        if not value:
            return "[]"
        inner = indent + "  "
        return (
            "[\n" + ",\n".join(inner + _render(item, inner) for item in value) + "\n" + indent + "]"
        )
    if value is None or isinstance(value, (bool, int, float)):
        return json.dumps(value)
    raise _Unrenderable


def master_ip(table: Mapping[str, Any]) -> str:
    """The ``container_ip`` of the server holding rank ``"0"``: MindIE's master address.

    MindIE's model runner takes ``MASTER_IP`` from ``server_list[0].container_ip``; tables we
    build list the rank-0 server first, so both readings agree.
    """
    for server in table.get("server_list", []):
        if any(device.get("rank_id") == "0" for device in server.get("device", [])):
            return str(server.get("container_ip", ""))
    raise InvalidInputError(
        'the rank table has no device with rank_id "0"',
        "run `ascend-node validate` on the table",
    )


def world_size(table: Mapping[str, Any]) -> int:
    """Total number of devices (NPUs) in the table: the ``WORLD_SIZE`` to export."""
    return sum(len(server.get("device", [])) for server in table.get("server_list", []))


def local_server(table: Mapping[str, Any], container_ip: str) -> Optional[dict[str, Any]]:
    """The server whose ``container_ip`` equals ``container_ip`` exactly, else None.

    MindIE finds its own entry by the same exact string match against
    ``MIES_CONTAINER_IP``. Two matches make that choice ambiguous (MindIE silently takes the
    last), so they raise `ClusterInconsistent` instead of picking one.
    """
    matches = [s for s in table.get("server_list", []) if s.get("container_ip") == container_ip]
    if len(matches) > 1:
        raise ClusterInconsistent(
            f"container_ip {container_ip} appears on {len(matches)} servers of the rank table",
            "each pod needs its own IP; check pod networking and the table's membership",
        )
    if not matches:
        return None
    found: dict[str, Any] = matches[0]
    return found


# ------------------------------------------------------------------------ validate


@dataclass(frozen=True)
class Problem:
    """One rule a rank table (or its file) breaks."""

    path: str  # JSON path like "$.server_list[1].device[3].device_ip", or "file"
    message: str  # one line, names the bad value

    def __str__(self) -> str:
        return f"{self.path}: {self.message}"


def _kind(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, (list, tuple)):
        return "array"
    if isinstance(value, Mapping):
        return "object"
    return type(value).__name__


def _show(value: object) -> str:
    """A short, one-line rendering of a value for messages."""
    if isinstance(value, Mapping):
        return f"{{...}} ({len(value)} keys)"
    if isinstance(value, (list, tuple)):
        return f"[...] ({len(value)} items)"
    try:
        text = json.dumps(value, ensure_ascii=True)
    except (TypeError, ValueError):  # e.g. an int beyond Python's int-to-str digit limit
        text = f"<{type(value).__name__}>"
    if len(text) > _SHOW_LIMIT:
        size = len(value) if isinstance(value, str) else len(text)
        return f"{text[:_SHOW_LIMIT]}... ({size} chars)"
    return text


def _is_decimal(text: str) -> bool:
    """Canonical non-negative decimal: what HCCL and MindIE compare as strings ("0" != "00")."""
    return _DECIMAL.fullmatch(text) is not None


def _ip_problem(text: str) -> tuple[Optional[IPAddress], str]:
    """Parse a device address: (address or None, why it is unusable; "" when usable)."""
    try:
        address = ipaddress.ip_address(text)
    except ValueError:
        return None, "is not an IPv4 or IPv6 address"
    if address.is_unspecified:
        return address, "is the unspecified address"
    if address.is_link_local:
        return address, "is link-local (no address configured on the NIC?)"
    if address.is_loopback:
        return address, "is a loopback address"
    if address.is_multicast:
        return address, "is a multicast address"
    return address, ""


class _Checker:
    """Collects problems for one document; every method tolerates any JSON shape."""

    def __init__(self, target: Target) -> None:
        self.mindie = target == "mindie"
        self.problems: list[Problem] = []

    def add(self, path: str, message: str) -> None:
        self.problems.append(Problem(path, message))

    def string(
        self, obj: Mapping[str, Any], key: str, path: str, *, required: bool
    ) -> Optional[str]:
        """The string at ``obj[key]``, or None after reporting why it is unusable."""
        if key not in obj:
            if required:
                self.add(f"{path}.{key}", f"{key} is missing")
            return None
        value = obj[key]
        if not isinstance(value, str):
            self.add(
                f"{path}.{key}",
                f"{key} must be a JSON string, got {_kind(value)} {_show(value)}",
            )
            return None
        if self.mindie and len(value) > MINDIE_MAX_STRING:
            self.add(
                f"{path}.{key}",
                f"{key} {_show(value)} is longer than MindIE's {MINDIE_MAX_STRING} characters",
            )
            return None
        return value

    # ---------------------------------------------------------------- top level

    def check(self, doc: Any) -> None:
        if not isinstance(doc, Mapping):
            self.add("$", f"a rank table must be a JSON object, got {_kind(doc)} {_show(doc)}")
            return
        version = self.string(doc, "version", "$", required=True)
        if version is not None and version not in SUPPORTED_VERSIONS:
            self.add(
                "$.version",
                f'version {_show(version)} is not supported: use "1.0" (or "1.2" for A3 SuperPoD)',
            )
        status = self.string(doc, "status", "$", required=True)
        if status is not None and status != "completed":
            self.add(
                "$.status",
                f'status {_show(status)} is not "completed": the table is not final',
            )

        servers = doc.get("server_list")
        server_list: Optional[list[Any]] = None
        if "server_list" not in doc:
            self.add("$.server_list", "server_list is missing")
        elif not isinstance(servers, list):
            self.add(
                "$.server_list",
                f"server_list must be a JSON array, got {_kind(servers)} {_show(servers)}",
            )
        elif not servers:
            self.add("$.server_list", "server_list is empty: a rank table needs servers")
            server_list = servers
        else:
            server_list = servers

        self.check_server_count(doc, version, server_list)
        if server_list:
            _ServerListChecker(self, doc, version, server_list).run()

    def check_server_count(
        self, doc: Mapping[str, Any], version: Optional[str], server_list: Optional[list[Any]]
    ) -> None:
        required = self.mindie or version != "1.2"
        count_text = self.string(doc, "server_count", "$", required=required)
        if count_text is None:
            return
        if not _is_decimal(count_text):
            self.add(
                "$.server_count",
                f"server_count {_show(count_text)} {_NOT_DECIMAL}",
            )
            return
        count = int(count_text)
        if server_list is not None and count != len(server_list):
            self.add(
                "$.server_count",
                f"server_count {_show(count_text)} does not match the {len(server_list)} "
                "servers in server_list",
            )
        low, high = MINDIE_SERVER_COUNT
        if self.mindie and not low <= count <= high:
            self.add(
                "$.server_count",
                f"server_count {_show(count_text)} is outside MindIE's range {low}..{high}"
                + (" (MindIE on one node runs without a rank table)" if count == 1 else ""),
            )


@dataclass
class _Rank:
    path: str
    text: str
    value: int


class _ServerListChecker:
    """Server- and device-level rules, plus the cross-server ones (uniqueness, ranks)."""

    def __init__(
        self, c: _Checker, doc: Mapping[str, Any], version: Optional[str], servers: list[Any]
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
        self.pods = _SuperPods(c, doc, version, servers)

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
            c.add(path, f"a server must be a JSON object, got {_kind(server)} {_show(server)}")
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
                f"device must be a JSON array, got {_kind(devices)} {_show(devices)}",
            )
            return
        if not devices:
            c.add(f"{path}.device", f"server {_show(server_id)} has no devices")
        self.device_counts[index] = len(devices)
        low, high = MINDIE_DEVICES_PER_SERVER
        if c.mindie and devices and not low <= len(devices) <= high:
            c.add(
                f"{path}.device",
                f"server {_show(server_id)} has {len(devices)} devices: MindIE allows "
                f"{low}..{high}",
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
                f"server_id {_show(server_id)} is {len(server_id)} characters: HCCL allows "
                f"at most {HCCL_MAX_SERVER_ID}",
            )
        if server_id in self.server_ids:
            c.add(
                f"{path}.server_id",
                f"server_id {_show(server_id)} is also used by "
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
                    f"server_id {_show(server_id)} is not an IP address (atb_llm rejects "
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
                    f"container_ip {_show(container_ip)} is the unspecified address",
                )
        except ValueError:
            c.add(
                f"{path}.container_ip",
                f"container_ip {_show(container_ip)} is not an IPv4 or IPv6 address",
            )
        if container_ip in self.container_ips:
            c.add(
                f"{path}.container_ip",
                f"container_ip {_show(container_ip)} is also used by "
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
            c.add(path, f"a device must be a JSON object, got {_kind(device)} {_show(device)}")
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
        if not _is_decimal(device_id):
            c.add(
                f"{path}.device_id",
                f"device_id {_show(device_id)} {_NOT_DECIMAL}",
            )
            return
        if device_id in seen:
            c.add(
                f"{path}.device_id",
                f"device_id {_show(device_id)} appears twice on server {_show(server_id)} "
                f"(also {seen[device_id]})",
            )
        else:
            seen[device_id] = path
        if c.mindie and int(device_id) > MINDIE_MAX_DEVICE_ID:
            c.add(
                f"{path}.device_id",
                f"device_id {_show(device_id)} is outside MindIE's range 0..{MINDIE_MAX_DEVICE_ID}",
            )

    def check_device_ip(self, path: str, device: Mapping[str, Any]) -> None:
        c = self.c
        required = self.device_ip_required()
        if not required and device.get("device_ip") == "":
            return  # optional and left blank (MindCluster does this inside one super pod)
        text = c.string(device, "device_ip", path, required=required)
        if text is None:
            return
        address, reason = _ip_problem(text)
        if reason:
            c.add(f"{path}.device_ip", f"device_ip {_show(text)} {reason}")
        if address is None:
            return
        key = str(address)
        if key in self.device_ips:
            c.add(
                f"{path}.device_ip",
                f"device_ip {_show(text)} is also used by {self.device_ips[key]}",
            )
        else:
            self.device_ips[key] = path
        if self.first_family is None:
            self.first_family = (address.version, path)
        elif address.version != self.first_family[0]:
            c.add(
                f"{path}.device_ip",
                f"device_ip {_show(text)} is IPv{address.version} but "
                f"{self.first_family[1]}.device_ip is IPv{self.first_family[0]}: HCCL needs "
                "one address family",
            )

    def check_rank(self, server_index: int, path: str, rank_text: str) -> None:
        c = self.c
        if rank_text == "0":
            self.rank_zero_servers.append(server_index)
        if not _is_decimal(rank_text):
            c.add(
                f"{path}.rank_id",
                f"rank_id {_show(rank_text)} {_NOT_DECIMAL}"
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
                f"rank_id {_show(rank_text)} is not below the {self.total_devices} devices of "
                f"the table (ranks run 0..{self.total_devices - 1})",
            )
        if c.mindie and value > MINDIE_MAX_RANK_ID:
            c.add(
                f"{path}.rank_id",
                f"rank_id {_show(rank_text)} is outside MindIE's range 0..{MINDIE_MAX_RANK_ID}",
            )

    # ------------------------------------------------------------ cross-server

    def check_ranks(self) -> None:
        c = self.c
        seen: dict[int, str] = {}
        for rank in self.ranks:
            if rank.value in seen:
                c.add(
                    f"{rank.path}.rank_id",
                    f"rank_id {_show(rank.text)} is also used by {seen[rank.value]}",
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


class _SuperPods:
    """v1.2 ``super_pod_list`` rules (A3 SuperPoD); inert for other versions."""

    def __init__(
        self, c: _Checker, doc: Mapping[str, Any], version: Optional[str], servers: list[Any]
    ) -> None:
        self.c = c
        self.v12 = version == "1.2"
        self.present = self.v12 and "super_pod_list" in doc
        self.raw = doc.get("super_pod_list")
        self.servers = servers
        self.pod_of_server: dict[str, int] = {}
        self.pod_ids: list[str] = []
        self.count = 0
        self.sdids: dict[tuple[int, str], str] = {}

    def check_list(self) -> None:
        if not self.present:
            return
        c = self.c
        pods = self.raw
        if not isinstance(pods, list):
            c.add(
                "$.super_pod_list",
                f"super_pod_list must be a JSON array, got {_kind(pods)} {_show(pods)}",
            )
            self.present = False
            return
        if not pods:
            c.add("$.super_pod_list", "super_pod_list is empty")
            self.present = False
            return
        self.count = len(pods)
        seen_ids: dict[str, int] = {}
        for index, pod in enumerate(pods):
            path = f"$.super_pod_list[{index}]"
            if not isinstance(pod, Mapping):
                c.add(path, f"a super pod must be a JSON object, got {_kind(pod)} {_show(pod)}")
                continue
            pod_id = c.string(pod, "super_pod_id", path, required=True)
            if pod_id is not None:
                if not pod_id:
                    c.add(f"{path}.super_pod_id", "super_pod_id is empty")
                elif pod_id in seen_ids:
                    c.add(
                        f"{path}.super_pod_id",
                        f"super_pod_id {_show(pod_id)} is also used by "
                        f"super_pod_list[{seen_ids[pod_id]}]",
                    )
                else:
                    seen_ids[pod_id] = index
            members = pod.get("server_list")
            if not isinstance(members, list) or not members:
                c.add(
                    f"{path}.server_list",
                    f"server_list of a super pod must be a non-empty JSON array, got "
                    f"{_kind(members)} {_show(members)}",
                )
                continue
            for m_index, member in enumerate(members):
                self.check_member(index, f"{path}.server_list[{m_index}]", member)

    def check_member(self, pod_index: int, path: str, member: Any) -> None:
        c = self.c
        if not isinstance(member, Mapping):
            c.add(path, f"a super pod member must be a JSON object, got {_kind(member)}")
            return
        server_id = c.string(member, "server_id", path, required=True)
        if server_id is None:
            return
        if server_id in self.pod_of_server:
            c.add(
                f"{path}.server_id",
                f"server_id {_show(server_id)} is already in "
                f"super_pod_list[{self.pod_of_server[server_id]}]",
            )
            return
        self.pod_of_server[server_id] = pod_index

    def check_membership(self, server_ids: dict[str, int]) -> None:
        """Every server in exactly one super pod, pods listed contiguously, no strangers."""
        if not self.present or self.count == 0:
            return
        c = self.c
        for server_id, pod_index in self.pod_of_server.items():
            if server_id not in server_ids:
                c.add(
                    f"$.super_pod_list[{pod_index}]",
                    f"server_id {_show(server_id)} is not in the top-level server_list",
                )
        finished: set[int] = set()
        current: Optional[int] = None
        for server_id, index in sorted(server_ids.items(), key=lambda item: item[1]):
            pod = self.pod_of_server.get(server_id)
            if pod is None:
                c.add(
                    f"$.server_list[{index}]",
                    f"server {_show(server_id)} is in no super pod of super_pod_list",
                )
                continue
            if pod != current:
                if pod in finished:
                    c.add(
                        f"$.server_list[{index}]",
                        f"server {_show(server_id)} of super pod {pod} is not listed next to "
                        "the other servers of that super pod",
                    )
                if current is not None:
                    finished.add(current)
                current = pod

    def check_device(self, server_id: Optional[str], path: str, device: Mapping[str, Any]) -> None:
        if not self.v12:
            return
        c = self.c
        text = c.string(device, "super_device_id", path, required=self.present)
        if text is None:
            return
        if not _is_decimal(text):
            c.add(
                f"{path}.super_device_id",
                f"super_device_id {_show(text)} {_NOT_DECIMAL}",
            )
            return
        if not self.present or server_id is None:
            return
        pod = self.pod_of_server.get(server_id)
        if pod is None:
            return
        key = (pod, text)
        if key in self.sdids:
            c.add(
                f"{path}.super_device_id",
                f"super_device_id {_show(text)} is also used by {self.sdids[key]} in the same "
                "super pod",
            )
        else:
            self.sdids[key] = path


def validate_rank_table(doc: Any, target: Target = "mindie") -> list[Problem]:
    """Every problem of a parsed rank table, in document order; [] when it is valid.

    ``target="hccl"`` applies HCCL's rules alone (v1.0 and v1.2 shapes): string values,
    ``status`` completed, ``server_count`` consistent, unique ``server_id`` (<= 64 chars),
    unique device ids per server, usable and unique device IPs of one family, rank ids
    canonical, unique, contiguous from 0 and never interleaved between servers.
    ``target="mindie"`` adds MindIE's own checks (mindie-checks.md): 2..60 servers, 1..32 equal
    devices per server, ``container_ip`` a unique usable IP, ``server_id`` an IP, ``device_id``
    0..63, ``rank_id`` 0..511, strings <= 256 chars, the rank-``"0"`` server listed first.
    See the module docstring for the decisions the sources leave open. Never raises on ``doc``.
    """
    if target not in ("mindie", "hccl"):
        raise ValueError(f"unknown target {target!r}: use 'mindie' or 'hccl'")
    checker = _Checker(target)
    checker.check(doc)
    return checker.problems


def validate_file(
    path: Union[str, os.PathLike[str]],
    target: Target = "mindie",
    check_owner_uid: Optional[int] = None,
) -> list[Problem]:
    """File rules MindIE enforces before it parses (path "file"), then the table rules.

    Mirrors mindie-checks.md "The file": not a symlink, a regular file of 1 byte..10 MiB,
    mode 0640 or stricter in every permission triad, owned by ``check_owner_uid`` when given
    (MindIE wants the uid that runs it; root is not exempt), a real path of
    ``[0-9a-zA-Z_./-]`` only, a path of at most 256 characters. A symlink is reported and its
    target still checked, so one run lists everything to fix. Unparsable JSON is a problem at
    "$". Never reads a FIFO or device node, never raises for a bad file.
    """
    problems: list[Problem] = []
    text_path = os.fspath(path)

    def add(message: str) -> None:
        problems.append(Problem("file", message))

    if len(text_path) > MAX_PATH_LENGTH:
        add(
            f"path {text_path} is {len(text_path)} characters: MindIE ignores a "
            f"RANK_TABLE_FILE longer than {MAX_PATH_LENGTH}"
        )
    try:
        link_info = os.lstat(text_path)
    except OSError as exc:
        add(f"{text_path} cannot be read: {exc.strerror or exc}")
        return problems
    if stat.S_ISLNK(link_info.st_mode):
        add(f"{text_path} is a symlink: MindIE refuses links, copy the file instead")
    real = os.path.realpath(text_path)
    if _PATH_CHARS.fullmatch(real) is None:
        bad = sorted({ch for ch in real if _PATH_CHARS.fullmatch(ch) is None})
        shown = ", ".join(json.dumps(ch, ensure_ascii=False) for ch in bad)
        add(f"real path {real} contains {shown}: atb_llm allows only [0-9a-zA-Z_./-]")
    try:
        info = os.stat(text_path)
    except OSError as exc:
        add(f"{text_path} cannot be read: {exc.strerror or exc}")
        return problems
    if not stat.S_ISREG(info.st_mode):
        add(f"{text_path} is not a regular file")
        return problems
    mode = stat.S_IMODE(info.st_mode)
    owner, group, other = (mode >> 6) & 7, (mode >> 3) & 7, mode & 7
    if owner > 6 or group > 4 or other > 0:
        add(f"{text_path} has mode {mode:04o}: MindIE requires 0640 or stricter")
    if check_owner_uid is not None and info.st_uid != check_owner_uid:
        add(
            f"{text_path} is owned by uid {info.st_uid}, not uid {check_owner_uid} that runs "
            "the server"
        )
    if info.st_size == 0:
        add(f"{text_path} is empty")
        return problems
    if info.st_size > MAX_FILE_SIZE:
        add(f"{text_path} is {info.st_size} bytes: MindIE reads at most {MAX_FILE_SIZE}")
        return problems
    try:
        with open(text_path, "rb") as handle:
            raw = handle.read(MAX_FILE_SIZE + 1)
    except OSError as exc:
        add(f"{text_path} cannot be read: {exc.strerror or exc}")
        return problems
    try:
        doc = json.loads(raw.decode("utf-8"), parse_constant=_reject_constant)
    except UnicodeDecodeError as exc:
        problems.append(Problem("$", f"not UTF-8 text: byte {exc.start} is {raw[exc.start]:#04x}"))
        return problems
    except ValueError as exc:  # json.JSONDecodeError and _reject_constant
        problems.append(Problem("$", f"not valid JSON: {exc}"))
        return problems
    except RecursionError:
        problems.append(Problem("$", "not valid JSON: nested too deeply"))
        return problems
    problems.extend(validate_rank_table(doc, target))
    return problems


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON value")
