"""`ascend-node status`: this container's bootstrap state, for probes and scripts.

A status file that says "in progress" may be a lie: the agent could have been killed.
If its process is gone and it never wrote a verdict, we say so (exit 1) instead of
reporting "in progress" forever to a startup probe.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Literal, Optional

from ascend_node import events
from ascend_node.preflight.report import read_preflight
from ascend_node.statedir import StatusDoc, read_status

EXIT_DONE, EXIT_FAILED, EXIT_IN_PROGRESS = 0, 1, 3


@dataclass(frozen=True)
class StatusView:
    state: str  # done | failed | in_progress | not_started; --serving: serving | loading | abnormal
    exit_code: int
    detail: str
    doc: Optional[StatusDoc]
    events: tuple[dict[str, Any], ...] = ()  # the newest run's, from events.jsonl
    preflight: Optional[dict[str, Any]] = None  # <state-dir>/preflight.json, when written

    def line(self) -> str:
        return f"{self.state}: {self.detail}" if self.detail else self.state

    def text(self) -> str:
        """The state line, then where the newest run's time went, phase by phase."""
        return "\n".join([self.line(), *events.format_summary(self.events)])

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"state": self.state, "exit_code": self.exit_code,
                               "detail": self.detail}
        if self.doc is not None:
            out["status"] = self.doc.to_json()
        out["phases"] = [{k: r[k] for k in ("phase", "seconds", "outcome", "count")}
                         for r in events.summarize(self.events)]
        out["events"] = list(self.events)
        if self.preflight is not None:
            out["preflight"] = self.preflight
        return out


# How much later than its record a process may seem to have started: psutil derives the
# start from the boot time, rounded to the second.
START_SLACK_S = 2.0


def recorded_process_runs(doc: StatusDoc) -> bool:
    """The process `status.json` names still runs and is the one that wrote it.

    Alive and not a zombie is not enough: once it has ended, the kernel may hand its pid to
    any later process (a kept simulation read hours later, a container's pid 1 after a
    restart). The writer started before it wrote `updated_at` (exec keeps the process, so
    the server boot exec'd did too); a process that started after the record is another.
    `status`, `status --serving` and `doctor` ask this one question."""
    import psutil  # only an in-progress status needs it; probes of a done pod skip the import

    try:
        proc = psutil.Process(doc.pid)
        return bool(proc.status() != psutil.STATUS_ZOMBIE
                    and proc.create_time() <= doc.updated_at + START_SLACK_S)
    except (psutil.NoSuchProcess, psutil.AccessDenied, ValueError):
        return False


def current_status(state_dir: Path) -> StatusView:
    view = _status(state_dir)
    return replace(view, events=tuple(events.last_run(events.read_events(state_dir))),
                   preflight=read_preflight(state_dir))


def _status(state_dir: Path) -> StatusView:
    doc = read_status(state_dir)
    if doc is None:
        # Still 3: a startup probe may run before the agent made its state dir. The words
        # tell "nothing here yet" from "looking in the wrong place" (a --state-dir typo).
        where = (f"{state_dir}/status.json is missing" if state_dir.is_dir() else
                 f"there is no state in {state_dir}: the directory does not exist; check "
                 "--state-dir / ASCEND_NODE_STATE_DIR if a bootstrap ran")
        return StatusView("not_started", EXIT_IN_PROGRESS,
                          f"no bootstrap has run yet ({where})", None)
    where = f"{doc.command} {doc.phase}"
    if doc.state == "done":
        return StatusView("done", EXIT_DONE, doc.message or where, doc)
    if doc.state == "failed":
        return StatusView("failed", EXIT_FAILED,
                          f"{doc.command} exited {doc.exit_code}: {doc.message}", doc)
    if not recorded_process_runs(doc):
        return StatusView("failed", EXIT_FAILED,
                          f"{doc.command} stopped during {doc.phase} (process {doc.pid} is "
                          "gone without a verdict; killed?)", doc)
    return StatusView("in_progress", EXIT_IN_PROGRESS,
                      f"{where} (pid {doc.pid}){', ' + doc.node if doc.node else ''}", doc)


def serving_status(state_dir: Path, environ: Mapping[str, str],
                   probe: Literal["ready", "live"] = "ready",
                   timeout: float = 3.0) -> StatusView:
    """`status --serving`: before `boot` has exec'd MindIE, the bootstrap's answer (as
    `status`); after it, MindIE's own health endpoint (handoff.serving): 0 serving,
    3 loading or busy, 1 abnormal, unreachable, or the server process gone."""
    view = current_status(state_dir)
    doc = view.doc
    if view.state != "done" or doc is None or doc.command != "boot" or doc.phase != "exec":
        return view
    from ascend_node.errors import AscendNodeError
    from ascend_node.handoff.mindie_config import config_path_from_env
    from ascend_node.handoff.serving import client_cert_from_env, read_config, serving

    # exec keeps the pid: the agent's pid in status.json is now the server's.
    if not recorded_process_runs(doc):
        return replace(view, state="abnormal", exit_code=EXIT_FAILED,
                       detail=f"the server boot exec'd (pid {doc.pid}) is gone")
    handed = _exec_env(state_dir)
    if "MIES_CONTAINER_IP" not in handed:
        return replace(view, detail=f"{view.detail}; not a MindIE server (boot exec'd another "
                       "launcher): nothing to ask")
    try:
        config = read_config(config_path_from_env({**environ, **handed}))
        verdict = serving(config, handed, probe, timeout, client_cert_from_env(environ))
    except AscendNodeError as exc:
        return replace(view, state="abnormal", exit_code=EXIT_FAILED, detail=exc.cause)
    return replace(view, state=verdict.state, exit_code=verdict.exit_code,
                   detail=verdict.detail)


def _exec_env(state_dir: Path) -> dict[str, str]:
    """The variables boot handed the server (env.json), read without the pydantic model."""
    try:
        doc = json.loads((state_dir / "env.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    env = doc.get("env") if isinstance(doc, dict) else None
    return {str(k): str(v) for k, v in env.items()} if isinstance(env, dict) else {}


def wait_for_status(state_dir: Path, timeout: float, interval: float = 0.5) -> StatusView:
    """Block until done or failed; after `timeout` return the in-progress view (exit 3)."""
    end = time.monotonic() + timeout
    while True:
        view = current_status(state_dir)
        if view.state in ("done", "failed") or time.monotonic() >= end:
            return view
        time.sleep(interval)
