"""`run_doctor`: gather what the checks judge, run every check, assemble the report.

The only module of doctor that reads the environment, lists /dev, calls tools through the
gatherers and, with `--peers`, writes this node's facts file; everything it hands to the
`check_*` functions is already gathered.
"""

from __future__ import annotations

import json
import os
import stat
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Callable, Optional, Union

from ascend_node.discover import devices as dev
from ascend_node.discover.hccl_settings import effective_settings, read_versions
from ascend_node.discover.identity import NodeIdentity
from ascend_node.doctor.facts import (
    FACTS_MAX_AGE,
    collect_peer_facts,
    facts_path,
    make_facts,
)
from ascend_node.doctor.hccl_risks import (
    check_hccl_ports,
    check_hccl_settings,
    check_npu_processes,
    check_server_env,
    check_versions,
)
from ascend_node.doctor.local import (
    check_hccn_conf,
    check_health,
    check_ip_family,
    check_ips,
    check_link,
    check_tls,
    check_unique_ips,
    check_visible,
    query_device_states,
    read_hccn_conf,
)
from ascend_node.doctor.mindie_config import (
    backend_config,
    check_mindie_config,
    check_mindie_devices,
    check_mindie_multinode,
    check_mindie_startup,
    read_mindie_state,
)
from ascend_node.doctor.peers import (
    check_peer_devices,
    check_peer_duplicates,
    check_peer_family,
    check_peer_hccl,
    check_peer_netmask,
    check_peer_subnet,
    check_peer_tls,
    check_peer_versions,
    check_peers_present,
)
from ascend_node.doctor.ping import check_ping, ping_pairs, run_pings
from ascend_node.doctor.processes import check_npu_holders, find_npu_holders
from ascend_node.doctor.report import CheckResult, DoctorReport, ok
from ascend_node.doctor.source import check_table_source
from ascend_node.doctor.tables import (
    check_table_content,
    check_table_file,
    check_table_member,
    check_table_stale,
    read_run_state,
    table_in_use,
)
from ascend_node.doctor.volume import (
    check_poll_cost,
    check_volume_mount,
    check_volume_probe,
    probe_round_trip,
)
from ascend_node.errors import AscendNodeError, ConfigError
from ascend_node.ranktable import Problem, validate_file
from ascend_node.rendezvous.store import RunPaths, Valid, read_bytes_nofollow, write_doc
from ascend_node.settings import Settings
from ascend_node.sources.mindcluster_file import judge_hccl_json, read_hccl_json
from ascend_node.statedir import StatusDoc
from ascend_node.status import recorded_process_runs
from ascend_node.tools import ToolResult, run_tool


def _identity(environ: Mapping[str, str]) -> NodeIdentity:
    from ascend_node.chain.table import identify

    return identify(environ)


def _writers_check(settings: Settings, environ: Mapping[str, str], volume: Path,
                   paths: Optional[RunPaths]) -> CheckResult:
    """`volume.writers`: a job without a rendezvous key on a volume other uids can write."""
    from ascend_node.doctor.volume import check_volume_writers, dir_owners
    from ascend_node.rendezvous.seal import load_key

    try:
        key = load_key(environ, settings.rendezvous_key_file)
    except AscendNodeError as exc:
        return CheckResult("volume.writers", "fail", exc.cause, exc.hint)
    return check_volume_writers(dir_owners(volume, paths.root if paths else None),
                                key.key_id if key else None, os.geteuid())


def _key_or_none(environ: Mapping[str, str], settings: Settings) -> Any:
    """The job's key for reading signed documents (`volume.writers` reports a bad one)."""
    from ascend_node.rendezvous.seal import load_key

    try:
        return load_key(environ, settings.rendezvous_key_file)
    except AscendNodeError:
        return None


VOLUME_ANSWER = 10.0
"""Seconds doctor waits for the shared volume's checks (the probe's own visibility wait,
5 s, included) before it reports the volume as not answering (`volume.answer`)."""


def _volume_answer(settings: Settings) -> Union[bool, CheckResult, None]:
    """Whether the shared directory is a directory (None: none configured), or the
    `volume.answer` failure when the volume did not answer within `VOLUME_ANSWER` s."""
    shared = settings.shared_dir
    if shared is None:
        return None
    result: Union[bool, CheckResult] = _bounded(lambda: [shared.is_dir()], settings)[0]
    return result


