"""Which processes hold this container's NPUs: the process table of `npu-smi info`.

A device still held by the last run's process makes HCCL fail at init (`EJ0001 Failed to
initialize the HCCP process ... last training process is running`, hiyouga/LlamaFactory
#3839, #6646): the previous pod's container is still being torn down, or a stray process
holds the device. `npu-smi info` prints two tables; the second lists, per NPU and chip,
each process's id, name and memory (real captures in fixtures/npu-smi/, 25.x and 26.x
layouts, A2 and A3). The parser is strict: a row it cannot read is an error naming the
row, never a silently free device.

Which device a row means: the first table's second line of each device block gives the
chip and, on A3, its `Phy-ID` (the physical id, as in `/dev/davinciN`); A2 prints no
`Phy-ID` and one chip per NPU, whose NPU number is the device id (UNCONFIRMED for a pod
given part of a node: no capture of `npu-smi info` in such a pod exists).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Optional

_NO_PROCESS = re.compile(r"No running processes found in NPU\s+([0-9]+)")
_INT = re.compile(r"[0-9]{1,10}")


class ProcessTableError(ValueError):
    """`npu-smi info` printed something the parser does not know (the line is in the text)."""


@dataclass(frozen=True)
class NpuProcess:
    """One row of the process table: a process using a device."""

    device_id: int
    npu: int
    chip: int
    pid: int
    name: str  # may be empty (a capture of an A3 node shows no names)
    memory_mb: int
    pid_in_container: Optional[int] = None  # npu-smi 26.x's extra column


def _cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip().strip("|").split("|")]


def _device_map(lines: Sequence[str]) -> dict[tuple[int, int], int]:
    """(NPU, chip) -> device id from the first table of `npu-smi info`.

    Each device block is two lines: `| <npu> <name> | <health> | ...` then
    `| <chip> [<phy-id>] | <bus-id> | ...`; the header's second line says whether the
    `Phy-ID` column is there (A3) or not (A2: device id = NPU)."""
    out: dict[tuple[int, int], int] = {}
    phy = False
    npu: Optional[int] = None
    for line in lines:
        if not line.startswith("|"):
            npu = None
            continue
        first = _cells(line)[0]
        if first.startswith("Chip"):
            phy = "Phy-ID" in first
            continue
        words = first.split()
        if npu is None:
            if len(words) >= 2 and words[0].isdigit():
                npu = int(words[0])
            continue
        if words and words[0].isdigit():
            chip = int(words[0])
            if phy and len(words) >= 2 and words[1].isdigit():
                out[(npu, chip)] = int(words[1])
            elif not phy:
                out[(npu, chip)] = npu
        npu = None
    return out


def parse_npu_processes(text: str) -> list[NpuProcess]:
    """Every process row of `npu-smi info` (none on an idle node).

    ProcessTableError when the process table is missing or a row in it has a form the
    captures do not show (wrong number of columns, a PID or memory that is not a number,
    an NPU/chip the first table does not list)."""
    lines = text.splitlines()
    start = next((i for i, ln in enumerate(lines)
                  if "Process id" in ln and "Process name" in ln), None)
    if start is None:
        raise ProcessTableError("no process table (no `Process id | Process name` header)")
    header = _cells(lines[start])
    extra = len(header) == 5 and header[4].startswith("Process id in container")
    if len(header) not in (4, 5) or (len(header) == 5 and not extra):
        raise ProcessTableError(f"unknown process table header {lines[start].strip()!r}")
    devices = _device_map(lines[:start])
    out = []
    for raw in lines[start + 1:]:
        line = raw.strip()
        if not line or line.startswith("+"):
            continue
        if not line.startswith("|"):
            break  # the table ended (a capture may go on with other commands)
        if _NO_PROCESS.search(line):
            continue
        cells = _cells(line)
        if len(cells) != len(header):
            raise ProcessTableError(f"process row with {len(cells)} columns, not "
                                    f"{len(header)}: {line!r}")
        ids = cells[0].split()
        if (len(ids) != 2 or not all(_INT.fullmatch(x) for x in ids)
                or not _INT.fullmatch(cells[1]) or not _INT.fullmatch(cells[3])):
            raise ProcessTableError(f"unreadable process row {line!r}")
        npu, chip = int(ids[0]), int(ids[1])
        device = devices.get((npu, chip))
        if device is None:
            raise ProcessTableError(f"process row for NPU {npu} chip {chip}, which the "
                                    f"device table does not list: {line!r}")
        in_container: Optional[int] = None
        if extra:
            if not _INT.fullmatch(cells[4]):
                raise ProcessTableError(f"unreadable `Process id in container` in {line!r}")
            in_container = int(cells[4])
        out.append(NpuProcess(device, npu, chip, int(cells[1]), cells[2], int(cells[3]),
                              in_container))
    return out


def holders_of(processes: Sequence[NpuProcess], device_ids: Sequence[int]
               ) -> list[NpuProcess]:
    """The rows on this container's devices (another pod's NPUs are not our concern)."""
    mine = set(device_ids)
    return [p for p in processes if p.device_id in mine]


def describe_holder(p: NpuProcess) -> str:
    """`device 3: PID 19334 (VLLMWorker_TP, 58472 MB)`; an empty name says so."""
    name = p.name or "no name shown"
    return f"device {p.device_id}: PID {p.pid} ({name}, {p.memory_mb} MB)"


__all__ = ["NpuProcess", "ProcessTableError", "describe_holder", "holders_of",
           "parse_npu_processes"]
