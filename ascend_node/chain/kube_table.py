"""Steps 1-5 with the rendezvous through the Kubernetes API (`--rendezvous kube`).

The same steps as `chain.table`'s volume source — discover, meet the peers, write the
outputs locally (`RANK_TABLE_FILE`, the master and world-size files, `source_mul_env.sh`) —
with `rendezvous.kube_participant` in place of the shared volume. Imported only when
`--rendezvous kube` is chosen, so that the volume's pods never load the API client
(tests/pod_imports.json).

Who the job is comes from the downward API (`kube_layout.job_identity`); where the API server
is and who the pod is, from its ServiceAccount (`kube.config.in_cluster`). The directory of the
ServiceAccount's files can be moved with `ASCEND_NODE_SERVICE_ACCOUNT_DIR`: a testing knob (the
tests run real agent processes outside a pod against a real API server with a real
ServiceAccount token), not a user-facing setting.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Optional

from ascend_node import events, logs
from ascend_node.chain.table import (
    check_hccl_values,
    discover,
    member_data,
    source_for,
    table_source,
)
from ascend_node.discover import devices as dev
from ascend_node.discover.hostinfo import identify
from ascend_node.discover.identity import NodeIdentity
from ascend_node.errors import AscendNodeError, ConfigError
from ascend_node.handoff.device_ids import mindie_device_problem
from ascend_node.handoff.outputs import StatusDoc, write_status, write_table_outputs
from ascend_node.kube.client import Client
from ascend_node.kube.config import SERVICE_ACCOUNT_DIR, in_cluster
from ascend_node.kube.resources import CONFIGMAPS
from ascend_node.preflight.policy import node0_judge
from ascend_node.preflight.probe import HealthProbe, NodeProbe
from ascend_node.preflight.record import record_cluster
from ascend_node.rendezvous.kube_layout import JobIdentity, job_identity, object_name
from ascend_node.rendezvous.kube_participant import (
    KubeRendezvous,
    node0_failure,
    publish_failure,
)
from ascend_node.rendezvous.seal import KEY_ENV
from ascend_node.settings import Settings
from ascend_node.sources.base import SourceChoice, TableResult

log = logging.getLogger("ascend_node")

SERVICE_ACCOUNT_DIR_ENV = "ASCEND_NODE_SERVICE_ACCOUNT_DIR"  # testing knob (module docstring)


def ranktable(
    settings: Settings, environ: Mapping[str, str], started: float, command: str = "ranktable",
    preflight: str = "off", launcher: Optional[str] = None,
) -> TableResult:
    """`chain.table.ranktable` for `--rendezvous kube`: MindCluster's hccl.json still wins
    where `--table-source` chooses it; otherwise the pods meet through the API."""
    choice = table_source(settings)
    if choice.source == "mindcluster":
        log.info("rank table source: %s (%s)", choice.source, choice.why)
        return source_for(choice, launcher).build(settings, environ, started, command,
                                                  preflight)
    log.info("rank table source: the rendezvous through the Kubernetes API (%s)",
             settings.sources.get("rendezvous", "--rendezvous kube"))
    return KubeSource(choice, launcher).build(settings, environ, started, command, preflight)


class KubeSource:
    """Steps 1-5 through the API: a `sources.base.TableSource`, so `boot` goes on as after
    the volume (env, wheel, config.json, exec)."""

    def __init__(self, choice: SourceChoice, launcher: Optional[str] = None) -> None:
        self.choice = choice
        self.launcher = launcher

    def build(self, settings: Settings, environ: Mapping[str, str], started: float,
              command: str, preflight: str) -> TableResult:
        return ranktable_through_api(settings, environ, started, command, preflight,
                                     self.launcher)


def api_client(environ: Mapping[str, str]) -> Client:
    """The pod's ServiceAccount's client (the files moved only by the testing knob)."""
    directory = Path(environ.get(SERVICE_ACCOUNT_DIR_ENV) or SERVICE_ACCOUNT_DIR)
    return Client(in_cluster(environ, directory))


def ranktable_through_api(
    settings: Settings, environ: Mapping[str, str], started: float, command: str,
    preflight: str, launcher: Optional[str] = None,
) -> TableResult:
    deadline = started + settings.timeout
    if settings.rendezvous_key_file is not None or environ.get(KEY_ENV):
        # Documents in the API are not signed: RBAC decides who may write them (the Role
        # names this job's objects only), where on a shared volume anyone who mounts it can.
        log.warning("the rendezvous key is not used through the Kubernetes API: its Role "
                    "decides who writes the job's objects (docs/rendezvous.md)")
    client = api_client(environ)
    job = job_identity(environ, client.namespace)
    run_id = settings.run_id or job.name
    status = StatusDoc(state="in_progress", phase="discover", command=command, run_id=run_id)
    write_status(settings.state_dir, status)
    events.start_run(settings.state_dir, command, started, run_id, source="kube")
    probe: Optional[HealthProbe] = None
    identity: Optional[NodeIdentity] = None
    try:
        with events.phase("discovery") as detail:
            identity = identify(environ)
            logs.set_node(identity.global_index, identity.pod_ip)
            probe = HealthProbe(preflight, settings.tool_timeout, NodeProbe(
                dev.resolve_tool(settings.npu_smi, "npu-smi", dev.DEFAULT_NPU_SMI), environ,
                settings.ascend_root, settings.preflight_hold_wait))
            found = discover(settings, environ, identity, on_devices=probe.start)
            problem = mindie_device_problem([d.device_id for d in found.devices],
                                            found.device_source, environ, launcher,
                                            identity.node_count)
            if problem is not None:
                raise ConfigError(*problem)
            check_hccl_values(environ, preflight)
            health, probe_seconds, probe_wait = probe.result([d.ip for d in found.devices])
            detail.update(node=identity.name, devices=len(found.devices))
    except AscendNodeError as exc:
        if probe is not None:
            probe.cancel()
        if identity is not None:
            # The peers hear of it now (5), not at their timeout (4), as on the volume.
            if identity.global_index == 0:
                aid = node0_failure(client, job, run_id, identity, exc.cause, deadline)
            else:
                wait = max(0.0, min(5.0, deadline - time.monotonic()))
                aid = publish_failure(client, job, run_id, identity, exc.cause, wait)
            if aid:
                log.info("published this node's failure into attempt %s", aid)
            leave_kube_summary(client, job, run_id, identity, command, "failed", aid, exc)
        raise
    write_status(settings.state_dir, status.replace(phase="rendezvous", node=identity.name))
    log.info("%d devices (%s), pod IP %s; joining vcjob %s/%s through the API as %s of %d",
             len(found.devices), found.device_source, identity.pod_ip, job.namespace,
             job.name, identity.name, identity.node_count)
    rdzv = KubeRendezvous(
        client=client, job=job, run_id=run_id, identity=identity, data=member_data(found),
        deadline=deadline, timeout=settings.timeout,
        progress_interval=settings.progress_interval,
        allow_uneven_devices=settings.allow_uneven_devices,
        table_version=settings.table_version, health=health, judge=node0_judge(preflight))
    failure: Optional[AscendNodeError] = None
    try:
        with events.phase("rendezvous", node=identity.name, nodes=identity.node_count,
                          store="kube") as detail:
            outcome = rdzv.run()
            detail["attempt"] = outcome.attempt_id
            detail["api_requests"] = client.requests
            if outcome.warnings:
                detail["preflight_warnings"] = len(outcome.warnings)
    except AscendNodeError as exc:
        failure = exc
        raise
    finally:
        log.info("rendezvous through the API: %d requests (%d watches) to %s",
                 client.requests, client.watches, client.endpoint.server)
        if failure is not None:  # after the count: the summary is not the rendezvous'
            leave_kube_summary(client, job, run_id, identity, command, "failed", None,
                               failure)
        client.close()
    cluster = record_cluster(settings.state_dir, preflight, outcome.warnings,
                             probe_seconds, probe_wait,
                             health.node.model_dump(mode="json")
                             if health is not None and health.node is not None else None)
    with events.phase("outputs"):
        table = json.loads(outcome.ranktable_text)
        env = write_table_outputs(
            settings.state_dir, outcome.ranktable_text, table, identity.pod_ip,
            settings.master_file, settings.world_size_file, settings.file_owner,
        )
    seconds = time.monotonic() - started
    log.info("rank table ready (attempt %s, %d servers, world size %s) in %.2f s",
             outcome.attempt_id, len(table["server_list"]), env["WORLD_SIZE"], seconds)
    leave_kube_summary(client, job, run_id, identity, command, "table", outcome.attempt_id)
    # Where the shared copy is: the first part's path in the API (`ranktable --json`).
    shared = Path(CONFIGMAPS.path(job.namespace, object_name(job.scope, "table", 0)))
    return TableResult(found, run_id, outcome.attempt_id, table, outcome.ranktable_text, env,
                       shared, seconds, started, preflight, cluster, None, on_volume=False)


def leave_kube_summary(client: Client, job: JobIdentity, run_id: str, identity: NodeIdentity,
                       command: str, state: str, attempt_id: Optional[str],
                       exc: Optional[BaseException] = None) -> None:
    """This pod's timeline summary into its slot object (`rendezvous.kube_summary`), for
    `report --rendezvous kube`: the volume's document, on the pod's own clock (no shared
    file to stamp it: nodes' clocks are NTP's). After a failure the attempt is the one the
    attempt object names. Never raises, never waits more than 5 s a call."""
    started = time.time()
    outcome = "failed"
    try:
        from ascend_node.rendezvous import kube_docs
        from ascend_node.rendezvous.kube_participant import get_object
        from ascend_node.rendezvous.kube_summary import put_summary
        from ascend_node.report.record import summary_document

        client.timeout = 5.0
        if attempt_id is None:
            attempt, _, _ = kube_docs.attempt_state(
                job, get_object(client, object_name(job.scope, "attempt")), run_id)
            attempt_id = attempt.attempt_id if attempt is not None else None
        doc = summary_document(run_id, identity, command, state,  # type: ignore[arg-type]
                               attempt_id, (0.0, 0.0, "local"), None, exc)
        text = json.dumps(doc, separators=(",", ":")) + "\n"
        if put_summary(client, job, identity.global_index, text):
            outcome = "ok"
    except Exception as err:  # the summary never changes the outcome
        log.debug("no timeline summary: %s: %s", err.__class__.__name__, err)
    finally:
        events.record("summary", started, time.time(), outcome, state=state)