def _bounded(work: Callable[[], list[Any]], settings: Settings) -> list[Any]:
    """`work()` in a watched thread (`rendezvous.volume_call`), or one `volume.answer`
    failure naming what did not answer within `VOLUME_ANSWER` s."""
    from ascend_node.rendezvous.volume_call import VolumeUnanswered, describe, run_watched

    try:
        return run_watched(work, time.monotonic() + VOLUME_ANSWER,
                           settings.shared_dir or "the shared directory", VOLUME_ANSWER,
                           progress_every=1e9, grace=0.0, name="doctor-volume")
    except VolumeUnanswered:
        where = describe(None, settings.shared_dir or "the shared directory")
        return [CheckResult("volume.answer", "fail",
            f"the shared volume did not answer within {VOLUME_ANSWER:g} s ({where})",
            "the shared volume (its NFS server or storage) does not answer: every pod's "
            "rendezvous will wait on it until its --timeout (exit 4); check the server")]
    except OSError as exc:
        return [CheckResult("volume.answer", "fail",
                            f"cannot inspect {settings.shared_dir}: {exc.strerror or exc}",
                            "check the shared volume's mount (a soft mount gives up with "
                            "EIO or ETIMEDOUT when its server does not answer)")]


def run_doctor(
    settings: Settings,
    environ: Mapping[str, str],
    peers: bool,
    peer_wait: float = 10.0,
    proc_root: str = "/proc",
    *,
    dev_dir: str = "/dev",
    runner: Callable[..., ToolResult] = run_tool,
) -> DoctorReport:
    """Run every check; raise only when the settings make checking impossible
    (ConfigError: a bad --devices, or --peers without a shared directory and run id)."""
    started_wall = time.time()
    paths: Optional[RunPaths] = None
    if peers:
        from ascend_node.chain.table import require_rendezvous_settings
        from ascend_node.rendezvous.volume_call import bounded

        # --peers needs the volume: one that does not answer is exit 4 naming it, in
        # `VOLUME_ANSWER` s (the peers' documents below: in their wait plus as much).
        shared, run_id = bounded(lambda: require_rendezvous_settings(settings), VOLUME_ANSWER,
                                 settings.shared_dir or "the shared directory",
                                 "the peers' facts could not be read", name="doctor-peers")
        paths = RunPaths(shared, run_id)
    answer = _volume_answer(settings)
    if not peers and answer is True and settings.run_id and settings.shared_dir is not None:
        paths = RunPaths(settings.shared_dir, settings.run_id)
    if settings.devices:
        dev.parse_device_list(settings.devices, settings.sources.get("devices", "--devices"))
    checks: list[CheckResult] = []

    ident: Optional[NodeIdentity] = None
    try:
        ident = _identity(environ)
        checks.append(ok("node.identity", f"{ident.name} of {ident.node_count}, pod IP "
                         f"{ident.pod_ip}, host IP {ident.host_ip}"))
    except AscendNodeError as exc:
        if peers:
            raise
        checks.append(CheckResult("node.identity", "fail", exc.cause, exc.hint))

    if environ.get("ASCEND_NODE_PD_TASK", "").strip():
        checks.append(_pd_role_check(environ, settings, answer is True,
                                     ident.pod_ip if ident else None))
    checks.append(_source_check(settings))

    # The shared volume: every check of it is bounded (`VOLUME_ANSWER`), so a volume that
    # does not answer is reported, not waited for.
    volume = settings.shared_dir if answer is True else None
    try:
        mountinfo = Path(proc_root, "self", "mountinfo").read_text(encoding="utf-8",
                                                                   errors="replace")
    except OSError:
        mountinfo = ""
    cost = check_poll_cost(ident.node_count if ident else None, settings.poll_interval)
    if isinstance(answer, CheckResult):
        checks += [answer, cost]
    else:
        def volume_checks() -> list[CheckResult]:
            return [check_volume_mount(volume, mountinfo),
                    check_volume_probe(volume, probe_round_trip(volume) if volume else None)]

        checks += [*_bounded(volume_checks, settings), cost]
        if volume is not None:
            checks += _bounded(lambda: [_writers_check(settings, environ, volume, paths)],
                               settings)

    # Devices.
    npu_smi = dev.resolve_tool(settings.npu_smi, "npu-smi", dev.DEFAULT_NPU_SMI)
    hccn_tool = dev.resolve_tool(settings.hccn_tool, "hccn_tool", dev.DEFAULT_HCCN_TOOL)
    used: Optional[dev.DeviceIds] = None
    error = ""
    try:
        used = dev.enumerate_devices(settings.devices, environ, npu_smi, settings.tool_timeout,
                                     dev_dir, settings.sources.get("devices", "--devices"))
    except AscendNodeError as exc:
        error = exc.cause
    env_ids: Optional[tuple[int, ...]] = None
    visible = environ.get("ASCEND_VISIBLE_DEVICES", "").strip()
    if visible:
        try:
            env_ids = dev.parse_device_list(visible, "ASCEND_VISIBLE_DEVICES")
        except AscendNodeError as exc:
            error = error or exc.cause
    try:
        dev_ids = dev.parse_davinci_names(os.listdir(dev_dir))
    except OSError:
        dev_ids = ()
    checks.append(check_visible(used, error, env_ids, dev_ids, dev_dir))
    conf, conf_note = read_hccn_conf(settings.hccn_conf)
    states = (query_device_states(used.ids, hccn_tool, settings.tool_timeout, conf or {}, runner,
                                  probes=("ip", "link", "net_health", "tls", "netdetect"))
              if used else [])
    checks += [check_ips(states), check_unique_ips(states), check_ip_family(states),
               check_link(states), check_health(states), check_tls(states),
               check_hccn_conf(states, conf, conf_note, settings.hccn_conf)]

    # Rank table and MindIE.
    mindie_state = read_mindie_state(environ)
    multinode = (mindie_state.config is not None
                 and backend_config(mindie_state.config).get("multiNodesInferEnabled") is True)
    target = "mindie" if multinode else "hccl"
    where = table_in_use(environ, settings.state_dir)
    owner_uid = settings.file_owner[0] if settings.file_owner else os.getuid()
    problems: list[Problem] = []
    local_bytes: Optional[bytes] = None
    table: Optional[dict[str, Any]] = None
    if where.path is not None:
        # The owner rule is MindIE's, like the mode: HCCL only needs to read the file.
        problems = validate_file(where.path, target,  # type: ignore[arg-type]
                                 check_owner_uid=owner_uid if target == "mindie" else None)
        first = read_bytes_nofollow(where.path)
        local_bytes = first if isinstance(first, bytes) else _read_following(where.path)
        if local_bytes is not None:
            try:
                loaded = json.loads(local_bytes.decode("utf-8"))
                table = loaded if isinstance(loaded, dict) else None
            except (UnicodeDecodeError, ValueError):
                table = None
    checks += [check_table_file(where, problems), check_table_content(where, problems, target,
                                                          local_bytes is not None),
               check_table_member(table, ident.pod_ip if ident else None, states),
               check_table_stale(where, local_bytes,
                                 read_run_state(paths, _key_or_none(environ, settings)),
                                 paths.shared_table if paths else None)]
    server_count = _server_count(table)
    checks += [check_mindie_config(mindie_state, owner_uid),
               check_mindie_multinode(mindie_state, server_count,
                                      ident.node_count if ident else None, where.path is not None),
               check_mindie_devices(mindie_state, len(states)),
               check_mindie_startup(mindie_state, _server_env(environ, settings.state_dir),
                                    owner_uid)]

    # Processes.
    server_pid = _server_pid(settings.state_dir)
    skip = (os.getpid(),) if os.path.realpath(proc_root) == "/proc" else ()
    holders, hidden = find_npu_holders(proc_root, skip)
    checks.append(check_npu_holders(holders, hidden, server_pid, proc_root))

    # What the start-up pre-flight and boot check (docs/preflight.md).
    versions = read_versions(settings.ascend_root)
    ids = list(used.ids) if used else []
    checks += [check_npu_processes(ids, npu_smi, settings.tool_timeout, server_pid, runner),
               check_hccl_ports(environ, versions.cann, proc_root, server_pid is not None),
               check_hccl_settings(environ),
               check_versions(versions, settings.ascend_root),
               check_server_env(environ, ids, used.source if used else "-", multinode,
                                ident.node_count if ident else None,
                                str(where.path) if where.path else None)]

    facts: dict[str, Any] = {}
    if peers and paths is not None and ident is not None:
        local = {c.id: c.status for c in checks}
        mine = make_facts(paths.run_id, ident, states, local, time.time(),
                          effective_settings(environ), versions.cann, versions.driver)
        fresh_after = started_wall - FACTS_MAX_AGE
        reads = _publish_and_collect(paths, ident, mine, peer_wait, fresh_after)
        peer_facts = [r.doc for r in reads.values() if isinstance(r, Valid)]
        everyone = sorted([mine, *peer_facts], key=lambda f: f.global_index)
        checks += [check_peers_present(reads, ident.master_count, peer_wait, fresh_after),
                   check_peer_devices(everyone, settings.allow_uneven_devices),
                   check_peer_versions(everyone), check_peer_hccl(everyone),
                   check_peer_duplicates(everyone),
                   check_peer_family(everyone), check_peer_netmask(everyone),
                   check_peer_subnet(everyone), check_peer_tls(everyone)]
        pairs, skipped, sampled_out = ping_pairs(mine, peer_facts)
        results = run_pings(pairs, hccn_tool, settings.tool_timeout, runner)
        checks.append(check_ping(results, skipped, sampled_out, ident.master_count))
        facts = {"published": str(facts_path(paths, ident.global_index)),
                 "peers_read": sorted(i for i, r in reads.items() if isinstance(r, Valid)),
                 "pings": len(results)}

    node = ident.name if ident else None
    facts.update({"devices": [{"device_id": s.device_id, "ip": s.ip, "netmask": s.netmask,
                               "link": s.link, "net_health": s.health, "tls": s.tls}
                              for s in states],
                  "rank_table": str(where.path) if where.path else None,
                  "hccn_tool": hccn_tool})
    return DoctorReport(node, tuple(checks), facts)


