"""A pod's timeline summary in its slot object, and `report --rendezvous kube` reading it back
(pure: `rendezvous/kube_summary.with_summary`, `report/kube_collect.summaries_of`)."""

from __future__ import annotations

import json
import uuid
from typing import Any

import pytest

from ascend_node.rendezvous.kube_layout import SUMMARY_BYTES, JobIdentity, new_object
from ascend_node.rendezvous.kube_summary import with_summary
from ascend_node.report.kube_collect import summaries_of

JOB = JobIdentity("ns", "job", str(uuid.uuid4()))


def summary(index: int = 1, attempt: str = "a1", run: str = "job", **over: Any) -> str:
    doc = {"schema_version": 1, "kind": "node-summary", "run_id": run, "attempt_id": attempt,
           "global_index": index, "name": f"node {index}", "node_count": 2,
           "pod_ip": "10.0.0.2", "agent_version": "x", "command": "ranktable",
           "state": "table", "exit_code": None, "cause": "", "warning": "",
           "clock": {"offset": 0.0, "uncertainty": 0.0, "source": "local"},
           "container_start": None, "container_start_source": "", "process_start": 100.0,
           "published": None, "written": 102.0,
           "phases": [{"name": "rendezvous", "start": 100.5, "end": 101.5, "outcome": "ok",
                       "device": None}], **over}
    return json.dumps(doc)


def slot(index: int = 1, **data: str) -> dict[str, Any]:
    obj = new_object(JOB, "node", index, data=data)
    obj["metadata"]["resourceVersion"] = "7"
    return obj


def test_the_summary_goes_beside_the_slot_document_at_the_version_read() -> None:
    written = with_summary(JOB, 1, slot(**{"slot.json": '{"m": 1}'}), summary())
    assert written["data"] == {"slot.json": '{"m": 1}', "summary.json": summary()}
    assert written["metadata"]["resourceVersion"] == "7"  # compare-and-set, never blind
    fresh = with_summary(JOB, 1, None, summary())  # a pod that never published
    assert fresh["data"] == {"summary.json": summary()}
    assert "resourceVersion" not in fresh["metadata"]


def test_a_summary_over_the_bound_or_into_another_jobs_slot_is_not_written() -> None:
    with pytest.raises(ValueError, match="over 65536"):
        with_summary(JOB, 1, None, "x" * (SUMMARY_BYTES + 1))
    other = new_object(JobIdentity("ns", "job", str(uuid.uuid4())), "node", 1)
    other["metadata"]["resourceVersion"] = "3"
    with pytest.raises(ValueError):
        with_summary(JOB, 1, other, summary())


def test_report_reads_this_attempts_summaries_and_names_what_it_leaves_out() -> None:
    foreign = new_object(JobIdentity("ns", "job", str(uuid.uuid4())), "node", 0,
                         data={"summary.json": summary(0)})
    got, ignored = summaries_of(JOB, "job", "a1", [
        slot(1, **{"slot.json": "{}", "summary.json": summary(1)}),
        slot(0, **{"slot.json": "{}"}),                          # no summary: no finding
        foreign,                                                 # another vcjob's uid
        slot(2, **{"summary.json": summary(1)}),                 # node 1's under node 2
        slot(3, **{"summary.json": summary(3, attempt="a0")}),   # an earlier attempt's
    ])
    assert [s.global_index for s in got] == [1]
    reasons = {i.path: i.reason for i in ignored}
    assert set(reasons) == {"ConfigMap job-rdzv-node-0", "ConfigMap job-rdzv-node-2"}
    assert "is node 1's summary under node 2's name" in reasons["ConfigMap job-rdzv-node-2"]
