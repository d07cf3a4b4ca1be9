"""The rendezvous through the Kubernetes API: node 0 and the followers on ConfigMaps.

The same contract as on the volume (docs/rendezvous.md, "Through the Kubernetes API"): the
documents are `models`' own, and every decision is `decide`'s — `choose_attempt` for node 0's
attempt, `evaluate` for its slots, `follower_step` for a follower — read out of the objects
by `kube_docs`. What changes is the store: objects instead of files, every write a create
(the name must be free) or a compare-and-set at the `resourceVersion` read (a 409 is a
re-read and a new decision, never a blind retry), and watches instead of polls
(`kube.mirror`).

Imported only when `--rendezvous kube` is chosen (tests/pod_imports.json): the volume's pods
never load the API client.

An API server that does not answer (`ApiUnanswered`: refused, reset, timed out, 5xx) is a
stuck volume: the role is run again from what the API holds (node 0 reuses its attempt, a
follower finds its slot), progress lines name the server, and at `--timeout` the pod exits 4
naming it. A 403 is one line naming the call and the rule that grants it (exit 1), found by a
rules review before any wait (`kube_docs.first_denied`).
"""

from __future__ import annotations

import logging
import secrets
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, NoReturn, Optional

from ascend_node import __version__
from ascend_node.discover.identity import NodeIdentity, node_name
from ascend_node.errors import ClusterInconsistent, ConfigError, PeerTimeout
from ascend_node.kube.client import Client
from ascend_node.kube.errors import (
    AlreadyExists,
    ApiUnanswered,
    Conflict,
    Forbidden,
    KubeError,
    NotFound,
    forbidden_line,
)
from ascend_node.kube.mirror import Mirror
from ascend_node.kube.resources import CONFIGMAPS, Call
from ascend_node.ranktable import build_rank_table, render_rank_table
from ascend_node.rendezvous import decide, kube_docs
from ascend_node.rendezvous.kube_layout import (
    MAX_PARTS,
    SETTLE_ANNOTATION,
    JobIdentity,
    ObjectRefused,
    document_object,
    follower_selector,
    join_table,
    object_name,
    slot_selector,
    split_table,
    table_part,
    table_part_object,
)
from ascend_node.rendezvous.models import (
    AttemptDoc,
    ConflictDoc,
    FailureDoc,
    MemberData,
    MemberDoc,
    OutcomeDoc,
    ProgressDoc,
    TableRecord,
)
from ascend_node.rendezvous.participant import names_of, progress_line, to_server

if TYPE_CHECKING:
    from ascend_node.discover.health import NodeHealth
    from ascend_node.rendezvous.decide import HealthJudge

log = logging.getLogger("ascend_node.rendezvous")

ABORT_GRACE = 5.0  # as on the volume (`assembler.ABORT_GRACE`)
SETTLE_MARGIN = 2.0  # seconds beyond a progress interval for the asked pods to look
PROGRESS_EVERY = 1.0  # seconds between node 0's progress writes, at most one a second


def _json(doc: Any) -> str:
    return str(doc.model_dump_json())


def get_object(client: Client, name: str) -> Optional[dict[str, Any]]:
    """The ConfigMap `name`, or None when there is none."""
    try:
        return client.get(CONFIGMAPS, name)
    except NotFound:
        return None


def put_object(client: Client, new: dict[str, Any], current: Optional[dict[str, Any]]
               ) -> Optional[dict[str, Any]]:
    """Create `new` where nothing was read, else replace what was read at its version
    (taking over an object that is not this job's the same way): never a blind write.
    None when another writer was first (409): the caller reads again and decides again."""
    try:
        if current is None:
            return client.create(CONFIGMAPS, new)
        new["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"]
        return client.replace(CONFIGMAPS, new)
    except (AlreadyExists, Conflict) as exc:
        log.info("%s; reading it again", exc.cause)
        return None


