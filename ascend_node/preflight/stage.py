"""The pre-flight's two stages as the chain calls them, and `<state-dir>/preflight.json`.

`bootstrap.ranktable` gathers this node's device health before the rendezvous
(`HealthProbe`, beside the IP queries) and records node 0's warnings after it (`record_cluster`);
`boot` runs the reachability stage right after the table, before anything slow
(wheel install, set_env), so all nodes ping at about the same time
(`check_reachability`). Each stage writes what it found to `preflight.json`, which
`status --json` shows.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any, Optional

from ascend_node.atomic import atomic_write_bytes
from ascend_node.errors import ClusterInconsistent
from ascend_node.identity import NodeIdentity
from ascend_node.netcheck import family
from ascend_node.preflight.gather import gather_health
from ascend_node.preflight.models import NodeHealth
from ascend_node.preflight.reach import Reachability, ReachResult, result_json
from ascend_node.preflight.report import PREFLIGHT_JSON
from ascend_node.preflight.sample import describe_unreachable
from ascend_node.rendezvous.store import RunPaths

log = logging.getLogger("ascend_node.preflight")



class HealthProbe:
    """This node's device health for the rendezvous, gathered in the background while
    discovery asks for the device IPs (the same tool, other queries), so the pre-flight
    adds about nothing to the time before this node can publish."""

    def __init__(self, policy: str, tool_timeout: float) -> None:
        self.policy = policy
        self.tool_timeout = tool_timeout
        self._pool: Optional[ThreadPoolExecutor] = None
        self._future: Optional[Future[tuple[NodeHealth, float]]] = None

    def start(self, ids: Sequence[int], hccn_tool: str) -> None:
        if self.policy == "off" or self._future is not None:
            return

        def gather() -> tuple[NodeHealth, float]:
            started = time.monotonic()
            health = gather_health(ids, [], hccn_tool, self.tool_timeout)
            return health, time.monotonic() - started

        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="preflight")
        self._future = self._pool.submit(gather)

    def result(self, ips: Sequence[str]) -> tuple[Optional[NodeHealth], float, float]:
        """The health to publish (None when off), with the IP family of `ips`; the seconds
        the probes took, and the seconds this call waited for them (what they added)."""
        if self._future is None or self._pool is None:
            return None, 0.0, 0.0
        waited = time.monotonic()
        try:
            health, seconds = self._future.result()
        finally:
            self._pool.shutdown(wait=False)
        waited = time.monotonic() - waited
        fams = {family(ip) for ip in ips if ip}
        health = health.model_copy(update={"ip_family": 6 if fams == {6} else 4})
        log.debug("pre-flight: link/net health/TLS of %d devices in %.3f s",
                  len(health.devices), seconds)
        return health, seconds, waited


def record_cluster(state_dir: Path, policy: str, warnings: Sequence[str],
                   seconds: float = 0.0, waited: float = 0.0) -> dict[str, Any]:
    """Log node 0's pre-flight warnings (every node does, so each pod's log has them)."""
    for w in warnings:
        log.warning("pre-flight: %s", w)
    doc: dict[str, Any] = {"schema_version": 1, "policy": policy,
                           "cluster": {"checked": policy != "off", "warnings": list(warnings),
                                       "probe_seconds": round(seconds, 3),
                                       "probe_wait_seconds": round(waited, 3)},
                           "reach": None, "updated_at": time.time()}
    write_preflight(state_dir, doc)
    return doc


def check_reachability(
    state_dir: Path, policy: str, cluster: dict[str, Any], paths: RunPaths, attempt_id: str,
    identity: NodeIdentity, table: dict[str, Any], hccn_tool: str, ping_timeout: float,
    started: float, poll: float,
) -> Optional[ReachResult]:
    """Ping, gather, judge; ClusterInconsistent (exit 5) under `strict` when any sampled
    pair in the cluster is unreachable, a logged warning under `warn`."""
    if policy == "off" or identity.node_count < 2:
        return None
    result = Reachability(paths, attempt_id, identity, table, hccn_tool, ping_timeout,
                          started, poll=min(poll, 0.1)).run()
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


def write_preflight(state_dir: Path, doc: dict[str, Any]) -> None:
    """Best effort: the verdict is in the exit code and the log whatever happens here."""
    try:
        state_dir.mkdir(mode=0o750, parents=True, exist_ok=True)
        atomic_write_bytes(state_dir / PREFLIGHT_JSON,
                           (json.dumps(doc, indent=2) + "\n").encode(), mode=0o644)
    except OSError as exc:
        log.warning("cannot write %s: %s", state_dir / PREFLIGHT_JSON, exc.strerror or exc)
