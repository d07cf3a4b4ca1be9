"""The volume's documents read out of the rendezvous' ConfigMaps, and the Role checked
before any wait. Pure: the objects come in as the API server's JSON, and what comes out is
what `decide` already takes (`SlotState`, `AttemptDoc`, `OutcomeDoc`), so the decisions of
the rendezvous through the API are the volume's, word for word (docs/rendezvous.md,
"Through the Kubernetes API").

Why a rules review before the first call: a follower's first write (its slot) comes only
once node 0 has opened an attempt, so a Role without `create` or `update` would otherwise
show up minutes into the wait, or never on that pod. One `SelfSubjectRulesReview` (allowed
to every authenticated user by the default ClusterRole `system:basic-user`,
https://kubernetes.io/docs/reference/access-authn-authz/rbac/#discovery-roles) lists what the
ServiceAccount may do in the namespace; `first_denied` finds the first call of this pod's
role that no rule allows, and the pod exits 1 naming it, before it waits for anyone.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Optional, Union

from pydantic import TypeAdapter, ValidationError

from ascend_node.rendezvous import decide
from ascend_node.rendezvous.kube_layout import (
    MAX_PARTS,
    SETTLE_ANNOTATION,
    JobIdentity,
    ObjectRefused,
    object_name,
    read_document,
)
from ascend_node.rendezvous.models import AttemptDoc, OutcomeDoc, ProgressDoc, SlotDoc


def _problem(exc: ValidationError) -> str:
    err = exc.errors()[0]
    where = ".".join(str(p) for p in err["loc"]) or "document"
    return f"fails validation at {where}: {err['msg']}"


def attempt_state(job: JobIdentity, obj: Optional[Mapping[str, Any]], run_id: str
                  ) -> tuple[Optional[AttemptDoc], Optional[OutcomeDoc], Optional[str]]:
    """(attempt, its outcome, why the object was not taken) of the attempt object. An
    object that is not this job's, or not the layout, or whose documents do not validate,
    is no attempt at all (node 0 then opens one over it, at the version it read), as an
    unreadable attempt.json is on the volume. An outcome of another attempt is ignored."""
    if obj is None:
        return None, None, None
    try:
        attempt_text = read_document(job, obj, "attempt", "attempt.json")
        outcome_text = read_document(job, obj, "attempt", "outcome.json")
    except ObjectRefused as exc:
        return None, None, str(exc)
    if attempt_text is None:
        return None, None, f"ConfigMap {object_name(job.scope, 'attempt')} holds no attempt.json"
    try:
        attempt = AttemptDoc.model_validate_json(attempt_text)
        outcome = (None if outcome_text is None
                   else OutcomeDoc.model_validate_json(outcome_text))
    except ValidationError as exc:
        return None, None, f"ConfigMap {object_name(job.scope, 'attempt')}: {_problem(exc)}"
    if attempt.run_id != run_id:
        return None, None, (f"ConfigMap {object_name(job.scope, 'attempt')} belongs to run "
                            f"{attempt.run_id!r}, not {run_id!r}")
    if outcome is not None and (outcome.attempt_id != attempt.attempt_id
                                or outcome.run_id != run_id):
        outcome = None
    return attempt, outcome, None


_SLOT: TypeAdapter[Any] = TypeAdapter(SlotDoc)


def slot_state(job: JobIdentity, obj: Optional[Mapping[str, Any]], run_id: str,
               attempt_id: str) -> decide.SlotState:
    """A node's slot as `decide` takes it: None (no object, or a slot of another attempt:
    stale state is never assembled), the reason it is unusable, or the document."""
    if obj is None:
        return None
    try:
        text = read_document(job, obj, "node", "slot.json")
    except ObjectRefused as exc:
        return str(exc)
    if text is None:
        return None
    try:
        doc = _SLOT.validate_json(text)
    except ValidationError as exc:
        return f"slot.json {_problem(exc)}"
    if doc.run_id != run_id:
        return f"slot.json belongs to run {doc.run_id!r}, not {run_id!r}"
    if doc.attempt_id != attempt_id:
        return None  # an earlier attempt's: this node has not joined the current one yet
    return doc  # type: ignore[no-any-return]


def progress_state(job: JobIdentity, obj: Optional[Mapping[str, Any]], run_id: str,
                   attempt_id: str) -> Optional[ProgressDoc]:
    """Node 0's progress document of this attempt, or None."""
    if obj is None:
        return None
    try:
        text = read_document(job, obj, "progress", "progress.json")
        doc = None if text is None else ProgressDoc.model_validate_json(text)
    except (ObjectRefused, ValidationError):
        return None
    if doc is None or doc.run_id != run_id or doc.attempt_id != attempt_id:
        return None
    return doc


