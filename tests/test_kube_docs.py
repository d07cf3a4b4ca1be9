"""The pure reads of the rendezvous' ConfigMaps and the Role check before any wait
(`rendezvous/kube_docs.py`): tables of cases, no API server."""

from __future__ import annotations

from typing import Any, Optional

import pytest

from ascend_node.rendezvous.kube_docs import (
    asked_to_look,
    attempt_state,
    first_denied,
    needed_calls,
    progress_state,
    review_rules,
    settle_value,
    slot_state,
)
from ascend_node.rendezvous.kube_layout import (
    SETTLE_ANNOTATION,
    JobIdentity,
    document_object,
    follower_selector,
    rbac_objects,
    role_rules,
)
from ascend_node.rendezvous.models import (
    AttemptDoc,
    DeviceRecord,
    MemberData,
    MemberDoc,
    OutcomeDoc,
    ProgressDoc,
)

JOB = JobIdentity("ns", "job", "0f9c3f2e-1b2a-4c3d-9e8f-0123456789ab")
OTHER = JobIdentity("ns", "job", "11111111-2222-3333-4444-555555555555")
ATTEMPT = AttemptDoc(run_id="job", attempt_id="a1", opened_by="pod0", node_count=2,
                     master_count=1)
OUTCOME = OutcomeDoc(run_id="job", attempt_id="a1", result="abort", reason="x")
DATA = MemberData(global_index=1, role="worker", task_index=0, pod_ip="10.0.0.2",
                  host_ip="10.1.0.2", devices=(DeviceRecord(device_id=0, device_ip="1.1.1.1"),))
MEMBER = MemberDoc(run_id="job", attempt_id="a1", incarnation="pod1", node_count=2,
                   master_count=1, agent_version="t", data=DATA)


def attempt_obj(job: JobIdentity = JOB, **docs: str) -> dict[str, Any]:
    return document_object(job, "attempt", **docs)


@pytest.mark.parametrize("obj, run_id, attempt, outcome, refused", [
    (None, "job", None, None, None),
    (attempt_obj(attempt_json=ATTEMPT.model_dump_json()), "job", ATTEMPT, None, None),
    (attempt_obj(attempt_json=ATTEMPT.model_dump_json(), outcome_json=OUTCOME.model_dump_json()),
     "job", ATTEMPT, OUTCOME, None),
    # an outcome of another attempt is no outcome of this one
    (attempt_obj(attempt_json=ATTEMPT.model_dump_json(),
                 outcome_json=OUTCOME.model_copy(update={"attempt_id": "a0"}).model_dump_json()),
     "job", ATTEMPT, None, None),
    # a predecessor vcjob's object (another uid) is nobody's
    (attempt_obj(OTHER, attempt_json=ATTEMPT.model_dump_json()), "job", None, None,
     "is not this job's"),
    (attempt_obj(attempt_json="{not json"), "job", None, None, "fails validation"),
    (attempt_obj(), "job", None, None, "holds no attempt.json"),
    (attempt_obj(attempt_json=ATTEMPT.model_dump_json()), "other-run", None, None,
     "belongs to run 'job'"),
])
def test_attempt_state(obj: Optional[dict[str, Any]], run_id: str, attempt: Any, outcome: Any,
                       refused: Optional[str]) -> None:
    got = attempt_state(JOB, obj, run_id)
    assert got[:2] == (attempt, outcome)
    assert (got[2] is None) if refused is None else (refused in str(got[2]))


def slot_obj(job: JobIdentity = JOB, text: Optional[str] = None) -> dict[str, Any]:
    return document_object(job, "node", 1, **({} if text is None else {"slot_json": text}))


@pytest.mark.parametrize("obj, attempt_id, expected", [
    (None, "a1", None),
    (slot_obj(text=MEMBER.model_dump_json()), "a1", MEMBER),
    (slot_obj(text=MEMBER.model_dump_json()), "a2", None),  # stale: never assembled
    (slot_obj(OTHER, MEMBER.model_dump_json()), "a1", "is not this job's"),
    (slot_obj(text='{"kind": "member"}'), "a1", "slot.json fails validation"),
    (slot_obj(text=MEMBER.model_copy(update={"run_id": "x"}).model_dump_json()), "a1",
     "belongs to run 'x'"),
    (slot_obj(), "a1", None),
])
def test_slot_state(obj: Optional[dict[str, Any]], attempt_id: str, expected: Any) -> None:
    got = slot_state(JOB, obj, "job", attempt_id)
    if isinstance(expected, str):
        assert isinstance(got, str) and expected in got
    else:
        assert got == expected


def test_progress_state_only_of_this_attempt() -> None:
    doc = ProgressDoc(run_id="job", attempt_id="a1", node_count=2, present=(0,), missing=(1,))
    obj = document_object(JOB, "progress", progress_json=doc.model_dump_json())
    assert progress_state(JOB, obj, "job", "a1") == doc
    assert progress_state(JOB, obj, "job", "a2") is None
    assert progress_state(OTHER, obj, "job", "a1") is None
    assert progress_state(JOB, None, "job", "a1") is None


