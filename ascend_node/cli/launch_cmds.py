"""`ascend-node launch`: a pipeline step's launcher (docs/launch.md). Thin: it reads the
platform's environment and form fields (`launch.platform_env`), renders the Job (`manifest`),
lays the platform's requests over it (`launch.platform_job`) and asks the API what an earlier
run left (`launch.submit`).

Built so far: `--dry-run` (what would be deleted and created). Submitting, waiting for the old
pods, following the Job and its logs, and the signals are not built yet (docs/launch.md).

No `from __future__ import annotations` here (see `app`).
"""

import dataclasses
import os
from typing import Annotated, Optional

import typer

from ascend_node.cli.app import FOR_THE_OPERATOR, app, debug_on, exit_codes, out
from ascend_node.cli.options import Debug, integer


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
    dry_run: Annotated[bool, typer.Option(
        "--dry-run", help="Print the Jobs an earlier run left that would be deleted, and the "
        "Job that would be created; change nothing")] = False,
    debug: Debug = False,
) -> None:
    """Run a Volcano Job for a pipeline step (cube-studio): the earlier run's Jobs, the Job."""
    with exit_codes(debug_on(debug)):
        from ascend_node.errors import UsageError
        from ascend_node.kube.client import Client
        from ascend_node.kube.config import from_kubeconfig, in_cluster
        from ascend_node.launch.platform_env import FormFields, read_request
        from ascend_node.launch.platform_job import overlay
        from ascend_node.launch.submit import dry_run_text, earlier_jobs
        from ascend_node.manifest import ManifestParams, render_job

        if kind not in ("training", "mindie"):
            raise UsageError(f"--kind {kind!r} is not one of training, mindie",
                             "use --kind training or --kind mindie")
        if not dry_run:
            raise UsageError("launch without --dry-run is not built yet: it would submit the "
                             "Job and follow it to its end", "use --dry-run (docs/launch.md)")
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
        out(dry_run_text(deletions, job), end="")
