"""`ascend-node launch`: a pipeline step's launcher (docs/launch.md). Thin: it reads the
platform's environment and form fields (`launch.platform_env`), renders the Job (`manifest`),
lays the platform's requests over it (`launch.platform_job`) and asks the API what an earlier
run left (`launch.submit`).

Built so far: `--dry-run` (what would be deleted and created); deleting the earlier run and
waiting for its pods, creating, following the Job by watches to the verdict, and deleting it on
SIGINT/SIGTERM or the timeout (`launch.run`). Following the pods' logs is not built yet.

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

from ascend_node.cli.app import FOR_THE_OPERATOR, app, debug_on, exit_codes, on_sigterm, out
from ascend_node.cli.options import Debug, integer
from ascend_node.errors import Terminated


@app.command(rich_help_panel=FOR_THE_OPERATOR)
def launch(
    kind: Annotated[str, typer.Option("--kind", metavar="training|mindie",
                                      help="training or mindie")] = "training",
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
    debug: Debug = False,
) -> None:
    """Run a Volcano Job for a pipeline step (cube-studio): the earlier run's Jobs, the Job."""
    with exit_codes(debug_on(debug)), _launcher_forbidden():
        from ascend_node.errors import UsageError
        from ascend_node.jobspec.job import ManifestParams, render_job, render_rbac
        from ascend_node.kube.client import Client
        from ascend_node.kube.config import from_kubeconfig, in_cluster
        from ascend_node.launch.platform_env import FormFields, read_request
        from ascend_node.launch.platform_job import overlay
        from ascend_node.launch.submit import dry_run_text, earlier_jobs

        if kind not in ("training", "mindie"):
            raise UsageError(f"--kind {kind!r} is not one of training, mindie",
                             "use --kind training or --kind mindie")
        until = until or ("serving" if kind == "mindie" else "ended")
        if until not in ("ended", "serving"):
            raise UsageError(f"--until {until!r} is not one of ended, serving",
                             "use --until ended or --until serving")
        if not 1 <= timeout <= 30 * 24 * 3600:
            raise UsageError(f"--timeout {timeout} is out of range",
                             "--timeout takes seconds from 1 to 2592000, e.g. --timeout 86400")
        form = FormFields(num_worker, image, working_dir, command)
        req = read_request(os.environ, form, kind)
        opts = dict(req.manifest)
        for key, value in (("name", name), ("namespace", namespace), ("run_id", run_id)):
            if value is not None:
                opts[key] = value
        if kubeconfig is None and os.environ.get("KUBERNETES_SERVICE_HOST"):
            endpoint = in_cluster(os.environ)
        else:
            endpoint = from_kubeconfig(kubeconfig, os.environ, context,
                                       opts.get("namespace"))
        opts.setdefault("namespace", endpoint.namespace)
        opts.setdefault("run_id", opts["name"])
        opts.setdefault("nodes", 2)
        opts.setdefault("image", "mindie:latest" if kind == "mindie" else "")
        params = ManifestParams(**opts, pvc=pvc, rendezvous="volume" if pvc else "kube")
        job = overlay(render_job(params), req)
        client = Client(dataclasses.replace(endpoint, namespace=str(params.namespace)))
        deletions = earlier_jobs(client, params.run_id, params.name)
        objects = render_rbac(params)
        if dry_run:
            out(dry_run_text(deletions, job, objects), end="")
            return
        _run(client, params.run_id, params.name, job, objects, deletions, until, timeout,
             keep_on_exit)


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


def _run(client: Any, run_id: str, name: str, job: dict[str, Any],
         objects: list[dict[str, Any]], deletions: list[Any], until: str, timeout: int,
         keep: bool) -> None:
    """Delete the earlier run, create, follow; on SIGINT/SIGTERM or a timeout delete the Job
    it created unless `keep`."""
    from ascend_node.kube.errors import NotFound
    from ascend_node.launch.run import LaunchTimeout, delete_earlier, follow, raise_for
    from ascend_node.launch.submit import JOBS, ensure_objects

    deadline = time.monotonic() + timeout
    signal.signal(signal.SIGTERM, on_sigterm)
    created = False
    try:
        delete_earlier(client, run_id, deletions, _say, deadline)
        for made_object in ensure_objects(client, objects):
            _say(f"created {made_object}")
        made = client.create(JOBS, job)
        created = True
        _say(f"created job {made['metadata']['namespace']}/{name} "
             f"(uid {made['metadata']['uid']})")
        verdict = follow(client, name, until, _say, deadline)
    except (KeyboardInterrupt, Terminated, LaunchTimeout):
        if created and not keep:
            with contextlib.suppress(NotFound):
                client.delete(JOBS, name)
            _say(f"deleted job {name} (it was launched by this run; --keep-on-exit keeps it)")
        raise
    raise_for(verdict)
    out(verdict.cause)
