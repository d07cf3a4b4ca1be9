"""Where the rank table comes from: the shared-volume rendezvous or MindCluster's file.

Apart from `mindcluster` (the file's wait and conversion) so that a pod on the volume
source, the common case, decides this without importing what it will not use.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

SOURCES = ("auto", "volume", "mindcluster")


@dataclass(frozen=True)
class SourceChoice:
    """Where the table comes from ("volume" or "mindcluster") and why."""

    source: str
    why: str


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
