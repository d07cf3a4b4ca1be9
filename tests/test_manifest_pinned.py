"""`ascend-node manifest`'s output, pinned byte for byte for a table of option sets.

The renderers moved into one package (`ascend_node.jobspec`) that `manifest` and `launch` both
call (issue 39): a user's `manifest | kubectl apply -f -`, and every diff they keep of it, must
not change with that move. The files under tests/golden/manifest/ were rendered by the code
before the move; a deliberate change of a Job regenerates them (`ASCEND_NODE_REPIN=1`) and the
diff shows exactly what changed. The one random value (`--rendezvous-key`'s fresh key) is
masked.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ascend_node.cli import app

GOLDEN = Path(__file__).parent / "golden" / "manifest"
_KEY = re.compile(r'("?key"?: )"?[0-9a-f]{64}"?')

CASES: dict[str, list[str]] = {
    "mindie-default": [],
    "mindie-1": ["--nodes", "1"],
    "mindie-4": ["--nodes", "4", "--name", "llm", "--run-id", "r-7"],
    "mindie-a3": ["--a3"],
    "mindie-a3-8": ["--a3", "--npus-per-node", "8"],
    "mindie-https": ["--https", "--tls-secret", "mindie-tls"],
    "mindie-no-https": ["--no-https"],
    "mindie-user": ["--run-as-user", "1001"],
    "mindie-root": ["--run-as-user", "0"],
    "mindie-init": ["--init-container", "--init-image", "reg/agent:1"],
    "mindie-init-https": ["--init-container", "--https", "--tls-secret", "t"],
    "mindie-init-user": ["--init-container", "--run-as-user", "1001"],
    "mindie-key": ["--rendezvous-key"],
    "mindie-key-secret": ["--rendezvous-key-secret", "k"],
    "mindie-kube": ["--rendezvous", "kube", "--namespace", "ns", "--model-dir", "/opt/w"],
    "mindie-kube-pvc": ["--rendezvous", "kube", "--namespace", "ns", "--pvc", "shared"],
    "mindie-kube-key": ["--rendezvous", "kube", "--namespace", "ns", "--pvc", "shared",
                        "--rendezvous-key"],
    "mindie-site": ["--rdma-resource", "rdma/hca", "--namespace", "ns", "--queue", "q",
                    "--timeout", "600", "--npu-resource", "x.io/npu", "--no-driver-mounts",
                    "--pvc", "data", "--model-path", "/mnt/data", "--image", "reg/m:2"],
    "mindie-model": ["--model-pvc", "w", "--model-dir", "/mnt/weights/q", "--model-name",
                     "qwen", "--load-timeout", "600"],
    "mindie-model-dir": ["--model-dir", "/mnt/model/qwen"],
    "mindie-command": ["--", "mindieservice_daemon", "--flag"],
    "training": ["--kind", "training", "--name", "train", "--", "python", "train.py"],
    "training-1": ["--kind", "training", "--nodes", "1", "--", "python", "train.py"],
    "training-torch": ["--kind", "training", "--launcher", "torch", "--master-port", "29500",
                       "--", "torchrun", "train.py"],
    "training-msrun": ["--kind", "training", "--msrun-log-dir", "/mnt/model/log",
                       "--bind-core", "--master-port", "9000", "--nodes", "4", "--",
                       "run_mindformer.py", "--config", "a.yaml"],
    "training-user": ["--kind", "training", "--run-as-user", "1001", "--a3", "--",
                      "python", "t.py"],
    "training-kube": ["--kind", "training", "--rendezvous", "kube", "--namespace", "ns",
                      "--", "python", "t.py"],
    "pd-default": ["--kind", "mindie-pd", "--name", "pd"],
    "pd-shape": ["--kind", "mindie-pd", "--name", "pd", "--prefill", "2", "--decode", "3",
                 "--prefill-pods", "2", "--decode-pods", "1", "--namespace", "ns"],
    "pd-key": ["--kind", "mindie-pd", "--name", "pd", "--rendezvous-key"],
    "pd-site": ["--kind", "mindie-pd", "--name", "pd", "--run-as-user", "1001", "--a3",
                "--rendezvous-key-secret", "k", "--run-id", "r1", "--pvc", "m",
                "--rdma-resource", "rdma/hca"],
    "launcher-rbac": ["--launcher-rbac", "launcher", "--namespace", "kubeflow"],
}


def render(args: list[str]) -> str:
    result = CliRunner().invoke(app, ["manifest", *args])
    assert result.exit_code == 0, result.output
    return _KEY.sub(r"\1<random key>", result.stdout)


@pytest.mark.parametrize("fmt", ["yaml", "json"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_manifest_output_is_pinned(case: str, fmt: str) -> None:
    given = CASES[case]
    cut = given.index("--") if "--" in given else len(given)  # options before the command
    args = [*given[:cut], *(["--json"] if fmt == "json" else []), *given[cut:]]
    text = render(args)
    path = GOLDEN / f"{case}.{fmt}"
    if os.environ.get("ASCEND_NODE_REPIN") == "1":
        path.write_text(text, encoding="utf-8")
    assert text == path.read_text(encoding="utf-8"), f"{path.name} changed"
