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


class NodeHealth(BaseModel):
    """What HCCL needs every node to agree on, as one member sees its own devices."""

    model_config = ConfigDict(defer_build=True, extra="forbid", frozen=True)
    ip_family: Literal[4, 6]
    devices: tuple[DeviceHealth, ...] = Field(max_length=64)