def _publish_and_collect(paths: RunPaths, ident: NodeIdentity, mine: Any, peer_wait: float,
                         fresh_after: float) -> Any:
    """This node's facts written, the peers' read (waiting up to `peer_wait` s for them),
    watched: a volume that stops answering ends `doctor --peers` with exit 4 naming it
    within `peer_wait` + `VOLUME_ANSWER` s (`rendezvous.volume_call`)."""
    from ascend_node.rendezvous.volume_call import bounded

    def work() -> Any:
        write_doc(facts_path(paths, ident.global_index), mine, paths.shared_dir)
        return collect_peer_facts(paths, ident.global_index, ident.node_count, peer_wait,
                                  fresh_after)

    return bounded(work, peer_wait + VOLUME_ANSWER, paths.root,
                   "the peers' facts could not be read", name="doctor-peers")


def _pd_role_check(environ: Mapping[str, str], settings: Settings, volume_ok: bool,
                   pod_ip: Optional[str]) -> CheckResult:
    """`pd.role`: read the pod's PD identity and the global table (bounded)."""
    from ascend_node.doctor.pd_role import check_pd_role
    from ascend_node.pd.files import validate_global_file
    from ascend_node.pd.roles import read_pd_identity
    from ascend_node.pd.service import global_table_path

    try:
        me = read_pd_identity(environ)
    except AscendNodeError as exc:
        return check_pd_role(None, (exc.cause, exc.hint), None, None, None, None, pod_ip)
    run_id = settings.run_id
    suffix = f"-{me.task}"
    if me.is_server and run_id and run_id.endswith(suffix):
        run_id = run_id[:-len(suffix)]  # a server's run id is its instance's: <run>-<task>
    if not volume_ok or settings.shared_dir is None or not run_id:
        return check_pd_role(me, None, run_id, None, None, None, pod_ip)
    path = global_table_path(settings.shared_dir, run_id)

    def read() -> list[Any]:
        if not path.exists():
            return [None, None]
        problems = validate_global_file(path)
        try:
            doc = json.loads(path.read_bytes().decode("utf-8"))
        except (OSError, UnicodeDecodeError, ValueError):
            doc = None
        return [problems, doc if isinstance(doc, dict) else None]

    got = _bounded(read, settings)
    if len(got) == 1:  # the volume did not answer
        return check_pd_role(me, None, run_id, None, None, None, pod_ip)
    return check_pd_role(me, None, run_id, path, got[0], got[1], pod_ip)


