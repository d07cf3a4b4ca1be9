"""Lint a parsed rank table against HCCL's rules and, for MindIE, MindIE's own.

The validator is pure, never raises on any input, and reports every problem it finds, each
with a JSON path and a one-line message that names the bad value (`ascend-node validate`
prints them all at once, so an operator fixes a hand-written table in one pass instead of
one MindIE restart per mistake).

Decisions the sources leave open (documented here because `validate` users meet them):

* ``target="mindie"`` applies HCCL's rules *and* MindIE's. MindIE's model runner hands the
  same file (``RANK_TABLE_FILE``) to HCCL, so a table MindIE accepts but HCCL rejects still
  fails at start-up, only later and with a vaguer message.
* ``version`` and ``status`` are required for both targets. MindIE's C++ never reads them,
  but HCCL picks the schema by ``version`` and a ``status`` other than ``"completed"`` marks
  a table that is still being assembled (MindCluster writes ``"initializing"`` until every pod
  is in). MindIE's own test table (upstream ``ranktable-2x8.json``) carries both
  (``"1.0"``/``"completed"``), so it validates with zero problems for either target.
* ``server_count`` is optional for HCCL v1.2 tables (the A3 SuperPoD format) and required
  otherwise; MindIE always reads it.
* ``device_ip`` is required by HCCL only when devices talk over RoCE between servers: v1.0
  (and v1.2 without ``super_pod_list``) with more than one server, v1.2 with more than one
  super pod. MindIE checks it on every device, so ``target="mindie"`` always requires it.
* ``container_ip`` is not an HCCL field. For MindIE it must be an IP address other than
  ``0.0.0.0``/``::``, not just non-empty (loopback stays allowed: MindIE's own test table uses
  ``127.0.0.1``): it has to equal ``MIES_CONTAINER_IP``, which becomes the address the server
  listens on, and the first server's ``container_ip`` becomes ``MASTER_IP``, which atb_llm
  validates as an IP. Duplicate ``container_ip`` values are a MindIE problem (the local server
  becomes ambiguous; MindIE silently takes the last match).
* Device IPs that no RoCE NIC can have (loopback, multicast, besides the documented
  ``0.0.0.0``/``::`` and link-local) are rejected for both targets.
* The same ``device_id`` on different servers is normal (every 8-card node has 0..7); only a
  repeat *within* one server is a problem.

Where the rules live: this module holds the top-level ones (version, status, server_count)
and the entry point; `servers` the server-, device- and cross-server rules; `superpods` the
v1.2 ``super_pod_list`` rules; `limits` the numbers. Each reports into one `Checker`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Optional

from ascend_node.ranktable.limits import MINDIE_SERVER_COUNT, SUPPORTED_VERSIONS, Target
from ascend_node.ranktable.problems import Checker, Problem
from ascend_node.ranktable.servers import ServerListChecker
from ascend_node.ranktable.values import NOT_DECIMAL, is_decimal, kind_of, show


def validate_rank_table(doc: Any, target: Target = "mindie") -> list[Problem]:
    """Every problem of a parsed rank table, in document order; [] when it is valid.

    ``target="hccl"`` applies HCCL's rules alone (v1.0 and v1.2 shapes): string values,
    ``status`` completed, ``server_count`` consistent, unique ``server_id`` (<= 64 chars),
    unique device ids per server, usable and unique device IPs of one family, rank ids
    canonical, unique, contiguous from 0 and never interleaved between servers.
    ``target="mindie"`` adds MindIE's own checks (MindIE-LLM ranktable_config.cpp): 2..60
    servers, 1..32 equal devices per server, ``container_ip`` a unique usable IP,
    ``server_id`` an IP, ``device_id`` 0..63, ``rank_id`` 0..511, strings <= 256 chars, the
    rank-``"0"`` server listed first.
    See the docstring of `ascend_node.ranktable.validate` for the decisions the sources leave
    open. Never raises on ``doc``.
    """
    if target not in ("mindie", "hccl"):
        raise ValueError(f"unknown target {target!r}: use 'mindie' or 'hccl'")
    checker = Checker(target)
    _check_document(checker, doc)
    return checker.problems


def _check_document(c: Checker, doc: Any) -> None:
    if not isinstance(doc, Mapping):
        c.add("$", f"a rank table must be a JSON object, got {kind_of(doc)} {show(doc)}")
        return
    version = c.string(doc, "version", "$", required=True)
    if version is not None and version not in SUPPORTED_VERSIONS:
        c.add(
            "$.version",
            f'version {show(version)} is not supported: use "1.0" (or "1.2" for A3 SuperPoD)',
        )
    status = c.string(doc, "status", "$", required=True)
    if status is not None and status != "completed":
        c.add(
            "$.status",
            f'status {show(status)} is not "completed": the table is not final',
        )

    servers = doc.get("server_list")
    server_list: Optional[list[Any]] = None
    if "server_list" not in doc:
        c.add("$.server_list", "server_list is missing")
    elif not isinstance(servers, list):
        c.add(
            "$.server_list",
            f"server_list must be a JSON array, got {kind_of(servers)} {show(servers)}",
        )
    elif not servers:
        c.add("$.server_list", "server_list is empty: a rank table needs servers")
        server_list = servers
    else:
        server_list = servers

    _check_server_count(c, doc, version, server_list)
    if server_list:
        ServerListChecker(c, doc, version, server_list).run()


def _check_server_count(
    c: Checker, doc: Mapping[str, Any], version: Optional[str], server_list: Optional[list[Any]]
) -> None:
    required = c.mindie or version != "1.2"
    count_text = c.string(doc, "server_count", "$", required=required)
    if count_text is None:
        return
    if not is_decimal(count_text):
        c.add(
            "$.server_count",
            f"server_count {show(count_text)} {NOT_DECIMAL}",
        )
        return
    count = int(count_text)
    if server_list is not None and count != len(server_list):
        c.add(
            "$.server_count",
            f"server_count {show(count_text)} does not match the {len(server_list)} "
            "servers in server_list",
        )
    low, high = MINDIE_SERVER_COUNT
    if c.mindie and not low <= count <= high:
        c.add(
            "$.server_count",
            f"server_count {show(count_text)} is outside MindIE's range {low}..{high}"
            + (" (MindIE on one node runs without a rank table)" if count == 1 else ""),
        )
