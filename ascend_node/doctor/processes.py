"""The `process.npu_holders` check: which processes hold /dev/davinciN open (from /proc)."""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Optional

from ascend_node.doctor.report import CheckResult, Finding, id_list, verdict


@dataclass(frozen=True)
class Holder:
    pid: int
    comm: str
    devices: tuple[int, ...]


_DAVINCI = re.compile(r"/dev/davinci([0-9]{1,3})")


def _ppid(proc_root: str, pid: int) -> Optional[int]:
    try:
        with open(os.path.join(proc_root, str(pid), "stat"), encoding="utf-8",
                  errors="replace") as fh:
            text = fh.read()
    except OSError:
        return None
    fields = text.rpartition(")")[2].split()
    return int(fields[1]) if len(fields) > 1 and fields[1].isdigit() else None


def find_npu_holders(proc_root: str, skip_pids: Sequence[int] = ()) -> tuple[list[Holder], int]:
    """Processes with an open /dev/davinciN, and how many could not be inspected.

    Reads `<proc_root>/<pid>/fd/*` links only, so a test can build a fake tree of real
    symlinks; a process that exits mid-scan is skipped.
    """
    holders = []
    hidden = 0
    try:
        names = os.listdir(proc_root)
    except OSError:
        return [], 0
    for name in sorted(names, key=lambda n: (len(n), n)):
        if not name.isdigit() or int(name) in skip_pids:
            continue
        fd_dir = os.path.join(proc_root, name, "fd")
        try:
            fds = os.listdir(fd_dir)
        except PermissionError:
            hidden += 1
            continue
        except OSError:
            continue
        found: set[int] = set()
        for fd in fds:
            try:
                target = os.readlink(os.path.join(fd_dir, fd))
            except OSError:
                continue
            m = _DAVINCI.fullmatch(target)
            if m:
                found.add(int(m.group(1)))
        if found:
            try:
                with open(os.path.join(proc_root, name, "comm"), encoding="utf-8",
                          errors="replace") as fh:
                    comm = fh.read().strip()
            except OSError:
                comm = "?"
            holders.append(Holder(int(name), comm, tuple(sorted(found))))
    return holders, hidden


def descends_from(proc_root: str, pid: int, root: int, limit: int = 64) -> bool:
    current: Optional[int] = pid
    for _ in range(limit):
        if current is None or current <= 0:
            return False
        if current == root:
            return True
        current = _ppid(proc_root, current)
    return False


def check_npu_holders(holders: Sequence[Holder], hidden: int, server_pid: Optional[int],
                      proc_root: str) -> CheckResult:
    """`process.npu_holders`: no process outside the server this agent started holds an NPU.

    A process left from the previous attempt keeps the devices busy and HCCL fails on the
    relaunch (EJ0001, vllm-ascend #10599). The server `boot` exec'd (the pid in
    status.json, state done) and its children are expected holders; anything else is
    reported. A warning, not a failure: doctor cannot tell a leftover from a tool an
    operator started on purpose.
    """
    cid = "process.npu_holders"
    expected = [h for h in holders
                if server_pid is not None and descends_from(proc_root, h.pid, server_pid)]
    others = [h for h in holders if h not in expected]
    findings = [Finding("warn", f"pid {h.pid} ({h.comm}) holds /dev/davinci{id_list(h.devices)}",
                        f"if it is left from an earlier run, stop it (`kill {h.pid}`) and "
                        "wait until it has exited before relaunching: HCCL fails while "
                        "another process holds the NPUs (EJ0001)") for h in others]
    note = f"; {hidden} processes not inspectable (permissions)" if hidden else ""
    held = (f"only the server (pid {server_pid}) and its children hold NPUs" if expected
            else "no process holds an NPU")
    return verdict(cid, findings, held + note)
