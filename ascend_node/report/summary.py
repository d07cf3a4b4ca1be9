"""The node summary: one small document per node per attempt on the shared volume.

Layout: `<shared>/.ascend-node/<run>/timeline/<attempt>/node-<g>.json` (`none` for the
attempt when a node failed before any attempt was opened). Its only writer is node `g`;
it is replaced (atomically) when the node's rendezvous ends and again when `boot` hands
over or fails. Every time in it is on the shared volume's clock (see `record`), so
summaries written by pods on different hosts line up without trusting their clocks.

The writer (`record`) builds the document as plain JSON, so a pod pays for no model
build on its start path; the reader validates it like every shared document (pydantic,
`schema_version`, bounded size), and the tests hold the writer to this model.
"""

from __future__ import annotations

from typing import Annotated, Literal, Optional

from pydantic import BaseModel, ConfigDict, Field

from ascend_node.report.record import (
    MAX_CAUSE,
    MAX_PHASES,
    MAX_WARNING,
    PHASE_PATTERN,
    SummaryState,
)

SCHEMA_VERSION: Literal[1] = 1
_ID = r"^[A-Za-z0-9_.:-]{1,128}$"
# Times are seconds since the epoch on the volume's clock: bounded, finite.
VolumeTime = Annotated[float, Field(ge=0.0, le=1e11, allow_inf_nan=False)]


class PhaseSpan(BaseModel):
    """One event of the node's run: a phase (`discovery`) or a part of one
    (`discovery.hccn_tool`, one per call, with its `device`)."""

    model_config = ConfigDict(defer_build=True, extra="forbid", frozen=True)
    name: str = Field(pattern=PHASE_PATTERN)
    start: VolumeTime
    end: VolumeTime
    outcome: str = Field(default="ok", max_length=32)
    device: Optional[int] = Field(default=None, ge=0, le=63)

    @property
    def seconds(self) -> float:
        return max(0.0, self.end - self.start)


class ClockNote(BaseModel):
    """How this node's clock was put on the volume's: volume time = local time + offset,
    measured once per process with a probe file (`uncertainty`: half its round trip)."""

    model_config = ConfigDict(defer_build=True, extra="forbid", frozen=True)
    offset: float = Field(ge=-1e9, le=1e9, allow_inf_nan=False)
    uncertainty: float = Field(ge=0.0, le=3600.0, allow_inf_nan=False)
    source: Literal["probe", "local"] = "probe"


class NodeSummary(BaseModel):
    """`kind: node-summary`: where one node's time went, on the volume's clock."""

    model_config = ConfigDict(defer_build=True, extra="forbid", frozen=True)
    schema_version: Literal[1] = SCHEMA_VERSION
    kind: Literal["node-summary"] = "node-summary"
    run_id: str = Field(pattern=_ID)
    attempt_id: Optional[str] = Field(default=None, pattern=_ID)
    global_index: int = Field(ge=0, le=65535)
    name: str = Field(max_length=64)  # "worker 36 (node 37)"
    node_count: int = Field(ge=1, le=65536)
    pod_ip: str = Field(default="", max_length=64)
    agent_version: str = Field(default="", max_length=64)
    command: Literal["ranktable", "boot"]
    state: SummaryState  # table: the rendezvous gave the table; exec: handed over
    exit_code: Optional[int] = Field(default=None, ge=0, le=255)  # when the process fails
    cause: str = Field(default="", max_length=MAX_CAUSE)
    warning: str = Field(default="", max_length=MAX_WARNING)  # the run's first (events.warn)
    clock: ClockNote
    container_start: Optional[VolumeTime] = None
    container_start_source: str = Field(default="", max_length=120)
    process_start: Optional[VolumeTime] = None
    published: Optional[VolumeTime] = None  # its slot's mtime
    written: VolumeTime
    phases: tuple[PhaseSpan, ...] = Field(default=(), max_length=MAX_PHASES)

    @property
    def first(self) -> float:
        """The earliest moment this node accounts for."""
        starts = [s for s in (self.container_start, self.process_start) if s is not None]
        starts += [p.start for p in self.phases]
        return min(starts) if starts else self.written

    @property
    def last(self) -> float:
        return max([self.written, *(p.end for p in self.phases)])
