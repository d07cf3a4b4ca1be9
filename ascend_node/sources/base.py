"""Where the rank table comes from, and the one shape every source has.

Two sources make steps 1-5: the shared-volume rendezvous (`chain.table.VolumeSource`) and
MindCluster's hccl.json (`sources.mindcluster.MindClusterSource`). Each is a `TableSource`
and returns the same `TableResult`, so `boot` continues the same way after either. The
chain (`chain.table.ranktable`) chooses one with `choose_table_source` and imports the
MindCluster module only when it is chosen; the sources import their shapes from here,
never the chain back.

Apart from `sources.mindcluster` (the file's wait and conversion) so that a pod on the volume
source, the common case, decides this without importing what it will not use.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional, Protocol

if TYPE_CHECKING:  # types only: this module stays cheap to import (doctor, discover)
    from ascend_node.discover.devices import Device
    from ascend_node.discover.identity import NodeIdentity
    from ascend_node.discover.superpod import NodeSuperPod
    from ascend_node.rendezvous.seal import RendezvousKey
    from ascend_node.settings import Settings

SOURCES = ("auto", "volume", "mindcluster")


@dataclass(frozen=True)
class SourceChoice:
    """Where the table comes from ("volume" or "mindcluster") and why."""

    source: str
    why: str


@dataclass(frozen=True)
class Discovery:
    """Steps 1-2 as this node saw them: who it is and its devices."""

    identity: NodeIdentity
    devices: tuple[Device, ...]
    device_source: str
    hccn_tool: str
    super_pod: Optional[NodeSuperPod] = None
    super_pod_note: str = ""


@dataclass(frozen=True)
class TableResult:
    """Steps 1-5 done: the final table, the env it implies, and where it came from."""

    discovery: Discovery
    run_id: str
    attempt_id: str
    table: dict[str, Any]
    table_text: str
    env: dict[str, str]
    shared_table: Path
    seconds: float
    started: float = 0.0  # the agent's start (time.monotonic)
    preflight: str = "off"  # the policy in force
    preflight_doc: Optional[dict[str, Any]] = None  # what the rendezvous stage found
    key: Optional[RendezvousKey] = None  # the job's rendezvous key (signs reach documents)
    # Whether the pods met on the shared volume; a table taken from MindCluster's file
    # leaves nothing there (no timeline summary either).
    on_volume: bool = True


class TableSource(Protocol):
    """One way to make steps 1-5: wait for or build the table, then write the outputs.

    `preflight` is the pre-flight policy (strict|warn|off); a source without a rendezvous
    to publish health in ignores it. Raises `AscendNodeError` with the contract's code.
    """

    choice: SourceChoice

    def build(self, settings: Settings, environ: Mapping[str, str], started: float,
              command: str, preflight: str) -> TableResult: ...


def choose_table_source(requested: str, hccl_json: Path, exists: bool) -> SourceChoice:
    """`auto`: MindCluster's file when it exists at start, else the shared volume."""
    if requested == "volume":
        return SourceChoice("volume", "--table-source volume")
    if requested == "mindcluster":
        return SourceChoice("mindcluster", f"--table-source mindcluster ({hccl_json})")
    if requested != "auto":
        raise ValueError(f"unknown table source {requested!r}")
    if exists:
        return SourceChoice("mindcluster", f"auto: MindCluster's {hccl_json} exists")
    return SourceChoice("volume", f"auto: no MindCluster file at {hccl_json}")
