"""The rendezvous' objects in the Kubernetes API (ascend_node/rendezvous/kube_layout.py): names
from the job's identity, ownership, sizes at 1,024 pods x 16 NPUs, the table's parts, and the
Role. Pure, by table; the objects' life on a real API server (ownerReferences collected with
the vcjob, RBAC applying the Role, 422 at 1 MiB) is proven on the control-plane bed (issue 37,
marker `kube`), not here."""

from __future__ import annotations

import base64
import json
import random
import re
import zlib
from typing import Any, Optional

import kubernetes_validate
import pytest

from ascend_node.errors import ConfigError
from ascend_node.ranktable.build import DeviceEntry, ServerEntry, build_rank_table
from ascend_node.ranktable.render import render_rank_table
from ascend_node.rendezvous.kube_layout import (
    CONFIGMAP_LIMIT,
    INSTANCE_LABEL,
    JOB_UID_LABEL,
    MAX_TABLE_TEXT,
    PART_BYTES,
    JobIdentity,
    ObjectRefused,
    TablePartsError,
    all_names,
    document_object,
    identity_env,
    job_identity,
    join_table,
    new_object,
    object_name,
    ownership_problem,
    pd_names,
    rbac_objects,
    read_document,
    role_rules,
    service_object_name,
    slot_selector,
    split_table,
    table_part,
    table_part_object,
    values_size,
)

UID = "0f9c3f2e-1b2a-4c3d-9e8f-0123456789ab"
OTHER = "7d3e1c55-8a9b-4f0e-b1c2-fedcba987654"
JOB = JobIdentity("team-a", "mindie-4", UID)


@pytest.mark.parametrize(("env", "expected"), [
    ({"ASCEND_NODE_JOB_NAME": "mindie-4", "ASCEND_NODE_POD_GROUP": f"mindie-4-{UID}"}, UID),
    ({"ASCEND_NODE_JOB_NAME": "a-b", "ASCEND_NODE_POD_GROUP": f"a-b-{UID}"}, UID),
    ({}, "ASCEND_NODE_JOB_NAME is not set"),
    ({"ASCEND_NODE_JOB_NAME": "mindie-4"}, "ASCEND_NODE_POD_GROUP is not set"),
    ({"ASCEND_NODE_JOB_NAME": "mindie-4", "ASCEND_NODE_POD_GROUP": f"other-{UID}"},
     "is not '<job name>-<uid>' for job 'mindie-4'"),
    ({"ASCEND_NODE_JOB_NAME": "mindie-4", "ASCEND_NODE_POD_GROUP": "mindie-4-podgroup"},
     "is not '<job name>-<uid>'"),
    ({"ASCEND_NODE_JOB_NAME": "Mindie_4", "ASCEND_NODE_POD_GROUP": f"Mindie_4-{UID}"},
     "ASCEND_NODE_JOB_NAME='Mindie_4' is not a vcjob name (1-63"),
    ({"ASCEND_NODE_JOB_NAME": "j" * 64, "ASCEND_NODE_POD_GROUP": f"{'j' * 64}-{UID}"},
     "is not a vcjob name"),
])
def test_the_job_identity_comes_from_volcanos_annotations(env: dict[str, str],
                                                          expected: str) -> None:
    """The uid is the pod group's name minus "<job>-": Volcano v1.10.0
    job_controller_util.go:106 `pgName := job.Name + "-" + string(job.UID)`."""
    if expected == UID:
        assert job_identity(env, "team-a") == JobIdentity("team-a", env["ASCEND_NODE_JOB_NAME"],
                                                          UID)
        return
    with pytest.raises(ConfigError) as info:
        job_identity(env, "team-a")
    assert expected in str(info.value)
    assert ("manifest --rendezvous kube" in info.value.hint
            or "volcano.sh/job-name" in info.value.hint)


