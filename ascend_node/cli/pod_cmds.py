"""Commands a pod runs: `discover`, `ranktable`, `boot`, `env`, `status`.

No `from __future__ import annotations` here (see `app`).
"""

import contextlib
import os
import signal
import sys
from typing import TYPE_CHECKING, Annotated, Any, Callable, Optional

import typer

from ascend_node import logs
from ascend_node.cli.app import (
    IN_THE_POD,
    STARTED,
    ServerCommand,
    app,
    debug_on,
    emit,
    exit_codes,
    on_sigterm,
    option_flags,
    out,
    settings_from,
)
from ascend_node.cli.options import (
    AllowUneven,
    Debug,
    Devices,
    FileOwner,
    HcclJson,
    HccnTool,
    Json,
    MasterFile,
    MasterPort,
    Preflight,
    RendezvousKeyFile,
    RendezvousOpt,
    RunId,
    SharedDir,
    StateDir,
    TableSource,
    TableVersion,
    Timeout,
    Verbose,
    WorldSizeFile,
    seconds,
)
from ascend_node.errors import AscendNodeError

if TYPE_CHECKING:
    from ascend_node.settings import Settings


def _status_writer(settings_box: dict[str, Any], command: str
                   ) -> Callable[[BaseException, int], None]:
    def write(exc: BaseException, code: int) -> None:
        from ascend_node.handoff.exec import write_termination_log
        from ascend_node.handoff.outputs import StatusDoc, write_status

        cause = exc.cause if isinstance(exc, AscendNodeError) else str(exc)
        write_termination_log(f"ascend-node {command}: exit {code}: {cause}")
        settings = settings_box.get("settings")
        if settings is not None:
            write_status(settings.state_dir, StatusDoc(
                state="failed", phase=command, command=command, exit_code=code,
                message=cause, run_id=settings.run_id))
    return write

def _placed(settings: Any, verbose: bool) -> Any:
    """The outputs' paths checked (and defaults moved) before the rendezvous."""
    from ascend_node.handoff.placement import FALLBACK_NAMES, place_outputs
    from ascend_node.settings import shown_setting

    placed = place_outputs(settings, os.environ)
    if verbose:
        for name in ("state_dir", *FALLBACK_NAMES):
            if placed.sources.get(name, "").startswith("fallback"):
                print(f"ascend-node: setting {name} = {shown_setting(getattr(placed, name))}  "
                      f"[{placed.sources[name]}]", file=sys.stderr)
    return placed


@app.command(rich_help_panel=IN_THE_POD)
def discover(
    devices: Devices = None, hccn_tool: HccnTool = None, table_version: TableVersion = None,
    table_source: TableSource = None, hccl_json: HcclJson = None, json_out: Json = False,
    verbose: Verbose = False, debug: Debug = False,
) -> None:
    """Identity and devices as this container sees them. Writes nothing."""
    logs.setup(verbose, debug_on(debug))
    with exit_codes(debug_on(debug)):
        from ascend_node.chain.table import discover as run_discover
        from ascend_node.chain.table import table_source as choose_source

        settings = settings_from(verbose, **option_flags(locals()))
        found = run_discover(settings, os.environ)
        source = choose_source(settings)
        pod = found.super_pod
        ident = found.identity
        doc = {
            "identity": {
                "role": ident.role, "task_index": ident.task_index,
                "global_index": ident.global_index, "node_count": ident.node_count,
                "master_count": ident.master_count, "worker_count": ident.worker_count,
                "name": ident.name, "pod_ip": ident.pod_ip, "host_ip": ident.host_ip,
                "incarnation": ident.incarnation, "run_id": settings.run_id,
            },
            "devices": [
                {"device_id": d.device_id, "ip": d.ip, "netmask": d.netmask,
                 "ip_source": d.ip_source,
                 **({"super_device_id": pod.sdids.get(d.device_id)} if pod else {})}
                for d in found.devices
            ],
            "table": {
                "source": source.source, "source_why": source.why,
                "hccl_json": str(settings.hccl_json),
                "version_setting": settings.table_version,
                "super_pod_id": pod.super_pod_id if pod else None,
                "super_pod": found.super_pod_note,
            },
            "sources": {**dict(ident.sources), "devices": found.device_source,
                        "hccn_tool": found.hccn_tool,
                        "run_id": settings.sources.get("run_id", "default")},
        }
        if json_out:
            emit(doc)
            return
        out(f"node      {ident.name} of {ident.node_count}  "
              f"[{ident.sources['role']}, {ident.sources['task_index']}]")
        out(f"pod IP    {ident.pod_ip}  [{ident.sources['pod_ip']}]")
        out(f"host IP   {ident.host_ip}  [{ident.sources['host_ip']}]")
        out(f"instance  {ident.incarnation}  [{ident.sources['incarnation']}]")
        out(f"run id    {settings.run_id or '-'}  [{settings.sources.get('run_id')}]")
        out(f"devices   {len(found.devices)}  [{found.device_source}; IPs from "
              f"{found.hccn_tool}]")
        for d in found.devices:
            sdid = f"  SDID {pod.sdids.get(d.device_id)}" if pod else ""
            out(f"  {d.device_id:>3}  {d.ip:<40} {d.netmask:<16} [{d.ip_source}]{sdid}")
        out(f"super pod {pod.super_pod_id if pod else '-'}  [{found.super_pod_note}]")
        out(f"table     from {source.source}  [{source.why}]; version "
              f"{settings.table_version} [{settings.sources.get('table_version')}]")


