"""MindCluster's `hccl.json` as the rank-table source, instead of the shared volume.

On a cluster that runs Huawei's MindCluster, the Ascend Operator already writes a rank
table for every job and mounts it into each pod (by default
`/user/serverid/devindex/config/hccl.json`; Ascend/mind-cluster
component/ascend-operator/pkg/ranktable/): `status` stays `initializing`
until every pod is in, then becomes `completed`. Nothing else is needed to agree on a
table, so this source never touches the shared-volume rendezvous. What the file is not
is a table MindIE accepts as is: mode 0644 and root-owned (MindIE wants 0640 and its own
uid), `server_id` the pod UID (atb_llm wants an IP), extra fields (`hardware_type`).
So the agent waits for `completed`, validates it (HCCL's rules), finds this pod by
`container_ip`, and writes the table MindIE needs: v1.0, every value a string, servers
in rank order (the rank-0 server first), `server_id` the host IP when every host IP is
distinct and the pod IP otherwise (the volume source's rule), `container_ip` kept.

The wait has the volume source's contract: `--timeout` counted from the agent's start,
a progress line every progress interval, exit 4 on timeout naming what is missing.
A half-written file (MindCluster rewrites it in place) is "not yet", never an error.
The file may sit on a network filesystem: a Linux NFS client trusts a cached "no such
file" for 30-60 s unless the parent directory is revalidated, which opening and closing
it does (docs/rendezvous.md, "Network filesystems"), so every poll does that first.
"""

from __future__ import annotations

import ipaddress
import json
import logging
import random
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Optional, Union

from ascend_node.errors import ClusterInconsistent, PeerTimeout
from ascend_node.ranktable import MAX_FILE_SIZE, Target, validate_rank_table
from ascend_node.rendezvous.freshness import revalidate_dir
from ascend_node.rendezvous.volume_call import call, raise_if_io

log = logging.getLogger("ascend_node.mindcluster")

# ------------------------------------------------------------------ reading the file


@dataclass(frozen=True)
class Pending:
    """Not usable yet: why, and the document when it parsed (for progress lines)."""

    reason: str
    doc: Optional[Mapping[str, Any]] = None


@dataclass(frozen=True)
class Ready:
    doc: Mapping[str, Any]


def judge_hccl_json(raw: Optional[bytes]) -> Union[Pending, Ready]:
    """What one read of the file means (pure). None = the file does not exist yet."""
    if raw is None:
        return Pending("the file does not exist yet")
    if len(raw) > MAX_FILE_SIZE:
        return Pending(f"the file is {len(raw)} bytes, over {MAX_FILE_SIZE}")
    try:
        doc = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        return Pending(f"the file is not complete JSON ({len(raw)} bytes; half-written?)")
    if not isinstance(doc, dict):
        return Pending(f"the file holds a JSON {type(doc).__name__}, not a rank table")
    status = doc.get("status")
    if status != "completed":
        return Pending(f"status {status!r}", doc)
    return Ready(doc)


