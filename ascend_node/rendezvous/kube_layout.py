"""The rendezvous' objects in the Kubernetes API: names, ownership, encoding, the table's
parts, and the Role that allows exactly the calls they need. Pure; the design and its reasons
are in docs/rendezvous.md, "Through the Kubernetes API".

On a pod's path only behind `--rendezvous kube` (`rendezvous/kube_participant.py`; a volume
pod's imports are pinned in tests/pod_imports.json); `manifest` renders the Role from it.

Facts relied on (each cited where used): Volcano v1.10.0 gives every pod of a vcjob the
annotations `volcano.sh/job-name` and `scheduling.k8s.io/group-name` = `<job name>-<job uid>`
(pkg/controllers/job/job_controller_util.go:106-108) and an ownerReference to the vcjob
(:51-53, `batch.volcano.sh/v1alpha1` `Job`); a ConfigMap holds at most 1 MiB of values
(k8s v1.30.2 pkg/apis/core/validation/validation.go:6644-6665, `MaxSecretSize`); RBAC's
`resourceNames` cannot restrict `create` (https://kubernetes.io/docs/reference/access-authn-authz/rbac/#referring-to-resources).
"""

from __future__ import annotations

import base64
import hashlib
import re
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Optional

from ascend_node.errors import ConfigError

JOB_API_VERSION = "batch.volcano.sh/v1alpha1"  # volcano.sh/apis v1.10.0 helpers.go:48
JOB_KIND = "Job"
MANAGED_BY = "app.kubernetes.io/managed-by"
JOB_UID_LABEL = "ascend-node.io/job-uid"
JOB_NAME_LABEL = "ascend-node.io/job-name"
OBJECT_LABEL = "ascend-node.io/object"
NODE_LABEL = "ascend-node.io/node"
PART_LABEL = "ascend-node.io/part"
# On the progress object while node 0 settles a contested set: "<attempt> <nonce> <g,...>",
# the slots whose pods must look at them again (`kube_docs.asked_to_look`).
SETTLE_ANNOTATION = "ascend-node.io/settle"

# The downward API's view of Volcano's annotations (the manifest maps them; job_controller_util.go).
JOB_NAME_ENV = "ASCEND_NODE_JOB_NAME"      # metadata.annotations['volcano.sh/job-name']
PD_TASK_ENV = "ASCEND_NODE_PD_TASK"        # pd.roles.TASK_ENV (rendezvous imports no pd)
POD_GROUP_ENV = "ASCEND_NODE_POD_GROUP"    # metadata.annotations['scheduling.k8s.io/group-name']

CONFIGMAP_LIMIT = 1 << 20      # validation.go: the sum of data and binaryData values
PART_BYTES = 768 << 10         # one table part: room below the limit for the other keys
MAX_TABLE_TEXT = 64 << 20      # a table larger than this after gunzip is refused (a bomb)
SUMMARY_BYTES = 64 << 10       # a pod's timeline summary (report.record.MAX_SUMMARY_BYTES)
MAX_PARTS = 8                  # 6 MiB of gzip: ~90 MiB of table; a Role names each part
KINDS = ("attempt", "node", "table", "progress")

_UUID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


INSTANCE_LABEL = "ascend-node.io/instance"
_INSTANCE = re.compile(r"^(prefill|decode)-(0|[1-9][0-9]{0,3})$")  # pd.roles' server tasks


@dataclass(frozen=True)
class JobIdentity:
    """The vcjob whose pods meet: its namespace, name and uid; and, in a PD service (one
    vcjob, one rendezvous per prefill or decode instance, docs/pd.md), the instance's task.

    `scope` is what object names start with: the job's name, or `<job>.<task>` for an
    instance. A vcjob name is a DNS label (no '.', `check_job_name`), so no instance's
    names can be another job's (`svc.prefill-0-rdzv-attempt` is never the names of a vcjob
    `svc-prefill-0`), while a ConfigMap name, a DNS subdomain, may hold the dot."""

    namespace: str
    name: str
    uid: str
    instance: str = ""

    def __post_init__(self) -> None:
        if self.instance and not _INSTANCE.match(self.instance):
            raise ValueError(f"{self.instance!r} is not a PD instance's task")

    @property
    def scope(self) -> str:
        return f"{self.name}.{self.instance}" if self.instance else self.name


