"""Which rank-table source this node uses (shared volume or MindCluster's hccl.json), and why.

Read-only: for MindCluster it reads the file once and reports its state (completed,
still `initializing`, half-written), which is the first thing to know when `boot` waits.
"""

from __future__ import annotations

from typing import Union

from ascend_node.doctor.report import CheckResult, ok
from ascend_node.sources.base import SourceChoice
from ascend_node.sources.mindcluster_file import Pending, Ready


def check_table_source(
    choice: SourceChoice, table_version: str, state: Union[Pending, Ready, None]
) -> CheckResult:
    """`state` is the hccl.json read (None when the source is the shared volume)."""
    head = f"rank table from {choice.source} ({choice.why}); --table-version {table_version}"
    if state is None:
        return ok("table.source", head)
    if isinstance(state, Ready):
        servers = state.doc.get("server_list")
        count = len(servers) if isinstance(servers, list) else 0
        return ok("table.source", f"{head}; hccl.json is completed with {count} server(s), "
                  f"version {state.doc.get('version')!r}")
    return CheckResult(
        "table.source", "warn", f"{head}; hccl.json is not usable yet: {state.reason}",
        "MindCluster marks it completed once every pod of the job is running; check the "
        "job's pods and the ascend-operator, or use --table-source volume",
    )
