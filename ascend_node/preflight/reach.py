"""Reachability after the table (`boot`): ping, publish, gather, and end every node alike.

Each node pings its sample (`sample.sample_pairs`) all at once, each ping bounded by
`--preflight` ping timeout (`ASCEND_NODE_PREFLIGHT_PING_TIMEOUT`, 5 s), and publishes
`reach-<g>.json` in the attempt directory (its own file). Node 0 reads every node's
results (O(N), once each) and writes one verdict, `reach.json`; the other nodes poll
only that file (O(1) per poll), so the cost per follower does not grow with the cluster.
Every wait is bounded (`REACH_WAIT` after the pings); a node that publishes nothing is
reported, not waited for forever. Every poll revalidates the attempt directory first
(`rendezvous/freshness.py`): NFS caches negative lookups for 30-60 s.

Which results are this boot's: a follower accepts only a verdict that carries the token
of its own results. Node 0 accepts results written (by the volume's clock) no earlier
than `STALE_SLACK` before it started, so a restarted job that reuses its attempt does not
act on an earlier start's pings.
"""

from __future__ import annotations

import logging
import secrets
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional

from ascend_node.discover.hccn import run_pings
from ascend_node.discover.identity import NodeIdentity, node_name
from ascend_node.preflight.models import PingRecord, ReachDoc, ReachVerdictDoc
from ascend_node.preflight.sample import (
    classify,
    reach_warnings,
    sample_pairs,
    table_devices,
)
from ascend_node.rendezvous.freshness import Freshness
from ascend_node.rendezvous.participant import names_of
from ascend_node.rendezvous.seal import RendezvousKey
from ascend_node.rendezvous.store import RunPaths, Valid, read_doc, volume_clock_ns, write_doc
from ascend_node.tools import ToolResult, run_tool

log = logging.getLogger("ascend_node.preflight")

REACH_WAIT = 5.0
"""Seconds, beyond the ping timeout, that node 0 waits for the other nodes' results and a
follower for node 0's verdict. Every node got the table within about one poll of the
others, so their results arrive within one ping timeout of each other."""
STALE_SLACK = 10.0
POLL = 0.1


def reach_path(paths: RunPaths, attempt_id: str, index: int) -> Path:
    return paths.attempt_dir(attempt_id) / f"reach-{index}.json"


def verdict_path(paths: RunPaths, attempt_id: str) -> Path:
    return paths.attempt_dir(attempt_id) / "reach.json"


@dataclass(frozen=True)
class ReachResult:
    """What this node learnt: every pair it pinged, and the cluster-wide verdict."""

    pings: tuple[PingRecord, ...]
    unreachable: tuple[PingRecord, ...]
    warnings: tuple[str, ...]
    missing: tuple[int, ...]
    cluster_pings: int
    seconds: float
    verdict_from_node0: bool


def judge_reach(docs: Mapping[int, ReachDoc], node_count: int, master_count: int,
                ) -> tuple[tuple[PingRecord, ...], tuple[str, ...], tuple[int, ...]]:
    """(unreachable pairs, warnings, nodes without results) over every node's results."""
    records = [r for i in sorted(docs) for r in docs[i].pings]
    bad = tuple(r for r in records if r.result == "unreachable")
    missing = tuple(i for i in range(node_count) if i not in docs)
    return bad, tuple(reach_warnings(records, master_count)), missing


