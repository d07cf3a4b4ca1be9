"""The wait loops: global node 0 assembles, everyone else follows.

Cost per poll: a follower opens three known files (attempt, outcome, its own slot);
only node 0 reads every slot, and it skips re-parsing a slot whose inode, size and
mtime are unchanged. Nobody lists a directory.
"""

from __future__ import annotations

import hashlib
import logging
import os
import random
import secrets
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Callable, Optional

from ascend_node import __version__
from ascend_node.atomic import atomic_write_bytes
from ascend_node.errors import ClusterInconsistent, ConfigError, PeerTimeout, SharedVolumeError
from ascend_node.identity import NodeIdentity, node_name
from ascend_node.ranktable import DeviceEntry, ServerEntry, build_rank_table, render_rank_table
from ascend_node.rendezvous import decide
from ascend_node.rendezvous.models import (
    AttemptDoc,
    ConflictDoc,
    FailureDoc,
    MemberData,
    MemberDoc,
    OutcomeDoc,
    ProgressDoc,
    TableRecord,
)
from ascend_node.rendezvous.store import (
    Invalid,
    Missing,
    RunPaths,
    Valid,
    check_real_dirs,
    check_writable,
    read_bytes_nofollow,
    read_doc,
    read_slot,
    volume_error,
    write_doc,
)

ABORT_GRACE = 5.0
"""Seconds node 0 waits, after it finds the cluster inconsistent, for late pods to join
the attempt, so that every pod of this start-up hears the verdict (exit 5) at once
instead of waiting for a new attempt until its timeout."""

SETTLE_POLLS = 1.5
"""Once every slot is present, node 0 re-reads them after this many poll intervals and
completes only if nothing changed: a pod whose slot a twin overwrote (two pods with one
index) gets one poll to notice and leave a conflict document."""

log = logging.getLogger("ascend_node.rendezvous")