def slot_selector(job: JobIdentity) -> str:
    """The label selector of this job's (this instance's) slot objects."""
    return (f"{JOB_UID_LABEL}={job.uid},{OBJECT_LABEL}=node"
            + (f",{INSTANCE_LABEL}={job.instance}" if job.instance else ""))


def follower_selector(job: JobIdentity) -> str:
    """The label selector a waiting follower watches: this job's (this instance's) attempt
    and progress objects. One watch brings the attempt's changes, node 0's progress (the
    follower's progress line, no read of its own) and node 0's call to look at a contested
    slot (`SETTLE_ANNOTATION`), so a waiting pod costs one watch per progress interval."""
    return (f"{JOB_UID_LABEL}={job.uid},{OBJECT_LABEL} in (attempt,progress)"
            + (f",{INSTANCE_LABEL}={job.instance}" if job.instance else ""))


def job_identity(env: Mapping[str, str], namespace: str) -> JobIdentity:
    """The vcjob of this pod from Volcano's own annotations, as the manifest maps them into
    the environment: the name, and the uid as the pod group's name minus "<name>-"
    (job_controller_util.go:106: `pgName := job.Name + "-" + string(job.UID)`). Refused,
    naming the variable, when either is missing or does not fit."""
    hint = (f"render the Job with `ascend-node manifest --rendezvous kube`: it maps "
            f"{JOB_NAME_ENV} and {POD_GROUP_ENV} from Volcano's pod annotations")
    name = env.get(JOB_NAME_ENV, "").strip()
    group = env.get(POD_GROUP_ENV, "").strip()
    if not name:
        raise ConfigError(f"{JOB_NAME_ENV} is not set: the rendezvous through the API needs "
                          "the vcjob's name", hint)
    if not group:
        raise ConfigError(f"{POD_GROUP_ENV} is not set: the rendezvous through the API needs "
                          "the vcjob's uid", hint)
    check_job_name(name, JOB_NAME_ENV)
    uid = group[len(name) + 1:] if group.startswith(name + "-") else ""
    if not _UUID.match(uid):
        raise ConfigError(f"{POD_GROUP_ENV}={group!r} is not '<job name>-<uid>' for job "
                          f"{name!r}", hint)
    # A prefill or decode pod of a PD service meets its instance's peers only
    # (`ASCEND_NODE_PD_TASK`, set per task by `manifest --kind mindie-pd`, pd.roles);
    # the coordinator's and the controller's pods hold no instance.
    task = env.get(PD_TASK_ENV, "").strip()
    return JobIdentity(namespace, name, uid, task if _INSTANCE.match(task) else "")


def check_job_name(name: str, source: str) -> None:
    """A vcjob name: a DNS label of at most 63. Volcano v1.10.0's webhook holds it to 63
    (pkg/webhooks/admission/jobs/validate/admit_job.go:347-350, `IsQualifiedName`), its `svc`
    plugin names a Service after it (pkg/controllers/job/plugins/svc/svc.go:223-225), and its
    pods `<job>-<task>-<i>` must be DNS subdomains: lowercase. Every object name made from it
    (at most 63 + 16 characters) is then a valid ConfigMap name (a subdomain of at most 253)."""
    if len(name) > 63 or not _DNS_LABEL.match(name):
        raise ConfigError(f"{source}={name!r} is not a vcjob name (1-63 lowercase letters, "
                          "digits and '-')", "it is Volcano's annotation volcano.sh/job-name "
                          "of the pod, mapped by the downward API")


