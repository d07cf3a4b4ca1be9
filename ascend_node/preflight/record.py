"""Writing `<state-dir>/preflight.json` (`report` reads it, for `status`, which must not
import logging or pydantic: hence two modules)."""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Optional

from ascend_node.atomic import atomic_write_bytes
from ascend_node.preflight.report import PREFLIGHT_JSON

log = logging.getLogger("ascend_node.preflight")


def record_cluster(state_dir: Path, policy: str, warnings: Sequence[str],
                   seconds: float = 0.0, waited: float = 0.0,
                   node: Optional[dict[str, Any]] = None) -> dict[str, Any]:
    """Log node 0's pre-flight warnings (every node does, so each pod's log has them).
    `node`: this node's own node-wide facts as it published them (holders, ports, HCCL
    settings, versions), for `status --json`."""
    for w in warnings:
        log.warning("pre-flight: %s", w)
    doc: dict[str, Any] = {"schema_version": 1, "policy": policy,
                           "cluster": {"checked": policy != "off", "warnings": list(warnings),
                                       "probe_seconds": round(seconds, 3),
                                       "probe_wait_seconds": round(waited, 3),
                                       "node": node},
                           "reach": None, "updated_at": time.time()}
    write_preflight(state_dir, doc)
    return doc


def write_preflight(state_dir: Path, doc: dict[str, Any]) -> None:
    """Best effort: the verdict is in the exit code and the log whatever happens here."""
    try:
        state_dir.mkdir(mode=0o750, parents=True, exist_ok=True)
        atomic_write_bytes(state_dir / PREFLIGHT_JSON,
                           (json.dumps(doc, indent=2) + "\n").encode(), mode=0o644,
                           durable=False)
    except OSError as exc:
        log.warning("cannot write %s: %s", state_dir / PREFLIGHT_JSON, exc.strerror or exc)
