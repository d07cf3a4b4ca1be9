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
from collections.abc import Sequence
from pathlib import Path
from typing import Callable, Optional, TypeVar

from ascend_node.errors import ConfigError, Interrupted, Terminated
from ascend_node.sim.cluster import NodeResult, SimReport, SimSpec, run_cluster

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
                  waiting: Sequence[int], node0_says: str = "") -> str:
    """`simulate: 8 s: 1/3 nodes ended (node 1 exit 1); waiting for nodes 0, 2 (they give
    up 60 s after they start, --timeout); node 0: 2/4 present, waiting for ...`"""
    started = spec.nodes - len(spec.absent)
    codes = ", ".join(f"node {r.index} exit {r.exit_code}" for r in ended if r.exit_code)
    text = (f"simulate: {elapsed:.0f} s: {len(ended)}/{started} nodes ended"
            + (f" ({codes})" if codes else ""))
    if waiting:
        text += (f"; waiting for {names(waiting)} (they give up {spec.timeout:g} s after "
                 "they start, --timeout)")
    if node0_says:
        text += f"; node 0: {node0_says}"
    return text


class Progress:
    """The `on_tick` of `launch`: a line at PROGRESS_FIRST s, then every PROGRESS_EVERY s."""

    def __init__(self, spec: SimSpec, shared: Path, say: Say,
                 first: float = PROGRESS_FIRST, every: float = PROGRESS_EVERY) -> None:
        self.spec, self.shared, self.say, self.every = spec, shared, say, every
        self.next = first

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
        self.say(progress_line(self.spec, elapsed, ended, waiting, node0))


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
             before_cleanup: Optional[Callable[[SimReport], None]] = None) -> SimReport:
    """Run the simulation in a new workspace; remove it afterwards unless `keep` (None:
    keep it when a node failed). The report holds everything it prints, so it outlives
    the workspace; `before_cleanup` reads whatever else it needs from the shared
    directory (`simulate --report`'s timeline) while it still exists."""
    shared = _shared(shared_dir)
    work = Path(tempfile.mkdtemp(prefix="ascend-node-sim-"))
    absent = f" ({names(sorted(spec.absent))} absent)" if spec.absent else ""
    bad = "".join(f", bad device {b.text}" for b in spec.bad_devices)
    say(f"simulate: starting {spec.nodes} node{'s' if spec.nodes != 1 else ''} x "
        f"{spec.devices} NPUs{absent}{bad} in {work}")
    progress = Progress(spec, shared or work / "shared", say)
    report = in_workspace(work, keep, "node",
                          lambda: run_cluster(spec, shared, work, on_tick=progress))
    report.workspace_kept = keep if keep is not None else not report.ok
    if before_cleanup is not None:
        before_cleanup(report)
    if not report.workspace_kept:
        shutil.rmtree(work, ignore_errors=True)
    return report


__all__ = ["PROGRESS_EVERY", "PROGRESS_FIRST", "Progress", "in_workspace", "node0_view",
           "progress_line", "simulate"]
