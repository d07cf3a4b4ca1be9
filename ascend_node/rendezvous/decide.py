"""Pure rendezvous decisions, table-tested without a filesystem.

Three questions, each a function of documents already read:

- `choose_attempt` (node 0): keep the current attempt, or open a new one?
- `evaluate` (node 0): given every slot, is the cluster complete, inconsistent, or not yet?
- `follower_step` (everyone else): what to do after one poll.

Why attempts: a run id outlives its pods. A job restart re-creates every pod with new
IPs; a container restart changes nothing. Node 0 opens an attempt (a fresh id) whenever
the previous one cannot be reused; members publish into the current attempt's
directory only, so leftovers of an earlier attempt are never assembled — even for pods
that start late — and a container restart that changes nothing finds its table again.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Callable, Optional, Protocol, Union

from ascend_node.discover.health import NodeHealth
from ascend_node.discover.identity import node_name
from ascend_node.discover.netcheck import family
from ascend_node.ranktable import NodeSuperPodReport, VersionConflict, choose_table_version
from ascend_node.rendezvous.models import (
    AttemptDoc,
    ConflictDoc,
    FailureDoc,
    MemberData,
    MemberDoc,
    OutcomeDoc,
    TableRecord,
)

SlotState = Union[None, str, MemberDoc, FailureDoc, ConflictDoc]
"""None = missing, str = invalid (the reason), else the validated document."""


# ----------------------------------------------------------------------- node 0: attempts


@dataclass(frozen=True)
class Reuse:
    attempt_id: str


@dataclass(frozen=True)
class Open:
    reason: str


@dataclass(frozen=True)
class Leftover:
    """This pod belongs to an older start of the job than the current attempt."""

    reason: str


def choose_attempt(
    attempt: Optional[AttemptDoc],
    outcome: Optional[OutcomeDoc],
    incarnation: str,
    my_digest: str,
    node_count: int,
    master_count: int,
    outdated_slots: Sequence[int] = (),
    job_version: Optional[int] = None,
    job_instance: Optional[str] = None,
) -> Union[Reuse, Open, Leftover]:
    """Node 0's choice. `outdated_slots`: nodes whose slot in a completed attempt now
    holds data that differs from the table (pods re-created with new data, asking for a
    new attempt). `job_version`: Volcano's job version when the pod knows it; a newer
    one means the whole job was restarted, so nothing of the old attempt is reused even
    where the data is the same."""
    if attempt is None:
        return Open("no attempt yet for this run")
    if attempt.node_count != node_count or attempt.master_count != master_count:
        # Before the job versions: a job re-deployed with another size under the same
        # run id is a new Volcano Job, whose version counts from 0 again, so an older
        # attempt's higher version does not make this pod a leftover.
        return Open(
            f"attempt {attempt.attempt_id} was for "
            f"{job_size(attempt.node_count, attempt.master_count)}; this job has "
            f"{job_size(node_count, master_count)}"
        )
    if _instances_differ(job_instance, attempt.job_instance):
        # Before the job versions: a Job deleted and applied again under the same run id
        # is a new Volcano Job whose version counts from 0 again, so an attempt of the
        # earlier Job with a higher version does not make this pod a leftover.
        return Open(
            f"attempt {attempt.attempt_id} was for an earlier Volcano Job of this name "
            f"(pod group {attempt.job_instance}); this pod's is {job_instance}"
        )
    if job_version is not None and attempt.job_version != job_version:
        if attempt.job_version is not None and attempt.job_version > job_version:
            return Leftover(
                f"this pod is from job version {job_version}, but attempt "
                f"{attempt.attempt_id} is for version {attempt.job_version}"
            )
        return Open(
            f"the job was restarted: job version {job_version}, attempt "
            f"{attempt.attempt_id} was for version {attempt.job_version}"
        )
    if attempt.conflict is not None:
        if attempt.opened_by == incarnation:
            return Reuse(attempt.attempt_id)
        return Open(f"attempt {attempt.attempt_id} ended in a conflict; this is a new pod")
    if outcome is not None and outcome.result == "table":
        mine = outcome.record_for(0)
        if mine is None or mine.digest != my_digest:
            return Open(f"attempt {attempt.attempt_id}'s table no longer matches node 0")
        if outdated_slots:
            names = ", ".join(node_name(i, master_count) for i in outdated_slots)
            return Open(f"attempt {attempt.attempt_id}'s table no longer matches {names}")
        return Reuse(attempt.attempt_id)
    if outcome is not None and outcome.failed_by is not None:
        # A local failure (no IP, a tool that failed) aborted it: the one verdict a
        # restart can cure. Node 0 got this far, so its own is cured if it was the one;
        # a peer's restart that is cured joins the new attempt, one that is not fails
        # it again with its cause. Verdicts on the cluster's data stand (below).
        return Open(f"attempt {attempt.attempt_id} was aborted by a local failure, which "
                    f"a restart may have cured ({outcome.reason[:200]})")
    if attempt.opened_by == incarnation:
        return Reuse(attempt.attempt_id)
    return Open(
        f"attempt {attempt.attempt_id} was opened by an earlier pod at node 0 "
        "and never completed"
    )


# ----------------------------------------------------------------------- node 0: evaluate


@dataclass(frozen=True)
class Waiting:
    present: tuple[int, ...]
    missing: tuple[int, ...]
    invalid: Mapping[int, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Abort:
    reason: str
    nodes: tuple[int, ...]
    failed_by: Optional[str] = None  # the incarnation whose own failure document caused it


class HealthFault(Protocol):
    """A fault found in the members' health facts: why (with the remedy) and which nodes."""

    @property
    def reason(self) -> str: ...
    @property
    def nodes(self) -> tuple[int, ...]: ...