def publish_failure(client: Client, job: JobIdentity, run_id: str, identity: NodeIdentity,
                    cause: str, wait: float, clock: Callable[[], float] = time.monotonic,
                    sleep: Callable[[float], None] = time.sleep) -> Optional[str]:
    """A follower that failed before the rendezvous (no IP, a tool that failed) leaves a
    failure document in its slot of the current attempt, so node 0 aborts with its cause
    and every pod exits 5 at once instead of 4 at the timeout (as on the volume,
    `failures.publish_failure`). Waits up to `wait` s for an attempt; never raises: the
    local failure is what the user must see. The attempt id used, or None."""
    end = clock() + wait
    slot = object_name(job.scope, "node", identity.global_index)
    try:
        while True:
            client.timeout = max(1.0, min(5.0, end - clock()))
            current = get_object(client, object_name(job.scope, "attempt"))
            attempt, outcome, _ = kube_docs.attempt_state(job, current, run_id)
            if attempt is not None and attempt.conflict is None:
                if outcome is not None:
                    return None
                doc = FailureDoc(run_id=run_id, attempt_id=attempt.attempt_id,
                                 incarnation=identity.incarnation,
                                 global_index=identity.global_index, cause=cause[:2000])
                for _ in range(3):
                    obj = document_object(job, "node", identity.global_index,
                                          slot_json=_json(doc))
                    if put_object(client, obj, get_object(client, slot)) is not None:
                        return attempt.attempt_id
                return None
            if clock() >= end:
                return None
            sleep(0.5)
    except KubeError as exc:
        log.debug("published no failure: %s", exc.cause)
        return None


def node0_failure(client: Client, job: JobIdentity, run_id: str, identity: NodeIdentity,
                  cause: str, deadline: float, clock: Callable[[], float] = time.monotonic,
                  sleep: Callable[[float], None] = time.sleep) -> Optional[str]:
    """Node 0 failed before assembling: open an attempt and abort it with the cause, as on
    the volume (`failures.node0_failure`). It waits the abort grace first, so that peers
    starting with it join the attempt and exit 5 at once (followers that join it are its
    participants). Never raises; the attempt id, or None when nothing was written."""
    name = object_name(job.scope, "attempt")
    try:
        client.timeout = max(1.0, min(5.0, deadline - clock()))
        attempt = AttemptDoc(run_id=run_id, attempt_id=f"{int(time.time())}-"
                             f"{secrets.token_hex(4)}", opened_by=identity.incarnation,
                             node_count=identity.node_count,
                             master_count=identity.master_count,
                             reason="node 0 failed locally", job_version=identity.job_version,
                             job_instance=identity.job_instance)
        written = put_object(client, document_object(job, "attempt",
                                                     attempt_json=_json(attempt)),
                             get_object(client, name))
        if written is None:
            return None
        participants = {identity.incarnation}
        end = min(clock() + ABORT_GRACE, deadline)
        while True:
            found = client.list(CONFIGMAPS, slot_selector(job))
            for obj in found.get("items") or []:
                state = kube_docs.slot_state(job, obj, run_id, attempt.attempt_id)
                if isinstance(state, (MemberDoc, FailureDoc)):
                    participants.add(state.incarnation)
            if len(participants) >= identity.node_count or clock() >= end:
                break
            sleep(0.5)
        outcome = OutcomeDoc(
            run_id=run_id, attempt_id=attempt.attempt_id, result="abort",
            reason=f"{node_name(0, identity.master_count)} failed: {cause[:2000]}",
            nodes=(0,), participants=tuple(sorted(participants)),
            failed_by=identity.incarnation)
        done = put_object(client, document_object(job, "attempt", attempt_json=_json(attempt),
                                                  outcome_json=_json(outcome)), written)
        return attempt.attempt_id if done is not None else None
    except KubeError as exc:
        log.debug("published no failure: %s", exc.cause)
        return None


