"""Commands an operator runs against a job: `validate`, `doctor`, `report`, `clean`.

No `from __future__ import annotations` here (see `app`).
"""

import os
import sys
from pathlib import Path
from typing import Annotated, Any, Optional

import typer

from ascend_node import logs
from ascend_node.cli.app import (
    FOR_THE_OPERATOR,
    app,
    debug_on,
    emit,
    exit_codes,
    option_flags,
    out,
    settings_from,
)
from ascend_node.cli.options import (
    Debug,
    Devices,
    HcclJson,
    HccnTool,
    Json,
    RendezvousKeyFile,
    RendezvousOpt,
    RunId,
    SharedDir,
    StateDir,
    TableSource,
    TableVersion,
    Verbose,
    attempt_id,
    integer,
    seconds,
)

STDIN_NAMES = ("-", "/dev/stdin")
"""How `validate` is asked to read the table from stdin. `/dev/stdin` is a symlink (to
`/proc/self/fd/0`): read as a file, MindIE's rule "not a symlink" would refuse it, and a
pipe behind it is no regular file; asked for by name, it means stdin."""
MAX_UID = 2**32 - 2
"""The largest uid Linux gives a process (uid_t is 32 bits; -1 means "no change")."""


def _read_stdin() -> bytes:
    """The table's bytes from stdin: at most MindIE's 10 MiB and one byte more, so a
    larger table is refused by size, as a file would be."""
    from ascend_node.errors import ConfigError
    from ascend_node.ranktable import MAX_FILE_SIZE

    stream = getattr(sys.stdin, "buffer", None)
    if stream is None:
        raise ConfigError("cannot read the table from stdin: stdin is closed",
                          "pipe the table in (… | ascend-node validate -) or give its path")
    raw: bytes = stream.read(MAX_FILE_SIZE + 1)
    if len(raw) > MAX_FILE_SIZE:
        raise ConfigError(f"the table on stdin is over {MAX_FILE_SIZE} bytes",
                          "MindIE reads at most 10 MiB; no rank table is that big")
    return raw


@app.command(rich_help_panel=FOR_THE_OPERATOR)
def validate(
    file: Annotated[Path, typer.Argument(help="Rank table JSON file; - (or /dev/stdin) reads "
                                         "it from stdin, without the file rules",
                                         metavar="FILE", show_default=False)],
    target: Annotated[str, typer.Option(
        "--for", metavar="mindie|hccl", help="Rules to apply: mindie (HCCL + MindIE) or hccl")
    ] = "mindie",
    owner_uid: Annotated[Optional[int], typer.Option(
        "--owner-uid", help="Also require this file owner (MindIE requires the server's uid)",
        show_default=False, parser=integer("--owner-uid", "1001", 0, MAX_UID),
        metavar="INTEGER")] = None,
    global_table: Annotated[bool, typer.Option(
        "--global", help="FILE is a PD service's global rank table: apply MindIE-Motor "
        "controller's rules (docs/pd.md)")] = False,
    controller_config: Annotated[Optional[Path], typer.Option(
        "--controller-config", help="With --global: the controller's ms_controller.json, "
        "for its P/D flags and instance sizes", metavar="FILE", show_default=False)] = None,
    json_out: Json = False, debug: Debug = False,
) -> None:
    """Lint a rank table against HCCL and MindIE rules; list every problem (exit 1 if any)."""
    with exit_codes(debug_on(debug)):
        from ascend_node.errors import UsageError

        stdin = str(file) in STDIN_NAMES
        if stdin and owner_uid is not None:
            raise UsageError(f"--owner-uid with {file}: a table read from stdin has no owner",
                             "give the table's path to check its owner")
        if not global_table and controller_config is not None:
            raise UsageError("--controller-config goes with --global",
                             "add --global to judge a PD service's global rank table")
        if not global_table and target not in ("mindie", "hccl"):
            raise UsageError(f"--for {target!r} is not one of mindie, hccl",
                             "use --for mindie (default) or --for hccl")
        raw = _read_stdin() if stdin else b""
        if global_table:
            from ascend_node.pd.controller_config import read_flags
            from ascend_node.pd.files import validate_global_file, validate_global_text

            target = "mindie-motor"
            flags = read_flags(controller_config) if controller_config is not None else None
            problems = (validate_global_text(raw, flags) if stdin else
                        validate_global_file(file, flags, check_owner_uid=owner_uid))
        else:
            from ascend_node.ranktable import validate_file, validate_text

            problems = (validate_text(raw, target) if stdin  # type: ignore[arg-type]
                        else validate_file(file, target,  # type: ignore[arg-type]
                                           check_owner_uid=owner_uid))
        shown = "<stdin>" if stdin else str(file)
        if json_out:
            emit({"file": shown, "target": target, "valid": not problems,
                  "problems": [{"path": p.path, "message": p.message} for p in problems]})
        elif problems:
            for p in problems:
                out(f"{shown}: {p.path}: {p.message}")
            print(f"{len(problems)} problem(s) for {target}", file=sys.stderr)
        else:
            out(f"{shown}: valid for {target}")
        if problems:
            raise typer.Exit(1)


