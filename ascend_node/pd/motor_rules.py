"""MindIE-Motor's controller reading a global rank table: its rules, one by one (pure).

The controller (`ms_controller`) re-reads the global rank table every few seconds and
silently skips a cycle, drops a group, or treats every node as removed when the file
breaks one of its rules. This module states those rules as a checker that reports every
problem at once, each with its JSON path, so `ascend-node validate --global` and the
agent that writes the table judge it exactly as the controller would, before it does.

Sources (Ascend/MindIE-Motor @5dfb024e, mindie_motor/src/):
controller/node_scheduler/rank_table_loader/RankTableLoader.cpp — group counts (24-29,
765-767), `IsValidCoordinatorGroup` / `IsValidServerGroup` (581-649), `IsValidServer`
(518-568), `IsValidDeviceInfo` (472-516), `ParseMultiNodeServer` (398-441);
controller/constant/ControllerConfig.cpp `GetPDInitRole` (611-628);
controller/common/DpGroupingUtil.cpp (24-54, tp*dp*cp = the instance's devices);
http_client_ctl/common/Util.cpp (170-280, the path check).

Where this checker is stricter than the controller, on purpose: the controller validates
only the *first* group with id >= 2 and merely parses the others (RankTableLoader.cpp
593-599) — a later bad group is then dropped, or empties the node list, at run time. We
validate every group alike, because a table that passes only by that quirk is a service
with fewer instances than the operator deployed.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Optional

from ascend_node.ranktable import Problem
from ascend_node.ranktable.values import kind_of, show

COORDINATOR_GROUP = "0"
CONTROLLER_GROUP = "1"
FIRST_SERVER_GROUP = 2
MAX_COORDINATORS = 2  # MAX_COORDINATOR_NUM
MAX_SERVERS_PER_GROUP = 96
MAX_DEVICES_PER_SERVER = 128
MAX_DEVICE_NUMBER = 2048  # device_id, device_logical_id, rank_id
MAX_SUPER_DEVICE_ID = 2**30
GROUPS_SINGLE_NODE = (2, 3)
GROUPS_MULTI_NODE = (2, 98)
PORT_RANGE = (1024, 65535)
PORT_KEYS = ("predict_port", "mgmt_port", "metric_port", "inter_comm_port")
HARDWARE_TYPES = ("800I A2(64G)", "800I A2(32G)")
MAX_PATH = 256
_PATH_CHARS = re.compile(r"[a-zA-Z0-9_./~-]+")
# `stoi` accepts leading whitespace, a sign and trailing junk; the controller therefore
# reads "2x" as 2. We ask for what a careful writer emits: an optional minus and digits.
_INTEGER = re.compile(r"-?[0-9]{1,18}")


@dataclass(frozen=True)
class InstanceFlags:
    """What the controller's configuration says about P/D instances (ms_controller.json)."""

    multi_node: bool = True  # multi_node_infer_config.multi_node_infer_enable
    p_distributed: bool = False  # p_node_config.enable_dist_dp_server
    d_distributed: bool = True  # d_node_config.enable_dist_dp_server
    p_devices: Optional[int] = None  # tp_size * dp_size * cp_size of p_node_config
    d_devices: Optional[int] = None
    heterogeneous: bool = False  # is_heterogeneous


def flags_from_controller_config(config: Mapping[str, Any]) -> InstanceFlags:
    """The P/D flags of a parsed ms_controller.json; absent keys take the shipped defaults.

    Raises ValueError naming the key when a present value has the wrong type."""
    multi = config.get("multi_node_infer_config", {})
    if not isinstance(multi, Mapping):
        raise ValueError(f"multi_node_infer_config is {kind_of(multi)}, not an object")

    def node(name: str) -> Mapping[str, Any]:
        value = multi.get(name, {})
        if not isinstance(value, Mapping):
            raise ValueError(f"multi_node_infer_config.{name} is {kind_of(value)}, not an object")
        return value

    def flag(obj: Mapping[str, Any], key: str, where: str, default: bool) -> bool:
        value = obj.get(key, default)
        if not isinstance(value, bool):
            raise ValueError(f"{where}.{key} is {kind_of(value)} {show(value)}, not a boolean")
        return value

    def devices(obj: Mapping[str, Any], where: str) -> Optional[int]:
        sizes = [obj.get(k, 1) for k in ("tp_size", "dp_size", "cp_size")]
        if "tp_size" not in obj and "dp_size" not in obj:
            return None
        for key, value in zip(("tp_size", "dp_size", "cp_size"), sizes):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{where}.{key} is {show(value)}, not a positive integer")
        return int(sizes[0]) * int(sizes[1]) * int(sizes[2])

    p, d = node("p_node_config"), node("d_node_config")
    return InstanceFlags(
        multi_node=flag(multi, "multi_node_infer_enable", "multi_node_infer_config", False),
        p_distributed=flag(p, "enable_dist_dp_server", "p_node_config", False),
        d_distributed=flag(d, "enable_dist_dp_server", "d_node_config", False),
        p_devices=devices(p, "p_node_config"),
        d_devices=devices(d, "d_node_config"),
        heterogeneous=flag(config, "is_heterogeneous", "$", False),
    )


