"""When a waiting pod looks, as pure functions of the times involved (rendezvous/cadence.py).

The bounds they serve (docs/rendezvous.md, "Poll cost"): a follower that has waited
FAST_FOR seconds costs the server a glance (one GETATTR) per GLANCE_EVERY seconds and a
full look per LOOK_EVERY seconds, and sees node 0's verdict within a glance of it.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from ascend_node.rendezvous import cadence
from ascend_node.rendezvous.cadence import FAST_FOR, GLANCE_EVERY, LOOK_EVERY

P = 0.2  # the default --poll-interval


@pytest.mark.parametrize(
    ("now", "busy_since", "last_look", "changed", "poll", "looks"),
    [
        (0.0, 0.0, -1e9, True, P, True),             # the first poll
        (5.0, 0.0, 4.8, False, P, True),             # still fast: every poll looks
        (FAST_FOR - 0.01, 0.0, 9.8, False, P, True),
        (FAST_FOR, 0.0, 9.8, False, P, False),       # calm: a glance only
        (30.0, 0.0, 29.0, False, P, False),
        (30.0, 0.0, 30.0 - LOOK_EVERY, False, P, True),  # the periodic full look
        (30.0, 0.0, 29.9, True, P, True),            # the glance saw a change
        (30.0, 25.0, 29.9, False, P, True),          # busy again (published, new attempt)
        (30.0, 0.0, 24.0, False, 8.0, False),        # a poll interval over LOOK_EVERY...
        (30.0, 0.0, 22.0, False, 8.0, True),         # ...spaces the full looks by it
    ],
)
def test_when_a_follower_looks(now, busy_since, last_look, changed, poll, looks):
    assert cadence.follower_looks(now, busy_since, last_look, changed, poll) is looks


@pytest.mark.parametrize(
    ("now", "busy_since", "poll", "nap"),
    [
        (0.0, 0.0, P, P),                    # fast: the poll interval
        (FAST_FOR - 0.01, 0.0, P, P),
        (FAST_FOR, 0.0, P, GLANCE_EVERY),    # calm: a glance every GLANCE_EVERY
        (100.0, 95.0, P, P),                 # busy again
        (100.0, 0.0, 2.0, 2.0),              # a slower --poll-interval is kept
        (100.0, 0.0, 0.05, GLANCE_EVERY),    # a faster one only while busy
    ],
)
def test_how_long_a_follower_naps(now, busy_since, poll, nap):
    assert cadence.follower_nap(now, busy_since, poll) == pytest.approx(nap)


@pytest.mark.parametrize(
    ("now", "nodes", "poll", "nap"),
    [
        (0.0, 2, P, P / cadence.FIRST_ATTEMPT_SPLIT),   # no attempt at the first look
        (P * 0.99, 8, P, P / cadence.FIRST_ATTEMPT_SPLIT),
        (P, 2, P, None),              # one poll interval on: the fast polls as before
        (0.0, 16, P, 15 * cadence.FAST_POLL_RPCS / cadence.JOB_FAST_BUDGET),  # the budget
        (0.0, 30, P, 29 * cadence.FAST_POLL_RPCS / cadence.JOB_FAST_BUDGET),
        (0.0, 31, P, None),           # the budget leaves no quicker look than the poll
        (0.0, 64, P, None),           # a large job glances from its start
        (0.0, 2, 2.0, 0.5),           # a slower --poll-interval: a quarter of it
    ],
)
def test_a_follower_without_an_attempt_looks_again_sooner_in_its_first_poll(now, nodes, poll,
                                                                            nap):
    got = cadence.first_attempt_nap(now, 0.0, poll, nodes)
    assert got == (None if nap is None else pytest.approx(nap))


@pytest.mark.parametrize("nodes", [2, 8, 16, 30, 31, 63])
def test_the_quicker_first_looks_stay_within_the_jobs_budget(nodes):
    """All followers of a job looking for node 0's first attempt at once ask for at most
    JOB_FAST_BUDGET RPC/s, as their fast polls do."""
    nap = cadence.first_attempt_nap(0.0, 0.0, P, nodes)
    if nap is not None:
        assert (nodes - 1) * cadence.FAST_POLL_RPCS / nap <= cadence.JOB_FAST_BUDGET + 1e-9
        assert nap < P


@pytest.mark.parametrize(
    ("now", "nodes", "nap"),
    [
        (0.0, 2, P / 4),        # right after the publish: a quarter poll
        (0.15, 8, P / 4),
        (P, 8, None),           # one poll interval after it: the fast polls' nap
        (5.0, 8, None),
        (0.0, 16, 15 * cadence.FAST_POLL_RPCS / cadence.JOB_FAST_BUDGET),  # spaced
        (0.0, 31, None),        # spaced to a whole poll: none
        (0.0, 64, None),        # a job that glances from its start: none
    ],
)
def test_a_follower_looks_again_sooner_in_the_first_poll_after_its_publish(now, nodes, nap):
    got = cadence.after_publish_nap(now, 0.0, P, nodes)
    assert got == (None if nap is None else pytest.approx(nap))


@pytest.mark.parametrize("nodes", [2, 8, 16, 30, 31, 63])
def test_the_quicker_looks_after_a_publish_stay_within_the_jobs_budget(nodes):
    nap = cadence.after_publish_nap(0.0, 0.0, P, nodes)
    if nap is not None:
        assert (nodes - 1) * cadence.FAST_POLL_RPCS / nap <= cadence.JOB_FAST_BUDGET + 1e-9


@pytest.mark.parametrize(
    ("changed", "changed_last", "now", "last_listing", "lists"),
    [
        (True, False, 1.0, 0.8, True),     # the directory changed
        (False, True, 1.0, 0.8, True),     # one poll more (a same-tick second change)
        (False, False, 1.0, 0.8, False),   # unchanged: a GETATTR, no listing
        (False, False, 1.0 + LOOK_EVERY, 1.0, True),  # the periodic fallback
    ],
)
def test_when_node0_lists_the_attempt_directory(changed, changed_last, now, last_listing,
                                                 lists):
    assert cadence.node0_lists(changed, changed_last, now, last_listing) is lists


@pytest.mark.parametrize(
    ("poll", "missing", "since_arrival", "nap"),
    [
        (P, 1, 0.0, P / 4),            # the last slot, the others just in: quick polls
        (P, 1, FAST_FOR - 0.01, P / 4),
        (P, 1, FAST_FOR, P),           # the last pod is late: the poll interval again
        (P, 1, 600.0, P),
        (P, 2, 0.0, P),                # more than one missing: the poll interval
        (P, 7, 1.0, P),
        (P, 0, 0.0, P),                # (all present: node 0 completes, no nap)
        (1.0, 1, 0.5, 0.25),           # a quarter of whatever the poll interval is
        (0.05, 1, 0.5, 0.0125),
    ],
)
def test_node0_polls_quicker_for_the_last_slot_of_a_start_burst(poll, missing,
                                                                 since_arrival, nap):
    assert cadence.node0_nap(poll, missing, since_arrival) == pytest.approx(nap)


def _node0_rpcs(seconds: float, nap) -> float:
    """Node 0's RPCs (two GETATTRs a poll) in [0, seconds] with one slot missing since 0,
    with the jitter's shortest naps."""
    now, total = 0.0, 0.0
    while now <= seconds:
        total += 2 * cadence.GLANCE_RPCS
        now += nap(now) * 0.8
    return total


