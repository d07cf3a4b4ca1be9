"""Documents on the shared volume. Each carries `schema_version` and `kind`.

A reader validates every document before acting on it: a truncated write, a file from
another run or agent version, or something planted by hand is reported, never trusted.
"""

from __future__ import annotations

import hashlib
import json
from typing import Annotated, Literal, Optional, Union

from pydantic import BaseModel, ConfigDict, Field

from ascend_node.discover.health import NodeHealth

SCHEMA_VERSION: Literal[1] = 1
_ID = r"^[A-Za-z0-9_.:-]{1,128}$"


class _Doc(BaseModel):
    model_config = ConfigDict(defer_build=True, extra="forbid", frozen=True)
    schema_version: Literal[1] = SCHEMA_VERSION
    run_id: str = Field(pattern=_ID)


class DeviceRecord(BaseModel):
    model_config = ConfigDict(defer_build=True, extra="forbid", frozen=True)
    device_id: int = Field(ge=0, le=63)
    device_ip: str = Field(min_length=1, max_length=64)
    super_device_id: Optional[int] = Field(default=None, ge=0)  # SDID, A3 SuperPoD only


class MemberData(BaseModel):
    """What the table is built from: the part of a member that must match on restart."""

    model_config = ConfigDict(defer_build=True, extra="forbid", frozen=True)
    global_index: int = Field(ge=0)
    role: Literal["master", "worker"]
    task_index: int = Field(ge=0)
    pod_ip: str = Field(min_length=1, max_length=64)
    host_ip: str = Field(min_length=1, max_length=64)
    devices: tuple[DeviceRecord, ...] = Field(min_length=1, max_length=64)
    super_pod_id: Optional[str] = Field(default=None, pattern=r"^[0-9]{1,10}$")  # A3 only

    def digest(self) -> str:
        # exclude_none: a node outside a super pod keeps the digest it had before the
        # super-pod fields existed.
        text = json.dumps(self.model_dump(mode="json", exclude_none=True), sort_keys=True,
                          separators=(",", ":"))
        return hashlib.sha256(text.encode()).hexdigest()


class MemberDoc(_Doc):
    kind: Literal["member"] = "member"
    attempt_id: str = Field(pattern=_ID)
    incarnation: str = Field(pattern=_ID)
    node_count: int = Field(ge=1)
    master_count: int = Field(ge=0)
    agent_version: str = Field(max_length=64)
    data: MemberData
    job_version: Optional[int] = Field(default=None, ge=0)
    contested: bool = False
    """True when this pod found the slot already holding another pod's document: a twin
    or a re-created pod. Node 0 then gives the other pod a poll to object before it
    completes; an uncontested slot was the first document in it (exclusive create)."""
    health: Optional[NodeHealth] = None  # pre-flight facts; not in the digest (restarts)


class FailureDoc(_Doc):
    """A node that failed locally publishes why, so nobody waits for the timeout."""

    kind: Literal["failure"] = "failure"
    attempt_id: str = Field(pattern=_ID)
    incarnation: str = Field(pattern=_ID)
    global_index: int = Field(ge=0)
    cause: str = Field(max_length=2000)


class ConflictDoc(_Doc):
    """Left in a slot by a pod that saw another live pod overwrite it: two claim one index."""

    kind: Literal["conflict"] = "conflict"
    attempt_id: str = Field(pattern=_ID)
    global_index: int = Field(ge=0)
    incarnations: tuple[str, ...]


SlotDoc = Annotated[Union[MemberDoc, FailureDoc, ConflictDoc], Field(discriminator="kind")]


class AttemptDoc(_Doc):
    """Written by global node 0 only: the attempt everyone must join now."""

    kind: Literal["attempt"] = "attempt"
    attempt_id: str = Field(pattern=_ID)
    opened_by: str = Field(pattern=_ID)
    node_count: int = Field(ge=1)
    master_count: int = Field(ge=0)
    reason: str = Field(default="", max_length=2000)
    conflict: Optional[str] = Field(default=None, max_length=2000)
    job_version: Optional[int] = Field(default=None, ge=0)
    job_instance: Optional[str] = Field(default=None, max_length=253)
    """The Volcano Job (its pod group) the attempt was opened for: its job version
    orders the starts of that Job only (discover.identity `_job_instance`)."""


class TableRecord(BaseModel):
    model_config = ConfigDict(defer_build=True, extra="forbid", frozen=True)
    global_index: int = Field(ge=0)
    incarnation: str = Field(pattern=_ID)
    digest: str = Field(pattern=r"^[0-9a-f]{64}$")
    slot_stamp: Optional[tuple[int, int, int]] = None
    """(inode, size, mtime_ns) of the slot file node 0 built this entry from, as its last
    listing of the attempt directory showed it: a follower accepting the table lists the
    directory once and reads only the slots whose stamp differs or that are gone
    (`decide.changed_since_verdict`), instead of every slot. None in outcomes written
    before the field existed: those slots are all read, as then."""


class OutcomeDoc(_Doc):
    """Written by the assembler once per attempt: the final table, or why there is none."""

    kind: Literal["outcome"] = "outcome"
    attempt_id: str = Field(pattern=_ID)
    result: Literal["table", "abort"]
    members: tuple[TableRecord, ...] = ()
    ranktable_text: str = ""
    ranktable_sha256: str = ""
    reason: str = Field(default="", max_length=8000)
    nodes: tuple[int, ...] = ()
    participants: tuple[str, ...] = ()
    warnings: tuple[str, ...] = Field(default=(), max_length=64)  # pre-flight, for everyone
    failed_by: Optional[str] = Field(default=None, pattern=_ID)
    """An abort caused by one pod's own failure document (a local failure: no IP, a tool
    that failed): that pod's incarnation. A container restart of that same pod which gets
    past the failure knows the abort was its own (docs/rendezvous.md)."""

    def record_for(self, index: int) -> Optional[TableRecord]:
        if 0 <= index < len(self.members) and self.members[index].global_index == index:
            return self.members[index]
        return next((m for m in self.members if m.global_index == index), None)


class ProgressDoc(_Doc):
    """Written by the assembler while it waits, so followers can say who is missing."""

    kind: Literal["progress"] = "progress"
    attempt_id: str = Field(pattern=_ID)
    node_count: int = Field(ge=1)
    present: tuple[int, ...]
    missing: tuple[int, ...]
