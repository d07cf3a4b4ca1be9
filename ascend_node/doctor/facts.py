"""What each node publishes for its peers (`DoctorFacts`) and how peers' facts are read.

Facts go to `<shared>/.ascend-node/<run>/doctor/node-<g>.json`, the only file doctor writes;
peers are read by known name (no directory listing) until all are present and fresh.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Callable, Literal, Optional, Union

from pydantic import BaseModel, ConfigDict, Field

from ascend_node import __version__
from ascend_node.discover.identity import NodeIdentity
from ascend_node.discover.netcheck import unusable_reason
from ascend_node.doctor.local import DeviceState
from ascend_node.doctor.report import Status
from ascend_node.rendezvous.freshness import Freshness
from ascend_node.rendezvous.store import Invalid, Missing, RunPaths, Valid, read_doc

PEER_POLL = 0.2
FACTS_MAX_AGE = 600.0
"""Peer facts older than this (seconds, by the peer's clock) describe an earlier state of
the cluster; doctor waits for fresh ones and, failing that, uses them with a warning."""


class FactDevice(BaseModel):
    model_config = ConfigDict(defer_build=True, extra="forbid", frozen=True)
    device_id: int = Field(ge=0, le=63)
    ip: str = Field(max_length=64)
    netmask: str = Field(max_length=64)
    link: Optional[str] = Field(default=None, max_length=32)
    health: Optional[str] = Field(default=None, max_length=64)
    tls: Optional[int] = None


class DoctorFacts(BaseModel):
    """What one node tells its peers: its devices as the driver reports them."""

    model_config = ConfigDict(defer_build=True, extra="forbid", frozen=True)
    schema_version: Literal[1] = 1
    kind: Literal["doctor_facts"] = "doctor_facts"
    run_id: str = Field(pattern=r"^[A-Za-z0-9_.:-]{1,128}$")
    global_index: int = Field(ge=0)
    node_count: int = Field(ge=1)
    master_count: int = Field(ge=0)
    name: str = Field(max_length=64)
    pod_ip: str = Field(max_length=64)
    agent_version: str = Field(max_length=64)
    published_at: float
    devices: tuple[FactDevice, ...] = Field(max_length=64)
    local: dict[str, Status] = Field(default_factory=dict)
    # What every node must share (issue 28): HCCL settings in force, CANN and driver.
    hccl: dict[str, str] = Field(default_factory=dict, max_length=16)
    cann: Optional[str] = Field(default=None, max_length=64)
    driver: Optional[str] = Field(default=None, max_length=64)


def facts_path(paths: RunPaths, index: int) -> Path:
    return paths.root / "doctor" / f"node-{index}.json"


def make_facts(run_id: str, ident: NodeIdentity, states: Sequence[DeviceState],
               local: Mapping[str, Status], now: float,
               hccl: Optional[Mapping[str, str]] = None, cann: Optional[str] = None,
               driver: Optional[str] = None) -> DoctorFacts:
    return DoctorFacts(
        run_id=run_id, global_index=ident.global_index, node_count=ident.node_count,
        master_count=ident.master_count, name=ident.name, pod_ip=ident.pod_ip,
        agent_version=__version__, published_at=now,
        devices=tuple(FactDevice(device_id=s.device_id, ip=s.ip[:64], netmask=s.netmask[:64],
                                 link=(s.link or None) and s.link[:32],
                                 health=(s.health or None) and s.health[:64], tls=s.tls)
                      for s in states),
        local=dict(local), hccl={k: v[:200] for k, v in (hccl or {}).items()},
        cann=cann and cann[:64], driver=driver and driver[:64])


PeerRead = Union[Valid[DoctorFacts], Invalid, Missing]


def collect_peer_facts(
    paths: RunPaths, me: int, node_count: int, wait: float, fresh_after: float,
    clock: Callable[[], float] = time.monotonic, sleep: Callable[[float], None] = time.sleep,
) -> dict[int, PeerRead]:
    """Each peer's facts, re-reading known names (no directory listing) until all are
    present and fresh or `wait` seconds have passed. Each poll revalidates the facts
    directory first, so an NFS client's cached negative lookups cannot hide a peer."""
    deadline = clock() + wait
    got: dict[int, PeerRead] = {}
    pending = [i for i in range(node_count) if i != me]
    fresh = Freshness(paths.shared_dir)
    while True:
        fresh.new_poll()
        for i in list(pending):
            read = read_doc(fresh.file(facts_path(paths, i)), DoctorFacts, paths.run_id)
            got[i] = read
            if isinstance(read, Valid) and read.doc.published_at >= fresh_after:
                pending.remove(i)
        if not pending or clock() >= deadline:
            return got
        sleep(min(PEER_POLL, max(0.0, deadline - clock())))


def usable(d: FactDevice) -> bool:
    """A peer device with an address a RoCE NIC can have (as `DeviceState.usable_ip`)."""
    return bool(d.ip) and unusable_reason(d.ip) is None