def present_ranks(doc: Mapping[str, Any]) -> list[int]:
    """Pod rank indices already listed in an `initializing` table (best effort).

    MindCluster numbers ranks podRankIndex x devicesPerPod + i (ascend-operator
    pkg/ranktable/common/common.go), so a server's
    lowest rank over its device count is its pod's index.
    """
    found = []
    servers = doc.get("server_list")
    for server in servers if isinstance(servers, list) else []:
        devices = server.get("device") if isinstance(server, Mapping) else None
        if not isinstance(devices, list) or not devices:
            continue
        try:
            low = min(int(d["rank_id"]) for d in devices)
        except (KeyError, TypeError, ValueError):
            continue
        found.append(low // len(devices))
    return sorted(set(found))


def describe_pending(
    state: Pending, node_count: Optional[int], name: Callable[[int], str]
) -> str:
    """The progress text: the file's state and, when the job size is known, who is missing."""
    if state.doc is None:
        return state.reason
    servers = state.doc.get("server_list")
    listed = len(servers) if isinstance(servers, list) else 0
    if node_count is None:
        return f"{state.reason}, {listed} server(s) listed"
    present = set(present_ranks(state.doc))
    missing = [i for i in range(node_count) if i not in present]
    shown = ", ".join(name(i) for i in missing[:8]) + (
        f" and {len(missing) - 8} more" if len(missing) > 8 else "")
    text = f"{state.reason}, {listed} of {node_count} servers listed"
    return text + (f"; missing: {shown}" if missing else "")


def revalidate_dirs(path: Path) -> None:
    """Revalidate the file's parent directory (each level down from the nearest existing
    ancestor when it does not exist yet), so an NFS client drops a cached negative lookup
    (docs/rendezvous.md); the rendezvous's own rule, from the filesystem root."""
    revalidate_dir(path.parent, Path(path.anchor or "/"))


def read_hccl_json(path: Path) -> Optional[bytes]:
    """The file's bytes (a symlink is followed: a ConfigMap mount is one), None if absent.
    An I/O error of the volume (a soft mount's EIO) raises `VolumeIOError`: the file may
    well be there, and the wait retries it (`volume_call.retrying`)."""
    try:
        with call("read", path), open(path, "rb") as fh:
            return fh.read(MAX_FILE_SIZE + 1)
    except (FileNotFoundError, NotADirectoryError):
        return None
    except IsADirectoryError:
        return b"<a directory>"
    except OSError as exc:
        raise_if_io(exc, path, "read")
        log.debug("cannot read %s: %s", path, exc)
        return None


@dataclass
class HcclJsonWait:
    """Wait until the file says `completed`; PeerTimeout (exit 4) at the deadline."""

    path: Path
    deadline: float
    timeout: float
    poll_interval: float = 0.2
    progress_interval: float = 10.0
    node_count: Optional[int] = None
    name: Callable[[int], str] = lambda i: f"node {i}"
    clock: Callable[[], float] = time.monotonic
    sleep: Callable[[float], None] = time.sleep

    def run(self) -> Mapping[str, Any]:
        last_log: Optional[float] = None
        last_text = ""
        while True:
            revalidate_dirs(self.path)
            state = judge_hccl_json(read_hccl_json(self.path))
            if isinstance(state, Ready):
                return state.doc
            text = describe_pending(state, self.node_count, self.name)
            now = self.clock()
            if last_log is None or now - last_log >= self.progress_interval or (
                    text != last_text and now - last_log >= 1.0):
                log.info("waiting for MindCluster's rank table %s: %s", self.path, text)
                last_log, last_text = now, text
            if now >= self.deadline:
                raise PeerTimeout(
                    f"timed out after {self.timeout:g} s waiting for MindCluster's rank table "
                    f"{self.path}: {text}",
                    "check that every pod of the job is running and that MindCluster's "
                    "ascend-operator manages the job; exit 4 is retryable",
                )
            self.sleep(min(self.poll_interval * random.uniform(0.8, 1.2),
                           max(0.0, self.deadline - now) + 0.01))


# ------------------------------------------------------------------ the table MindIE gets


@dataclass(frozen=True)
class Converted:
    table: dict[str, Any]
    index: int  # this pod's position in server_list
    node_count: int


def _first_problem(problems: Sequence[Any]) -> str:
    first = problems[0]
    more = f" (and {len(problems) - 1} more problem(s))" if len(problems) > 1 else ""
    return f"{first.path}: {first.message}{more}"


def _is_ip(text: object) -> bool:
    if not isinstance(text, str):
        return False
    try:
        ipaddress.ip_address(text)
    except ValueError:
        return False
    return True


def convert_for_mindie(
    doc: Mapping[str, Any], pod_ip: str, path: Path, version: str = "auto"
) -> Converted:
    """MindCluster's completed table -> the table this pod hands MindIE (pure).

    `version`: `auto`/`1.0` give v1.0 (what MindIE's own multi-node examples use, A3
    included); `1.2` keeps MindCluster's `super_pod_list` and `super_device_id`s and needs
    a v1.2 input. ClusterInconsistent (exit 5) when the file breaks HCCL's rules, lists
    no server with this pod's IP, or yields a table MindIE would refuse.
    """
    problems = validate_rank_table(doc, "hccl")
    if problems:
        raise ClusterInconsistent(
            f"MindCluster's rank table {path} is invalid: {_first_problem(problems)}",
            f"run `ascend-node validate --for hccl {path}` for every problem",
        )
    if version == "1.2" and (doc.get("version") != "1.2" or "super_pod_list" not in doc):
        raise ClusterInconsistent(
            f"--table-version 1.2, but MindCluster's rank table {path} is version "
            f"{doc.get('version')!r} without super_pod_list",
            "MindCluster writes v1.2 only for super-pod jobs (module-a3-16-super-pod); "
            "use --table-version auto",
        )
    servers = sorted(
        doc["server_list"], key=lambda s: min(int(d["rank_id"]) for d in s["device"]))
    for position, server in enumerate(servers):
        if not _is_ip(server.get("container_ip")):
            raise ClusterInconsistent(
                f"MindCluster's rank table {path}: server {server.get('server_id')!r} has "
                f"container_ip {server.get('container_ip')!r}, not an IP address",
                "MindIE finds its own server by container_ip; check the ascend-operator "
                f"version (server_list[{position}])",
            )
    host_ips = [s.get("host_ip") for s in servers]
    use_host = all(_is_ip(h) for h in host_ips) and len(set(host_ips)) == len(host_ips)
    keep_pods = version == "1.2"
    out_servers: list[dict[str, Any]] = []
    renamed: dict[str, str] = {}
    for server in servers:
        server_id = server["host_ip"] if use_host else server["container_ip"]
        renamed[server["server_id"]] = server_id
        devices = []
        for device in sorted(server["device"], key=lambda d: int(d["rank_id"])):
            entry = {k: device[k] for k in ("device_id", "device_ip", "rank_id") if k in device}
            if keep_pods and "super_device_id" in device:
                entry["super_device_id"] = device["super_device_id"]
            devices.append(entry)
        out_servers.append({"server_id": server_id, "container_ip": server["container_ip"],
                            "device": devices})
    table: dict[str, Any] = {
        "version": "1.2" if keep_pods else "1.0",
        "status": "completed",
        "server_count": str(len(out_servers)),
        "server_list": out_servers,
    }
    if keep_pods:
        table["super_pod_list"] = [
            {"super_pod_id": pod["super_pod_id"],
             "server_list": [{"server_id": renamed.get(m["server_id"], m["server_id"])}
                             for m in pod["server_list"]]}
            for pod in doc["super_pod_list"]
        ]
    matches = [i for i, s in enumerate(out_servers) if s["container_ip"] == pod_ip]
    if not matches:
        listed = ", ".join(s["container_ip"] for s in out_servers[:8])
        raise ClusterInconsistent(
            f"MindCluster's rank table {path} has no server with container_ip {pod_ip} "
            f"(it lists {listed})",
            "this pod is not in the table MindCluster built; check the pod IP "
            "(K8S_POD_IP) and that the file belongs to this job",
        )
    target: Target = "mindie" if len(out_servers) > 1 else "hccl"
    problems = validate_rank_table(table, target)
    if problems:
        raise ClusterInconsistent(
            f"MindCluster's rank table {path} cannot be handed to MindIE: "
            f"{_first_problem(problems)}",
            "MindIE needs a device_ip on every device, equal device counts and at most 60 "
            "servers; fix the job or use --table-source volume",
        )
    return Converted(table, matches[0], len(out_servers))
