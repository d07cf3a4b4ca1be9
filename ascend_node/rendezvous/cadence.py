"""When a waiting pod looks at the shared volume, and how closely: what it costs the NFS server.

On NFS every look is a round trip to the server the whole job shares (the model PVC that
must then serve the weights): a directory open is one GETATTR, a file read an OPEN, READ
and CLOSE (v4) or LOOKUP, ACCESS, READ (v3). A job waits as long as its slowest pod
takes to start (image pulls spread starts over minutes), so what matters at N = 1,024 is
the cost of a pod that waits with nothing happening (docs/rendezvous.md, "Poll cost").

A follower therefore *glances* and *looks*:

- a **glance** is one directory open (one GETATTR) of the run directory
  (`.ascend-node/<run>`), compared with what the last glance saw (inode, mtime, ctime,
  size, links). That directory changes only when something every follower must act on
  happens: node 0 opens an attempt (it replaces `attempt.json`), or node 0 publishes a
  verdict or sees a contested slot, after which it *nudges* the directory
  (`freshness.nudge`: sets its mtime, so that a change within one tick of the server's
  clock still shows);
- a **look** is the full poll: revalidate, read `attempt.json`, the outcome, its own slot.

For its first `FAST_FOR` seconds, and for `FAST_FOR` seconds after it publishes or a new
attempt opens, a follower looks at every poll (`ASCEND_NODE_POLL_INTERVAL`, 0.2 s), as before. Then
it glances every `GLANCE_EVERY` s (or the poll interval if longer) and looks when the glance
shows a change, and at least every `LOOK_EVERY` s whatever the glance says (a missed
nudge, a twin rewriting its slot, progress for the log). Node 0 keeps polling at
the poll interval: it is one pod, and its cost per poll is a GETATTR unless the attempt
directory changed (then a listing, and a read of each slot that is new or replaced); a
quarter of it for a while when only the last slot of a start burst is missing
(`node0_nap`).

**The start burst.** A gang-scheduled job starts its N pods within seconds, so their
first seconds coincide: at 11-20 RPC/s per pod in its fast polls (measured on the bed),
1,024 pods would ask one NFS server for ~20,000 RPC/s for ten seconds. The fast polls
therefore depend on N (`fast_for`, `fast_interval`): a small job keeps them (sub-second
lag, as before); from `JOB_FAST_BUDGET` / `FAST_POLL_RPCS` * the poll interval followers on
(30 at the defaults), each one's fast poll is spaced so the whole job's fast polls stay
near `JOB_FAST_BUDGET` RPC/s; at `GLANCE_FROM_START_AT` nodes or more a follower glances
from its start (a glance every 0.5 s, a look every 5 s: under 5 RPC/s at every moment).

**The join, paced.** At `GLANCE_FROM_START_AT` nodes or more a follower also keeps a
ledger of what its recent polls cost (modeled: `GLANCE_RPCS`, `LOOK_PEAK_RPCS`,
`JOIN_RPCS`, measured on the bed) and holds a poll back until the last `WINDOW` seconds
leave room for it under `WINDOW_RPCS` (`room_in`): its join — the first look at the shared
directory, node 0's slot, its own publish: with the glance that began it, the whole of a
window's budget — then stands alone in its window: the next glance comes once it has left
it, and a pod that glanced before node 0's attempt opened joins once those glances have
left. So no `WINDOW` seconds of a waiting follower's life, join included, cost the server
more than `WINDOW_RPCS` (issue 29's target: 5 RPC/s over any 5 s window at N >= 64); the
price is up to `WINDOW` s of lag around the pod's own join (docs/rendezvous.md). Such a
follower joins only into an attempt directory node 0 has made (`joins_now`): making it
itself, when it read `attempt.json` first, cost more than a window holds.

Pure functions of the times and the job's size, so the cadence is tested by a table of
cases.
"""

from __future__ import annotations

import math
from typing import Optional

FAST_FOR = 10.0
"""Seconds a follower polls fully after it starts, publishes, or sees a new attempt."""

GLANCE_EVERY = 0.5
"""Seconds between glances once calm: bounds how late a follower sees node 0's verdict."""

LOOK_EVERY = 5.0
"""Seconds between full looks once calm, whatever the glances say (the fallback)."""


GLANCE_FROM_START_AT = 64
"""Nodes from which a follower glances from its start (no fast polls at all)."""

JOB_FAST_BUDGET = 320.0
"""RPC/s the followers of a job below `GLANCE_FROM_START_AT` nodes may ask for together in
their fast polls, when all start at once (31 followers at 0.2 s, `FAST_POLL_RPCS` each)."""


