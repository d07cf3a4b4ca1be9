"""The client and the objects' layout against a real kube-apiserver v1.30.2 (with etcd):
RBAC's own 403, the registry's own 409s, etcd's resourceVersions under concurrent writers, the
1 MiB limit, watches and label selectors as the API server serves them.

The binaries are the control-plane bed's (issue 37: `go build` from the module proxy into
~/.cache/ascend-node-kube/<versions>/bin); without them these tests skip and say so. This file
starts only etcd and kube-apiserver, with static bearer tokens (an admin, and a user named as a
ServiceAccount is, whom the RBAC objects the agent's design renders then allow or deny); the
garbage collector of kube-controller-manager runs for the ownerReference test, with Volcano
v1.10.0's Job CRD from its Go module. The bed's own fixture (Volcano's controllers, real
ServiceAccount tokens in pods) takes over when it is merged.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ascend_node.kube.client import Client
from ascend_node.kube.config import Endpoint
from ascend_node.kube.errors import AlreadyExists, Conflict, Forbidden, Invalid, KubeError
from ascend_node.kube.mirror import Change, Mirror
from ascend_node.kube.resources import CONFIGMAPS, Call, Resource
from ascend_node.ranktable.build import build_rank_table
from ascend_node.ranktable.render import render_rank_table
from ascend_node.rendezvous.kube_layout import (
    CONFIGMAP_LIMIT,
    JobIdentity,
    join_table,
    new_object,
    ownership_problem,
    rbac_objects,
    split_table,
    table_part,
    table_part_object,
)
from tests.freeze import freeze
from tests.kube_apiserver import Plane, binaries, control_plane
from tests.test_kube_layout import servers

pytestmark = pytest.mark.kube

NS = "team-a"
AGENT = f"system:serviceaccount:{NS}:mindie-4-ascend-node"
JOB = JobIdentity(NS, "mindie-4", "0f9c3f2e-1b2a-4c3d-9e8f-0123456789ab")
ADMIN_TOKEN, AGENT_TOKEN, WATCHER_TOKEN = "admin-token-38", "agent-token-38", "watcher-38"


@pytest.fixture(scope="module")
def plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Plane]:
    bin_dir = binaries()
    if bin_dir is None:
        pytest.skip("no kube-apiserver/etcd v1.30 in ~/.cache/ascend-node-kube (built by the "
                    "control-plane bed, issue 37: scripts/kube-bed)")
    if shutil.which("openssl") is None:
        pytest.skip("openssl is not installed")
    users = {ADMIN_TOKEN: ("admin", "system:masters"),
             AGENT_TOKEN: (AGENT, f"system:serviceaccounts,system:serviceaccounts:{NS}"),
             WATCHER_TOKEN: ("watcher", "watchers")}
    try:
        with control_plane(tmp_path_factory.mktemp("apiserver"), users, bin_dir) as p:
            yield p
    except RuntimeError as exc:
        pytest.fail(str(exc))


@pytest.fixture(scope="module")
def apiserver(plane: Plane) -> tuple[str, Path]:
    return plane.url, plane.ca


def _client(apiserver: tuple[str, Path], token: str, namespace: str = NS) -> Client:
    url, ca = apiserver
    return Client(Endpoint(server=url, namespace=namespace, source="test", ca_file=str(ca),
                           token=token), timeout=30)


def plain(name: str) -> dict[str, Any]:
    """A ConfigMap owned by nobody: the garbage collector (running for the ownerReference
    test) removes every object of the fake job `JOB`, whose vcjob does not exist."""
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": {}}


NAMESPACES = Resource("", "v1", "namespaces", "Namespace")
ROLES = Resource("rbac.authorization.k8s.io", "v1", "roles", "Role")
BINDINGS = Resource("rbac.authorization.k8s.io", "v1", "rolebindings", "RoleBinding")
SERVICE_ACCOUNTS = Resource("", "v1", "serviceaccounts", "ServiceAccount")


@pytest.fixture(scope="module")
def admin(apiserver: tuple[str, Path]) -> Client:
    c = _client(apiserver, ADMIN_TOKEN)
    with contextlib.suppress(AlreadyExists):
        c.request("POST", Call("create", NAMESPACES, ""), "/api/v1/namespaces",
                  {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}})
    return c


@pytest.fixture(scope="module")
def agent(apiserver: tuple[str, Path], admin: Client) -> Client:
    return _client(apiserver, AGENT_TOKEN)


def test_without_the_role_the_403_is_rbacs_own_named_in_one_line(agent: Client) -> None:
    """RBAC's message is parsed as kube-apiserver writes it: the user is named."""
    with pytest.raises(Forbidden) as info:
        agent.create(CONFIGMAPS, new_object(JOB, "node", 0, data={"slot.json": "{}"}))
    line = str(info.value)
    assert f'create configmaps "mindie-4-rdzv-node-0" in namespace "{NS}" to {AGENT}' in line
    assert 'verbs: ["create"]' in line and "\n" not in line
    assert info.value.message.startswith(f'configmaps is forbidden: User "{AGENT}" cannot '
                                         'create resource "configmaps"')


