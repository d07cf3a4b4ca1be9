"""`ascend-node launch`'s own bad inputs, before any API call (docs/bad-inputs.md)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest


def launch(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items()
             if not k.startswith(("KFJ_", "KUBERNETES_", "ASCEND_NODE_"))}
    return subprocess.run([sys.executable, "-m", "ascend_node", "launch", *args],
                          capture_output=True, text=True, timeout=60, env={**clean, **env})


@pytest.mark.parametrize("args, env, code, first", [
    (["--until", "never"], {}, 2,
     "ascend-node: error: --until 'never' is not one of ended, serving"),
    (["--timeout", "0"], {}, 2, "ascend-node: error: --timeout 0 is out of range"),
    (["--dry-run", "--kind", "pd"], {}, 2,
     "ascend-node: error: --kind 'pd' is not one of training, mindie, mindie-pd"),
    (["--dry-run", "--command", "python3 t.py", "--", "python3", "t.py"], {}, 2,
     "ascend-node: error: --command and a command after -- both given"),
    (["--dry-run", "--peer-timeout", "0"], {}, 2,
     "ascend-node: error: --peer-timeout 0 is out of range"),
    (["--dry-run", "--num_worker", "two"], {}, 2,
     "ascend-node: error: --num_worker 'two' is not an integer"),
    (["--dry-run", "--num_worker", "0"], {}, 2,
     "ascend-node: error: --num_worker 0 is out of range"),
    (["--dry-run"], {"KFJ_TASK_RESOURCE_GPU": "8(nvidia)"}, 1,
     "ascend-node: error: KFJ_TASK_RESOURCE_GPU='8(nvidia)' asks for nvidia accelerators; "
     "ascend-node runs Ascend NPU jobs"),
])
def test_a_bad_input_is_one_line_and_its_exit_code(args: list[str], env: dict[str, str],
                                                   code: int, first: str) -> None:
    proc = launch(*args, env=env)
    assert proc.returncode == code, proc.stderr
    lines = proc.stderr.splitlines()
    assert lines[0] == first
    assert lines[1].startswith("  hint: ")


def test_without_a_cluster_the_error_is_one_line(tmp_path: Path) -> None:
    proc = launch("--dry-run", "--kubeconfig", str(tmp_path / "none"), "--command", "x",
                  env={"KFJ_TASK_NAME": "t"})
    assert proc.returncode == 1
    assert proc.stderr.splitlines()[0].startswith("ascend-node: error: cannot read kubeconfig")


@pytest.mark.parametrize("args, first", [
    (["--launcher-rbac", "launcher"], "ascend-node: error: --launcher-rbac needs --namespace"),
    (["--launcher-rbac", "Launcher", "--namespace", "ns"],
     "ascend-node: error: --launcher-rbac 'Launcher' is not a DNS-1123 label"),
])
def test_launcher_rbac_bad_inputs(args: list[str], first: str) -> None:
    proc = subprocess.run([sys.executable, "-m", "ascend_node", "manifest", *args],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    assert proc.stderr.splitlines()[0] == first


def test_launcher_rbac_renders_only_the_launchers_objects() -> None:
    import json

    proc = subprocess.run([sys.executable, "-m", "ascend_node", "manifest", "--launcher-rbac",
                           "launcher", "--namespace", "ns", "--json"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    items = json.loads(proc.stdout)["items"]
    assert [i["kind"] for i in items] == ["ServiceAccount", "Role", "RoleBinding"]
    rules = {(r["apiGroups"][0], r["resources"][0]): r["verbs"] for r in items[1]["rules"]}
    assert rules[("batch.volcano.sh", "jobs")] == ["get", "list", "watch", "create", "delete"]
    assert ("", "secrets") not in rules and ("", "pods") in rules
    assert "delete" not in rules[("", "pods")]
