"""`ascend-node launch`: a pipeline step's launcher (docs/launch.md). Thin: it reads the
platform's environment and form fields (`launch.platform_env`), renders the Job with
`manifest`'s renderer (`jobspec`), lays the platform's requests over it
(`launch.platform_job`) and asks the API what an earlier run left (`launch.submit`).

What it does: `--dry-run` (what would be deleted and created); deleting the earlier run and
waiting for its pods, creating, following the Job by watches to the verdict while every pod's
log streams to stdout (`launch.pod_logs`), and deleting the Job on SIGINT/SIGTERM or the
timeout (`launch.run`).

No `from __future__ import annotations` here (see `app`).
"""

import contextlib
import dataclasses
import os
import signal
import sys
import time
from typing import Annotated, Any, Optional

import typer

from ascend_node.cli.app import (
    FOR_THE_OPERATOR,
    ServerCommand,
    app,
    debug_on,
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
from ascend_node.cli.options import Debug, integer
from ascend_node.errors import Terminated


@app.command(cls=ServerCommand, rich_help_panel=FOR_THE_OPERATOR,
             options_metavar="[OPTIONS] [-- CMD [ARGS]...]")
def launch(
    ctx: typer.Context,
    kind: Annotated[str, typer.Option("--kind", metavar="training|mindie|mindie-pd",
                                      help="training, mindie or mindie-pd")] = "training",
    num_worker: Annotated[Optional[int], typer.Option(
        "--num_worker", parser=integer("--num_worker", "4"), metavar="INTEGER",
        help="Pods (cube-studio's form field)", show_default=False)] = None,
    image: Annotated[Optional[str], typer.Option(
        "--image", help="Image (default: KFJ_TASK_IMAGES)", show_default=False)] = None,
    working_dir: Annotated[Optional[str], typer.Option(
        "--working_dir", help="The server container's working directory",
        show_default=False)] = None,
    command: Annotated[Optional[str], typer.Option(
        "--command", help="Training: run as bash -c COMMAND", show_default=False)] = None,
    name: Annotated[Optional[str], typer.Option(
        "--name", help="Job name (default: KFJ_TASK_NAME and the run id)",
        show_default=False)] = None,
    namespace: Annotated[Optional[str], typer.Option(
        "--namespace", help="Namespace (default: KFJ_NAMESPACE, else the kubeconfig's or "
        "the ServiceAccount's)", show_default=False)] = None,
    run_id: Annotated[Optional[str], typer.Option(
        "--run-id", help="Run id (default: KFJ_RUN_ID, else the job name)",
        show_default=False)] = None,
    pvc: Annotated[Optional[str], typer.Option(
        "--pvc", help="Shared PVC: the pods meet on it (without it: through the API)",
        show_default=False)] = None,
    kubeconfig: Annotated[Optional[str], typer.Option(
        "--kubeconfig", help="Kubeconfig (default: the pod's ServiceAccount in a pod, else "
        "KUBECONFIG or ~/.kube/config)", show_default=False)] = None,
    context: Annotated[Optional[str], typer.Option(
        "--context", help="Kubeconfig context", show_default=False)] = None,
    until: Annotated[Optional[str], typer.Option(
        "--until", metavar="ended|serving", help="When launch is done: the Job ended "
        "(training's default) or every pod Ready (mindie's default)", show_default=False)
    ] = None,
    timeout: Annotated[int, typer.Option(
        "--timeout", parser=integer("--timeout", "86400"), metavar="INTEGER",
        help="Seconds before launch gives up (exit 7) and deletes the Job unless kept")
    ] = 7 * 24 * 3600,
    keep_on_exit: Annotated[bool, typer.Option(
        "--keep-on-exit", help="Leave the Job on SIGINT/SIGTERM or a timeout")] = False,
    dry_run: Annotated[bool, typer.Option(
        "--dry-run", help="Print the Jobs an earlier run left that would be deleted, and the "
        "Job that would be created; change nothing")] = False,
    # Every other `manifest` option, under manifest's own flag (cli/job_options.py); manifest's
    # --timeout (the agent's peer timeout) is --peer-timeout here, --timeout being launch's.
    nodes: Nodes = None, prefill: Prefill = None, decode: Decode = None,
    prefill_pods: PrefillPods = None, decode_pods: DecodePods = None,
    rendezvous: Annotated[Optional[str], typer.Option(
        "--rendezvous", metavar="volume|kube", help="Where the pods meet (default: volume "
        "with --pvc, else kube)", show_default=False)] = None,
    npus_per_node: NpusPerNode = None, a3: A3 = False,
    model_path: ModelPath = "/mnt/model",
    rdma_resource: Annotated[Optional[str], typer.Option(
        "--rdma-resource", help="e.g. rdma/hca (default: RDMA_RESOURCE_NAME when "
        "KFJ_TASK_RESOURCE_RDMA asks)", show_default=False)] = None,
    queue: Queue = "default",
    peer_timeout: Annotated[Optional[int], typer.Option(
        "--peer-timeout", parser=integer("--peer-timeout", "900"), metavar="INTEGER",
        help="The agent's peer timeout in seconds, 1-604800 (manifest's --timeout) (900)",
        show_default=False)] = None,
    npu_resource: Annotated[Optional[str], typer.Option(
        "--npu-resource", help="Extended resource name of the NPUs (default: "
        "GPU_RESOURCE_NAME, else huawei.com/Ascend910)", show_default=False)] = None,
    no_driver_mounts: NoDriverMounts = False, rendezvous_key: RendezvousKey = False,
    rendezvous_key_secret: RendezvousKeySecret = None, https: Https = None,
    load_timeout: LoadTimeout = None, tls_secret: TlsSecret = None,
    model_dir: ModelDir = None, model_pvc: ModelPvc = None, model_name: ModelName = None,
    run_as_user: RunAsUser = None, launcher: Launcher = None, master_port: MasterPort = None,
    msrun_log_dir: MsrunLogDir = None, bind_core: BindCore = False,
    init_container: InitContainer = False, init_image: InitImage = None,
    debug: Debug = False,
) -> None:
    """Run a Volcano Job for a pipeline step (cube-studio): the earlier run's Jobs, the Job.

    The Job is the one `manifest` renders from the same options (the command after `--`, or
    --command)."""
    with exit_codes(debug_on(debug)), _launcher_forbidden():
        from ascend_node.errors import UsageError
        from ascend_node.jobspec.request import JobRequest, render, request_options
        from ascend_node.kube.client import Client
        from ascend_node.kube.config import from_kubeconfig, in_cluster
        from ascend_node.launch.platform_env import FormFields, read_request
        from ascend_node.launch.platform_job import overlay
        from ascend_node.launch.submit import dry_run_text, earlier_jobs

        if kind not in ("training", "mindie", "mindie-pd"):
            raise UsageError(f"--kind {kind!r} is not one of training, mindie, mindie-pd",
                             "use --kind training, --kind mindie or --kind mindie-pd")
        until = until or ("ended" if kind == "training" else "serving")
        if until not in ("ended", "serving"):
            raise UsageError(f"--until {until!r} is not one of ended, serving",
                             "use --until ended or --until serving")
        if not 1 <= timeout <= 30 * 24 * 3600:
            raise UsageError(f"--timeout {timeout} is out of range",
                             "--timeout takes seconds from 1 to 2592000, e.g. --timeout 86400")
        if peer_timeout is not None and not 1 <= peer_timeout <= 7 * 24 * 3600:
            raise UsageError(f"--peer-timeout {peer_timeout} is out of range",
                             "the agent's peer timeout in seconds, 1 to 604800, e.g. "
                             "--peer-timeout 900")
        if command is not None and ctx.args:
            raise UsageError("--command and a command after -- both given",
                             "give the command one way: --command 'python3 train.py' "
                             "(run by bash -c) or -- python3 train.py")
        form = FormFields(num_worker, image, working_dir, command)
        req = read_request(os.environ, form, kind)
        opts = dict(req.manifest)
        # A flag given wins over the platform's environment (manifest's defaults come last).
        given = locals()
        opts.update({k: given[k] for k in request_options()
                     if k not in ("kind", "image", "timeout") and k in given
                     and given[k] is not None and given[k] is not False})
        if peer_timeout is not None:
            opts["timeout"] = peer_timeout
        if ctx.args:
            opts["command"] = tuple(ctx.args)
        elif "command" in opts:
            opts["command"] = tuple(opts["command"])
        if kubeconfig is None and os.environ.get("KUBERNETES_SERVICE_HOST"):
            endpoint = in_cluster(os.environ)
        else:
            endpoint = from_kubeconfig(kubeconfig, os.environ, context,
                                       opts.get("namespace"))
        opts.setdefault("namespace", endpoint.namespace)
        opts.setdefault("image", "" if kind == "training" else "mindie:latest")
        opts.setdefault("rendezvous", "volume" if pvc else "kube")
        rendered = render(JobRequest(**opts),
                          fresh_key() if opts.get("rendezvous_key") else None)
        if rendered.note is not None:
            print(f"ascend-node: warning: {rendered.note}", file=sys.stderr, flush=True)
        params = rendered.params
        job = overlay(rendered.job, req)
        client = Client(dataclasses.replace(endpoint, namespace=str(params.namespace)))
        deletions = earlier_jobs(client, params.run_id, params.name)
        if dry_run:
            out(dry_run_text(deletions, job, rendered.before), end="")
            return
        _run(client, params.run_id, params.name, job, rendered.before, deletions, until,
             timeout, keep_on_exit)


@contextlib.contextmanager
def _launcher_forbidden() -> Any:
    """A 403 names the launcher's Role and how to render it, not the agent's."""
    from ascend_node.kube.errors import Forbidden

    try:
        yield
    except Forbidden as exc:
        raise Forbidden(exc.cause.replace("the agent's Role", "the launcher's Role"),
                        "`ascend-node manifest --launcher-rbac NAME --namespace NS` renders "
                        "the launcher's ServiceAccount, Role and RoleBinding "
                        "(docs/launch.md)") from None


def _say(line: str) -> None:
    print(f"ascend-node: launch: {line}", file=sys.stderr, flush=True)


def _log_line(line: str) -> None:
    """A pod's log line: stdout, the step's output (launch's own lines are on stderr)."""
    print(line, flush=True)


def _run(client: Any, run_id: str, name: str, job: dict[str, Any],
         objects: list[dict[str, Any]], deletions: list[Any], until: str, timeout: int,
         keep: bool) -> None:
    """Delete the earlier run, create, follow; on SIGINT/SIGTERM or a timeout delete the Job
    it created unless `keep`."""
    from ascend_node.kube.client import Client
    from ascend_node.kube.errors import NotFound
    from ascend_node.launch.pod_logs import PodLogs
    from ascend_node.launch.run import LaunchTimeout, delete_earlier, follow, raise_for
    from ascend_node.launch.submit import JOBS, ensure_objects

    deadline = time.monotonic() + timeout
    signal.signal(signal.SIGTERM, on_sigterm)
    created = False
    logs: Optional[PodLogs] = None
    try:
        delete_earlier(client, run_id, deletions, _say, deadline)
        for line in ensure_objects(client, objects):
            _say(line)
        made = client.create(JOBS, job)
        created = True
        _say(f"created job {made['metadata']['namespace']}/{name} "
             f"(uid {made['metadata']['uid']})")
        logs = PodLogs(lambda: Client(client.endpoint), name, _log_line, _say)
        logs.start()
        verdict = follow(client, name, until, _say, deadline)
        # the Job ended: every pod's log to its end first; serving: the pods go on
        logs.finish(read_to_end=until == "ended")
    except (KeyboardInterrupt, Terminated, LaunchTimeout):
        if logs is not None:
            logs.finish(read_to_end=False)
        if created and not keep:
            with contextlib.suppress(NotFound):
                client.delete(JOBS, name)
            _say(f"deleted job {name} (it was launched by this run; --keep-on-exit keeps it)")
        raise
    raise_for(verdict)
    out(verdict.cause)