KubeJob = Annotated[Optional[str], typer.Option(
    "--job", help="With --rendezvous kube: the vcjob whose rendezvous objects to act on",
    show_default=False)]
Kubeconfig = Annotated[Optional[str], typer.Option(
    "--kubeconfig", help="With --rendezvous kube: the operator's kubeconfig (default: "
    "KUBECONFIG or ~/.kube/config)", show_default=False)]
KubeContext = Annotated[Optional[str], typer.Option(
    "--context", help="Kubeconfig context", show_default=False)]
KubeNamespace = Annotated[Optional[str], typer.Option(
    "--namespace", help="The job's namespace (default: the context's)", show_default=False)]


def _operator_client(kubeconfig: Optional[str], context: Optional[str],
                     namespace: Optional[str]) -> Any:
    """The operator's API client from a kubeconfig (outside the cluster)."""
    from ascend_node.kube.client import Client
    from ascend_node.kube.config import from_kubeconfig

    return Client(from_kubeconfig(kubeconfig, os.environ, context, namespace))


@app.command(rich_help_panel=FOR_THE_OPERATOR)
def doctor(
    peers: Annotated[bool, typer.Option("--peers", help="Also compare with the run's peers "
                                        "through the shared volume, and ping their devices")
                     ] = False,
    peer_wait: Annotated[float, typer.Option(
        "--peer-wait", help="Seconds to wait for peers' facts", metavar="SECONDS",
        parser=seconds("--peer-wait", example="10"))] = 10.0,
    shared_dir: SharedDir = None, run_id: RunId = None, state_dir: StateDir = None,
    devices: Devices = None, hccn_tool: HccnTool = None, table_version: TableVersion = None,
    table_source: TableSource = None, hccl_json: HcclJson = None,
    rendezvous_key_file: RendezvousKeyFile = None,
    rendezvous: RendezvousOpt = None, job: KubeJob = None, kubeconfig: Kubeconfig = None,
    context: KubeContext = None, namespace: KubeNamespace = None,
    json_out: Json = False, verbose: Verbose = False, debug: Debug = False,
) -> None:
    """Read-only health checks of this node and, with --peers, of the cluster; with
    --rendezvous kube --job J, of that job's Role, binding and objects in the API (the
    operator's kubeconfig).

    Exit 0 healthy, 3 degraded (warnings), 1 failed.
    """
    logs.setup(verbose, debug_on(debug))
    with exit_codes(debug_on(debug)):
        if job is not None:
            from ascend_node.doctor.kube_job import job_checks
            from ascend_node.doctor.report import DoctorReport
            from ascend_node.errors import UsageError

            if rendezvous != "kube":
                raise UsageError("--job checks a job's rendezvous through the API",
                                 "use it with --rendezvous kube")
            client = _operator_client(kubeconfig, context, namespace)
            report_ = DoctorReport(f"vcjob {job} in namespace {client.namespace}",
                                   tuple(job_checks(client, job, run_id)))
            if json_out:
                emit(report_.to_json())
            else:
                out(report_.format_text())
            raise typer.Exit(report_.exit_code)
        from ascend_node.doctor import run_doctor

        settings = settings_from(verbose, **option_flags(locals()))
        report = run_doctor(settings, os.environ, peers=peers, peer_wait=peer_wait)
        if json_out:
            emit(report.to_json())
        else:
            out(report.format_text())
        raise typer.Exit(report.exit_code)


