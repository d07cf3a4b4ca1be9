"""Every node's start on one time axis, and the words under it (pure).

`build_timeline` turns the collected summaries into rows of bars (seconds since the
earliest start any node accounts for, on the volume's clock), names the last node to
publish and what made it late, and lists the nodes that never arrived. The text and HTML
renderers draw the same `Timeline`, so they cannot disagree.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import Callable, Optional

from ascend_node.discover.identity import node_name
from ascend_node.report.collect import Collected
from ascend_node.report.failures import group_failures
from ascend_node.report.summary import NodeSummary

MAX_ROWS = 40  # more nodes than this are drawn in groups (the slowest of each)


@dataclass(frozen=True)
class PhaseStyle:
    name: str
    glyph: str  # in the text timeline
    colour: str  # in the HTML page (distinct, saturated: a screenshot can tell them apart)
    label: str


# In the order a start goes through them. `rendezvous` runs until the node's slot is
# published; `wait` is the rest of it (waiting for the other nodes and the table).
STYLES = (
    PhaseStyle("container", ".", "#a0a0a0", "container, before the agent"),
    PhaseStyle("startup", "s", "#8c564b", "startup"),
    PhaseStyle("discovery", "D", "#1f77b4", "discovery"),
    PhaseStyle("mindcluster", "M", "#393b79", "waiting for MindCluster's hccl.json"),
    PhaseStyle("rendezvous", "R", "#ff7f0e", "rendezvous, to publish"),
    PhaseStyle("wait", "~", "#f2d16b", "waiting for the table"),
    PhaseStyle("summary", "+", "#e377c2", "summary"),
    PhaseStyle("outputs", "o", "#7f7f7f", "outputs"),
    PhaseStyle("preflight", "P", "#9467bd", "pre-flight"),
    PhaseStyle("install", "I", "#2ca02c", "install"),
    PhaseStyle("set_env", "E", "#17becf", "set_env"),
    PhaseStyle("config", "C", "#bcbd22", "config"),
    # Not red: red is for failures (the `!` of the text, the outcome of a failed row).
    PhaseStyle("exec", "X", "#006d2c", "exec"),
)
STYLE = {s.name: s for s in STYLES}


@dataclass(frozen=True)
class Bar:
    phase: str
    start: float  # seconds since the timeline's t0
    end: float
    title: str  # what a hover shows: node, phase, times, detail

    @property
    def seconds(self) -> float:
        return max(0.0, self.end - self.start)


@dataclass(frozen=True)
class Row:
    index: int  # the node drawn (the slowest of a group)
    label: str  # "37 w36", or "32-33" for a group
    bars: tuple[Bar, ...]
    published: Optional[float]
    end: Optional[float]  # exec, failure or the summary's last moment
    outcome: str  # "exec", "table", "exit 4", "no summary", "never arrived"
    members: tuple[int, ...] = ()


@dataclass(frozen=True)
class Timeline:
    run_id: str
    attempt_id: Optional[str]
    node_count: int
    t0: float  # volume clock, seconds since the epoch
    span: float  # seconds the axis covers
    rows: tuple[Row, ...]
    grouped: int  # nodes per row (1: one row per node)
    words: tuple[str, ...]  # the decision, the last arrival, the critical path, the rest
    missing: tuple[str, ...]  # nodes that never arrived, by name
    ignored: tuple[str, ...]
    decided: Optional[float] = None  # seconds: the table (or abort) was written
    decision: Optional[str] = None  # "table" or "abort" (None: nothing was decided)
    cause: tuple[str, ...] = ()  # first: the first failure in time, who never came

    @property
    def decision_word(self) -> str:
        """What the dashed mark at `decided` stands for."""
        return self.decision or "decision"


def fmt_s(seconds: float) -> str:
    """1.23 s, 4.7 s, 41 s: enough digits to compare, no more."""
    if abs(seconds) < 10:
        return f"{seconds:.2f} s"
    if abs(seconds) < 100:
        return f"{seconds:.1f} s"
    return f"{seconds:.0f} s"


def short_name(index: int, name: str) -> str:
    """`w36` for `worker 36 (node 37)`, `m0` for a master."""
    parts = name.split()
    if len(parts) >= 2 and parts[0] in ("master", "worker") and parts[1].isdigit():
        return f"{parts[0][0]}{parts[1]}"
    return f"n{index}"


def node_label(index: int, name: Optional[str]) -> str:
    """The one way a row names its node: `37 w36` (global index, then role and index
    in the role: LABEL_KEY says so under the picture); `9 ?` when the role is unknown."""
    return f"{index} {short_name(index, name) if name else '?'}"


LABEL_KEY = "rows: node index, then m<k> = master k, w<k> = worker k"


def _top(summary: NodeSummary, name: str) -> list[tuple[float, float]]:
    return [(p.start, p.end) for p in summary.phases if p.name == name]


def node_bars(s: NodeSummary, t0: float) -> list[Bar]:
    """The node's top-level phases as bars; the rendezvous split at its publication."""
    who = f"{s.name}"
    bars: list[Bar] = []

    def add(phase: str, start: float, end: float, detail: str = "") -> None:
        title = (f"{who}: {STYLE[phase].label} {fmt_s(end - start)} "
                 f"(from {fmt_s(start - t0)} to {fmt_s(end - t0)})" + detail)
        bars.append(Bar(phase, start - t0, end - t0, title))

    startup = _top(s, "startup")
    agent_start = s.process_start or (startup[0][0] if startup else None)
    if s.container_start is not None and agent_start is not None \
            and agent_start > s.container_start:
        add("container", s.container_start, agent_start, f"; {s.container_start_source}")
    if startup:
        add("startup", min(agent_start or startup[0][0], startup[0][0]), startup[0][1])
    for p in s.phases:
        if "." in p.name or p.name not in STYLE or p.name == "startup":
            continue
        detail = "" if p.outcome in ("ok", "exec") else f"; {p.outcome}"
        if p.name == "discovery":
            detail += tool_words(s)
        if p.name == "rendezvous" and s.published and p.start <= s.published <= p.end:
            add("rendezvous", p.start, s.published, "; published its slot")
            add("wait", s.published, p.end, detail)
            continue
        add(p.name, p.start, p.end, detail)
    return bars


