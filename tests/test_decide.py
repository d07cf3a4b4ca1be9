"""Pure rendezvous decisions: which attempt, is the cluster consistent, what a follower does."""

from __future__ import annotations

import pytest

from ascend_node.rendezvous import decide
from ascend_node.rendezvous.models import ConflictDoc, FailureDoc
from tests.rdzv_docs import RUN, abort_outcome, attempt, data, member, table_outcome

# ------------------------------------------------------------------ choose_attempt

ME0 = data(0)
TABLE = table_outcome([member(i) for i in range(4)])


@pytest.mark.parametrize(
    ("case", "att", "outcome", "incarnation", "digest", "outdated", "expect"),
    [
        ("first start", None, None, "uid-0", ME0.digest(), (), "open"),
        ("container restart mid-rendezvous", attempt(), None, "uid-0", ME0.digest(), (),
         "reuse"),
        ("new pod at node 0, attempt never completed", attempt(), None, "uid-0b",
         ME0.digest(), (), "open"),
        ("completed, same data, same pod", attempt(), TABLE, "uid-0", ME0.digest(), (),
         "reuse"),
        ("completed, same data, re-created pod", attempt(), TABLE, "uid-0b", ME0.digest(), (),
         "reuse"),
        ("completed, node 0's data changed", attempt(), TABLE, "uid-0b",
         data(0, pod="10.9.9.9").digest(), (), "open"),
        ("completed, a peer asks for a new attempt", attempt(), TABLE, "uid-0", ME0.digest(),
         (2,), "open"),
        ("aborted attempt, same pod", attempt(), abort_outcome(), "uid-0", ME0.digest(), (),
         "reuse"),
        ("aborted by a peer's local failure, same pod", attempt(),
         abort_outcome(failed_by="uid-2"), "uid-0", ME0.digest(), (), "open"),
        ("aborted by node 0's own local failure, its restart", attempt(),
         abort_outcome(failed_by="uid-0"), "uid-0", ME0.digest(), (), "open"),
        ("different node count", attempt(nodes=8), None, "uid-0", ME0.digest(), (), "open"),
        ("conflict marker from another pod", attempt(conflict="two node 0"), None, "uid-0b",
         ME0.digest(), (), "open"),
    ],
)
def test_choose_attempt(case, att, outcome, incarnation, digest, outdated, expect):
    got = decide.choose_attempt(att, outcome, incarnation, digest, 4, 1, outdated)
    assert isinstance(got, decide.Reuse if expect == "reuse" else decide.Open), case
    if isinstance(got, decide.Reuse):
        assert got.attempt_id == "a1"


def test_open_reason_names_the_outdated_node():
    got = decide.choose_attempt(attempt(), TABLE, "uid-0", ME0.digest(), 4, 1, (2,))
    assert isinstance(got, decide.Open)
    assert "worker 1 (node 2)" in got.reason


# ------------------------------------------------------------------ evaluate


def full(n: int = 4, **over: object) -> dict[int, object]:
    slots: dict[int, object] = {i: member(i, nodes=n) for i in range(n)}
    slots.update(over)  # type: ignore[arg-type]
    return slots


def test_complete_when_everyone_is_present_in_order():
    got = decide.evaluate(full(), 4, 1, False)
    assert isinstance(got, decide.Complete)
    assert [m.data.global_index for m in got.members] == [0, 1, 2, 3]


def test_waiting_names_missing_and_invalid():
    slots = full()
    slots[2] = None
    slots[3] = "is not valid JSON"
    got = decide.evaluate(slots, 4, 1, False)
    assert isinstance(got, decide.Waiting)
    assert got.missing == (2, 3)
    assert got.present == (0, 1)
    assert got.invalid == {3: "is not valid JSON"}


