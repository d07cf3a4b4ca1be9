"""Documents of the pre-flight: the reachability results and verdict (each with one writer,
like every document on the shared volume). What a member publishes about its devices'
health rides in its member document (`ascend_node.discover.health`).
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

_ID = r"^[A-Za-z0-9_.:-]{1,128}$"


class PingRecord(BaseModel):
    """One sampled ping: from a local device to a peer's device, and what came back."""

    model_config = ConfigDict(defer_build=True, extra="forbid", frozen=True)
    source: int = Field(ge=0)
    device_id: int = Field(ge=0, le=63)
    peer: int = Field(ge=0)
    peer_device: int = Field(ge=0, le=63)
    address: str = Field(max_length=64)
    result: Literal["ok", "unreachable", "unknown"]
    detail: str = Field(default="", max_length=500)


class ReachDoc(BaseModel):
    """`reach-<g>.json` in the attempt directory: one node's ping results (that node only).

    `token` is new on every boot, so a verdict can prove it used *this* boot's results.
    """

    model_config = ConfigDict(defer_build=True, extra="forbid", frozen=True)
    schema_version: Literal[1] = 1
    kind: Literal["reach"] = "reach"
    run_id: str = Field(pattern=_ID)
    attempt_id: str = Field(pattern=_ID)
    global_index: int = Field(ge=0)
    token: str = Field(pattern=_ID)
    seconds: float = Field(ge=0)
    pings: tuple[PingRecord, ...] = Field(max_length=4096)


class ReachVerdictDoc(BaseModel):
    """`reach.json` in the attempt directory: node 0's verdict over every node's results."""

    model_config = ConfigDict(defer_build=True, extra="forbid", frozen=True)
    schema_version: Literal[1] = 1
    kind: Literal["reach_verdict"] = "reach_verdict"
    run_id: str = Field(pattern=_ID)
    attempt_id: str = Field(pattern=_ID)
    tokens: dict[int, str]  # node -> token of the results used
    unreachable: tuple[PingRecord, ...] = Field(default=(), max_length=4096)
    warnings: tuple[str, ...] = ()
    missing: tuple[int, ...] = ()
    pings: int = Field(default=0, ge=0)
