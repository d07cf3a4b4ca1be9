"""Logging to stderr with the node's name and host in every line.

Forty pods' logs end up side by side in one aggregator: a line that does not say
which node wrote it is useless there. Results go to stdout; logs never do.
"""

from __future__ import annotations

import sys
from typing import Any

_PREFIX = ["ascend-node"]


def _format(formatter: Any, record: Any) -> str:
    import logging

    stamp = formatter.formatTime(record, "%H:%M:%S")
    level = "" if record.levelno == logging.INFO else f"{record.levelname.lower()}: "
    return f"{stamp} [{_PREFIX[0]}] {level}{record.getMessage()}"


def setup(verbose: bool = False, debug: bool = False) -> None:
    # `logging` is imported here, not at the top: `status`, `validate` and `--help` never
    # log, and a probe should not pay for the import (issue 13, start-up).
    import logging

    class Prefix(logging.Formatter):
        def format(self, record: logging.LogRecord) -> str:
            return _format(self, record)

    root = logging.getLogger("ascend_node")
    root.handlers.clear()
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(Prefix())
    root.addHandler(handler)
    root.setLevel(logging.DEBUG if (debug or verbose) else logging.INFO)
    root.propagate = False


def set_node(global_index: int, host: str) -> None:
    """After identity is known: `[node 4 10.0.0.5]`."""
    _PREFIX[0] = f"node {global_index} {host}"
