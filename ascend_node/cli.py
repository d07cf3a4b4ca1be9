"""The command line: thin commands over `bootstrap`, one place that maps errors to exits.

Results go to stdout (`--json` documents carry `schema_version`); logs and errors go to
stderr. An error is one line naming the value at fault plus a hint, and the contract's
exit code; a traceback only with `--debug` or `ASCEND_NODE_DEBUG=1`.

No `from __future__ import annotations` here: the typer release that still supports
Python 3.9 reads option metadata from evaluated `Annotated` hints only.
"""


import json
import os
import signal
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any, Callable, Optional

import typer

from ascend_node import __version__, logs
from ascend_node.errors import AscendNodeError, Terminated

STARTED = time.monotonic()
JSON_SCHEMA_VERSION = 1

app = typer.Typer(
    name="ascend-node",
    help="Bootstrap agent for multi-node Huawei Ascend NPU jobs: discovers NPUs, meets peers "
    "on a shared volume to build the HCCL rank table, and hands over to MindIE or a "
    "training launcher.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,  # plain help: rich costs ~100 ms of start-up (issue 13)
    context_settings={"help_option_names": ["-h", "--help"]},
)


def _print_version(value: bool) -> None:
    if value:
        print(__version__)
        raise typer.Exit()


@app.callback()
def _root(
    version_flag: Annotated[bool, typer.Option(
        "--version", help="Print the agent's version and exit", is_eager=True,
        callback=_print_version)] = False,
) -> None:
    # The flag people type first; the `version` command stays for scripts that use it.
    pass


# ----------------------------------------------------------------- shared option types

SharedDir = Annotated[Optional[Path], typer.Option(
    "--shared-dir", help="Shared volume of the run (env ASCEND_NODE_SHARED_DIR, else $MODEL_PATH)",
    show_default=False)]
RunId = Annotated[Optional[str], typer.Option(
    "--run-id", help="Run id (env ASCEND_NODE_RUN_ID, else KUBEFLOW_RUN_ID, KFJ_RUN_ID)",
    show_default=False)]
Timeout = Annotated[Optional[float], typer.Option(
    "--timeout", help="Seconds to wait for peers, from start (env ASCEND_NODE_TIMEOUT; 900)",
    show_default=False)]
MasterFile = Annotated[Optional[Path], typer.Option(
    "--master-file", help="Where to write the master's IP for launchers and scripts "
    "(env ASCEND_NODE_MASTER_FILE; /master)", show_default=False)]
WorldSizeFile = Annotated[Optional[Path], typer.Option(
    "--world-size-file", help="Where to write the total NPU count "
    "(env ASCEND_NODE_WORLD_SIZE_FILE; /world_size)",
    show_default=False)]
StateDir = Annotated[Optional[Path], typer.Option(
    "--state-dir", help="This container's local directory: table copy, env script, status "
    "(env ASCEND_NODE_STATE_DIR; /run/ascend-node)", show_default=False)]
Devices = Annotated[Optional[str], typer.Option(
    "--devices", help="Physical NPU ids, e.g. 0-7 or 0,1,2,3 (env ASCEND_NODE_DEVICES)",
    show_default=False)]
HccnTool = Annotated[Optional[str], typer.Option(
    "--hccn-tool", help="hccn_tool path (env ASCEND_NODE_HCCN_TOOL)", show_default=False)]
FileOwner = Annotated[Optional[str], typer.Option(
    "--file-owner", help="UID[:GID] owning the local table and config "
    "(env ASCEND_NODE_FILE_OWNER)", show_default=False)]
AllowUneven = Annotated[bool, typer.Option(
    "--allow-uneven-devices", help="Allow different NPU counts per node (training) "
    "(env ASCEND_NODE_ALLOW_UNEVEN_DEVICES)")]
MasterPort = Annotated[Optional[int], typer.Option(
    "--master-port", help="Port for launchers (env ASCEND_NODE_MASTER_PORT, MASTER_PORT; "
    "msrun 8118, torch 29500)",
    show_default=False)]
