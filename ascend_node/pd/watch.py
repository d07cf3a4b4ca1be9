"""`ascend-node pd-table`: the controller pod's writer of the global table, and its wait.

Runs in the controller's pod (a sidecar with `--watch`, or once before the controller
starts): the controller re-reads the table every few seconds and never watches for
changes, so whoever keeps the table current must outlive its first write. One process, one
writer. The first table is written when every instance is complete and a coordinator has
announced itself — a controller started on part of the service would begin with fewer
instances than the job has — or the wait ends with exit 4 naming what is missing. After
that, every change on the volume (an instance restarted: its group leaves the table, then
comes back with its new addresses) is a rewrite by rename; an unchanged view writes nothing.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Callable, Optional

from ascend_node.errors import PeerTimeout
from ascend_node.pd.files import write_global_table
from ascend_node.pd.global_table import render_global_table
from ascend_node.pd.motor_rules import InstanceFlags
from ascend_node.pd.service import Seen, ServiceView, read_service, table_from_view
from ascend_node.rendezvous.seal import RendezvousKey

log = logging.getLogger("ascend_node.pd")


def run_pd_table(shared_dir: Path, run_id: str, counts: Mapping[str, int],
                 flags: InstanceFlags, out: Path, *, timeout: float, watch: bool,
                 owner: Optional[tuple[int, int]] = None, interval: float = 0.5,
                 watch_interval: float = 2.0,
                 progress_every: float = 10.0, key: Optional[RendezvousKey] = None,
                 clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], None] = time.sleep,
                 read: Optional[Callable[[], ServiceView]] = None) -> int:
    """Write the global table (and, with `watch`, keep it current); returns the writes.

    Looks every `interval` s until the first table (it is then written within about that
    of the last instance completing), every `watch_interval` s after it (the controller
    re-reads the file every 5 s: a faster look would buy nothing). Raises PeerTimeout when
    the first complete table is not there within `timeout`. `read`: where the service is
    read from instead of the volume (`pd.kube_service.read_service`, `--rendezvous kube`;
    `shared_dir` is then unused)."""
    started = clock()
    deadline = started + timeout
    last_text: Optional[str] = None
    last_progress = started
    writes = 0
    total = counts.get("prefill", 0) + counts.get("decode", 0)
    seen: Seen = {}
    while True:
        view = read() if read is not None else read_service(shared_dir, run_id, counts, key,
                                                             seen)
        doc = table_from_view(view, counts, flags)
        missing = view.missing()
        if last_text is None and missing:  # the first table waits for the whole service
            now = clock()
            if now >= deadline:
                raise PeerTimeout(
                    f"the global rank table is still waiting after {timeout:g} s for: "
                    + "; ".join(missing),
                    "check those pods' logs (`ascend-node report --run-id "
                    f"{run_id}-<task>` for an instance) and the coordinator's pd-announce")
            if now - last_progress >= progress_every:
                last_progress = now
                log.info("global table: %d of %d instances complete; waiting for %s",
                         total - sum(1 for s in view.instances if s.table is None), total,
                         "; ".join(missing))
        elif doc is not None:
            text = render_global_table(doc)
            if text != last_text:
                write_global_table(out, doc, owner)
                writes += 1
                groups = len(doc["server_group_list"]) - 2
                log.info("global table written to %s: %d of %d instances%s", out, groups,
                         total, "" if not missing else "; waiting for " + "; ".join(missing))
                last_text = text
            if not watch:
                return writes
        sleep(interval if last_text is None else watch_interval)