def _ranktable_step(rendezvous: str) -> Any:
    """Steps 1-5 for the chosen rendezvous; the API's client is imported only for `kube`
    (tests/pod_imports.json)."""
    if rendezvous == "kube":
        from ascend_node.chain.kube_table import ranktable as through_api

        return through_api
    from ascend_node.chain.table import ranktable as on_volume

    return on_volume


def _failures_told_to_peers(
    asked: "Settings", command: str,
) -> contextlib.AbstractContextManager[None]:
    """A failure found before discovery (an output path, a `boot` option, the key file) is
    published so the peers end with 5 naming it: on the volume (chain.table) or through the
    API (chain.kube_failures, imported only for `kube`)."""
    if asked.rendezvous == "kube":
        from ascend_node.chain.kube_failures import failures_told_to_peers as through_api

        return through_api(asked, os.environ, STARTED)
    from ascend_node.chain.table import failures_told_to_peers

    return failures_told_to_peers(asked, os.environ, STARTED, command)


@app.command(rich_help_panel=IN_THE_POD)
def ranktable(
    shared_dir: SharedDir = None, run_id: RunId = None, timeout: Timeout = None,
    master_file: MasterFile = None, world_size_file: WorldSizeFile = None,
    state_dir: StateDir = None, devices: Devices = None, hccn_tool: HccnTool = None,
    file_owner: FileOwner = None, allow_uneven_devices: AllowUneven = False,
    table_version: TableVersion = None, table_source: TableSource = None,
    hccl_json: HcclJson = None, preflight: Preflight = None,
    rendezvous_key_file: RendezvousKeyFile = None, rendezvous: RendezvousOpt = None,
    json_out: Json = False, verbose: Verbose = False, debug: Debug = False,
) -> None:
    """Steps 1-5: meet the peers and write the rank table; exit 0 when this node holds it."""
    logs.setup(verbose, debug_on(debug))
    box: dict[str, Any] = {}
    with exit_codes(debug_on(debug), _status_writer(box, "ranktable")):
        signal.signal(signal.SIGTERM, on_sigterm)
        from ascend_node.handoff.outputs import StatusDoc, write_status

        asked = settings_from(verbose, **option_flags(locals()))
        with _failures_told_to_peers(asked, "ranktable"):
            settings = _placed(asked, verbose)
            box["settings"] = settings
            run_ranktable = _ranktable_step(settings.rendezvous)
            from ascend_node.preflight.policy import effective_policy

            policy = effective_policy(settings.preflight, "ranktable")
        result = run_ranktable(settings, os.environ, STARTED, preflight=policy)
        write_status(settings.state_dir, StatusDoc(
            state="done", phase="ranktable", command="ranktable", exit_code=0,
            run_id=result.run_id, attempt_id=result.attempt_id,
            node=result.discovery.identity.name, message="rank table ready"))
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        if json_out:
            emit({"run_id": result.run_id, "attempt_id": result.attempt_id,
                   "node": result.discovery.identity.name,
                   "rank_table_file": result.env["RANK_TABLE_FILE"],
                   "shared_table": str(result.shared_table), "env": result.env,
                   "seconds": round(result.seconds, 3)})
        else:
            out(result.env["RANK_TABLE_FILE"])


@app.command(cls=ServerCommand, rich_help_panel=IN_THE_POD,
             options_metavar="[OPTIONS] [-- CMD [ARGS]...]")