@pytest.mark.parametrize(
    ("case", "slots", "nodes_at_fault", "words"),
    [
        ("device IP on two nodes",
         {0: member(0), 1: member(1), 2: member(2, base=-1)}, (1, 2),
         ["10.20.1.1", "worker 0 (node 1)", "worker 1 (node 2)"]),
        ("device count mismatch", {0: member(0), 1: member(1, devices=16)}, (0, 1),
         ["device counts differ", "8 on master 0 (node 0)", "16 on worker 0 (node 1)"]),
        ("same pod IP twice", {0: member(0), 1: member(1, pod="10.200.0.10")}, (0, 1),
         ["same pod IP 10.200.0.10"]),
        ("local failure", {0: member(0), 3: FailureDoc(
            run_id=RUN, attempt_id="a1", incarnation="u3", global_index=3,
            cause="device 2 has no usable RoCE IP")}, (3,),
         ["worker 2 (node 3) failed: device 2 has no usable RoCE IP"]),
        ("conflict", {1: ConflictDoc(run_id=RUN, attempt_id="a1", global_index=1,
                                     incarnations=("x", "y"))}, (1,),
         ["two live pods claim worker 0 (node 1)", "x, y"]),
        ("node count differs", {0: member(0), 2: member(2, nodes=5)}, (2,),
         ["sees 5 nodes", "node 0 sees 4"]),
        ("wrong slot", {1: member(2)}, (1,), ["published global index 2 in slot 1"]),
    ],
)
def test_abort_is_immediate_and_names_the_nodes(case, slots, nodes_at_fault, words):
    got = decide.evaluate(slots, 4, 1, False)
    assert isinstance(got, decide.Abort), case
    assert got.nodes == nodes_at_fault
    for word in words:
        assert word in got.reason, (case, got.reason)


def test_uneven_device_counts_allowed_for_training():
    slots = full(3)
    slots[1] = member(1, nodes=3, devices=4)
    assert isinstance(decide.evaluate(slots, 3, 1, True), decide.Complete)
    assert isinstance(decide.evaluate(slots, 3, 1, False), decide.Abort)


def test_mixed_ip_families_across_nodes_abort():
    from ascend_node.rendezvous.models import DeviceRecord, MemberData, MemberDoc

    v6 = MemberDoc(run_id=RUN, attempt_id="a1", incarnation="u1", node_count=2,
                   master_count=1, agent_version="t",
                   data=MemberData(global_index=1, role="worker", task_index=0,
                                   pod_ip="10.200.0.11", host_ip="10.100.0.11",
                                   devices=tuple(DeviceRecord(device_id=d,
                                                              device_ip=f"fd00::{d + 1}")
                                                 for d in range(8))))
    got = decide.evaluate({0: member(0, nodes=2), 1: v6}, 2, 1, False)
    assert isinstance(got, decide.Abort)
    assert "mix IPv4 and IPv6" in got.reason


# ------------------------------------------------------------------ follower_step

ME2 = decide.Me(2, "uid-2", data(2).digest(), 1, 4)


@pytest.mark.parametrize(
    ("case", "att", "outcome", "slot", "published_in", "expect"),
    [
        ("no attempt", None, None, None, None, decide.WaitAttempt),
        ("attempt open, not yet published", attempt(), None, None, None, decide.Publish),
        ("stale slot of an earlier pod", attempt(), None, member(2, incarnation="old"), None,
         decide.Publish),
        ("published, waiting", attempt(), None, member(2), "a1", decide.WaitTable),
        ("restart: my own slot survives", attempt(), None, member(2), None, decide.WaitTable),
        ("another live pod overwrote my slot", attempt(), None, member(2, incarnation="dup"),
         "a1", decide.Conflict),
        ("my slot holds a conflict", attempt(), None,
         ConflictDoc(run_id=RUN, attempt_id="a1", global_index=2, incarnations=("a", "b")),
         "a1", decide.Fail),
        ("table holds me", attempt(), table_outcome([member(i) for i in range(4)]), member(2),
         "a1", decide.Done),
        ("table holds me, pod re-created, same data", attempt(),
         table_outcome([member(i) for i in range(4)]), None, None, decide.Done),
        ("table holds other data for me", attempt(),
         table_outcome([member(i, base=50) for i in range(4)]), None, None, decide.WaitAttempt),
        ("abort I took part in", attempt(), abort_outcome(), member(2), "a1", decide.Fail),
        ("abort listing me after a restart", attempt(),
         abort_outcome(participants=("uid-2",)), None, None, decide.Fail),
        ("abort of an earlier start-up", attempt(), abort_outcome(participants=("old",)), None,
         None, decide.WaitAttempt),
        ("attempt marked as conflict", attempt(conflict="two node 0"), None, None, None,
         decide.Fail),
    ],
)
def test_follower_step(case, att, outcome, slot, published_in, expect):
    got = decide.follower_step(att, outcome, slot, ME2, published_in)
    assert isinstance(got, expect), (case, got)


def test_evaluate_names_whose_own_failure_aborts():
    failure = FailureDoc(run_id=RUN, attempt_id="a1", incarnation="u3", global_index=3,
                         cause="device 2 has no usable RoCE IP")
    got = decide.evaluate({0: member(0), 3: failure}, 4, 1, False)
    assert isinstance(got, decide.Abort) and got.failed_by == "u3"
    other = decide.evaluate({0: member(0), 1: member(1), 2: member(2, base=-1)}, 4, 1, False)
    assert isinstance(other, decide.Abort) and other.failed_by is None  # the cluster's data