def _source_check(settings: Settings) -> CheckResult:
    from ascend_node.chain.table import table_source

    choice = table_source(settings)
    state = None
    if choice.source == "mindcluster":
        state = judge_hccl_json(read_hccl_json(settings.hccl_json))
    return check_table_source(choice, settings.table_version, state)


def _read_following(path: Path) -> Optional[bytes]:
    """The table's bytes even through a symlink (ranktable.file already reports the link;
    the other checks still judge the content, so one run lists everything)."""
    try:
        if not stat.S_ISREG(os.stat(path).st_mode):
            return None
        with open(path, "rb") as fh:
            return fh.read(16 * 1024 * 1024)
    except OSError:
        return None


def _server_count(table: Optional[Mapping[str, Any]]) -> Optional[int]:
    if table is None:
        return None
    servers = table.get("server_list")
    return len(servers) if isinstance(servers, list) else None


def _server_pid(state_dir: Path,
                runs: Callable[[StatusDoc], bool] = recorded_process_runs) -> Optional[int]:
    """The pid of the server `boot` exec'd, while that very process runs (`runs`: alive and
    started before its record, as `status --serving` asks): a recorded pid that is gone, or
    now another process's, vouches for no NPU holder and no HCCL listener."""
    from ascend_node.handoff.outputs import read_status

    try:
        status = read_status(state_dir)
    except ConfigError:
        return None
    if status is None or status.state != "done" or status.command != "boot":
        return None
    return status.pid if runs(status) else None


def _server_env(environ: Mapping[str, str], state_dir: Path) -> dict[str, str]:
    """The environment the server was (or will be) exec'd with: this shell's, with what the
    agent set (env.json: MIES_CONTAINER_IP, set_env.sh's MIES_INSTALL_PATH, ...) over it."""
    from ascend_node.handoff.outputs import read_env

    try:
        agent = read_env(state_dir) or {}
    except ConfigError:  # an unreadable env.json is not this check's verdict
        agent = {}
    return {**environ, **agent}