@dataclass
class Rendezvous:
    paths: RunPaths
    identity: NodeIdentity
    data: MemberData
    deadline: float
    timeout: float
    poll_interval: float = 0.2
    progress_interval: float = 10.0
    allow_uneven_devices: bool = False
    table_version: str = "auto"  # --table-version: auto | 1.0 | 1.2
    clock: Callable[[], float] = time.monotonic
    sleep: Callable[[float], None] = time.sleep
    _warned: set[str] = field(default_factory=set)

    # ------------------------------------------------------------------ shared helpers

    @property
    def index(self) -> int:
        return self.identity.global_index

    @property
    def me(self) -> decide.Me:
        return decide.Me(self.index, self.identity.incarnation, self.data.digest(),
                         self.identity.master_count, self.identity.job_version)

    def name(self, index: int) -> str:
        return node_name(index, self.identity.master_count)

    def _warn_once(self, text: str) -> None:
        if text not in self._warned:
            self._warned.add(text)
            log.warning("ignoring %s", text)

    def _nap(self) -> None:
        self.sleep(self.poll_interval * random.uniform(0.8, 1.2))

    def _member_doc(self, attempt_id: str) -> MemberDoc:
        return MemberDoc(
            run_id=self.paths.run_id,
            attempt_id=attempt_id,
            incarnation=self.identity.incarnation,
            node_count=self.identity.node_count,
            master_count=self.identity.master_count,
            agent_version=__version__,
            data=self.data,
            job_version=self.identity.job_version,
        )

    def _publish(self, attempt_id: str) -> None:
        write_doc(self.paths.slot(attempt_id, self.index), self._member_doc(attempt_id),
                  self.paths.shared_dir)
        log.info("published %s into attempt %s", self.name(self.index), attempt_id)

    def _read_attempt(self) -> Optional[AttemptDoc]:
        got = read_doc(self.paths.attempt_file, AttemptDoc, self.paths.run_id)
        if isinstance(got, Invalid):
            self._warn_once(got.describe())
            return None
        return got.doc if isinstance(got, Valid) else None

    def _read_outcome(self, attempt_id: str) -> Optional[OutcomeDoc]:
        got = read_doc(self.paths.outcome(attempt_id), OutcomeDoc, self.paths.run_id)
        if isinstance(got, Invalid):
            self._warn_once(got.describe())
            return None
        if isinstance(got, Valid) and got.doc.attempt_id == attempt_id:
            return got.doc
        return None

    def _slot_state(self, attempt_id: str, index: int) -> decide.SlotState:
        got = read_slot(self.paths.slot(attempt_id, index), self.paths.run_id, attempt_id)
        if isinstance(got, Invalid):
            return got.reason
        return got.doc if isinstance(got, Valid) else None

    def _timed_out(self) -> bool:
        return self.clock() >= self.deadline

    def run(self) -> OutcomeDoc:
        check_real_dirs(self.paths.shared_dir, self.paths.root)
        if self.index == 0:
            return self._assemble()
        return self._follow()

    # ------------------------------------------------------------------ follower

    def _follow(self) -> OutcomeDoc:
        published_in: Optional[str] = None
        outdated_checked: dict[str, list[int]] = {}
        checked_dirs: set[str] = set()
        writable_checked = False
        last_log = -1e9
        action: decide.FollowerAction = decide.WaitAttempt("not started")
        while True:
            attempt = self._read_attempt()
            if attempt is not None and attempt.attempt_id not in checked_dirs:
                check_real_dirs(self.paths.shared_dir,
                                self.paths.attempt_dir(attempt.attempt_id))
                checked_dirs.add(attempt.attempt_id)
            outcome = self._read_outcome(attempt.attempt_id) if attempt else None
            slot = self._slot_state(attempt.attempt_id, self.index) if attempt else None
            if isinstance(slot, str):
                self._warn_once(f"{self.paths.slot(attempt.attempt_id, self.index)}: {slot}"
                                if attempt else slot)
            action = decide.follower_step(attempt, outcome, slot, self.me, published_in)
            if attempt is None and not writable_checked:
                # Nobody can ever open an attempt on a read-only volume: say so now, not
                # at the timeout. (A completed run is only read: restarts still work.)
                check_writable(self.paths.shared_dir)
                writable_checked = True
            if isinstance(action, decide.Done) and attempt is not None:
                if attempt.attempt_id not in outdated_checked:
                    # Once per attempt (O(N), not per poll): has a peer been re-created
                    # with new data? Then this table is about to be replaced.
                    outdated_checked[attempt.attempt_id] = self._outdated_slots(
                        attempt.attempt_id, action.outcome)
                outdated = outdated_checked[attempt.attempt_id]
                if not outdated:
                    return self._accept(action.outcome)
                names = ", ".join(self.name(i) for i in outdated)
                action = decide.WaitAttempt(
                    f"attempt {attempt.attempt_id}'s table no longer matches {names} "
                    "(re-created with new data); waiting for node 0 to open a new attempt",
                    "stale-table",
                )
            if isinstance(action, decide.Fail):
                raise ClusterInconsistent(action.reason, _restart_hint(self.paths))
            if isinstance(action, decide.Conflict):
                self._declare_conflict(action)
            if isinstance(action, decide.Publish):
                self._publish(action.attempt_id)
                published_in = action.attempt_id
                continue
            if (
                isinstance(action, decide.WaitAttempt)
                and action.kind == "stale-table"
                and attempt is not None
                and published_in != attempt.attempt_id
                and attempt.attempt_id not in outdated_checked
            ):
                # Leave our new data where node 0 will see it when it next starts.
                self._publish(attempt.attempt_id)
                published_in = attempt.attempt_id
            now = self.clock()
            if now - last_log >= self.progress_interval:
                last_log = now
                log.info("%s", self._waiting_line(action, attempt))
            if self._timed_out():
                raise self._follower_timeout(action, attempt)
            self._nap()

    def _declare_conflict(self, action: decide.Conflict) -> None:
        doc = ConflictDoc(
            run_id=self.paths.run_id,
            attempt_id=action.attempt_id,
            global_index=self.index,
            incarnations=tuple(sorted({self.identity.incarnation, action.other})),
        )
        write_doc(self.paths.slot(action.attempt_id, self.index), doc, self.paths.shared_dir)
        raise ClusterInconsistent(
            f"two live pods claim {self.name(self.index)}: this pod "
            f"({self.identity.incarnation}) and {action.other}",
            "two pods got the same ROLE/VC_TASK_INDEX; check the job's tasks and the env plugin",
        )

    def _waiting_line(
        self, action: decide.FollowerAction, attempt: Optional[AttemptDoc]
    ) -> str:
        if isinstance(action, decide.WaitAttempt):
            return f"waiting: {action.reason}"
        if attempt is None:
            return "waiting for node 0"
        got = read_doc(self.paths.progress(attempt.attempt_id), ProgressDoc, self.paths.run_id)
        if isinstance(got, Valid):
            return progress_line(got.doc.present, got.doc.missing, self.identity.master_count,
                                 got.doc.node_count)
        return f"waiting for the table of attempt {attempt.attempt_id}"

    def _missing_now(self, attempt_id: str) -> list[int]:
        missing = []
        for index in range(self.identity.node_count):
            state = self._slot_state(attempt_id, index)
            if not isinstance(state, MemberDoc):
                missing.append(index)
        return missing

    def _follower_timeout(
        self, action: decide.FollowerAction, attempt: Optional[AttemptDoc]
    ) -> Exception:
        waited = f"{self.timeout:g} s"
        if attempt is None:
            return PeerTimeout(
                f"timed out after {waited}: {self.name(0)} never opened the rendezvous "
                f"(no {self.paths.attempt_file}); missing: {self.name(0)}",
                f"check that {self.name(0)} is running and mounts the same shared volume; "
                "exit 4 is retryable",
            )
        if isinstance(action, decide.WaitAttempt) and action.kind == "stale-table":
            return PeerTimeout(
                f"timed out after {waited}: {action.reason}, and no new attempt opened",
                "the job must be restarted (all pods) to build a new rank table",
            )
        if isinstance(action, decide.WaitAttempt) and action.kind == "stale-version":
            return PeerTimeout(
                f"timed out after {waited}: {action.reason}, and it never came; missing: "
                f"{self.name(0)}",
                f"check that {self.name(0)} of this start of the job is running and mounts "
                "the same shared volume; exit 4 is retryable",
            )
        if isinstance(action, decide.WaitAttempt) and action.kind == "stale-abort":
            return ClusterInconsistent(
                f"{action.reason}; no new attempt opened within {waited}",
                _restart_hint(self.paths),
            )
        missing = self._missing_now(attempt.attempt_id)
        return PeerTimeout(
            f"timed out after {waited} waiting for peers: {len(missing)} of "
            f"{self.identity.node_count} missing: {', '.join(self.name(i) for i in missing)}",
            "check that those pods are running and mount the same shared volume; "
            "exit 4 is retryable",
        )

    def _accept(self, outcome: OutcomeDoc) -> OutcomeDoc:
        problem = decide.verify_table_holds(outcome, self.data, self.identity.master_count)
        if problem is not None:
            raise ClusterInconsistent(problem, _restart_hint(self.paths))
        return outcome

    # ------------------------------------------------------------------ node 0

    def _outdated_slots(self, attempt_id: str, outcome: OutcomeDoc) -> list[int]:
        out = []
        for record in outcome.members:
            if record.global_index == 0:
                continue
            state = self._slot_state(attempt_id, record.global_index)
            if isinstance(state, MemberDoc) and state.data.digest() != record.digest:
                out.append(record.global_index)
        return out

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
                    _restart_hint(self.paths),
                )
            return choice.attempt_id, outcome
        attempt_id = f"{int(time.time())}-{secrets.token_hex(4)}"
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

    def _assemble(self) -> OutcomeDoc:
        attempt_id, outcome = self._open_or_reuse()
        if outcome is not None:
            if outcome.result == "abort":
                raise ClusterInconsistent(f"attempt {attempt_id} was aborted: {outcome.reason}",
                                          _restart_hint(self.paths))
            log.info("attempt %s is already complete; reusing its table", attempt_id)
            self._publish_shared_table(outcome)
            return self._accept(outcome)
        own = self._slot_state(attempt_id, 0)
        if not (isinstance(own, MemberDoc) and own.incarnation == self.identity.incarnation
                and own.data.digest() == self.data.digest()):
            self._publish(attempt_id)

        cache: dict[int, tuple[tuple[int, int, int], decide.SlotState]] = {}
        last_log = -1e9
        last_progress: Optional[tuple[tuple[int, ...], tuple[int, ...]]] = None
        abort_since: Optional[float] = None
        settled: Optional[tuple[MemberDoc, ...]] = None
        while True:
            self._check_attempt_still_mine(attempt_id)
            slots = {i: self._cached_slot(attempt_id, i, cache)
                     for i in range(self.identity.node_count)}
            verdict = decide.evaluate(slots, self.identity.node_count,
                                      self.identity.master_count, self.allow_uneven_devices,
                                      self.identity.job_version, self.table_version)
            if isinstance(verdict, decide.Complete):
                if settled == verdict.members:
                    return self._complete(attempt_id, verdict.members)
                # Everyone is present: read every slot afresh after a short settle, so a
                # pod whose slot a twin just overwrote can still say so. Afresh, because
                # some filesystems (sshfs) keep the inode on replace and stamp mtimes to
                # the second, which the slot cache cannot see through.
                settled = verdict.members
                cache.clear()
                self.sleep(self.poll_interval * SETTLE_POLLS)
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
                names = ", ".join(self.name(i) for i in verdict.missing)
                raise PeerTimeout(
                    f"timed out after {self.timeout:g} s waiting for peers: "
                    f"{len(verdict.missing)} of {self.identity.node_count} missing: {names}",
                    "check that those pods are running and mount the same shared volume; "
                    "exit 4 is retryable",
                )
            self._nap()

    def _cached_slot(
        self, attempt_id: str, index: int,
        cache: dict[int, tuple[tuple[int, int, int], decide.SlotState]],
    ) -> decide.SlotState:
        path = self.paths.slot(attempt_id, index)
        try:
            st = os.stat(path, follow_symlinks=False)
            stamp = (st.st_ino, st.st_size, st.st_mtime_ns)
        except OSError:
            cache.pop(index, None)
            return None
        hit = cache.get(index)
        if hit is not None and hit[0] == stamp:
            return hit[1]
        state = self._slot_state(attempt_id, index)
        cache[index] = (stamp, state)
        return state

    def _check_attempt_still_mine(self, attempt_id: str) -> None:
        got = read_doc(self.paths.attempt_file, AttemptDoc, self.paths.run_id)
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
        raise ClusterInconsistent(reason, _restart_hint(self.paths))

    def _abort(
        self, attempt_id: str, verdict: decide.Abort, slots: dict[int, decide.SlotState]
    ) -> None:
        participants = tuple(sorted(
            s.incarnation for s in slots.values() if isinstance(s, (MemberDoc, FailureDoc))
        ))
        write_doc(self.paths.outcome(attempt_id), OutcomeDoc(
            run_id=self.paths.run_id, attempt_id=attempt_id, result="abort",
            reason=verdict.reason, nodes=verdict.nodes, participants=participants,
        ), self.paths.shared_dir)
        raise ClusterInconsistent(verdict.reason, _restart_hint(self.paths))

    def _complete(self, attempt_id: str, members: Sequence[MemberDoc]) -> OutcomeDoc:
        table = build_rank_table([to_server(m.data) for m in members], self.table_version)
        text = render_rank_table(table)
        outcome = OutcomeDoc(
            run_id=self.paths.run_id, attempt_id=attempt_id, result="table",
            members=tuple(TableRecord(global_index=m.data.global_index,
                                      incarnation=m.incarnation, digest=m.data.digest())
                          for m in members),
            ranktable_text=text,
            ranktable_sha256=hashlib.sha256(text.encode()).hexdigest(),
        )
        write_doc(self.paths.outcome(attempt_id), outcome, self.paths.shared_dir)
        self._publish_shared_table(outcome)
        log.info("all %d nodes present; table of attempt %s published",
                 len(members), attempt_id)
        return self._accept(outcome)

    def _publish_shared_table(self, outcome: OutcomeDoc) -> None:
        path = self.paths.shared_table
        data = outcome.ranktable_text.encode()
        current = read_bytes_nofollow(path)
        if current == data:
            return
        try:
            atomic_write_bytes(path, data, mode=0o640)
        except OSError as exc:
            raise volume_error(exc, path, "write") from exc