def boot(
    ctx: typer.Context,
    shared_dir: SharedDir = None, run_id: RunId = None, timeout: Timeout = None,
    master_file: MasterFile = None, world_size_file: WorldSizeFile = None,
    state_dir: StateDir = None, devices: Devices = None, hccn_tool: HccnTool = None,
    file_owner: FileOwner = None, allow_uneven_devices: AllowUneven = False,
    master_port: MasterPort = None, table_version: TableVersion = None,
    table_source: TableSource = None, hccl_json: HcclJson = None, preflight: Preflight = None,
    rendezvous_key_file: RendezvousKeyFile = None, rendezvous: RendezvousOpt = None,
    launcher: Annotated[Optional[str], typer.Option(
        "--launcher", metavar="mindie|msrun|ranktable-env|torch",
        help="mindie | msrun | ranktable-env | torch (env ASCEND_NODE_LAUNCHER; "
        "mindie)", show_default=False)] = None,
    https: Annotated[Optional[bool], typer.Option(
        "--https/--no-https", help="MindIE httpsEnabled (env ASCEND_NODE_HTTPS; keep the file's)",
        show_default=False)] = None,
    model_name: Annotated[Optional[str], typer.Option(
        "--model-name", help="MindIE modelName (env MODEL_NAME)", show_default=False)] = None,
    model_weight_path: Annotated[Optional[str], typer.Option(
        "--model-weight-path", help="MindIE modelWeightPath (same as --model-dir)",
        show_default=False)] = None,
    model_dir: Annotated[Optional[str], typer.Option(
        "--model-dir", help="The model's directory, MindIE's modelWeightPath (env "
        "ASCEND_NODE_MODEL_DIR, else MODEL_PATH); the shared dir stays --shared-dir",
        show_default=False)] = None,
    launcher_args: Annotated[Optional[str], typer.Option(
        "--launcher-args", help="msrun's own options, e.g. '--log_dir=/x --bind_core=True' "
        "(env ASCEND_NODE_LAUNCHER_ARGS)", show_default=False)] = None,
    verbose: Verbose = False, debug: Debug = False,
) -> None:
    """Steps 1-8: rank table, atb_llm wheel, set_env, MindIE config, then exec the server.

    Give the command after `--` (default: the MindIE daemon).
    """
    logs.setup(verbose, debug_on(debug))
    box: dict[str, Any] = {}
    with exit_codes(debug_on(debug), _status_writer(box, "boot")):
        signal.signal(signal.SIGTERM, on_sigterm)
        from ascend_node.chain.boot import boot as run_boot
        from ascend_node.chain.boot import boot_options_from_env

        asked = settings_from(verbose, **option_flags(locals()))
        with _failures_told_to_peers(asked, "boot"):
            settings = _placed(asked, verbose)
            box["settings"] = settings
            run_ranktable = _ranktable_step(settings.rendezvous)
            opts = boot_options_from_env(os.environ, launcher, list(ctx.args), https,
                                         model_name, model_weight_path, model_dir,
                                         launcher_args)
            from ascend_node.preflight.policy import effective_policy

            policy = effective_policy(settings.preflight, "boot", opts.launcher)
        result = run_ranktable(settings, os.environ, STARTED, command="boot", preflight=policy,
                               launcher=opts.launcher)
        run_boot(settings, os.environ, result, opts)


@app.command("env", rich_help_panel=IN_THE_POD)
def env_cmd(
    fmt: Annotated[str, typer.Option("--format", metavar="sh|json", help="sh or json")] = "sh",
    state_dir: StateDir = None, debug: Debug = False,
) -> None:
    """The environment of the last completed bootstrap in this container."""
    with exit_codes(debug_on(debug)):
        from ascend_node.errors import ConfigError, UsageError
        from ascend_node.handoff.outputs import read_env, render_env_script

        if fmt not in ("sh", "json"):
            raise UsageError(f"--format {fmt!r} is not one of sh, json", "use --format sh|json")
        from ascend_node.statedir import find_state_dir

        settings_from(False, state_dir=state_dir)  # refuses a bad ASCEND_NODE_STATE_DIR
        where = find_state_dir(state_dir, os.environ)  # where a non-root agent wrote
        env = read_env(where)
        if env is None:
            raise ConfigError(
                f"no completed bootstrap in {where} (no env.json)",
                "run `ascend-node ranktable` or `ascend-node boot` first, or pass --state-dir")
        if fmt == "json":
            emit({"env": env})
        else:
            out(render_env_script(env), end="")


def _given(ctx: typer.Context, name: str) -> bool:
    """Whether the option was typed (not its default): an option that qualifies another
    means nothing alone and is refused, as `--live` without `--serving` is."""
    return getattr(ctx.get_parameter_source(name), "name", "") == "COMMANDLINE"