OWN_FAILURE = FailureDoc(run_id=RUN, attempt_id="a1", incarnation="uid-2", global_index=2,
                         cause="device 2 has no usable RoCE IP")


@pytest.mark.parametrize(
    ("case", "outcome", "slot", "expect", "kind"),
    [
        # The attempt is still open: this pod is its slot's only writer, so it replaces its
        # own failure document with its member document (node 0 re-judges every poll).
        ("open attempt: withdraw my failure", None, OWN_FAILURE, decide.Publish, None),
        ("closed by my own failure", abort_outcome(
            "worker 1 (node 2) failed: no IP", participants=("uid-0", "uid-2"),
            failed_by="uid-2"), OWN_FAILURE, decide.WaitAttempt, "own-failure"),
        ("closed by my own failure, my slot already withdrawn", abort_outcome(
            participants=("uid-2",), failed_by="uid-2"), member(2), decide.WaitAttempt,
         "own-failure"),
        ("closed by a peer's failure: the verdict stands", abort_outcome(
            participants=("uid-0", "uid-2"), failed_by="uid-3"), member(2), decide.Fail, None),
        ("closed by another pod that held my index", abort_outcome(
            participants=("old-2",), failed_by="old-2"), None, decide.WaitAttempt,
         "stale-abort"),
    ],
)
def test_restart_after_a_local_failure(case, outcome, slot, expect, kind):
    got = decide.follower_step(attempt(), outcome, slot, ME2, None)
    assert isinstance(got, expect), (case, got)
    if kind is not None:
        assert got.kind == kind, case  # type: ignore[union-attr]


def test_own_failure_wait_says_why():
    got = decide.follower_step(
        attempt(), abort_outcome("worker 1 (node 2) failed: no IP", failed_by="uid-2"),
        OWN_FAILURE, ME2, None)
    assert isinstance(got, decide.WaitAttempt)
    assert got.reason == ("attempt a1 was aborted by this pod's own earlier failure (worker 1 "
                          "(node 2) failed: no IP); this restart got past it and waits for "
                          "node 0 to open a new attempt")


def test_stale_kinds_are_distinguished():
    stale_table = decide.follower_step(
        attempt(), table_outcome([member(i, base=50) for i in range(4)]), None, ME2, None)
    assert isinstance(stale_table, decide.WaitAttempt) and stale_table.kind == "stale-table"
    stale_abort = decide.follower_step(attempt(), abort_outcome(), None, ME2, None)
    assert isinstance(stale_abort, decide.WaitAttempt) and stale_abort.kind == "stale-abort"


def test_verify_table_holds_detects_a_foreign_entry():
    import json

    from ascend_node.ranktable import build_rank_table, render_rank_table
    from ascend_node.rendezvous.protocol import to_server

    members = [member(i) for i in range(2)]
    text = render_rank_table(build_rank_table([to_server(m.data) for m in members]))
    good = table_outcome(members).model_copy(update={"ranktable_text": text})
    assert decide.verify_table_holds(good, data(1), 1) is None
    doc = json.loads(text)
    doc["server_list"][1]["container_ip"] = "10.9.9.9"
    bad = good.model_copy(update={"ranktable_text": json.dumps(doc)})
    assert "worker 0 (node 1)" in (decide.verify_table_holds(bad, data(1), 1) or "")


# ------------------------------------------------------------------ job versions


@pytest.mark.parametrize(("attempt_version", "mine", "expect"), [
    (None, None, decide.Reuse),   # nobody knows a version: the old rules alone
    (3, None, decide.Reuse),      # this pod does not know its version: no comparison
    (3, 3, decide.Reuse),
    (3, 4, decide.Open),          # the whole job was restarted
    (None, 4, decide.Open),       # the attempt predates versioned pods
    (5, 4, decide.Leftover),      # this pod is older than the attempt
])
def test_choose_attempt_with_job_versions(attempt_version, mine, expect):
    att = attempt().model_copy(update={"job_version": attempt_version})
    got = decide.choose_attempt(att, TABLE, "uid-0", ME0.digest(), 4, 1, (), mine)
    assert isinstance(got, expect)


