"""What node 0 and the followers share: who this pod is, and how it reads and publishes.

Every read of a document another pod writes goes through `Freshness` first, so a
network filesystem's cached lookups (NFS keeps negative ones for up to a minute at
default mounts) never hide a file that exists: see `rendezvous/freshness.py`.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Optional

from ascend_node import __version__
from ascend_node.discover.identity import NodeIdentity, node_name
from ascend_node.errors import ClusterInconsistent, PeerTimeout
from ascend_node.ranktable import DeviceEntry, ServerEntry
from ascend_node.rendezvous import decide
from ascend_node.rendezvous.freshness import Freshness, list_files
from ascend_node.rendezvous.models import (
    AttemptDoc,
    FailureDoc,
    MemberData,
    MemberDoc,
    OutcomeDoc,
)
from ascend_node.rendezvous.seal import KEY_ENV, RendezvousKey
from ascend_node.rendezvous.store import (
    Invalid,
    RunPaths,
    Valid,
    create_doc,
    read_doc,
    read_slot,
    write_doc,
)

if TYPE_CHECKING:
    from ascend_node.discover.health import NodeHealth
    from ascend_node.rendezvous.decide import HealthJudge

log = logging.getLogger("ascend_node.rendezvous")


@dataclass
class Participant:
    """One pod's view of the run; `Assembler` and `Follower` add their wait loops."""

    paths: RunPaths
    identity: NodeIdentity
    data: MemberData
    deadline: float
    timeout: float
    poll_interval: float = 0.2
    progress_interval: float = 10.0
    allow_uneven_devices: bool = False
    table_version: str = "auto"  # --table-version: auto | 1.0 | 1.2
    health: Optional[NodeHealth] = None  # published beside the data (pre-flight)
    judge: Optional[HealthJudge] = None  # node 0's judge of the health facts (the chain's)
    clock: Callable[[], float] = time.monotonic
    sleep: Callable[[float], None] = time.sleep
    key: Optional[RendezvousKey] = None  # the job's rendezvous key (`seal`), if any
    _warned: set[str] = field(default_factory=set)
    fresh: Freshness = field(init=False)
    unauthenticated: dict[Path, Invalid] = field(init=False, default_factory=dict)
    """Documents that failed authentication, by path (the last failure of each): a
    timeout names them, so a forger or a key mismatch is never a silent wait."""

    def __post_init__(self) -> None:
        self.fresh = Freshness(self.paths.shared_dir, self.clock)

    @property
    def index(self) -> int:
        return self.identity.global_index

    @property
    def me(self) -> decide.Me:
        return decide.Me(self.index, self.identity.incarnation, self.data.digest(),
                         self.identity.master_count, self.identity.node_count,
                         self.identity.job_version, self.identity.job_instance)

    def name(self, index: int) -> str:
        return node_name(index, self.identity.master_count)

    @property
    def started(self) -> float:
        """This agent's start on `clock` (the timeout counts from it)."""
        return self.deadline - self.timeout

    def _warn_once(self, text: str) -> None:
        if text not in self._warned:
            self._warned.add(text)
            log.warning("ignoring %s", text)

    def _reject(self, got: Invalid) -> None:
        """Report a document that is not trusted (once), and remember an authentication
        failure. A pod without a key that meets a signed document stops at once (5): in
        a job without a key nothing is signed, so the document comes from a pod given a
        key this one lacks (or from a foreign writer), and waiting cannot help. A pod
        with a key only ignores what fails: a forger adding documents must not stop the
        job (`unauthenticated_note` names them if the job times out)."""
        self._warn_once(got.describe())
        if got.auth is None:
            return
        self.unauthenticated[got.path] = got
        if got.auth.mismatch:
            self._on_key_mismatch(got)
        if got.auth.kind == "no-key":
            raise KeyMismatch(
                f"{got.describe()}: pods of this job disagree on the rendezvous key "
                f"({KEY_ENV}), or a foreign writer signs documents on the shared volume",
                "give every pod of the job the same key (one Secret), or none; exit 5 is "
                "not retryable",
            )

    def _on_key_mismatch(self, got: Invalid) -> None:
        """Before exiting 5 for a signed document: leave a trace the keyed pods can name."""

    def unauthenticated_note(self) -> str:
        """`; ignored as unauthenticated: <path>: <reason>, ...` for timeout messages."""
        if not self.unauthenticated:
            return ""
        shown = [got.describe() for got in list(self.unauthenticated.values())[-4:]]
        more = len(self.unauthenticated) - len(shown)
        return ("; ignored as unauthenticated: " + "; ".join(shown)
                + (f" and {more} more" if more > 0 else ""))

    def _timeout_error(self, error: Exception) -> Exception:
        """A timeout while documents failed authentication is not retryable: pods with
        different keys (or a writer forging documents) will not agree on a second try.
        Exit 5 naming them, instead of 4."""
        if not self.unauthenticated or not isinstance(error, PeerTimeout):
            return error
        return ClusterInconsistent(
            f"{error.cause}{self.unauthenticated_note()}",
            "give every pod of the job the same rendezvous key (one Secret); if they "
            "have it, something else writes the run's directory on the shared volume "
            "(see docs/rendezvous.md, threat model); exit 5 is not retryable",
        )

    def _nap(self, interval: Optional[float] = None) -> None:
        """Sleep `interval` (default: the poll interval) +-20 %: pods started together
        drift apart instead of asking the server at the same instant."""
        self.sleep((self.poll_interval if interval is None else interval)
                   * random.uniform(0.8, 1.2))
        self.fresh.new_poll()

    def _timed_out(self) -> bool:
        return self.clock() >= self.deadline

    # ------------------------------------------------------------------ publishing

    def _member_doc(self, attempt_id: str, contested: bool = False) -> MemberDoc:
        return MemberDoc(
            run_id=self.paths.run_id,
            attempt_id=attempt_id,
            incarnation=self.identity.incarnation,
            node_count=self.identity.node_count,
            master_count=self.identity.master_count,
            agent_version=__version__,
            data=self.data,
            job_version=self.identity.job_version,
            contested=contested,
            health=self.health,
        )

    def _publish(self, attempt_id: str, found: decide.SlotState,
                 dirs_checked: bool = False) -> None:
        """Publish this pod's member document into its slot, where `found` is what the
        slot held when this pod looked. Into an empty slot by exclusive create, so that
        of two pods racing for one index exactly one gets an uncontested slot; over
        another pod's document (a twin, or a re-created pod's predecessor) marked
        `contested`, which makes node 0 wait a poll for the other pod to object.
        `dirs_checked`: this look saw the attempt directory exist as a real one."""
        path = self.paths.slot(attempt_id, self.index)
        if found is None:
            created = create_doc(path, self._member_doc(attempt_id), self.paths.shared_dir,
                                 key=self.key, parent_checked=dirs_checked, durable=False)
            if created == "created":
                log.info("published %s into attempt %s", self.name(self.index), attempt_id)
                return
            if created == "exists":
                found = self._slot_state(attempt_id, self.index)
        contested = found is not None and not self._is_mine(found)
        write_doc(path, self._member_doc(attempt_id, contested), self.paths.shared_dir,
                  key=self.key)
        log.info("published %s into attempt %s%s", self.name(self.index), attempt_id,
                 " (the slot held another pod's document)" if contested else "")

    def _is_mine(self, state: decide.SlotState) -> bool:
        return (isinstance(state, (MemberDoc, FailureDoc))
                and state.incarnation == self.identity.incarnation)

    # ------------------------------------------------------------------ reading

    def _read_attempt(self) -> Optional[AttemptDoc]:
        got = read_doc(self.fresh.file(self.paths.attempt_file), AttemptDoc, self.paths.run_id,
                       self.key)
        if isinstance(got, Invalid):
            self._reject(got)
            return None
        return got.doc if isinstance(got, Valid) else None

    def _read_outcome_valid(self, attempt_id: str) -> Optional[Valid[OutcomeDoc]]:
        """The attempt's verdict with the stamp it was read with (mtime by the volume's clock)."""
        got = read_doc(self.fresh.file(self.paths.outcome(attempt_id)), OutcomeDoc,
                       self.paths.run_id, self.key)
        if isinstance(got, Invalid):
            self._reject(got)
            return None
        if isinstance(got, Valid) and got.doc.attempt_id == attempt_id:
            return got
        return None

    def _read_outcome(self, attempt_id: str) -> Optional[OutcomeDoc]:
        got = self._read_outcome_valid(attempt_id)
        return got.doc if got is not None else None

    def _slot_state(self, attempt_id: str, index: int) -> decide.SlotState:
        got = read_slot(self.fresh.file(self.paths.slot(attempt_id, index)),
                        self.paths.run_id, attempt_id, self.key)
        if isinstance(got, Invalid):
            if got.auth is not None:
                self._reject(got)
            return got.reason
        return got.doc if isinstance(got, Valid) else None

    def _read_slots(self, attempt_id: str, indices: Sequence[int]
                    ) -> dict[int, decide.SlotState]:
        return {i: self._slot_state(attempt_id, i) for i in indices}

    def _outdated_slots(self, attempt_id: str, outcome: OutcomeDoc,
                        states: Optional[dict[int, decide.SlotState]] = None,
                        among: Optional[Sequence[int]] = None) -> list[int]:
        """Peers whose slot now holds other data than the table: re-created pods asking
        for a new table. `among`: the only peers to check (a follower's: the slots
        changed since the verdict and its sample); None: every one, O(N) reads, so
        callers do it once per attempt, not per poll. `states`: slots already read (the
        rest are read here and added to it)."""
        states = {} if states is None else states
        wanted = None if among is None else set(among)
        out = []
        for record in outcome.members:
            if record.global_index in (0, self.index):
                continue
            if wanted is not None and record.global_index not in wanted:
                continue
            if record.global_index not in states:
                states[record.global_index] = self._slot_state(attempt_id, record.global_index)
            state = states[record.global_index]
            if isinstance(state, MemberDoc) and state.data.digest() != record.digest:
                out.append(record.global_index)
        return out

    def _listed_slots(self, attempt_id: str) -> Optional[dict[int, tuple[int, int, int]]]:
        """Each node's slot file in the attempt directory -> its (inode, size, mtime_ns),
        from one listing (READDIRPLUS on NFS: many entries per RPC, where reading a slot
        costs 3-4). None where listings cannot be trusted (FUSE: `attributes_current`)
        or the directory cannot be listed: the caller then reads slot by slot."""
        if not self.fresh.attributes_current:
            return None
        files = list_files(self.fresh.file(self.paths.slot(attempt_id, 0)).parent)
        if files is None:
            return None
        names = {self.paths.slot(attempt_id, index).name: index
                 for index in range(self.identity.node_count)}
        return {names[name]: stamp for name, stamp in files.items() if name in names}

    def _missing_now(self, attempt_id: str) -> list[int]:
        """Nodes without a valid member document in the attempt, afresh. From one listing
        when it can be trusted and shows slots absent: those are the missing nodes, and no
        slot is opened (pods of a job time out together: N reads each would be a burst of
        N^2). Otherwise — every slot there (then node 0's verdict, or an unusable slot,
        is what is missing), or FUSE — every slot is read (O(N))."""
        self.fresh.new_poll()
        listed = self._listed_slots(attempt_id)
        if listed is not None:
            absent = [index for index in range(self.identity.node_count)
                      if index not in listed]
            if absent:
                return absent
        return [index for index in range(self.identity.node_count)
                if not isinstance(self._slot_state(attempt_id, index), MemberDoc)]

    def _accept(self, outcome: OutcomeDoc,
                checked: Optional[dict[int, decide.SlotState]] = None) -> OutcomeDoc:
        """Use `outcome` only if it holds this pod's entry and, when `checked` (slots
        read: index -> state) is given, is consistent in itself and with those slots:
        else it is not the table node 0 built (exit 5 naming the document)."""
        problem = decide.verify_table_holds(outcome, self.data, self.identity.master_count)
        if problem is not None:
            raise ClusterInconsistent(problem, restart_hint(self.paths))
        if checked is None:
            return outcome
        forged = (decide.outcome_consistency(outcome, self.identity.node_count,
                                             self.identity.master_count)
                  or decide.cross_check(outcome, checked, self.identity.master_count))
        if forged is not None:
            path = self.paths.outcome(outcome.attempt_id)
            slot = ("" if forged.index is None else
                    f" ({self.paths.slot(outcome.attempt_id, forged.index)})")
            raise ClusterInconsistent(
                f"{path} is not the table node 0 built: {forged.reason}{slot}; a document "
                "node 0 did not write (another writer on the shared volume?)",
                "find what else writes the run's directory; give the job a rendezvous key "
                f"({KEY_ENV}, docs/rendezvous.md); restart the whole job; exit 5 is not "
                "retryable",
            )
        return outcome