@pytest.mark.parametrize(("kind", "index", "name"), [
    ("attempt", None, "mindie-4-rdzv-attempt"),
    ("progress", None, "mindie-4-rdzv-progress"),
    ("node", 0, "mindie-4-rdzv-node-0"),
    ("node", 1023, "mindie-4-rdzv-node-1023"),
    ("table", 2, "mindie-4-rdzv-table-2"),
])
def test_object_names_come_from_the_job_name_alone(kind: str, index: Optional[int],
                                                   name: str) -> None:
    assert object_name("mindie-4", kind, index) == name


@pytest.mark.parametrize(("kind", "index"), [("attempt", 0), ("node", None), ("slot", 1)])
def test_an_impossible_name_is_a_bug_not_a_name(kind: str, index: Optional[int]) -> None:
    with pytest.raises(ValueError):
        object_name("mindie-4", kind, index)


def test_the_longest_job_name_makes_valid_configmap_names() -> None:
    """A ConfigMap name is a DNS subdomain of at most 253 characters (k8s v1.30.2
    validation.go:6637 `NameIsDNSSubdomain`); a vcjob name is at most 63."""
    subdomain = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
    for name in all_names("j" * 63, 65536):
        assert len(name) <= 253 and subdomain.match(name), name


def test_an_object_is_labelled_and_owned_by_the_vcjob() -> None:
    obj = new_object(JOB, "node", 3, data={"document.json": "{}"})
    meta = obj["metadata"]
    assert meta["name"] == "mindie-4-rdzv-node-3" and meta["namespace"] == "team-a"
    assert meta["labels"] == {"app.kubernetes.io/managed-by": "ascend-node",
                              JOB_UID_LABEL: UID, "ascend-node.io/job-name": "mindie-4",
                              "ascend-node.io/object": "node", "ascend-node.io/node": "3"}
    assert meta["ownerReferences"] == [{"apiVersion": "batch.volcano.sh/v1alpha1",
                                        "kind": "Job", "name": "mindie-4", "uid": UID}]
    assert ownership_problem(JOB, obj, "node") is None


def _with(obj: dict[str, Any], **meta: Any) -> dict[str, Any]:
    out = json.loads(json.dumps(obj))
    out["metadata"].update(meta)
    return out


OURS = new_object(JOB, "node", 3, data={"document.json": "{}"})
LABELS = OURS["metadata"]["labels"]
OWNER = OURS["metadata"]["ownerReferences"][0]


@pytest.mark.parametrize(("obj", "kind", "expected"), [
    (_with(OURS, labels={**LABELS, JOB_UID_LABEL: OTHER}), "node",
     f"label {JOB_UID_LABEL}='{OTHER}', this job's uid is {UID}"),
    (_with(OURS, labels={}), "node", "label ascend-node.io/job-uid=None"),
    (OURS, "attempt", "holds a 'node', not a 'attempt'"),
    (_with(OURS, ownerReferences=[{**OWNER, "uid": OTHER}]), "node",
     "is not owned by vcjob mindie-4"),
    (_with(OURS, ownerReferences=[]), "node", "is not owned by vcjob mindie-4"),
    (_with(OURS, ownerReferences=[{**OWNER, "kind": "Deployment"}]), "node", "is not owned"),
    (_with(OURS, ownerReferences=[{**OWNER, "apiVersion": "batch/v1"}]), "node",
     "is not owned"),
])
def test_an_object_of_another_job_is_never_read_as_ours(obj: dict[str, Any], kind: str,
                                                         expected: str) -> None:
    """A leftover of an earlier vcjob of the same name (collected only later) or an object
    another job's pod created under our name: the label and the owner's uid must both match."""
    problem = ownership_problem(JOB, obj, kind)
    assert problem is not None and expected in problem


