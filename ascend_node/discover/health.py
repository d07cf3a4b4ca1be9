"""The health facts of this node's devices, as a member publishes them beside its data.

Owned by discovery, below both of their readers: the rendezvous carries and validates
them in the member document without interpreting them (`rendezvous.models.MemberDoc.health`),
and the pre-flight gathers them (`preflight.gather`) and judges them on node 0
(`preflight.judge`, handed to the rendezvous as a function by the chain).

Kept out of `MemberData` on purpose: `MemberData.digest()` decides whether a restarted
container gets its table back, and a net health that turns from Init to Success must not
make a pod look re-created.
"""

from __future__ import annotations

from typing import Literal, Optional

from pydantic import BaseModel, ConfigDict, Field


class DeviceHealth(BaseModel):
    """One device as `hccn_tool -link/-net_health/-tls -g` reported it (None = unknown)."""

    model_config = ConfigDict(defer_build=True, extra="forbid", frozen=True)
    device_id: int = Field(ge=0, le=63)
    link: Optional[str] = Field(default=None, max_length=32)
    health: Optional[str] = Field(default=None, max_length=64)
    tls: Optional[int] = Field(default=None, ge=0, le=9)
    unknown: str = Field(default="", max_length=500)  # why a probe gave no value


class Holder(BaseModel):
    """A process `npu-smi info` lists on one of this node's devices (after the wait)."""

    model_config = ConfigDict(defer_build=True, extra="forbid", frozen=True)
    device_id: int = Field(ge=0, le=63)
    pid: int = Field(ge=0)
    name: str = Field(default="", max_length=64)
    memory_mb: int = Field(default=0, ge=0)


class PortHealth(BaseModel):
    """HCCL's host ports on this node: which variable chose them, which are taken."""

    model_config = ConfigDict(defer_build=True, extra="forbid", frozen=True)
    variable: str = Field(max_length=64)
    ports: str = Field(max_length=200)  # `60000-60031`, `auto`
    listening: tuple[int, ...] = Field(default=(), max_length=256)
    busy: tuple[int, ...] = Field(default=(), max_length=256)
    unreserved: str = Field(default="", max_length=400)  # `60000-60031`: ranges, not a list
    ephemeral: str = Field(default="", max_length=32)


class NodeFacts(BaseModel):
    """Node-wide facts of the pre-flight (issue 28): who holds the NPUs, HCCL's host
    ports, the HCCL settings and software versions every node must share. A value the
    node could not find is None, with the reason in `unknown`."""

    model_config = ConfigDict(defer_build=True, extra="forbid", frozen=True)
    holders: Optional[tuple[Holder, ...]] = Field(default=None, max_length=512)
    held_wait: float = Field(default=0.0, ge=0)  # seconds this node waited for holders
    ports: Optional[PortHealth] = None
    hccl: dict[str, str] = Field(default_factory=dict, max_length=16)
    hccl_problems: tuple[str, ...] = Field(default=(), max_length=16)
    cann: Optional[str] = Field(default=None, max_length=64)
    driver: Optional[str] = Field(default=None, max_length=64)
    unknown: tuple[str, ...] = Field(default=(), max_length=16)


class NodeHealth(BaseModel):
    """What HCCL needs every node to agree on, as one member sees its own devices."""

    model_config = ConfigDict(defer_build=True, extra="forbid", frozen=True)
    ip_family: Literal[4, 6]
    devices: tuple[DeviceHealth, ...] = Field(max_length=64)
    node: Optional[NodeFacts] = None  # None: an agent that does not gather them