class HealthVerdict(Protocol):
    """What a `HealthJudge` found: faults end the attempt, warnings ride on the outcome."""

    @property
    def faults(self) -> Sequence[HealthFault]: ...
    @property
    def warnings(self) -> tuple[str, ...]: ...


HealthJudge = Callable[[Mapping[int, NodeHealth], int], HealthVerdict]
"""Node 0's judgement of the published health facts (by node, and the master count).

The rendezvous carries each member's health facts without interpreting them; the chain
hands in the judge (`preflight.policy.node0_judge`), so this module knows no pre-flight."""


@dataclass(frozen=True)
class Complete:
    members: tuple[MemberDoc, ...]
    warnings: tuple[str, ...] = ()  # pre-flight findings that do not stop the cluster


def evaluate(
    slots: Mapping[int, SlotState],
    node_count: int,
    master_count: int,
    allow_uneven_devices: bool,
    job_version: Optional[int] = None,
    table_version: str = "auto",
    judge: Optional[HealthJudge] = None,
) -> Union[Waiting, Abort, Complete]:
    """Judge the present slots; abort as soon as an inconsistency is certain.

    Checks run on whoever is present, so a device-IP collision, a count mismatch or a
    half-super-pod cluster (`table_version`, see `choose_table_version`) ends the
    attempt at once instead of at the timeout. `judge`, when given, judges the members'
    published device health (the pre-flight's policy is in it); without one the health
    facts are carried, not judged.
    """

    def name(i: int) -> str:
        return node_name(i, master_count)

    members: dict[int, MemberDoc] = {}
    invalid: dict[int, str] = {}
    for index in range(node_count):
        state = slots.get(index)
        if isinstance(state, FailureDoc):
            return Abort(f"{name(index)} failed: {state.cause}", (index,), state.incarnation)
        if isinstance(state, ConflictDoc):
            return Abort(
                f"two live pods claim {name(index)} (incarnations "
                f"{', '.join(state.incarnations)})",
                (index,),
            )
        if isinstance(state, str):
            invalid[index] = state
        elif isinstance(state, MemberDoc):
            if _versions_differ(state.job_version, job_version):
                invalid[index] = (f"is from job version {state.job_version}, the attempt is "
                                  f"for {job_version}")
                continue
            problem = _member_problem(state, index, node_count, master_count)
            if problem is not None:
                return Abort(f"{name(index)} {problem}", (index,))
            members[index] = state

    abort = _cross_checks(members, master_count, allow_uneven_devices)
    if abort is None:
        abort = _super_pod_check(members, master_count, table_version)
    if abort is not None:
        return abort
    warnings: tuple[str, ...] = ()
    published = {i: m.health for i, m in members.items() if m.health is not None}
    if published and judge is not None:
        health = judge(published, master_count)
        if health.faults:
            return Abort("; also ".join(f.reason for f in health.faults),
                         tuple(sorted({i for f in health.faults for i in f.nodes})))
        warnings = health.warnings
    missing = tuple(i for i in range(node_count) if i not in members)
    if missing:
        return Waiting(tuple(sorted(members)), missing, invalid)
    return Complete(tuple(members[i] for i in range(node_count)), warnings)