@pytest.fixture(scope="module")
def granted(admin: Client, agent: Client) -> Client:
    """The agent's ServiceAccount, Role and RoleBinding as the design renders them, for a
    job of 4 pods, applied by the admin."""
    for obj, res in zip(rbac_objects(JOB.name, NS, 4),
                        (SERVICE_ACCOUNTS, ROLES, BINDINGS)):
        admin.request("POST", Call("create", res, NS), res.path(NS), obj)
    deadline = time.monotonic() + 60
    while True:  # RBAC's cache takes a moment to see the new binding
        try:
            agent.get(CONFIGMAPS, "mindie-4-rdzv-attempt")
        except Forbidden:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)
            continue
        except KubeError:
            pass
        return agent


def test_the_role_allows_the_jobs_own_names_and_nothing_else(granted: Client,
                                                             admin: Client) -> None:
    slot = granted.create(CONFIGMAPS, new_object(JOB, "node", 3, data={"slot.json": "{}"}))
    assert ownership_problem(JOB, slot, "node") is None
    slot["data"]["slot.json"] = '{"kind": "member"}'
    granted.replace(CONFIGMAPS, slot)
    other = JobIdentity(NS, "train-9", "7d3e1c55-8a9b-4f0e-b1c2-fedcba987654")
    foreign = admin.create(CONFIGMAPS, new_object(other, "node", 0, data={"slot.json": "{}"}))
    with pytest.raises(Forbidden) as info:  # another job's object: not in resourceNames
        granted.get(CONFIGMAPS, foreign["metadata"]["name"])
    assert 'get configmaps "train-9-rdzv-node-0"' in str(info.value)
    with pytest.raises(Forbidden):
        granted.replace(CONFIGMAPS, foreign)
    with pytest.raises(Forbidden):  # beyond the job's node count
        granted.get(CONFIGMAPS, "mindie-4-rdzv-node-4")
    with pytest.raises(Forbidden, match=r'verbs: \["delete"\]'):
        granted.delete(CONFIGMAPS, "mindie-4-rdzv-node-3")


def test_the_two_409s_come_with_their_reasons(granted: Client) -> None:
    first = granted.create(CONFIGMAPS, new_object(JOB, "progress", data={"progress.json": "1"}))
    with pytest.raises(AlreadyExists) as exists:
        granted.create(CONFIGMAPS, new_object(JOB, "progress", data={"progress.json": "2"}))
    assert exists.value.reason == "AlreadyExists"
    first["data"]["progress.json"] = "3"
    granted.replace(CONFIGMAPS, first)
    first["data"]["progress.json"] = "4"  # still the version read before the write above
    with pytest.raises(Conflict) as conflict:
        granted.replace(CONFIGMAPS, first)
    assert conflict.value.reason == "Conflict"
    assert "the object has been modified" in conflict.value.message