def fast_for(node_count: int) -> float:
    """Seconds a follower polls fully after it starts, publishes or sees a new attempt:
    `FAST_FOR`, or none at all in a job of `GLANCE_FROM_START_AT` nodes or more."""
    return 0.0 if node_count >= GLANCE_FROM_START_AT else FAST_FOR


def fast_interval(node_count: int, poll_interval: float) -> float:
    """Seconds between a follower's fast polls: the poll interval, spaced out so that
    `node_count - 1` followers polling together ask for at most `JOB_FAST_BUDGET` RPC/s
    (never more than a glance's interval: the lag stays under a second)."""
    spread = max(node_count - 1, 0) * FAST_POLL_RPCS / JOB_FAST_BUDGET
    return max(poll_interval, min(spread, GLANCE_EVERY))


WINDOW = 5.0
"""Seconds of the window over which a large job's follower's RPCs are bounded."""

WINDOW_RPCS = 25.0
"""What a large job's follower may ask for in any `WINDOW` seconds: 5 RPC/s."""

def paced(node_count: int) -> bool:
    """Whether a follower of a job of `node_count` nodes paces its polls by the ledger
    (`room_in`): the jobs whose followers glance from their start."""
    return fast_for(node_count) == 0


def joins_now(node_count: int, attempt_dir_seen: bool) -> bool:
    """Whether a follower that found an attempt to publish into joins it in this poll.

    In a job that paces its polls (`paced`) it publishes only into an attempt directory
    its look saw exist: node 0 makes it (its own slot, right after `attempt.json`), so a
    follower that meets `attempt.json` first — pods started together, node 0 a few round
    trips into opening the attempt — would make the directories itself: two CREATEs and
    their look-ups and ACCESSes on top of its join, ~29 RPCs in one window (measured on
    the bed), over `WINDOW_RPCS`. It looks again instead, when the ledger has room for
    its join. Nothing needs the follower's directory: node 0 publishes into the attempt
    it opened before it waits for anyone, or has its verdict there already. A small job
    keeps joining at once (sub-second lag; its fast polls are not paced)."""
    return attempt_dir_seen or not paced(node_count)


def room_in(ledger: list[tuple[float, float]], at: float, cost: float,
            window: float = WINDOW, budget: float = WINDOW_RPCS) -> float:
    """The earliest time at or after `at` when a poll costing `cost` RPCs keeps every
    `window` seconds ending then within `budget`, given `ledger`: (time, RPCs) of the
    polls made, oldest first. A poll of more than the whole budget waits until the
    ledger is empty in its window (it then stands alone in it)."""
    t = at
    for _ in range(len(ledger) + 1):  # each round lets one poll leave the window
        # (`when + window > t`, not `when > t - window`: the time at which a poll
        # leaves, `when + window`, must compare as left, whatever the rounding)
        inside = [(when, rpcs) for when, rpcs in ledger if when + window > t]
        if not inside or sum(rpcs for _, rpcs in inside) + cost <= budget:
            return t
        t = max(t, inside[0][0] + window)  # the oldest poll in the window leaves it
    return t


def forget(ledger: list[tuple[float, float]], now: float, window: float = WINDOW) -> None:
    """Drop the ledger's polls that no window ending now or later holds."""
    while ledger and ledger[0][0] + window <= now:
        ledger.pop(0)


def is_calm(now: float, busy_since: float, node_count: int = 0) -> bool:
    """True once `fast_for(node_count)` seconds passed since the last event that calls for
    fast polls (at once in a large job). `node_count` 0: a job of unknown, small size."""
    return now - busy_since >= fast_for(node_count)


def follower_looks(now: float, busy_since: float, last_look: float, glance_changed: bool,
                   poll_interval: float, node_count: int = 0) -> bool:
    """Whether this poll of a follower reads the documents or only glances. A follower
    that has not looked yet always looks (its first poll)."""
    if glance_changed or not is_calm(now, busy_since, node_count):
        return True
    return now - last_look >= max(LOOK_EVERY, poll_interval)


def follower_nap(now: float, busy_since: float, poll_interval: float,
                 node_count: int = 0) -> float:
    """Seconds to the next poll (before jitter)."""
    if not is_calm(now, busy_since, node_count):
        return fast_interval(node_count, poll_interval)
    return max(poll_interval, GLANCE_EVERY)