def _instances_differ(a: Optional[str], b: Optional[str]) -> bool:
    """Volcano Jobs (pod groups) are compared only when both sides know theirs."""
    return a is not None and b is not None and a != b


def _versions_differ(a: Optional[int], b: Optional[int]) -> bool:
    """Job versions are compared only when both sides know theirs."""
    return a is not None and b is not None and a != b


def _member_problem(
    doc: MemberDoc, index: int, node_count: int, master_count: int
) -> Optional[str]:
    if doc.data.global_index != index:
        return f"published global index {doc.data.global_index} in slot {index}"
    if doc.node_count != node_count or doc.master_count != master_count:
        return (
            f"sees {doc.node_count} nodes ({doc.master_count} masters) but node 0 sees "
            f"{node_count} ({master_count}); VC_MASTER_NUM/VC_WORKER_NUM differ between pods"
        )
    expected_role = "master" if index < master_count else "worker"
    expected_task = index if index < master_count else index - master_count
    if doc.data.role != expected_role or doc.data.task_index != expected_task:
        return f"claims to be {doc.data.role} {doc.data.task_index}"
    return None


def _cross_checks(
    members: Mapping[int, MemberDoc], master_count: int, allow_uneven: bool
) -> Optional[Abort]:
    def name(i: int) -> str:
        return node_name(i, master_count)

    owner_of_ip: dict[str, int] = {}
    owner_of_pod_ip: dict[str, int] = {}
    families: dict[int, int] = {}
    for index in sorted(members):
        data = members[index].data
        previous = owner_of_pod_ip.get(data.pod_ip)
        if previous is not None:
            return Abort(
                f"{name(previous)} and {name(index)} report the same pod IP {data.pod_ip}",
                (previous, index),
            )
        owner_of_pod_ip[data.pod_ip] = index
        for dev in data.devices:
            previous = owner_of_ip.get(dev.device_ip)
            if previous is not None and previous != index:
                return Abort(
                    f"device IP {dev.device_ip} is used on {name(previous)} and {name(index)} "
                    f"(device {dev.device_id})",
                    (previous, index),
                )
            owner_of_ip[dev.device_ip] = index
            families.setdefault(family(dev.device_ip), index)
    if len(families) > 1:
        nodes = tuple(sorted(set(families.values())))
        return Abort(
            "device IPs mix IPv4 and IPv6 across nodes (" + ", ".join(
                f"IPv{fam} on {name(i)}" for fam, i in sorted(families.items())) + ")",
            nodes,
        )
    if not allow_uneven:
        counts: dict[int, list[int]] = {}
        for index in sorted(members):
            counts.setdefault(len(members[index].data.devices), []).append(index)
        if len(counts) > 1:
            parts = [
                f"{count} on {', '.join(name(i) for i in idx[:4])}"
                + (f" and {len(idx) - 4} more" if len(idx) > 4 else "")
                for count, idx in sorted(counts.items())
            ]
            return Abort(
                "device counts differ between nodes (" + "; ".join(parts) + "); MindIE needs "
                "equal counts (pass --allow-uneven-devices for training)",
                tuple(sorted(i for idx in counts.values() for i in idx)),
            )
    return None