@app.command(rich_help_panel=FOR_THE_OPERATOR)
def report(
    shared_dir: SharedDir = None, run_id: RunId = None,
    attempt: Annotated[Optional[str], typer.Option(
        "--attempt", help="Attempt to draw (default: the current one)", show_default=False,
        parser=attempt_id, metavar="ATTEMPT_ID")
    ] = None,
    html: Annotated[Optional[Path], typer.Option(
        "--html", help="Also write the timeline as a self-contained HTML page to FILE",
        show_default=False)] = None,
    width: Annotated[int, typer.Option("--width", min=20, max=400,
                                       help="Time cells of the text timeline")] = 60,
    rendezvous: RendezvousOpt = None, job: KubeJob = None, kubeconfig: Kubeconfig = None,
    context: KubeContext = None, namespace: KubeNamespace = None,
    json_out: Json = False, debug: Debug = False,
) -> None:
    """Every node's start on one time axis: who arrived last and why (read-only). With
    --rendezvous kube --job J: from the pods' summaries in the API (the operator's
    kubeconfig)."""
    with exit_codes(debug_on(debug)):
        through_api = settings_from(False, rendezvous=rendezvous).rendezvous == "kube"
        if job is not None and not through_api:
            from ascend_node.errors import UsageError

            raise UsageError("--job reads a job's timeline through the API",
                             "use it with --rendezvous kube")
        if through_api:
            from ascend_node.errors import UsageError
            from ascend_node.report.cli import render_report
            from ascend_node.report.kube_collect import collect_from_api

            if not job:
                raise UsageError("report --rendezvous kube needs --job: the vcjob whose "
                                 "timeline to draw", "e.g. report --rendezvous kube --job "
                                 "llama --namespace team-a")
            client = _operator_client(kubeconfig, context, namespace)
            doc, text = render_report(collect_from_api(client, job, run_id, attempt), html,
                                      width)
            if json_out:
                emit(doc)
            else:
                out(text)
            return
        from ascend_node.chain.table import require_rendezvous_settings
        from ascend_node.rendezvous.volume_call import OPERATOR_WAIT, bounded
        from ascend_node.report.cli import run_report

        settings = settings_from(False, shared_dir=shared_dir, run_id=run_id)

        def draw() -> Any:
            from ascend_node.report.instances import pd_instance_runs, run_pd_report

            shared, run = require_rendezvous_settings(settings)
            instances = pd_instance_runs(shared, run)
            if instances is None:
                return run_report(shared, run, attempt, html, width)
            for given, flag in ((attempt, "--attempt"), (html, "--html")):
                if given is not None:
                    from ascend_node.errors import UsageError

                    raise UsageError(f"{flag} draws one run, but {run} is a PD service's "
                                     "(one run per instance)", "give an instance's run id: "
                                     f"--run-id {run}-<task>, e.g. {run}-prefill-0")
            return run_pd_report(shared, run, instances, width)

        # Bounded: a shared volume that does not answer is exit 4 naming it, not a hang.
        doc, text = bounded(draw, OPERATOR_WAIT, settings.shared_dir or "the shared directory",
                            "the run's records could not be read", name="report")
        if json_out:
            emit(doc)
        else:
            out(text)


def _clean_through_api(job: Optional[str], yes: bool, kubeconfig: Optional[str],
                       context: Optional[str], namespace: Optional[str]) -> None:
    from ascend_node.errors import UsageError
    from ascend_node.rendezvous.kube_cleanup import clean_job, rendezvous_objects

    if not job:
        raise UsageError("clean --rendezvous kube needs --job: the vcjob whose rendezvous "
                         "objects to remove", "e.g. clean --rendezvous kube --job llama "
                         "--namespace team-a")
    client = _operator_client(kubeconfig, context, namespace)
    where = f"job {job}'s rendezvous objects in namespace {client.namespace}"
    if not yes:
        if not sys.stdin.isatty():
            raise UsageError(f"clean would remove {where}, and there is no terminal to ask: "
                             "nothing removed", "pass --yes to remove them without asking")
        names = rendezvous_objects(client, job)
        if not typer.confirm(f"remove {len(names)} of {where}?"):
            print("ascend-node: nothing removed", file=sys.stderr)
            raise typer.Exit(1)
    for line in clean_job(client, job):
        out(line)


@app.command(rich_help_panel=FOR_THE_OPERATOR)
def clean(
    shared_dir: SharedDir = None, run_id: RunId = None,
    yes: Annotated[bool, typer.Option(
        "--yes", "-y", help="Remove without asking (needed when stdin is not a terminal)")
    ] = False,
    rendezvous: RendezvousOpt = None, job: KubeJob = None, kubeconfig: Kubeconfig = None,
    context: KubeContext = None, namespace: KubeNamespace = None,
    debug: Debug = False,
) -> None:
    """Remove this run's rendezvous state (and shared table) from the shared volume, or with
    --rendezvous kube a job's rendezvous objects from the API (the operator's kubeconfig).

    Asks on a terminal; without one it removes nothing unless given --yes (exit 2).
    """
    with exit_codes(debug_on(debug)):
        if settings_from(False, rendezvous=rendezvous).rendezvous == "kube":
            _clean_through_api(job, yes, kubeconfig, context, namespace)
            return
        from ascend_node.chain.table import require_rendezvous_settings
        from ascend_node.errors import UsageError
        from ascend_node.rendezvous.cleanup import clean_run
        from ascend_node.rendezvous.volume_call import OPERATOR_WAIT, bounded

        settings = settings_from(False, shared_dir=shared_dir, run_id=run_id)
        # Bounded (not the question): a volume that does not answer is exit 4 naming it.
        where = settings.shared_dir or "the shared directory"
        shared, rid = bounded(lambda: require_rendezvous_settings(settings), OPERATOR_WAIT,
                              where, "nothing was removed", name="clean")
        if not yes:
            if not sys.stdin.isatty():
                raise UsageError(
                    f"clean would remove run {rid!r} state from {shared}, and there is no "
                    "terminal to ask: nothing removed",
                    "pass --yes to remove it without asking")
            if not typer.confirm(f"remove run {rid!r} state from {shared}?"):
                print("ascend-node: nothing removed", file=sys.stderr)
                raise typer.Exit(1)
        for line in bounded(lambda: clean_run(shared, rid), OPERATOR_WAIT, where,
                            "the run's state may be partly removed; run clean again",
                            name="clean"):
            out(line)
