"""`ascend-node report` for a PD service: one timeline per instance (docs/pd.md).

Each instance of a PD service meets as a run of its own (`<run>-<task>`, the identity
`pd.roles.instance_environ` gives its pods), so the service's run id has no attempts of its
own: only its `pd/` directory (the coordinator's and controller's addresses, the global
table). Given such a run id, `report` draws every instance found on the volume, prefill
first, each under its task's name; an instance's own run id still draws it alone.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any, Optional

from ascend_node.errors import AscendNodeError
from ascend_node.report.cli import run_report

_TASK = re.compile(r"(prefill|decode)-(0|[1-9][0-9]{0,3})")


def pd_instance_runs(shared_dir: Path, run_id: str) -> Optional[list[tuple[str, str]]]:
    """[(task, its run id)] of a PD service's instances on the volume, P then D, by index;
    None when `run_id` is not a PD service's (no `pd/` directory)."""
    root = shared_dir / ".ascend-node"
    if not (root / run_id / "pd").is_dir():
        return None
    found = []
    for entry in os.listdir(root):
        task = entry[len(run_id) + 1:] if entry.startswith(run_id + "-") else ""
        match = _TASK.fullmatch(task)
        if match and (root / entry).is_dir():
            found.append((match.group(1) != "prefill", int(match.group(2)), task, entry))
    return [(task, run) for _, _, task, run in sorted(found)]


def run_pd_report(shared_dir: Path, run_id: str, instances: list[tuple[str, str]],
                  width: int = 60) -> tuple[dict[str, Any], str]:
    """(the `--json` document, the text): each instance's timeline under its task's name;
    an instance without records says why."""
    docs: dict[str, Any] = {}
    parts = [f"PD service {run_id}: {len(instances)} instance"
             f"{'s' if len(instances) != 1 else ''} on the volume"
             + ("" if instances else " (none has met yet)")]
    for task, run in instances:
        try:
            doc, text = run_report(shared_dir, run, width=width)
        except AscendNodeError as exc:
            docs[task] = {"run_id": run, "error": exc.cause}
            parts.append(f"== {task} (run {run}): no timeline: {exc.cause}")
            continue
        docs[task] = {"run_id": run, **doc}
        parts.append(f"== {task} (run {run})\n{text}")
    return {"pd": True, "run_id": run_id, "instances": docs}, "\n\n".join(parts)