FIRST_ATTEMPT_SPLIT = 4
"""While a follower has seen no attempt, in its first poll interval, it looks this many
times per poll interval (`first_attempt_nap`)."""


def first_attempt_nap(now: float, started: float, poll_interval: float,
                      node_count: int = 0) -> Optional[float]:
    """A shorter nap for a follower that has not seen node 0's `attempt.json` yet, in the
    first poll interval after its start; None: `follower_nap`'s.

    Pods started together reach their first look together, so node 0's attempt often
    appears a few tens of ms after a follower found none: a whole poll's nap then puts a
    poll between the attempt and the publish that the floor, which has no attempts, does
    not wait (docs/benchmarks.md, issue 30). A few looks more (`peak_follower_rpcs`), once
    per start, spaced at least as `fast_interval` spaces a job's fast polls, so that a
    job's followers together stay within `JOB_FAST_BUDGET`: none from 31 nodes on (at
    the default poll interval), none in a job that glances from its start."""
    if fast_for(node_count) == 0 or now - started >= poll_interval:
        return None
    spread = max(node_count - 1, 0) * FAST_POLL_RPCS / JOB_FAST_BUDGET
    nap = max(poll_interval / FIRST_ATTEMPT_SPLIT, spread)
    return nap if nap < poll_interval else None


def after_publish_nap(now: float, published_at: float, poll_interval: float,
                      node_count: int = 0) -> Optional[float]:
    """A shorter nap for a follower in the first poll interval after its own publish, while
    it waits for the verdict of that attempt; None: `follower_nap`'s.

    Node 0 answers the last slot of a start burst within about a quarter poll
    (`node0_nap`), so the pod that published last would otherwise nap a whole poll before
    it reads a verdict that is there already — the last step on the whole job's path
    (issue 30, docs/benchmarks.md). The same few looks, spaced the same way, as
    `first_attempt_nap` (none from 31 nodes; `peak_follower_rpcs` counts them)."""
    return first_attempt_nap(now, published_at, poll_interval, node_count)


def settle_wait(poll_interval: float) -> float:
    """How long node 0 waits, after it nudged the followers, before it completes with a
    contested slot: the longest a calm follower takes to glance (with the 20 % jitter),
    plus a poll to read its slot and write a conflict document."""
    return max(poll_interval, GLANCE_EVERY) * 1.2 + poll_interval


def node0_lists(dir_changed: bool, changed_last_poll: bool, now: float,
                last_listing: float) -> bool:
    """Whether node 0 lists the attempt directory (and reads the slots that are new or
    replaced) this poll: when the directory changed; one poll more after it changed (a
    second change within the same tick of the server's clock leaves the mtime as it
    was); and every `LOOK_EVERY` s whatever the directory says."""
    return dir_changed or changed_last_poll or now - last_listing >= LOOK_EVERY


LAST_SLOT_SPLIT = 4
"""While one slot is missing, node 0 polls this many times per poll interval for
`FAST_FOR` seconds after the last slot arrived (`node0_nap`)."""


def node0_nap(poll_interval: float, missing: int, since_arrival: float) -> float:
    """Seconds to node 0's next poll while it waits for slots (before jitter): the poll
    interval; a quarter of it while one slot is missing and the last one arrived less than
    `FAST_FOR` s ago.

    The last pod's publish -> node 0's verdict is on the path of every pod of the job (none
    holds the table before it): half a poll on average, 0.1 s at the defaults (issue 30,
    docs/benchmarks.md). A gang-scheduled job's pods start within seconds of each other, so
    when all but one slot came in the last seconds the last pod is most likely close
    behind. Node 0 is one pod, and a poll of its is two GETATTRs whatever the job's size:
    its quick polls ask the server for `node0_rpcs_per_second` of a quarter poll (40 RPC/s
    at 0.2 s) for at most `FAST_FOR` s once the last but one slot is in; a slot that comes
    later finds node 0 at its poll interval again."""
    if missing == 1 and since_arrival < FAST_FOR:
        return poll_interval / LAST_SLOT_SPLIT
    return poll_interval


# What each kind of poll costs an NFS server, measured on the test bed (kernel nfsd, Linux
# clients, v4.2 and v3 at default mounts; bench/bench_nfs_cost.py, docs/benchmarks.md).
GLANCE_RPCS = 1.0
"""A glance: one GETATTR (the directory open's close-to-open revalidation)."""

LOOK_RPCS = 6.0
"""A calm follower's full look: two directory GETATTRs, then attempt.json, the outcome and
its own slot revalidated (GETATTRs), read only when changed. Measured: a calm follower
costs 2.8 RPC/s on v4.2 and 3.1 on v3, which this and the cadence give as 3.0."""