@pytest.mark.parametrize(("attempt_of", "mine", "expect"), [
    ("job-a", "job-b", decide.Open),      # the Job was deleted and applied again
    ("job-a", "job-a", decide.Leftover),  # the same Job: this pod is older than the attempt
    (None, "job-b", decide.Leftover),     # the attempt predates pod groups: versions alone
    ("job-a", None, decide.Leftover),     # this pod does not know its Job: versions alone
])
def test_a_re_deployed_job_is_no_leftover_of_the_earlier_jobs_higher_version(
        attempt_of, mine, expect):
    """A Job deleted and applied again under the same name counts its version from 0
    again: only within one Volcano Job (its pod group) does a higher version mean this
    pod is a leftover. Before the fix, every same-size re-deploy after a RestartJob
    was refused at node 0 (exit 1) until someone ran `ascend-node clean`."""
    att = attempt().model_copy(update={"job_version": 2, "job_instance": attempt_of})
    got = decide.choose_attempt(att, TABLE, "uid-0", ME0.digest(), 4, 1, (), 0, mine)
    assert isinstance(got, expect), got
    if expect is decide.Open:
        assert "earlier Volcano Job of this name (pod group job-a)" in got.reason


def test_a_follower_of_a_re_deployed_job_waits_for_an_attempt_of_its_own_job():
    att = attempt().model_copy(update={"job_version": 0, "job_instance": "job-a"})
    done = table_outcome([member(i) for i in range(4)])
    me = decide.Me(2, "uid-2b", data(2).digest(), 1, 4, job_version=0, job_instance="job-b")
    got = decide.follower_step(att, done, None, me, None)
    assert isinstance(got, decide.WaitAttempt) and got.kind == "stale-version"
    assert "pod group job-a" in got.reason and "job-b" in got.reason
    same = decide.Me(2, "uid-2b", data(2).digest(), 1, 4, job_version=0, job_instance="job-a")
    assert isinstance(decide.follower_step(att, done, None, same, None), decide.Done)


def test_a_restarted_job_does_not_reuse_a_table_with_identical_data():
    """The case data digests cannot catch: same addresses, new start of the job."""
    att = attempt().model_copy(update={"job_version": 1})
    me = decide.Me(2, "uid-2b", data(2).digest(), 1, 4, job_version=2)
    got = decide.follower_step(att, table_outcome([member(i) for i in range(4)]), None, me, None)
    assert isinstance(got, decide.WaitAttempt) and got.kind == "stale-version"
    assert "job version 1" in got.reason and "version 2" in got.reason
    same = decide.Me(2, "uid-2b", data(2).digest(), 1, 4, job_version=1)
    assert isinstance(decide.follower_step(att, table_outcome([member(i) for i in range(4)]),
                                           None, same, None), decide.Done)


def test_evaluate_ignores_members_of_another_job_version():
    slots = {i: member(i).model_copy(update={"job_version": 2}) for i in range(4)}
    slots[3] = member(3).model_copy(update={"job_version": 1})
    got = decide.evaluate(slots, 4, 1, False, job_version=2)
    assert isinstance(got, decide.Waiting)
    assert got.missing == (3,) and "job version 1" in got.invalid[3]
    assert isinstance(decide.evaluate(slots, 4, 1, False, job_version=None), decide.Complete)


@pytest.mark.parametrize(("attempt_version", "mine", "expect"), [
    (7, 7, decide.Fail),             # this start's attempt: a late pod hears its verdict
    (6, 7, decide.WaitAttempt),      # an earlier start's abort is history
    (None, 7, decide.WaitAttempt),   # the attempt predates versioned pods: cannot tell
    (7, None, decide.WaitAttempt),   # this pod does not know its version: cannot tell
])
def test_a_late_pod_fails_on_an_abort_of_its_own_start(attempt_version, mine, expect):
    att = attempt().model_copy(update={"job_version": attempt_version})
    me = decide.Me(2, "uid-2", data(2).digest(), 1, 4, job_version=mine)
    got = decide.follower_step(att, abort_outcome("device IP clash", participants=("uid-0",)),
                               None, me, None)
    assert isinstance(got, expect), got
    if isinstance(got, decide.Fail):
        assert "version 7" in got.reason and "device IP clash" in got.reason


# ------------------------------------------------------------------ a job of another size
#
# A job re-deployed with another node count under the same run id (`manifest` makes the
# run id the job's name) finds its earlier start's attempt. Only node 0 opens attempts
# (`choose_attempt` opens one when the size differs); a follower that took no part in a
# closed attempt of another size waits for it, and never takes its verdict as its own: a
# table of 2 nodes fails a 3-node pod's checks as if forged (issue 36).

ME_OF_3 = decide.Me(2, "uid-2", data(2).digest(), 1, 3)
TABLE_OF_2 = table_outcome([member(i, nodes=2) for i in range(2)])
TABLE_OF_4 = table_outcome([member(i) for i in range(4)])


