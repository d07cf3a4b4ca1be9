"""The pre-flight's first stage: this node's device health, published with its data.

Gathered in the background while discovery asks for the device IPs (the same tool,
other queries). Apart from the rest of the pre-flight so that a pod with the pre-flight
off imports none of it: the gathering is imported only when a probe starts.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Optional

from ascend_node.discover.netcheck import family

if TYPE_CHECKING:
    from ascend_node.discover.health import NodeFacts, NodeHealth


@dataclass(frozen=True)
class NodeProbe:
    """What the node-wide facts need: npu-smi, the environment HCCL will get, where CANN
    is installed, and how long to wait for a process still holding an NPU."""

    npu_smi: str
    environ: Mapping[str, str]
    ascend_root: Path
    hold_wait: float

log = logging.getLogger("ascend_node.preflight")


class HealthProbe:
    """This node's device health for the rendezvous, gathered in the background while
    discovery asks for the device IPs (the same tool, other queries), so the pre-flight
    adds about nothing to the time before this node can publish. With a `NodeProbe`, the
    node-wide facts (`gather.gather_node`) are gathered beside them, in a second thread."""

    def __init__(self, policy: str, tool_timeout: float,
                 node: Optional[NodeProbe] = None) -> None:
        self.policy = policy
        self.tool_timeout = tool_timeout
        self.node = node
        self._pool: Optional[ThreadPoolExecutor] = None
        self._future: Optional[Future[tuple[NodeHealth, float]]] = None
        self._node_future: Optional[Future[tuple[NodeFacts, float]]] = None
        self._stop = threading.Event()

    def start(self, ids: Sequence[int], hccn_tool: str) -> None:
        if self.policy == "off" or self._future is not None:
            return

        from ascend_node.preflight.gather import gather_health, gather_node

        def gather() -> tuple[NodeHealth, float]:
            started = time.monotonic()
            health = gather_health(ids, [], hccn_tool, self.tool_timeout)
            return health, time.monotonic() - started

        self._pool = ThreadPoolExecutor(max_workers=2, thread_name_prefix="preflight")
        self._future = self._pool.submit(gather)
        node = self.node
        if node is not None:
            def gather_facts() -> tuple[NodeFacts, float]:
                started = time.monotonic()
                facts = gather_node(ids, node.npu_smi, node.environ, node.ascend_root,
                                    self.tool_timeout, node.hold_wait, stop=self._stop)
                return facts, time.monotonic() - started

            self._node_future = self._pool.submit(gather_facts)

    def cancel(self) -> None:
        """The start-up failed before the rendezvous: end a wait for a held NPU now, so
        the process exits with its error instead of waiting out the hold wait."""
        self._stop.set()
        if self._pool is not None:
            self._pool.shutdown(wait=False)

    def result(self, ips: Sequence[str]) -> tuple[Optional[NodeHealth], float, float]:
        """The health to publish (None when off), with the IP family of `ips`; the seconds
        the probes took, and the seconds this call waited for them (what they added)."""
        if self._future is None or self._pool is None:
            return None, 0.0, 0.0
        waited = time.monotonic()
        try:
            health, seconds = self._future.result()
            facts: Optional[NodeFacts] = None
            if self._node_future is not None:
                facts, node_seconds = self._node_future.result()
                seconds = max(seconds, node_seconds)
        finally:
            self._pool.shutdown(wait=False)
        waited = time.monotonic() - waited
        fams = {family(ip) for ip in ips if ip}
        health = health.model_copy(update={"ip_family": 6 if fams == {6} else 4,
                                           "node": facts})
        log.debug("pre-flight: link/net health/TLS of %d devices%s in %.3f s",
                  len(health.devices), " and the node's facts" if facts else "", seconds)
        return health, seconds, waited
