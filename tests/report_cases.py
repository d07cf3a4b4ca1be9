"""Hand-made node summaries for the report's tests: jobs whose story is known.

Times are on an invented volume clock (T0 = 2026-01-01); every case says in its
docstring what the timeline must show, so a golden file is checked by reading it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

from ascend_node.discover.identity import node_name
from ascend_node.report.collect import Collected
from ascend_node.report.summary import ClockNote, NodeSummary, PhaseSpan

T0 = 1_767_225_600.0
RUN = "job-a"
ATTEMPT = "1767225600-abcd1234"


def node(index: int, *, masters: int = 1, count: int = 4, start: float = 0.0,
         startup: float = 0.4, tools: int = 8, tool_s: float = 0.05, join: float = 0.1,
         table_at: Optional[float] = None, boot: bool = True, post: float = 1.0,
         failed: Optional[tuple[int, str]] = None, container: Optional[float] = None
         ) -> NodeSummary:
    """One node's summary: it starts at `start` s (its container `container` s earlier),
    queries `tools` devices at `tool_s` s each (concurrently), publishes `join` s after
    discovery, holds the table at `table_at`, then (boot) spends `post` s before exec."""
    t = T0 + start
    phases = [PhaseSpan(name="startup", start=t, end=t + startup)]
    t += startup
    disc_end = t + tool_s + 0.01
    phases.append(PhaseSpan(name="discovery", start=t, end=disc_end))
    phases += [PhaseSpan(name="discovery.hccn_tool", start=t + 0.005, end=t + 0.005 + tool_s,
                         device=d) for d in range(tools)]
    t = disc_end
    published = t + join
    state, exit_code, cause = "table", None, ""
    end = max(published + 0.05, T0 + (table_at if table_at is not None else 0.0))
    phases.append(PhaseSpan(name="rendezvous", start=t, end=end,
                            outcome="failed" if failed else "ok"))
    t = end
    if failed:
        state, exit_code, cause = "failed", failed[0], failed[1]
    elif boot:
        share = post / 5
        for name in ("outputs", "preflight", "install", "set_env", "config"):
            dur = share * (2.0 if name == "preflight" else 0.75)
            phases.append(PhaseSpan(name=name, start=t, end=t + dur))
            t += dur
        phases.append(PhaseSpan(name="exec", start=t, end=t, outcome="exec"))
        state = "exec"
    return NodeSummary(
        run_id=RUN, attempt_id=ATTEMPT, global_index=index, name=node_name(index, masters),
        node_count=count, pod_ip=f"10.0.0.{index + 10}", agent_version="0.1.0",
        command="boot", state=state, exit_code=exit_code, cause=cause,  # type: ignore[arg-type]
        clock=ClockNote(offset=0.0, uncertainty=0.001),
        container_start=T0 + container if container is not None else None,
        container_start_source="PID 1's start" if container is not None else "",
        process_start=T0 + start, published=published, written=t + 0.002,
        phases=tuple(phases))


def slow_discovery() -> Collected:
    """4 nodes; node 3's eight hccn_tool calls take 4.7 s each, so it publishes last,
    about 4.7 s after node 0, and everyone waits for it; then each boots to exec."""
    table_at = 0.4 + 4.71 + 0.1 + 0.3
    nodes = [node(i, start=0.05 * i, table_at=table_at, tool_s=4.7 if i == 3 else 0.05,
                  container=-2.0 if i == 2 else None, post=1.0 + 0.2 * i) for i in range(4)]
    return Collected(RUN, ATTEMPT, Path("/shared/.ascend-node/job-a/timeline") / ATTEMPT,
                     tuple(nodes), (), 4, {}, T0 + table_at, T0 + 0.2, "table")


def large_job() -> Collected:
    """64 nodes (2 masters): drawn 2 a row; node 37 starts 30 s late (its image pulled
    late); node 9 and 50 never arrive; node 12 times out with exit 4."""
    nodes = []
    for i in range(64):
        if i in (9, 50):
            continue
        late = 30.0 if i == 37 else 0.01 * i
        fail = (4, "timed out after 60 s waiting for peers: 2 of 64 missing: worker 7 "
                   "(node 9), worker 48 (node 50)") if i == 12 else None
        nodes.append(node(i, masters=2, count=64, start=late, table_at=31.0, failed=fail,
                          boot=fail is None))
    return Collected(RUN, ATTEMPT, Path("/shared/.ascend-node/job-a/timeline") / ATTEMPT,
                     tuple(nodes), (), 64, {}, T0 + 31.0, T0 + 0.3, "table")
