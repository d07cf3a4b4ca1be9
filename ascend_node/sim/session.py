"""One `simulate` run as a person sees it: a word on stderr at once (the first run after
an install compiles the package in every node), a progress line every few
seconds while the nodes run, and a workspace that does not pile up in /tmp.

The workspace (`/tmp/ascend-node-sim-*`: each node's log, state dir and fake-tool data,
and the shared dir unless `--shared-dir`) is removed when every node succeeded. When a
node failed it is kept, because its log is what explains the failure, and the summary
says where; `--keep` keeps it always, `--no-keep` never.
"""

from __future__ import annotations

import shutil
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Callable, Optional, TypeVar

from ascend_node.errors import ConfigError, Interrupted, Terminated
from ascend_node.kube.config import Endpoint
from ascend_node.sim.cluster import NodeResult, SimNode, SimReport, SimSpec, run_cluster

PROGRESS_FIRST = 3.0
"""Seconds before the first progress line: a healthy small run is over by then."""
PROGRESS_EVERY = 5.0

Say = Callable[[str], None]


def _stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def names(indices: Sequence[int]) -> str:
    return (f"node {indices[0]}" if len(indices) == 1
            else "nodes " + ", ".join(str(i) for i in indices))


def node0_view(spec: SimSpec, shared: Path) -> str:
    """What node 0 waits for, from its progress document on the shared volume (the view
    the followers print too): `3/4 present, waiting for worker 1 (node 2)`; '' when
    there is no open, undecided attempt."""
    from ascend_node.rendezvous.models import AttemptDoc, ProgressDoc
    from ascend_node.rendezvous.participant import progress_line as rendezvous_line
    from ascend_node.rendezvous.store import RunPaths, Valid, read_doc

    paths = RunPaths(shared, spec.run_id)
    attempt = read_doc(paths.attempt_file, AttemptDoc, spec.run_id)
    if not isinstance(attempt, Valid):
        return ""
    aid = attempt.doc.attempt_id
    if paths.outcome(aid).exists():
        return ""
    got = read_doc(paths.progress(aid), ProgressDoc, spec.run_id)
    if not isinstance(got, Valid) or got.doc.attempt_id != aid:
        return ""
    return rendezvous_line(got.doc.present, got.doc.missing, spec.masters, spec.nodes)


def progress_line(spec: SimSpec, elapsed: float, ended: Sequence[NodeResult],
                  waiting: Sequence[int], node0_says: str = "",
                  gives_up: str = "") -> str:
    """`simulate: 8 s: 1/3 nodes ended (node 1 exit 1); waiting for nodes 0, 2 (--timeout
    60 s from each agent's start: the last gives up in 52 s); node 0: 2/4 present, waiting
    for ...` (`gives_up`: `gives_up_note`'s words, else the rule alone)."""
    started = spec.nodes - len(spec.absent)
    codes = ", ".join(f"node {r.index} exit {r.exit_code}" for r in ended if r.exit_code)
    text = (f"simulate: {elapsed:.0f} s: {len(ended)}/{started} nodes ended"
            + (f" ({codes})" if codes else ""))
    if waiting:
        text += (f"; waiting for {names(waiting)} (--timeout {spec.timeout:g} s from each "
                 f"agent's start{': ' + gives_up if gives_up else ''})")
    if node0_says:
        text += f"; node 0: {node0_says}"
    return text


def gives_up_note(timeout: float, agent_starts: Mapping[int, float], waiting: Sequence[int],
                  now: float) -> str:
    """When the waiting nodes give up: `the last gives up in 52 s`, `node 3 still starting`.

    A node's --timeout counts from its agent's start (`cli.app.STARTED`, after Python and
    the agent's imports: the `startup` phase), not from the process's: on a loaded machine,
    or on the first run after an install (every node compiles the package), that start-up
    alone takes seconds, so "N s after they start" was false by as much (issue 36: 3 s,
    and nodes ran 11.8 s). `agent_starts`: wall-clock starts of the agents known so far."""
    known = [agent_starts[i] + timeout for i in waiting if i in agent_starts]
    starting = [i for i in waiting if i not in agent_starts]
    words = []
    if known:
        left = max(known) - now
        words.append(f"the last gives up in {left:.0f} s" if left >= 0.5 else
                     "past it, ending")
    if starting:
        words.append(f"{names(starting)} still starting")
    return "; ".join(words)


def agent_start(state_dir: Path) -> Optional[float]:
    """The wall-clock start of the newest agent run in `state_dir` (its `events.jsonl`:
    the `startup` phase begins at the agent's clock), or None before it wrote one."""
    from ascend_node import events

    run = events.last_run(events.read_events(state_dir))
    startups = [e["start"] for e in run if e.get("phase") == "startup"]
    first = startups[0] if startups else (run[0]["start"] if run else None)
    return float(first) if isinstance(first, (int, float)) else None


