"""Logging to stderr with the node's name and host in every line.

Forty pods' logs end up side by side in one aggregator: a line that does not say
which node wrote it is useless there. Results go to stdout; logs never do.
"""

from __future__ import annotations

import logging
import sys

_PREFIX = ["ascend-node"]


class _Prefix(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        stamp = self.formatTime(record, "%H:%M:%S")
        level = "" if record.levelno == logging.INFO else f"{record.levelname.lower()}: "
        return f"{stamp} [{_PREFIX[0]}] {level}{record.getMessage()}"


def setup(verbose: bool = False, debug: bool = False) -> None:
    root = logging.getLogger("ascend_node")
    root.handlers.clear()
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(_Prefix())
    root.addHandler(handler)
    root.setLevel(logging.DEBUG if (debug or verbose) else logging.INFO)
    root.propagate = False


def set_node(global_index: int, host: str) -> None:
    """After identity is known: `[node 4 10.0.0.5]`."""
    _PREFIX[0] = f"node {global_index} {host}"