def deploy_server_for(role: str, flags: InstanceFlags) -> str:
    """The `deploy_server` that makes the controller see `role` ("prefill"/"decode").

    The controller derives two things from it (ControllerConfig.cpp GetPDInitRole,
    RankTableLoader.cpp 370-373): distributed = bool(int(deploy_server)), and the role —
    when the P and D flags differ, PREFILL iff bool(deploy_server) == p's flag; when they
    are equal, "2" is PREFILL and "1" DECODE. Both must come out as intended:

    - flags differ: the instance's own flag, "0" or "1" (the official deployer's P "0",
      D "1" for centralized P, distributed D);
    - both distributed: P "2", D "1";
    - both centralized: "0" for both — the only value that keeps them centralized; the
      controller then takes the roles from `node_machine_num` (which must differ between
      p_node_config and d_node_config) or from its role manager.
    """
    if role not in ("prefill", "decode"):
        raise ValueError(f"role {role!r} is not prefill or decode")
    own = flags.p_distributed if role == "prefill" else flags.d_distributed
    if flags.p_distributed != flags.d_distributed:
        return "1" if own else "0"
    if own:
        return "2" if role == "prefill" else "1"
    return "0"


def role_of(deploy_server: str, flags: InstanceFlags) -> tuple[Optional[str], bool]:
    """How the controller reads a group's `deploy_server`: (role or None, distributed)."""
    value = int(deploy_server)
    distributed = value != 0
    if flags.p_distributed == flags.d_distributed:
        role = {2: "prefill", 1: "decode"}.get(value)
    else:
        role = "prefill" if distributed == flags.p_distributed else "decode"
    return role, distributed


def check_global_table(doc: Any, flags: Optional[InstanceFlags] = None) -> list[Problem]:
    """Every rule of the controller's loader this document breaks; [] when it loads.

    `flags` (from the controller's config) adds the checks that need it: the group-count
    range of its mode, `deploy_server` present and agreeing with the P/D flags, a
    centralized instance's devices against tp*dp*cp, `hardware_type` only when
    heterogeneous. Without them the mode is the one the table implies (multi-node when it
    has more than one instance group or any `deploy_server`) and only the rules that hold
    in that mode whatever the config says are applied. Never raises.
    """
    problems: list[Problem] = []

    def add(path: str, message: str) -> None:
        problems.append(Problem(path, message))

    if not isinstance(doc, Mapping):
        add("$", f"a global rank table must be a JSON object, got {kind_of(doc)} {show(doc)}")
        return problems
    groups = doc.get("server_group_list")
    if not isinstance(groups, list):
        add("$.server_group_list", "server_group_list is missing" if groups is None else
            f"server_group_list must be a JSON array, got {kind_of(groups)} {show(groups)}")
        return problems
    multi_node = flags.multi_node if flags is not None else _implies_multi_node(groups)
    low, high = GROUPS_MULTI_NODE if multi_node else GROUPS_SINGLE_NODE
    if not low <= len(groups) <= high:
        add("$.server_group_list", f"{len(groups)} groups; the controller reads {low} to {high} "
            f"in {'multi' if multi_node else 'single'}-node mode"
            + ("" if multi_node else " (multi_node_infer_config.multi_node_infer_enable "
               "is false)" if flags is not None else ""))
    status = doc.get("status")
    if status != "completed":
        add("$.status", f"status {show(status)} is not \"completed\": MindIE-Motor's "
            "get_group_id.py waits for it, so no pod would ever learn its group")
    seen_ids: dict[str, int] = {}
    server_groups = 0
    for gi, group in enumerate(groups):
        path = f"$.server_group_list[{gi}]"
        if not isinstance(group, Mapping):
            add(path, f"a group must be a JSON object, got {kind_of(group)} {show(group)}")
            continue
        gid = _integer(group, "group_id", path, add, required=True)
        if gid is None:
            continue
        text = str(group["group_id"])
        if text in seen_ids:
            add(f"{path}.group_id", f"group_id {show(text)} repeats group "
                f"{seen_ids[text]}; one group per id")
        seen_ids[text] = gi
        servers = group.get("server_list")
        if not isinstance(servers, list):
            add(f"{path}.server_list", f"server_list must be a JSON array, got "
                f"{kind_of(servers)} {show(servers)}")
            continue
        if text == COORDINATOR_GROUP:
            _check_coordinators(servers, path, add)
        elif gid >= FIRST_SERVER_GROUP:
            server_groups += 1
            _check_server_group(group, servers, path, flags, multi_node, add)
        elif text != CONTROLLER_GROUP:
            add(f"{path}.group_id", f"group_id {show(text)} is neither the coordinators' "
                f"\"0\", the controller's \"1\" nor an instance's (2 and up)")
    if COORDINATOR_GROUP not in seen_ids:
        add("$.server_group_list", "no coordinator group (group_id \"0\"): the controller "
            "refuses the table")
    if server_groups == 0:
        add("$.server_group_list", "no instance group (group_id 2 and up): the controller "
            "refuses the table")
    return problems


