"""The chain, step by step (docs/design.md "The chain"): each step a function the CLI calls.

Kept apart from the command line (`cli/`) so the chain can be driven (and tested) without a command
line, and so commands stay thin. Steps 1-5 come from a `TableSource`: the shared-volume
rendezvous here (`VolumeSource`), or MindCluster's hccl.json (`sources.mindcluster`,
imported only when chosen). The shapes they share live in `sources.base`, so no source
imports this module back.
"""

from __future__ import annotations

import contextlib
import functools
import json
import logging
import os
import time
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Callable, Optional

from ascend_node import events, logs
from ascend_node.discover import devices as dev
from ascend_node.discover.hostinfo import identify as identify
from ascend_node.discover.identity import NodeIdentity
from ascend_node.discover.superpod import SuperPodProbe, query_super_pod
from ascend_node.errors import AscendNodeError, ConfigError
from ascend_node.handoff.device_ids import mindie_device_problem
from ascend_node.handoff.outputs import StatusDoc, write_status, write_table_outputs
from ascend_node.preflight.policy import node0_judge
from ascend_node.preflight.probe import HealthProbe, NodeProbe
from ascend_node.preflight.record import record_cluster
from ascend_node.rendezvous.models import DeviceRecord, MemberData
from ascend_node.rendezvous.protocol import Rendezvous, node0_failure, publish_failure
from ascend_node.rendezvous.seal import KEY_FILE_ENV, RendezvousKey, load_key
from ascend_node.rendezvous.store import RunPaths
from ascend_node.rendezvous.volume_call import (
    VolumeUnanswered,
    bounded,
    call,
    raise_if_io,
    retrying,
    run_watched,
)
from ascend_node.settings import Settings
from ascend_node.sources.base import Discovery as Discovery
from ascend_node.sources.base import SourceChoice, TableSource, choose_table_source
from ascend_node.sources.base import TableResult as TableResult

log = logging.getLogger("ascend_node")


def discover(
    settings: Settings, environ: Mapping[str, str], identity: Optional[NodeIdentity] = None,
    on_devices: Optional[Callable[[Sequence[int], str], None]] = None,
) -> Discovery:
    """Steps 1-2: identity, then devices and their RoCE IPs. Writes nothing.

    `on_devices(ids, hccn_tool)` runs once the devices are known, before their IPs are
    asked for (the pre-flight starts its own probes there, to run alongside)."""
    identity = identity or identify(environ)
    npu_smi = dev.resolve_tool(settings.npu_smi, "npu-smi", dev.DEFAULT_NPU_SMI)
    ids = dev.enumerate_devices(
        settings.devices, environ, npu_smi, settings.tool_timeout,
        explicit_source="--devices" if settings.sources.get("devices") == "flag --devices"
        else "ASCEND_NODE_DEVICES")
    hccn_tool = dev.resolve_tool(settings.hccn_tool, "hccn_tool", dev.DEFAULT_HCCN_TOOL)
    if on_devices is not None:
        on_devices(ids.ids, hccn_tool)
    started = time.monotonic()
    # The super-pod probe (npu-smi) runs beside the IP queries (hccn_tool): on an A2 node
    # it costs two npu-smi calls, which would otherwise add to every pod start.
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="spod") as pool:
        pending = pool.submit(probe_super_pod, settings, ids.ids, npu_smi)
        found, raw = dev.query_ips(ids.ids, hccn_tool, settings.tool_timeout,
                                   str(settings.hccn_conf))
        log.debug("queried %d device IPs in %.3f s", len(found), time.monotonic() - started)
        dev.check_device_ips(found, raw)
        probe = pending.result()
    return Discovery(identity, tuple(found), ids.source, hccn_tool, probe.super_pod,
                     probe.note)


def probe_super_pod(settings: Settings, ids: tuple[int, ...], npu_smi: str) -> SuperPodProbe:
    """The A3 super pod of this node (rank table v1.2), unless --table-version 1.0.

    A Job rendered for A3 nodes (`ASCEND_NODE_A3`, `manifest --a3`) whose node reports
    none (npu-smi not mounted, an A2 node under the A3 label) still goes on with `auto`
    (every other node may say the same: a v1.0 table then), but never silently: a warning
    in the log and in the node's shared summary, which `report` shows."""
    if settings.table_version == "1.0":
        return SuperPodProbe(None, "not asked (--table-version 1.0)")
    started = time.monotonic()
    probe = query_super_pod(ids, npu_smi, settings.tool_timeout,
                            required=settings.table_version == "1.2")
    log.debug("super pod: %s (%.3f s)", probe.note, time.monotonic() - started)
    if settings.a3 and probe.super_pod is None:
        events.warn(a3_warning(probe.note))
    return probe