@dataclass
class Reachability:
    paths: RunPaths
    attempt_id: str
    identity: NodeIdentity
    table: Mapping[str, object]
    hccn_tool: str
    ping_timeout: float
    started: float  # this agent's start, on `clock`
    poll: float = POLL
    runner: Callable[..., ToolResult] = run_tool
    clock: Callable[[], float] = time.monotonic
    sleep: Callable[[float], None] = time.sleep
    key: Optional[RendezvousKey] = None  # the job's rendezvous key: sign and check

    @property
    def index(self) -> int:
        return self.identity.global_index

    def run(self) -> ReachResult:
        t0 = self.clock()
        token = secrets.token_hex(8)
        pairs = sample_pairs(table_devices(self.table), self.index)
        answers = run_pings(pairs, self.hccn_tool, self.ping_timeout, self.runner,
                            workers=max(1, len(pairs)))
        mine = tuple(classify(self.index, p, res) for p, res in answers)
        doc = ReachDoc(run_id=self.paths.run_id, attempt_id=self.attempt_id,
                       global_index=self.index, token=token,
                       seconds=round(self.clock() - t0, 3), pings=mine)
        write_doc(reach_path(self.paths, self.attempt_id, self.index), doc,
                  self.paths.shared_dir, key=self.key)
        log.info("pre-flight: pinged %d peer device(s) from %d local device(s) in %.2f s",
                 len(mine), len({p.device_id for p in pairs}), doc.seconds)
        deadline = self.clock() + self.ping_timeout + REACH_WAIT
        verdict: Optional[ReachVerdictDoc]
        if self.index == 0:
            verdict = self._gather(doc, deadline)
        else:
            verdict = self._await_verdict(token, deadline + REACH_WAIT)
        seconds = self.clock() - t0
        if verdict is None:
            bad, warns, _missing = judge_reach({self.index: doc}, self.identity.node_count,
                                               self.identity.master_count)
            note = (f"no reachability verdict from {node_name(0, self.identity.master_count)}"
                    f" within {deadline + REACH_WAIT - t0:.0f} s (pre-flight off there, or it "
                    "failed); judged this node's own pings only")
            return ReachResult(mine, bad, (note, *warns), (), len(mine), seconds, False)
        notes: tuple[str, ...] = ()
        if verdict.missing:
            notes = (f"no ping results from "
                     f"{names_of(verdict.missing, self.identity.master_count, limit=8)} "
                     "(pre-flight off there, or slower than the wait); their pings were not "
                     "checked",)
        return ReachResult(mine, verdict.unreachable, notes + verdict.warnings,
                           verdict.missing, verdict.pings, seconds, True)

    # ------------------------------------------------------------------ node 0

    def _start_on_volume(self) -> Optional[int]:
        now = volume_clock_ns(self.paths.attempt_dir(self.attempt_id))
        if now is None:
            return None
        return now - int((self.clock() - self.started) * 1e9)

    def _gather(self, mine: ReachDoc, deadline: float) -> ReachVerdictDoc:
        start_ns = self._start_on_volume()
        oldest = None if start_ns is None else start_ns - int(STALE_SLACK * 1e9)
        docs: dict[int, ReachDoc] = {0: mine}
        fresh = Freshness(self.paths.shared_dir)
        n = self.identity.node_count
        while True:
            fresh.new_poll()
            for i in range(1, n):
                if i in docs:
                    continue
                got = read_doc(fresh.file(reach_path(self.paths, self.attempt_id, i)),
                               ReachDoc, self.paths.run_id, self.key)
                if (isinstance(got, Valid) and got.doc.attempt_id == self.attempt_id
                        and got.doc.global_index == i
                        and (oldest is None or got.stamp[2] >= oldest)):
                    docs[i] = got.doc
            if len(docs) == n or self.clock() >= deadline:
                break
            self.sleep(self.poll)
        bad, warns, missing = judge_reach(docs, n, self.identity.master_count)
        verdict = ReachVerdictDoc(
            run_id=self.paths.run_id, attempt_id=self.attempt_id,
            tokens={i: d.token for i, d in docs.items()}, unreachable=bad[:4096],
            warnings=tuple(w[:1000] for w in warns[:64]), missing=missing,
            pings=sum(len(d.pings) for d in docs.values()))
        write_doc(verdict_path(self.paths, self.attempt_id), verdict, self.paths.shared_dir,
                  key=self.key)
        return verdict

    # ------------------------------------------------------------------ followers

    def _await_verdict(self, token: str, deadline: float) -> Optional[ReachVerdictDoc]:
        fresh = Freshness(self.paths.shared_dir)
        path = verdict_path(self.paths, self.attempt_id)
        while True:
            fresh.new_poll()
            got = read_doc(fresh.file(path), ReachVerdictDoc, self.paths.run_id, self.key)
            if (isinstance(got, Valid) and got.doc.attempt_id == self.attempt_id
                    and got.doc.tokens.get(self.index) == token):
                return got.doc
            if self.clock() >= deadline:
                return None
            self.sleep(self.poll)


def result_json(result: ReachResult, master_count: int) -> dict[str, object]:
    """The `reach` part of `<state-dir>/preflight.json` (and `status --json`)."""
    def pair(r: PingRecord) -> dict[str, object]:
        return {"source": r.source, "device": r.device_id, "peer": r.peer,
                "peer_device": r.peer_device, "address": r.address, "result": r.result,
                "detail": r.detail}

    return {
        "ok": not result.unreachable,
        "seconds": round(result.seconds, 3),
        "pings_from_this_node": [pair(r) for r in result.pings],
        "pings_in_cluster": result.cluster_pings,
        "unreachable": [pair(r) for r in result.unreachable],
        "nodes_without_results": [node_name(i, master_count) for i in result.missing],
        "verdict_from_node0": result.verdict_from_node0,
        "warnings": list(result.warnings),
    }
