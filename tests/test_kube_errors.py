"""What each answer of the API server becomes (ascend_node/kube/errors.py): pure, by table.

The bodies are `Status` objects in the API server's shape (k8s.io/apimachinery v0.30.2,
pkg/apis/meta/v1/types.go:746) or what a proxy in front of it may send instead."""

from __future__ import annotations

import json
from typing import Optional

import pytest

from ascend_node.kube.errors import (
    AlreadyExists,
    ApiUnanswered,
    Conflict,
    Forbidden,
    KubeError,
    error_for,
    forbidden_line,
    parse_status,
)
from ascend_node.kube.resources import CONFIGMAPS, Call, Resource

CALL = Call("update", CONFIGMAPS, "team-a", "job-x-attempt")


def body(code: int, reason: str, message: str = "m", **details: object) -> bytes:
    return json.dumps({"kind": "Status", "apiVersion": "v1", "metadata": {},
                       "status": "Failure", "message": message, "reason": reason,
                       "details": details, "code": code}).encode()


@pytest.mark.parametrize(("raw", "parsed"), [
    (body(409, "Conflict"), "Conflict"),
    (b"<html><body>502 Bad Gateway</body></html>", None),
    (b"", None),
    (b'{"kind": "Status", "reason": "Forb', None),
    (b'{"kind": "ConfigMap"}', None),
    (b"\xff\xfe", None),
    (b"[1]", None),
])
def test_only_a_status_object_is_read_as_one(raw: bytes, parsed: Optional[str]) -> None:
    assert parse_status(raw).get("reason") == parsed


@pytest.mark.parametrize(("code", "raw", "expected"), [
    (409, body(409, "AlreadyExists"), AlreadyExists),
    (409, body(409, "Conflict"), Conflict),
    (409, b"", Conflict),  # no reason: a 409 on an update is the version check
    (403, b"<html>denied by a proxy</html>", Forbidden),
    (502, b"<html>Bad Gateway</html>", ApiUnanswered),
    (503, body(503, "ServiceUnavailable"), ApiUnanswered),
    (400, body(400, "BadRequest", "bad selector"), KubeError),
])
def test_the_code_and_reason_decide(code: int, raw: bytes, expected: type[KubeError]) -> None:
    err = error_for(CALL, code, raw)
    assert type(err) is expected
    assert 'update configmaps "job-x-attempt" in namespace "team-a"' in str(err)


@pytest.mark.parametrize(("header", "details", "seconds"), [
    ("3", {}, 3.0),
    (None, {"retryAfterSeconds": 7}, 7.0),
    ("soon", {"retryAfterSeconds": 2}, 2.0),
    ("-1", {}, None),
    ("99999", {}, None),
])
def test_retry_after(header: Optional[str], details: dict[str, int],
                     seconds: Optional[float]) -> None:
    err = error_for(CALL, 429, body(429, "TooManyRequests", **details), header)
    assert isinstance(err, ApiUnanswered) and err.retry_after == seconds


def test_a_long_or_multi_line_message_stays_one_line() -> None:
    err = error_for(CALL, 400, body(400, "BadRequest", "line one\nline two " + "x" * 1000))
    assert "\n" not in str(err)
    assert "line one line two" in str(err) and str(err).endswith("…")


@pytest.mark.parametrize(("call", "rule", "kubectl"), [
    (Call("get", Resource("", "v1", "pods", "Pod"), "ns1", "me"),
     'apiGroups: [""], resources: ["pods"], verbs: ["get"]', "--verb=get --resource=pods,"),
    (Call("update", Resource("coordination.k8s.io", "v1", "leases", "Lease"), "ns1"),
     'apiGroups: ["coordination.k8s.io"], resources: ["leases"], verbs: ["update"]',
     "--verb=update --resource=leases.coordination.k8s.io,"),
])
def test_the_403_line_names_the_rule_in_the_resources_group(call: Call, rule: str,
                                                            kubectl: str) -> None:
    cause, hint = forbidden_line(call, "")  # RBAC's message may be cut by a proxy: no user
    assert rule in cause and f'in namespace "{call.namespace}"' in cause
    assert " to " not in cause.split("(403")[0]
    assert kubectl in hint and f"kubectl -n {call.namespace} create role" in hint
