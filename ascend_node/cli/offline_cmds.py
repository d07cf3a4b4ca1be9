"""Commands that need no job: `simulate`, `manifest`, `version`.

No `from __future__ import annotations` here (see `app`).
"""

import json
import signal
import sys
from pathlib import Path
from typing import Annotated, Any, Optional

import typer

from ascend_node import __version__, logs
from ascend_node.cli.app import (
    OFFLINE,
    ServerCommand,
    app,
    debug_on,
    emit,
    exit_codes,
    on_sigterm,
    out,
)
from ascend_node.cli.job_options import (
    A3,
    BindCore,
    Decode,
    DecodePods,
    Https,
    InitContainer,
    InitImage,
    Launcher,
    LoadTimeout,
    MasterPort,
    ModelDir,
    ModelName,
    ModelPath,
    ModelPvc,
    MsrunLogDir,
    Nodes,
    NoDriverMounts,
    NpusPerNode,
    Prefill,
    PrefillPods,
    Queue,
    RendezvousKey,
    RendezvousKeySecret,
    RunAsUser,
    TlsSecret,
    fresh_key,
)
from ascend_node.cli.options import (
    Debug,
    Json,
    integer,
)


@app.command(rich_help_panel=OFFLINE)
def simulate(
    ctx: typer.Context,
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
        "npu-busy, unreachable (with --boot); NODE:KIND for a fault of the whole node: "
        "port-taken, hccl-env, cann-version", show_default=False)] = None,
    keep: Annotated[Optional[bool], typer.Option(
        "--keep/--no-keep", help="Keep the workspace (node logs, state dirs) / remove it; "
        "default: kept only when a node failed", show_default=False)] = None,
    table_out: Annotated[Optional[Path], typer.Option(
        "--table-out", help="Also write the rank table to this file", show_default=False)
    ] = None,
    timeline: Annotated[bool, typer.Option(
        "--report", help="Then draw every node's start on one time axis (as "
        "`ascend-node report` does)")] = False,
    pd: Annotated[bool, typer.Option(
        "--pd", help="A PD-disaggregated MindIE service: a coordinator, a controller (with "
        "pd-table --watch), prefill and decode instances booting into fake daemons "
        "(docs/simulate.md)")] = False,
    prefill: Annotated[int, typer.Option("--prefill", min=1, max=16,
                                         help="With --pd: prefill instances")] = 1,
    decode: Annotated[int, typer.Option("--decode", min=1, max=16,
                                        help="With --pd: decode instances")] = 1,
    prefill_pods: Annotated[int, typer.Option(
        "--prefill-pods", min=1, max=16, help="With --pd: pods per prefill instance")] = 2,
    decode_pods: Annotated[int, typer.Option(
        "--decode-pods", min=1, max=16, help="With --pd: pods per decode instance")] = 1,
    rendezvous: Annotated[str, typer.Option(
        "--rendezvous", metavar="volume|kube",
        help="volume: the nodes meet in a shared directory; kube: through the API server of "
        "--kubeconfig, as a job of its own in its namespace (docs/simulate.md)")] = "volume",
    kubeconfig: Annotated[Optional[str], typer.Option(
        "--kubeconfig", help="With --rendezvous kube: the cluster (default: $KUBECONFIG, "
        "else ~/.kube/config)", show_default=False)] = None,
    namespace: Annotated[Optional[str], typer.Option(
        "--namespace", help="With --rendezvous kube: the namespace (default: the "
        "kubeconfig context's)", show_default=False)] = None,
    json_out: Json = False, debug: Debug = False,
) -> None:
    """Run the real agent as N local processes with fake NPUs; one line per server.

    Exit: 0 when every node holds the same table (with --pd: when the service came up),
    else the worst node's exit.
    """
    logs.setup(False, debug_on(debug))
    with exit_codes(debug_on(debug)):
        signal.signal(signal.SIGTERM, on_sigterm)  # stop the nodes, remove the workspace
        given = {name for name in ctx.params
                 if getattr(ctx.get_parameter_source(name), "name", "") == "COMMANDLINE"}
        if rendezvous == "kube" and (pd or given & set(PD_ONLY)):
            from ascend_node.errors import UsageError

            raise UsageError("--pd is not with --rendezvous kube yet: a PD service meets "
                              "on the shared volume", "leave --rendezvous kube out")
        if pd or given & set(PD_ONLY):
            from ascend_node.sim.pd_options import build_pd_spec

            spec_pd = build_pd_spec(
                given, prefill=prefill, decode=decode, prefill_pods=prefill_pods,
                decode_pods=decode_pods, devices=devices, a3=a3, timeout=timeout,
                tool_delay=tool_delay, run_id=run_id, absent=absent, pd=pd)
            _simulate_pd(spec_pd, shared_dir, keep, json_out)
            return
        from ascend_node.sim.cluster import write_table
        from ascend_node.sim.options import build_spec, check_paths
        from ascend_node.sim.session import simulate as run_simulation
        from ascend_node.sim.summary import format_report, report_json

        spec = build_spec(nodes=nodes, devices=devices, a3=a3, super_pod_size=super_pod_size,
                          masters=masters, timeout=timeout, tool_delay=tool_delay,
                          run_id=run_id, boot=boot_chain, absent=absent,
                          bad_devices=bad_device or [])
        check_paths(shared_dir, table_out)
        endpoint = _kube_endpoint(rendezvous, given, kubeconfig, namespace, shared_dir,
                                  timeline)
        drawn: tuple[Optional[dict[str, Any]], str] = (None, "")

        def draw(done: Any) -> None:  # before the workspace (and its volume) is removed
            nonlocal drawn
            from ascend_node.report.cli import sim_timeline

            drawn = sim_timeline(done.shared_dir, spec.run_id)

        report = run_simulation(spec, shared_dir, keep,
                                before_cleanup=draw if timeline else None, kube=endpoint)
        if table_out is not None:
            write_table(report, table_out)
        if json_out:
            doc = report_json(report)
            if timeline:
                doc["timeline"] = drawn[0]
            emit(doc)
        else:
            out(format_report(report, keep, table_out))
            if timeline:
                out(drawn[1])
        if not report.ok:
            raise typer.Exit(report.worst_exit)


