"""The pre-flight's first stage: this node's device health, published with its data.

Gathered in the background while discovery asks for the device IPs (the same tool,
other queries). Apart from the rest of the pre-flight so that a pod with the pre-flight
off imports none of it: the gathering is imported only when a probe starts.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TYPE_CHECKING, Optional

from ascend_node.discover.netcheck import family

if TYPE_CHECKING:
    from ascend_node.discover.health import NodeHealth

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

        from ascend_node.preflight.gather import gather_health

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