def _implies_multi_node(groups: Sequence[Any]) -> bool:
    servers = [g for g in groups if isinstance(g, Mapping) and _group_number(g) >= 2]
    return len(servers) > 1 or any("deploy_server" in g for g in servers)


def _group_number(group: Mapping[str, Any]) -> int:
    text = group.get("group_id")
    return int(text) if isinstance(text, str) and _INTEGER.fullmatch(text) else -1


def check_table_path(path: str) -> Optional[str]:
    """Why the controller's path check refuses `path` (Util.cpp 170-280), or None.

    The file's own rules (not a symlink, mode <= 0640, owned by the controller's uid) are
    for the writer to keep; this is the part a path alone decides."""
    if len(path) > MAX_PATH:
        return f"the path is {len(path)} characters; the controller accepts at most {MAX_PATH}"
    if ".." in path:
        return ("the path contains '..', which the controller refuses (a Kubernetes "
                "ConfigMap's '..data' link is one); give the file's own path")
    if not _PATH_CHARS.fullmatch(path):
        bad = sorted({c for c in path if not _PATH_CHARS.fullmatch(c)})
        return f"the path has characters the controller refuses: {''.join(bad)!r}"
    return None


def _integer(obj: Mapping[str, Any], key: str, path: str, add: Any, *, required: bool,
             low: Optional[int] = None, high: Optional[int] = None) -> Optional[int]:
    if key not in obj:
        if required:
            add(f"{path}.{key}", f"{key} is missing")
        return None
    value = obj[key]
    if not isinstance(value, str):
        add(f"{path}.{key}", f"{key} must be a JSON string, got {kind_of(value)} {show(value)}")
        return None
    if not _INTEGER.fullmatch(value):
        add(f"{path}.{key}", f"{key} {show(value)} is not an integer")
        return None
    number = int(value)
    if (low is not None and number < low) or (high is not None and number > high):
        add(f"{path}.{key}", f"{key} {show(value)} is outside {low}..{high}")
        return None
    return number


def _ip(obj: Mapping[str, Any], key: str, path: str, add: Any, *, required: bool) -> None:
    if key not in obj:
        if required:
            add(f"{path}.{key}", f"{key} is missing")
        return
    value = obj[key]
    if not isinstance(value, str):
        add(f"{path}.{key}", f"{key} must be a JSON string, got {kind_of(value)} {show(value)}")
        return
    try:
        address = ipaddress.ip_address(value)
    except ValueError:
        add(f"{path}.{key}", f"{key} {show(value)} is not an IP address")
        return
    if address.is_unspecified:
        add(f"{path}.{key}", f"{key} {show(value)} is the unspecified address")