def object_name(job: str, kind: str, index: Optional[int] = None) -> str:
    """`<job>-rdzv-attempt`, `<job>-rdzv-node-<g>`, `<job>-rdzv-table-<k>`,
    `<job>-rdzv-progress` (`job` a `JobIdentity.scope`: `<job>.<task>` for a PD instance).
    From the job's name alone, so that `manifest` knows every name when it renders the Role
    (`resourceNames`); the uid is checked on every read instead."""
    if kind not in KINDS:
        raise ValueError(f"unknown rendezvous object kind {kind!r}")
    if (index is None) != (kind in ("attempt", "progress")):
        raise ValueError(f"{kind} objects {'take no' if index is None else 'need an'} index")
    return f"{job}-rdzv-{kind}" + ("" if index is None else f"-{index}")


def all_names(job: str, node_count: int, parts: int = MAX_PARTS) -> list[str]:
    """Every name the job's pods may write, for the Role's `resourceNames`."""
    return ([object_name(job, "attempt"), object_name(job, "progress")]
            + [object_name(job, "node", g) for g in range(node_count)]
            + [object_name(job, "table", k) for k in range(parts)])


PD_SERVICE_KINDS = ("coordinator", "controller")


def service_object_name(job: str, role: str, place: int) -> str:
    """`<job>.pd-coordinator-<p>`, `<job>.pd-controller-0`: a PD service pod's addresses,
    each written by that pod alone (`pd-announce`, `pd-table`), read by the table writer."""
    if role not in PD_SERVICE_KINDS or place not in (0, 1):
        raise ValueError(f"no PD service object for {role} {place}")
    return f"{job}.pd-{role}-{place}"


def pd_names(job: str, instances: Mapping[str, int]) -> list[str]:
    """Every name a PD service's pods may write: each instance's rendezvous objects
    (`instances`: task -> pods) and the coordinators' and controller's address objects."""
    names: list[str] = []
    for task, pods in instances.items():
        names += all_names(JobIdentity("", job, "", task).scope, pods)
    return names + [service_object_name(job, "coordinator", p) for p in (0, 1)] + [
        service_object_name(job, "controller", 0)]


def owner_reference(job: JobIdentity) -> dict[str, Any]:
    """Owned by the vcjob, so deleting the job deletes the object (the garbage collector).
    Not `controller` (Volcano is no controller of ours) and not `blockOwnerDeletion`
    (that needs `update` on jobs/finalizers: k8s v1.30.2 plugin/pkg/admission/gc)."""
    return {"apiVersion": JOB_API_VERSION, "kind": JOB_KIND, "name": job.name, "uid": job.uid}


def new_object(job: JobIdentity, kind: str, index: Optional[int] = None,
               data: Optional[Mapping[str, str]] = None,
               binary: Optional[Mapping[str, bytes]] = None) -> dict[str, Any]:
    """A ConfigMap of this job's rendezvous, labelled and owned; refused (ValueError) when
    its values exceed the API server's 1 MiB, so the caller never sends what it would
    refuse with a 422."""
    labels = {MANAGED_BY: "ascend-node", JOB_UID_LABEL: job.uid, JOB_NAME_LABEL: job.name,
              OBJECT_LABEL: kind}
    if index is not None:
        labels[NODE_LABEL if kind == "node" else PART_LABEL] = str(index)
    if job.instance:
        labels[INSTANCE_LABEL] = job.instance
    obj: dict[str, Any] = {
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": object_name(job.scope, kind, index), "namespace": job.namespace,
                     "labels": labels, "ownerReferences": [owner_reference(job)]},
        "data": dict(data or {}),
    }
    if binary:
        obj["binaryData"] = {k: base64.b64encode(v).decode("ascii") for k, v in binary.items()}
    size = values_size(obj)
    if size > CONFIGMAP_LIMIT:
        raise ValueError(f"{obj['metadata']['name']}: {size} bytes of values, more than the "
                         f"API server's {CONFIGMAP_LIMIT}")
    return obj