def servers(nodes: int, devices: int, a3: bool, seed: int = 38) -> list[ServerEntry]:
    """Random addresses (a pessimistic case for compression: real RoCE and pod addresses
    are more regular), one super pod per 48 nodes for v1.2."""
    rnd = random.Random(seed)
    ips = rnd.sample(range(1 << 24), nodes * (devices + 2))

    def ip(n: int) -> str:
        return f"10.{n >> 16}.{(n >> 8) & 255}.{n & 255}"

    out = []
    for g in range(nodes):
        base = g * (devices + 2)
        devs = tuple(DeviceEntry(d, ip(ips[base + 2 + d]), g * devices + d if a3 else None)
                     for d in range(devices))
        out.append(ServerEntry(g, ip(ips[base]), ip(ips[base + 1]), devs,
                               str(g // 48) if a3 else None))
    return out


@pytest.mark.parametrize(("version", "min_text"), [("1.0", 2_000_000), ("1.2", 2_600_000)])
def test_a_1024_by_16_table_is_one_part_well_below_the_limit(version: str,
                                                            min_text: int) -> None:
    """The table of 1,024 pods x 16 NPUs (2.0 MiB as v1.0, 2.6 MiB as v1.2, built and
    rendered by the agent's own code) does not fit a ConfigMap as text; gzipped it is one part
    of a few hundred KiB, so a follower reads one object for it."""
    text = render_rank_table(build_rank_table(servers(1024, 16, version == "1.2"), version))
    assert len(text) > min_text > CONFIGMAP_LIMIT
    sha, parts = split_table(text)
    assert len(parts) == 1 and len(parts[0]) < PART_BYTES
    obj = table_part_object(JOB, 0, "att-1", sha, 1, parts[0])
    assert values_size(obj) < CONFIGMAP_LIMIT
    assert table_part(JOB, obj, 0, "att-1", sha, 1) == parts[0]
    assert join_table(parts, sha) == text


def test_a_table_larger_than_a_part_splits_and_joins_byte_for_byte() -> None:
    text = render_rank_table(build_rank_table(servers(64, 16, False), "1.0"))
    sha, parts = split_table(text, part_bytes=4096)
    assert len(parts) > 2 and all(len(p) <= 4096 for p in parts)
    assert join_table(parts, sha) == text
    assert split_table(text, part_bytes=4096) == (sha, parts)  # deterministic: mtime 0


def _gz(raw: bytes) -> bytes:
    packer = zlib.compressobj(6, zlib.DEFLATED, 31)
    return packer.compress(raw) + packer.flush()


TEXT = '{"version": "1.0"}\n'
SHA, PARTS = split_table(TEXT, part_bytes=8)


@pytest.mark.parametrize(("parts", "sha", "expected"), [
    ([*PARTS[:-1], None], SHA, f"table part(s) [{len(PARTS) - 1}] missing"),
    ([], SHA, "table part(s) [0] missing"),
    (list(reversed(PARTS)), SHA, "not one gzip stream"),
    (PARTS[:-1], SHA, "cut"),
    ([*PARTS, b"junk"], SHA, "followed by other bytes"),
    (PARTS, "0" * 64, "do not match the outcome's sha256"),
    ([_gz("é".encode())], __import__("hashlib").sha256("é".encode()).hexdigest(),
     "not ASCII"),
    ([b"not gzip at all"], SHA, "not one gzip stream"),
])
def test_bad_parts_are_refused_naming_the_fault(parts: list[Optional[bytes]], sha: str,
                                                expected: str) -> None:
    with pytest.raises(TablePartsError, match=re.escape(expected)):
        join_table(parts, sha)


def test_a_gzip_bomb_is_refused() -> None:
    blob = _gz(b" " * (MAX_TABLE_TEXT + 10))
    with pytest.raises(TablePartsError, match="larger than 64 MiB"):
        join_table([blob], "0" * 64)


@pytest.mark.parametrize(("mutate", "expected"), [
    (lambda o: o["data"].update(attempt="att-0"), "belongs to attempt 'att-0', not 'att-1'"),
    (lambda o: o["data"].update(parts="2"), "belongs to attempt"),
    (lambda o: o["binaryData"].update(part="%%%"), "is not base64"),
    (lambda o: o["metadata"]["labels"].update({JOB_UID_LABEL: OTHER}), "is not this job's"),
])
def test_a_part_of_another_attempt_or_job_is_refused(mutate: Any, expected: str) -> None:
    obj = table_part_object(JOB, 0, "att-1", SHA, 1, PARTS[0])
    mutate(obj)
    with pytest.raises(TablePartsError, match=expected):
        table_part(JOB, obj, 0, "att-1", SHA, 1)


def test_an_object_over_the_api_servers_limit_is_never_sent() -> None:
    """The API server refuses more than 1 MiB of values with a 422 (k8s v1.30.2
    validation.go:6663); the agent refuses to build one instead."""
    with pytest.raises(ValueError, match="more than the API server's 1048576"):
        new_object(JOB, "node", 0, data={"document.json": "x" * (CONFIGMAP_LIMIT + 1)})
    ok = new_object(JOB, "table", 0, binary={"part": b"\0" * (CONFIGMAP_LIMIT - 2)})
    assert values_size(ok) == CONFIGMAP_LIMIT - 2
    assert len(base64.b64decode(ok["binaryData"]["part"])) == CONFIGMAP_LIMIT - 2


def test_the_role_allows_exactly_the_calls_of_the_design() -> None:
    rules = [r.as_rbac() for r in role_rules("mindie-4", 4)]
    assert [(r["verbs"], "resourceNames" in r) for r in rules] == [
        (["create"], False), (["get", "update"], True), (["list", "watch"], False)]
    names = rules[1]["resourceNames"]
    assert "mindie-4-rdzv-node-3" in names and "mindie-4-rdzv-node-4" not in names
    assert "mindie-4-rdzv-attempt" in names and "mindie-4-rdzv-table-0" in names
    assert all(r["resources"] == ["configmaps"] and r["apiGroups"] == [""] for r in rules)
    assert not any("delete" in r["verbs"] or "patch" in r["verbs"] for r in rules)


def test_documents_sit_under_the_layouts_keys() -> None:
    attempt = document_object(JOB, "attempt", attempt_json='{"kind": "attempt"}')
    assert attempt["data"] == {"attempt.json": '{"kind": "attempt"}'}
    assert read_document(JOB, attempt, "attempt", "attempt.json") == '{"kind": "attempt"}'
    assert read_document(JOB, attempt, "attempt", "outcome.json") is None  # not yet
    slot = document_object(JOB, "node", 5, slot_json="{}")
    assert slot["metadata"]["name"] == "mindie-4-rdzv-node-5"
    with pytest.raises(ValueError, match=re.escape("not ['outcome.json']")):
        document_object(JOB, "node", 5, outcome_json="{}")


def _doc_with(**over: Any) -> dict[str, Any]:
    obj = document_object(JOB, "node", 5, slot_json="{}")
    for key, value in over.items():
        obj[key] = value
    return obj


@pytest.mark.parametrize(("obj", "kind", "key", "expected"), [
    (_doc_with(), "attempt", "attempt.json", "holds a 'node', not a 'attempt'"),
    (_doc_with(), "node", "outcome.json", "a node object holds no 'outcome.json'"),
    (_doc_with(data={"slot.json": 5}), "node", "slot.json", "slot.json is not text"),
    (_doc_with(data=["x"]), "node", "slot.json", "data is not a mapping"),
    (_doc_with(data={"slot.json": "{}", "extra": "x"}), "node", "slot.json",
     "keys ['extra'] are not the layout"),
    (_doc_with(binaryData={"slot.json": "e30="}), "node", "slot.json",
     "keys ['slot.json'] are not the layout"),
    (_with(_doc_with(), labels={}), "node", "slot.json", "is not this job's"),
])
def test_a_document_object_that_is_not_ours_or_not_the_layout_is_refused(
        obj: dict[str, Any], kind: str, key: str, expected: str) -> None:
    with pytest.raises(ObjectRefused) as info:
        read_document(JOB, obj, kind, key)
    assert expected in str(info.value)


K8S_VERSIONS = ("1.28", kubernetes_validate.latest_version())


@pytest.mark.parametrize("version", K8S_VERSIONS)
def test_the_rbac_objects_are_what_an_api_server_accepts(version: str) -> None:
    """Checked against Kubernetes' own OpenAPI schemas (kubernetes-validate); that RBAC
    then allows exactly these calls is proven on the bed (issue 37)."""
    objects = rbac_objects("mindie-4", "team-a", 4)
    for obj in objects:
        kubernetes_validate.validate(obj, version, strict=True)
    sa, role, binding = objects
    assert binding["roleRef"]["name"] == role["metadata"]["name"] == sa["metadata"]["name"]
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "mindie-4-ascend-node",
                                    "namespace": "team-a"}]
    assert role["rules"] == [r.as_rbac() for r in role_rules("mindie-4", 4)]


def test_the_identity_comes_through_the_downward_api() -> None:
    """The manifest's env entries resolve to exactly what `job_identity` reads."""
    entries = {e["name"]: e["valueFrom"]["fieldRef"]["fieldPath"] for e in identity_env()}
    assert entries == {
        "ASCEND_NODE_JOB_NAME": "metadata.annotations['volcano.sh/job-name']",
        "ASCEND_NODE_POD_GROUP": "metadata.annotations['scheduling.k8s.io/group-name']"}
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
           "spec": {"containers": [{"name": "c", "image": "i", "env": identity_env()}]}}
    kubernetes_validate.validate(pod, K8S_VERSIONS[-1], strict=True)


