"""Steps 1-5 with MindCluster's hccl.json as the source: wait, convert, write the outputs.

The glue between `ascend_node.sources.mindcluster_file` (the pure conversion and the wait) and the
rest of the chain: `MindClusterSource` is a `sources.base.TableSource` and returns the same
`TableResult` as the shared-volume rendezvous, so `boot` continues exactly as it does there
(env, wheel, config.json, exec). Nothing here touches the shared volume, and nothing here
imports the chain (`chain.table`) back: the chain imports this module when it chooses it.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from typing import Any, Optional

from ascend_node import events, logs
from ascend_node.discover.devices import Device
from ascend_node.discover.hostinfo import default_route_ip, identify
from ascend_node.discover.identity import NodeIdentity, node_name, read_pod_ip
from ascend_node.discover.superpod import NodeSuperPod
from ascend_node.errors import ConfigError
from ascend_node.handoff.outputs import StatusDoc, write_status, write_table_outputs
from ascend_node.ranktable import render_rank_table
from ascend_node.rendezvous.volume_call import retrying, run_watched
from ascend_node.settings import Settings
from ascend_node.sources.base import Discovery, SourceChoice, TableResult
from ascend_node.sources.mindcluster_file import Converted, HcclJsonWait, convert_for_mindie

log = logging.getLogger("ascend_node.mindcluster")

ATTEMPT_ID = "mindcluster"
"""What status.json and `ranktable --json` show as the attempt: there is none."""


class MindClusterSource:
    """Steps 1-5 from MindCluster's hccl.json: wait for it to be completed, convert it.

    There is no pre-flight here: no rendezvous to publish device health in."""

    def __init__(self, choice: SourceChoice) -> None:
        self.choice = choice

    def build(self, settings: Settings, environ: Mapping[str, str], started: float,
              command: str, preflight: str) -> TableResult:
        return ranktable_from_mindcluster(settings, environ, started, command, self.choice)


def ranktable_from_mindcluster(
    settings: Settings, environ: Mapping[str, str], started: float, command: str,
    source: SourceChoice,
) -> TableResult:
    path = settings.hccl_json
    run_id = settings.run_id or ATTEMPT_ID
    write_status(settings.state_dir, StatusDoc(
        state="in_progress", phase="mindcluster", command=command, run_id=run_id,
        message=source.why))
    events.start_run(settings.state_dir, command, started, run_id, source="mindcluster")
    # Volcano's identity is optional here (an AscendJob may not set ROLE); when present
    # it names missing nodes in progress lines the way the volume source does.
    try:
        volcano: Optional[NodeIdentity] = identify(environ)
    except ConfigError as exc:
        log.debug("no Volcano identity (%s); nodes are named by table position", exc.cause)
        volcano = None
    pod_ip = volcano.pod_ip if volcano else read_pod_ip(environ, default_route_ip)[0]
    masters = volcano.master_count if volcano else 1
    wait = HcclJsonWait(
        path=path, deadline=started + settings.timeout, timeout=settings.timeout,
        poll_interval=settings.poll_interval, progress_interval=settings.progress_interval,
        node_count=volcano.node_count if volcano else None,
        name=lambda i: node_name(i, masters),
    )
    with events.phase("mindcluster", path=str(path)):  # waiting for a completed hccl.json
        # Watched (`volume_call`): the file sits on a volume (a ConfigMap, an NFS share)
        # that may stop answering; the deadline holds and the volume is named (exit 4);
        # a soft mount's I/O error is retried until the deadline, never read as "absent".
        doc = run_watched(lambda: retrying(wait.run, wait.deadline, settings.timeout),
                          wait.deadline, path, settings.timeout, settings.progress_interval,
                          what="MindCluster's rank table could not be read",
                          name="mindcluster")
    converted = convert_for_mindie(doc, pod_ip, path, settings.table_version)
    identity = _identity(volcano, converted, pod_ip, environ)
    logs.set_node(identity.global_index, identity.pod_ip)
    if volcano is not None and volcano.global_index != converted.index:
        log.warning("MindCluster lists this pod at position %d, Volcano calls it %s; "
                    "following the table", converted.index, volcano.name)
    table = converted.table
    text = render_rank_table(table)
    with events.phase("outputs"):
        env = write_table_outputs(
            settings.state_dir, text, table, pod_ip, settings.master_file,
            settings.world_size_file, settings.file_owner,
        )
    server = table["server_list"][converted.index]
    devices = tuple(Device(int(d["device_id"]), d["device_ip"], "", str(path))
                    for d in server["device"])
    found = Discovery(identity, devices, str(path), "-", _super_pod(table, converted.index),
                      f"from {path}" if table["version"] == "1.2" else "not used (v1.0)")
    seconds = time.monotonic() - started
    log.info("rank table from MindCluster ready (%d servers, world size %s, version %s) "
             "in %.2f s", len(table["server_list"]), env["WORLD_SIZE"], table["version"],
             seconds)
    # `started` too: boot gives a launcher the time the agent has left from it.
    return TableResult(found, run_id, ATTEMPT_ID, table, text, env, path, seconds,
                       started=started, on_volume=False)


def _identity(
    volcano: Optional[NodeIdentity], converted: Converted, pod_ip: str,
    environ: Mapping[str, str],
) -> NodeIdentity:
    """This pod as the table places it; Volcano's task split when it fits the table."""
    count = converted.node_count
    masters = volcano.master_count if volcano and volcano.node_count == count else 1
    masters = min(masters, count)
    index = converted.index
    role = "master" if index < masters else "worker"
    incarnation = (volcano.incarnation if volcano
                   else environ.get("POD_UID", "").strip() or f"pod-{pod_ip}")
    server: dict[str, Any] = converted.table["server_list"][index]
    return NodeIdentity(
        role=role, task_index=index if role == "master" else index - masters,
        master_count=masters, worker_count=count - masters, pod_ip=pod_ip,
        host_ip=server["server_id"] if volcano is None else volcano.host_ip,
        incarnation=incarnation,
        sources={"role": "hccl.json position", "task_index": "hccl.json position",
                 "pod_ip": "K8S_POD_IP/POD_IP" if volcano is None
                 else volcano.sources.get("pod_ip", "?")},
        job_version=volcano.job_version if volcano else None,
    )


def _super_pod(table: Mapping[str, Any], index: int) -> Optional[NodeSuperPod]:
    if table.get("version") != "1.2":
        return None
    server = table["server_list"][index]
    pod = next((p["super_pod_id"] for p in table.get("super_pod_list", [])
                if any(m["server_id"] == server["server_id"] for m in p["server_list"])), None)
    if pod is None:
        return None
    return NodeSuperPod(pod, {int(d["device_id"]): int(d["super_device_id"])
                             for d in server["device"] if "super_device_id" in d})


__all__ = ["MindClusterSource", "ranktable_from_mindcluster"]