def tool_words(s: NodeSummary) -> str:
    """`; 8 x hccn_tool -ip at 4.7 s each` (the discovery's device queries)."""
    calls = [p.seconds for p in s.phases if p.name == "discovery.hccn_tool"]
    if not calls:
        return ""
    return f"; {len(calls)} x hccn_tool -ip at {fmt_s(statistics.mean(calls))} each"


def _end_of(s: NodeSummary) -> tuple[float, str]:
    execs = [p.end for p in s.phases if p.name == "exec"]
    if s.state == "failed":
        return s.written, f"exit {s.exit_code if s.exit_code is not None else 1}"
    if s.state == "exec" and execs:
        return execs[-1], "exec"
    return s.last, s.state


def build_timeline(got: Collected) -> Timeline:
    by_index = {s.global_index: s for s in got.summaries}
    published = {i: s.published for i, s in by_index.items() if s.published}
    published.update(got.slot_published)
    # Every moment drawn or named is on the axis: a table (or a slot) left by an earlier
    # start of the same attempt comes before these nodes' starts, never at a negative time.
    moments = [s.first for s in got.summaries] + list(published.values())
    if got.decided:
        moments.append(got.decided)
    t0 = min(moments) if moments else 0.0
    ends = [s.last for s in got.summaries] + list(published.values())
    if got.decided:
        ends.append(got.decided)
    span = max(1e-3, (max(ends) if ends else t0) - t0)
    master_count = _master_count(got.summaries)

    def name_of(i: int) -> Optional[str]:
        return node_name(i, master_count) if master_count is not None else None

    missing_ids = [i for i in range(got.node_count)
                   if i not in by_index and i not in got.slot_published]
    singles: list[Row] = []
    for index in sorted(set(by_index) | set(got.slot_published) | set(missing_ids)):
        s = by_index.get(index)
        pub = published.get(index)
        if s is None:
            known = index not in got.slot_published
            singles.append(Row(index, node_label(index, name_of(index)), (),
                               pub - t0 if pub else None, pub - t0 if pub else None,
                               "never arrived" if known else "no summary", (index,)))
            continue
        end, outcome = _end_of(s)
        singles.append(Row(index, node_label(index, s.name),
                           tuple(node_bars(s, t0)), pub - t0 if pub else None, end - t0,
                           outcome, (index,)))
    rows, per_row = group_rows(singles, MAX_ROWS)
    missing = tuple(name_of(i) or f"node {i}" for i in missing_ids)
    # A table means every node published its slot: one without a summary still came.
    words = explain(got.summaries, published, t0, got.decided, singles, got.opened,
                    got.decision, missing if got.decision != "table" else ())
    return Timeline(got.run_id, got.attempt_id, got.node_count, t0, span, tuple(rows),
                    per_row, tuple(words), missing, tuple(i.line() for i in got.ignored),
                    got.decided - t0 if got.decided else None, got.decision,
                    tuple(cause_lines(got.summaries, missing, t0)))