def values_size(obj: Mapping[str, Any]) -> int:
    """What the API server counts against the 1 MiB: data values (UTF-8 bytes) and
    binaryData values (decoded bytes) (validation.go:6644-6665; keys do not count)."""
    size = sum(len(str(v).encode()) for v in (obj.get("data") or {}).values())
    for v in (obj.get("binaryData") or {}).values():
        size += len(v) * 3 // 4 - str(v).count("=")
    return size


def ownership_problem(job: JobIdentity, obj: Mapping[str, Any], kind: str) -> Optional[str]:
    """None when `obj` is this job's object of `kind`; else why not, in one line. An object
    with our name can be a leftover of an earlier vcjob of the same name (the garbage
    collector removes it only later) or one another job's pod made: both are read as
    nobody's, never as ours. Both the label and the ownerReference must carry our uid."""
    meta = obj.get("metadata") or {}
    name = meta.get("name", "?")
    labels = meta.get("labels") or {}
    owners = [o for o in meta.get("ownerReferences") or [] if isinstance(o, dict)]
    if labels.get(JOB_UID_LABEL) != job.uid:
        return (f"ConfigMap {name} is not this job's: label {JOB_UID_LABEL}="
                f"{labels.get(JOB_UID_LABEL)!r}, this job's uid is {job.uid}")
    if labels.get(INSTANCE_LABEL, "") != job.instance:
        return (f"ConfigMap {name} is {labels.get(INSTANCE_LABEL) or 'no PD instance'}'s, "
                f"not {job.instance or 'the job'}'s")
    if labels.get(OBJECT_LABEL) != kind:
        return f"ConfigMap {name} holds a {labels.get(OBJECT_LABEL)!r}, not a {kind!r}"
    ours = [o for o in owners if o.get("uid") == job.uid and o.get("kind") == JOB_KIND
            and o.get("apiVersion") == JOB_API_VERSION and o.get("name") == job.name]
    if not ours:
        return (f"ConfigMap {name} is not owned by vcjob {job.name} (uid {job.uid}): "
                f"owners {[(o.get('kind'), o.get('name'), o.get('uid')) for o in owners]}")
    return None


# What each object holds in `data`: the same JSON documents the volume holds in files
# (rendezvous/models.py), so the decisions (decide.py) are the volume's, word for word.
KEYS: dict[str, tuple[str, ...]] = {
    "attempt": ("attempt.json", "outcome.json"),  # node 0: the attempt, then its outcome
    # node g: member, failure or conflict; and its timeline summary for `report`, written
    # once its rendezvous has ended (at most `SUMMARY_BYTES`, kube_summary.py)
    "node": ("slot.json", "summary.json"),
    "progress": ("progress.json",),               # node 0: who is present, who is missing
}


class ObjectRefused(ValueError):
    """An object that cannot be taken as this job's document (one-line reason): treated as
    a missing document, as an unreadable file on the volume is, and named in the logs."""


def document_object(job: JobIdentity, kind: str, index: Optional[int] = None,
                    **documents: str) -> dict[str, Any]:
    """An attempt, slot or progress object holding `documents` by key (`attempt_json=...`
    for "attempt.json"); a key the layout does not have is a bug (ValueError)."""
    data = {key.replace("_json", ".json"): text for key, text in documents.items()}
    unknown = set(data) - set(KEYS.get(kind, ()))
    if unknown:
        raise ValueError(f"{kind} objects hold {KEYS.get(kind, ())}, not {sorted(unknown)}")
    return new_object(job, kind, index, data=data)


