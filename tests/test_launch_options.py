"""`launch` creates the Job `manifest` renders (issue 39: "every `manifest` option"; "the Job is
the one `manifest` renders"): for a table of option sets, the Job `launch --dry-run` would
create is `manifest --json`'s Job for the same options, but for what the platform adds (its
`project` annotation). The API is not asked for anything but the earlier run's Jobs, which this
test answers with none (the kube-marked tests run the whole command on the real API server).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from ascend_node.cli import app

COMMON = ["--name", "job", "--namespace", "ns", "--run-id", "r1", "--image", "reg/img:1"]
CASES: dict[str, list[str]] = {
    "mindie-4-a3": ["--kind", "mindie", "--nodes", "4", "--a3", "--pvc", "model"],
    "mindie-https": ["--kind", "mindie", "--https", "--tls-secret", "t", "--pvc", "model"],
    "mindie-user-init": ["--kind", "mindie", "--run-as-user", "1001", "--init-container",
                         "--init-image", "reg/agent:1", "--pvc", "model", "--load-timeout",
                         "600", "--model-name", "qwen"],
    "mindie-kube-key": ["--kind", "mindie", "--rendezvous", "kube", "--model-dir", "/opt/w",
                        "--rendezvous-key-secret", "k", "--queue", "q",
                        "--no-driver-mounts", "--rdma-resource", "rdma/hca"],
    "mindie-model-pvc": ["--kind", "mindie", "--pvc", "shared", "--model-pvc", "w",
                         "--model-dir", "/mnt/weights/q", "--npus-per-node", "4",
                         "--npu-resource", "x.io/npu", "--model-path", "/mnt/data"],
    "training-msrun": ["--kind", "training", "--nodes", "3", "--pvc", "model",
                       "--msrun-log-dir", "/mnt/model/log", "--bind-core", "--master-port",
                       "9000", "--", "python", "train.py"],
    "training-torch-kube": ["--kind", "training", "--launcher", "torch", "--", "torchrun",
                            "t.py"],
    "pd": ["--kind", "mindie-pd", "--pvc", "model", "--prefill", "2", "--decode-pods", "2",
           "--prefill-pods", "1", "--run-as-user", "1001"],
    "pd-kube": ["--kind", "mindie-pd", "--rendezvous-key-secret", "k", "--model-dir", "/opt/w"],
}
# manifest's --timeout (the agent's peer timeout) is launch's --peer-timeout.
TIMEOUT_CASE = (["--kind", "mindie", "--pvc", "model", "--timeout", "600"],
                ["--kind", "mindie", "--pvc", "model", "--peer-timeout", "600"])

KUBECONFIG = """apiVersion: v1
kind: Config
current-context: c
clusters: [{name: c, cluster: {server: "https://127.0.0.1:1"}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: c, context: {cluster: c, user: u, namespace: ns}}]
"""


def _split(args: list[str]) -> tuple[list[str], list[str]]:
    cut = args.index("--") if "--" in args else len(args)
    return args[:cut], args[cut:]


def manifest_job(args: list[str]) -> dict[str, Any]:
    own, command = _split(args)
    # manifest's default without --pvc is the volume rendezvous on `model`; launch's is the
    # API's: give manifest the launch default explicitly.
    if "--pvc" not in own and "--rendezvous" not in own:
        own = [*own, "--rendezvous", "kube"]
    result = CliRunner().invoke(app, ["manifest", *COMMON, *own, "--json", *command])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    items = doc["items"] if doc["kind"] == "List" else [doc]
    (job,) = [item for item in items if item["kind"] == "Job"]
    return job


def launch_job(args: list[str], tmp_path: Path,
               monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    import ascend_node.launch.submit as submit

    monkeypatch.setattr(submit, "earlier_jobs", lambda *a, **k: [])
    for var in ("KUBERNETES_SERVICE_HOST", "KUBECONFIG", "GPU_RESOURCE_NAME",
                "RDMA_RESOURCE_NAME"):
        monkeypatch.delenv(var, raising=False)
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(KUBECONFIG)
    own, command = _split(args)
    result = CliRunner().invoke(app, ["launch", "--dry-run", "--kubeconfig", str(kubeconfig),
                                      *COMMON, *own, *command])
    assert result.exit_code == 0, result.output
    job = yaml.safe_load(result.stdout.split("# would create:\n", 1)[1])
    assert job["metadata"].pop("annotations") == {"project": "public"}  # the platform's
    return dict(job)


@pytest.mark.parametrize("case", sorted(CASES))
def test_launch_creates_the_job_manifest_renders(case: str, tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    assert launch_job(CASES[case], tmp_path, monkeypatch) == manifest_job(CASES[case])


def test_the_agents_peer_timeout_is_launchs_peer_timeout(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    manifest_args, launch_args = TIMEOUT_CASE
    assert launch_job(launch_args, tmp_path, monkeypatch) == manifest_job(manifest_args)


def test_the_pd_job_carries_the_run_id_label(tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    job = launch_job(CASES["pd"], tmp_path, monkeypatch)
    assert job["metadata"]["labels"]["run-id"] == "r1"
    assert {t["template"]["metadata"]["labels"]["run-id"] for t in job["spec"]["tasks"]} == {
        "r1"}


def test_launch_takes_every_manifest_option() -> None:
    """Every flag of `manifest` is a flag of `launch` (the peer timeout renamed; the output
    switch and `--launcher-rbac`, which renders no Job, left out)."""
    import typer.main

    group: Any = typer.main.get_command(app)

    def flags(name: str) -> set[str]:
        return {opt for param in group.commands[name].params
                for opt in [*param.opts, *param.secondary_opts]}

    missing = flags("manifest") - flags("launch") - {"--json", "--launcher-rbac", "--timeout"}
    assert missing == set()
    assert "--peer-timeout" in flags("launch")
