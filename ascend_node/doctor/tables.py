"""Checks of the rank table in use: the file, its content, this node's entry, its age.

The table in use is the one the environment names (RANK_TABLE_FILE, RANKTABLEFILE) or else
the state-dir copy `boot` wrote; it is judged against the file and document rules of
`ascend_node.ranktable`, against this node's live device addresses, and against the run's
current table on the shared volume.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional, Union

from ascend_node.discover.netcheck import parse_ip
from ascend_node.doctor.local import DeviceState
from ascend_node.doctor.report import CheckResult, Finding, skip, verdict
from ascend_node.errors import AscendNodeError
from ascend_node.ranktable import Problem, local_server
from ascend_node.rendezvous.models import AttemptDoc, OutcomeDoc
from ascend_node.rendezvous.seal import RendezvousKey
from ascend_node.rendezvous.store import (
    Invalid,
    Missing,
    RunPaths,
    Valid,
    read_bytes_nofollow,
    read_doc,
)


@dataclass(frozen=True)
class TableInUse:
    path: Optional[Path]
    source: str  # "RANK_TABLE_FILE", "RANKTABLEFILE" or "state dir"
    required: bool  # named by the environment: absence is a failure


def table_in_use(environ: Mapping[str, str], state_dir: Path) -> TableInUse:
    for var in ("RANK_TABLE_FILE", "RANKTABLEFILE"):
        value = environ.get(var, "").strip()
        if value:
            return TableInUse(Path(value), var, True)
    local = state_dir / "ranktable.json"
    if os.path.lexists(local):
        return TableInUse(local, "state dir", False)
    return TableInUse(None, "state dir", False)


def check_table_file(where: TableInUse, problems: Sequence[Problem]) -> CheckResult:
    """`ranktable.file`: the file rules MindIE applies before it parses (mode <= 0640,
    owner, not a symlink, path characters, size)."""
    if where.path is None:
        return skip("ranktable.file", "no rank table in use yet (RANK_TABLE_FILE unset, no "
                  "state-dir copy): bootstrap has not completed here")
    findings = [Finding("fail", p.message, _file_fix(p.message, where.path))
                for p in problems if p.path == "file"]
    return verdict("ranktable.file", findings,
                   f"{where.path} (from {where.source}): regular file, mode and owner accepted")


def _file_fix(message: str, path: Path) -> str:
    if "mode" in message:
        return f"chmod 640 {path} (MindIE requires 0640 or stricter)"
    if "owned by" in message:
        return "give the file to the uid that runs the server (--file-owner for an init container)"
    if "symlink" in message:
        return f"replace the link {path} with a copy of the file"
    if "cannot be read" in message:
        return "run `ascend-node ranktable` (or boot) to write it, or fix RANK_TABLE_FILE"
    return "rewrite it with `ascend-node ranktable`"


def check_table_content(
    where: TableInUse, problems: Sequence[Problem], target: str, readable: bool = True,
) -> CheckResult:
    """`ranktable.valid`: the table passes HCCL's (and for MindIE, MindIE's) rules."""
    if where.path is None:
        return skip("ranktable.valid", "no rank table in use yet")
    if not readable:
        return skip("ranktable.valid", "content not checked: the file cannot be read "
                  "(see ranktable.file)")
    findings = [Finding("fail", f"{p.path}: {p.message}",
                        f"`ascend-node validate --for {target} {where.path}` lists every "
                        "problem; regenerate the table with `ascend-node ranktable`")
                for p in problems if p.path != "file"]
    return verdict("ranktable.valid", findings, f"valid for {target}")


def check_table_member(
    table: Optional[Mapping[str, Any]], pod_ip: Optional[str], states: Sequence[DeviceState],
) -> CheckResult:
    """`ranktable.member`: this node's entry is in the table (container_ip = pod IP) and
    lists exactly its devices with their live addresses (HCCL EI0014 otherwise)."""
    cid = "ranktable.member"
    if table is None:
        return skip(cid, "no readable rank table to look into")
    if not pod_ip:
        return CheckResult(cid, "warn", "this node's pod IP is unknown (see node.identity)")
    try:
        server = local_server(table, pod_ip)
    except AscendNodeError as exc:
        return CheckResult(cid, "fail", exc.cause, exc.hint)
    if server is None:
        listed = [str(s.get("container_ip")) for s in table.get("server_list", [])
                  if isinstance(s, dict)]
        return CheckResult(
            cid, "fail", f"no server has container_ip {pod_ip} (this pod's IP); the table "
            f"lists {', '.join(listed[:8]) or 'none'}",
            "the table was built for other pods (a re-created pod gets a new IP): run "
            "`ascend-node ranktable` again on every node")
    findings = []
    rows = {str(d.get("device_id")): str(d.get("device_ip", ""))
            for d in server.get("device", []) if isinstance(d, dict)}
    live = {str(s.device_id): s for s in states}
    if set(rows) != set(live):
        findings.append(Finding(
            "fail", f"the table lists devices {','.join(sorted(rows, key=_num))} for this "
            f"node, but it uses {','.join(sorted(live, key=_num))}",
            "regenerate the table with `ascend-node ranktable` on every node"))
    for did, table_ip in sorted(rows.items(), key=lambda kv: _num(kv[0])):
        state = live.get(did)
        if state is not None and state.ip and parse_ip(state.ip) != parse_ip(table_ip):
            findings.append(Finding(
                "fail", f"device {did}: the table says {table_ip}, the NIC has {state.ip} "
                "(HCCL EI0014)", "regenerate the table with `ascend-node ranktable`"))
    return verdict(cid, findings, f"this node ({pod_ip}) is in the table with "
                   f"{len(rows)} devices matching the live addresses")


def _num(text: str) -> int:
    return int(text) if text.isdigit() else 1 << 30


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@dataclass(frozen=True)
class RunState:
    """What the shared volume says about the run's current table (gathered)."""

    shared_table: Union[bytes, Missing, Invalid, None]  # None: no shared dir / run id
    attempt: Optional[AttemptDoc] = None
    outcome: Optional[OutcomeDoc] = None
    note: str = ""