class KeyMismatch(ClusterInconsistent):
    """A pod without a key met a signed document (exit 5)."""


def to_server(data: MemberData) -> ServerEntry:
    return ServerEntry(
        global_index=data.global_index,
        pod_ip=data.pod_ip,
        host_ip=data.host_ip,
        devices=tuple(DeviceEntry(d.device_id, d.device_ip, d.super_device_id)
                      for d in data.devices),
        super_pod_id=data.super_pod_id,
    )


def names_of(indices: Sequence[int], master_count: int, limit: Optional[int] = None) -> str:
    """`worker 2 (node 3), worker 5 (node 6)` — every node unless `limit` (progress lines
    say `and 4 more`); never an empty string, so no message can name nothing."""
    if not indices:
        return "none"
    cut = len(indices) if limit is None else limit
    shown = ", ".join(node_name(i, master_count) for i in list(indices)[:cut])
    more = f" and {len(indices) - cut} more" if len(indices) > cut else ""
    return shown + more


def progress_line(
    present: Sequence[int], missing: Sequence[int], master_count: int, node_count: int
) -> str:
    return (f"{len(present)}/{node_count} present, waiting for "
            f"{names_of(missing, master_count, limit=8)}")


def restart_hint(paths: RunPaths) -> str:
    return (f"fix the cause, then restart the whole job (or run `ascend-node clean` for run "
            f"{paths.run_id!r}); exit 5 is not retryable")