def test_node0s_quick_polls_cost_the_server_a_bounded_few_rpcs():
    """Node 0's quick polls come once per start, for at most FAST_FOR s after the last but
    one slot arrived: at most 2 GETATTRs per 0.8 quarter poll over FAST_FOR s more than
    its polls at the poll interval (500 RPCs at 0.2 s), whatever the job's size."""
    quick = _node0_rpcs(10 * FAST_FOR, lambda now: cadence.node0_nap(P, 1, now))
    plain = _node0_rpcs(10 * FAST_FOR, lambda now: P)
    assert quick - plain <= 2 * cadence.GLANCE_RPCS * FAST_FOR / (P / 4 * 0.8) + 2
    assert quick - plain >= 2 * cadence.GLANCE_RPCS * FAST_FOR / (P / 4 * 1.2) - 2 * FAST_FOR / P


def _follower_rpcs(seconds: float, poll: float = P, glance_rpcs: int = 1,
                   look_rpcs: int = 8) -> float:
    """RPCs a follower that started at 0 and saw nothing change sends in [0, seconds],
    with the jitter's worst case (every nap 20 % short)."""
    now, busy, last_look, total = 0.0, 0.0, -1e9, 0.0
    while now <= seconds:
        if cadence.follower_looks(now, busy, last_look, now == 0.0, poll):
            last_look = now
            total += look_rpcs
        else:
            total += glance_rpcs
        now += cadence.follower_nap(now, busy, poll) * 0.8
    return total


def test_a_calm_follower_stays_under_five_rpcs_a_second():
    """The load bound, with a look costing 8 RPCs (the bed measures about 5-6: GETATTRs of
    two directories, attempt.json and the own slot opened and read, the outcome looked up)
    and the shortest naps the jitter allows: 1.25 glances/s/0.8 + a look per 4 s."""
    after_ten = _follower_rpcs(70.0) - _follower_rpcs(FAST_FOR)
    assert after_ten / (70.0 - FAST_FOR) <= 5.0


