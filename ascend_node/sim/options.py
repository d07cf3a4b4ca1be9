"""`simulate`'s options, checked before any node starts.

The simulation hands its options to the nodes as environment variables
(ASCEND_NODE_TIMEOUT, ASCEND_NODE_RUN_ID, ...). A value the agent would refuse must be
refused here, naming the option the user typed (`--timeout 0`), not a variable they never
set; and a combination that means nothing (`--super-pod-size` without `--a3`, more
masters than nodes, an absent node that does not exist) is a usage error (exit 2), not
something silently clamped or ignored.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Optional

from ascend_node.errors import AscendNodeError, UsageError
from ascend_node.quantities import check_seconds
from ascend_node.sim.cluster import SimSpec
from ascend_node.sim.faults import check_bad_devices, parse_bad_device


def parse_node_list(text: str, nodes: int, option: str = "--absent") -> frozenset[int]:
    """`2`, `1,3` or `1-3` (node indices, 0 = master 0); UsageError naming the value."""
    out: set[int] = set()
    for part in text.split(","):
        part = part.strip()
        low, sep, high = part.partition("-")
        bounds = (low, high) if sep else (low,)
        if not all(b.strip().isascii() and b.strip().isdigit() for b in bounds):
            raise UsageError(f"{option} {text!r}: {part!r} is not a node index or range",
                             f"e.g. {option} 2, {option} 1,3 or {option} 1-3")
        first, last = int(bounds[0]), int(bounds[-1])
        if last < first:
            raise UsageError(f"{option} {text!r}: range {part!r} runs backwards",
                             f"write it low-high, e.g. {option} {last}-{first}")
        if last >= nodes:
            raise UsageError(f"{option} {text!r}: there is no node {last} "
                             f"(--nodes {nodes}: 0-{nodes - 1})", "name nodes that exist")
        out.update(range(first, last + 1))
    return frozenset(out)


def check_run_options(timeout: float, tool_delay: float, run_id: str) -> None:
    """The options every simulation takes, checked alike (`simulate`, `simulate --pd`)."""
    _positive_seconds("--timeout", timeout)
    _positive_seconds("--tool-delay", tool_delay, zero_ok=True)
    from ascend_node.discover.identity import check_run_id

    try:
        check_run_id(run_id, "--run-id")
    except AscendNodeError as exc:
        raise UsageError(exc.cause, exc.hint) from None


def _positive_seconds(option: str, value: float, zero_ok: bool = False) -> None:
    """The agent's rule for seconds (`quantities`), worded for the flag typed."""
    try:
        check_seconds(value, zero_ok)
    except ValueError:
        what = "a number of seconds >= 0" if zero_ok else "a number of seconds > 0"
        raise UsageError(f"{option} {value:g} is not {what}",
                         f"e.g. {option} {'0.5' if zero_ok else '60'}") from None


def check_paths(shared_dir: Optional[Path], table_out: Optional[Path]) -> None:
    """`--shared-dir` must exist, as the agent requires of its shared volume (simulate
    creates nothing the user named); `--table-out` must be writable where it points, checked
    before any node runs, not after all of them."""
    if shared_dir is not None and not shared_dir.is_dir():
        raise UsageError(f"--shared-dir {shared_dir} does not exist or is not a directory",
                         "create it first, or leave --shared-dir out (the workspace has one)")
    if table_out is None:
        return
    parent = table_out.parent
    if table_out.is_dir():
        raise UsageError(f"--table-out {table_out} is a directory",
                         "name a file, e.g. --table-out ranktable.json")
    if not parent.is_dir():
        raise UsageError(f"--table-out {table_out}: directory {parent} does not exist",
                         "choose a path in an existing, writable directory")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise UsageError(f"--table-out {table_out}: directory {parent} is not writable",
                         "choose a path in an existing, writable directory")


def build_spec(*, nodes: int, devices: Optional[int], a3: bool, super_pod_size: int,
               masters: int, timeout: float, tool_delay: float, run_id: str, boot: bool,
               absent: Optional[str], bad_devices: Sequence[str]) -> SimSpec:
    """The run the user asked for, or UsageError (exit 2) with a one-line cause."""
    if super_pod_size and not a3:
        raise UsageError(f"--super-pod-size {super_pod_size} needs --a3",
                         "super pods exist on Atlas A3 nodes only: add --a3")
    if masters > nodes:
        raise UsageError(f"--masters {masters} is more than --nodes {nodes}",
                         "a master is one of the nodes: give --masters <= --nodes")
    check_run_options(timeout, tool_delay, run_id)
    count = devices or (16 if a3 else 8)
    gone = parse_node_list(absent, nodes) if absent is not None else frozenset()
    if gone and len(gone) == nodes:
        raise UsageError(f"--absent {absent!r} names every node: nothing would run",
                         "leave at least one node out of --absent")
    bad = tuple(parse_bad_device(text) for text in bad_devices)
    check_bad_devices(bad, nodes, count, sorted(gone), boot)
    return SimSpec(nodes=nodes, devices=count, masters=masters, run_id=run_id,
                   timeout=timeout, tool_delay=tool_delay, boot=boot, a3=a3,
                   super_pod_size=super_pod_size, absent=gone, bad_devices=bad)


__all__ = ["build_spec", "check_paths", "parse_node_list"]