# -- a PD service: one rendezvous per instance in one vcjob (issue 38) ---------------------


IDENTITY = {"ASCEND_NODE_JOB_NAME": "svc", "ASCEND_NODE_POD_GROUP": f"svc-{UID}"}


@pytest.mark.parametrize(("task", "instance"), [
    ("prefill-0", "prefill-0"), ("decode-12", "decode-12"),
    ("coordinator", ""), ("controller", ""), ("", ""), ("prefill-01", ""), ("decode", ""),
])
def test_a_pd_server_pod_meets_in_its_instances_objects(task: str, instance: str) -> None:
    job = job_identity({**IDENTITY, "ASCEND_NODE_PD_TASK": task}, "team-a")
    assert job == JobIdentity("team-a", "svc", UID, instance)
    assert object_name(job.scope, "attempt") == (
        f"svc.{instance}-rdzv-attempt" if instance else "svc-rdzv-attempt")


def test_an_instances_names_are_never_another_jobs() -> None:
    """`svc.prefill-0-...` cannot be the names of a vcjob `svc-prefill-0` (no '.' in a vcjob
    name), and two instances' names never meet."""
    pd = pd_names("svc", {"prefill-0": 2, "decode-0": 1})
    plain = set(role_rules("svc-prefill-0", 2)[1].names)
    assert not plain & set(pd)
    assert len(pd) == len(set(pd)) == (2 + 2 + 8) + (2 + 1 + 8) + 3
    assert service_object_name("svc", "coordinator", 1) in pd
    longest = JobIdentity("n", "j" * 63, UID, "decode-9999").scope
    assert len(object_name(longest, "table", 7)) <= 253


def test_an_instances_object_is_never_read_as_another_instances() -> None:
    prefill = JobIdentity("team-a", "svc", UID, "prefill-0")
    decode = JobIdentity("team-a", "svc", UID, "decode-0")
    plain = JobIdentity("team-a", "svc", UID)
    obj = new_object(prefill, "node", 1, data={"slot.json": "{}"})
    assert obj["metadata"]["labels"][INSTANCE_LABEL] == "prefill-0"
    assert ownership_problem(prefill, obj, "node") is None
    assert "prefill-0's, not decode-0's" in str(ownership_problem(decode, obj, "node"))
    assert "not the job's" in str(ownership_problem(plain, obj, "node"))
    assert "no PD instance's, not prefill-0's" in str(
        ownership_problem(prefill, new_object(plain, "node", 1), "node"))
    assert slot_selector(prefill).endswith(f",{INSTANCE_LABEL}=prefill-0")
    with pytest.raises(ValueError):
        JobIdentity("team-a", "svc", UID, "coordinator")
