"""Commands of a PD-disaggregated service's pods: `pd-announce`, `pd-table` (docs/pd.md).

No `from __future__ import annotations` here (see `app`).
"""

import os
import signal
from pathlib import Path
from typing import Annotated, Any, Optional

import typer

from ascend_node import logs
from ascend_node.cli.app import (
    IN_THE_POD,
    ServerCommand,
    app,
    debug_on,
    exit_codes,
    on_sigterm,
    option_flags,
    out,
    settings_from,
)
from ascend_node.cli.options import (
    Debug,
    FileOwner,
    RendezvousKeyFile,
    RendezvousOpt,
    RunId,
    SharedDir,
    Timeout,
    Verbose,
)


def _through_api(run_id: Optional[str]) -> Any:
    """(client, the vcjob, the service's run id) for `--rendezvous kube`: the pod's
    ServiceAccount and Volcano's annotations (chain.kube_table, kube_layout)."""
    from ascend_node.chain.kube_table import api_client
    from ascend_node.rendezvous.kube_layout import job_identity

    client = api_client(os.environ)
    job = job_identity(os.environ, client.namespace)
    return client, job, run_id or job.name


def _api_table_path(out: Optional[Path], state_dir: Path) -> Path:
    """Where the global table is written through the API, in the controller's own pod:
    `--out`, else `<state dir>/pd/global_ranktable.json` (the sidecar and the controller
    share the state directory's emptyDir; no shared volume)."""
    from ascend_node.pd.service import GLOBAL_TABLE_NAME

    return out or state_dir / "pd" / GLOBAL_TABLE_NAME


@app.command("pd-announce", rich_help_panel=IN_THE_POD)
def pd_announce(
    shared_dir: SharedDir = None, run_id: RunId = None,
    rendezvous_key_file: RendezvousKeyFile = None, rendezvous: RendezvousOpt = None,
    verbose: Verbose = False, debug: Debug = False,
) -> None:
    """Publish this coordinator's (or controller's) addresses for the PD global table."""
    logs.setup(verbose, debug_on(debug))
    with exit_codes(debug_on(debug)):
        from ascend_node.chain.table import rendezvous_key, require_rendezvous_settings
        from ascend_node.pd.roles import read_pd_identity
        from ascend_node.pd.service import announce

        settings = settings_from(verbose, **option_flags(locals()))
        if settings.rendezvous == "kube":
            from ascend_node.pd import kube_service

            client, job, run = _through_api(settings.run_id)
            me = read_pd_identity(os.environ)
            doc = kube_service.announce(client, job, run, me, os.environ)
            out(f"{me.task} {me.place}: pod IP {doc.pod_ip}, host IP {doc.host_ip}")
            return
        shared, run = require_rendezvous_settings(settings)
        me = read_pd_identity(os.environ)
        doc = announce(shared, run, me, os.environ, rendezvous_key(settings, os.environ))
        out(f"{me.task} {me.place}: pod IP {doc.pod_ip}, host IP {doc.host_ip}")