def _failed(summaries: tuple[NodeSummary, ...]) -> list[NodeSummary]:
    """The failed nodes, first in time first (the moment each wrote its failure)."""
    return sorted((s for s in summaries if s.state == "failed"),
                  key=lambda s: (s.written, s.exit_code or 1, s.global_index))


def cause_lines(summaries: tuple[NodeSummary, ...], missing: tuple[str, ...], t0: float
                ) -> list[str]:
    """What the report leads with: the first failure in time and who never came; a
    time-out (exit 4) comes after the nodes it waited for."""
    lines: list[str] = []
    failed = _failed(summaries)
    if failed:
        s = failed[0]
        lines.append(f"first failure: {s.name} at {fmt_s(s.written - t0)}, exit "
                     f"{s.exit_code if s.exit_code is not None else 1}: "
                     f"{s.cause or 'no cause'}")
    if missing:
        absent = f"never arrived ({len(missing)}): {', '.join(missing)}"
        timed_out = bool(failed) and failed[0].exit_code == 4
        lines.insert(0 if timed_out else len(lines), absent)
    return lines + warning_lines(summaries)


def warning_lines(summaries: tuple[NodeSummary, ...]) -> list[str]:
    """One line per distinct warning the nodes left (events.warn), naming who said it."""
    said: dict[str, list[str]] = {}
    for s in sorted(summaries, key=lambda s: s.global_index):
        if s.warning:
            said.setdefault(s.warning, []).append(s.name)
    out = []
    for text, names in said.items():
        shown = ", ".join(names[:4]) + (f" and {len(names) - 4} more" if len(names) > 4 else "")
        out.append(f"warning ({len(names)} of {len(summaries)} nodes: {shown}): {text}")
    return out


def _master_count(summaries: tuple[NodeSummary, ...]) -> Optional[int]:
    """Masters are the lowest indices: the count is one past the highest master seen,
    known when a worker is seen too (else unknown)."""
    masters = [s.global_index for s in summaries if s.name.startswith("master")]
    workers = [s for s in summaries if s.name.startswith("worker")]
    if workers:
        w = workers[0]
        try:
            return w.global_index - int(w.name.split()[1])
        except (IndexError, ValueError):
            return None
    return max(masters) + 1 if masters else None


def group_rows(rows: list[Row], limit: int) -> tuple[list[Row], int]:
    """At most `limit` rows: consecutive nodes share a row, drawn as a failed one if
    any, else the one that published last (the one the others waited for)."""
    if len(rows) <= limit:
        return rows, 1
    per = math.ceil(len(rows) / limit)
    out = []
    for k in range(0, len(rows), per):
        chunk = rows[k:k + per]
        slowest = max(chunk, key=lambda r: (r.outcome.startswith("exit"), r.published is None,
                                            r.published or 0.0, r.end or 0.0))
        first, last = chunk[0].index, chunk[-1].index
        out.append(Row(slowest.index, f"{first}-{last} >{slowest.index}", slowest.bars,
                       slowest.published, slowest.end, slowest.outcome,
                       tuple(r.index for r in chunk)))
    return out, per


