"""Global node 0: open or reuse the attempt, judge the slots, write the verdict.

Cost per poll: one directory open (a GETATTR on NFS) for the run directory and one for
the attempt directory. Only when the run directory changed does it read attempt.json (to
notice a twin node 0); only when the attempt directory changed does it list it, and then
it reads only the slots that are new or whose inode, size or mtime changed: a slot read
and validated once is not read again in that attempt unless the listing says it changed
(`cadence.node0_lists`, tests/test_poll_cost.py). The same listing shows an
`outcome.json` that node 0 did not write (a forger's, issue of the shared volume's trust
boundary, docs/rendezvous.md): it is read only when it is new or changed. Completion reads
every slot once more, creates the outcome exclusively and reads it back.
"""

from __future__ import annotations

import hashlib
import logging
import os
import secrets
import time
from collections.abc import Sequence
from typing import NoReturn, Optional, Union

from ascend_node.atomic import atomic_write_bytes
from ascend_node.errors import ClusterInconsistent, ConfigError, PeerTimeout
from ascend_node.ranktable import build_rank_table, render_rank_table
from ascend_node.rendezvous import cadence, decide
from ascend_node.rendezvous.freshness import list_files, nudge
from ascend_node.rendezvous.models import (
    AttemptDoc,
    ConflictDoc,
    FailureDoc,
    MemberDoc,
    OutcomeDoc,
    ProgressDoc,
    TableRecord,
)
from ascend_node.rendezvous.participant import (
    KeyMismatch,
    Participant,
    names_of,
    progress_line,
    restart_hint,
    to_server,
)
from ascend_node.rendezvous.store import (
    Invalid,
    Missing,
    Valid,
    create_doc,
    read_bytes_nofollow,
    read_doc,
    volume_error,
    write_doc,
)
from ascend_node.rendezvous.volume_call import call, raise_if_io

ABORT_GRACE = 5.0
"""Seconds node 0 waits, after it finds the cluster inconsistent, for late pods to join
the attempt, so that every pod of this start-up hears the verdict (exit 5) at once
instead of waiting for a new attempt until its timeout."""

SETTLE_POLLS = 1.5
"""When a slot is contested, node 0 nudges the followers (`freshness.nudge`) and re-reads
the slots after `cadence.settle_wait` (at least this many poll intervals), completing only
if nothing changed: a pod whose slot a twin overwrote (two pods with one index) gets one
glance and one poll to notice and leave a conflict document. Uncontested slots need no
wait: each was the first document in its slot."""

log = logging.getLogger("ascend_node.rendezvous")

SlotCache = dict[int, tuple[tuple[int, int, int], decide.SlotState]]