def to_server(data: MemberData) -> ServerEntry:
    return ServerEntry(
        global_index=data.global_index,
        pod_ip=data.pod_ip,
        host_ip=data.host_ip,
        devices=tuple(DeviceEntry(d.device_id, d.device_ip, d.super_device_id)
                      for d in data.devices),
        super_pod_id=data.super_pod_id,
    )


def progress_line(
    present: Sequence[int], missing: Sequence[int], master_count: int, node_count: int
) -> str:
    shown = ", ".join(node_name(i, master_count) for i in list(missing)[:8])
    more = f" and {len(missing) - 8} more" if len(missing) > 8 else ""
    return f"{len(present)}/{node_count} present, waiting for {shown}{more}"


def _restart_hint(paths: RunPaths) -> str:
    return (f"fix the cause, then restart the whole job (or run `ascend-node clean` for run "
            f"{paths.run_id!r}); exit 5 is not retryable")


def publish_failure(
    paths: RunPaths, identity: NodeIdentity, cause: str, wait: float,
    clock: Callable[[], float] = time.monotonic, sleep: Callable[[float], None] = time.sleep,
) -> Optional[str]:
    """Tell the attempt that this node failed locally, so peers exit 5 instead of waiting.

    Waits up to `wait` seconds for node 0 to open an attempt. Returns the attempt id
    used, or None when nothing could be published (never raises: the local failure is
    what the user must see).
    """
    end = clock() + wait
    try:
        while True:
            got = read_doc(paths.attempt_file, AttemptDoc, paths.run_id)
            if isinstance(got, Valid) and got.doc.conflict is None:
                aid = got.doc.attempt_id
                out = read_doc(paths.outcome(aid), OutcomeDoc, paths.run_id)
                if isinstance(out, Valid):
                    return None
                write_doc(paths.slot(aid, identity.global_index), FailureDoc(
                    run_id=paths.run_id, attempt_id=aid, incarnation=identity.incarnation,
                    global_index=identity.global_index, cause=cause[:2000],
                ), paths.shared_dir)
                return aid
            if clock() >= end:
                return None
            sleep(0.2)
    except (SharedVolumeError, OSError):
        return None