TableVersion = Annotated[Optional[str], typer.Option(
    "--table-version", help="auto | 1.0 | 1.2: rank-table format; auto = 1.2 when every node "
    "reports an A3 super pod (env ASCEND_NODE_TABLE_VERSION; auto)", show_default=False)]
TableSource = Annotated[Optional[str], typer.Option(
    "--table-source", help="auto | volume | mindcluster: meet peers on the shared volume or "
    "take MindCluster's hccl.json; auto = the file when it exists (env "
    "ASCEND_NODE_TABLE_SOURCE; auto)", show_default=False)]
HcclJson = Annotated[Optional[Path], typer.Option(
    "--hccl-json", help="MindCluster's rank table (env ASCEND_NODE_HCCL_JSON; "
    "/user/serverid/devindex/config/hccl.json)", show_default=False)]
Preflight = Annotated[Optional[str], typer.Option(
    "--preflight", help="strict | warn | off: device health at the rendezvous, pings before "
    "exec (env ASCEND_NODE_PREFLIGHT; strict, warn with a training launcher)",
    show_default=False)]
RendezvousKeyFile = Annotated[Optional[Path], typer.Option(
    "--rendezvous-key-file", help="File holding the job's rendezvous key, e.g. a mounted "
    "Secret; documents on the shared volume are then signed and checked (env "
    "ASCEND_NODE_RENDEZVOUS_KEY_FILE; or the key itself in ASCEND_NODE_RENDEZVOUS_KEY)",
    show_default=False)]
Json = Annotated[bool, typer.Option("--json", help="Print a JSON document on stdout")]
Verbose = Annotated[bool, typer.Option("--verbose", "-v",
                                       help="Say where every setting came from")]
Debug = Annotated[bool, typer.Option("--debug", help="Show tracebacks (env ASCEND_NODE_DEBUG=1)")]


def _debug(flag: bool) -> bool:
    return flag or os.environ.get("ASCEND_NODE_DEBUG", "") in ("1", "true", "yes")


def _report(exc: BaseException, debug: bool) -> int:
    if isinstance(exc, AscendNodeError):
        code = exc.exit_code
        text = f"ascend-node: error: {exc.cause}"
        if exc.hint:
            text += f"\n  hint: {exc.hint}"
    else:
        code = 1
        text = (f"ascend-node: internal error: {exc.__class__.__name__}: {exc}\n"
                "  hint: rerun with --debug and report the traceback")
    if debug:
        import traceback

        traceback.print_exception(type(exc), exc, exc.__traceback__, file=sys.stderr)
    sys.stderr.flush()
    print(text, file=sys.stderr, flush=True)
    return code


@contextmanager
def _errors(debug: bool, on_failure: Optional[Callable[[BaseException, int], None]] = None
            ) -> Iterator[None]:
    try:
        yield
        _flush_stdout()
    except typer.Exit:
        _flush_stdout()
        raise
    except BrokenPipeError:
        _closed_stdout()
    except Exception as exc:  # every failure ends as one line + exit code, never a traceback
        code = _report(exc, debug)
        if on_failure is not None:
            on_failure(exc, code)
        raise typer.Exit(code) from None


CLOSED_PIPE_EXIT = 128 + signal.SIGPIPE
"""141: what a shell reports for `cat` when the reader of its output went away."""