FAST_POLL_RPCS = 2.2
"""A full look every poll interval, as in a follower's first seconds: the files stay in the
client's cache (and delegations), so mostly the two directory GETATTRs (measured 11 RPC/s
at 0.2 s on v4.2)."""

COMPLETE_RPCS_PER_NODE = 70.0
"""RPCs per pod of a completing rendezvous, from the last pod's start to every pod holding
the table: its own publish and reads, node 0's listing and settle read of its slot, each
follower's look at the verdict (measured: 48 per pod on v4.2, 67 on v3, at N = 8 with a
client per pod)."""


LOOK_PEAK_RPCS = 14.0
"""The most a calm follower's full look costs (the pacing's model, not the mean): both
directory opens and listings, attempt.json, the outcome, its own slot and node 0's
progress document each re-read because they changed (measured on the bed, v4.2: 14 in
the first look after the pod's publish, 4-7 later)."""

NO_ATTEMPT_LOOK_RPCS = 6.0
"""A look that finds no attempt open (a pod that came before node 0 opened it): the path
walked down to the run directory, attempt.json's absence, the volume's writability (a
STATFS): measured 5 on the bed, v4.2."""


def look_rpcs(found_attempt: bool) -> float:
    """What the pacing charges a look that did not publish."""
    return LOOK_PEAK_RPCS if found_attempt else NO_ATTEMPT_LOOK_RPCS


JOIN_RPCS = 24.0
"""A follower's join after the glance that began its poll, as the pacing charges it: the
rest of its first look at the shared directory (the path's LOOKUPs and ACCESSes, the
attempt directory's open, attempt.json, the outcome's and its own slot's absence), node
0's slot, and its publish (the temp file's OPEN, SETATTR, WRITE, CLOSE, then ACCESS,
LINK, REMOVE). Measured on the bed, v4.2 (`bench/bench_nfs_burst.py --trace`): 24 after
a glance of 1 (the glance's open is the path walk's first half). With the glance, the
whole of `WINDOW_RPCS`: a join stands alone in its window."""


def follower_rpcs_per_second(poll_interval: float, calm: bool, node_count: int = 0) -> float:
    """What one waiting follower asks of the server, on average (in its first seconds
    when not `calm`: in a job of `node_count` nodes, see `fast_for`)."""
    if not calm and fast_for(node_count) > 0:
        return FAST_POLL_RPCS / fast_interval(node_count, poll_interval)
    return (GLANCE_RPCS / max(poll_interval, GLANCE_EVERY)
            + (LOOK_RPCS - GLANCE_RPCS) / max(LOOK_EVERY, poll_interval))


def node0_rpcs_per_second(poll_interval: float) -> float:
    """Node 0 while nothing arrives: two directory GETATTRs per poll."""
    return 2 * GLANCE_RPCS / poll_interval


def job_rpcs_per_second(node_count: int, poll_interval: float, calm: bool = True) -> float:
    """A job of `node_count` pods, all but node 0 waiting: its load on the server."""
    return (max(node_count - 1, 0) * follower_rpcs_per_second(poll_interval, calm, node_count)
            + node0_rpcs_per_second(poll_interval))


def peak_follower_rpcs(poll_interval: float, node_count: int, window: float = LOOK_EVERY
                       ) -> float:
    """The most one follower asks for in any `window` s, per second, by the cadence's
    worst case (the jitter's shortest naps): its fast polls when it has them, else the
    glances of the window plus one full look — and, for a follower that paces its polls
    (`paced`), at most the ledger's bound over a `WINDOW`, its join's included."""
    shortest = 0.8  # the jitter: naps of 80-120 %
    if fast_for(node_count) > 0:
        quick = first_attempt_nap(0.0, 0.0, poll_interval, node_count)
        # the looks of a first poll interval without an attempt, once (first_attempt_nap),
        # and of the first poll interval after the publish (after_publish_nap)
        extra = 2 * math.ceil(poll_interval / (quick * shortest)) if quick else 0
        return (FAST_POLL_RPCS / (fast_interval(node_count, poll_interval) * shortest)
                + extra * FAST_POLL_RPCS / window)
    glances = window / (max(poll_interval, GLANCE_EVERY) * shortest)
    waiting = (glances * GLANCE_RPCS + (LOOK_RPCS - GLANCE_RPCS)) / window
    return max(waiting, WINDOW_RPCS / WINDOW) if paced(node_count) else waiting