_BEFORE_PUBLISH = ("container", "startup", "discovery", "mindcluster", "rendezvous")


def decision_line(decision: Optional[str], decided: Optional[float], t0: float,
                  last_published: Optional[float], all_arrived: bool = True) -> str:
    """`table: written 0.15 s after the last arrival, at 7.51 s`, `abort: ...` (no table),
    or `nothing decided: ...`: the words say what outcome.json holds. While a node never
    arrived, the last that published is not "the last arrival"."""
    if decided is None:
        return "nothing decided: no table and no abort on the volume for this attempt"
    word = decision or "decision"
    what = " (no table)" if decision == "abort" else ""
    if last_published is None:
        return f"{word}: written at {fmt_s(decided - t0)}{what}"
    last = "the last arrival" if all_arrived else "the last node that arrived"
    if decided >= last_published:
        return (f"{word}: written {fmt_s(decided - last_published)} after {last}, "
                f"at {fmt_s(decided - t0)}{what}")
    return (f"{word}: written at {fmt_s(decided - t0)}, before {last} published "
            f"(at {fmt_s(last_published - t0)}){what}")


def explain(summaries: tuple[NodeSummary, ...], published: dict[int, float], t0: float,
            decided: Optional[float], rows: list[Row], opened: Optional[float] = None,
            decision: Optional[str] = None, missing: tuple[str, ...] = ()) -> list[str]:
    """The decision, the last arrival and why, the slowest hand-over, the critical path,
    then every failure but the first, grouped (`cause_lines` leads with the first).
    `missing`: the nodes that never arrived; then none of those that did is "the last
    arrival", and the path the job waited on ran through a node that never came."""
    words: list[str] = []
    by_index = {s.global_index: s for s in summaries}

    def name(index: int) -> str:
        s = by_index.get(index)
        return s.name if s else f"node {index}"

    if published:
        last = max(published, key=lambda i: (published[i], i))
        ref = 0 if 0 in published and last != 0 else min(published, key=published.get)  # type: ignore[arg-type]
        lead = published[last] - published[ref]
        head = (f"last arrival: {name(last)} published {fmt_s(published[last] - t0)} "
                f"after the first start")
        if last != ref:
            head = (f"last arrival: {name(last)} published {fmt_s(lead)} after "
                    f"{name(ref)}")
        if missing:
            never = ", ".join(missing)
            head = (f"last arrival: none: {never} never arrived; of those that did, "
                    f"{name(last)} published last, "
                    + (f"{fmt_s(lead)} after {name(ref)}" if last != ref else
                       f"{fmt_s(published[last] - t0)} after the first start"))
        reason = why_late(by_index.get(last), summaries, t0, opened, by_index.get(0))
        words.append(head + (f": {reason}" if reason else ""))
        words.append(decision_line(decision, decided, t0, published[last], not missing))
    elif decided is not None:
        words.append(decision_line(decision, decided, t0, None))
    handed = [r for r in rows if r.outcome == "exec" and r.end is not None]
    if handed:
        slow = max(handed, key=lambda r: r.end or 0.0)
        s = by_index.get(slow.index)
        after = ""
        if s is not None and s.published is not None:
            post = [b for b in slow.bars if b.phase in ("outputs", "preflight", "install",
                                                        "set_env", "config")]
            if post:
                big = max(post, key=lambda b: b.seconds)
                after = f" ({STYLE[big.phase].label} {fmt_s(big.seconds)})"
        words.append(f"last hand-over: {name(slow.index)} exec at {fmt_s(slow.end or 0.0)}"
                     f"{after}")
    path = critical_path(rows, published, t0, decided, name, decision)
    if missing:
        path = (f"critical path: through {', '.join(missing)}, which never arrived "
                "(nothing after the rendezvous could start without it)")
    if path:
        words.append(path)
    rest = _failed(summaries)[1:]
    for group in group_failures((s.global_index, s.exit_code if s.exit_code is not None
                                 else 1, s.cause, "") for s in rest):
        words.append(f"then {group.line()}")
    return words


_AFTER_TABLE = ("outputs", "preflight", "install", "set_env", "config")


