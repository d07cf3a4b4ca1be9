"""Builders for rendezvous documents used by the decision and store tests."""

from __future__ import annotations

from ascend_node.rendezvous.models import (
    AttemptDoc,
    DeviceRecord,
    MemberData,
    MemberDoc,
    OutcomeDoc,
    TableRecord,
)

RUN = "run-1"


def data(index: int, masters: int = 1, devices: int = 8, pod: str = "", base: int = 0,
         ) -> MemberData:
    role = "master" if index < masters else "worker"
    task = index if role == "master" else index - masters
    return MemberData(
        global_index=index, role=role, task_index=task,
        pod_ip=pod or f"10.200.0.{10 + index}", host_ip=f"10.100.0.{10 + index}",
        devices=tuple(DeviceRecord(device_id=d, device_ip=f"10.20.{index + base}.{d + 1}")
                      for d in range(devices)),
    )


def member(index: int, attempt: str = "a1", nodes: int = 4, masters: int = 1,
           incarnation: str = "", **kw: object) -> MemberDoc:
    return MemberDoc(run_id=RUN, attempt_id=attempt, incarnation=incarnation or f"uid-{index}",
                     node_count=nodes, master_count=masters, agent_version="t",
                     data=data(index, masters, **kw))  # type: ignore[arg-type]


def attempt(aid: str = "a1", opened_by: str = "uid-0", nodes: int = 4, masters: int = 1,
            conflict: str | None = None) -> AttemptDoc:
    return AttemptDoc(run_id=RUN, attempt_id=aid, opened_by=opened_by, node_count=nodes,
                      master_count=masters, conflict=conflict)


def table_outcome(members: list[MemberDoc], aid: str = "a1") -> OutcomeDoc:
    return OutcomeDoc(run_id=RUN, attempt_id=aid, result="table",
                      members=tuple(TableRecord(global_index=m.data.global_index,
                                                incarnation=m.incarnation,
                                                digest=m.data.digest()) for m in members),
                      ranktable_text="{}", ranktable_sha256="0" * 64)


def abort_outcome(reason: str = "boom", aid: str = "a1", participants: tuple[str, ...] = (),
                  failed_by: str | None = None) -> OutcomeDoc:
    return OutcomeDoc(run_id=RUN, attempt_id=aid, result="abort", reason=reason,
                      participants=participants, failed_by=failed_by)