@dataclass
class KubeRendezvous:
    """One pod's part in the rendezvous through the API; `run` returns the outcome with the
    table's text joined from its parts (byte for byte what node 0 rendered)."""

    client: Client
    job: JobIdentity
    run_id: str
    identity: NodeIdentity
    data: MemberData
    deadline: float
    timeout: float
    progress_interval: float = 10.0
    allow_uneven_devices: bool = False
    table_version: str = "auto"
    health: Optional[NodeHealth] = None
    judge: Optional[HealthJudge] = None
    clock: Callable[[], float] = time.monotonic
    sleep: Callable[[float], None] = time.sleep
    _attempt_obj: Optional[dict[str, Any]] = field(default=None, init=False)
    _last_unanswered: float = field(default=-1e9, init=False)
    # True once the rules review found every call this pod makes allowed (`_check_role`)
    _role_reviewed: bool = field(default=False, init=False)

    # -- who -------------------------------------------------------------------------

    @property
    def index(self) -> int:
        return self.identity.global_index

    @property
    def me(self) -> decide.Me:
        return decide.Me(self.index, self.identity.incarnation, self.data.digest(),
                         self.identity.master_count, self.identity.node_count,
                         self.identity.job_version, self.identity.job_instance)

    def _name(self, kind: str, index: Optional[int] = None) -> str:
        return object_name(self.job.scope, kind, index)

    # -- the run, and an API server that does not answer -------------------------------

    def run(self) -> OutcomeDoc:
        self._check_role()
        while True:
            self._bound_calls()
            try:
                return self._node0() if self.index == 0 else self._follow()
            except ApiUnanswered as exc:
                self._unanswered(exc)
            except Forbidden as exc:
                if not self._role_reviewed:
                    raise
                # The API server itself said the Role grants every call this pod makes
                # (`_check_role`), so this 403 contradicts it: a kube-apiserver just
                # restarted answers 403 until its RBAC caches are filled (seen on the bed,
                # tests/test_kube_rdzv_jobs.py). Retried as a server that does not answer;
                # at the deadline exit 4 names the 403.
                self._unanswered(ApiUnanswered(
                    f"{exc.cause}, though its rules review allowed it (an API server "
                    "restarting answers so until its RBAC caches are filled)", exc.hint,
                    call=exc.call, code=exc.code, reason=exc.reason, message=exc.message))

    def _bound_calls(self) -> None:
        """A call waits at most a progress interval (so a silent server is said every
        interval) and never past the deadline."""
        self.client.timeout = max(1.0, min(10.0, self.progress_interval,
                                           self.deadline - self.clock()))

    def _unanswered(self, exc: ApiUnanswered) -> None:
        """A stuck volume's handling: say so every progress interval, retry until the
        deadline, then exit 4 naming the API server."""
        now = self.clock()
        if now >= self.deadline:
            raise PeerTimeout(
                f"timed out after {self.timeout:g} s: {exc.cause}",
                "check the API server (kube-apiserver) and the pod's network to it; exit 4 "
                "is retryable") from None
        if now - self._last_unanswered >= self.progress_interval:
            self._last_unanswered = now
            log.warning("%s; retrying until the deadline (%.0f s left)", exc.cause,
                        self.deadline - now)
        self.sleep(min(max(exc.retry_after or 1.0, 0.2), 5.0, max(0.0, self.deadline - now)))

    def _check_role(self) -> None:
        """Exit 1 before any wait when the Role lacks a call this pod's role makes."""
        body = {"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectRulesReview",
                "spec": {"namespace": self.job.namespace}}
        call = Call("create", CONFIGMAPS, self.job.namespace)
        while True:
            self._bound_calls()
            try:
                answer = self.client.request(
                    "POST", call, "/apis/authorization.k8s.io/v1/selfsubjectrulesreviews", body)
                break
            except ApiUnanswered as exc:
                self._unanswered(exc)
            except KubeError as exc:  # reviews not allowed here: the calls themselves tell
                log.debug("no rules review (%s); a 403 will name the call", exc.cause)
                return
        rules = kube_docs.review_rules(answer.get("status") or {})
        if isinstance(rules, str):
            log.debug("%s; a 403 will name the call", rules)
            return
        denied = kube_docs.first_denied(
            rules, kube_docs.needed_calls(self.job.scope, self.index, self.identity.node_count))
        if denied is not None:
            verb, name = denied
            denied_call = Call(verb, CONFIGMAPS, self.job.namespace, name)
            cause, hint = forbidden_line(denied_call, "")
            raise Forbidden(cause.replace("(403 Forbidden)", "(its Role, checked before the "
                                          "rendezvous)"), hint, call=denied_call)
        self._role_reviewed = True

    # -- reads and guarded writes ------------------------------------------------------

    def _get(self, name: str) -> Optional[dict[str, Any]]:
        return get_object(self.client, name)

    def _put(self, new: dict[str, Any], current: Optional[dict[str, Any]]
             ) -> Optional[dict[str, Any]]:
        return put_object(self.client, new, current)

    def _member_doc(self, attempt_id: str, contested: bool) -> MemberDoc:
        return MemberDoc(
            run_id=self.run_id, attempt_id=attempt_id, incarnation=self.identity.incarnation,
            node_count=self.identity.node_count, master_count=self.identity.master_count,
            agent_version=__version__, data=self.data, job_version=self.identity.job_version,
            contested=contested, health=self.health)

    def _publish(self, attempt_id: str) -> None:
        """This pod's member document into its slot: created, or over what is there at the
        version read (marked `contested` when that was another live pod's of this attempt)."""
        name = self._name("node", self.index)
        while True:
            current = self._get(name)
            state = kube_docs.slot_state(self.job, current, self.run_id, attempt_id)
            contested = (isinstance(state, (MemberDoc, FailureDoc))
                         and state.incarnation != self.identity.incarnation)
            obj = document_object(self.job, "node", self.index,
                                  slot_json=_json(self._member_doc(attempt_id, contested)))
            if self._put(obj, current) is not None:
                log.info("published %s into attempt %s", self.identity.name, attempt_id)
                return

    def _table_text(self, outcome: OutcomeDoc) -> str:
        """The table's text from its parts, checked against the outcome's sha256."""
        first = self._get(self._name("table", 0))
        if first is None:
            raise ObjectRefused(f"ConfigMap {self._name('table', 0)} is missing")
        said = str((first.get("data") or {}).get("parts", ""))
        count = int(said) if said.isdigit() and 0 < int(said) <= MAX_PARTS else 1
        sha = outcome.ranktable_sha256
        parts: list[Optional[bytes]] = [
            table_part(self.job, first, 0, outcome.attempt_id, sha, count)]
        for k in range(1, count):
            obj = self._get(self._name("table", k))
            parts.append(None if obj is None else table_part(
                self.job, obj, k, outcome.attempt_id, outcome.ranktable_sha256, count))
        return join_table(parts, outcome.ranktable_sha256)

    def _with_table(self, outcome: OutcomeDoc) -> OutcomeDoc:
        try:
            text = self._table_text(outcome)
        except ObjectRefused as exc:
            raise ClusterInconsistent(
                f"attempt {outcome.attempt_id}'s table cannot be read: {exc}",
                "restart the whole job; exit 5 is not retryable") from None
        full = outcome.model_copy(update={"ranktable_text": text})
        problem = decide.verify_table_holds(full, self.data, self.identity.master_count)
        if problem is not None:
            raise ClusterInconsistent(problem, "restart the whole job; exit 5 is not retryable")
        return full

    # -- node 0 ------------------------------------------------------------------------

    def _node0(self) -> OutcomeDoc:
        attempt_id, outcome = self._open_or_reuse()
        if outcome is not None:
            if outcome.result == "abort":
                raise ClusterInconsistent(f"attempt {attempt_id} was aborted: {outcome.reason}",
                                          "restart the whole job; exit 5 is not retryable")
            log.info("attempt %s is already complete; reusing its table", attempt_id)
            return self._with_table(outcome)
        own = kube_docs.slot_state(self.job, self._get(self._name("node", 0)), self.run_id,
                                   attempt_id)
        if not (isinstance(own, MemberDoc) and own.incarnation == self.identity.incarnation
                and own.data.digest() == self.data.digest()):
            self._publish(attempt_id)
        return self._wait_for_members(attempt_id)

    def _open_or_reuse(self) -> tuple[str, Optional[OutcomeDoc]]:
        while True:
            current = self._get(self._name("attempt"))
            attempt, outcome, refused = kube_docs.attempt_state(self.job, current, self.run_id)
            if refused:
                log.warning("ignoring %s", refused)
            outdated: list[int] = []
            if attempt is not None and outcome is not None and outcome.result == "table":
                slots = self._slots(attempt.attempt_id)
                outdated = [r.global_index for r in outcome.members
                            if r.global_index not in (0,)
                            and isinstance(slots.get(r.global_index), MemberDoc)
                            and slots[r.global_index].data.digest() != r.digest]  # type: ignore[union-attr]
            choice = decide.choose_attempt(
                attempt, outcome, self.identity.incarnation, self.data.digest(),
                self.identity.node_count, self.identity.master_count, outdated,
                self.identity.job_version, self.identity.job_instance)
            if isinstance(choice, decide.Leftover):
                raise ConfigError(f"{choice.reason}: a leftover pod of an earlier start of the "
                                  "job", "this pod should have been replaced; delete it or "
                                  "restart the job")
            if isinstance(choice, decide.Reuse):
                if attempt is not None and attempt.conflict is not None:
                    raise ClusterInconsistent(
                        f"attempt {attempt.attempt_id} ended in a conflict: {attempt.conflict}",
                        "restart the whole job; exit 5 is not retryable")
                self._attempt_obj = current
                return choice.attempt_id, outcome
            attempt_id = f"{int(time.time())}-{secrets.token_hex(4)}"
            doc = AttemptDoc(run_id=self.run_id, attempt_id=attempt_id,
                             opened_by=self.identity.incarnation,
                             node_count=self.identity.node_count,
                             master_count=self.identity.master_count, reason=choice.reason,
                             job_version=self.identity.job_version,
                             job_instance=self.identity.job_instance)
            written = self._put(document_object(self.job, "attempt", attempt_json=_json(doc)),
                                current)
            if written is not None:
                self._attempt_obj = written
                log.info("opened attempt %s (%s)", attempt_id, choice.reason)
                return attempt_id, None

    def _slots(self, attempt_id: str,
               objects: Optional[dict[str, dict[str, Any]]] = None) -> dict[int, decide.SlotState]:
        if objects is None:
            found = self.client.list(CONFIGMAPS, self._slot_selector())
            objects = {o["metadata"]["name"]: o for o in found.get("items") or []}
        return {g: kube_docs.slot_state(self.job, objects.get(self._name("node", g)),
                                        self.run_id, attempt_id)
                for g in range(self.identity.node_count)}

    def _slot_selector(self) -> str:
        return slot_selector(self.job)

    def _tick(self) -> int:
        return max(1, int(min(self.progress_interval, max(1.0, self.deadline - self.clock()))))

    def _wait_for_members(self, attempt_id: str) -> OutcomeDoc:
        mirror = Mirror(self.client, CONFIGMAPS, label_selector=self._slot_selector(),
                        tick=self._tick())
        last_log = -1e9
        last_progress: Optional[tuple[tuple[int, ...], tuple[int, ...]]] = None
        progress_obj: Optional[dict[str, Any]] = self._get(self._name("progress"))
        abort_since: Optional[float] = None
        settled: Optional[tuple[MemberDoc, ...]] = None
        last_written = -1e9
        for _change in mirror.changes():
            mirror.tick = self._tick()
            slots = self._slots(attempt_id, mirror.objects)
            verdict = decide.evaluate(slots, self.identity.node_count,
                                      self.identity.master_count, self.allow_uneven_devices,
                                      self.identity.job_version, self.table_version, self.judge)
            if isinstance(verdict, decide.Complete):
                if settled == verdict.members or not any(m.contested
                                                         for m in verdict.members):
                    return self._complete(attempt_id, verdict.members, verdict.warnings)
                # A contested slot (its pod found another pod's document there: a twin, or
                # a re-created pod's predecessor): ask the other pod to look at its slot
                # (the settle annotation on the progress object, which every follower
                # watches) and leave a conflict document, and complete only if nothing
                # changed meanwhile (the volume's settle pass, `assembler.SETTLE_POLLS`).
                settled = verdict.members
                progress_obj = self._ask_to_look(attempt_id, verdict.members, progress_obj)
                self.sleep(max(0.0, min(self.progress_interval + SETTLE_MARGIN,
                                        self.deadline - self.clock())))
                # Afresh: the watch may have ended while node 0 slept, and what was
                # written since would only come with the next one.
                mirror.relist()
                again = decide.evaluate(self._slots(attempt_id, mirror.objects),
                                        self.identity.node_count, self.identity.master_count,
                                        self.allow_uneven_devices, self.identity.job_version,
                                        self.table_version, self.judge)
                if isinstance(again, decide.Complete) and again.members == settled:
                    return self._complete(attempt_id, again.members, again.warnings)
                continue
            settled = None
            if isinstance(verdict, decide.Abort):
                now = self.clock()
                if abort_since is None:
                    abort_since = now
                    log.error("cluster is inconsistent: %s", verdict.reason)
                everyone = all(isinstance(s, (MemberDoc, FailureDoc, ConflictDoc))
                               for s in slots.values())
                if everyone or now - abort_since >= ABORT_GRACE or now >= self.deadline:
                    self._abort(attempt_id, verdict, slots)
                continue
            abort_since = None
            key = (verdict.present, verdict.missing)
            now = self.clock()
            if key != last_progress and now - last_written >= PROGRESS_EVERY:
                # At most one write a second: at 1,024 pods arriving one by one, not one
                # write per arrival (a TICK comes back for the last change, `_tick`).
                last_progress, last_written = key, now
                doc = ProgressDoc(run_id=self.run_id, attempt_id=attempt_id,
                                  node_count=self.identity.node_count,
                                  present=verdict.present, missing=verdict.missing)
                written = self._put(document_object(self.job, "progress",
                                                     progress_json=_json(doc)), progress_obj)
                progress_obj = written or self._get(self._name("progress"))
                if written is None:
                    last_progress = None  # lost the race with a twin: write it next time
            if now - last_log >= self.progress_interval:
                last_log = now
                log.info("%s", progress_line(verdict.present, verdict.missing,
                                             self.identity.master_count,
                                             self.identity.node_count))
            if now >= self.deadline:
                invalid = "".join(f"; {node_name(i, self.identity.master_count)}'s slot is "
                                  f"unusable: {reason}"
                                  for i, reason in sorted(verdict.invalid.items()))
                raise PeerTimeout(
                    f"timed out after {self.timeout:g} s waiting for peers: "
                    f"{len(verdict.missing)} of {self.identity.node_count} missing: "
                    f"{names_of(verdict.missing, self.identity.master_count)}{invalid}",
                    "check that those pods are running and that their ServiceAccount can "
                    "reach the API server; exit 4 is retryable")
        raise AssertionError("the mirror's changes never end")  # pragma: no cover

    def _ask_to_look(self, attempt_id: str, members: tuple[MemberDoc, ...],
                     progress_obj: Optional[dict[str, Any]]) -> Optional[dict[str, Any]]:
        """The progress object again, every pod present, with the settle annotation naming
        the contested slots (a new nonce each time: always a change the watch delivers).
        A follower no longer re-reads its slot every progress interval (issue 38: a
        waiting pod's cost); it looks when asked. The progress object as written, or as
        read after a lost race."""
        contested = [m.data.global_index for m in members if m.contested]
        doc = ProgressDoc(run_id=self.run_id, attempt_id=attempt_id,
                          node_count=self.identity.node_count,
                          present=tuple(sorted(m.data.global_index for m in members)),
                          missing=())
        for _ in range(3):
            obj = document_object(self.job, "progress", progress_json=_json(doc))
            obj["metadata"]["annotations"] = {SETTLE_ANNOTATION: kube_docs.settle_value(
                attempt_id, secrets.token_hex(4), contested)}
            written = self._put(obj, progress_obj)
            if written is not None:
                log.info("slot(s) %s contested: asked their pods to look before completing",
                         ",".join(map(str, contested)))
                return written
            progress_obj = self._get(self._name("progress"))
        return progress_obj

    def _complete(self, attempt_id: str, members: tuple[MemberDoc, ...],
                  warnings: tuple[str, ...]) -> OutcomeDoc:
        table = build_rank_table([to_server(m.data) for m in members], self.table_version)
        text = render_rank_table(table)
        sha, parts = split_table(text)
        for k, blob in enumerate(parts):
            name = self._name("table", k)
            while self._put(table_part_object(self.job, k, attempt_id, sha, len(parts), blob),
                            self._get(name)) is None:
                pass
        outcome = OutcomeDoc(
            run_id=self.run_id, attempt_id=attempt_id, result="table",
            members=tuple(TableRecord(global_index=m.data.global_index,
                                      incarnation=m.incarnation, digest=m.data.digest())
                          for m in members),
            ranktable_sha256=sha, warnings=tuple(w[:2000] for w in warnings[:64]))
        self._write_outcome(attempt_id, outcome)
        log.info("all %d nodes present; table of attempt %s published", len(members),
                 attempt_id)
        return self._with_table(outcome)

    def _write_outcome(self, attempt_id: str, outcome: OutcomeDoc) -> None:
        """The outcome beside the attempt, at the version node 0 last read: if anything
        changed the attempt object since, read it again — still this attempt, with no
        outcome: write again; anything else: another writer (exit 5)."""
        current = self._attempt_obj
        while True:
            attempt, found, refused = kube_docs.attempt_state(self.job, current, self.run_id)
            if attempt is None or attempt.attempt_id != attempt_id or (
                    found is not None and found != outcome):
                raise ClusterInconsistent(
                    f"ConfigMap {self._name('attempt')} changed under node 0 while it "
                    f"completed attempt {attempt_id}: "
                    f"{refused or 'another attempt or verdict'} (a twin node 0, or another "
                    "writer)", "restart the whole job; exit 5 is not retryable")
            obj = document_object(self.job, "attempt", attempt_json=_json(attempt),
                                  outcome_json=_json(outcome))
            written = self._put(obj, current)
            if written is not None:
                self._attempt_obj = written
                return
            current = self._get(self._name("attempt"))

    def _abort(self, attempt_id: str, verdict: decide.Abort,
               slots: dict[int, decide.SlotState]) -> NoReturn:
        participants = tuple(s.incarnation for s in slots.values()
                             if isinstance(s, (MemberDoc, FailureDoc)))
        self._write_outcome(attempt_id, OutcomeDoc(
            run_id=self.run_id, attempt_id=attempt_id, result="abort",
            reason=verdict.reason[:8000], nodes=tuple(verdict.nodes),
            participants=participants, failed_by=verdict.failed_by))
        raise ClusterInconsistent(verdict.reason, "fix the cause, then restart the whole job; "
                                  "exit 5 is not retryable")

    # -- followers ---------------------------------------------------------------------

    def _follow(self) -> OutcomeDoc:
        name = self._name("attempt")
        mirror = Mirror(self.client, CONFIGMAPS, label_selector=follower_selector(self.job),
                        tick=self._tick())
        looked: Optional[str] = None
        published_in: Optional[str] = None
        last_log = -1e9
        seen: Optional[str] = None
        my_state: decide.SlotState = None
        action: decide.FollowerAction = decide.WaitAttempt("node 0 has not opened an attempt yet")
        attempt: Optional[AttemptDoc] = None
        for _change in mirror.changes():
            mirror.tick = self._tick()
            current = mirror.objects.get(name)
            version = None if current is None else current["metadata"].get("resourceVersion")
            # A pod that has published looks at its slot again when node 0 asks (it settles
            # a contested slot: a twin that overwrote it is found then), not every interval.
            ask = (None if published_in is None else kube_docs.asked_to_look(
                mirror.objects.get(self._name("progress")), published_in, self.index))
            if version != seen or (ask is not None and ask != looked):
                seen, looked = version, ask or looked
                attempt, outcome, refused = kube_docs.attempt_state(self.job, current,
                                                                    self.run_id)
                if refused:
                    log.warning("ignoring %s", refused)
                if attempt is not None:
                    my_state = kube_docs.slot_state(
                        self.job, self._get(self._name("node", self.index)), self.run_id,
                        attempt.attempt_id)
                action = decide.follower_step(attempt, outcome, my_state, self.me, published_in)
                if isinstance(action, decide.Publish):
                    self._publish(action.attempt_id)
                    published_in = action.attempt_id
                    my_state = self._member_doc(action.attempt_id, False)
                    action = decide.WaitTable(action.attempt_id)
                elif isinstance(action, decide.Done):
                    return self._with_table(action.outcome)
                elif isinstance(action, decide.Fail):
                    raise ClusterInconsistent(action.reason, "fix the cause, then restart the "
                                              "whole job; exit 5 is not retryable")
                elif isinstance(action, decide.Conflict):
                    self._declare_conflict(action)
                    raise ClusterInconsistent(
                        f"two live pods claim {self.identity.name} (incarnations "
                        f"{self.identity.incarnation}, {action.other})",
                        "find the second pod with this index; restart the whole job")
            now = self.clock()
            if now - last_log >= self.progress_interval:
                last_log = now
                log.info("%s", self._waiting_line(action, attempt, mirror))
            if now >= self.deadline:
                raise PeerTimeout(
                    f"timed out after {self.timeout:g} s: "
                    f"{self._waiting_line(action, attempt, mirror)}",
                    "check node 0's pod and the pods named; exit 4 is retryable")
        raise AssertionError("the mirror's changes never end")  # pragma: no cover

    def _declare_conflict(self, action: decide.Conflict) -> None:
        """Leave a conflict document in the slot (at the version read), naming both pods:
        node 0 then aborts the attempt, and every pod exits 5 (as on the volume)."""
        name = self._name("node", self.index)
        doc = ConflictDoc(run_id=self.run_id, attempt_id=action.attempt_id,
                          global_index=self.index,
                          incarnations=tuple(sorted({self.identity.incarnation, action.other})))
        for _ in range(3):
            obj = document_object(self.job, "node", self.index, slot_json=_json(doc))
            if self._put(obj, self._get(name)) is not None:
                return

    def _waiting_line(self, action: decide.FollowerAction,
                      attempt: Optional[AttemptDoc], mirror: Mirror) -> str:
        if isinstance(action, decide.WaitAttempt):
            return f"waiting for {node_name(0, self.identity.master_count)}: {action.reason}"
        if attempt is None:
            return "waiting for node 0 to open an attempt"
        progress = kube_docs.progress_state(self.job, mirror.objects.get(self._name("progress")),
                                            self.run_id, attempt.attempt_id)
        if progress is None:
            return (f"waiting for the table of attempt {attempt.attempt_id} "
                    f"(node 0 has published no progress)")
        return (f"waiting for the table of attempt {attempt.attempt_id}: "
                + progress_line(progress.present, progress.missing,
                                self.identity.master_count, self.identity.node_count))
