"""A node that failed locally tells its peers, so they exit 5 at once instead of at the timeout.

Both loops here wait on files another pod writes, so each poll revalidates the
directories first (`rendezvous/freshness.py`), like the main wait loops.
"""

from __future__ import annotations

import time
from typing import Callable, Optional

from ascend_node.discover.identity import NodeIdentity, node_name
from ascend_node.errors import SharedVolumeError
from ascend_node.rendezvous.assembler import ABORT_GRACE, new_attempt_id
from ascend_node.rendezvous.freshness import Freshness
from ascend_node.rendezvous.models import (
    AttemptDoc,
    FailureDoc,
    MemberDoc,
    OutcomeDoc,
)
from ascend_node.rendezvous.seal import RendezvousKey
from ascend_node.rendezvous.store import RunPaths, Valid, read_doc, read_slot, write_doc


def publish_failure(
    paths: RunPaths, identity: NodeIdentity, cause: str, wait: float,
    clock: Callable[[], float] = time.monotonic, sleep: Callable[[float], None] = time.sleep,
    key: Optional[RendezvousKey] = None,
) -> Optional[str]:
    """Tell the attempt that this node failed locally, so peers exit 5 instead of waiting.

    Waits up to `wait` seconds for node 0 to open an attempt. Returns the attempt id
    used, or None when nothing could be published (never raises: the local failure is
    what the user must see).
    """
    end = clock() + wait
    fresh = Freshness(paths.shared_dir)
    try:
        while True:
            fresh.new_poll()
            got = read_doc(fresh.file(paths.attempt_file), AttemptDoc, paths.run_id, key)
            if isinstance(got, Valid) and got.doc.conflict is None:
                aid = got.doc.attempt_id
                out = read_doc(fresh.file(paths.outcome(aid)), OutcomeDoc, paths.run_id, key)
                if isinstance(out, Valid):
                    return None
                write_doc(paths.slot(aid, identity.global_index), FailureDoc(
                    run_id=paths.run_id, attempt_id=aid, incarnation=identity.incarnation,
                    global_index=identity.global_index, cause=cause[:2000],
                ), paths.shared_dir, key=key)
                return aid
            if clock() >= end:
                return None
            sleep(0.2)
    except (SharedVolumeError, OSError):
        return None


def node0_failure(
    paths: RunPaths, identity: NodeIdentity, cause: str,
    clock: Callable[[], float] = time.monotonic, sleep: Callable[[float], None] = time.sleep,
    key: Optional[RendezvousKey] = None,
) -> Optional[str]:
    """Node 0 failed before assembling: open an attempt and abort it with the cause.

    It waits the abort grace first, so peers that start with it join the attempt and
    exit 5 at once; later pods see an abort they took no part in and wait for a new
    attempt (a job restart) instead — unless they can tell it happened while they were
    already running (`Follower._fail_if_aborted_after_start`).
    """
    fresh = Freshness(paths.shared_dir)
    try:
        attempt_id = new_attempt_id()
        write_doc(paths.attempt_file, AttemptDoc(
            run_id=paths.run_id, attempt_id=attempt_id, opened_by=identity.incarnation,
            node_count=identity.node_count, master_count=identity.master_count,
            reason="node 0 failed locally", job_version=identity.job_version,
            job_instance=identity.job_instance,
        ), paths.shared_dir, key=key)
        participants = {identity.incarnation}
        end = clock() + ABORT_GRACE
        while True:
            fresh.new_poll()
            for index in range(1, identity.node_count):
                got = read_slot(fresh.file(paths.slot(attempt_id, index)), paths.run_id,
                                attempt_id, key)
                if isinstance(got, Valid) and isinstance(got.doc, (MemberDoc, FailureDoc)):
                    participants.add(got.doc.incarnation)
            if len(participants) >= identity.node_count or clock() >= end:
                break
            sleep(0.2)
        write_doc(paths.outcome(attempt_id), OutcomeDoc(
            run_id=paths.run_id, attempt_id=attempt_id, result="abort",
            reason=f"{node_name(0, identity.master_count)} failed: {cause[:2000]}",
            nodes=(0,), participants=tuple(sorted(participants)),
            failed_by=identity.incarnation,
        ), paths.shared_dir, key=key)
        return attempt_id
    except (SharedVolumeError, OSError):
        return None