def _closed_stdout() -> None:
    """The reader of stdout went away (`ascend-node simulate --json | head -2`): end
    quietly, as `cat` does, with no message and no traceback. Later writes (and the
    flush at exit) go to /dev/null instead of failing again."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError):
        pass
    raise typer.Exit(CLOSED_PIPE_EXIT)


def _flush_stdout() -> None:
    """Flush while a closed pipe can still end the command quietly (at exit, Python
    would report it as an exception it ignored)."""
    try:
        sys.stdout.flush()
    except BrokenPipeError:
        _closed_stdout()


def _on_sigterm(signum: int, frame: Any) -> None:
    raise Terminated(f"terminated by signal {signum} while waiting",
                     "the pod is being stopped; nothing was left half-written")


def _settings(verbose: bool, **flags: Any) -> Any:
    from ascend_node.settings import describe_sources, resolve_settings

    settings = resolve_settings(flags, os.environ)
    if verbose:
        for line in describe_sources(settings):
            print(f"ascend-node: setting {line}", file=sys.stderr)
    return settings


def _option_flags(values: dict[str, Any]) -> dict[str, Any]:
    """The contract's options among a command's parameters (None = not given)."""
    from ascend_node.settings import OPTIONS

    return {opt.name: values[opt.name] for opt in OPTIONS if opt.name in values}


def _emit(doc: dict[str, Any]) -> None:
    print(json.dumps({"schema_version": JSON_SCHEMA_VERSION, **doc}, indent=2))


# ----------------------------------------------------------------------- commands


@app.command()
def discover(
    devices: Devices = None, hccn_tool: HccnTool = None, table_version: TableVersion = None,
    table_source: TableSource = None, hccl_json: HcclJson = None, json_out: Json = False,
    verbose: Verbose = False, debug: Debug = False,
) -> None:
    """Identity and devices as this container sees them. Writes nothing."""
    logs.setup(verbose, _debug(debug))
    with _errors(_debug(debug)):
        from ascend_node.bootstrap import discover as run_discover
        from ascend_node.bootstrap import table_source as choose_source

        settings = _settings(verbose, **_option_flags(locals()))
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
            _emit(doc)
            return
        print(f"node      {ident.name} of {ident.node_count}  "
              f"[{ident.sources['role']}, {ident.sources['task_index']}]")
        print(f"pod IP    {ident.pod_ip}  [{ident.sources['pod_ip']}]")
        print(f"host IP   {ident.host_ip}  [{ident.sources['host_ip']}]")
        print(f"instance  {ident.incarnation}  [{ident.sources['incarnation']}]")
        print(f"run id    {settings.run_id or '-'}  [{settings.sources.get('run_id')}]")
        print(f"devices   {len(found.devices)}  [{found.device_source}; IPs from "
              f"{found.hccn_tool}]")
        for d in found.devices:
            sdid = f"  SDID {pod.sdids.get(d.device_id)}" if pod else ""
            print(f"  {d.device_id:>3}  {d.ip:<40} {d.netmask:<16} [{d.ip_source}]{sdid}")
        print(f"super pod {pod.super_pod_id if pod else '-'}  [{found.super_pod_note}]")
        print(f"table     from {source.source}  [{source.why}]; version "
              f"{settings.table_version} [{settings.sources.get('table_version')}]")


def _status_writer(settings_box: dict[str, Any], command: str
                   ) -> Callable[[BaseException, int], None]:
    def write(exc: BaseException, code: int) -> None:
        from ascend_node.launch import write_termination_log
        from ascend_node.outputs import StatusDoc, write_status

        cause = exc.cause if isinstance(exc, AscendNodeError) else str(exc)
        write_termination_log(f"ascend-node {command}: exit {code}: {cause}")
        settings = settings_box.get("settings")
        if settings is not None:
            write_status(settings.state_dir, StatusDoc(
                state="failed", phase=command, command=command, exit_code=code,
                message=cause, run_id=settings.run_id))
    return write


@app.command()
def ranktable(
    shared_dir: SharedDir = None, run_id: RunId = None, timeout: Timeout = None,
    master_file: MasterFile = None, world_size_file: WorldSizeFile = None,
    state_dir: StateDir = None, devices: Devices = None, hccn_tool: HccnTool = None,
    file_owner: FileOwner = None, allow_uneven_devices: AllowUneven = False,
    table_version: TableVersion = None, table_source: TableSource = None,
    hccl_json: HcclJson = None, preflight: Preflight = None,
    rendezvous_key_file: RendezvousKeyFile = None,
    json_out: Json = False, verbose: Verbose = False, debug: Debug = False,
) -> None:
    """Steps 1-5: meet the peers and write the rank table; exit 0 when this node holds it."""
    logs.setup(verbose, _debug(debug))
    box: dict[str, Any] = {}
    with _errors(_debug(debug), _status_writer(box, "ranktable")):
        signal.signal(signal.SIGTERM, _on_sigterm)
        from ascend_node.bootstrap import ranktable as run_ranktable
        from ascend_node.outputs import StatusDoc, write_status

        settings = _settings(verbose, **_option_flags(locals()))
        box["settings"] = settings
        from ascend_node.preflight.policy import effective_policy

        result = run_ranktable(settings, os.environ, STARTED,
                               preflight=effective_policy(settings.preflight, "ranktable"))
        write_status(settings.state_dir, StatusDoc(
            state="done", phase="ranktable", command="ranktable", exit_code=0,
            run_id=result.run_id, attempt_id=result.attempt_id,
            node=result.discovery.identity.name, message="rank table ready"))
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        if json_out:
            _emit({"run_id": result.run_id, "attempt_id": result.attempt_id,
                   "node": result.discovery.identity.name,
                   "rank_table_file": result.env["RANK_TABLE_FILE"],
                   "shared_table": str(result.shared_table), "env": result.env,
                   "seconds": round(result.seconds, 3)})
        else:
            print(result.env["RANK_TABLE_FILE"])


@app.command()
def validate(
    file: Annotated[Path, typer.Argument(help="Rank table JSON file", metavar="FILE",
                                         show_default=False)],
    target: Annotated[str, typer.Option(
        "--for", help="Rules to apply: mindie (HCCL + MindIE) or hccl")] = "mindie",
    owner_uid: Annotated[Optional[int], typer.Option(
        "--owner-uid", help="Also require this file owner (MindIE requires the server's uid)",
        show_default=False)] = None,
    json_out: Json = False, debug: Debug = False,
) -> None:
    """Lint a rank table against HCCL and MindIE rules; list every problem (exit 1 if any)."""
    with _errors(_debug(debug)):
        from ascend_node.errors import UsageError
        from ascend_node.ranktable import validate_file

        if target not in ("mindie", "hccl"):
            raise UsageError(f"--for {target!r} is not one of mindie, hccl",
                             "use --for mindie (default) or --for hccl")
        problems = validate_file(file, target, check_owner_uid=owner_uid)  # type: ignore[arg-type]
        if json_out:
            _emit({"file": str(file), "target": target, "valid": not problems,
                   "problems": [{"path": p.path, "message": p.message} for p in problems]})
        elif problems:
            for p in problems:
                print(f"{file}: {p.path}: {p.message}")
            print(f"{len(problems)} problem(s) for {target}", file=sys.stderr)
        else:
            print(f"{file}: valid for {target}")
        if problems:
            raise typer.Exit(1)


@app.command()
def simulate(
    nodes: Annotated[int, typer.Option("--nodes", min=1, max=1024,
                                       help="Number of simulated pods")] = 2,
    devices: Annotated[Optional[int], typer.Option(
        "--devices", min=1, max=16, help="NPUs per simulated pod (8; 16 with --a3)",
        show_default=False)] = None,
    a3: Annotated[bool, typer.Option(
        "--a3", help="Atlas A3 SuperPoD nodes: npu-smi answers spod-info, the table is v1.2"
    )] = False,
    super_pod_size: Annotated[int, typer.Option(
        "--super-pod-size", min=0, help="With --a3: nodes per super pod (0: all in one)")] = 0,
    shared_dir: Annotated[Optional[Path], typer.Option(
        "--shared-dir", help="Shared directory to meet on (default: one in the workspace)",
        show_default=False)] = None,
    masters: Annotated[int, typer.Option("--masters", min=0,
                                         help="How many pods are masters")] = 1,
    timeout: Annotated[float, typer.Option(
        "--timeout", help="Seconds each node waits for its peers")] = 60.0,
    tool_delay: Annotated[float, typer.Option(
        "--tool-delay", help="Seconds each fake hccn_tool call takes")] = 0.0,
    run_id: Annotated[str, typer.Option("--run-id", help="Run id of the simulated job")
                      ] = "sim",
    boot_chain: Annotated[bool, typer.Option(
        "--boot", help="Run the whole boot chain (pre-flight pings, set_env, MindIE config, "
        "exec) into a fake MindIE daemon")] = False,
    absent: Annotated[Optional[str], typer.Option(
        "--absent", help="Nodes that never start, e.g. 2 or 1,3 or 1-3: the others end with "
        "exit 4 naming them", show_default=False)] = None,
    bad_device: Annotated[Optional[list[str]], typer.Option(
        "--bad-device", help="NODE:DEV:KIND, repeatable: device DEV of node NODE answers "
        "like a broken one; KIND: no-ip, dup-ip, link-down, tls-on, net-fault, tool-fails, "
        "unreachable (with --boot)", show_default=False)] = None,
    keep: Annotated[Optional[bool], typer.Option(
        "--keep/--no-keep", help="Keep the workspace (node logs, state dirs) / remove it; "
        "default: kept only when a node failed", show_default=False)] = None,
    table_out: Annotated[Optional[Path], typer.Option(
        "--table-out", help="Also write the rank table to this file", show_default=False)
    ] = None,
    timeline: Annotated[bool, typer.Option(
        "--report", help="Then draw every node's start on one time axis (as "
        "`ascend-node report` does)")] = False,
    json_out: Json = False, debug: Debug = False,
) -> None:
    """Run the real agent as N local processes with fake NPUs; one line per server.

    Exit: 0 when every node holds the same table, else the worst node's exit.
    """
    logs.setup(False, _debug(debug))
    with _errors(_debug(debug)):
        from ascend_node.sim.cluster import write_table
        from ascend_node.sim.options import build_spec
        from ascend_node.sim.session import simulate as run_simulation
        from ascend_node.sim.summary import format_report, report_json

        spec = build_spec(nodes=nodes, devices=devices, a3=a3, super_pod_size=super_pod_size,
                          masters=masters, timeout=timeout, tool_delay=tool_delay,
                          run_id=run_id, boot=boot_chain, absent=absent,
                          bad_devices=bad_device or [])
        drawn: tuple[Optional[dict[str, Any]], str] = (None, "")

        def draw(done: Any) -> None:  # before the workspace (and its volume) is removed
            nonlocal drawn
            from ascend_node.report.cli import sim_timeline

            drawn = sim_timeline(done.shared_dir, spec.run_id)

        report = run_simulation(spec, shared_dir, keep,
                                before_cleanup=draw if timeline else None)
        if table_out is not None:
            write_table(report, table_out)
        if json_out:
            doc = report_json(report)
            if timeline:
                doc["timeline"] = drawn[0]
            _emit(doc)
        else:
            print(format_report(report, keep))
            if timeline:
                print(drawn[1])
        if not report.ok:
            raise typer.Exit(report.worst_exit)



@app.command()
def report(
    shared_dir: SharedDir = None, run_id: RunId = None,
    attempt: Annotated[Optional[str], typer.Option(
        "--attempt", help="Attempt to draw (default: the current one)", show_default=False)
    ] = None,
    html: Annotated[Optional[Path], typer.Option(
        "--html", help="Also write the timeline as a self-contained HTML page to FILE",
        show_default=False)] = None,
    width: Annotated[int, typer.Option("--width", min=20, max=400,
                                       help="Time cells of the text timeline")] = 60,
    json_out: Json = False, debug: Debug = False,
) -> None:
    """Every node's start on one time axis: who arrived last and why (read-only)."""
    with _errors(_debug(debug)):
        from ascend_node.bootstrap import require_rendezvous_settings
        from ascend_node.report.cli import run_report

        settings = _settings(False, shared_dir=shared_dir, run_id=run_id)
        shared, rid = require_rendezvous_settings(settings)
        doc, text = run_report(shared, rid, attempt, html, width)
        if json_out:
            _emit(doc)
        else:
            print(text)