def _super_pod_check(
    members: Mapping[int, MemberDoc], master_count: int, table_version: str
) -> Optional[Abort]:
    reports = {
        i: NodeSuperPodReport(
            m.data.super_pod_id,
            tuple(d.super_device_id for d in m.data.devices if d.super_device_id is not None))
        for i, m in members.items()
    }
    chosen = choose_table_version(table_version, reports, lambda i: node_name(i, master_count))
    if isinstance(chosen, VersionConflict):
        return Abort(chosen.reason, chosen.nodes)
    return None


# ----------------------------------------------------------------------- followers


@dataclass(frozen=True)
class Me:
    index: int
    incarnation: str
    digest: str
    master_count: int
    node_count: int
    job_version: Optional[int] = None
    job_instance: Optional[str] = None


@dataclass(frozen=True)
class WaitAttempt:
    """No usable attempt: wait for node 0 to open one."""

    reason: str
    # no-attempt | stale-table | stale-abort | stale-version | stale-count | own-failure
    kind: str = "no-attempt"


@dataclass(frozen=True)
class Publish:
    attempt_id: str


@dataclass(frozen=True)
class WaitTable:
    attempt_id: str


@dataclass(frozen=True)
class Done:
    outcome: OutcomeDoc


@dataclass(frozen=True)
class Fail:
    """Exit 5 with this reason."""

    reason: str


@dataclass(frozen=True)
class Conflict:
    """Another live pod overwrote my slot: leave a conflict document, then exit 5."""

    other: str
    attempt_id: str


FollowerAction = Union[WaitAttempt, Publish, WaitTable, Done, Fail, Conflict]