def critical_path(rows: list[Row], published: dict[int, float], t0: float,
                  decided: Optional[float], name: Callable[[int], str],
                  decision: Optional[str] = None) -> str:
    """The chain the job's start waited on: the last arrival's phases up to publishing,
    the table, then the last hand-over's phases up to exec. Only phases that take at
    least 5 % of the whole (or the largest of each side) are named."""
    by_index = {r.index: r for r in rows if r.bars}
    arrived = [i for i in published if i in by_index]
    if not arrived:
        return ""
    total = max((r.end or 0.0) for r in rows) or 1.0
    last = by_index[max(arrived, key=lambda i: (published[i], i))]

    def named(bars: list[Bar]) -> str:
        if not bars:
            return ""
        big = max(bars, key=lambda b: b.seconds)
        keep = [b for b in bars if b.seconds >= 0.05 * total or b is big]
        return ", ".join(f"{STYLE[b.phase].label} {fmt_s(b.seconds)}" for b in keep)

    before = [b for b in last.bars if b.phase in _BEFORE_PUBLISH and b.phase != "rendezvous"]
    parts = [f"{name(last.index)} from {fmt_s(last.bars[0].start)}"
             + (f": {named(before)}" if before else ""),
             f"published at {fmt_s(published[last.index] - t0)}"]
    if decided is not None:
        parts.append(f"{decision or 'decision'} at {fmt_s(decided - t0)}")
    handed = [r for r in rows if r.outcome == "exec" and r.end is not None and r.bars]
    if handed:
        slow = max(handed, key=lambda r: r.end or 0.0)
        after = named([b for b in slow.bars if b.phase in _AFTER_TABLE])
        parts.append(f"{name(slow.index)}" + (f": {after}" if after else ""))
        parts.append(f"exec at {fmt_s(slow.end or 0.0)}")
    return "critical path: " + " -> ".join(parts)


OPEN_WAIT = 1.0  # published within this of the attempt's opening: it waited for node 0


def why_late(late: Optional[NodeSummary], summaries: tuple[NodeSummary, ...], t0: float,
             opened: Optional[float] = None, node0: Optional[NodeSummary] = None) -> str:
    """What made `late` arrive late: node 0 opening the attempt late, a late start, or
    its phase furthest above the other nodes' median (with the device queries named
    for a slow discovery)."""
    if late is None:
        return ""
    joined = [p.start for p in late.phases if p.name == "rendezvous"]
    if (opened is not None and late.global_index != 0 and joined and late.published
            and joined[0] < opened <= late.published <= opened + OPEN_WAIT):
        text = (f"it waited {fmt_s(opened - joined[0])} for node 0 to open the attempt "
                f"(at {fmt_s(opened - t0)})")
        first = why_late(node0, summaries, t0) if node0 is not None else ""
        return text + (f"; node 0: {first[4:] if first.startswith('its ') else first}"
                       if first else "")
    others = [s for s in summaries if s.global_index != late.global_index]
    if not others:
        return ""
    start_lag = late.first - min(s.first for s in summaries)
    excess: dict[str, tuple[float, float, float]] = {}
    mine = {b.phase: b.seconds for b in node_bars(late, t0)}
    for phase in _BEFORE_PUBLISH:
        if phase not in mine:
            continue
        theirs = [next((b.seconds for b in node_bars(s, t0) if b.phase == phase), 0.0)
                  for s in others]
        median = statistics.median(theirs)
        excess[phase] = (mine[phase] - median, mine[phase], median)
    best = max(excess, key=lambda p: excess[p][0]) if excess else None
    if best is None or (start_lag >= excess[best][0] and start_lag > 0):
        first_of_late = "container" if late.container_start is not None else "agent"
        return f"its {first_of_late} started {fmt_s(start_lag)} after the first node's"
    extra, took, median = excess[best]
    if extra <= 0:
        return ""
    text = f"its {STYLE[best].label} took {fmt_s(took)} (others: {fmt_s(median)})"
    if best == "discovery":
        tools = tool_words(late)
        if tools:
            text += f": {tools[2:]}"
    return text
