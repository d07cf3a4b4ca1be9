"""The PD service on the shared volume: who the coordinators and the controller are, how far
each instance's rank table is, and the global table made from them.

One writer per file, as everywhere on the volume: each coordinator (and the controller's
pod) publishes its own address document `<shared>/.ascend-node/<run>/pd/<task>-<i>.json`;
each instance's node 0 writes its instance's outcome through the ordinary rendezvous (run
id `<run>-<task>`); only the controller pod's `pd-table` writes the global table. An
instance counts as complete when its *current* attempt has a table outcome: after a restart
node 0 opens a new attempt, the old table stops counting at once (the controller sees the
instance's nodes removed) and the new one counts when it is final (added back).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Optional, Union

from pydantic import BaseModel, ConfigDict, Field

from ascend_node.discover.identity import read_pod_ip
from ascend_node.errors import ConfigError
from ascend_node.pd.global_table import Instance, ServicePod, build_global_table
from ascend_node.pd.motor_rules import InstanceFlags
from ascend_node.pd.roles import PdIdentity
from ascend_node.ranktable import validate_rank_table
from ascend_node.rendezvous.models import AttemptDoc, MemberDoc, OutcomeDoc
from ascend_node.rendezvous.seal import RendezvousKey
from ascend_node.rendezvous.store import Invalid, Missing, RunPaths, Valid, read_doc, write_doc

log = logging.getLogger("ascend_node.pd")
_ID = r"^[A-Za-z0-9_.:-]{1,128}$"
GLOBAL_TABLE_NAME = "global_ranktable.json"


class ServicePodDoc(BaseModel):
    """`pd/<task>-<i>.json`: a coordinator's or the controller's addresses (its own only)."""

    model_config = ConfigDict(defer_build=True, extra="forbid", frozen=True)
    schema_version: Literal[1] = 1
    kind: Literal["pd_pod"] = "pd_pod"
    run_id: str = Field(pattern=_ID)
    task: Literal["coordinator", "controller"]
    place: int = Field(ge=0, le=1)
    pod_ip: str = Field(min_length=1, max_length=64)
    host_ip: str = Field(min_length=1, max_length=64)
    incarnation: str = Field(pattern=_ID)


def pd_dir(shared_dir: Path, run_id: str) -> Path:
    return RunPaths(shared_dir, run_id).root / "pd"


def global_table_path(shared_dir: Path, run_id: str) -> Path:
    """Where `pd-table` writes the global table: a plain path the controller's check accepts
    (no `..`, no symlink), on the volume the controller pod mounts."""
    return pd_dir(shared_dir, run_id) / GLOBAL_TABLE_NAME


def service_pod_doc(run_id: str, me: PdIdentity, environ: Mapping[str, str]) -> ServicePodDoc:
    """What `pd-announce` publishes for this coordinator or controller, on the volume or
    through the API; a server pod or a third coordinator is refused (exit 1)."""
    if me.role not in ("coordinator", "controller"):
        raise ConfigError(f"{me.task} is a server: its addresses reach the global table "
                          "through its instance's rank table", "run pd-announce only in "
                          "the coordinator and controller pods")
    if me.place > 1:
        raise ConfigError(f"{me.task} {me.place}: the controller reads at most 2 "
                          "coordinators", "set the coordinator task's replicas to 1 or 2")
    pod_ip, _ = read_pod_ip(environ, lambda: None)
    host_ip = environ.get("K8S_HOST_IP", "").strip() or pod_ip
    return ServicePodDoc(run_id=run_id, task=me.role, place=me.place,
                         pod_ip=pod_ip, host_ip=host_ip,
                         incarnation=environ.get("POD_UID", "").strip() or "unknown")


def announce(shared_dir: Path, run_id: str, me: PdIdentity, environ: Mapping[str, str],
             key: Optional[RendezvousKey] = None) -> ServicePodDoc:
    """Publish this coordinator's (or controller's) addresses for the global table."""
    doc = service_pod_doc(run_id, me, environ)
    path = pd_dir(shared_dir, run_id) / f"{me.role}-{me.place}.json"
    write_doc(path, doc, shared_dir, key=key)
    return doc


@dataclass(frozen=True)
class InstanceState:
    """How far one instance is: its final table (with its pods' host IPs), or why not."""

    task: str
    table: Optional[dict[str, Any]]
    host_ips: Mapping[str, str]
    waiting: str = ""  # why there is no table yet ("" when there is one)


Seen = dict[str, tuple[str, tuple[int, int, int], "InstanceState"]]
"""What a watcher already read, by task: (attempt id, the outcome file's identity, state)."""


def read_instance(shared_dir: Path, run_id: str, task: str,
                  key: Optional[RendezvousKey] = None, seen: Optional[Seen] = None
                  ) -> InstanceState:
    """The instance's table when its current attempt has one; never raises for what is on
    the volume (a missing, invalid or aborted attempt is a reason to wait).

    With `seen`, an outcome file unchanged since the last look (same attempt, same inode,
    size and mtime: outcomes are written once, by rename) is not read again, nor are its
    members' documents: a watcher's look costs two small reads and a stat per instance."""
    run = f"{run_id}-{task}"
    paths = RunPaths(shared_dir, run)
    attempt = read_doc(paths.attempt_file, AttemptDoc, run, key)
    if not isinstance(attempt, Valid):
        return InstanceState(task, None, {}, _why(attempt, "no attempt yet"))
    aid = attempt.doc.attempt_id
    stamp = _stamp(paths.outcome(aid))
    if seen is not None and stamp is not None:
        known = seen.get(task)
        if known is not None and known[0] == aid and known[1] == stamp:
            return known[2]
    state = _read_outcome(paths, run, task, aid, key)
    if seen is not None and stamp is not None:
        seen[task] = (aid, stamp, state)
    return state


def _stamp(path: Path) -> Optional[tuple[int, int, int]]:
    try:
        info = os.stat(path, follow_symlinks=False)
    except OSError:
        return None
    return info.st_ino, info.st_size, info.st_mtime_ns


def _read_outcome(paths: RunPaths, run: str, task: str, aid: str,
                  key: Optional[RendezvousKey]) -> InstanceState:
    outcome = read_doc(paths.outcome(aid), OutcomeDoc, run, key)
    if not isinstance(outcome, Valid):
        return InstanceState(task, None, {}, _why(outcome, f"attempt {aid} is still open"))
    out = outcome.doc
    if out.result != "table":
        return InstanceState(task, None, {}, f"attempt {aid} aborted: {out.reason}")
    text = out.ranktable_text
    if hashlib.sha256(text.encode()).hexdigest() != out.ranktable_sha256:
        return InstanceState(task, None, {}, f"attempt {aid}'s table does not match its sha256")
    table = json.loads(text)
    problems = validate_rank_table(table, "hccl")
    if problems:
        return InstanceState(task, None, {}, f"attempt {aid}'s table is invalid: {problems[0]}")
    hosts: dict[str, str] = {}
    for record in out.members:
        slot = read_doc(paths.slot(aid, record.global_index), MemberDoc, run, key)
        if isinstance(slot, Valid):
            hosts[slot.doc.data.pod_ip] = slot.doc.data.host_ip
    return InstanceState(task, table, hosts)


def read_service_pods(shared_dir: Path, run_id: str, key: Optional[RendezvousKey] = None
                      ) -> dict[str, list[ServicePod]]:
    """The coordinators and the controller that announced themselves, in place order."""
    found: dict[str, list[ServicePod]] = {"coordinator": [], "controller": []}
    for task in found:
        for place in (0, 1):
            read = read_doc(pd_dir(shared_dir, run_id) / f"{task}-{place}.json",
                            ServicePodDoc, run_id, key)
            if isinstance(read, Valid) and read.doc.task == task:
                found[task].append(ServicePod(read.doc.pod_ip, read.doc.host_ip))
    return found


@dataclass(frozen=True)
class ServiceView:
    """Everything the global table is made of, as read in one pass over the volume."""

    instances: tuple[InstanceState, ...]
    pods: Mapping[str, list[ServicePod]]

    def missing(self) -> list[str]:
        out = [f"{s.task} ({s.waiting})" for s in self.instances if s.table is None]
        if not self.pods.get("coordinator"):
            out.append("the coordinator (no pd-announce yet)")
        return out


def read_service(shared_dir: Path, run_id: str, counts: Mapping[str, int],
                 key: Optional[RendezvousKey] = None, seen: Optional[Seen] = None
                 ) -> ServiceView:
    tasks = [f"{role}-{i}" for role in ("prefill", "decode") for i in range(counts[role])]
    return ServiceView(tuple(read_instance(shared_dir, run_id, t, key, seen) for t in tasks),
                       read_service_pods(shared_dir, run_id, key))


def table_from_view(view: ServiceView, counts: Mapping[str, int], flags: InstanceFlags
                    ) -> Optional[dict[str, Any]]:
    """The global table for what the volume shows, or None before there is a coordinator
    and at least one complete instance (the controller refuses a table without either)."""
    complete = [s for s in view.instances if s.table is not None]
    if not complete or not view.pods.get("coordinator"):
        return None
    instances = []
    for state in complete:
        role, _, index = state.task.partition("-")
        instances.append(Instance(role, int(index), state.table or {},  # type: ignore[arg-type]
                                  state.host_ips))
    return build_global_table(view.pods["coordinator"], view.pods.get("controller", []),
                              instances, counts, flags)  # type: ignore[arg-type]


def _why(read: Union[Missing, Invalid, Valid[Any]], missing: str) -> str:
    return f"invalid: {read.reason}" if isinstance(read, Invalid) else missing