@pytest.mark.parametrize(
    ("case", "att", "outcome", "slot", "published_in", "me", "expect", "kind"),
    [
        ("2-node table, a 3-node worker 1 with the same data", attempt(nodes=2), TABLE_OF_2,
         None, None, decide.Me(1, "uid-1b", data(1).digest(), 1, 3), decide.WaitAttempt,
         "stale-count"),
        ("2-node table, a 3-node worker 2 not in it", attempt(nodes=2), TABLE_OF_2, None,
         None, ME_OF_3, decide.WaitAttempt, "stale-count"),
        ("4-node table, a 3-node worker with the same data", attempt(), TABLE_OF_4, None,
         None, ME_OF_3, decide.WaitAttempt, "stale-count"),
        ("a table for other masters", attempt(masters=2), TABLE_OF_4, None, None, ME2,
         decide.WaitAttempt, "stale-count"),
        ("4-node abort it took no part in", attempt(), abort_outcome(participants=("old",)),
         None, None, ME_OF_3, decide.WaitAttempt, "stale-count"),
        ("4-node abort of the same job version (a re-deployed Job counts from 0 again)",
         attempt().model_copy(update={"job_version": 0}), abort_outcome("device IP clash"),
         None, None, decide.Me(2, "uid-2", data(2).digest(), 1, 3, job_version=0),
         decide.WaitAttempt, "stale-count"),
        ("4-node conflict mark", attempt(conflict="two node 0"), None, None, None, ME_OF_3,
         decide.WaitAttempt, "stale-count"),
        ("a newer job version and another size: the size decides", attempt().model_copy(
            update={"job_version": 5}), TABLE_OF_4, None, None,
         decide.Me(2, "uid-2", data(2).digest(), 1, 3, job_version=0), decide.WaitAttempt,
         "stale-count"),
        # An open attempt of another size may be this start's node 0 disagreeing on
        # VC_WORKER_NUM: publish, so that node 0 aborts at once naming the difference.
        ("open attempt of another size", attempt(), None, None, None, ME_OF_3,
         decide.Publish, None),
        ("published into it, waiting", attempt(), None, member(2, nodes=3), "a1", ME_OF_3,
         decide.WaitTable, None),
        ("its node 0 aborted on the difference: this pod took part", attempt(),
         abort_outcome("sees 3 nodes but node 0 sees 4"), member(2, nodes=3), "a1", ME_OF_3,
         decide.Fail, None),
        ("the abort lists this pod (a restart in place)", attempt(),
         abort_outcome(participants=("uid-2",)), None, None, ME_OF_3, decide.Fail, None),
        # A table of this pod's size is judged as before: a forged or foreign one still
        # reaches the acceptance checks (Done), never a wait.
        ("the same size, a table holding me", attempt(nodes=3),
         table_outcome([member(i, nodes=3) for i in range(3)]), None, None, ME_OF_3,
         decide.Done, None),
        ("the same size, a table of another size inside", attempt(nodes=3), TABLE_OF_4, None,
         None, ME_OF_3, decide.Done, None),
    ],
)
def test_a_follower_of_another_job_size(case, att, outcome, slot, published_in, me, expect,
                                        kind):
    got = decide.follower_step(att, outcome, slot, me, published_in)
    assert isinstance(got, expect), (case, got)
    if kind is not None:
        assert got.kind == kind, (case, got)  # type: ignore[union-attr]


def test_the_wait_for_another_size_says_why():
    got = decide.follower_step(attempt(nodes=2), TABLE_OF_2, None, ME_OF_3, None)
    assert isinstance(got, decide.WaitAttempt)
    assert got.reason == ("attempt a1 completed for 2 nodes (1 master), this pod's job has "
                          "3 nodes (1 master): an earlier start of the job, before its size "
                          "changed; waiting for node 0 to open an attempt for this one")


@pytest.mark.parametrize(("attempt_version", "mine"), [(5, 0), (0, 0), (None, 0), (3, None)])
def test_node_0_of_another_size_opens_a_new_attempt_whatever_the_versions(attempt_version,
                                                                           mine):
    """A re-deployed Job of another size is a new Volcano Job: its version counts from 0,
    so an older attempt's higher version does not make node 0 a leftover (exit 1)."""
    att = attempt(nodes=2).model_copy(update={"job_version": attempt_version})
    got = decide.choose_attempt(att, TABLE_OF_2, "uid-0b", ME0.digest(), 3, 1, (), mine)
    assert isinstance(got, decide.Open), got
    assert "was for 2 nodes" in got.reason