def _check_coordinators(servers: Sequence[Any], path: str, add: Any) -> None:
    if len(servers) > MAX_COORDINATORS:
        add(f"{path}.server_list", f"{len(servers)} coordinators; the controller accepts "
            f"at most {MAX_COORDINATORS}")
    for si, server in enumerate(servers):
        where = f"{path}.server_list[{si}]"
        if not isinstance(server, Mapping):
            add(where, f"a coordinator must be a JSON object, got {kind_of(server)}")
            continue
        _ip(server, "server_ip", where, add, required=True)


def _check_server_group(group: Mapping[str, Any], servers: Sequence[Any], path: str,
                        flags: Optional[InstanceFlags], multi_node: bool, add: Any) -> None:
    if len(servers) > MAX_SERVERS_PER_GROUP:
        add(f"{path}.server_list", f"{len(servers)} servers; the controller accepts at most "
            f"{MAX_SERVERS_PER_GROUP} per group")
    deploy = _integer(group, "deploy_server", path, add, required=False)
    devices = 0
    for si, server in enumerate(servers):
        devices += _check_server(server, f"{path}.server_list[{si}]", flags, add)
    if flags is None or not multi_node:
        return
    if "deploy_server" not in group:
        if devices:
            add(f"{path}.deploy_server", "deploy_server is missing: in multi-node mode the "
                "controller skips an instance without it (no P or D role)")
        return
    if deploy is None:
        return
    role, distributed = role_of(str(group["deploy_server"]), flags)
    if role is None and not distributed and not flags.p_distributed:
        return  # both centralized: roles from node_machine_num or the role manager
    if role is None:
        add(f"{path}.deploy_server", f"deploy_server {show(group['deploy_server'])} gives no "
            "role: with equal enable_dist_dp_server flags the controller reads \"2\" as "
            "prefill and \"1\" as decode")
        return
    wanted = flags.p_distributed if role == "prefill" else flags.d_distributed
    if distributed != wanted:
        add(f"{path}.deploy_server", f"deploy_server {show(group['deploy_server'])} makes a "
            f"{'distributed' if distributed else 'centralized'} {role} instance, but "
            f"{role[0]}_node_config.enable_dist_dp_server is {str(wanted).lower()}")
    expected = flags.p_devices if role == "prefill" else flags.d_devices
    if not distributed and expected is not None and devices != expected:
        add(f"{path}.server_list", f"the {role} instance has {devices} devices but "
            f"{role[0]}_node_config's tp_size*dp_size*cp_size is {expected}: the controller's "
            "DP grouping fails")


def _check_server(server: Any, path: str, flags: Optional[InstanceFlags], add: Any) -> int:
    """The server entry's rules; returns its device count (0 when unusable)."""
    if not isinstance(server, Mapping):
        add(path, f"a server must be a JSON object, got {kind_of(server)} {show(server)}")
        return 0
    _ip(server, "server_ip", path, add, required=True)
    _ip(server, "server_id", path, add, required=True)
    for key in PORT_KEYS:
        _integer(server, key, path, add, required=False, low=PORT_RANGE[0], high=PORT_RANGE[1])
    _integer(server, "super_pod_id", path, add, required=False)
    if flags is not None and flags.heterogeneous:
        kind = server.get("hardware_type")
        if kind not in HARDWARE_TYPES:
            add(f"{path}.hardware_type", f"hardware_type {show(kind)} is not one of "
                f"{', '.join(HARDWARE_TYPES)} (is_heterogeneous is true)")
    devices = server.get("device")
    if not isinstance(devices, list):
        add(f"{path}.device", "device is missing" if devices is None else
            f"device must be a JSON array, got {kind_of(devices)} {show(devices)}")
        return 0
    if not 1 <= len(devices) <= MAX_DEVICES_PER_SERVER:
        add(f"{path}.device", f"{len(devices)} devices; the controller reads 1 to "
            f"{MAX_DEVICES_PER_SERVER}")
    for di, device in enumerate(devices):
        where = f"{path}.device[{di}]"
        if not isinstance(device, Mapping):
            add(where, f"a device must be a JSON object, got {kind_of(device)}")
            continue
        for key in ("device_id", "device_logical_id", "rank_id"):
            _integer(device, key, where, add, required=True, low=0, high=MAX_DEVICE_NUMBER)
        _ip(device, "device_ip", where, add, required=True)
        _integer(device, "super_device_id", where, add, required=False, low=0,
                 high=MAX_SUPER_DEVICE_ID)
    return len(devices)