@app.command("pd-table", rich_help_panel=IN_THE_POD)
def pd_table(
    controller_config: Annotated[Path, typer.Option(
        "--controller-config", help="The controller's ms_controller.json (its P/D flags and "
        "instance sizes decide deploy_server)", metavar="FILE", show_default=False)],
    out: Annotated[Optional[Path], typer.Option(
        "--out", help="Where to write the table [default: <shared>/.ascend-node/<run>/pd/"
        "global_ranktable.json]", metavar="PATH", show_default=False)] = None,
    watch: Annotated[bool, typer.Option(
        "--watch/--once", help="Keep the table current after the first write (the "
        "controller pod's sidecar), or exit after it")] = False,
    shared_dir: SharedDir = None, run_id: RunId = None, timeout: Timeout = None,
    file_owner: FileOwner = None, rendezvous_key_file: RendezvousKeyFile = None,
    rendezvous: RendezvousOpt = None, verbose: Verbose = False, debug: Debug = False,
) -> None:
    """Write a PD service's global rank table from its instances' tables (exit 4 if they
    are not all complete within --timeout)."""
    logs.setup(verbose, debug_on(debug))
    with exit_codes(debug_on(debug)):
        signal.signal(signal.SIGTERM, on_sigterm)
        from ascend_node.chain.table import rendezvous_key, require_rendezvous_settings
        from ascend_node.pd.controller_config import read_flags
        from ascend_node.pd.roles import instance_counts, read_pd_identity
        from ascend_node.pd.service import announce, global_table_path
        from ascend_node.pd.watch import run_pd_table

        settings = settings_from(verbose, **option_flags(locals()))
        kube = settings.rendezvous == "kube"
        if not kube:
            shared, run = require_rendezvous_settings(settings)
        flags = read_flags(controller_config)
        counts = instance_counts(os.environ)
        if not counts["prefill"] or not counts["decode"]:
            from ascend_node.errors import ConfigError

            raise ConfigError(
                f"the Job lists {counts['prefill']} prefill and {counts['decode']} decode "
                "tasks (VC_PREFILL_<i>_NUM, VC_DECODE_<j>_NUM)",
                "a PD service needs at least one of each; run under its Volcano Job")
        if kube:
            from ascend_node.pd import kube_service

            client, job, run = _through_api(settings.run_id)
            if os.environ.get("ASCEND_NODE_PD_TASK") == "controller":
                kube_service.announce(client, job, run, read_pd_identity(os.environ),
                                      os.environ)
            run_pd_table(Path("."), run, counts, flags,
                         _api_table_path(out, settings.state_dir), timeout=settings.timeout,
                         watch=watch, owner=settings.file_owner,
                         read=lambda: kube_service.read_service(client, job, run, counts))
            return
        key = rendezvous_key(settings, os.environ)
        if os.environ.get("ASCEND_NODE_PD_TASK") == "controller":
            # In the controller's pod: its own addresses are group "1" (get_group_id.py).
            announce(shared, run, read_pd_identity(os.environ), os.environ, key)
        run_pd_table(shared, run, counts, flags, out or global_table_path(shared, run),
                     timeout=settings.timeout, watch=watch, owner=settings.file_owner,
                     key=key)


@app.command("pd-boot", rich_help_panel=IN_THE_POD,
             options_metavar="[OPTIONS] -- CMD [ARGS]...", cls=ServerCommand)
def pd_boot(
    ctx: typer.Context,
    config: Annotated[Optional[Path], typer.Option(
        "--motor-config", help="The role's MindIE-Motor configuration [default: "
        "MINDIE_MS_CONTROLLER_CONFIG_FILE_PATH or MINDIE_MS_COORDINATOR_CONFIG_FILE_PATH]",
        metavar="FILE", show_default=False)] = None,
    shared_dir: SharedDir = None, run_id: RunId = None, timeout: Timeout = None,
    rendezvous_key_file: RendezvousKeyFile = None, rendezvous: RendezvousOpt = None,
    verbose: Verbose = False, debug: Debug = False,
) -> None:
    """Start a PD service's coordinator or controller: check, then exec the command after --."""
    logs.setup(verbose, debug_on(debug))
    with exit_codes(debug_on(debug)):
        signal.signal(signal.SIGTERM, on_sigterm)
        from ascend_node.chain.table import rendezvous_key, require_rendezvous_settings
        from ascend_node.pd.boot import pd_boot as run_pd_boot

        settings = settings_from(verbose, **option_flags(locals()))
        if settings.rendezvous == "kube":
            from ascend_node.pd import kube_service

            client, job, run = _through_api(settings.run_id)
            run_pd_boot(list(ctx.args), os.environ, Path("."), run, settings.timeout, config,
                        None, state_dir=settings.state_dir,
                        announcer=lambda me: kube_service.announce(client, job, run, me,
                                                                   os.environ),
                        table_path=_api_table_path(None, settings.state_dir))
        shared, run = require_rendezvous_settings(settings)
        run_pd_boot(list(ctx.args), os.environ, shared, run, settings.timeout, config,
                    rendezvous_key(settings, os.environ), state_dir=settings.state_dir)
