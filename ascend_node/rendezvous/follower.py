"""Every node but global node 0: publish into the current attempt, wait for its verdict.

Cost of a full look: one directory open for the run directory (attempt.json) and one for
the attempt directory (outcome, own slot), then those three known files; nothing grows
with the cluster (tests/test_poll_cost.py). Once calm (`cadence`), most polls are only a
glance: one open of the run directory, which node 0 changes whenever a follower must look.
Accepting a table, once: one listing of the attempt directory and the reads of the slots
changed since node 0 recorded them plus the cross-check sample — not every slot
(docs/rendezvous.md, "The end of the wait").
"""

from __future__ import annotations

import contextlib
import logging
import random
from typing import Optional

from ascend_node.errors import ClusterInconsistent, PeerTimeout, SharedVolumeError
from ascend_node.rendezvous import cadence, decide
from ascend_node.rendezvous.models import (
    AttemptDoc,
    ConflictDoc,
    MemberDoc,
    OutcomeDoc,
    ProgressDoc,
)
from ascend_node.rendezvous.participant import Participant, names_of, restart_hint
from ascend_node.rendezvous.store import (
    Invalid,
    Valid,
    check_real_dirs,
    check_writable,
    create_doc,
    read_doc,
    volume_clock_ns,
    write_doc,
)

log = logging.getLogger("ascend_node.rendezvous")