def a3_warning(note: str) -> str:
    """One line: asked for A3, found no super pod, what the table becomes and what to do."""
    return (f"rendered for Atlas A3 (ASCEND_NODE_A3, manifest --a3), but this node reports "
            f"no super pod ({note}): the rank table will be v1.0, not the v1.2 an A3 "
            "SuperPoD needs; mount the host's npu-smi (docs/deploy.md, \"Host files\") or "
            "pass --table-version 1.2 to stop instead")


def table_source(settings: Settings) -> SourceChoice:
    """Shared volume or MindCluster's hccl.json (--table-source; `auto` looks for the file,
    watched: its directory may be a volume that does not answer, exit 4 naming it at the
    pod's `--timeout`, `volume_call`)."""
    if settings.table_source != "auto":
        return choose_table_source(settings.table_source, settings.hccl_json, False)
    path = settings.hccl_json

    def exists() -> bool:
        with call("inspect", path):
            return os.path.lexists(path)

    return choose_table_source(settings.table_source, path,
                               bounded(exists, settings.timeout, path,
                                       "the rank table's source could not be chosen",
                                       name="table-source"))


def member_data(d: Discovery) -> MemberData:
    sdids = d.super_pod.sdids if d.super_pod else {}
    return MemberData(
        global_index=d.identity.global_index,
        role=d.identity.role,  # type: ignore[arg-type]
        task_index=d.identity.task_index,
        pod_ip=d.identity.pod_ip,
        host_ip=d.identity.host_ip,
        devices=tuple(DeviceRecord(device_id=x.device_id, device_ip=x.ip,
                                   super_device_id=sdids.get(x.device_id))
                      for x in d.devices),
        super_pod_id=d.super_pod.super_pod_id if d.super_pod else None,
    )


def require_rendezvous_settings(settings: Settings) -> tuple[Path, str]:
    if settings.shared_dir is None:
        raise ConfigError(
            "no shared directory: --shared-dir, ASCEND_NODE_SHARED_DIR and MODEL_PATH are unset",
            "mount the job's shared PVC and point --shared-dir (or MODEL_PATH) at it, or meet "
            "through the Kubernetes API instead: --rendezvous kube (ASCEND_NODE_RENDEZVOUS)",
        )
    try:
        with call("inspect", settings.shared_dir):
            is_dir = settings.shared_dir.is_dir()
    except OSError as exc:  # pathlib answers "no" for a missing one; this is the volume
        raise_if_io(exc, settings.shared_dir, "inspect")
        raise ConfigError(f"cannot inspect shared directory {settings.shared_dir}: "
                          f"{exc.strerror or exc}", "check the shared volume's mount") from exc
    if not is_dir:
        raise ConfigError(
            f"shared directory {settings.shared_dir} (from "
            f"{settings.sources.get('shared_dir', '?')}) does not exist or is not a directory",
            "mount the job's shared PVC there, or fix --shared-dir",
        )
    if not settings.run_id:
        raise ConfigError(
            "no run id: --run-id, ASCEND_NODE_RUN_ID, KUBEFLOW_RUN_ID and KFJ_RUN_ID are unset",
            "set ASCEND_NODE_RUN_ID to a name shared by all pods of this job",
        )
    return settings.shared_dir, settings.run_id


def ranktable(
    settings: Settings, environ: Mapping[str, str], started: float, command: str = "ranktable",
    preflight: str = "off", launcher: Optional[str] = None,
) -> TableResult:
    """Steps 1-5: discover, meet the peers, write the table and the env files.

    `preflight` (strict|warn|off, `preflight.policy`): publish this node's device health
    with its data, for node 0 to judge with the membership. With MindCluster's hccl.json
    as the source (`table_source`), steps 1-3 are replaced by waiting for that file
    (`ascend_node.sources.mindcluster_file`); the outputs are the same, and there is no pre-flight
    (no rendezvous to publish in). `launcher`: what `boot` hands over to; a multi-node
    MindIE pod whose devices MindIE cannot use is refused before the rendezvous
    (`handoff.device_ids`).
    """
    choice = table_source(settings)
    log.info("rank table source: %s (%s)", choice.source, choice.why)
    return source_for(choice, launcher).build(settings, environ, started, command, preflight)


def source_for(choice: SourceChoice, launcher: Optional[str] = None) -> TableSource:
    """The `TableSource` for a choice; MindCluster's module is imported only when chosen.
    (The rendezvous through the API is `chain.kube_table.ranktable`, which the command
    line calls instead of this module's for `--rendezvous kube`.)"""
    if choice.source == "mindcluster":
        from ascend_node.sources.mindcluster import MindClusterSource

        return MindClusterSource(choice)
    return VolumeSource(choice, launcher)


