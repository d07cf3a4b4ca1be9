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
from typing import TYPE_CHECKING, Callable, Optional

from ascend_node import __version__
from ascend_node.errors import ClusterInconsistent
from ascend_node.identity import NodeIdentity, node_name
from ascend_node.ranktable import DeviceEntry, ServerEntry
from ascend_node.rendezvous import decide
from ascend_node.rendezvous.freshness import Freshness
from ascend_node.rendezvous.models import (
    AttemptDoc,
    FailureDoc,
    MemberData,
    MemberDoc,
    OutcomeDoc,
)
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
    from ascend_node.preflight.models import NodeHealth

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
    preflight: str = "off"  # what node 0 does with the health facts: strict|warn|off
    clock: Callable[[], float] = time.monotonic
    sleep: Callable[[float], None] = time.sleep
    _warned: set[str] = field(default_factory=set)
    fresh: Freshness = field(init=False)

    def __post_init__(self) -> None:
        self.fresh = Freshness(self.paths.shared_dir, self.clock)

    @property
    def index(self) -> int:
        return self.identity.global_index

    @property
    def me(self) -> decide.Me:
        return decide.Me(self.index, self.identity.incarnation, self.data.digest(),
                         self.identity.master_count, self.identity.job_version)

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

    def _publish(self, attempt_id: str, found: decide.SlotState) -> None:
        """Publish this pod's member document into its slot, where `found` is what the
        slot held when this pod looked. Into an empty slot by exclusive create, so that
        of two pods racing for one index exactly one gets an uncontested slot; over
        another pod's document (a twin, or a re-created pod's predecessor) marked
        `contested`, which makes node 0 wait a poll for the other pod to object."""
        path = self.paths.slot(attempt_id, self.index)
        if found is None:
            created = create_doc(path, self._member_doc(attempt_id), self.paths.shared_dir)
            if created == "created":
                log.info("published %s into attempt %s", self.name(self.index), attempt_id)
                return
            if created == "exists":
                found = self._slot_state(attempt_id, self.index)
        contested = found is not None and not self._is_mine(found)
        write_doc(path, self._member_doc(attempt_id, contested), self.paths.shared_dir)
        log.info("published %s into attempt %s%s", self.name(self.index), attempt_id,
                 " (the slot held another pod's document)" if contested else "")

    def _is_mine(self, state: decide.SlotState) -> bool:
        return (isinstance(state, (MemberDoc, FailureDoc))
                and state.incarnation == self.identity.incarnation)

    # ------------------------------------------------------------------ reading

    def _read_attempt(self) -> Optional[AttemptDoc]:
        got = read_doc(self.fresh.file(self.paths.attempt_file), AttemptDoc, self.paths.run_id)
        if isinstance(got, Invalid):
            self._warn_once(got.describe())
            return None
        return got.doc if isinstance(got, Valid) else None

    def _read_outcome_valid(self, attempt_id: str) -> Optional[Valid[OutcomeDoc]]:
        """The attempt's verdict with the stamp it was read with (mtime by the volume's clock)."""
        got = read_doc(self.fresh.file(self.paths.outcome(attempt_id)), OutcomeDoc,
                       self.paths.run_id)
        if isinstance(got, Invalid):
            self._warn_once(got.describe())
            return None
        if isinstance(got, Valid) and got.doc.attempt_id == attempt_id:
            return got
        return None

    def _read_outcome(self, attempt_id: str) -> Optional[OutcomeDoc]:
        got = self._read_outcome_valid(attempt_id)
        return got.doc if got is not None else None

    def _slot_state(self, attempt_id: str, index: int) -> decide.SlotState:
        got = read_slot(self.fresh.file(self.paths.slot(attempt_id, index)),
                        self.paths.run_id, attempt_id)
        if isinstance(got, Invalid):
            return got.reason
        return got.doc if isinstance(got, Valid) else None

    def _outdated_slots(self, attempt_id: str, outcome: OutcomeDoc) -> list[int]:
        """Peers whose slot now holds other data than the table: re-created pods asking
        for a new table. O(N) reads, so callers do it once per attempt, not per poll."""
        out = []
        for record in outcome.members:
            if record.global_index == 0:
                continue
            state = self._slot_state(attempt_id, record.global_index)
            if isinstance(state, MemberDoc) and state.data.digest() != record.digest:
                out.append(record.global_index)
        return out

    def _missing_now(self, attempt_id: str) -> list[int]:
        """Nodes without a valid member document in the attempt, read afresh (O(N))."""
        self.fresh.new_poll()
        return [index for index in range(self.identity.node_count)
                if not isinstance(self._slot_state(attempt_id, index), MemberDoc)]

    def _accept(self, outcome: OutcomeDoc) -> OutcomeDoc:
        problem = decide.verify_table_holds(outcome, self.data, self.identity.master_count)
        if problem is not None:
            raise ClusterInconsistent(problem, restart_hint(self.paths))
        return outcome


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