PD_ONLY = ("prefill", "decode", "prefill_pods", "decode_pods")  # need --pd
KUBE_ONLY = ("kubeconfig", "namespace")  # need --rendezvous kube


def _kube_endpoint(rendezvous: str, given: set[str], kubeconfig: Optional[str],
                   namespace: Optional[str], shared_dir: Optional[Path], timeline: bool
                   ) -> Any:
    """`--rendezvous kube`: the operator's API server from the kubeconfig; None for the
    volume (the default, which needs nothing). What does not go with the choice: exit 2."""
    import os

    from ascend_node.errors import UsageError

    if rendezvous not in ("volume", "kube"):
        raise UsageError(f"--rendezvous {rendezvous!r} is not one of volume, kube",
                          "volume (a shared directory, the default) or kube (the API server)")
    if rendezvous == "volume":
        extra = sorted(given & set(KUBE_ONLY))
        if extra:
            raise UsageError(f"--{extra[0]} needs --rendezvous kube",
                              "add --rendezvous kube, or leave it out")
        return None
    for flag, on in (("--shared-dir", shared_dir is not None), ("--report", timeline)):
        if on:
            raise UsageError(f"{flag} is not with --rendezvous kube: the nodes meet through "
                              "the API server, not in a shared directory",
                              f"leave {flag} out, or use --rendezvous volume")
    from ascend_node.kube.config import from_kubeconfig

    return from_kubeconfig(kubeconfig, os.environ, namespace=namespace)


def _simulate_pd(spec: Any, shared_dir: Optional[Path], keep: Optional[bool],
                 json_out: bool) -> None:
    """`simulate --pd`: the service, its summary, exit 0 when it came up."""
    from ascend_node.sim.options import check_paths
    from ascend_node.sim.pd_service import format_pd_report, pd_report_json, simulate_pd
    from ascend_node.sim.session import _stderr

    check_paths(shared_dir, None)
    report = simulate_pd(spec, shared_dir, keep, say=_stderr)
    if json_out:
        emit(pd_report_json(report))
    else:
        out(format_pd_report(report))
    if not report.ok:
        raise typer.Exit(report.worst_exit)


@app.command(cls=ServerCommand, rich_help_panel=OFFLINE,
             options_metavar="[OPTIONS] [-- CMD [ARGS]...]")