def settle_value(attempt_id: str, nonce: str, indexes: Sequence[int]) -> str:
    """The settle annotation node 0 writes on the progress object: a new nonce each time,
    so that every settle is a change the followers' watch delivers."""
    return f"{attempt_id} {nonce} {','.join(str(g) for g in sorted(indexes))}"


def asked_to_look(obj: Optional[Mapping[str, Any]], attempt_id: str, index: int
                  ) -> Optional[str]:
    """The settle annotation on the progress object `obj` when it asks slot `index` of
    attempt `attempt_id` to be looked at again (its value: the caller looks once per
    value), else None. Whatever does not parse asks nothing: the slot's pod then finds a
    twin only if node 0 asks, and node 0 completes or aborts on what the slots hold."""
    if obj is None:
        return None
    value = ((obj.get("metadata") or {}).get("annotations") or {}).get(SETTLE_ANNOTATION)
    if not isinstance(value, str):
        return None
    fields = value.split(" ")
    if len(fields) != 3 or fields[0] != attempt_id:
        return None
    return value if str(index) in fields[2].split(",") else None


# -- the Role, checked before any wait -----------------------------------------------------

Needed = tuple[str, Optional[str]]  # (verb, object name; None: every ConfigMap, a selector)


def needed_calls(job: str, index: int, node_count: int) -> list[Needed]:
    """Every call on configmaps this pod's role makes, in the order it first makes them.
    Node 0: its attempt, slot, parts and progress; it lists and watches the slots by label.
    A follower: the attempt and progress objects (listed and watched by label,
    `follower_selector`), its own slot, the table's parts (read by name)."""
    attempt = object_name(job, "attempt")
    slot = object_name(job, "node", index)
    if index == 0:
        parts = [object_name(job, "table", k) for k in range(MAX_PARTS)]
        return ([("get", attempt), ("create", None), ("update", attempt), ("get", slot),
                 ("update", slot), ("list", None), ("watch", None)]
                + [("get", p) for p in parts] + [("update", p) for p in parts]
                + [("get", object_name(job, "progress")),
                   ("update", object_name(job, "progress"))])
    return [("list", None), ("watch", None), ("get", slot), ("create", None),
            ("update", slot), ("get", object_name(job, "table", 0))]


def _allows(rule: Mapping[str, Any], verb: str, name: Optional[str]) -> bool:
    def has(key: str, value: str) -> bool:
        got = rule.get(key) or []
        return isinstance(got, list) and (value in got or "*" in got)

    if not (has("verbs", verb) and has("apiGroups", "") and has("resources", "configmaps")):
        return False
    names = rule.get("resourceNames") or []
    if not names:
        return True
    # A rule with names allows only calls on one of them; RBAC never lets `create` or a
    # list of every object through one (resourceNames cannot restrict them).
    return name is not None and verb not in ("create",) and name in names


def first_denied(rules: Sequence[Mapping[str, Any]], needed: Sequence[Needed]
                 ) -> Optional[Needed]:
    """The first needed call no rule of a `SelfSubjectRulesReview`'s `resourceRules`
    allows (RBAC is a union of allows: one allowing rule is enough), or None."""
    for verb, name in needed:
        if not any(_allows(rule, verb, name) for rule in rules if isinstance(rule, Mapping)):
            return verb, name
    return None


def review_rules(status: Mapping[str, Any]) -> Union[list[Mapping[str, Any]], str]:
    """The resource rules of a review's answer, or why they cannot be relied on (an
    authorizer other than RBAC may answer `incomplete`: then nothing is concluded)."""
    if status.get("incomplete"):
        return f"the rules review is incomplete ({status.get('evaluationError') or 'no reason'})"
    rules = status.get("resourceRules")
    if not isinstance(rules, list):
        return "the rules review holds no resourceRules"
    return [r for r in rules if isinstance(r, Mapping)]