def follower_step(
    attempt: Optional[AttemptDoc],
    outcome: Optional[OutcomeDoc],
    my_slot: SlotState,
    me: Me,
    published_in: Optional[str],
) -> FollowerAction:
    """One poll of a follower (or of node 0's own slot watch).

    `published_in` is the attempt this process published into, if any: a slot that
    changes under us after that means a second live pod claims our index.
    """
    if attempt is None:
        return WaitAttempt("node 0 has not opened an attempt yet")
    aid = attempt.attempt_id
    participant = published_in == aid or (
        isinstance(my_slot, (MemberDoc, FailureDoc)) and my_slot.incarnation == me.incarnation
    )
    if not participant and (outcome is None or me.incarnation not in outcome.participants):
        stale = earlier_size(attempt, outcome, me)
        if stale is not None:
            return stale
    if _instances_differ(me.job_instance, attempt.job_instance):
        return WaitAttempt(
            f"attempt {aid} is of an earlier Volcano Job of this name (pod group "
            f"{attempt.job_instance}), this pod's is {me.job_instance}; waiting for node 0 "
            "to open an attempt for it",
            "stale-version",
        )
    if _versions_differ(me.job_version, attempt.job_version):
        return WaitAttempt(
            f"attempt {aid} is for job version {attempt.job_version}, this pod is from "
            f"version {me.job_version}; waiting for node 0 to open an attempt for it",
            "stale-version",
        )
    if attempt.conflict is not None:
        return Fail(f"attempt {aid} ended in a conflict: {attempt.conflict}")

    if isinstance(my_slot, ConflictDoc):
        return Fail(
            f"two live pods claim {node_name(me.index, me.master_count)} "
            f"(incarnations {', '.join(my_slot.incarnations)})"
        )
    if (
        published_in == aid
        and isinstance(my_slot, (MemberDoc, FailureDoc))
        and my_slot.incarnation != me.incarnation
    ):
        return Conflict(my_slot.incarnation, aid)

    if outcome is not None and outcome.result == "table":
        record = outcome.record_for(me.index)
        if record is not None and record.digest == me.digest:
            return Done(outcome)
        return WaitAttempt(
            f"attempt {aid} completed with different data for "
            f"{node_name(me.index, me.master_count)} (this pod was re-created with new "
            "addresses or devices)",
            "stale-table",
        )
    if outcome is not None and outcome.failed_by == me.incarnation:
        # This very pod's local failure aborted the attempt, and this container restart
        # of it got past the failure. The verdict was about this pod, not the cluster: it
        # is not repeated as exit 5. Only node 0 opens attempts, so wait for a new one.
        return WaitAttempt(
            f"attempt {aid} was aborted by this pod's own earlier failure ({outcome.reason}); "
            "this restart got past it and waits for node 0 to open a new attempt",
            "own-failure",
        )
    if outcome is not None:  # abort
        if participant or me.incarnation in outcome.participants:
            return Fail(f"attempt {aid} was aborted: {outcome.reason}")
        if me.job_version is not None and attempt.job_version == me.job_version:
            # Same start of the job: this pod only arrived after the verdict.
            return Fail(f"attempt {aid} of this start of the job (version {me.job_version}) "
                        f"was aborted before this pod joined: {outcome.reason}")
        return WaitAttempt(f"attempt {aid} was aborted: {outcome.reason}", "stale-abort")

    mine = (
        isinstance(my_slot, MemberDoc)
        and my_slot.incarnation == me.incarnation
        and my_slot.data.digest() == me.digest
    )
    if not mine:
        return Publish(aid)
    return WaitTable(aid)


def job_size(nodes: int, masters: int) -> str:
    """`3 nodes (1 master)`: a job's size as the messages name it."""
    return (f"{nodes} node{'s' if nodes != 1 else ''} "
            f"({masters} master{'s' if masters != 1 else ''})")


def sized_for_me(attempt: AttemptDoc, me: Me) -> bool:
    """Whether node 0 opened `attempt` for this pod's job size (nodes and masters)."""
    return (attempt.node_count, attempt.master_count) == (me.node_count, me.master_count)


def earlier_size(attempt: AttemptDoc, outcome: Optional[OutcomeDoc], me: Me
                 ) -> Optional[WaitAttempt]:
    """The wait of a pod that took no part in `attempt` when node 0 opened it for
    another job size than this pod's (VC_MASTER_NUM/VC_WORKER_NUM): a job re-deployed
    with another node count under the same run id (`manifest` makes the run id the job's
    name) meets its earlier start's documents. Node 0 opens a new attempt when the count
    differs (`choose_attempt`), so the pod waits for it; it never takes such a verdict
    as its own (a table of another size would fail its checks as a forgery, an abort or
    a conflict of another start is no verdict on this one).

    Only a *closed* attempt (an outcome, or a conflict mark) is provably an earlier
    start's: the node 0 that sized it is done with it. An open one may be this start's
    node 0 seeing another count (pods that disagree on VC_WORKER_NUM): the pod publishes
    into it (None here), so that node 0 aborts at once naming the difference (5), as
    `evaluate` does. An abort is a `stale-count` wait too; the follower still fails on
    one written after it started (`Follower._fail_if_aborted_after_start`): a node 0 of
    another size that aborted while this pod ran is this start's."""
    if sized_for_me(attempt, me):
        return None
    if outcome is None and attempt.conflict is None:
        return None
    how = ("completed" if outcome is not None and outcome.result == "table" else
           "was aborted" if outcome is not None else "ended in a conflict")
    return WaitAttempt(
        f"attempt {attempt.attempt_id} {how} for "
        f"{job_size(attempt.node_count, attempt.master_count)}, this pod's job has "
        f"{job_size(me.node_count, me.master_count)}: an earlier start of the job, before "
        "its size changed; waiting for node 0 to open an attempt for this one",
        "stale-count",
    )