def _status_through_api(job: str, rendezvous: Optional[str], run_id: Optional[str],
                        kubeconfig: Optional[str], context: Optional[str],
                        namespace: Optional[str], json_out: bool) -> None:
    from ascend_node.errors import UsageError
    from ascend_node.kube.client import Client
    from ascend_node.kube.config import from_kubeconfig
    from ascend_node.rendezvous.kube_status import exit_code, job_states

    if rendezvous != "kube":
        raise UsageError("--job reads a job's rendezvous through the API",
                         "use it with --rendezvous kube")
    client = Client(from_kubeconfig(kubeconfig, os.environ, context, namespace))
    states, note = job_states(client, job, run_id)
    code = exit_code(states)
    if json_out:
        emit({"job": job, "namespace": client.namespace, "exit_code": code, "uid": note,
              "rendezvous": [{"scope": s.scope, "state": s.state, "line": s.line}
                             for s in states]})
    else:
        for s in states:
            out(s.line)
    raise typer.Exit(code)


@app.command(rich_help_panel=IN_THE_POD)
def status(
    ctx: typer.Context,
    wait: Annotated[bool, typer.Option("--wait", help="Block until done or failed")] = False,
    wait_timeout: Annotated[float, typer.Option(
        "--wait-timeout", help="Seconds --wait may block", metavar="SECONDS",
        parser=seconds("--wait-timeout", example="900"))] = 900.0,
    serving: Annotated[bool, typer.Option(
        "--serving", help="After boot exec'd MindIE, ask MindIE's /v2/health/ready: 0 "
        "serving, 3 loading or busy, 1 abnormal or unreachable (before exec: as status)")] = False,
    live: Annotated[bool, typer.Option(
        "--live", help="With --serving: ask /v2/health/live instead (200 also when busy)")
    ] = False,
    serving_timeout: Annotated[float, typer.Option(
        "--serving-timeout", help="Seconds to wait for MindIE's answer", metavar="SECONDS",
        parser=seconds("--serving-timeout", example="3"))] = 3.0,
    state_dir: StateDir = None, json_out: Json = False,
    rendezvous: RendezvousOpt = None,
    job: Annotated[Optional[str], typer.Option(
        "--job", help="With --rendezvous kube: the vcjob whose rendezvous to show, read "
        "from the API", show_default=False)] = None,
    run_id: RunId = None,
    kubeconfig: Annotated[Optional[str], typer.Option(
        "--kubeconfig", help="With --rendezvous kube: the operator's kubeconfig (default: "
        "KUBECONFIG or ~/.kube/config)", show_default=False)] = None,
    context: Annotated[Optional[str], typer.Option(
        "--context", help="Kubeconfig context", show_default=False)] = None,
    namespace: Annotated[Optional[str], typer.Option(
        "--namespace", help="The job's namespace (default: the context's)",
        show_default=False)] = None,
    debug: Debug = False,
) -> None:
    """This container's bootstrap state: exit 0 done, 1 failed, 3 in progress (for probes).

    With --rendezvous kube --job J: that job's rendezvous as the API holds it, from the
    operator's kubeconfig outside the cluster (the same exit codes)."""
    with exit_codes(debug_on(debug)):
        if job is not None:
            _status_through_api(job, rendezvous, run_id, kubeconfig, context, namespace,
                                json_out)
        from ascend_node.errors import UsageError
        from ascend_node.statedir import find_state_dir
        from ascend_node.status import current_status, serving_status, wait_for_status

        if live and not serving:
            raise UsageError("--live asks MindIE's liveness endpoint", "use it with --serving")
        if not wait and _given(ctx, "wait_timeout"):
            raise UsageError("--wait-timeout bounds --wait", "use it with --wait")
        if not serving and _given(ctx, "serving_timeout"):
            raise UsageError("--serving-timeout bounds --serving's question to MindIE",
                             "use it with --serving")
        if serving and wait:
            raise UsageError("--wait and --serving are two probes", "use one of them")
        if not 0 < serving_timeout <= 300:
            raise UsageError(f"--serving-timeout {serving_timeout:g} is out of range",
                             "use seconds from 0.1 to 300")
        where = find_state_dir(state_dir, os.environ)  # not the settings model: probes
        if serving:
            view = serving_status(where, os.environ, "live" if live else "ready",
                                  serving_timeout)
        else:
            view = wait_for_status(where, wait_timeout) if wait else current_status(where)
        if json_out:
            emit(view.to_json())
        else:
            out(view.text())
        raise typer.Exit(view.exit_code)