class VolumeSource:
    """Steps 1-5 on the shared volume: discover, meet the peers, write the outputs."""

    def __init__(self, choice: SourceChoice, launcher: Optional[str] = None) -> None:
        self.choice = choice
        self.launcher = launcher

    def build(self, settings: Settings, environ: Mapping[str, str], started: float,
              command: str, preflight: str) -> TableResult:
        return _ranktable_from_volume(settings, environ, started, command, preflight,
                                      self.launcher)


def _ranktable_from_volume(
    settings: Settings, environ: Mapping[str, str], started: float, command: str,
    preflight: str, launcher: Optional[str] = None,
) -> TableResult:
    deadline = started + settings.timeout
    # The first look at the shared directory (is it one?) may already meet a volume that
    # does not answer: watched like every later call (`volume_call`).
    shared_dir, run_id = run_watched(
        lambda: retrying(lambda: require_rendezvous_settings(settings), deadline,
                         settings.timeout), deadline,
        settings.shared_dir or "the shared directory", settings.timeout,
        settings.progress_interval)
    with failures_told_to_peers(settings, environ, started, command):
        key = rendezvous_key(settings, environ)  # (a bad key file: told unsigned)
    paths = RunPaths(shared_dir, run_id)
    status = StatusDoc(state="in_progress", phase="discover", command=command, run_id=run_id)
    write_status(settings.state_dir, status)
    events.start_run(settings.state_dir, command, started, run_id)
    identity: Optional[NodeIdentity] = None
    probe: Optional[HealthProbe] = None
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
            # The pre-flight's health probes ran beside the IP queries; what is left of
            # them is part of discovery.
            health, probe_seconds, probe_wait = probe.result([d.ip for d in found.devices])
            detail.update(node=identity.name, devices=len(found.devices))
            if health is not None:
                detail.update(preflight_probe_seconds=round(probe_seconds, 3),
                              preflight_probe_wait=round(probe_wait, 3))
    except AscendNodeError as exc:
        if probe is not None:
            probe.cancel()
        if identity is not None:
            with contextlib.suppress(VolumeUnanswered):
                run_watched(functools.partial(_publish_local_failure, paths, identity, exc,
                                              deadline, key),
                            deadline, paths.root, settings.timeout,
                            settings.progress_interval)
            leave_summary(settings, identity, command, "failed", exc=exc)
        raise
    status = status.replace(phase="rendezvous", node=identity.name)
    write_status(settings.state_dir, status)
    log.info("%d devices (%s), pod IP %s; joining run %s as %s of %d",
             len(found.devices), found.device_source, identity.pod_ip, run_id, identity.name,
             identity.node_count)
    rdzv = Rendezvous(
        paths=paths,
        identity=identity,
        data=member_data(found),
        deadline=deadline,
        timeout=settings.timeout,
        poll_interval=settings.poll_interval,
        progress_interval=settings.progress_interval,
        allow_uneven_devices=settings.allow_uneven_devices,
        table_version=settings.table_version,
        health=health,
        judge=node0_judge(preflight),
        key=key,
    )

    def stalled(line: str) -> None:  # `ascend-node status` shows the stall while it lasts
        write_status(settings.state_dir, status.replace(message=line))

    try:
        with events.phase("rendezvous", node=identity.name,
                          nodes=identity.node_count) as detail:
            # In a worker thread: a call stuck on the volume cannot stop this thread's
            # clock, progress lines or signal handlers (`volume_call`).
            outcome = run_watched(rdzv.run, deadline, paths.root, settings.timeout,
                                  settings.progress_interval, stalled)
            detail["attempt"] = outcome.attempt_id
            if outcome.warnings:
                detail["preflight_warnings"] = len(outcome.warnings)
    except BaseException as exc:
        leave_summary(settings, identity, command, "failed", exc=exc)
        raise
    # After the outcome is decided, so it cannot change it (report/record.py).
    leave_summary(settings, identity, command, "table", outcome.attempt_id)
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
    return TableResult(found, run_id, outcome.attempt_id, table, outcome.ranktable_text, env,
                       paths.shared_table, seconds, started, preflight, cluster, key)


def check_hccl_values(environ: Mapping[str, str], preflight: str) -> None:
    """HCCL values CANN refuses at run time (docs/preflight.md): under `strict` a
    configuration error of this pod before the rendezvous (exit 1; the peers end with 5),
    under `warn` a warning, under `off` not looked at."""
    if preflight == "off":
        return
    from ascend_node.discover.hccl_settings import refused_values

    problems = refused_values(environ)
    if not problems:
        return
    text = "; ".join(problems)
    if preflight == "strict":
        raise ConfigError(f"HCCL setting CANN refuses: {text}",
                          "correct it in the job's environment, the same on every pod (or "
                          "--preflight warn to start anyway)")
    log.warning("pre-flight: HCCL setting CANN refuses: %s (going on: --preflight warn)", text)


