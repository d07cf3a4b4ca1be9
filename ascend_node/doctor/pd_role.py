"""`pd.role`: a PD service pod's place, and the global rank table's state (docs/pd.md).

In a pod of a PD Job (`ASCEND_NODE_PD_TASK` set) doctor names the pod's role and, for a
server, its instance and the run id its instance meets under; then whether the global table
`pd-table` writes is there, whether the controller's rules accept it, and whether this pod is
where the controller will look for it (a server in its instance's group, the coordinator in
group "0", the controller in "1"). Pure: the runner reads the environment and the file.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Optional

from ascend_node.doctor.report import CheckResult
from ascend_node.pd.global_table import group_id_of
from ascend_node.pd.roles import PdIdentity
from ascend_node.ranktable import Problem

VALIDATE = "`ascend-node validate --global {path} --controller-config ms_controller.json`"


def _where(me: PdIdentity, run_id: Optional[str]) -> str:
    if not me.is_server:
        return f"{me.role} (pod {me.place} of {me.task_pods})"
    run = f", meets its peers as run {run_id}-{me.task}" if run_id else ""
    return f"{me.task} pod {me.place} of {me.task_pods} ({me.role} instance {me.instance}{run})"


def expected_group(me: PdIdentity) -> str:
    """The group the builder gives this pod: "0", "1", or its instance's (P from 2, then D)."""
    if me.role == "coordinator":
        return "0"
    if me.role == "controller":
        return "1"
    assert me.instance is not None
    counts = {"prefill": me.counts.get("prefill", 0), "decode": me.counts.get("decode", 0)}
    return group_id_of(me.role, me.instance, counts)  # type: ignore[arg-type]


def check_pd_role(me: Optional[PdIdentity], error: Optional[tuple[str, str]],
                  run_id: Optional[str], table_path: Optional[Path],
                  problems: Optional[Sequence[Problem]], doc: Optional[Mapping[str, Any]],
                  pod_ip: Optional[str]) -> CheckResult:
    """`problems` None: no table at `table_path` yet; `doc` the parsed table when it is
    JSON. `error` (cause, hint) when the pod's PD identity cannot be told."""
    if me is None:
        cause, hint = error or ("the pod's PD identity cannot be told", "")
        return CheckResult("pd.role", "fail", cause, hint)
    where = _where(me, run_id)
    if table_path is None:
        return CheckResult("pd.role", "skip", f"{where}; no shared directory and run id: the "
                           "global table's state is not known")
    if problems is None:
        return CheckResult("pd.role", "warn", f"{where}; no global rank table at {table_path} "
                           "yet", "pd-table (the controller pod's sidecar) writes it once "
                           "every instance is complete and a coordinator has announced "
                           "itself; its log names what it waits for")
    if problems:
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        first = problems[0]
        return CheckResult("pd.role", "fail", f"{where}; the global rank table {table_path} "
                           f"breaks the controller's rules: {first.path}: {first.message}"
                           f"{more}", "the controller ignores it; " +
                           VALIDATE.format(path=table_path) + " lists every problem")
    groups = [g for g in (doc or {}).get("server_group_list", []) if isinstance(g, Mapping)]
    wanted = expected_group(me)
    group = next((g for g in groups if str(g.get("group_id")) == wanted), None)
    listed = group is not None and any(isinstance(s, Mapping) and s.get("server_ip") == pod_ip
                                       for s in group.get("server_list", []))
    summary = f"{where}; global rank table {table_path}: {len(groups)} groups"
    if listed:
        return CheckResult("pd.role", "ok", f"{summary}, this pod (pod IP {pod_ip}) in group "
                           f"{wanted}")
    if group is None and me.is_server:
        return CheckResult("pd.role", "warn", f"{summary}, without group {wanted} "
                           f"({me.task}'s)", f"{me.task}'s table is not complete (restarted, "
                           "or still meeting): pd-table adds its group back when it is")
    return CheckResult("pd.role", "warn", f"{summary}, but group {wanted} does not list this "
                       f"pod's IP {pod_ip}", "the table follows the pods' current addresses: "
                       "pd-table rewrites it within seconds of a change; if this lasts, check "
                       "its log")
