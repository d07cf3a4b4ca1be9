"""What `simulate` prints: one line per server, each failure's cause with its log, the
verdict; or the same as one JSON document.

A failure is shown as the agent said it (`ascend-node: error: <cause>` and its hint, from
the node's stderr), grouped when several nodes say the same (64 nodes ending with one
exit 5 print it once), with the path of each node's log while the workspace exists.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Optional

from ascend_node.report.failures import FailureGroup, group_failures, who
from ascend_node.sim.cluster import SimReport, pod_ip, server_summary

# Columns of the per-node breakdown, in the order a bootstrap goes through them
# (`preflight` is boot's pings after the table, before the install).
PHASE_COLUMNS = ("startup", "discovery", "rendezvous", "outputs", "preflight", "install",
                 "set_env", "config")


Failure = FailureGroup


def failures(report: SimReport) -> list[FailureGroup]:
    """The failing nodes grouped by what they said (as `report` groups them)."""
    return group_failures((r.index, r.exit_code, r.cause, r.hint)
                          for r in report.results if r.exit_code != 0)


def warning_groups(report: SimReport) -> list[FailureGroup]:
    """Every warning the nodes gave, with the nodes that gave it (grouped as failures)."""
    return group_failures((r.index, 0, text, "") for r in report.results
                          for text in r.warnings)


def _logs(report: SimReport, nodes: tuple[int, ...]) -> Optional[str]:
    """`<workspace>/node-2/stderr.txt`, or `<workspace>/node-{0,1,3}/stderr.txt` for several
    (a shell expands it); None once the workspace is gone."""
    if report.workspace is None or not report.workspace_kept:
        return None
    one = {r.index: r for r in report.results}
    paths = {one[n].log for n in nodes}
    if len(paths) == 1:
        return str(paths.pop())
    return str(report.workspace / f"node-{{{','.join(str(n) for n in nodes)}}}" / "stderr.txt")


def _shared_dir_exists(report: SimReport) -> bool:
    if report.workspace is None or report.workspace_kept:
        return True
    return report.workspace not in report.shared_dir.parents and \
        report.shared_dir != report.workspace


def table_line(report: SimReport, table_out: Optional[Path] = None) -> Optional[str]:
    """`rank table v1.2 (A3, 2 super pods): <path> ...`; None without a table. Where it
    is: the shared volume's copy while it exists, the `--table-out` file when one was
    written (never the advice to pass `--table-out` to someone who did)."""
    if not report.table_text:
        return None
    what = f"rank table v{report.table_version or '?'}"
    if report.spec.a3:
        try:
            pods = len(json.loads(report.table_text).get("super_pod_list") or [])
        except (ValueError, AttributeError):
            pods = 0
        what += f" (A3, {pods} super pod{'s' if pods != 1 else ''})"
    where = "--json prints it, --table-out FILE copies it"
    if table_out is not None:
        where = f"copied to {table_out}; --json prints it"
    if _shared_dir_exists(report):
        path = report.shared_dir / f"ranktable-{report.spec.run_id}.json"
        return f"{what}: {path} ({where})"
    return f"{what}: {where}"


def workspace_line(report: SimReport, keep: Optional[bool]) -> Optional[str]:
    """Where the node logs and state dirs are, when they were kept."""
    if report.workspace is None or not report.workspace_kept:
        return None
    why = "" if keep else " because a node failed (--no-keep removes it)"
    return (f"workspace kept{why}: {report.workspace} (node-N/stderr.txt: node N's log, "
            "node-N/state: its state dir)")


def format_report(report: SimReport, keep: Optional[bool] = True,
                  table_out: Optional[Path] = None) -> str:
    """One line per server (where it sits in the table, its exit, where its time went),
    each failure with its cause, hint and log, the verdict, then where the table and the
    workspace are."""
    by_index = {r.index: r for r in report.results}
    phases = {r.index: r.phases() for r in report.results}
    columns = [p for p in PHASE_COLUMNS if any(p in ph for ph in phases.values())]
    header = (f"{'node':>5}  {'server':<15} {'pod IP':<15} {'devices':>7} {'ranks':>9} "
              f"{'exit':>4} {'seconds':>7}" + "".join(f" {c:>10}" for c in columns))
    lines = [header]
    for index in range(report.spec.nodes):
        r = by_index.get(index)
        if r is None:
            if index in report.spec.absent:
                lines.append(f"{index:>5}  {'-':<15} {pod_ip(index):<15} "
                             f"{report.spec.devices:>7} {'-':>9} absent (never started)")
            continue
        row = server_summary(report.table_text, r, report.spec.devices)
        ph = phases[index]
        lines.append(
            f"{index:>5}  {row['server'] or '-':<15} {row['pod_ip'] or '-':<15} "
            f"{row['devices']:>7} {row['ranks'] or '-':>9} {r.exit_code:>4} "
            f"{r.seconds:>7.2f}"
            + "".join(f" {ph[c]:>10.3f}" if c in ph else f" {'-':>10}" for c in columns))
    for failure in failures(report):
        lines.append(failure.line())
        if failure.hint:
            lines.append(f"  hint: {failure.hint}")
        logs = _logs(report, failure.nodes)
        if logs:
            lines.append(f"  {'log' if len(failure.nodes) == 1 else 'logs'}: {logs}")
    for warned in warning_groups(report):
        lines.append(f"warning: {who(warned.nodes)}: {warned.cause}")
    lines.append(verdict_line(report))
    for extra in (table_line(report, table_out), workspace_line(report, keep)):
        if extra:
            lines.append(extra)
    return "\n".join(lines)


def verdict_line(report: SimReport) -> str:
    """`3 nodes x 4 NPUs: 2 ok, 1 failed, 1 warning, identical tables on every node, ...`:
    the counts first, then what the tables say (never "identical" alone when a node
    failed after getting it, in its pre-flight or hand-over)."""
    tables = [r.local_table() for r in report.results]
    held = {t for t in tables if t is not None}
    holding = sum(t is not None for t in tables)
    failed = sum(r.exit_code != 0 for r in report.results)
    if report.identical and failed:
        verdict = (f"identical tables on every node, but {failed} failed after getting it")
    elif report.identical:
        verdict = "identical tables on every node"
    elif len(held) > 1:
        verdict = "TABLES DIFFER between nodes"
    else:
        verdict = f"{holding}/{len(tables)} nodes hold the table"
    counts = [f"{sum(r.exit_code == 0 for r in report.results)} ok"]
    if failed:
        counts.append(f"{failed} failed")
    if report.spec.absent:
        counts.append(f"{len(report.spec.absent)} absent")
    warned = len(warning_groups(report))
    if warned:
        counts.append(f"{warned} warning{'s' if warned != 1 else ''}")
    where = f"; shared dir {report.shared_dir}" if _shared_dir_exists(report) else ""
    return (f"{report.spec.nodes} nodes x {report.spec.devices} NPUs: "
            f"{', '.join(counts)}, {verdict}, {report.wall_seconds:.2f} s wall{where}")


def report_json(report: SimReport) -> dict[str, Any]:
    """The `--json` document (without schema_version, which the CLI adds)."""
    by_index = {r.index: r for r in report.results}
    rows: list[dict[str, Any]] = []
    for index in range(report.spec.nodes):
        r = by_index.get(index)
        if r is None:
            rows.append({"node": index, "absent": True, "exit_code": None, "seconds": None,
                         "cause": None, "hint": None, "message": None, "log": None})
            continue
        failed = r.exit_code != 0
        kept = report.workspace_kept or report.workspace is None
        rows.append({"node": r.index, "absent": False, "exit_code": r.exit_code,
                     "seconds": round(r.seconds, 3),
                     "cause": (r.cause or None) if failed else None,
                     "hint": (r.hint or None) if failed else None,
                     "message": (r.cause or None) if failed else None,  # the older name
                     "log": str(r.log) if kept else None,
                     "warnings": list(r.warnings),
                     **server_summary(report.table_text, r, report.spec.devices),
                     "phases": r.phases()})
    return {
        "nodes": report.spec.nodes, "devices_per_node": report.spec.devices,
        "a3": report.spec.a3, "table_version": report.table_version,
        "absent": sorted(report.spec.absent),
        "bad_devices": [b.text for b in report.spec.bad_devices],
        "shared_dir": str(report.shared_dir) if _shared_dir_exists(report) else None,
        "workspace": str(report.workspace) if report.workspace else None,
        "workspace_kept": report.workspace_kept,
        "ok": report.ok, "identical_tables": report.identical,
        "warnings": [{"nodes": list(w.nodes), "warning": w.cause}
                     for w in warning_groups(report)],
        "wall_seconds": round(report.wall_seconds, 3),
        "results": rows,
        "ranktable": json.loads(report.table_text) if report.table_text else None,
    }


__all__ = ["PHASE_COLUMNS", "Failure", "failures", "format_report", "report_json",
           "table_line", "verdict_line", "warning_groups", "workspace_line"]