def test_a_calm_follower_sees_a_nudge_within_a_second():
    """The latency bound: the longest nap once calm, with the jitter's +20 %, plus the
    look itself, stays under 1 s — the glance sees the nudge at the next poll."""
    longest = cadence.follower_nap(100.0, 0.0, P) * 1.2
    assert longest < 1.0
    assert cadence.follower_looks(100.0, 0.0, 99.9, True, P)


def test_node0_waits_for_a_calm_follower_to_object():
    """A contested slot: node 0 nudges and waits at least a calm follower's longest nap
    plus one poll, and never less than it did before (1.5 polls)."""
    for poll in (0.05, 0.2, 1.0, 5.0):
        wait = cadence.settle_wait(poll)
        assert wait >= max(poll, GLANCE_EVERY) * 1.2 + poll
        assert wait >= 1.5 * poll


ROOT = "22 1 8:1 / / rw,relatime - ext4 /dev/sda1 rw"
NFS = ("412 380 0:61 / /mnt/model rw,relatime shared:210 - nfs4 10.0.0.1:/export "
       "rw,vers=4.2,hard,proto=tcp,sec=sys,addr=10.0.0.1")
SSHFS = ("415 380 0:64 / /mnt/model rw,nosuid,nodev,relatime - fuse.sshfs "
         "root@10.0.0.1:/export rw,user_id=0,group_id=0")


@pytest.mark.parametrize(("lines", "path", "current"), [
    ([ROOT], "/data", True),                   # a local disk
    ([ROOT, NFS], "/mnt/model/shared", True),  # NFS revalidates on open
    ([ROOT, SSHFS], "/mnt/model/shared", False),  # FUSE caches attributes and listings
    ([ROOT, SSHFS], "/mnt/modelx", True),      # a prefix of the name is not its parent
    ([ROOT, NFS, SSHFS], "/mnt/model", False),  # the last of stacked mounts wins
    (["garbage", ""], "/mnt/model", True),     # unreadable: assume current
])
def test_which_volumes_glances_and_listings_can_be_trusted_on(lines, path, current):
    from ascend_node.rendezvous.freshness import attributes_are_current
    assert attributes_are_current(Path(path), "\n".join(lines)) is current


@pytest.mark.parametrize(("lines", "device", "current"), [
    ([ROOT, SSHFS], os.makedev(0, 64), False),  # found by its device: no path resolved
    ([ROOT, NFS], os.makedev(0, 61), True),
    ([ROOT, NFS, SSHFS], os.makedev(0, 61), True),  # the device, not the path, decides
    ([ROOT, SSHFS], os.makedev(0, 99), False),  # no such device: by the path (sshfs)
])
def test_the_volume_is_found_by_the_device_a_glance_saw(lines, device, current):
    """The follower's first glance gives the volume's st_dev; the mount table then names
    the filesystem without a `realpath` of the shared directory (a round trip on NFS)."""
    from ascend_node.rendezvous.freshness import attributes_are_current
    assert attributes_are_current(Path("/mnt/model/x"), "\n".join(lines), device) is current


# ------------------------------------------------------------ the start burst (issue 29)


@pytest.mark.parametrize(
    ("nodes", "fast_for", "fast_every"),
    [
        (2, FAST_FOR, P),         # a small job keeps its fast polls: sub-second lag
        (8, FAST_FOR, P),
        (30, FAST_FOR, P),        # up to JOB_FAST_BUDGET / FAST_POLL_RPCS * 0.2 s followers
        (40, FAST_FOR, 39 * cadence.FAST_POLL_RPCS / cadence.JOB_FAST_BUDGET),
        (63, FAST_FOR, 62 * cadence.FAST_POLL_RPCS / cadence.JOB_FAST_BUDGET),
        (64, 0.0, GLANCE_EVERY),  # from 64 nodes a follower glances from its start
        (1024, 0.0, GLANCE_EVERY),
    ],
)
def test_the_fast_polls_depend_on_the_jobs_size(nodes, fast_for, fast_every):
    assert cadence.fast_for(nodes) == fast_for
    if fast_for:
        assert cadence.follower_nap(0.0, 0.0, P, nodes) == pytest.approx(fast_every)
        assert fast_every <= GLANCE_EVERY  # the lag stays under a second
    else:
        assert cadence.follower_nap(0.0, 0.0, P, nodes) == pytest.approx(GLANCE_EVERY)
        # calm from the start: glances, with a full look every LOOK_EVERY
        assert cadence.follower_looks(0.0, 0.0, -1e9, True, P, nodes)  # the first look
        assert not cadence.follower_looks(0.6, 0.0, 0.0, False, P, nodes)
        assert cadence.follower_looks(LOOK_EVERY, 0.0, 0.0, False, P, nodes)


