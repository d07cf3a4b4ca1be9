"""Helpers for tests that start N real agent processes on one shared directory."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Optional

from ascend_node.sim.cluster import NodeResult, SimNode, SimSpec, launch, prepare


def make_nodes(tmp: Path, nodes: int, devices: int = 4, masters: int = 1,
               timeout: float = 20.0, run_id: str = "t", shared: Optional[Path] = None,
               **extra_env: str) -> list[SimNode]:
    """N pods in `tmp/work`, meeting in `shared` (default `tmp/shared`): another job's
    pods on the same volume get their own `tmp` and the first job's `shared`."""
    spec = SimSpec(nodes=nodes, devices=devices, masters=masters, run_id=run_id,
                   timeout=timeout,
                   extra_env={"ASCEND_NODE_PROGRESS_INTERVAL": "1", **extra_env})
    shared = shared or tmp / "shared"
    shared.mkdir(parents=True, exist_ok=True)
    return prepare(spec, tmp / "work", shared)


def run(nodes: list[SimNode], timeout: float = 60.0) -> list[NodeResult]:
    return launch(nodes, timeout)


def table_of(result: NodeResult) -> bytes:
    return (result.state_dir / "ranktable.json").read_bytes()


def shared_table(tmp: Path, run_id: str = "t") -> dict[str, Any]:
    return json.loads((tmp / "shared" / f"ranktable-{run_id}.json").read_text())


def attempt_doc(tmp: Path, run_id: str = "t") -> Optional[dict[str, Any]]:
    path = tmp / "shared" / ".ascend-node" / run_id / "attempt.json"
    return json.loads(path.read_text()) if path.exists() else None


def progress_doc(tmp: Path, run_id: str = "t") -> dict[str, Any]:
    """Node 0's last view of the current attempt: who was present, who missing."""
    attempt = attempt_doc(tmp, run_id)
    assert attempt is not None, "no attempt was opened"
    path = (tmp / "shared" / ".ascend-node" / run_id / "attempts" / attempt["attempt_id"]
            / "progress.json")
    return json.loads(path.read_text())


def codes(results: list[NodeResult]) -> list[int]:
    return [r.exit_code for r in results]


def explain(results: list[NodeResult]) -> str:
    return "\n".join(f"node {r.index} exit {r.exit_code}: {r.stderr[-1500:]}" for r in results)
