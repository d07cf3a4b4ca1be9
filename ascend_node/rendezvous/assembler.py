"""Global node 0: open or reuse the attempt, judge the slots, write the verdict.

Cost per poll: one directory open (a GETATTR on NFS) for the run directory and one for
the attempt directory. Only when the run directory changed does it read attempt.json (to
notice a twin node 0); only when the attempt directory changed does it list it, and then
it reads only the slots that are new or whose inode, size or mtime changed: a slot read
and validated once is not read again in that attempt unless the listing says it changed
(`cadence.node0_lists`, tests/test_poll_cost.py). Completion reads every slot once more.
"""

from __future__ import annotations

import hashlib
import logging
import os
import secrets
import time
from collections.abc import Sequence
from typing import Optional

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
    read_bytes_nofollow,
    read_doc,
    volume_error,
    write_doc,
)

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
    def run(self) -> OutcomeDoc:
        attempt_id, outcome = self._open_or_reuse()
        if outcome is not None:
            if outcome.result == "abort":
                raise ClusterInconsistent(f"attempt {attempt_id} was aborted: {outcome.reason}",
                                          restart_hint(self.paths))
            log.info("attempt %s is already complete; reusing its table", attempt_id)
            self._publish_shared_table(outcome)
            return self._accept(outcome)
        own = self._slot_state(attempt_id, 0)
        if not (isinstance(own, MemberDoc) and own.incarnation == self.identity.incarnation
                and own.data.digest() == self.data.digest()):
            self._publish(attempt_id, own)
        return self._wait_for_members(attempt_id)

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
        attempt_dir = self.paths.attempt_dir(attempt_id)
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
                slots = self._scan_slots(attempt_id, cache)
            changed_last_poll = dir_changed
            verdict = decide.evaluate(slots, self.identity.node_count,
                                      self.identity.master_count, self.allow_uneven_devices,
                                      self.identity.job_version, self.table_version,
                                      self.preflight)
            if isinstance(verdict, decide.Complete):
                if settled == verdict.members:
                    return self._complete(attempt_id, verdict.members, verdict.warnings)
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
                write_doc(self.paths.progress(attempt_id), ProgressDoc(
                    run_id=self.paths.run_id, attempt_id=attempt_id,
                    node_count=self.identity.node_count,
                    present=verdict.present, missing=verdict.missing,
                ), self.paths.shared_dir)
            now = self.clock()
            if now - last_log >= self.progress_interval:
                last_log = now
                log.info("%s", progress_line(verdict.present, verdict.missing,
                                             self.identity.master_count,
                                             self.identity.node_count))
            if self._timed_out():
                raise self._timeout(verdict)
            self._nap()

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
            self.identity.job_version,
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
        )
        write_doc(self.paths.attempt_file, doc, self.paths.shared_dir)
        log.info("opened attempt %s (%s)", attempt_id, choice.reason)
        return attempt_id, None

    def _scan_slots(self, attempt_id: str, cache: SlotCache) -> dict[int, decide.SlotState]:
        """Every slot's state, from one listing of the attempt directory: a slot is read
        only when it is new or its (inode, size, mtime) differs from when it was read."""
        directory = self.fresh.file(self.paths.slot(attempt_id, 0)).parent
        if self.fresh.attributes_current:
            listed = list_files(directory) or {}
        else:  # FUSE: listings may be old, lookups by name are not (a stat per slot)
            listed = {}
            for index in range(self.identity.node_count):
                path = self.paths.slot(attempt_id, index)
                try:
                    st = os.stat(path, follow_symlinks=False)
                except OSError:
                    continue
                listed[path.name] = (st.st_ino, st.st_size, st.st_mtime_ns)
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
        got = read_doc(self.fresh.file(self.paths.attempt_file), AttemptDoc, self.paths.run_id)
        if isinstance(got, Valid) and got.doc.attempt_id == attempt_id:
            return
        other = got.doc.opened_by if isinstance(got, Valid) else "?"
        reason = (f"two live pods claim {self.name(0)} (incarnations "
                  f"{self.identity.incarnation}, {other})")
        if isinstance(got, (Missing, Invalid)):
            reason = f"{self.paths.attempt_file} was removed or damaged while node 0 waited"
        doc = AttemptDoc(
            run_id=self.paths.run_id, attempt_id=attempt_id,
            opened_by=self.identity.incarnation, node_count=self.identity.node_count,
            master_count=self.identity.master_count, conflict=reason,
        )
        write_doc(self.paths.attempt_file, doc, self.paths.shared_dir)
        raise ClusterInconsistent(reason, restart_hint(self.paths))

    def _abort(
        self, attempt_id: str, verdict: decide.Abort, slots: dict[int, decide.SlotState]
    ) -> None:
        participants = tuple(sorted(
            s.incarnation for s in slots.values() if isinstance(s, (MemberDoc, FailureDoc))
        ))
        write_doc(self.paths.outcome(attempt_id), OutcomeDoc(
            run_id=self.paths.run_id, attempt_id=attempt_id, result="abort",
            reason=verdict.reason, nodes=verdict.nodes, participants=participants,
            failed_by=verdict.failed_by,
        ), self.paths.shared_dir)
        nudge(self.paths.root)  # followers glancing at the run directory: look now
        raise ClusterInconsistent(verdict.reason, restart_hint(self.paths))

    def _complete(self, attempt_id: str, members: Sequence[MemberDoc],
                  warnings: Sequence[str] = ()) -> OutcomeDoc:
        table = build_rank_table([to_server(m.data) for m in members], self.table_version)
        text = render_rank_table(table)
        outcome = OutcomeDoc(
            run_id=self.paths.run_id, attempt_id=attempt_id, result="table",
            members=tuple(TableRecord(global_index=m.data.global_index,
                                      incarnation=m.incarnation, digest=m.data.digest())
                          for m in members),
            ranktable_text=text,
            ranktable_sha256=hashlib.sha256(text.encode()).hexdigest(),
            warnings=tuple(w[:2000] for w in warnings[:64]),
        )
        write_doc(self.paths.outcome(attempt_id), outcome, self.paths.shared_dir)
        nudge(self.paths.root)  # followers glancing at the run directory: look now
        self._publish_shared_table(outcome)
        log.info("all %d nodes present; table of attempt %s published",
                 len(members), attempt_id)
        return self._accept(outcome)

    def _publish_shared_table(self, outcome: OutcomeDoc) -> None:
        path = self.fresh.file(self.paths.shared_table)
        data = outcome.ranktable_text.encode()
        current = read_bytes_nofollow(path)
        if current == data:
            return
        try:
            atomic_write_bytes(path, data, mode=0o640)
        except OSError as exc:
            raise volume_error(exc, path, "write") from exc


def new_attempt_id() -> str:
    """Sortable by the opening second, unique by its random suffix."""
    return f"{int(time.time())}-{secrets.token_hex(4)}"