@app.command(context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
def boot(
    ctx: typer.Context,
    shared_dir: SharedDir = None, run_id: RunId = None, timeout: Timeout = None,
    master_file: MasterFile = None, world_size_file: WorldSizeFile = None,
    state_dir: StateDir = None, devices: Devices = None, hccn_tool: HccnTool = None,
    file_owner: FileOwner = None, allow_uneven_devices: AllowUneven = False,
    master_port: MasterPort = None, table_version: TableVersion = None,
    table_source: TableSource = None, hccl_json: HcclJson = None, preflight: Preflight = None,
    rendezvous_key_file: RendezvousKeyFile = None,
    launcher: Annotated[Optional[str], typer.Option(
        "--launcher", help="mindie | msrun | ranktable-env | torch (env ASCEND_NODE_LAUNCHER; "
        "mindie)", show_default=False)] = None,
    https: Annotated[Optional[bool], typer.Option(
        "--https/--no-https", help="MindIE httpsEnabled (env ASCEND_NODE_HTTPS; keep the file's)",
        show_default=False)] = None,
    model_name: Annotated[Optional[str], typer.Option(
        "--model-name", help="MindIE modelName (env MODEL_NAME)", show_default=False)] = None,
    model_weight_path: Annotated[Optional[str], typer.Option(
        "--model-weight-path", help="MindIE modelWeightPath (env MODEL_PATH)",
        show_default=False)] = None,
    verbose: Verbose = False, debug: Debug = False,
) -> None:
    """Steps 1-8: rank table, atb_llm wheel, set_env, MindIE config, then exec the server.

    Give the command after `--` (default: the MindIE daemon).
    """
    logs.setup(verbose, _debug(debug))
    box: dict[str, Any] = {}
    with _errors(_debug(debug), _status_writer(box, "boot")):
        signal.signal(signal.SIGTERM, _on_sigterm)
        from ascend_node.boot import boot as run_boot
        from ascend_node.boot import boot_options_from_env
        from ascend_node.bootstrap import ranktable as run_ranktable

        settings = _settings(verbose, **_option_flags(locals()))
        box["settings"] = settings
        opts = boot_options_from_env(os.environ, launcher, list(ctx.args), https,
                                     model_name, model_weight_path)
        from ascend_node.preflight.policy import effective_policy

        policy = effective_policy(settings.preflight, "boot", opts.launcher)
        result = run_ranktable(settings, os.environ, STARTED, command="boot", preflight=policy)
        run_boot(settings, os.environ, result, opts)


@app.command("env")
def env_cmd(
    fmt: Annotated[str, typer.Option("--format", help="sh or json")] = "sh",
    state_dir: StateDir = None, debug: Debug = False,
) -> None:
    """The environment of the last completed bootstrap in this container."""
    with _errors(_debug(debug)):
        from ascend_node.errors import ConfigError, UsageError
        from ascend_node.outputs import read_env, render_env_script

        if fmt not in ("sh", "json"):
            raise UsageError(f"--format {fmt!r} is not one of sh, json", "use --format sh|json")
        settings = _settings(False, state_dir=state_dir)
        env = read_env(settings.state_dir)
        if env is None:
            raise ConfigError(
                f"no completed bootstrap in {settings.state_dir} (no env.json)",
                "run `ascend-node ranktable` or `ascend-node boot` first, or pass --state-dir")
        if fmt == "json":
            _emit({"env": env})
        else:
            sys.stdout.write(render_env_script(env))


@app.command()
def status(
    wait: Annotated[bool, typer.Option("--wait", help="Block until done or failed")] = False,
    wait_timeout: Annotated[float, typer.Option(
        "--wait-timeout", help="Seconds --wait may block")] = 900.0,
    state_dir: StateDir = None, json_out: Json = False, debug: Debug = False,
) -> None:
    """This container's bootstrap state: exit 0 done, 1 failed, 3 in progress (for probes)."""
    with _errors(_debug(debug)):
        from ascend_node.statedir import resolve_state_dir
        from ascend_node.status import current_status, wait_for_status

        where = resolve_state_dir(state_dir, os.environ)  # not the settings model: probes
        view = wait_for_status(where, wait_timeout) if wait else current_status(where)
        if json_out:
            _emit(view.to_json())
        else:
            print(view.text())
        raise typer.Exit(view.exit_code)


@app.command()
def clean(
    shared_dir: SharedDir = None, run_id: RunId = None,
    yes: Annotated[bool, typer.Option(
        "--yes", "-y", help="Remove without asking (needed when stdin is not a terminal)")
    ] = False,
    debug: Debug = False,
) -> None:
    """Remove this run's rendezvous state (and shared table) from the shared volume.

    Asks on a terminal; without one it removes nothing unless given --yes (exit 2).
    """
    with _errors(_debug(debug)):
        from ascend_node.bootstrap import require_rendezvous_settings
        from ascend_node.errors import UsageError
        from ascend_node.rendezvous.cleanup import clean_run

        settings = _settings(False, shared_dir=shared_dir, run_id=run_id)
        shared, rid = require_rendezvous_settings(settings)
        if not yes:
            if not sys.stdin.isatty():
                raise UsageError(
                    f"clean would remove run {rid!r} state from {shared}, and there is no "
                    "terminal to ask: nothing removed",
                    "pass --yes to remove it without asking")
            if not typer.confirm(f"remove run {rid!r} state from {shared}?"):
                print("ascend-node: nothing removed", file=sys.stderr)
                raise typer.Exit(1)
        for line in clean_run(shared, rid):
            print(line)


@app.command()
def doctor(
    peers: Annotated[bool, typer.Option("--peers", help="Also compare with the run's peers "
                                        "through the shared volume, and ping their devices")
                     ] = False,
    peer_wait: Annotated[float, typer.Option(
        "--peer-wait", help="Seconds to wait for peers' facts")] = 10.0,
    shared_dir: SharedDir = None, run_id: RunId = None, state_dir: StateDir = None,
    devices: Devices = None, hccn_tool: HccnTool = None, table_version: TableVersion = None,
    table_source: TableSource = None, hccl_json: HcclJson = None,
    rendezvous_key_file: RendezvousKeyFile = None,
    json_out: Json = False, verbose: Verbose = False, debug: Debug = False,
) -> None:
    """Read-only health checks of this node and, with --peers, of the cluster.

    Exit 0 healthy, 3 degraded (warnings), 1 failed.
    """
    logs.setup(verbose, _debug(debug))
    with _errors(_debug(debug)):
        from ascend_node.doctor import run_doctor

        settings = _settings(verbose, **_option_flags(locals()))
        report = run_doctor(settings, os.environ, peers=peers, peer_wait=peer_wait)
        if json_out:
            _emit(report.to_json())
        else:
            print(report.format_text())
        raise typer.Exit(report.exit_code)


@app.command(context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
def manifest(
    ctx: typer.Context,
    kind: Annotated[str, typer.Option("--kind", help="mindie or training")] = "mindie",
    name: Annotated[str, typer.Option("--name", help="Volcano Job name")] = "mindie",
    nodes: Annotated[int, typer.Option("--nodes", help="Pods (one per server)")] = 2,
    image: Annotated[str, typer.Option("--image", help="Container image with ascend-node")
                     ] = "mindie:latest",
    pvc: Annotated[str, typer.Option("--pvc", help="Shared PVC (model directory)")] = "model",
    run_id: Annotated[Optional[str], typer.Option(
        "--run-id", help="Run id (default: the job name)", show_default=False)] = None,
    npus_per_node: Annotated[Optional[int], typer.Option(
        "--npus-per-node", help="NPUs per pod (8; 16 with --a3)", show_default=False)] = None,
    a3: Annotated[bool, typer.Option(
        "--a3", help="Atlas 900 A3 SuperPoD: 16 NPUs per pod, super-pod node selector")
    ] = False,
    model_path: Annotated[str, typer.Option("--model-path", help="Mount path of the PVC")
                          ] = "/mnt/model",
    namespace: Annotated[Optional[str], typer.Option(
        "--namespace", help="Kubernetes namespace of the Job (omitted: the current one of kubectl)",
        show_default=False)] = None,
    rdma_resource: Annotated[Optional[str], typer.Option(
        "--rdma-resource", help="e.g. rdma/hca (adds IPC_LOCK)", show_default=False)] = None,
    queue: Annotated[str, typer.Option("--queue", help="Volcano queue of the Job")
                     ] = "default",
    timeout: Annotated[int, typer.Option("--timeout", help="Agent's peer timeout")] = 900,
    npu_resource: Annotated[str, typer.Option(
        "--npu-resource", help="Extended resource name of the NPUs")] = "huawei.com/Ascend910",
    no_driver_mounts: Annotated[bool, typer.Option(
        "--no-driver-mounts", help="Do not mount the host's /usr/local/Ascend/driver "
        "(the image brings its own driver tools)")] = False,
    rendezvous_key: Annotated[bool, typer.Option(
        "--rendezvous-key", help="Also render a Secret <name>-rendezvous-key holding a fresh "
        "random key, mounted in every pod: rendezvous documents are then signed")] = False,
    rendezvous_key_secret: Annotated[Optional[str], typer.Option(
        "--rendezvous-key-secret", help="Mount this existing Secret (item `key`) as the "
        "job's rendezvous key", show_default=False)] = None,
    json_out: Json = False, debug: Debug = False,
) -> None:
    """Render a Volcano Job for MindIE multi-node or training (command after `--`)."""
    with _errors(_debug(debug)):
        from ascend_node.errors import UsageError
        from ascend_node.manifest import (
            ManifestParams,
            render_job,
            render_key_secret,
            render_yaml,
            to_yaml,
        )

        if kind not in ("mindie", "training"):
            raise UsageError(f"--kind {kind!r} is not one of mindie, training",
                             "use --kind mindie or --kind training")
        if rendezvous_key and rendezvous_key_secret:
            raise UsageError("--rendezvous-key and --rendezvous-key-secret both given",
                             "render a new Secret, or name an existing one, not both")
        key_secret = (f"{name}-rendezvous-key" if rendezvous_key
                      else rendezvous_key_secret)
        params = ManifestParams(
            kind=kind,  # type: ignore[arg-type]
            name=name, nodes=nodes, image=image, pvc=pvc, run_id=run_id or name,
            npus_per_node=npus_per_node or (16 if a3 else 8), model_path=model_path,
            namespace=namespace,
            rdma_resource=rdma_resource, queue=queue, timeout=timeout,
            command=list(ctx.args) or None, npu_resource=npu_resource,
            mount_driver=not no_driver_mounts, a3=a3, rendezvous_key_secret=key_secret,
        )
        secret = None
        if rendezvous_key:
            import secrets as random_source

            secret = render_key_secret(params, random_source.token_hex(32))
        if json_out:
            doc = render_job(params)
            print(json.dumps(doc if secret is None else
                             {"apiVersion": "v1", "kind": "List", "items": [secret, doc]},
                             indent=2))
        else:
            if secret is not None:
                sys.stdout.write("# the job's rendezvous key (docs/rendezvous.md)\n"
                                 + to_yaml(secret) + "---\n")
            sys.stdout.write(render_yaml(params))


@app.command()
def version() -> None:
    """Print the agent's version."""
    print(__version__)


def main(argv: Optional[list[str]] = None) -> None:
    """Console-script entry point."""
    app(args=argv, prog_name="ascend-node")


__all__ = ["app", "main"]
