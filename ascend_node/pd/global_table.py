"""The global rank table of a PD-disaggregated MindIE service, from its instances' tables.

MindIE-Motor's controller learns every prefill (P) and decode (D) instance, their devices
and the coordinators' addresses from one file, re-read every few seconds. ClusterD builds
it from each instance's `rings-config-*` ConfigMap (mind-cluster
component/clusterd/pkg/domain/epranktable/ranktable_util.go); this module builds the same
document from the instance tables the agent's rendezvous completed, without ClusterD
(pure; the controller's own rules are in `motor_rules`).

What it keeps from ClusterD's construction, and what it changes:

- group "0" the coordinators, "1" the controller (each pod: `server_id` its host IP,
  `server_ip` its pod IP), then one group per instance; every value a string;
- in an instance group, `server_id` the host IP, `server_ip` the pod (container) IP,
  `device_logical_id` the index in that server's device list, `rank_id` the instance's own
  (from 0 on its first server: the controller makes the server with the smallest rank the
  instance's master), `super_device_id` and `super_pod_list` passed through for A3;
- **stable group numbers**: ClusterD numbers instances in its informer cache's order, so
  one instance can change number between rewrites; here prefill instances come first, then
  decode, each by instance index — the same instance keeps its group for the life of the
  job, whatever restarts;
- `deploy_server` from the controller's `enable_dist_dp_server` flags
  (`motor_rules.deploy_server_for`), where ClusterD copies a label the deployer set by hand.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, Optional

from ascend_node.errors import ClusterInconsistent
from ascend_node.pd.motor_rules import (
    CONTROLLER_GROUP,
    COORDINATOR_GROUP,
    FIRST_SERVER_GROUP,
    InstanceFlags,
    deploy_server_for,
)

Role = Literal["prefill", "decode"]
ROLE_ORDER: tuple[Role, ...] = ("prefill", "decode")


@dataclass(frozen=True)
class ServicePod:
    """A coordinator or controller pod as the global table lists it."""

    pod_ip: str
    host_ip: str


@dataclass(frozen=True)
class Instance:
    """One P or D instance and the HCCL rank table its pods completed (v1.0 or v1.2)."""

    role: Role
    index: int  # the instance's number among those of its role, from 0
    table: Mapping[str, Any]
    host_ips: Optional[Mapping[str, str]] = None  # container_ip -> host IP, when known


def group_id_of(role: Role, index: int, counts: Mapping[Role, int]) -> str:
    """The group of an instance: prefill ones from "2", then decode; stable for the job."""
    if role not in ROLE_ORDER:
        raise ValueError(f"role {role!r} is not prefill or decode")
    if not 0 <= index < counts[role]:
        raise ValueError(f"{role} instance {index} is outside 0..{counts[role] - 1}")
    before = counts["prefill"] if role == "decode" else 0
    return str(FIRST_SERVER_GROUP + before + index)


def build_global_table(coordinators: Sequence[ServicePod], controllers: Sequence[ServicePod],
                       instances: Sequence[Instance], counts: Mapping[Role, int],
                       flags: InstanceFlags) -> dict[str, Any]:
    """The global rank table, with every instance of `instances` as one group.

    `counts` is the job's shape (how many P and D instances it has), which fixes every
    instance's group number whether or not it is in `instances` yet: a rewrite after a D
    instance restarts keeps every other group where it was. Only complete instance tables
    belong here (ClusterD includes only `completed` ones; a partial group would be read as a
    smaller instance). Raises `ClusterInconsistent` for tables that cannot be combined.
    """
    seen: set[tuple[Role, int]] = set()
    versions = set()
    groups: list[tuple[int, dict[str, Any]]] = []
    for inst in instances:
        key = (inst.role, inst.index)
        if key in seen:
            raise ClusterInconsistent(f"{inst.role} instance {inst.index} is given twice",
                                      "each instance has one rank table")
        seen.add(key)
        gid = group_id_of(inst.role, inst.index, counts)
        versions.add(str(inst.table.get("version")))
        groups.append((int(gid), _instance_group(gid, inst, flags)))
    if len(versions) > 1:
        raise ClusterInconsistent(
            f"the instances' rank tables mix versions {', '.join(sorted(versions))}",
            "every instance of one service must run on the same NPU generation "
            "(v1.0 on A2, v1.2 on an A3 super pod)")
    groups.sort(key=lambda g: g[0])
    return {
        "version": versions.pop() if versions else "1.0",
        "status": "completed",
        "server_group_list": [
            _service_group(COORDINATOR_GROUP, coordinators),
            _service_group(CONTROLLER_GROUP, controllers),
            *(group for _, group in groups),
        ],
    }


def render_global_table(doc: Mapping[str, Any]) -> str:
    """The table's text: compact JSON (one line) and a newline, the same bytes everywhere.

    Compact because MindIE-Motor's shell entry tests completion with a `grep` for
    `"status":"completed"` (no space) on the instance tables, and the same habit is safest
    for any reader that copies it."""
    return json.dumps(doc, ensure_ascii=True, separators=(",", ":")) + "\n"


def group_of(doc: Mapping[str, Any], pod_ip: str) -> Optional[int]:
    """Which group MindIE-Motor's `get_group_id.py` puts a pod in, by its exit code.

    0 coordinator, 1 controller, 2 an instance's server, 255 not listed; None while the
    table is not `completed` (the script waits). Mirrors the script's rule: the first group
    whose `server_list` has this `server_ip`."""
    if doc.get("status") != "completed":
        return None
    for group in doc.get("server_group_list", []):
        for server in group.get("server_list", []):
            if server.get("server_ip") == pod_ip:
                gid = int(group["group_id"])
                return 2 if gid >= FIRST_SERVER_GROUP else gid
    return 255


def _service_group(gid: str, pods: Sequence[ServicePod]) -> dict[str, Any]:
    return {
        "group_id": gid,
        "server_count": str(len(pods)),
        "server_list": [{"server_id": p.host_ip, "server_ip": p.pod_ip} for p in pods],
    }


def _instance_group(gid: str, inst: Instance, flags: InstanceFlags) -> dict[str, Any]:
    table = inst.table
    name = f"{inst.role} instance {inst.index}"
    if table.get("status") != "completed":
        raise ClusterInconsistent(f"the rank table of {name} is not completed "
                                  f"(status {table.get('status')!r})",
                                  "only completed instance tables go into the global table")
    servers = table.get("server_list")
    if not isinstance(servers, list) or not servers:
        raise ClusterInconsistent(f"the rank table of {name} has no servers",
                                  "an instance needs at least one pod with NPUs")
    hosts = inst.host_ips or {}
    server_ids: dict[str, str] = {}
    entries: list[dict[str, Any]] = []
    for server in servers:
        pod_ip = str(server["container_ip"])
        server_id = str(server.get("host_ip") or hosts.get(pod_ip) or server["server_id"])
        server_ids[str(server["server_id"])] = server_id
        devices: list[dict[str, str]] = []
        for logical, dev in enumerate(server["device"]):
            entry: dict[str, str] = {"device_id": str(dev["device_id"]),
                                     "device_ip": str(dev["device_ip"])}
            if "super_device_id" in dev:
                entry["super_device_id"] = str(dev["super_device_id"])
            entry["device_logical_id"] = str(logical)
            entry["rank_id"] = str(dev["rank_id"])
            devices.append(entry)
        entries.append({"device": devices, "server_id": server_id, "server_ip": pod_ip})
    first_rank = min(int(d["rank_id"]) for s in entries for d in s["device"])
    if first_rank != 0 or entries[0]["device"][0]["rank_id"] != "0":
        raise ClusterInconsistent(
            f"the rank table of {name} does not start at rank 0 on its first server",
            "the controller makes the server with the smallest rank_id the instance's "
            "master; rank ids are per instance, from 0")
    group: dict[str, Any] = {
        "group_id": gid,
        "deploy_server": deploy_server_for(inst.role, flags),
        "server_count": str(len(entries)),
        "server_list": entries,
    }
    pods = table.get("super_pod_list")
    if pods:
        group["super_pod_list"] = [
            {"super_pod_id": str(pod["super_pod_id"]),
             "server_list": [{"server_id": server_ids.get(str(s["server_id"]),
                                                          str(s["server_id"]))}
                             for s in pod["server_list"]]}
            for pod in pods]
    return group