def manifest(
    ctx: typer.Context,
    kind: Annotated[str, typer.Option("--kind", metavar="mindie|mindie-pd|training",
                                      help="mindie, mindie-pd (a PD-disaggregated service: "
                                      "docs/pd.md) or training")] = "mindie",
    name: Annotated[str, typer.Option("--name", help="Volcano Job name")] = "mindie",
    nodes: Nodes = None,
    prefill: Prefill = None,
    decode: Decode = None,
    prefill_pods: PrefillPods = None,
    decode_pods: DecodePods = None,
    image: Annotated[str, typer.Option("--image", help="Container image with ascend-node")
                     ] = "mindie:latest",
    pvc: Annotated[Optional[str], typer.Option(
        "--pvc", help="Shared PVC (model directory) (model; none with --rendezvous kube)",
        show_default=False)] = None,
    rendezvous: Annotated[str, typer.Option(
        "--rendezvous", metavar="volume|kube",
        help="volume: the pods meet on the shared PVC; kube: through the Kubernetes API, "
        "under the job's own ServiceAccount, Role and RoleBinding (rendered too; needs "
        "--namespace; no PVC)")] = "volume",
    run_id: Annotated[Optional[str], typer.Option(
        "--run-id", help="Run id (default: the job name)", show_default=False)] = None,
    npus_per_node: NpusPerNode = None,
    a3: A3 = False,
    model_path: ModelPath = "/mnt/model",
    namespace: Annotated[Optional[str], typer.Option(
        "--namespace", help="Kubernetes namespace of the Job (omitted: the current one of kubectl)",
        show_default=False)] = None,
    rdma_resource: Annotated[Optional[str], typer.Option(
        "--rdma-resource", help="e.g. rdma/hca (adds IPC_LOCK)", show_default=False)] = None,
    queue: Queue = "default",
    timeout: Annotated[int, typer.Option(
        "--timeout",
        parser=integer("--timeout", "900"), metavar="INTEGER",
        help="Agent's peer timeout in seconds, 1-604800")] = 900,
    npu_resource: Annotated[str, typer.Option(
        "--npu-resource", help="Extended resource name of the NPUs")] = "huawei.com/Ascend910",
    no_driver_mounts: NoDriverMounts = False,
    rendezvous_key: RendezvousKey = False,
    rendezvous_key_secret: RendezvousKeySecret = None,
    https: Https = None,
    load_timeout: LoadTimeout = None,
    tls_secret: TlsSecret = None,
    model_dir: ModelDir = None,
    model_pvc: ModelPvc = None,
    model_name: ModelName = None,
    run_as_user: RunAsUser = None,
    launcher: Launcher = None,
    master_port: MasterPort = None,
    msrun_log_dir: MsrunLogDir = None,
    bind_core: BindCore = False,
    init_container: InitContainer = False,
    init_image: InitImage = None,
    launcher_rbac: Annotated[Optional[str], typer.Option(
        "--launcher-rbac", metavar="NAME", help="Render only the ServiceAccount NAME, Role and "
        "RoleBinding `ascend-node launch` needs in --namespace (docs/launch.md), no Job",
        show_default=False)] = None,
    json_out: Json = False, debug: Debug = False,
) -> None:
    """Render a Volcano Job for MindIE multi-node or training (command after `--`)."""
    with exit_codes(debug_on(debug)):
        from ascend_node.errors import UsageError
        from ascend_node.jobspec.job import to_yaml
        from ascend_node.jobspec.request import KINDS, JobRequest, render, request_options

        if kind not in KINDS:
            raise UsageError(f"--kind {kind!r} is not one of mindie, mindie-pd, training",
                             "use --kind mindie, --kind mindie-pd or --kind training")
        if launcher_rbac is not None:
            from ascend_node.jobspec.job import valid_name
            from ascend_node.jobspec.launcher_rbac import launcher_rbac as launcher_objects

            if namespace is None:
                raise UsageError("--launcher-rbac needs --namespace",
                                 "the pipeline's namespace, e.g. --namespace kubeflow")
            for flag, value in (("--launcher-rbac", launcher_rbac), ("--namespace", namespace)):
                if not valid_name(value):
                    raise UsageError(f"{flag} {value!r} is not a DNS-1123 label",
                                     "lower-case letters, digits and '-', at most 63")
            objs = launcher_objects(launcher_rbac, namespace)
            if json_out:
                out(json.dumps({"apiVersion": "v1", "kind": "List", "items": objs}, indent=2))
            else:
                out("\n---\n".join(to_yaml(o).rstrip("\n") for o in objs))
            return
        given = locals()
        rendered = render(JobRequest(**{k: given[k] for k in request_options()},
                                     command=tuple(ctx.args) or None),
                          fresh_key() if rendezvous_key else None)
        if rendered.note is not None:
            print(f"ascend-node: warning: {rendered.note}", file=sys.stderr, flush=True)
        out(rendered.json_text() if json_out else rendered.yaml_text(), end="")


@app.command(rich_help_panel=OFFLINE)
def version() -> None:
    """Print the agent's version."""
    with exit_codes(False):
        out(__version__)
