"""The rendezvous entry point: global node 0 assembles, everyone else follows.

`Rendezvous` holds what a pod brings (paths, identity, data, deadline, poll rates) and
hands it to its role: `assembler.Assembler` for node 0, `follower.Follower` for the rest.
Local failures are published by `failures`. Both roles revalidate every directory they
watch before reading from it (`freshness`), which is what keeps them fast on NFS.
"""

from __future__ import annotations

from dataclasses import fields

from ascend_node.rendezvous.assembler import ABORT_GRACE, SETTLE_POLLS, Assembler
from ascend_node.rendezvous.failures import node0_failure, publish_failure
from ascend_node.rendezvous.follower import Follower
from ascend_node.rendezvous.models import OutcomeDoc
from ascend_node.rendezvous.participant import Participant, progress_line, to_server
from ascend_node.rendezvous.store import check_real_dirs
from ascend_node.rendezvous.volume_call import retrying

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
        volume (a soft mount under an outage, `volume_call.retrying`): each role starts
        by reading what is there (node 0 reuses the attempt it opened, a follower finds
        its own slot), so a retry repeats no decision."""
        return retrying(self._run_role, self.deadline, self.timeout, self.clock, self.sleep)

    def _run_role(self) -> OutcomeDoc:
        if self.index == 0:
            # (a follower checks them right after its first glance has opened the run
            # directory: on NFS the open's LOOKUPs make the check's own free)
            check_real_dirs(self.paths.shared_dir, self.paths.root)
        role = Assembler if self.index == 0 else Follower
        settings = {f.name: getattr(self, f.name) for f in fields(self) if f.init}
        return role(**settings).run()