@pytest.mark.parametrize("nodes", [64, 128, 1024, 4096])
def test_a_follower_of_a_large_job_asks_at_most_five_rpcs_a_second_in_any_window(nodes):
    """The issue's target: the peak per waiting follower over any 5 s window at N >= 64,
    the first seconds included (the jitter's shortest naps, a look in the window)."""
    assert cadence.peak_follower_rpcs(P, nodes) <= 5.0
    assert cadence.follower_rpcs_per_second(P, False, nodes) == pytest.approx(
        cadence.follower_rpcs_per_second(P, True, nodes))


@pytest.mark.parametrize("nodes", [2, 8, 16, 31, 40, 63])
def test_a_small_jobs_fast_polls_together_stay_within_the_budget(nodes):
    """Below 64 nodes the followers' fast polls, all at once, ask for at most
    JOB_FAST_BUDGET RPC/s (or what 0.2 s polls of a job that small ask for)."""
    fast = (nodes - 1) * cadence.follower_rpcs_per_second(P, False, nodes)
    assert fast <= max(cadence.JOB_FAST_BUDGET, (nodes - 1) * cadence.FAST_POLL_RPCS / P) + 1e-9
    assert fast <= cadence.JOB_FAST_BUDGET + 1e-9 or nodes <= 31


def test_the_jobs_burst_at_1024_nodes_is_under_a_third_of_what_it_was():
    before = 1023 * cadence.FAST_POLL_RPCS / P
    now = cadence.job_rpcs_per_second(1024, P, calm=False)
    assert now <= before / 3


# ------------------------------------------------------------ the join, paced (issue 29)

J, G, L = cadence.JOIN_RPCS, cadence.GLANCE_RPCS, cadence.LOOK_PEAK_RPCS


@pytest.mark.parametrize(("ledger", "at", "cost", "expected"), [
    ([], 3.0, J, 3.0),                           # nothing spent: at once
    ([(0.0, G)], 0.0, J, 0.0),                   # a join after the glance that began it
    ([(0.0, G), (0.0, J)], 0.4, G, 5.0),         # the join stands alone: glances wait
    ([(0.0, G), (0.0, J), (5.0, G)], 5.4, G, 5.4),  # ... until it has left the window
    # ten glances first (0-4.5 s): a join waits until all but one have left the window
    ([(t / 2, G) for t in range(10)], 4.6, J, 4.0 + 5.0),
    ([(t / 2, G) for t in range(10)], 4.6, L, 4.6),  # a look fits beside ten glances
    ([(t / 2, G) for t in range(10)] + [(4.6, L)], 5.0, G, 5.0),
    ([(0.0, 30.0)], 1.0, 30.0, 5.0),             # over the budget alone: an empty window
    ([(6.059123456789, 20.0), (6.5571, G)], 6.9, L, 6.059123456789 + 5.0),  # rounding
])
def test_a_paced_poll_waits_until_the_last_window_has_room_for_it(ledger, at, cost, expected):
    assert cadence.room_in(ledger, at, cost) == pytest.approx(expected)


def test_the_ledger_forgets_what_no_window_holds_any_more():
    ledger = [(0.0, G), (1.5, J), (4.9, G)]
    cadence.forget(ledger, 6.0)
    assert ledger == [(1.5, J), (4.9, G)]
    cadence.forget(ledger, 6.5)  # a poll 5 s old is in no window ending now or later
    assert ledger == [(4.9, G)]
    cadence.forget(ledger, 10.0)
    assert ledger == []


@pytest.mark.parametrize(("nodes", "paced"), [(2, False), (31, False), (63, False),
                                              (64, True), (1024, True)])
def test_only_a_job_whose_followers_glance_from_the_start_is_paced(nodes, paced):
    assert cadence.paced(nodes) is paced


@pytest.mark.parametrize(("nodes", "dir_seen", "joins"), [
    (64, True, True),      # node 0's attempt directory is there: join
    (64, False, False),    # paced, no directory yet: make none, look again (issue 29)
    (1024, False, False),
    (63, False, True),     # not paced: join at once, making the directory (sub-second lag)
    (8, False, True),
    (2, True, True),
])
def test_a_large_jobs_follower_joins_only_into_node0s_directory(nodes, dir_seen, joins):
    assert cadence.joins_now(nodes, dir_seen) is joins