def rendezvous_key(settings: Settings, environ: Mapping[str, str]) -> Optional[RendezvousKey]:
    """The job's rendezvous key, if it has one; logged by its key id only."""
    source = settings.sources.get("rendezvous_key_file", "")
    key = load_key(environ, settings.rendezvous_key_file,
                   source.split(" ", 1)[-1] if source else KEY_FILE_ENV)
    if key is None:
        log.debug("no rendezvous key: documents on the shared volume are checked, "
                  "not authenticated (docs/rendezvous.md, threat model)")
    else:
        log.info("rendezvous key id %s: documents on the shared volume are signed",
                 key.key_id)
    return key


def leave_summary(settings: Settings, identity: NodeIdentity, command: str, state: str,
                  attempt_id: Optional[str] = None, exc: Optional[BaseException] = None
                  ) -> None:
    """This node's timeline summary on the shared volume (`ascend-node report`); never
    raises, never changes the exit code, and never waits more than `SUMMARY_WAIT` s for
    a volume that does not answer (it is left out then)."""
    if settings.shared_dir is None or not settings.run_id:
        return
    if isinstance(exc, VolumeUnanswered):
        return  # the volume did not answer: the summary would only wait for it again
    from ascend_node.report.record import leave_summary as write_summary

    shared_dir, run_id = settings.shared_dir, settings.run_id
    try:
        run_watched(lambda: write_summary(shared_dir, run_id, identity, command,
                                          state, attempt_id, exc),  # type: ignore[arg-type]
                    time.monotonic() + SUMMARY_WAIT, shared_dir, SUMMARY_WAIT, grace=0.0,
                    progress_every=1e9, name="summary")
    except VolumeUnanswered:
        log.warning("left no timeline summary: the shared volume did not answer within "
                    "%g s", SUMMARY_WAIT)
    except Exception as error:
        log.debug("left no timeline summary: %s", error)


SUMMARY_WAIT = 5.0
"""Seconds a pod waits for its timeline summary to be written on the volume."""


@contextlib.contextmanager
def failures_told_to_peers(settings: Settings, environ: Mapping[str, str], started: float,
                           command: str) -> Iterator[None]:
    """Tell the peers of a local failure found before this pod's discovery starts, as one
    found during it is: an output path that cannot be written (`--master-file`,
    `handoff.placement`), a bad `boot` option, an unreadable rendezvous key file. Without
    it the failed pod exits 1 at once while its peers wait for it until their
    `--timeout` (exit 4, "missing: worker 0"): now node 0 aborts the attempt and every
    peer exits 5 naming this pod and its cause (docs/rendezvous.md, "A pod that fails
    before its discovery"). The error is raised on unchanged."""
    try:
        yield
    except AscendNodeError as exc:
        tell_peers_of_failure(settings, environ, started, command, exc)
        raise


def tell_peers_of_failure(settings: Settings, environ: Mapping[str, str], started: float,
                          command: str, exc: AscendNodeError) -> None:
    """Publish `exc` as this pod's local failure (`_publish_local_failure`) when the pod
    can say who it is and where its peers meet: a pod whose identity, shared directory or
    run id is itself the failure has no slot to publish into, and one whose table comes
    from MindCluster's file has no peers waiting on the volume. Never raises; bounded by
    the pod's deadline (`volume_call`)."""
    if settings.shared_dir is None or not settings.run_id:
        return
    try:
        identity = identify(environ)
        if table_source(settings).source != "volume":
            return
    except AscendNodeError:
        return
    key: Optional[RendezvousKey] = None
    with contextlib.suppress(AscendNodeError):  # unsigned, when the key is the failure
        key = load_key(environ, settings.rendezvous_key_file, KEY_FILE_ENV)
    paths = RunPaths(settings.shared_dir, settings.run_id)
    deadline = started + settings.timeout

    def publish() -> None:
        with call("inspect", paths.shared_dir):
            if not paths.shared_dir.is_dir():
                return
        _publish_local_failure(paths, identity, exc, deadline, key)

    with contextlib.suppress(VolumeUnanswered, OSError):
        run_watched(publish, deadline, paths.root, settings.timeout,
                    settings.progress_interval)
    leave_summary(settings, identity, command, "failed", exc=exc)


def _publish_local_failure(
    paths: RunPaths, identity: NodeIdentity, exc: AscendNodeError, deadline: float,
    key: Optional[RendezvousKey] = None,
) -> None:
    cause = exc.cause
    wait = max(0.0, min(5.0, deadline - time.monotonic()))
    if identity.global_index == 0:
        aid = node0_failure(paths, identity, cause, key=key)
    else:
        aid = publish_failure(paths, identity, cause, wait, key=key)
    if aid:
        log.info("published this node's failure into attempt %s", aid)
