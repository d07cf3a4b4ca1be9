"""Builders for a PD service's documents on a shared directory (tests and bench)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Optional

from ascend_node.pd.roles import read_pd_identity
from ascend_node.pd.service import announce
from ascend_node.ranktable import DeviceEntry, ServerEntry, build_rank_table
from ascend_node.rendezvous.models import (
    AttemptDoc,
    DeviceRecord,
    MemberData,
    MemberDoc,
    OutcomeDoc,
    TableRecord,
)
from ascend_node.rendezvous.store import RunPaths, write_doc


def publish_instance(shared: Path, run_id: str, task: str, subnet: int, *, pods: int = 1,
                     devices: int = 2, result: str = "table", text: Optional[str] = None,
                     outcome: bool = True) -> None:
    """What an instance's node 0 and members leave: attempt, slots and (unless `outcome`
    is False) the outcome — a table, an abort, or a table text that is not its digest's."""
    run = f"{run_id}-{task}"
    paths = RunPaths(shared, run)
    members = []
    for g in range(pods):
        data = MemberData(global_index=g, role="worker", task_index=g,
                          pod_ip=f"172.{16 + subnet // 250}.{subnet % 250}.{10 + g}",
                          host_ip=f"192.{168 + subnet // 250}.{subnet % 250}.{10 + g}",
                          devices=tuple(DeviceRecord(device_id=d,
                                                     device_ip=f"10.{subnet % 250}.{g}.{d + 1}")
                                        for d in range(devices)))
        members.append(MemberDoc(run_id=run, attempt_id="a1", incarnation=f"u{g}",
                                 node_count=pods, master_count=0, agent_version="t",
                                 data=data))
    write_doc(paths.attempt_file, AttemptDoc(run_id=run, attempt_id="a1", opened_by="u0",
                                             node_count=pods, master_count=0), shared)
    for m in members:
        write_doc(paths.slot("a1", m.data.global_index), m, shared)
    if not outcome:
        return
    table = build_rank_table([ServerEntry(m.data.global_index, m.data.pod_ip, m.data.host_ip,
                                          tuple(DeviceEntry(d.device_id, d.device_ip)
                                                for d in m.data.devices)) for m in members])
    truth = json.dumps(table)
    final = result == "table"
    write_doc(paths.outcome("a1"), OutcomeDoc(
        run_id=run, attempt_id="a1", result=result,  # type: ignore[arg-type]
        reason="" if final else "worker 0 (node 0) failed: no IP",
        members=tuple(TableRecord(global_index=m.data.global_index, incarnation=m.incarnation,
                                  digest=m.data.digest()) for m in members) if final else (),
        ranktable_text=(text if text is not None else truth) if final else "",
        ranktable_sha256=hashlib.sha256(truth.encode()).hexdigest() if final else ""),
        shared)


def announce_coordinator(shared: Path, run_id: str, env: dict[str, str]) -> None:
    me = {**env, "ASCEND_NODE_PD_TASK": "coordinator", "VC_TASK_INDEX": "0",
          "K8S_POD_IP": "172.16.0.10", "K8S_HOST_IP": "192.168.0.1", "POD_UID": "c0"}
    announce(shared, run_id, read_pd_identity(me), me)
