"""Documents of the pre-flight: what a member publishes about its devices' health, and
the reachability results and verdict (each with one writer, like every document on the
shared volume).

Kept out of `MemberData` on purpose: `MemberData.digest()` decides whether a restarted
container gets its table back, and a net health that turns from Init to Success must not
make a pod look re-created.
"""

from __future__ import annotations

from typing import Literal, Optional

from pydantic import BaseModel, ConfigDict, Field

_ID = r"^[A-Za-z0-9_.:-]{1,128}$"


class DeviceHealth(BaseModel):
    """One device as `hccn_tool -link/-net_health/-tls -g` reported it (None = unknown)."""

    model_config = ConfigDict(defer_build=True, extra="forbid", frozen=True)
    device_id: int = Field(ge=0, le=63)
    link: Optional[str] = Field(default=None, max_length=32)
    health: Optional[str] = Field(default=None, max_length=64)
    tls: Optional[int] = Field(default=None, ge=0, le=9)
    unknown: str = Field(default="", max_length=500)  # why a probe gave no value


class NodeHealth(BaseModel):
    """What HCCL needs every node to agree on, as one member sees its own devices."""

    model_config = ConfigDict(defer_build=True, extra="forbid", frozen=True)
    ip_family: Literal[4, 6]
    devices: tuple[DeviceHealth, ...] = Field(max_length=64)


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