def read_run_state(paths: Optional[RunPaths], key: Optional[RendezvousKey] = None
                   ) -> RunState:
    """`key`: the job's rendezvous key, when it has one (documents are then signed)."""
    if paths is None:
        return RunState(None, note="no shared directory or run id configured")
    table = read_bytes_nofollow(paths.shared_table)
    got = read_doc(paths.attempt_file, AttemptDoc, paths.run_id, key)
    if not isinstance(got, Valid):
        note = got.describe() if isinstance(got, Invalid) else "no attempt file"
        return RunState(table, note=note)
    out = read_doc(paths.outcome(got.doc.attempt_id), OutcomeDoc, paths.run_id, key)
    return RunState(table, got.doc, out.doc if isinstance(out, Valid) else None)


def check_table_stale(
    where: TableInUse, local: Optional[bytes], run: RunState, shared_path: Optional[Path],
) -> CheckResult:
    """`ranktable.stale`: the table in use is the run's current one: same sha256 as the
    shared table and as the current attempt's outcome (a restarted job or a re-created
    pod leaves an older table behind, and HCCL then waits for peers that moved)."""
    cid = "ranktable.stale"
    fix = ("run `ascend-node ranktable` (or restart the pod through `boot`) so this node "
           "takes the current table")
    if where.path is None or local is None:
        return skip(cid, "no rank table in use yet")
    if run.shared_table is None:
        return skip(cid, f"not compared: {run.note}")
    mine = _sha(local)
    findings = []
    if isinstance(run.shared_table, bytes) and _sha(run.shared_table) != mine:
        findings.append(Finding(
            "fail", f"{where.path} (sha256 {mine[:12]}) differs from the run's shared table "
            f"{shared_path} (sha256 {_sha(run.shared_table)[:12]})", fix))
    elif isinstance(run.shared_table, Invalid):
        findings.append(Finding("warn", f"shared table {run.shared_table.describe()}",
                                "run `ascend-node clean` and restart the job"))
    if run.attempt is not None:
        aid = run.attempt.attempt_id
        if run.outcome is None:
            findings.append(Finding(
                "warn", f"attempt {aid} of the run is still assembling; {where.path} comes "
                "from an earlier attempt and will be replaced", fix))
        elif run.outcome.result == "abort":
            findings.append(Finding(
                "fail", f"the current attempt {aid} was aborted ({run.outcome.reason}); "
                f"{where.path} comes from an earlier attempt", fix))
        elif run.outcome.ranktable_sha256 != mine and not findings:
            findings.append(Finding(
                "fail", f"{where.path} (sha256 {mine[:12]}) is not the table of the current "
                f"attempt {aid} (sha256 {run.outcome.ranktable_sha256[:12]})", fix))
    current = f"attempt {run.attempt.attempt_id}" if run.attempt else "the shared table"
    return verdict(cid, findings, f"sha256 {mine[:12]} is the table of {current}")