class Follower(Participant):
    _traced: set[str]

    def run(self) -> OutcomeDoc:
        self._traced = set()
        published_in: Optional[str] = None
        published_at = -1e9  # when this pod last published (`cadence.after_publish_nap`)
        outdated_checked: dict[str, list[int]] = {}
        acceptance_reads: dict[str, dict[int, decide.SlotState]] = {}
        node0_seen: dict[str, decide.SlotState] = {}
        abort_checked: set[str] = set()
        checked_dirs: set[str] = set()
        root_checked = False
        writable_checked = False
        last_log = -1e9
        action: decide.FollowerAction = decide.WaitAttempt("not started")
        started = busy_since = self.clock()  # fast polls until calm (cadence)
        size = self.identity.node_count  # a large job glances from the start (cadence)
        last_look = -1e9
        seen: Optional[object] = None  # what the last glance at the run directory saw
        seen_attempt: Optional[str] = None
        attempt: Optional[AttemptDoc] = None
        # A large job's follower that met node 0's attempt before its directory looks
        # again at its next poll instead of making the directory (`cadence.joins_now`).
        awaiting_dir = False
        # What this follower's recent polls cost the server, modeled (cadence, "the
        # join, paced"): a large job's follower holds a poll back until it fits.
        ledger: Optional[list[tuple[float, float]]] = [] if cadence.paced(size) else None
        while True:
            now = self.clock()
            glance = self.fresh.glance(self.paths.root)
            if ledger is not None:
                ledger.append((now, cadence.GLANCE_RPCS))
            # (a FUSE volume may show a directory's old attributes: every poll looks)
            changed = glance != seen or not self.fresh.attributes_current
            if ledger is not None and not self.fresh.attributes_current:
                ledger = None  # (the costs paced are an NFS server's: sshfs keeps its cadence)
            seen = glance
            if not cadence.follower_looks(now, busy_since, last_look,
                                          changed or awaiting_dir, self.poll_interval, size):
                if self._timed_out():
                    raise self._timeout_error(self._timeout(action, attempt))
                self._paced_nap(ledger, cadence.follower_nap(now, busy_since,
                                                             self.poll_interval, size),
                                cadence.GLANCE_RPCS)
                continue
            if ledger is not None:
                # A look that may publish (this pod has not, in the attempt it knows
                # of) is budgeted as a join, and waits until the window has room for it.
                joining = attempt is None or published_in != attempt.attempt_id
                cost = cadence.JOIN_RPCS if joining else cadence.LOOK_PEAK_RPCS
                if cadence.room_in(ledger, now, cost) > now:
                    # After the wait the run directory is opened again before it is
                    # read (`freshness`): one glance more, charged with the look.
                    wait = cadence.room_in(ledger, now, cost + cadence.GLANCE_RPCS) - now
                    self.sleep(min(wait, max(self.deadline - now, 0.0)))
                    self.fresh.new_poll()
                    now = self.clock()
                    ledger.append((now, cadence.GLANCE_RPCS))
                ledger.append((now, cost))
            looked_before, last_look = last_look > -1e9, now
            # Every directory down to the run directory must be a real one before a
            # document is read through them (a symlink planted as `.ascend-node/<run>`
            # would redirect every read). Checked after the glance, not before: on NFS
            # the glance's open has just looked each of them up, so their `lstat`s cost
            # nothing, where an `lstat` first makes the open revalidate (a GETATTR more).
            if not root_checked:
                root_checked = check_real_dirs(self.paths.shared_dir, self.paths.root)
            if self.fresh.opened(self.paths.root):
                # (watched for listings once it exists: a listing of a directory not
                # there yet would only cost a LOOKUP every few seconds, and would put
                # a READDIR into the join of a pod that came before node 0)
                self.fresh.maybe_list(self.paths.root)
            attempt = self._read_attempt()
            new_attempt = attempt is not None and attempt.attempt_id != seen_attempt
            if attempt is not None and new_attempt:
                seen_attempt = attempt.attempt_id
                busy_since = now
            # Once all of its directories exist (node 0 may have written attempt.json but
            # not yet made the directory): the publish then need not make them. Opened
            # (revalidated) first, for the same reason as above.
            if attempt is not None and attempt.attempt_id not in checked_dirs:
                self.fresh.dir(self.paths.attempt_dir(attempt.attempt_id))
                if check_real_dirs(self.paths.shared_dir,
                                   self.paths.attempt_dir(attempt.attempt_id)):
                    checked_dirs.add(attempt.attempt_id)
            outcome = self._read_outcome(attempt.attempt_id) if attempt else None
            if outcome is None and attempt is not None and changed and looked_before \
                    and not new_attempt and cadence.is_calm(now, busy_since, size):
                # The run directory changed but the attempt did not: most likely node 0's
                # nudge after its verdict. Should the client still hold a negative entry
                # for it (a change within one tick of the server's clock), a listing
                # replaces it (freshness); once per nudge, not per poll (nor at a first
                # look, which in a large job comes calm: no listing of N slots each).
                self.fresh.relist(self.paths.attempt_dir(attempt.attempt_id))
                outcome = self._read_outcome(attempt.attempt_id)
            slot = self._slot_state(attempt.attempt_id, self.index) if attempt else None
            if isinstance(slot, str):
                self._warn_once(f"{self.paths.slot(attempt.attempt_id, self.index)}: {slot}"
                                if attempt else slot)
            action = decide.follower_step(attempt, outcome, slot, self.me, published_in)
            awaiting_dir = False
            if isinstance(action, decide.Publish) and not cadence.joins_now(
                    size, action.attempt_id in checked_dirs):
                awaiting_dir = True
                action = decide.WaitAttempt(
                    f"{self.name(0)} has opened attempt {action.attempt_id} but not yet "
                    f"made its directory ({self.paths.attempt_dir(action.attempt_id)})",
                    "no-attempt-dir",
                )
            if attempt is None and not writable_checked:
                # Nobody can ever open an attempt on a read-only volume: say so now, not
                # at the timeout. (A completed run is only read: restarts still work.)
                check_writable(self.paths.shared_dir)
                writable_checked = True
            if seen_attempt is None and not self._timed_out():
                quick = cadence.first_attempt_nap(now, started, self.poll_interval, size)
                if quick is not None:  # node 0's attempt may be a few ms away
                    self._nap(quick)
                    continue
            if isinstance(action, decide.Done) and attempt is not None:
                if attempt.attempt_id not in outdated_checked:
                    # Once per attempt: has a peer been re-created with new data? Then
                    # this table is about to be replaced. One listing names the slots
                    # changed since node 0 read them (`decide.changed_since_verdict`);
                    # those, the sample `decide.cross_check_sample` asks for and node 0's
                    # slot as read before this pod published are read once, checked for
                    # new data, and what the table is cross-checked with.
                    reads = self._cross_check_reads(attempt.attempt_id, node0_seen)
                    since = self._changed_since_verdict(attempt.attempt_id, action.outcome)
                    acceptance_reads[attempt.attempt_id] = reads
                    outdated_checked[attempt.attempt_id] = self._outdated_slots(
                        attempt.attempt_id, action.outcome, reads, [*reads, *since])
                outdated = outdated_checked[attempt.attempt_id]
                if not outdated:
                    return self._accept(action.outcome, acceptance_reads[attempt.attempt_id])
                action = decide.WaitAttempt(
                    f"attempt {attempt.attempt_id}'s table no longer matches "
                    f"{names_of(outdated, self.identity.master_count)} (re-created with new "
                    "data); waiting for node 0 to open a new attempt",
                    "stale-table",
                )
            if isinstance(action, decide.Fail):
                raise ClusterInconsistent(action.reason, restart_hint(self.paths))
            if isinstance(action, decide.Conflict):
                self._declare_conflict(action)
            if isinstance(action, decide.Publish):
                if action.attempt_id not in node0_seen:
                    # Node 0's slot, read once while node 0 cannot have completed (it
                    # waits for this pod's slot) and will read its own slot again: a
                    # forger that later rewrites node 0's slot and entry is caught.
                    node0_slot = self._slot_state(action.attempt_id, 0)
                    if isinstance(node0_slot, MemberDoc):
                        node0_seen[action.attempt_id] = node0_slot
                self._publish(action.attempt_id, slot,
                              dirs_checked=action.attempt_id in checked_dirs)
                published_in = action.attempt_id
                busy_since = published_at = self.clock()
                if ledger is not None:
                    # Calm from the start: the next full look comes a whole window
                    # after the publish, and the next glance when the join leaves room.
                    # (A look charged as a look that met a new attempt and published in
                    # it is charged as the join it was: the polls after it wait for it.)
                    ledger[-1] = (ledger[-1][0], cadence.JOIN_RPCS)
                    last_look = busy_since
                    self._paced_nap(ledger, cadence.follower_nap(
                        busy_since, busy_since, self.poll_interval, size),
                        cadence.GLANCE_RPCS)
                continue
            if (
                isinstance(action, decide.WaitAttempt)
                and (action.kind == "stale-abort"
                     or (action.kind == "stale-count" and outcome is not None
                         and outcome.result == "abort"))
                and attempt is not None
                and attempt.attempt_id not in abort_checked
            ):
                abort_checked.add(attempt.attempt_id)
                self._fail_if_aborted_after_start(attempt.attempt_id)
            if (
                isinstance(action, decide.WaitAttempt)
                and action.kind == "stale-table"
                and attempt is not None
                and published_in != attempt.attempt_id
                and attempt.attempt_id not in outdated_checked
            ):
                # Leave our new data where node 0 will see it when it next starts.
                self._publish(attempt.attempt_id, slot)
                published_in = attempt.attempt_id
            now = self.clock()
            if now - last_log >= self.progress_interval:
                last_log = now
                log.info("%s", self._waiting_line(action, attempt))
            if ledger is not None and (attempt is None or published_in != attempt.attempt_id):
                # Budgeted as a join, it did not publish: it cost what a look costs.
                ledger[-1] = (ledger[-1][0], cadence.look_rpcs(attempt is not None))
            if self._timed_out():
                raise self._timeout_error(self._timeout(action, attempt))
            nap = cadence.follower_nap(now, busy_since, self.poll_interval, size)
            if attempt is not None and published_in == attempt.attempt_id:
                # its verdict may be a quarter poll away (node 0 answers the last slot fast)
                quick = cadence.after_publish_nap(now, published_at, self.poll_interval, size)
                nap = min(nap, quick) if quick is not None else nap
            self._paced_nap(ledger, nap, cadence.GLANCE_RPCS)

    def _paced_nap(self, ledger: Optional[list[tuple[float, float]]], interval: float,
                   cost: float) -> None:
        """Nap `interval` (+-20 %); with a `ledger`, longer if the next poll (`cost`)
        would not fit in its window (`cadence.room_in`)."""
        if ledger is None:
            self._nap(interval)
            return
        now = self.clock()
        cadence.forget(ledger, now)
        nap = interval * random.uniform(0.8, 1.2)
        nap = cadence.room_in(ledger, now + nap, cost) - now
        self.sleep(min(nap, max(self.deadline - now, 0.0)))
        self.fresh.new_poll()

    def _on_key_mismatch(self, got: Invalid) -> None:
        """Node 0's attempt is signed with a key this pod lacks, with another key, or
        not signed while this pod has a key: publish this pod's member document into
        that attempt anyway (signed with this pod's key, if any), once, into an empty
        slot. Node 0 then names this pod's slot (not signed, or signed with another key
        id) instead of only calling the pod missing — and a node 0 without a key exits 5
        at once on a signed slot. Harmless when the attempt document was a forger's: it
        is the document this pod publishes into the real attempt anyway."""
        if not isinstance(got.doc, AttemptDoc) or got.doc.conflict is not None:
            return
        aid = got.doc.attempt_id
        if aid in self._traced:
            return
        self._traced.add(aid)
        with contextlib.suppress(SharedVolumeError, OSError, ClusterInconsistent):
            create_doc(self.paths.slot(aid, self.index), self._member_doc(aid),
                       self.paths.shared_dir, key=self.key)

    def _changed_since_verdict(self, attempt_id: str, outcome: OutcomeDoc) -> list[int]:
        """The table's nodes whose slot changed since node 0 read it, from one listing
        of the attempt directory (`_listed_slots`). Where listings cannot be trusted
        (FUSE) every node, as when the outcome records no stamps (then nothing is listed)."""
        stamped = any(record.slot_stamp is not None for record in outcome.members)
        listed = self._listed_slots(attempt_id) if stamped else None
        return decide.changed_since_verdict(outcome.members, listed)

    def _cross_check_reads(self, attempt_id: str, node0_seen: dict[str, decide.SlotState]
                           ) -> dict[int, decide.SlotState]:
        reads: dict[int, decide.SlotState] = {}
        if attempt_id in node0_seen:
            reads[0] = node0_seen[attempt_id]
        for index in decide.cross_check_sample(self.index, self.identity.node_count,
                                               random.randint):
            if index not in reads:
                reads[index] = self._slot_state(attempt_id, index)
        return reads

    def _fail_if_aborted_after_start(self, attempt_id: str) -> None:
        """An abort this pod took no part in is history (a previous start of the job)
        unless it happened while this agent was already running: then it is this
        start's verdict, which the pod missed only because it arrived late (a slow
        discovery on an overloaded node), and waiting for a new attempt would last until
        the timeout. Both times are taken by the shared volume's clock: the outcome's
        mtime, and the mtime of a probe file this pod creates now, shifted back by how
        long ago the agent started. (The job version, when known, decides in `decide` already;
        an abort of another job size is judged here too: such a node 0 that aborted while
        this pod ran is this start's, whose pods disagree on their counts.)
        """
        outcome = self._read_outcome_valid(attempt_id)
        if outcome is None:
            return
        since_start = self.clock() - self.started
        volume_now = volume_clock_ns(self.paths.root)
        if volume_now is None:
            return
        # The probe's mtime is the volume's "now" at or after this line, so the start
        # estimate errs late: an abort is blamed on this start only when certain.
        started_ns = volume_now - int(since_start * 1e9)
        aborted_ns = outcome.stamp[2]
        if aborted_ns > started_ns:
            raise ClusterInconsistent(
                f"attempt {attempt_id} was aborted: {outcome.doc.reason} "
                f"({(aborted_ns - started_ns) / 1e9:.1f} s after this pod "
                "started, before it could join: this start of the job failed)",
                restart_hint(self.paths),
            )

    def _declare_conflict(self, action: decide.Conflict) -> None:
        doc = ConflictDoc(
            run_id=self.paths.run_id,
            attempt_id=action.attempt_id,
            global_index=self.index,
            incarnations=tuple(sorted({self.identity.incarnation, action.other})),
        )
        write_doc(self.paths.slot(action.attempt_id, self.index), doc, self.paths.shared_dir,
                  key=self.key)
        raise ClusterInconsistent(
            f"two live pods claim {self.name(self.index)}: this pod "
            f"({self.identity.incarnation}) and {action.other}",
            "two pods got the same ROLE/VC_TASK_INDEX; check the job's tasks and the env plugin",
        )

    def _waiting_line(self, action: decide.FollowerAction, attempt: Optional[AttemptDoc]) -> str:
        """What *this* pod waits for. Node 0's progress document can lag behind (it
        lists this pod as missing until node 0's next poll), so this pod leaves itself
        out of node 0's list and says plainly when only the verdict is outstanding."""
        if isinstance(action, decide.WaitAttempt):
            return f"waiting: {action.reason}"
        if attempt is None:
            return f"waiting for {self.name(0)} to open the rendezvous"
        aid = attempt.attempt_id
        if not decide.sized_for_me(attempt, self.me):
            return (f"published into attempt {aid}, which {self.name(0)} opened for "
                    f"{self._size_of(attempt)} while this pod's job has "
                    f"{self._size_of(None)}: if it is this start's, {self.name(0)} ends it "
                    "naming the difference; if it is an earlier start's, waiting for "
                    f"{self.name(0)} to open an attempt for this one")
        got = read_doc(self.fresh.file(self.paths.progress(aid)), ProgressDoc,
                       self.paths.run_id, self.key)
        others = ([i for i in got.doc.missing if i != self.index]
                  if isinstance(got, Valid) and got.doc.attempt_id == aid else [])
        if others:
            return (f"published into attempt {aid}; node 0 still waits for "
                    f"{len(others)} other node(s): "
                    f"{names_of(others, self.identity.master_count, limit=8)}")
        return f"published into attempt {aid}; waiting for {self.name(0)} to build the table"

    def _size_of(self, attempt: Optional[AttemptDoc]) -> str:
        """`3 nodes (1 master)`: the size `attempt` was opened for (None: this pod's)."""
        if attempt is not None:
            return decide.job_size(attempt.node_count, attempt.master_count)
        return decide.job_size(self.identity.node_count, self.identity.master_count)

    def _timeout(self, action: decide.FollowerAction, attempt: Optional[AttemptDoc]) -> Exception:
        waited = f"{self.timeout:g} s"
        node0 = self.name(0)
        if attempt is None:
            return PeerTimeout(
                f"timed out after {waited}: {node0} never opened the rendezvous "
                f"(no {self.paths.attempt_file}); missing: {node0}",
                f"check that {node0} is running and mounts the same shared volume; "
                "exit 4 is retryable",
            )
        if isinstance(action, decide.WaitAttempt) and action.kind == "stale-table":
            return PeerTimeout(
                f"timed out after {waited}: {action.reason}, and no new attempt opened",
                "the job must be restarted (all pods) to build a new rank table",
            )
        if not decide.sized_for_me(attempt, self.me):  # (a `stale-count` wait, or not)
            return PeerTimeout(
                f"timed out after {waited}: attempt {attempt.attempt_id} is for "
                f"{self._size_of(attempt)}, this pod's job has {self._size_of(None)} (an "
                f"earlier start's), and {node0} never opened an attempt for this one; "
                f"missing: {node0}",
                f"check that {node0} of this start of the job is running and mounts the "
                "same shared volume, and that every pod has the same VC_MASTER_NUM and "
                "VC_WORKER_NUM; exit 4 is retryable",
            )
        if isinstance(action, decide.WaitAttempt) and action.kind == "stale-version":
            return PeerTimeout(
                f"timed out after {waited}: {action.reason}, and it never came; missing: "
                f"{node0}",
                f"check that {node0} of this start of the job is running and mounts "
                "the same shared volume; exit 4 is retryable",
            )
        if isinstance(action, decide.WaitAttempt) and action.kind == "no-attempt-dir":
            return PeerTimeout(
                f"timed out after {waited}: {action.reason}, and it never came; missing: "
                f"{node0}",
                f"check {node0}'s log (it makes the directory when it publishes its own "
                "slot) and that it mounts the same shared volume; exit 4 is retryable",
            )
        if isinstance(action, decide.WaitAttempt) and action.kind == "own-failure":
            return PeerTimeout(
                f"timed out after {waited}: {action.reason}, and no new attempt opened",
                f"restart the job (or run `ascend-node clean` for run {self.paths.run_id!r}, "
                f"then restart {node0}): {node0} opens a new attempt when it starts; "
                "exit 4 is retryable",
            )
        if isinstance(action, decide.WaitAttempt) and action.kind == "stale-abort":
            return ClusterInconsistent(
                f"{action.reason}; no new attempt opened within {waited}",
                restart_hint(self.paths),
            )
        missing = self._missing_now(attempt.attempt_id)
        if not missing:
            return PeerTimeout(
                f"timed out after {waited} waiting for {node0} to build the table of "
                f"attempt {attempt.attempt_id}: all {self.identity.node_count} nodes had "
                f"published; missing: the verdict of {node0}",
                f"check {node0}'s log (it assembles the table) and that it mounts the same "
                "shared volume; exit 4 is retryable",
            )
        return PeerTimeout(
            f"timed out after {waited} waiting for peers: {len(missing)} of "
            f"{self.identity.node_count} missing: "
            f"{names_of(missing, self.identity.master_count)}",
            "check that those pods are running and mount the same shared volume; "
            "exit 4 is retryable",
        )
