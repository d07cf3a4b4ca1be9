"""The pre-flight's second stage as `boot` calls it: reachability after the table.

`boot` runs it right after the table, before anything slow (wheel install, set_env), so
all nodes ping at about the same time (`check_reachability`). The first stage, this
node's device health beside the IP queries, is `probe.HealthProbe`; node 0's verdict on it
is recorded by `record.record_cluster`. Each stage writes what it found to
`preflight.json` (`record`), which `status --json` shows (`report`).
"""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any, Optional

from ascend_node.discover.identity import NodeIdentity
from ascend_node.errors import ClusterInconsistent
from ascend_node.preflight.reach import Reachability, ReachResult, result_json
from ascend_node.preflight.record import write_preflight
from ascend_node.preflight.sample import describe_unreachable
from ascend_node.rendezvous.seal import RendezvousKey
from ascend_node.rendezvous.store import RunPaths

log = logging.getLogger("ascend_node.preflight")


def check_reachability(
    state_dir: Path, policy: str, cluster: dict[str, Any], paths: RunPaths, attempt_id: str,
    identity: NodeIdentity, table: dict[str, Any], hccn_tool: str, ping_timeout: float,
    started: float, poll: float, key: Optional[RendezvousKey] = None,
) -> Optional[ReachResult]:
    """Ping, gather, judge; ClusterInconsistent (exit 5) under `strict` when any sampled
    pair in the cluster is unreachable, a logged warning under `warn`."""
    if policy == "off" or identity.node_count < 2:
        return None
    result = Reachability(paths, attempt_id, identity, table, hccn_tool, ping_timeout,
                          started, poll=min(poll, 0.1), key=key).run()
    doc = {**cluster, "reach": result_json(result, identity.master_count),
           "updated_at": time.time()}
    write_preflight(state_dir, doc)
    for w in result.warnings:
        log.warning("pre-flight: %s", w)
    if result.unreachable:
        text = describe_unreachable(result.unreachable, identity.master_count)
        if policy == "strict":
            raise ClusterInconsistent(
                f"pre-flight: {text}",
                "check the RoCE path of each pair (both links UP: `hccn_tool -i <dev> -link "
                "-g`; same subnet or a gateway; switch ports and VLANs), then restart the "
                "job; or run with --preflight warn (ASCEND_NODE_PREFLIGHT=warn) to start "
                "anyway; exit 5 is not retryable")
        log.warning("pre-flight: %s (going on: --preflight warn)", text)
        return result
    log.info("pre-flight: %d sampled device pair(s) in the cluster answer (%.2f s)",
             result.cluster_pings, result.seconds)
    return result