def verify_table_holds(outcome: OutcomeDoc, data: MemberData, master_count: int) -> Optional[str]:
    """Check that the table text has exactly my entry: container IP and devices.

    The digest says the assembler used my document; this says the table it wrote
    really holds it (a defence against a buggy or foreign assembler). A v1.0 table lists
    node i at position i; a v1.2 table groups each super pod's servers together, so there
    my entry is found by its container IP (unique: `evaluate` refuses repeated pod IPs).
    """
    try:
        table = json.loads(outcome.ranktable_text)
    except ValueError:
        return "the table of the outcome cannot be read"
    return entry_problem(table, data, master_count)


def entry_problem(table: Any, data: MemberData, master_count: int) -> Optional[str]:
    """What is wrong with `data`'s entry in a parsed table (None: it holds exactly it)."""
    name = node_name(data.global_index, master_count)
    try:
        servers = table["server_list"]
        if table.get("version") == "1.2":
            server = next(s for s in servers if s.get("container_ip") == data.pod_ip)
        else:
            server = servers[data.global_index]
        ids = sorted((int(d["device_id"]), d["device_ip"],
                      None if d.get("super_device_id") is None else int(d["super_device_id"]))
                     for d in server["device"])
    except StopIteration:
        return f"the table has no entry for {name} (container IP {data.pod_ip})"
    except (ValueError, KeyError, IndexError, TypeError, AttributeError):
        return "the table of the outcome cannot be read"
    want = sorted((d.device_id, d.device_ip, d.super_device_id) for d in data.devices)
    if table.get("version") != "1.2":
        ids = [(i, ip, None) for i, ip, _ in ids]
        want = [(i, ip, None) for i, ip, _ in want]
    if (server.get("container_ip") != data.pod_ip or ids != want
            or server.get("server_id") not in (data.host_ip, data.pod_ip)):
        return (f"the table's entry for {name} does not hold its container IP, server id "
                "and devices")
    return None


# ------------------------------------------------------------------- the end of the wait


def changed_since_verdict(records: Sequence[TableRecord],
                          listed: Optional[Mapping[int, tuple[int, int, int]]]) -> list[int]:
    """The table's nodes whose slot may hold other data than node 0 built the table from:
    those whose slot file, in one listing taken after the verdict was read (global index
    -> (inode, size, mtime_ns); None: no listing that can be trusted, as on FUSE), is gone
    or has another stamp than the record's `slot_stamp` — and every node whose record has
    no stamp (an outcome written before stamps existed). A follower reads only these
    slots (plus its cross-check sample) to find a re-created peer, not all N.

    Why a stamp that matches means the slot was not rewritten: every write of a slot
    makes a new inode (a temp file renamed over it, or hard-linked into place), and a
    write in place changes its size or mtime. Slots listed without a record (not in the
    table) are not named: they are no member of this table."""
    if listed is None:
        return [record.global_index for record in records]
    return [record.global_index for record in records
            if record.slot_stamp is None or listed.get(record.global_index) != record.slot_stamp]


# ----------------------------------------------------------------------- forged outcomes
#
# Without a key, a follower cannot tell who wrote `outcome.json`; it can check that the
# document is internally consistent and that the entries it can afford to compare hold
# what those nodes published (their slots). A table that fails is not node 0's: exit 5
# naming it, never a table other than the one node 0 built (docs/rendezvous.md, threat
# model, for what this does and does not cover).

CROSS_CHECK_SUCCESSORS = 2
CROSS_CHECK_RANDOM = 4