def read_document(job: JobIdentity, obj: Mapping[str, Any], kind: str,
                  key: str) -> Optional[str]:
    """The text under `data[key]` of this job's object of `kind`; None when the object is
    ours but does not hold that document yet (an attempt without its outcome). Anything
    else is `ObjectRefused`: another job's object, a key the layout does not have, a value
    that is not text, or `binaryData` where text belongs."""
    problem = ownership_problem(job, obj, kind)
    if problem:
        raise ObjectRefused(problem)
    name = (obj.get("metadata") or {}).get("name", "?")
    if key not in KEYS.get(kind, ()):
        raise ObjectRefused(f"ConfigMap {name}: a {kind} object holds no {key!r}")
    data = obj.get("data") or {}
    if not isinstance(data, dict):
        raise ObjectRefused(f"ConfigMap {name}: data is not a mapping")
    stray = sorted(set(data) - set(KEYS[kind])) + sorted(obj.get("binaryData") or {})
    if stray:
        raise ObjectRefused(f"ConfigMap {name}: keys {stray} are not the layout of a {kind} "
                            "object (written by hand?)")
    value = data.get(key)
    if value is None:
        return None
    if not isinstance(value, str):
        raise ObjectRefused(f"ConfigMap {name}: {key} is not text")
    return value


# -- the table: gzip, then parts ----------------------------------------------------------

class TablePartsError(ObjectRefused):
    """The table's parts do not make the table the outcome names (one-line reason)."""


def split_table(text: str, part_bytes: int = PART_BYTES) -> tuple[str, list[bytes]]:
    """(sha256 of the text, its gzip cut into parts of at most `part_bytes`). A 1,024 x 16
    table of 2-2.6 MiB is one part of ~130-190 KiB (docs/rendezvous.md). Deterministic:
    gzip's header time is 0, so node 0 writing twice writes the same bytes."""
    raw = text.encode("ascii")  # render_rank_table's ensure_ascii: anything else is a bug
    packer = zlib.compressobj(6, zlib.DEFLATED, 31)  # 31: the gzip wrapper (mtime 0)
    blob = packer.compress(raw) + packer.flush()
    parts = [blob[i:i + part_bytes] for i in range(0, len(blob), part_bytes)]
    if len(parts) > MAX_PARTS:
        raise TablePartsError(f"the table ({len(raw)} bytes, {len(blob)} compressed) needs "
                              f"{len(parts)} parts; at most {MAX_PARTS}")
    return hashlib.sha256(raw).hexdigest(), parts


def join_table(parts: Sequence[Optional[bytes]], sha256: str) -> str:
    """The table text from its parts, checked against the sha256 the outcome names; every
    fault is a `TablePartsError` naming it (the follower then reads again or waits)."""
    missing = [k for k, p in enumerate(parts) if p is None]
    if not parts or missing:
        raise TablePartsError(f"table part(s) {missing or [0]} missing")
    unpacker = zlib.decompressobj(31)
    try:
        raw = unpacker.decompress(b"".join(p for p in parts if p is not None),
                                  MAX_TABLE_TEXT + 1)
    except zlib.error as exc:
        raise TablePartsError(f"the table's parts are not one gzip stream: {exc}") from None
    if len(raw) > MAX_TABLE_TEXT:
        raise TablePartsError(f"the table is larger than {MAX_TABLE_TEXT >> 20} MiB unpacked")
    if not unpacker.eof or unpacker.unused_data:
        raise TablePartsError("the table's gzip stream is cut or followed by other bytes")
    if hashlib.sha256(raw).hexdigest() != sha256:
        raise TablePartsError("the table's parts do not match the outcome's sha256 (a part "
                              "of another attempt, or changed)")
    try:
        return raw.decode("ascii")
    except UnicodeDecodeError:
        raise TablePartsError("the table is not ASCII text") from None


def table_part_object(job: JobIdentity, k: int, attempt_id: str, sha256: str, count: int,
                      blob: bytes) -> dict[str, Any]:
    """Part k of an attempt's table: which attempt and table it belongs to in `data`, its
    bytes in `binaryData` (an operator: `kubectl get cm <job>-rdzv-table-0 -o
    jsonpath='{.binaryData.part}' | base64 -d | gunzip` for a one-part table)."""
    return new_object(job, "table", k,
                      data={"attempt": attempt_id, "sha256": sha256, "parts": str(count)},
                      binary={"part": blob})


