"""Which rank-table format a run gets: v1.0, or v1.2 for an Atlas A3 SuperPoD (pure).

`--table-version auto` (the default) picks v1.2 when every node reports a super pod,
v1.0 when none does; a cluster where some nodes report one and others do not is
inconsistent (exit 5, naming them): half a super pod cannot be described in either
format, and guessing would hand HCCL a table that fails at link set-up instead of at
start. `1.0` ignores super pods (HCCL's "AI Server mode"); `1.2` requires every node to
report one.

The same decision serves the rendezvous (on whoever has published so far, so an
inconsistency ends the attempt at once) and the builder (on the full membership).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Callable, Literal, Optional, Union

TableVersion = Literal["1.0", "1.2"]
RequestedVersion = Literal["auto", "1.0", "1.2"]
REQUESTED_VERSIONS: tuple[RequestedVersion, ...] = ("auto", "1.0", "1.2")


@dataclass(frozen=True)
class NodeSuperPodReport:
    """What one node published about its super pod (None = not in one)."""

    super_pod_id: Optional[str]
    sdids: Sequence[int] = ()


@dataclass(frozen=True)
class VersionConflict:
    """No format fits: the reason (nodes named by `name`) and the nodes at fault."""

    reason: str
    nodes: tuple[int, ...]


def _listing(indices: Sequence[int], name: Callable[[int], str]) -> str:
    shown = ", ".join(name(i) for i in indices[:4])
    return shown + (f" and {len(indices) - 4} more" if len(indices) > 4 else "")


def _verb(indices: Sequence[int], one: str, many: str) -> str:
    return one if len(indices) == 1 else many


def choose_table_version(
    requested: str,
    reports: Mapping[int, NodeSuperPodReport],
    name: Callable[[int], str] = lambda i: f"node {i}",
) -> Union[TableVersion, VersionConflict]:
    """The format for these nodes, or why none fits. Pure; `reports` may be partial."""
    if requested not in REQUESTED_VERSIONS:
        raise ValueError(f"unknown table version {requested!r}")
    if requested == "1.0":
        return "1.0"
    inside = sorted(i for i, r in reports.items() if r.super_pod_id is not None)
    outside = sorted(i for i, r in reports.items() if r.super_pod_id is None)
    if requested == "1.2" and outside:
        return VersionConflict(
            f"--table-version 1.2, but {_listing(outside, name)} "
            f"{_verb(outside, 'reports', 'report')} no super pod",
            tuple(outside),
        )
    if inside and outside:
        return VersionConflict(
            f"{_listing(inside, name)} {_verb(inside, 'reports', 'report')} an A3 super pod "
            f"but {_listing(outside, name)} {_verb(outside, 'does', 'do')} not: no rank-table "
            "format fits a mixed cluster (pass --table-version 1.0 on every pod to ignore "
            "super pods)",
            tuple(sorted(inside + outside)),
        )
    sdid_problem = _duplicate_sdid(reports, name)
    if sdid_problem is not None:
        return sdid_problem
    return "1.2" if inside else "1.0"


def _duplicate_sdid(
    reports: Mapping[int, NodeSuperPodReport], name: Callable[[int], str]
) -> Optional[VersionConflict]:
    """Two nodes of one super pod with one SDID: HCCL cannot tell their devices apart."""
    owner: dict[tuple[str, int], int] = {}
    for index in sorted(reports):
        report = reports[index]
        if report.super_pod_id is None:
            continue
        for sdid in report.sdids:
            key = (report.super_pod_id, sdid)
            first = owner.setdefault(key, index)
            if first != index:
                return VersionConflict(
                    f"SDID {sdid} is reported by {name(first)} and {name(index)} in super pod "
                    f"{report.super_pod_id}",
                    (first, index),
                )
    return None