class Assembler(Participant):
    _attempt_doc: Optional[AttemptDoc] = None  # what node 0 wrote as attempt.json

    def run(self) -> OutcomeDoc:
        attempt_id, outcome = self._open_or_reuse()
        if outcome is not None:
            if outcome.result == "abort":
                raise ClusterInconsistent(f"attempt {attempt_id} was aborted: {outcome.reason}",
                                          restart_hint(self.paths))
            log.info("attempt %s is already complete; reusing its table", attempt_id)
            checked = self._read_slots(attempt_id, range(self.identity.node_count))
            self._accept(outcome, checked)  # written before this container: check it all
            self._publish_shared_table(outcome)
            return outcome
        try:
            own = self._slot_state(attempt_id, 0)
            if not (isinstance(own, MemberDoc) and own.incarnation == self.identity.incarnation
                    and own.data.digest() == self.data.digest()):
                self._publish(attempt_id, own)
            return self._wait_for_members(attempt_id)
        except KeyMismatch as exc:
            # Tell the peers without a key (those with one ignore this unsigned verdict
            # and name the mismatch at their timeout).
            self._write_abort(attempt_id, exc.cause, (), ())
            raise

    def _wait_for_members(self, attempt_id: str) -> OutcomeDoc:
        cache: SlotCache = {}
        last_log = -1e9
        last_progress: Optional[tuple[tuple[int, ...], tuple[int, ...]]] = None
        abort_since: Optional[float] = None
        settled: Optional[tuple[MemberDoc, ...]] = None
        seen_run: Optional[object] = None
        seen_dir: Optional[object] = None
        changed_last_poll = False
        last_listing = -1e9
        slots: dict[int, decide.SlotState] = {}
        outcome_seen: Optional[tuple[int, int, int]] = None
        attempt_dir = self.paths.attempt_dir(attempt_id)
        arrived = self.clock()  # when the slots present last changed (`cadence.node0_nap`)
        while True:
            now = self.clock()
            run_stamp = self.fresh.glance(self.paths.root)
            if run_stamp != seen_run or now - last_listing >= cadence.LOOK_EVERY:
                self._check_attempt_still_mine(attempt_id)
                seen_run = run_stamp
            dir_stamp = self.fresh.glance(attempt_dir)
            dir_changed = dir_stamp != seen_dir
            seen_dir = dir_stamp
            if cadence.node0_lists(dir_changed, changed_last_poll, now, last_listing) \
                    or not cache or not self.fresh.attributes_current:
                last_listing = now
                listed = self._list_attempt(attempt_id)
                # A planted outcome changes the directory too: the same listing shows
                # it, so this check costs no RPC while the directory is unchanged.
                outcome_seen = self._check_no_foreign_outcome(
                    attempt_id, outcome_seen, listed.get(self.paths.outcome(attempt_id).name))
                slots = self._scan_slots(attempt_id, cache, listed)
            changed_last_poll = dir_changed
            verdict = decide.evaluate(slots, self.identity.node_count,
                                      self.identity.master_count, self.allow_uneven_devices,
                                      self.identity.job_version, self.table_version,
                                      self.judge)
            if isinstance(verdict, decide.Complete):
                if settled == verdict.members:
                    # The stamps of the listing the settle pass read every slot after:
                    # recorded in the outcome, they let a follower list once and read
                    # only what changed since (`decide.changed_since_verdict`).
                    return self._complete(attempt_id, verdict.members, verdict.warnings,
                                          {index: hit[0] for index, hit in cache.items()})
                # Everyone is present: read every slot once more, afresh, and complete
                # only if nothing changed. Afresh, because some filesystems (sshfs) keep
                # the inode on replace and stamp mtimes to the second, which the slot
                # cache cannot see through. When a slot is contested (its pod found
                # another pod's document there), first give that other pod a poll to
                # notice and leave a conflict document: two live pods with one index.
                settled = verdict.members
                cache.clear()
                if any(m.contested for m in verdict.members):
                    nudge(self.paths.root)  # every follower looks at its slot now
                    self.sleep(max(self.poll_interval * SETTLE_POLLS,
                                   cadence.settle_wait(self.poll_interval)))
                self.fresh.new_poll()
                continue
            settled = None
            if isinstance(verdict, decide.Abort):
                now = self.clock()
                if abort_since is None:
                    abort_since = now
                    log.error("cluster is inconsistent: %s", verdict.reason)
                everyone = all(
                    isinstance(s, (MemberDoc, FailureDoc, ConflictDoc)) for s in slots.values()
                )
                if everyone or now - abort_since >= ABORT_GRACE or self._timed_out():
                    self._abort(attempt_id, verdict, slots)
                self._nap()
                continue
            abort_since = None
            for index, reason in verdict.invalid.items():
                self._warn_once(f"{self.paths.slot(attempt_id, index)}: {reason}")
            key = (verdict.present, verdict.missing)
            if key != last_progress:
                last_progress = key
                arrived = now
                write_doc(self.paths.progress(attempt_id), ProgressDoc(
                    run_id=self.paths.run_id, attempt_id=attempt_id,
                    node_count=self.identity.node_count,
                    present=verdict.present, missing=verdict.missing,
                ), self.paths.shared_dir, key=self.key)
            now = self.clock()
            if now - last_log >= self.progress_interval:
                last_log = now
                log.info("%s", progress_line(verdict.present, verdict.missing,
                                             self.identity.master_count,
                                             self.identity.node_count))
            if self._timed_out():
                raise self._timeout_error(self._timeout(verdict))
            self._nap(cadence.node0_nap(self.poll_interval, len(verdict.missing),
                                        self.clock() - arrived))

    def _timeout(self, verdict: decide.Waiting) -> PeerTimeout:
        invalid = "".join(
            f"; {self.name(i)}'s slot is unusable: {reason}"
            for i, reason in sorted(verdict.invalid.items())
        )
        return PeerTimeout(
            f"timed out after {self.timeout:g} s waiting for peers: "
            f"{len(verdict.missing)} of {self.identity.node_count} missing: "
            f"{names_of(verdict.missing, self.identity.master_count)}{invalid}",
            "check that those pods are running and mount the same shared volume; "
            "exit 4 is retryable",
        )

    def _open_or_reuse(self) -> tuple[str, Optional[OutcomeDoc]]:
        attempt = self._read_attempt()
        outcome = self._read_outcome(attempt.attempt_id) if attempt else None
        outdated: Sequence[int] = ()
        if attempt is not None and outcome is not None and outcome.result == "table":
            outdated = self._outdated_slots(attempt.attempt_id, outcome)
        choice = decide.choose_attempt(
            attempt, outcome, self.identity.incarnation, self.data.digest(),
            self.identity.node_count, self.identity.master_count, outdated,
            self.identity.job_version, self.identity.job_instance,
        )
        if isinstance(choice, decide.Leftover):
            raise ConfigError(
                f"{choice.reason}: a leftover pod of an earlier start of the job",
                "this pod should have been replaced; delete it or restart the job",
            )
        if isinstance(choice, decide.Reuse):
            if attempt is not None and attempt.conflict is not None:
                raise ClusterInconsistent(
                    f"attempt {attempt.attempt_id} ended in a conflict: {attempt.conflict}",
                    restart_hint(self.paths),
                )
            self._attempt_doc = attempt
            return choice.attempt_id, outcome
        attempt_id = new_attempt_id()
        doc = AttemptDoc(
            run_id=self.paths.run_id,
            attempt_id=attempt_id,
            opened_by=self.identity.incarnation,
            node_count=self.identity.node_count,
            master_count=self.identity.master_count,
            reason=choice.reason,
            job_version=self.identity.job_version,
            job_instance=self.identity.job_instance,
        )
        write_doc(self.paths.attempt_file, doc, self.paths.shared_dir, key=self.key)
        self._attempt_doc = doc
        log.info("opened attempt %s (%s)", attempt_id, choice.reason)
        return attempt_id, None

    def _list_attempt(self, attempt_id: str) -> dict[str, tuple[int, int, int]]:
        """The attempt directory's files -> (inode, size, mtime), from one listing. On
        FUSE (listings may be old, lookups by name are not) a stat per slot and one of
        the outcome instead."""
        directory = self.fresh.file(self.paths.slot(attempt_id, 0)).parent
        if self.fresh.attributes_current:
            return list_files(directory) or {}
        listed: dict[str, tuple[int, int, int]] = {}
        paths = [self.paths.slot(attempt_id, i) for i in range(self.identity.node_count)]
        for path in [*paths, self.paths.outcome(attempt_id)]:
            try:
                with call("inspect", path):
                    st = os.stat(path, follow_symlinks=False)
            except OSError as exc:
                raise_if_io(exc, path, "inspect")
                continue
            listed[path.name] = (st.st_ino, st.st_size, st.st_mtime_ns)
        return listed

    def _scan_slots(self, attempt_id: str, cache: SlotCache,
                    listed: dict[str, tuple[int, int, int]]) -> dict[int, decide.SlotState]:
        """Every slot's state, from one listing of the attempt directory: a slot is read
        only when it is new or its (inode, size, mtime) differs from when it was read."""
        slots: dict[int, decide.SlotState] = {}
        for index in range(self.identity.node_count):
            stamp = listed.get(self.paths.slot(attempt_id, index).name)
            if stamp is None:
                cache.pop(index, None)
                slots[index] = None
                continue
            hit = cache.get(index)
            if hit is None or hit[0] != stamp:
                hit = cache[index] = (stamp, self._slot_state(attempt_id, index))
            slots[index] = hit[1]
        return slots

    def _check_attempt_still_mine(self, attempt_id: str) -> None:
        got = read_doc(self.fresh.file(self.paths.attempt_file), AttemptDoc, self.paths.run_id,
                       self.key)
        if isinstance(got, Valid) and got.doc.attempt_id == attempt_id:
            return
        mine = self._attempt_doc
        if isinstance(got, Invalid) and got.auth is not None and self.key is not None \
                and mine is not None and mine.attempt_id == attempt_id:
            # Not signed with the job's key: not a twin node 0 (it would hold the key),
            # a forger. Ignore it and put node 0's document back; followers ignore it too.
            self._reject(got)
            write_doc(self.paths.attempt_file, mine, self.paths.shared_dir, key=self.key)
            return
        other = got.doc.opened_by if isinstance(got, Valid) else "?"
        reason = (f"two live pods claim {self.name(0)} (incarnations "
                  f"{self.identity.incarnation}, {other})")
        if isinstance(got, Missing):
            reason = f"{self.paths.attempt_file} was removed while node 0 waited"
        if isinstance(got, Invalid):
            reason = (f"{got.describe()}: node 0's attempt document was replaced while "
                      "node 0 waited (a document node 0 did not write)")
        doc = AttemptDoc(
            run_id=self.paths.run_id, attempt_id=attempt_id,
            opened_by=self.identity.incarnation, node_count=self.identity.node_count,
            master_count=self.identity.master_count, conflict=reason,
        )
        write_doc(self.paths.attempt_file, doc, self.paths.shared_dir, key=self.key)
        raise ClusterInconsistent(reason, restart_hint(self.paths))

    def _check_no_foreign_outcome(self, attempt_id: str,
                                  seen: Optional[tuple[int, int, int]],
                                  stamp: Optional[tuple[int, int, int]]
                                  ) -> Optional[tuple[int, int, int]]:
        """Only node 0 writes the outcome, and it has not yet: anything there now is a
        foreign document. Called with the outcome's (inode, size, mtime) from the
        listing node 0 makes only when the attempt directory changed (None: not there),
        so it costs nothing while the directory is unchanged; the file is read only when
        it changed. A document followers would trust (valid, and with a
        key authentic) aborts the attempt at once, naming it: without a key nobody can
        tell it from node 0's, so the sooner everyone hears, the fewer can have taken
        it. One nobody trusts (unparsable, a symlink, unsigned under a key) is reported
        and left for node 0 to write the real outcome over when it completes."""
        if stamp is None:
            return None
        if stamp == seen:
            return seen
        path = self.fresh.file(self.paths.outcome(attempt_id))
        got = read_doc(path, OutcomeDoc, self.paths.run_id, self.key)
        if isinstance(got, Invalid):
            # Nobody trusts it (followers refuse it the same way): report it, and write
            # the real outcome over it at completion.
            self._reject(got)
            return stamp
        if isinstance(got, Valid):
            self._foreign_outcome(attempt_id, got)
        return None

    def _foreign_outcome(self, attempt_id: str, got: Union[Valid[OutcomeDoc], Invalid],
                         when: str = "before node 0 completed") -> NoReturn:
        what = got.describe() if isinstance(got, Invalid) else (
            f"{got.path} holds a {got.doc.result} verdict node 0 did not write")
        reason = (f"{what}: written by someone other than node 0 {when} attempt "
                  f"{attempt_id} (a foreign writer on the shared volume)")
        log.error("%s", reason)
        self._write_abort(attempt_id, reason, (0,), ())
        raise ClusterInconsistent(reason, "find what else writes the run's directory; give "
                                  "the job a rendezvous key (docs/rendezvous.md); restart "
                                  "the whole job")

    def _abort(
        self, attempt_id: str, verdict: decide.Abort, slots: dict[int, decide.SlotState]
    ) -> None:
        participants = tuple(sorted(
            s.incarnation for s in slots.values() if isinstance(s, (MemberDoc, FailureDoc))
        ))
        self._write_abort(attempt_id, verdict.reason, verdict.nodes, participants,
                          verdict.failed_by)
        raise ClusterInconsistent(verdict.reason, restart_hint(self.paths))

    def _write_abort(self, attempt_id: str, reason: str, nodes: Sequence[int],
                     participants: Sequence[str], failed_by: Optional[str] = None) -> None:
        """The abort verdict, then the nudge (contentless: an mtime, nothing to sign).
        `failed_by` names the pod whose own failure document caused the abort."""
        write_doc(self.paths.outcome(attempt_id), OutcomeDoc(
            run_id=self.paths.run_id, attempt_id=attempt_id, result="abort",
            reason=reason[:8000], nodes=tuple(nodes), participants=tuple(participants),
            failed_by=failed_by,
        ), self.paths.shared_dir, key=self.key)
        nudge(self.paths.root)  # followers glancing at the run directory: look now

    def _complete(self, attempt_id: str, members: Sequence[MemberDoc],
                  warnings: Sequence[str] = (),
                  stamps: Optional[dict[int, tuple[int, int, int]]] = None) -> OutcomeDoc:
        """Write the table built from `members`; `stamps` (global index -> the (inode,
        size, mtime_ns) each slot had in the listing it was read after) go into the
        records, signed with the rest of the outcome when the job has a key."""
        stamps = {} if stamps is None else stamps
        mine = members[0]
        if (mine.incarnation != self.identity.incarnation
                or mine.data.digest() != self.data.digest()):
            self._foreign_slot0(attempt_id, "holds data this pod did not publish")
        table = build_rank_table([to_server(m.data) for m in members], self.table_version)
        text = render_rank_table(table)
        outcome = OutcomeDoc(
            run_id=self.paths.run_id, attempt_id=attempt_id, result="table",
            members=tuple(TableRecord(global_index=m.data.global_index,
                                      incarnation=m.incarnation, digest=m.data.digest(),
                                      slot_stamp=stamps.get(m.data.global_index))
                          for m in members),
            ranktable_text=text,
            ranktable_sha256=hashlib.sha256(text.encode()).hexdigest(),
            warnings=tuple(w[:2000] for w in warnings[:64]),
        )
        self._publish_outcome(attempt_id, outcome)
        self._publish_shared_table(outcome)
        log.info("all %d nodes present; table of attempt %s published",
                 len(members), attempt_id)
        return self._accept(outcome)

    def _publish_outcome(self, attempt_id: str, outcome: OutcomeDoc) -> None:
        """Create the outcome exclusively (a complete file hard-linked to its name, like
        slots), so a document planted under the name first is found, never silently
        replaced by ours while followers may have read it; then read back what is there,
        and node 0's own slot, so a replacement in the meantime is caught while node 0
        still runs. A planted document that no follower trusts (unparsable, a symlink,
        unsigned under a key) is simply replaced."""
        path = self.paths.outcome(attempt_id)
        created = create_doc(path, outcome, self.paths.shared_dir, key=self.key)
        if created == "exists":
            got = read_doc(self.fresh.file(path), OutcomeDoc, self.paths.run_id, self.key)
            if isinstance(got, Valid) and got.doc == outcome:
                created = "created"  # ours (a retransmitted create)
            elif isinstance(got, Valid):
                self._foreign_outcome(attempt_id, got)
            else:
                if isinstance(got, Invalid):
                    self._reject(got)
                created = "unsupported"  # nobody trusted it: replace it
        if created == "unsupported":  # no hard links, or replacing an unauthenticated doc
            write_doc(path, outcome, self.paths.shared_dir, key=self.key)
        nudge(self.paths.root)  # followers glancing at the run directory: look now
        self.fresh.new_poll()
        back = read_doc(self.fresh.file(path), OutcomeDoc, self.paths.run_id, self.key)
        if not (isinstance(back, Valid) and back.doc == outcome):
            if isinstance(back, Missing):
                raise ClusterInconsistent(f"{path} disappeared right after node 0 wrote it "
                                          "(removed by another writer)",
                                          restart_hint(self.paths))
            self._foreign_outcome(attempt_id, back, "right after node 0 completed")
        slot0 = self._slot_state(attempt_id, 0)
        if not (isinstance(slot0, MemberDoc) and slot0.incarnation == self.identity.incarnation
                and slot0.data.digest() == self.data.digest()):
            self._foreign_slot0(attempt_id, "was replaced while node 0 completed the attempt")

    def _foreign_slot0(self, attempt_id: str, what: str) -> NoReturn:
        path = self.paths.slot(attempt_id, 0)
        reason = (f"{path} (node 0's own slot) {what}: a document node 0 did not write "
                  "(a foreign writer on the shared volume)")
        log.error("%s", reason)
        self._write_abort(attempt_id, reason, (0,), ())
        raise ClusterInconsistent(reason, "find what else writes the run's directory; give "
                                  "the job a rendezvous key (docs/rendezvous.md); restart "
                                  "the whole job")

    def _publish_shared_table(self, outcome: OutcomeDoc) -> None:
        path = self.fresh.file(self.paths.shared_table)
        data = outcome.ranktable_text.encode()
        current = read_bytes_nofollow(path)
        if current == data:
            return
        try:
            with call("write", path):
                atomic_write_bytes(path, data, mode=0o640)
        except OSError as exc:
            raise volume_error(exc, path, "write") from exc


def new_attempt_id() -> str:
    """Sortable by the opening second, unique by its random suffix."""
    return f"{int(time.time())}-{secrets.token_hex(4)}"
