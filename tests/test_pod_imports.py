"""The import budget of a pod's commands (issue 30): what each one loads is pinned here.

A pod pays every import at every start, on a busy node and once per pod of a 1,000-pod job.
Timings flake; the list of modules a command imports does not. So each command a pod runs —
`discover`, `ranktable`, `boot` up to its exec, `status` as its probe — is run for real
(`python -X importtime -m ascend_node ...`, one simulated node) and the agent's own modules
and the third-party packages it loaded are compared with the lists below. A new import on a
pod's path fails this test until the list changes with it: a conscious change, reviewed
with its cost (bench/bench_startup.py, bench/bench_floor.py; docs/benchmarks.md).

To update after a deliberate change: run this file with ASCEND_NODE_PRINT_IMPORTS=1 and
paste what it prints.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.multiprocess

THIRD_PARTY = ("pydantic", "pydantic_core", "typer", "click", "psutil", "typing_extensions",
               "annotated_types", "rich", "yaml", "netifaces")


def _imports(args: list[str], env: dict[str, str]
             ) -> tuple[dict[str, list[str]], subprocess.CompletedProcess[str]]:
    done = subprocess.run([sys.executable, "-X", "importtime", "-m", "ascend_node", *args],
                          capture_output=True, text=True, timeout=120, env=env)
    ours: set[str] = set()
    theirs: set[str] = set()
    for line in done.stderr.splitlines():
        if line.startswith("import time:") and "|" in line:
            name = line.rsplit("|", 1)[1].strip()
            if name.startswith("ascend_node"):
                ours.add(name)
            elif name.split(".")[0] in THIRD_PARTY:
                theirs.add(name.split(".")[0])
    return {"ascend_node": sorted(ours), "third_party": sorted(theirs)}, done


def scenarios(tmp: Path) -> dict[str, Any]:
    """Each pod command on one simulated node (fake hccn_tool/npu-smi), as a pod runs it."""
    from ascend_node.sim.cluster import SimSpec, prepare
    from ascend_node.sim.fake_tools import write_node_data

    shared = tmp / "shared"
    shared.mkdir()
    node = prepare(SimSpec(nodes=1, devices=2, run_id="imports", timeout=30), tmp / "w",
                   shared)[0]
    write_node_data(node.data_dir, node.devices)
    node.state_dir.parent.mkdir(parents=True, exist_ok=True)
    env = {**node.env, "ASCEND_NODE_PREFLIGHT": "strict"}
    found = {"discover": _imports(["discover"], env),
             "ranktable": _imports(["ranktable"], env)}
    # boot into `true` after the table (the launcher's env, the exec itself): what a pod
    # loads before its server starts. The ranktable above left the table to reuse.
    found["boot"] = _imports(["boot", "--", "true"], env)
    found["status"] = _imports(["status"], env)
    return found


@pytest.fixture(scope="module")
def measured(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    found = scenarios(tmp_path_factory.mktemp("imports"))
    if os.environ.get("ASCEND_NODE_PRINT_IMPORTS"):
        print(json.dumps({k: v[0] for k, v in found.items()}, indent=1))
    return found


PINNED: dict[str, dict[str, list[str]]] = json.loads(
    (Path(__file__).with_name("pod_imports.json")).read_text())


@pytest.mark.parametrize("command", ["discover", "ranktable", "boot", "status"])
def test_a_pod_command_imports_exactly_its_pinned_list(measured: dict[str, Any],
                                                       command: str) -> None:
    modules, done = measured[command]
    assert done.returncode == 0, done.stderr[-3000:]
    pinned = PINNED[command]
    added = sorted(set(modules["ascend_node"]) - set(pinned["ascend_node"]))
    dropped = sorted(set(pinned["ascend_node"]) - set(modules["ascend_node"]))
    assert (added, dropped) == ([], []), (
        f"`ascend-node {command}` now imports {added} and no longer {dropped}: "
        "update tests/pod_imports.json if that is meant (module docstring)")
    assert modules["third_party"] == pinned["third_party"]


def test_the_probe_stays_small(measured: dict[str, Any]) -> None:
    """status runs every few seconds in every pod: no pydantic, no typer's rich, no psutil
    for a finished bootstrap (tests/test_startup.py holds the why)."""
    modules, _ = measured["status"]
    assert not {"pydantic", "rich", "psutil"} & set(modules["third_party"])
