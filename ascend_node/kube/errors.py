"""What an answer of the API server means to the agent: one exception per decision.

The API server answers a failed call with a `Status` object (k8s.io/apimachinery v0.30.2,
pkg/apis/meta/v1/types.go:746 `Status`: `kind`, `apiVersion`, `status` "Failure",
`message`, `reason`, `details` {name, group, kind, uid, causes, retryAfterSeconds}, `code`;
the constructors in pkg/api/errors/errors.go). Two answers share the code 409 and need
opposite handling, so the reason tells them apart:

- `AlreadyExists` (errors.go `NewAlreadyExists`): a create found the name taken — for
  create-if-absent, "someone was first", read what is there;
- `Conflict` (errors.go `NewConflict`, with k8s.io/apiserver v0.30.2
  pkg/registry/generic/registry/store.go:243 `OptimisticLockErrorMsg`): an update carried a
  `resourceVersion` that is no longer the object's — compare-and-set lost, re-read and decide.

A 403's message is RBAC's (k8s.io/apiserver v0.30.2
pkg/endpoints/handlers/responsewriters/errors.go:51 `forbiddenMessage`: `User "<name>" cannot
<verb> resource "<resource>" in API group "<group>" in the namespace "<ns>"`); the agent's own
line names the call it made and the Role rule that would grant it, since missing RBAC is what
users of API rendezvous meet first. Anything that is no answer at all (refused, reset, timed
out, 429 and 5xx) is `ApiUnanswered`: retryable, exit 4 at the deadline, like a stuck volume.
"""

from __future__ import annotations

import json
import re
from typing import Any, ClassVar, Optional

from ascend_node.errors import AscendNodeError
from ascend_node.kube.resources import Call

_MAX_MESSAGE = 300  # an apiserver message quoted in one line; a longer one is cut, marked


class KubeError(AscendNodeError):
    """The API server refused a call (exit 1): its code, reason and message, and the call."""

    def __init__(self, cause: str, hint: str = "", *, call: Optional[Call] = None,
                 code: int = 0, reason: str = "", message: str = "") -> None:
        super().__init__(cause, hint)
        self.call = call
        self.code = code
        self.reason = reason
        self.message = message


class Unauthorized(KubeError):
    """401: the API server does not accept the token or certificate at all."""


class Forbidden(KubeError):
    """403: RBAC denies this call; the cause names the verb, resource, namespace and rule."""


class NotFound(KubeError):
    """404: the object (or the namespace) does not exist."""


class AlreadyExists(KubeError):
    """409 AlreadyExists: create-if-absent lost — the name is taken."""


class Conflict(KubeError):
    """409 Conflict: compare-and-set lost — the object's resourceVersion moved on."""


class Gone(KubeError):
    """410: a watch's resourceVersion is too old (compacted); list again, then watch."""


class Invalid(KubeError):
    """422: the object was refused by validation (too large, a bad name or label)."""


class ApiUnanswered(KubeError):
    """No usable answer: refused, reset, timed out, 429 or 5xx (exit 4, retryable)."""

    exit_code: ClassVar[int] = 4

    def __init__(self, cause: str, hint: str = "", *, call: Optional[Call] = None,
                 code: int = 0, reason: str = "", message: str = "",
                 retry_after: Optional[float] = None) -> None:
        super().__init__(cause, hint, call=call, code=code, reason=reason, message=message)
        self.retry_after = retry_after


def parse_status(body: bytes) -> dict[str, Any]:
    """The `Status` object of an error answer, or {} when the body is not one (a proxy's
    HTML page, an empty body, cut JSON): the HTTP code alone then decides."""
    try:
        doc = json.loads(body.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        return {}
    if not isinstance(doc, dict) or doc.get("kind") != "Status":
        return {}
    return doc


def _one_line(text: str) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= _MAX_MESSAGE else flat[:_MAX_MESSAGE] + "…"


_USER = re.compile(r'User "([^"]*)" cannot')


def forbidden_line(call: Call, message: str) -> tuple[str, str]:
    """(cause, hint) of a 403 on `call`: one line naming the verb, resource and namespace,
    who was refused (from RBAC's message, when it names the user), and the Role rule that
    grants the call; the hint is the kubectl command that adds it."""
    who = _USER.search(message)
    subject = f" to {who.group(1)}" if who else ""
    cause = (f"the API server forbids {call.describe()}{subject} (403 Forbidden); "
             f"the agent's Role needs the rule {{{call.rule()}}}")
    kubectl_group = f".{call.resource.group}" if call.resource.group else ""
    hint = ("`ascend-node manifest --rendezvous kube` renders that Role and its binding; "
            f"by hand: kubectl -n {call.namespace} create role ascend-node "
            f"--verb={call.verb} --resource={call.resource.plural}{kubectl_group}, "
            "then bind it to the pods' ServiceAccount")
    return cause, hint


def error_for(call: Call, code: int, body: bytes,
              retry_after: Optional[str] = None) -> KubeError:
    """The exception for an answer with HTTP `code` (>= 400) to `call`; pure."""
    status = parse_status(body)
    reason = str(status.get("reason") or "")
    message = _one_line(str(status.get("message") or ""))
    said = f": {message}" if message else ""
    kw: dict[str, Any] = {"call": call, "code": code, "reason": reason, "message": message}
    if code == 401:
        return Unauthorized(
            f"the API server does not accept the agent's credentials for {call.describe()} "
            f"(401 Unauthorized){said}",
            "in a pod: is the ServiceAccount token mounted (automountServiceAccountToken) "
            "and not expired? Outside: check the kubeconfig's user", **kw)
    if code == 403:
        cause, hint = forbidden_line(call, message)
        return Forbidden(cause, hint, **kw)
    if code == 404:
        return NotFound(f"{call.describe()}: not found (404){said}", **kw)
    if code == 409 and reason == "AlreadyExists":
        return AlreadyExists(f"{call.describe()}: already exists (409){said}", **kw)
    if code == 409:
        return Conflict(f"{call.describe()}: changed by another writer (409 Conflict){said}",
                        **kw)
    if code == 410:
        return Gone(f"{call.describe()}: resourceVersion too old (410 Gone){said}", **kw)
    if code == 422:
        causes = (status.get("details") or {}).get("causes") or []
        fields = "; ".join(f"{c.get('field', '?')}: {c.get('message', '')}"
                           for c in causes if isinstance(c, dict))
        detail = _one_line(fields) if fields else message
        return Invalid(f"{call.describe()}: refused by validation (422): {detail}", **kw)
    if code == 429 or code >= 500:
        return ApiUnanswered(
            f"the API server did not serve {call.describe()} ({code} {reason or 'error'})"
            f"{said}", "retried until the deadline", retry_after=_seconds(retry_after, status),
            **kw)
    return KubeError(f"{call.describe()}: the API server answered {code} "
                     f"{reason or 'error'}{said}", **kw)


def _seconds(header: Optional[str], status: dict[str, Any]) -> Optional[float]:
    """Retry-After as seconds (header first, then the Status' retryAfterSeconds)."""
    for value in (header, (status.get("details") or {}).get("retryAfterSeconds")):
        try:
            seconds = float(value) if value is not None else None
        except (TypeError, ValueError):
            continue
        if seconds is not None and 0 <= seconds <= 3600:
            return seconds
    return None