RENDERED = [r.as_rbac() for r in role_rules("job", 4)]


def without(verb: str) -> list[dict[str, Any]]:
    out = []
    for rule in RENDERED:
        verbs = [v for v in rule["verbs"] if v != verb]
        if verbs:
            out.append({**rule, "verbs": verbs})
    return out


@pytest.mark.parametrize("rules, index, denied", [
    (RENDERED, 0, None),
    (RENDERED, 3, None),
    (without("update"), 0, ("update", "job-rdzv-attempt")),
    (without("update"), 2, ("update", "job-rdzv-node-2")),
    (without("create"), 1, ("create", None)),
    (without("watch"), 0, ("watch", None)),
    # a follower watches its attempt and progress objects by label (`follower_selector`)
    (without("watch"), 1, ("watch", None)),
    (without("list"), 0, ("list", None)),
    ([], 1, ("list", None)),
    # a Role rendered for 2 pods does not name node 3's slot
    ([r.as_rbac() for r in role_rules("job", 2)], 3, ("get", "job-rdzv-node-3")),
    # another job's Role allows none of this job's names
    ([r.as_rbac() for r in role_rules("other", 4)], 1, ("get", "job-rdzv-node-1")),
    # create restricted by names allows no create (RBAC cannot restrict create by name)
    ([{**r, "resourceNames": ["job-rdzv-node-1"]} if r["verbs"] == ["create"] else r
      for r in RENDERED], 1, ("create", None)),
    # wildcards, as a cluster-admin's rules come
    ([{"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"]}], 0, None),
    # the right verbs on another resource or group grant nothing
    ([{**r, "resources": ["secrets"]} for r in RENDERED], 1, ("list", None)),
    ([{**r, "apiGroups": ["apps"]} for r in RENDERED], 1, ("list", None)),
])
def test_first_denied(rules: list[dict[str, Any]], index: int,
                      denied: Optional[tuple[str, Optional[str]]]) -> None:
    assert first_denied(rules, needed_calls("job", index, 4)) == denied


def test_the_rendered_role_is_what_the_check_needs() -> None:
    """`manifest`'s Role grants every call of every pod's role: no pod of a rendered job
    stops at the check."""
    role = rbac_objects("job", "ns", 8)[1]
    for index in range(8):
        assert first_denied(role["rules"], needed_calls("job", index, 8)) is None


@pytest.mark.parametrize("status, expected", [
    ({"resourceRules": [{"verbs": ["get"]}]}, [{"verbs": ["get"]}]),
    ({"resourceRules": [{"verbs": ["get"]}, "junk"]}, [{"verbs": ["get"]}]),
    ({"incomplete": True, "evaluationError": "webhook"}, "incomplete (webhook)"),
    ({}, "holds no resourceRules"),
])
def test_review_rules(status: dict[str, Any], expected: Any) -> None:
    got = review_rules(status)
    if isinstance(expected, str):
        assert isinstance(got, str) and expected in got
    else:
        assert got == expected


def _settle(value: Any) -> dict[str, Any]:
    obj = document_object(JOB, "progress", progress_json="{}")
    obj["metadata"]["annotations"] = {SETTLE_ANNOTATION: value}
    return obj


@pytest.mark.parametrize("obj, attempt, index, asked", [
    (_settle(settle_value("a1", "n1", [2, 1])), "a1", 2, "a1 n1 1,2"),
    (_settle(settle_value("a1", "n1", [2, 1])), "a1", 1, "a1 n1 1,2"),
    (_settle(settle_value("a1", "n1", [2, 1])), "a1", 3, None),    # not this slot
    (_settle(settle_value("a1", "n1", [12])), "a1", 1, None),      # 1 is not 12
    (_settle(settle_value("a0", "n1", [2])), "a1", 2, None),       # an earlier attempt's
    (_settle("a1 2"), "a1", 2, None),                              # does not parse
    (_settle(7), "a1", 2, None),
    (document_object(JOB, "progress", progress_json="{}"), "a1", 2, None),
    (None, "a1", 2, None),
])
def test_asked_to_look(obj: Optional[dict[str, Any]], attempt: str, index: int,
                       asked: Optional[str]) -> None:
    """A follower looks at its slot again only when node 0's settle annotation names it in
    its attempt; each settle has a new nonce, so a second one asks again."""
    assert asked_to_look(obj, attempt, index) == asked


def test_settles_differ_by_their_nonce() -> None:
    assert settle_value("a1", "n1", [2]) != settle_value("a1", "n2", [2])


def test_a_follower_watches_its_attempt_and_progress_objects_only() -> None:
    assert follower_selector(JOB) == (
        f"ascend-node.io/job-uid={JOB.uid},ascend-node.io/object in (attempt,progress)")
    pd = JobIdentity("ns", "svc", JOB.uid, "prefill-0")
    assert follower_selector(pd).endswith(",ascend-node.io/instance=prefill-0")