def node0_failure(
    paths: RunPaths, identity: NodeIdentity, cause: str,
    clock: Callable[[], float] = time.monotonic, sleep: Callable[[float], None] = time.sleep,
) -> Optional[str]:
    """Node 0 failed before assembling: open an attempt and abort it with the cause.

    It waits the abort grace first, so peers that start with it join the attempt and
    exit 5 at once; later pods see an abort they took no part in and wait for a new
    attempt (a job restart) instead.
    """
    try:
        attempt_id = f"{int(time.time())}-{secrets.token_hex(4)}"
        write_doc(paths.attempt_file, AttemptDoc(
            run_id=paths.run_id, attempt_id=attempt_id, opened_by=identity.incarnation,
            node_count=identity.node_count, master_count=identity.master_count,
            reason="node 0 failed locally", job_version=identity.job_version,
        ), paths.shared_dir)
        participants = {identity.incarnation}
        end = clock() + ABORT_GRACE
        while True:
            for index in range(1, identity.node_count):
                got = read_slot(paths.slot(attempt_id, index), paths.run_id, attempt_id)
                if isinstance(got, Valid) and isinstance(got.doc, (MemberDoc, FailureDoc)):
                    participants.add(got.doc.incarnation)
            if len(participants) >= identity.node_count or clock() >= end:
                break
            sleep(0.2)
        write_doc(paths.outcome(attempt_id), OutcomeDoc(
            run_id=paths.run_id, attempt_id=attempt_id, result="abort",
            reason=f"{node_name(0, identity.master_count)} failed: {cause[:2000]}",
            nodes=(0,), participants=tuple(sorted(participants)),
        ), paths.shared_dir)
        return attempt_id
    except (SharedVolumeError, OSError):
        return None
