"""`ascend-node status`: this container's bootstrap state, for probes and scripts.

A status file that says "in progress" may be a lie: the agent could have been killed.
If its process is gone and it never wrote a verdict, we say so (exit 1) instead of
reporting "in progress" forever to a startup probe.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

import psutil

from ascend_node.outputs import StatusDoc, read_status
from ascend_node.preflight.stage import read_preflight

EXIT_DONE, EXIT_FAILED, EXIT_IN_PROGRESS = 0, 1, 3


@dataclass(frozen=True)
class StatusView:
    state: str  # done | failed | in_progress | not_started
    exit_code: int
    detail: str
    doc: Optional[StatusDoc]
    preflight: Optional[dict[str, Any]] = None  # <state-dir>/preflight.json, when written

    def line(self) -> str:
        return f"{self.state}: {self.detail}" if self.detail else self.state

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"state": self.state, "exit_code": self.exit_code,
                               "detail": self.detail}
        if self.doc is not None:
            out["status"] = self.doc.model_dump(mode="json")
        if self.preflight is not None:
            out["preflight"] = self.preflight
        return out


def _alive(pid: int) -> bool:
    try:
        proc = psutil.Process(pid)
        return bool(proc.status() != psutil.STATUS_ZOMBIE)
    except (psutil.NoSuchProcess, psutil.AccessDenied, ValueError):
        return False


def current_status(state_dir: Path) -> StatusView:
    view = _current(state_dir)
    found = read_preflight(state_dir)
    if found is None:
        return view
    return StatusView(view.state, view.exit_code, view.detail, view.doc, found)


def _current(state_dir: Path) -> StatusView:
    doc = read_status(state_dir)
    if doc is None:
        return StatusView("not_started", EXIT_IN_PROGRESS,
                          f"no bootstrap has run yet ({state_dir}/status.json is missing)", None)
    where = f"{doc.command} {doc.phase}"
    if doc.state == "done":
        return StatusView("done", EXIT_DONE, doc.message or where, doc)
    if doc.state == "failed":
        return StatusView("failed", EXIT_FAILED,
                          f"{doc.command} exited {doc.exit_code}: {doc.message}", doc)
    if not _alive(doc.pid):
        return StatusView("failed", EXIT_FAILED,
                          f"{doc.command} stopped during {doc.phase} (process {doc.pid} is "
                          "gone without a verdict; killed?)", doc)
    return StatusView("in_progress", EXIT_IN_PROGRESS,
                      f"{where} (pid {doc.pid}){', ' + doc.node if doc.node else ''}", doc)


def wait_for_status(state_dir: Path, timeout: float, interval: float = 0.5) -> StatusView:
    """Block until done or failed; after `timeout` return the in-progress view (exit 3)."""
    end = time.monotonic() + timeout
    while True:
        view = current_status(state_dir)
        if view.state in ("done", "failed") or time.monotonic() >= end:
            return view
        time.sleep(interval)
