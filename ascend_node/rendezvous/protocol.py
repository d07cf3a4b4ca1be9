"""The rendezvous entry point: global node 0 assembles, everyone else follows.

`Rendezvous` holds what a pod brings (paths, identity, data, deadline, poll rates) and
hands it to its role: `assembler.Assembler` for node 0, `follower.Follower` for the rest.
Local failures are published by `failures`. Both roles revalidate every directory they
watch before reading from it (`freshness`), which is what keeps them fast on NFS.
"""

from __future__ import annotations

import logging
from dataclasses import fields
from typing import Optional

from ascend_node.errors import PeerTimeout
from ascend_node.rendezvous.assembler import ABORT_GRACE, SETTLE_POLLS, Assembler
from ascend_node.rendezvous.failures import node0_failure, publish_failure
from ascend_node.rendezvous.follower import Follower
from ascend_node.rendezvous.models import OutcomeDoc
from ascend_node.rendezvous.participant import Participant, progress_line, to_server
from ascend_node.rendezvous.store import check_real_dirs
from ascend_node.rendezvous.volume_call import VolumeIOError, VolumeUnanswered

log = logging.getLogger("ascend_node.rendezvous")

VOLUME_RETRY = 1.0
"""Seconds between tries after the volume failed a call with an I/O error (a soft mount's
EIO or ETIMEDOUT already waited `timeo` times `retrans` in the kernel)."""

__all__ = [
    "ABORT_GRACE",
    "SETTLE_POLLS",
    "Rendezvous",
    "node0_failure",
    "progress_line",
    "publish_failure",
    "to_server",
]


class Rendezvous(Participant):
    def run(self) -> OutcomeDoc:
        """This pod's role, run again from the volume's state after an I/O error of the
        volume (a soft mount under an outage): each role starts by reading what is
        there (node 0 reuses the attempt it opened, a follower finds its own slot), so
        a retry repeats no decision. At the deadline, the volume is named as the cause."""
        failed: Optional[VolumeIOError] = None
        failures = 0
        while True:
            try:
                check_real_dirs(self.paths.shared_dir, self.paths.root)
                role = Assembler if self.index == 0 else Follower
                settings = {f.name: getattr(self, f.name) for f in fields(self) if f.init}
                return role(**settings).run()
            except VolumeIOError as exc:
                failures += 1
                if failed is None or failed.cause != exc.cause:
                    log.warning("%s; retrying until the deadline", exc.cause)
                failed = exc
            except PeerTimeout as exc:
                if failed is None or isinstance(exc, VolumeUnanswered):
                    raise
                raise type(exc)(f"{exc.cause}; the shared volume failed {failures} time(s) "
                                f"with I/O errors meanwhile, the last: {failed.cause}",
                                exc.hint) from exc
            if self._timed_out():
                raise VolumeUnanswered(
                    f"timed out after {self.timeout:g} s: the shared volume failed "
                    f"{failures} time(s) with I/O errors, the last: {failed.cause}",
                    "the shared volume (its NFS server or storage) did not answer; check "
                    "it, then restart the job; exit 4 is retryable",
                )
            self.sleep(min(VOLUME_RETRY, max(0.0, self.deadline - self.clock())))