def table_part(job: JobIdentity, obj: Mapping[str, Any], k: int, attempt_id: str,
               sha256: str, count: int) -> bytes:
    """The bytes of part k, only when it is this job's and this attempt's table's part."""
    problem = ownership_problem(job, obj, "table")
    if problem:
        raise TablePartsError(problem)
    data = obj.get("data") or {}
    if (data.get("attempt"), data.get("sha256"), data.get("parts")) != (attempt_id, sha256,
                                                                         str(count)):
        raise TablePartsError(f"table part {k} belongs to attempt {data.get('attempt')!r}, "
                              f"not {attempt_id!r}")
    value = (obj.get("binaryData") or {}).get("part")
    try:
        return base64.b64decode(str(value), validate=True)
    except ValueError:
        raise TablePartsError(f"table part {k} is not base64") from None


# -- the Role ----------------------------------------------------------------------------

@dataclass(frozen=True)
class Rule:
    verbs: tuple[str, ...]
    names: tuple[str, ...]  # () = every ConfigMap of the namespace
    why: str

    def as_rbac(self) -> dict[str, Any]:
        out: dict[str, Any] = {"apiGroups": [""], "resources": ["configmaps"],
                               "verbs": list(self.verbs)}
        if self.names:
            out["resourceNames"] = list(self.names)
        return out


def role_rules(job: str, node_count: int,
               instances: Optional[Mapping[str, int]] = None) -> list[Rule]:
    """The agent's Role for one job, least privilege: nothing on pods (the downward API
    gives the job's identity), nothing on Leases, no delete (the garbage collector removes
    the objects with the vcjob; `clean` runs with the operator's own credentials). For a
    PD service (`instances`: task -> pods) the names are every instance's and the service
    pods' (`pd_names`)."""
    names = tuple(pd_names(job, instances) if instances is not None
                  else all_names(job, node_count))
    return [
        Rule(("create",), (), "create-if-absent of the job's objects; RBAC cannot restrict "
             "create by name, so a taken name is checked on read (label and owner uid)"),
        Rule(("get", "update"), names, "read and compare-and-set the job's own objects "
             "(update carries the resourceVersion read), and only those"),
        Rule(("list", "watch"), (), "node 0 lists and watches the slots by label, followers "
             "the attempt and progress objects (a label selector cannot be restricted by "
             "name, and the pods share one ServiceAccount): the pods can read the "
             "namespace's ConfigMaps, which Kubernetes does not make confidential "
             "(Secrets are not covered)"),
    ]


def identity_env() -> list[dict[str, Any]]:
    """The container's environment entries that hand the agent its job's identity through
    the downward API (`fieldRef` to the annotations Volcano sets,
    job_controller_util.go:106-108)."""
    return [
        {"name": JOB_NAME_ENV, "valueFrom": {"fieldRef": {
            "fieldPath": "metadata.annotations['volcano.sh/job-name']"}}},
        {"name": POD_GROUP_ENV, "valueFrom": {"fieldRef": {
            "fieldPath": "metadata.annotations['scheduling.k8s.io/group-name']"}}},
    ]


def service_account_name(job: str) -> str:
    return f"{job}-ascend-node"


def rbac_objects(job: str, namespace: str, node_count: int,
                 instances: Optional[Mapping[str, int]] = None) -> list[dict[str, Any]]:
    """The job's own ServiceAccount, Role (`role_rules`) and RoleBinding, for `manifest` to
    render beside the vcjob; the pods then run with `serviceAccountName` set to it. One set
    per job, so that no job's pods may update another job's objects."""
    name = service_account_name(job)
    meta = {"name": name, "namespace": namespace,
            "labels": {MANAGED_BY: "ascend-node", JOB_NAME_LABEL: job}}
    return [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": dict(meta)},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": dict(meta),
         "rules": [r.as_rbac() for r in role_rules(job, node_count, instances)]},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
         "metadata": dict(meta),
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
         "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": namespace}]},
    ]
