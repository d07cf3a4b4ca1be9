"""`ascend-node doctor`: read-only health checks of this node and, through the shared
volume, of its peers.

Why it exists: when a multi-node job does not come up, HCCL reports a connect timeout on
some rank minutes later, and MindIE a vague "init rank table config error". The causes are
few and each is checkable from inside a container in seconds: a RoCE link that is down, a
device without an address, two devices with one address, netmasks or TLS switches that
differ between nodes, a rank table that is stale or that MindIE refuses for its mode, a
config.json that disagrees with the table, a process from the previous attempt still
holding the NPUs. Doctor runs every check, never stops at the first problem, and prints one
line per check with the exact cause and the remedy.

Shape: gathering (tool calls, file reads, the peers' facts) is kept apart from judging.
Every `check_*` function is pure over what was gathered and returns one `CheckResult`, so
each is table-tested alone; `run_doctor` gathers, calls them and never raises for a failed
check (only for settings that make checking impossible, e.g. `--peers` without a shared
directory). Its only write is this node's facts file under
`<shared>/.ascend-node/<run>/doctor/node-<g>.json` (with `--peers`).

Remedies quote `hccn_tool` commands only where a public source gives them: `-tls -s` from
MindIE-LLM docs/zh/user_guide/user_manual/rank_table_file_configuration.md, the `-g`
queries from Ascend/mind-cluster docs/en/faultdiag/user_guide/03_collecting_logs.md.
Otherwise they describe the fix.

Modules: `report` (results, report, exit code), `local` (this node's devices), `tables`
(the rank table in use), `mindie_config` (MindIE's config.json), `processes` (/dev/davinciN
holders), `facts` (what nodes publish for each other), `peers` (cluster comparisons),
`ping` (the RoCE ping matrix), `runner` (`run_doctor`). Import from here: the package is
the public interface, the module split is not.
"""

from __future__ import annotations

# The `x as x` imports keep attributes of the former single module reachable through the
# package: tests patch `doctor.os.listdir` (the os module itself) and call
# `doctor.validate_file` and `doctor._server_pid`.
import os as os

from ascend_node.doctor.facts import (
    FACTS_MAX_AGE,
    PEER_POLL,
    DoctorFacts,
    FactDevice,
    PeerRead,
    collect_peer_facts,
    facts_path,
    make_facts,
)
from ascend_node.doctor.local import (
    HEALTHY_NET,
    IP_FIX,
    TLS_FIX,
    DeviceState,
    check_hccn_conf,
    check_health,
    check_ip_family,
    check_ips,
    check_link,
    check_tls,
    check_unique_ips,
    check_visible,
    query_device_states,
    read_hccn_conf,
)
from ascend_node.doctor.mindie_config import (
    MindieState,
    check_mindie_config,
    check_mindie_devices,
    check_mindie_multinode,
    check_mindie_startup,
    read_mindie_state,
)
from ascend_node.doctor.peers import (
    check_peer_devices,
    check_peer_duplicates,
    check_peer_family,
    check_peer_netmask,
    check_peer_subnet,
    check_peer_tls,
    check_peer_versions,
    check_peers_present,
)
from ascend_node.doctor.ping import (
    PING_PAIR_LIMIT,
    PING_WORKERS,
    PingPair,
    check_ping,
    parse_ping,
    ping_argv,
    ping_pairs,
    run_pings,
)
from ascend_node.doctor.processes import Holder, check_npu_holders, descends_from, find_npu_holders
from ascend_node.doctor.report import (
    EXIT_CODES,
    CheckResult,
    DoctorReport,
    Finding,
    Status,
    id_list,
    ok,
    skip,
    verdict,
)
from ascend_node.doctor.runner import _server_pid as _server_pid
from ascend_node.doctor.runner import run_doctor
from ascend_node.doctor.tables import (
    RunState,
    TableInUse,
    check_table_content,
    check_table_file,
    check_table_member,
    check_table_stale,
    read_run_state,
    table_in_use,
)
from ascend_node.ranktable import validate_file as validate_file

__all__ = [
    "EXIT_CODES",
    "FACTS_MAX_AGE",
    "HEALTHY_NET",
    "IP_FIX",
    "PEER_POLL",
    "PING_PAIR_LIMIT",
    "PING_WORKERS",
    "TLS_FIX",
    "CheckResult",
    "DeviceState",
    "DoctorFacts",
    "DoctorReport",
    "FactDevice",
    "Finding",
    "Holder",
    "MindieState",
    "PeerRead",
    "PingPair",
    "RunState",
    "Status",
    "TableInUse",
    "check_hccn_conf",
    "check_health",
    "check_ip_family",
    "check_ips",
    "check_link",
    "check_mindie_config",
    "check_mindie_devices",
    "check_mindie_multinode",
    "check_mindie_startup",
    "check_npu_holders",
    "check_peer_devices",
    "check_peer_duplicates",
    "check_peer_family",
    "check_peer_netmask",
    "check_peer_subnet",
    "check_peer_tls",
    "check_peer_versions",
    "check_peers_present",
    "check_ping",
    "check_table_content",
    "check_table_file",
    "check_table_member",
    "check_table_stale",
    "check_tls",
    "check_unique_ips",
    "check_visible",
    "collect_peer_facts",
    "descends_from",
    "facts_path",
    "find_npu_holders",
    "id_list",
    "make_facts",
    "ok",
    "parse_ping",
    "ping_argv",
    "ping_pairs",
    "query_device_states",
    "read_hccn_conf",
    "read_mindie_state",
    "read_run_state",
    "run_doctor",
    "run_pings",
    "skip",
    "table_in_use",
    "verdict",
]