def cross_check_sample(index: int, node_count: int, rng: Callable[[int, int], int]
                       ) -> list[int]:
    """The peers (besides itself) whose entries a follower compares with their slots
    when it accepts a table: node 0, its next `CROSS_CHECK_SUCCESSORS` nodes (so every
    entry is checked by the nodes before it, whatever a forger expects), and
    `CROSS_CHECK_RANDOM` more at random (so a forger cannot know who checks what).
    Every peer when that is all of them. `rng(a, b)`: a random integer in [a, b]."""
    others = [i for i in range(node_count) if i != index]
    budget = 1 + CROSS_CHECK_SUCCESSORS + CROSS_CHECK_RANDOM
    if len(others) <= budget:
        return others
    chosen = [0]
    step = 1
    while len(chosen) < 1 + CROSS_CHECK_SUCCESSORS:
        nxt = (index + step) % node_count
        step += 1
        if nxt not in (0, index) and nxt not in chosen:
            chosen.append(nxt)
    while len(chosen) < budget:
        pick = rng(1, node_count - 1)
        if pick != index and pick not in chosen:
            chosen.append(pick)
    return chosen


@dataclass(frozen=True)
class Forged:
    """The outcome cannot be node 0's: `index` names the node whose entry or slot
    contradicts it (None: the document contradicts itself)."""

    reason: str
    index: Optional[int] = None


def outcome_consistency(outcome: OutcomeDoc, node_count: int, master_count: int
                        ) -> Optional[Forged]:
    """What node 0's own writing guarantees, checked without reading anything else:
    the sha256 of the text, one record per node in order, a table of `node_count`
    servers whose rank ids run from 0 without a gap (so no entry can move ranks)."""
    text = outcome.ranktable_text
    if hashlib.sha256(text.encode()).hexdigest() != outcome.ranktable_sha256:
        return Forged("its ranktable_sha256 does not match its table text")
    if tuple(r.global_index for r in outcome.members) != tuple(range(node_count)):
        return Forged(f"its member records are not nodes 0..{node_count - 1} in order")
    try:
        table = json.loads(text)
        servers = table["server_list"]
        ranks = [int(d["rank_id"]) for s in servers for d in s["device"]]
        count = int(table["server_count"])
    except (ValueError, KeyError, TypeError):
        return Forged("its table cannot be read")
    if count != node_count or len(servers) != node_count:
        return Forged(f"its table lists {len(servers)} servers (server_count "
                      f"{table.get('server_count')!r}), the job has {node_count}")
    if ranks != list(range(len(ranks))):
        return Forged("its table's rank ids do not run from 0 in server order")
    return None


def cross_check(outcome: OutcomeDoc, slots: Mapping[int, SlotState], master_count: int
                ) -> Optional[Forged]:
    """Compare the table with the slots read (index -> what the slot held).

    A slot whose data has the record's digest must appear in the table exactly as
    published; a slot holding other data is a re-created peer (`Follower` waits for a
    new attempt), except node 0's: node 0 never rewrites its slot in a completed
    attempt (a restarted node 0 opens a new one). A slot that no longer holds a member
    document while the table lists it was removed or replaced after node 0 read it."""
    try:
        table = json.loads(outcome.ranktable_text)
    except ValueError:
        return Forged("its table cannot be read")
    for index in sorted(slots):
        state = slots[index]
        name = node_name(index, master_count)
        record = outcome.record_for(index)
        if record is None:
            return Forged(f"it has no record for {name}", index)
        if not isinstance(state, MemberDoc):
            what = "is missing" if state is None else (
                state if isinstance(state, str) else f"holds a {state.kind} document")
            return Forged(f"it lists {name}, whose slot {what}", index)
        if state.data.digest() != record.digest:
            if index == 0:
                return Forged(f"its record for {name} is not the data node 0 published",
                              index)
            continue
        problem = entry_problem(table, state.data, master_count)
        if problem is not None:
            return Forged(f"{problem}, as published in its slot", index)
    return None