class Progress:
    """The `on_tick` of `launch`: a line at PROGRESS_FIRST s, then every PROGRESS_EVERY s.
    With the workspace, it reads each waiting node's agent start (`agent_start`) once, to
    say when they give up."""

    def __init__(self, spec: SimSpec, shared: Path, say: Say,
                 first: float = PROGRESS_FIRST, every: float = PROGRESS_EVERY,
                 work: Optional[Path] = None) -> None:
        self.spec, self.shared, self.say, self.every = spec, shared, say, every
        self.next = first
        self.work = work
        self.starts: dict[int, float] = {}

    def __call__(self, elapsed: float, ended: Sequence[NodeResult],
                 waiting: Sequence[int]) -> None:
        if elapsed < self.next or not waiting:
            return
        self.next = elapsed + self.every
        node0 = ""
        if 0 in waiting:
            try:
                node0 = node0_view(self.spec, self.shared)
            except Exception:  # a progress line never stops the run
                node0 = ""
        gives_up = ""
        if self.work is not None:
            for i in waiting:
                if i not in self.starts:
                    found = agent_start(self.work / f"node-{i}" / "state")
                    if found is not None:
                        self.starts[i] = found
            gives_up = gives_up_note(self.spec.timeout, self.starts, waiting, time.time())
        self.say(progress_line(self.spec, elapsed, ended, waiting, node0, gives_up))


def _shared(shared_dir: Optional[Path]) -> Optional[Path]:
    """The user's shared directory, which must exist (as the agent requires its volume)."""
    if shared_dir is not None and not shared_dir.is_dir():
        raise ConfigError(f"--shared-dir {shared_dir} does not exist or is not a directory",
                          "create it first, or leave --shared-dir out")
    return shared_dir


R = TypeVar("R")


def in_workspace(work: Path, keep: Optional[bool], members: str, run: Callable[[], R]) -> R:
    """`run()` (which has stopped every process of the simulation when it raises): SIGTERM
    (`timeout 10 ascend-node simulate`) or Ctrl-C becomes one line saying what is left of
    the workspace, which any failure removes unless `keep`. `members`: what was stopped
    ("node", "pod")."""
    try:
        return run()
    except (Terminated, KeyboardInterrupt) as exc:
        if not keep:
            shutil.rmtree(work, ignore_errors=True)
        left = f"workspace kept: {work}" if keep else "workspace removed"
        kind = Terminated if isinstance(exc, Terminated) else Interrupted
        what = exc.cause if isinstance(exc, Terminated) else "interrupted by signal 2 (SIGINT)"
        raise kind(f"simulate {what}: every {members} stopped, {left}",
                   "nothing of the simulation is left running") from None
    except BaseException:
        if not keep:
            shutil.rmtree(work, ignore_errors=True)
        raise


def simulate(spec: SimSpec, shared_dir: Optional[Path] = None, keep: Optional[bool] = None,
             say: Say = _stderr,
             before_cleanup: Optional[Callable[[SimReport], None]] = None,
             kube: Optional[Endpoint] = None) -> SimReport:
    """Run the simulation in a new workspace; remove it afterwards unless `keep` (None:
    keep it when a node failed). The report holds everything it prints, so it outlives
    the workspace; `before_cleanup` reads whatever else it needs from the shared
    directory (`simulate --report`'s timeline) while it still exists. `kube`: the pods
    meet through that API server instead (`sim/kube_sim.py`), as a job of its own."""
    shared = _shared(shared_dir)
    work = Path(tempfile.mkdtemp(prefix="ascend-node-sim-"))
    absent = f" ({names(sorted(spec.absent))} absent)" if spec.absent else ""
    bad = "".join(f", bad device {b.text}" for b in spec.bad_devices)
    job = None
    if kube is not None:
        from ascend_node.sim.kube_sim import open_job

        try:
            job = open_job(kube, spec.nodes)
        except BaseException:
            shutil.rmtree(work, ignore_errors=True)
            raise
    where = (f" meeting through {kube.server} as job {kube.namespace}/{job.name}"
             if kube is not None and job is not None else "")
    say(f"simulate: starting {spec.nodes} node{'s' if spec.nodes != 1 else ''} x "
        f"{spec.devices} NPUs{absent}{bad} in {work}{where}")
    progress = Progress(spec, shared or work / "shared", say, work=work)
    pod_env = None
    if job is not None:
        made = job

        def pod_env(node: SimNode) -> dict[str, str]:
            return made.pod_env(node.state_dir.parent / "serviceaccount")
    try:
        report = in_workspace(work, keep, "node", lambda: run_cluster(
            spec, shared, work, on_tick=progress, pod_env=pod_env))
    finally:
        if job is not None:
            from ascend_node.sim.kube_sim import close_job

            left = close_job(job)
            if left:
                say(left)
    report.workspace_kept = keep if keep is not None else not report.ok
    if before_cleanup is not None:
        before_cleanup(report)
    if not report.workspace_kept:
        shutil.rmtree(work, ignore_errors=True)
    return report


__all__ = ["PROGRESS_EVERY", "PROGRESS_FIRST", "Progress", "agent_start", "gives_up_note",
           "in_workspace", "node0_view", "progress_line", "simulate"]