def test_compare_and_set_loses_no_update_under_concurrent_writers(granted: Client,
                                                                  apiserver: Any) -> None:
    """Four writers, each adding its own keys by read-modify-compare-and-set: every key lands,
    however the writes interleave in etcd."""
    granted.create(CONFIGMAPS, new_object(JOB, "attempt", data={}))
    writers, keys = 4, 10
    conflicts = [0] * writers

    def write(w: int) -> None:
        c = _client(apiserver, AGENT_TOKEN)
        for k in range(keys):
            while True:
                obj = c.get(CONFIGMAPS, "mindie-4-rdzv-attempt")
                obj.setdefault("data", {})[f"w{w}-{k}"] = "x"
                try:
                    c.replace(CONFIGMAPS, obj)
                    break
                except Conflict:
                    conflicts[w] += 1

    threads = [threading.Thread(target=write, args=(w,)) for w in range(writers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(300)
    data = granted.get(CONFIGMAPS, "mindie-4-rdzv-attempt")["data"]
    assert sorted(data) == sorted(f"w{w}-{k}" for w in range(writers) for k in range(keys))


def test_the_1_mib_limit_is_the_api_servers(admin: Client) -> None:
    """Exactly 1 MiB of values is accepted, one byte more is refused with 422 — the limit
    `kube_layout` builds to (validation.go:6663)."""
    job = JobIdentity(NS, "limits", JOB.uid)
    at = new_object(job, "table", 0, binary={"part": b"\x00" * CONFIGMAP_LIMIT})
    admin.create(CONFIGMAPS, at)
    over = new_object(job, "table", 1, data={"a": "x" * (CONFIGMAP_LIMIT // 2),
                                            "b": "y" * (CONFIGMAP_LIMIT // 2)})
    over["data"]["c"] = "z"
    with pytest.raises(Invalid) as info:
        admin.create(CONFIGMAPS, over)
    assert "1048576" in str(info.value)


def test_a_1024_by_16_table_round_trips_byte_for_byte(granted: Client) -> None:
    text = render_rank_table(build_rank_table(servers(1024, 16, True), "1.2"))
    sha, parts = split_table(text)
    granted.create(CONFIGMAPS, table_part_object(JOB, 0, "att-1", sha, len(parts), parts[0]))
    back = granted.get(CONFIGMAPS, "mindie-4-rdzv-table-0")
    assert join_table([table_part(JOB, back, 0, "att-1", sha, len(parts))], sha) == text


def test_a_mirror_follows_the_slots_by_label(granted: Client, admin: Client,
                                             apiserver: Any) -> None:
    """List then watch by label selector, as node 0 will: changes by others arrive, and a
    watch that the server ends after its timeoutSeconds hands back a TICK."""
    watcher = _client(apiserver, AGENT_TOKEN)
    mirror = Mirror(watcher, CONFIGMAPS, label_selector=f"ascend-node.io/job-uid={JOB.uid},"
                    "ascend-node.io/object=node", tick=2)
    changes = mirror.changes()
    assert next(changes) == Change("LISTED")
    before = set(mirror.objects)
    made = granted.create(CONFIGMAPS, new_object(JOB, "node", 1, data={"slot.json": "{}"}))
    seen: list[Change] = []
    deadline = time.monotonic() + 60
    for change in changes:
        seen.append(change)
        if change == Change("ADDED", "mindie-4-rdzv-node-1") or time.monotonic() > deadline:
            break
    assert Change("ADDED", "mindie-4-rdzv-node-1") in seen
    assert set(mirror.objects) == before | {"mindie-4-rdzv-node-1"}
    made["data"]["slot.json"] = '{"v": 2}'
    granted.replace(CONFIGMAPS, made)
    kinds = []
    for change in changes:
        kinds.append(change)
        if change.kind == "MODIFIED" or time.monotonic() > deadline:
            break
    assert mirror.objects["mindie-4-rdzv-node-1"]["data"] == {"slot.json": '{"v": 2}'}
    tick_deadline = time.monotonic() + 30
    for change in changes:  # nothing changes now: the 2 s watch ends, a TICK
        if change == Change("TICK") or time.monotonic() > tick_deadline:
            break
    assert change == Change("TICK")
    assert json.dumps(mirror.objects)  # plain JSON, as listed


CRDS = Resource("apiextensions.k8s.io", "v1", "customresourcedefinitions",
                "CustomResourceDefinition")
VCJOBS = Resource("batch.volcano.sh", "v1alpha1", "jobs", "Job")
VOLCANO_CRD = Path("/root/go/pkg/mod/volcano.sh/volcano@v1.10.0/config/crd/volcano/bases/"
                   "batch.volcano.sh_jobs.yaml")


@pytest.fixture(scope="module")
def garbage_collector(apiserver: tuple[str, Path], admin: Client, plane: Plane,
                      tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """kube-controller-manager running only its garbage collector, and Volcano v1.10.0's
    Job CRD from its Go module, so that a ConfigMap can be owned by a real vcjob object."""
    yaml = pytest.importorskip("yaml")
    bin_dir = plane.bin_dir
    if not (bin_dir / "kube-controller-manager").exists() or not VOLCANO_CRD.exists():
        pytest.skip("no kube-controller-manager in the bed's cache, or no Volcano v1.10.0 "
                    "module in the Go module cache")
    url, ca = apiserver
    tmp = tmp_path_factory.mktemp("kcm")
    kubeconfig = tmp / "kubeconfig.json"
    kubeconfig.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "admin",
        "clusters": [{"name": "bed", "cluster": {"server": url,
                                                 "certificate-authority": str(ca)}}],
        "users": [{"name": "admin", "user": {"token": ADMIN_TOKEN}}],
        "contexts": [{"name": "admin", "context": {"cluster": "bed", "user": "admin"}}]}))
    crd = yaml.safe_load(VOLCANO_CRD.read_text())
    with contextlib.suppress(AlreadyExists):
        admin.request("POST", Call("create", CRDS, ""),
                      "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", crd)
    log = open(tmp / "log", "wb")  # noqa: SIM115 - closed below
    kcm = subprocess.Popen(
        [str(bin_dir / "kube-controller-manager"), f"--kubeconfig={kubeconfig}",
         f"--authentication-kubeconfig={kubeconfig}", f"--authorization-kubeconfig={kubeconfig}",
         "--bind-address=127.0.0.1", "--secure-port=0", "--leader-elect=false",
         "--controllers=garbagecollector", "--use-service-account-credentials=false",
         "--v=0"], stdout=log, stderr=log)
    try:
        yield
    finally:
        kcm.terminate()
        try:
            kcm.wait(30)
        except subprocess.TimeoutExpired:
            kcm.kill()
            kcm.wait(30)
        log.close()


def _vcjob(admin: Client, name: str) -> dict[str, Any]:
    body = {"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job",
            "metadata": {"name": name, "namespace": NS},
            "spec": {"minAvailable": 1, "schedulerName": "volcano", "tasks": [
                {"name": "t", "replicas": 1, "template": {"spec": {
                    "containers": [{"name": "c", "image": "busybox"}]}}}]}}
    deadline = time.monotonic() + 60
    while True:  # the CRD is served a moment after it is created
        try:
            return admin.create(VCJOBS, body)
        except KubeError as exc:
            if exc.code != 404 or time.monotonic() > deadline:
                raise
            time.sleep(0.5)


def _gone(admin: Client, name: str, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            admin.get(CONFIGMAPS, name)
        except KubeError as exc:
            if exc.code == 404:
                return True
            raise
        time.sleep(0.5)
    return False


def test_the_objects_go_with_their_vcjob_and_a_wrong_uid_goes_at_once(
        admin: Client, garbage_collector: None) -> None:
    """Owned by the vcjob (ownerReference without controller or blockOwnerDeletion): the
    garbage collector removes the object when the job is deleted; an object whose owner uid
    is not the job's is an orphan and removed without the job being deleted — a wrong
    identity fails loudly."""
    job = _vcjob(admin, "gc-job")
    uid = job["metadata"]["uid"]
    ours = JobIdentity(NS, "gc-job", uid)
    wrong = JobIdentity(NS, "gc-job", "00000000-0000-4000-8000-000000000000")
    admin.create(CONFIGMAPS, new_object(ours, "attempt", data={"attempt.json": "{}"}))
    admin.create(CONFIGMAPS, new_object(wrong, "progress", data={"progress.json": "{}"}))
    assert _gone(admin, "gc-job-rdzv-progress", 120), "an orphan owner uid was not collected"
    assert not _gone(admin, "gc-job-rdzv-attempt", 3), "collected while its vcjob lives"
    admin.delete(VCJOBS, "gc-job")
    assert _gone(admin, "gc-job-rdzv-attempt", 120), "not collected with its vcjob"


def test_a_frozen_api_server_is_unanswered_and_its_return_answers(
        apiserver: tuple[str, Path], granted: Client, admin: Client, plane: Plane) -> None:
    """kube-apiserver stopped (SIGSTOP: it accepts nothing more, answers nothing) ends a call
    at the client's time-out with `ApiUnanswered` (exit 4, retryable) naming the server — as a
    stuck volume is named; once it runs again, the same client answers."""
    from ascend_node.kube.errors import ApiUnanswered
    url, _ = apiserver
    granted_name = "mindie-4-rdzv-node-2"  # a name the agent's Role allows
    with contextlib.suppress(AlreadyExists):
        admin.create(CONFIGMAPS, plain(granted_name))
    quick = _client(apiserver, AGENT_TOKEN)
    quick.timeout = 1.0
    quick.get(CONFIGMAPS, granted_name)  # a kept-alive connection, then the freeze
    api = plane.api
    freeze(api.pid)
    try:
        t0 = time.monotonic()
        with pytest.raises(ApiUnanswered) as info:
            quick.get(CONFIGMAPS, granted_name)
        assert time.monotonic() - t0 < 30
    finally:
        os.kill(api.pid, signal.SIGCONT)
    assert info.value.exit_code == 4
    text = str(info.value)
    assert f'the API server does not answer: get configmaps "{granted_name}"' in text
    assert url in text and "no answer within 1 s" in text
    quick.timeout = 30.0
    assert quick.get(CONFIGMAPS, granted_name)["metadata"]["name"] == granted_name


def test_a_yaml_kubeconfig_with_an_inline_client_certificate(
        apiserver: tuple[str, Path], admin: Client, plane: Plane, tmp_path: Path) -> None:
    """Outside the cluster, as kind and k3s write kubeconfigs: YAML, the CA and a client
    certificate inline (base64 of PEM). The certificate's O=system:masters makes it an
    admin for kube-apiserver's x509 authenticator."""
    pytest.importorskip("yaml")
    import base64

    from ascend_node.kube.config import from_kubeconfig
    url, ca = apiserver
    ca_dir = plane.pki_dir
    key, csr, crt = tmp_path / "u.key", tmp_path / "u.csr", tmp_path / "u.crt"
    run = lambda *a: subprocess.run(["openssl", *a], check=True, capture_output=True)  # noqa: E731
    run("req", "-newkey", "rsa:2048", "-nodes", "-subj", "/O=system:masters/CN=operator",
        "-keyout", str(key), "-out", str(csr))
    run("x509", "-req", "-in", str(csr), "-CA", str(ca_dir / "ca.crt"), "-CAkey",
        str(ca_dir / "ca.key"), "-CAcreateserial", "-days", "1", "-out", str(crt))
    b64 = lambda p: base64.b64encode(p.read_bytes()).decode()  # noqa: E731
    (tmp_path / "config").write_text(f"""apiVersion: v1
kind: Config
current-context: operator@bed
clusters:
- name: bed
  cluster:
    server: {url}
    certificate-authority-data: {b64(ca)}
users:
- name: operator
  user:
    client-certificate-data: {b64(crt)}
    client-key-data: {b64(key)}
contexts:
- name: operator@bed
  context: {{cluster: bed, user: operator, namespace: {NS}}}
""")
    ep = from_kubeconfig(None, {"KUBECONFIG": str(tmp_path / "config")})
    before = set(Path(tempfile.gettempdir()).glob("ascend-node-kube-*"))
    client = Client(ep, timeout=30)
    assert set(Path(tempfile.gettempdir()).glob("ascend-node-kube-*")) == before  # key: gone
    admin.create(CONFIGMAPS, plain("kubeconfig-check"))
    names = {o["metadata"]["name"] for o in client.list(CONFIGMAPS)["items"]}
    assert "kubeconfig-check" in names


def test_a_watch_narrowed_to_one_name_is_authorized_by_that_name(
        apiserver: tuple[str, Path], admin: Client) -> None:
    """`fieldSelector=metadata.name=<name>` makes a list or watch a request for that name
    (k8s.io/apiserver v0.30.2 requestinfo.go:233), so a Role's `resourceNames` can allow it:
    what a follower-only ServiceAccount would need to wait on the attempt object alone."""
    admin.create(CONFIGMAPS, plain("narrow-attempt"))
    admin.create(CONFIGMAPS, plain("narrow-other"))
    rule = {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "list", "watch"],
            "resourceNames": ["narrow-attempt"]}
    admin.request("POST", Call("create", ROLES, NS), ROLES.path(NS), {
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
        "metadata": {"name": "narrow"}, "rules": [rule]})
    admin.request("POST", Call("create", BINDINGS, NS), BINDINGS.path(NS), {
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
        "metadata": {"name": "narrow"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "narrow"},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User",
                      "name": "watcher"}]})
    watcher = _client(apiserver, WATCHER_TOKEN)
    deadline = time.monotonic() + 60
    while True:  # RBAC's cache sees the binding a moment later
        try:
            events = list(watcher.watch(CONFIGMAPS, timeout_seconds=1,
                                        field_selector="metadata.name=narrow-attempt"))
            break
        except Forbidden:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)
    assert [(e["type"], e["object"]["metadata"]["name"]) for e in events] == [
        ("ADDED", "narrow-attempt")]
    with pytest.raises(Forbidden, match=r'watch configmaps in namespace "team-a"'):
        list(watcher.watch(CONFIGMAPS, timeout_seconds=1))
    with pytest.raises(Forbidden, match='watch configmaps "narrow-other"'):
        list(watcher.watch(CONFIGMAPS, timeout_seconds=1,
                           field_selector="metadata.name=narrow-other"))
