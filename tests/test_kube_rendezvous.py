"""The rendezvous through the Kubernetes API, end to end: real `ascend-node ranktable`
processes (`--rendezvous kube`, no shared directory) against a real kube-apiserver v1.30.2
and etcd (`tests/kube_apiserver.py`, the bed's binaries), each authenticated with a real
ServiceAccount token from the TokenRequest API, under the ServiceAccount, Role and
RoleBinding `kube_layout.rbac_objects` renders (what `manifest --rendezvous kube` applies).

Each pod gets the environment Volcano and the downward API give it (ROLE, VC_TASK_INDEX,
..., and the job's name and pod group from the annotations, as `kube_layout.identity_env`
maps them), and the ServiceAccount's three files in a directory of its own
(`ASCEND_NODE_SERVICE_ACCOUNT_DIR`, the testing knob of `chain/kube_table.py`), with
KUBERNETES_SERVICE_HOST/PORT pointing at the API server as the kubelet would.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import re
import shutil
import signal
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Optional
from urllib.parse import urlsplit

import pytest

from ascend_node.kube.client import Client
from ascend_node.kube.config import Endpoint
from ascend_node.kube.errors import AlreadyExists, Forbidden, KubeError, NotFound
from ascend_node.kube.resources import CONFIGMAPS, Call, Resource
from ascend_node.rendezvous.kube_layout import (
    JobIdentity,
    join_table,
    object_name,
    rbac_objects,
    service_account_name,
    table_part,
)
from ascend_node.sim.cluster import NodeResult, SimNode, SimSpec, launch, prepare
from tests.cluster_helpers import explain, make_nodes
from tests.freeze import freeze
from tests.kube_apiserver import Plane, binaries, control_plane

pytestmark = pytest.mark.kube

NS = "rdzv"
ADMIN_TOKEN = "admin-token-rdzv"
NAMESPACES = Resource("", "v1", "namespaces", "Namespace")
ROLES = Resource("rbac.authorization.k8s.io", "v1", "roles", "Role")
BINDINGS = Resource("rbac.authorization.k8s.io", "v1", "rolebindings", "RoleBinding")
SERVICE_ACCOUNTS = Resource("", "v1", "serviceaccounts", "ServiceAccount")


@pytest.fixture(scope="module")
def plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Plane]:
    bin_dir = binaries()
    if bin_dir is None:
        pytest.skip("no kube-apiserver/etcd v1.30 in ~/.cache/ascend-node-kube (built by the "
                    "control-plane bed, issue 37: scripts/kube-bed)")
    if shutil.which("openssl") is None:
        pytest.skip("openssl is not installed")
    try:
        with control_plane(tmp_path_factory.mktemp("apiserver"),
                           {ADMIN_TOKEN: ("admin", "system:masters")}, bin_dir) as p:
            yield p
    except RuntimeError as exc:
        pytest.fail(str(exc))


def _client(plane: Plane, token: str) -> Client:
    return Client(Endpoint(server=plane.url, namespace=NS, source="test",
                           ca_file=str(plane.ca), token=token), timeout=30)


@pytest.fixture(scope="module")
def admin(plane: Plane) -> Client:
    c = _client(plane, ADMIN_TOKEN)
    with contextlib.suppress(AlreadyExists):
        c.request("POST", Call("create", NAMESPACES, ""), "/api/v1/namespaces",
                  {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}})
    return c


def grant(plane: Plane, admin: Client, job: str, nodes: int,
          drop_verb: Optional[str] = None, instances: Optional[dict[str, int]] = None) -> str:
    """The job's ServiceAccount, Role and RoleBinding as `manifest` renders them (less
    `drop_verb`, for the missing-verb case; a PD service's with `instances`); a real token
    of that ServiceAccount from the TokenRequest API."""
    objects = rbac_objects(job, NS, nodes, instances)
    if drop_verb:
        for rule in objects[1]["rules"]:
            rule["verbs"] = [v for v in rule["verbs"] if v != drop_verb]
        objects[1]["rules"] = [r for r in objects[1]["rules"] if r["verbs"]]
    for obj, res in zip(objects, (SERVICE_ACCOUNTS, ROLES, BINDINGS)):
        admin.request("POST", Call("create", res, NS), res.path(NS), obj)
    sa = service_account_name(job)
    answer = admin.request(
        "POST", Call("create", SERVICE_ACCOUNTS, NS, sa),
        SERVICE_ACCOUNTS.path(NS, sa) + "/token",
        {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
         "spec": {"expirationSeconds": 3600}})
    token = str(answer["status"]["token"])
    agent = _client(plane, token)
    deadline = time.monotonic() + 60
    while True:  # RBAC's cache takes a moment to see the new binding
        try:
            agent.get(CONFIGMAPS, object_name(job, "attempt"))
        except Forbidden:
            if drop_verb == "get" or time.monotonic() > deadline:
                break
            time.sleep(0.2)
            continue
        except KubeError:
            pass
        break
    return token


def opened(admin: Client, job: str, node: Optional[int] = None) -> bool:
    """Whether node 0's attempt (or node `node`'s slot) exists yet: the tests inject a
    fault on that event, not at a fixed second, which a loaded machine that started the
    pods late turns into a fault before anyone waits."""
    name = object_name(job, "attempt") if node is None else object_name(job, "node", node)
    try:
        admin.get(CONFIGMAPS, name)
    except NotFound:
        return False
    return True


def start_on(admin: Client, job: str, node: SimNode,
             slot: Optional[int] = None) -> Callable[[float, Any, Any], None]:
    """An `on_tick` that starts `node` (its start delay `math.inf` until then) once node 0
    has opened its attempt (`opened`), or once node `slot`'s slot exists, or once any node
    ended (then the test's assertions say what went wrong, rather than a hang)."""
    node.start_delay = math.inf

    def tick(elapsed: float, ended: Any, _running: Any) -> None:
        if node.start_delay == math.inf and (ended or opened(admin, job, slot)):
            node.start_delay = elapsed

    return tick


def kube_nodes(tmp: Path, plane: Plane, token: str, job: str, uid: str, nodes: int,
               timeout: float = 40.0, boot: bool = False, **env: str) -> list[SimNode]:
    """Simulated pods of vcjob `job` meeting through the API, with no shared directory."""
    if boot:  # into the fake MindIE daemon, as a pod of `manifest --kind mindie` does
        made = prepare(SimSpec(nodes=nodes, devices=2, run_id="t", timeout=timeout, boot=True,
                               extra_env={"ASCEND_NODE_PROGRESS_INTERVAL": "1", **env}),
                       tmp / "work", tmp / "shared")
    else:
        made = make_nodes(tmp, nodes, devices=2, timeout=timeout, run_id="t", **env)
    url = urlsplit(plane.url)
    for node in made:
        sa_dir = node.state_dir.parent / "serviceaccount"
        sa_dir.mkdir(parents=True, exist_ok=True)
        (sa_dir / "token").write_text(token)
        (sa_dir / "ca.crt").write_bytes(plane.ca.read_bytes())
        (sa_dir / "namespace").write_text(NS)
        node.env.pop("ASCEND_NODE_SHARED_DIR", None)
        node.env.pop("ASCEND_NODE_RUN_ID", None)  # the job's name is the run
        node.env.update({
            "ASCEND_NODE_RENDEZVOUS": "kube",
            "ASCEND_NODE_SERVICE_ACCOUNT_DIR": str(sa_dir),
            "KUBERNETES_SERVICE_HOST": str(url.hostname),
            "KUBERNETES_SERVICE_PORT": str(url.port),
            # the downward API's view of Volcano's annotations (kube_layout.identity_env)
            "ASCEND_NODE_JOB_NAME": job,
            "ASCEND_NODE_POD_GROUP": f"{job}-{uid}",
        })
    return made


def local_tables(results: list[NodeResult]) -> set[Optional[bytes]]:
    return {r.local_table() for r in results}


def requests_of(result: NodeResult) -> int:
    found = re.findall(r"rendezvous through the API: (\d+) requests", result.stderr)
    assert found, result.stderr[-2000:]
    return int(found[-1])


def table_in_api(admin: Client, job: JobIdentity) -> str:
    attempt = admin.get(CONFIGMAPS, object_name(job.name, "attempt"))
    outcome = json.loads(attempt["data"]["outcome.json"])
    first = admin.get(CONFIGMAPS, object_name(job.name, "table", 0))
    count = int(first["data"]["parts"])
    parts: list[Optional[bytes]] = [table_part(job, first, 0, outcome["attempt_id"],
                                               outcome["ranktable_sha256"], count)]
    return join_table(parts, outcome["ranktable_sha256"])


REQUESTS: dict[int, list[int]] = {}


@pytest.mark.parametrize("nodes", [2, 4, 8])
def test_every_pod_holds_the_same_table_without_a_shared_directory(
        tmp_path: Path, plane: Plane, admin: Client, nodes: int) -> None:
    job = JobIdentity(NS, f"same-{nodes}", str(uuid.uuid4()))
    token = grant(plane, admin, job.name, nodes)
    made = kube_nodes(tmp_path, plane, token, job.name, job.uid, nodes)
    results = launch(made, 120)
    assert all(r.exit_code == 0 for r in results), explain(results)
    tables = local_tables(results)
    assert len(tables) == 1 and None not in tables, explain(results)
    table = tables.pop()
    assert table is not None
    assert table.decode() == table_in_api(admin, job)  # byte for byte what node 0 stored
    doc = json.loads(table)
    assert [s["container_ip"] for s in doc["server_list"]] == [
        n.env["K8S_POD_IP"] for n in made]
    for node in made:  # written locally, as on the volume
        assert (node.state_dir.parent / "master").read_text().strip() == made[0].env[
            "K8S_POD_IP"]
        assert (node.state_dir.parent / "world_size").read_text().strip() == str(nodes * 2)
        assert (node.state_dir / "source_mul_env.sh").is_file()
    assert not (tmp_path / "shared" / ".ascend-node").exists()  # nothing on any volume
    for name in ([object_name(job.name, "attempt")]
                 + [object_name(job.name, "node", g) for g in range(nodes)]):
        owners = admin.get(CONFIGMAPS, name)["metadata"]["ownerReferences"]
        assert [(o["kind"], o["name"], o["uid"]) for o in owners] == [
            ("Job", job.name, job.uid)]
    REQUESTS[nodes] = [requests_of(r) for r in results]
    print(f"API requests per pod at {nodes} nodes: {REQUESTS[nodes]}")


def test_a_node_that_never_comes_is_named_at_the_deadline(
        tmp_path: Path, plane: Plane, admin: Client) -> None:
    job = JobIdentity(NS, "absent-4", str(uuid.uuid4()))
    token = grant(plane, admin, job.name, 4)
    made = kube_nodes(tmp_path, plane, token, job.name, job.uid, 4, timeout=12)
    results = launch(made[:3], 90)  # worker 2 (node 3) never starts
    assert [r.exit_code for r in results] == [4, 4, 4], explain(results)
    assert "1 of 4 missing: worker 2 (node 3)" in results[0].cause, explain(results)
    for r in results[1:]:
        assert "waiting for worker 2 (node 3)" in r.cause, explain(results)


def test_a_role_missing_a_verb_is_one_line_and_exit_1_before_any_wait(
        tmp_path: Path, plane: Plane, admin: Client) -> None:
    job = JobIdentity(NS, "noupdate-2", str(uuid.uuid4()))
    token = grant(plane, admin, job.name, 2, drop_verb="update")
    made = kube_nodes(tmp_path, plane, token, job.name, job.uid, 2, timeout=60)
    t0 = time.monotonic()
    results = launch(made, 120)
    assert [r.exit_code for r in results] == [1, 1], explain(results)
    assert max(r.seconds for r in results) < 30, explain(results)  # not the 60 s timeout
    for r in results:
        assert re.search(r'forbids update configmaps "noupdate-2-rdzv-(attempt|node-1)" in '
                         f'namespace "{NS}"', r.cause), explain(results)
        assert 'verbs: ["update"]' in r.cause and "manifest --rendezvous kube" in r.hint
    assert time.monotonic() - t0 < 60


def test_a_second_jobs_serviceaccount_cannot_write_this_jobs_objects(
        tmp_path: Path, plane: Plane, admin: Client) -> None:
    job = JobIdentity(NS, "first-2", str(uuid.uuid4()))
    token = grant(plane, admin, job.name, 2)
    results = launch(kube_nodes(tmp_path, plane, token, job.name, job.uid, 2), 120)
    assert [r.exit_code for r in results] == [0, 0], explain(results)
    other = _client(plane, grant(plane, admin, "second-2", 2))
    mine = admin.get(CONFIGMAPS, object_name(job.name, "attempt"))
    forged = json.loads(json.dumps(mine))
    forged["data"]["outcome.json"] = "{}"
    with pytest.raises(Forbidden) as info:
        other.replace(CONFIGMAPS, forged)
    assert 'update configmaps "first-2-rdzv-attempt"' in str(info.value)
    with pytest.raises(Forbidden):
        other.get(CONFIGMAPS, object_name(job.name, "node", 1))
    # create is not restricted by name in RBAC, but the name is taken: nothing replaced
    with pytest.raises(AlreadyExists):
        other.create(CONFIGMAPS, {"apiVersion": "v1", "kind": "ConfigMap",
                                  "metadata": {"name": object_name(job.name, "node", 1)},
                                  "data": {}})
    assert admin.get(CONFIGMAPS, object_name(job.name, "attempt"))["data"] == mine["data"]


def test_a_restart_with_a_bumped_job_version_opens_a_new_attempt_and_table(
        tmp_path: Path, plane: Plane, admin: Client) -> None:
    job = JobIdentity(NS, "restart-2", str(uuid.uuid4()))
    token = grant(plane, admin, job.name, 2)
    first = launch(kube_nodes(tmp_path / "a", plane, token, job.name, job.uid, 2,
                              ASCEND_NODE_JOB_VERSION="0"), 120)
    assert [r.exit_code for r in first] == [0, 0], explain(first)
    attempt1 = json.loads(admin.get(CONFIGMAPS, object_name(job.name, "attempt"))
                          ["data"]["attempt.json"])["attempt_id"]
    again = kube_nodes(tmp_path / "b", plane, token, job.name, job.uid, 2,
                       ASCEND_NODE_JOB_VERSION="1")
    for node in again:  # RestartJob re-creates every pod: new pods, new addresses
        ip = node.env["K8S_POD_IP"].rsplit(".", 1)
        node.env["K8S_POD_IP"] = f"{ip[0]}.{int(ip[1]) + 100}"
    second = launch(again, 120)
    assert [r.exit_code for r in second] == [0, 0], explain(second)
    attempt = json.loads(admin.get(CONFIGMAPS, object_name(job.name, "attempt"))
                         ["data"]["attempt.json"])
    assert attempt["attempt_id"] != attempt1 and attempt["job_version"] == 1
    assert "the job was restarted: job version 1" in attempt["reason"]
    tables = local_tables(second)
    assert len(tables) == 1 and tables != local_tables(first), explain(second)
    table = json.loads(tables.pop() or b"{}")
    assert [s["container_ip"] for s in table["server_list"]] == [
        n.env["K8S_POD_IP"] for n in again]


def test_an_api_server_stopped_for_the_whole_wait_is_named_and_exit_4(
        tmp_path: Path, plane: Plane, admin: Client) -> None:
    job = JobIdentity(NS, "frozen-2", str(uuid.uuid4()))
    token = grant(plane, admin, job.name, 2)
    made = kube_nodes(tmp_path, plane, token, job.name, job.uid, 2, timeout=10)
    freeze(plane.api.pid)
    try:
        results = launch(made, 60)
    finally:
        os.kill(plane.api.pid, signal.SIGCONT)
    assert [r.exit_code for r in results] == [4, 4], explain(results)
    for r in results:
        assert "the API server does not answer" in r.cause and plane.url in r.cause, \
            explain(results)
        assert r.seconds < 10 + 15, explain(results)  # the deadline, plus one call's time-out
        assert "retrying until the deadline" in r.stderr  # progress lines say so


KUBE_MODULES = ["ascend_node.chain.kube_failures", "ascend_node.chain.kube_table",
                "ascend_node.kube", "ascend_node.kube.client",
                "ascend_node.kube.config", "ascend_node.kube.errors", "ascend_node.kube.mirror",
                "ascend_node.kube.resources", "ascend_node.rendezvous.kube_docs",
                "ascend_node.rendezvous.kube_layout", "ascend_node.rendezvous.kube_participant",
                # after the rendezvous: the pod's timeline summary into its slot (`report`)
                "ascend_node.rendezvous.kube_summary"]


def test_the_api_path_imports_the_volumes_modules_and_the_client_only(
        tmp_path: Path, plane: Plane, admin: Client) -> None:
    """tests/pod_imports.json pins the volume's `ranktable`; through the API a pod loads
    exactly those modules, less the volume's chain step, plus the client and the kube
    rendezvous' own: no third-party package more (no PyYAML, no kubernetes client)."""
    from tests.test_pod_imports import PINNED, _imports

    job = JobIdentity(NS, "imports-1", str(uuid.uuid4()))
    token = grant(plane, admin, job.name, 1)
    node = kube_nodes(tmp_path, plane, token, job.name, job.uid, 1)[0]
    from ascend_node.sim.fake_tools import write_node_data
    write_node_data(node.data_dir, node.devices)
    found, done = _imports(["ranktable"], {**node.env, "ASCEND_NODE_PREFLIGHT": "strict"})
    assert done.returncode == 0, done.stderr[-3000:]
    pinned = PINNED["ranktable"]
    assert found["third_party"] == pinned["third_party"]
    assert sorted(set(found["ascend_node"]) - set(pinned["ascend_node"])) == KUBE_MODULES


def test_a_follower_that_fails_locally_ends_the_rendezvous_at_once(
        tmp_path: Path, plane: Plane, admin: Client) -> None:
    """Its failure document in its slot: node 0 aborts with its cause (5) long before the
    timeout, as on the volume; the failed pod exits with its own cause (1)."""
    job = JobIdentity(NS, "localfail-2", str(uuid.uuid4()))
    token = grant(plane, admin, job.name, 2)
    made = kube_nodes(tmp_path, plane, token, job.name, job.uid, 2, timeout=60)
    made[1].env["ASCEND_NODE_DEVICES"] = "0,x"
    results = launch(made, 120, on_tick=start_on(admin, job.name, made[1]))
    assert [r.exit_code for r in results] == [5, 1], explain(results)
    assert "ASCEND_NODE_DEVICES" in results[1].cause
    assert "worker 0 (node 1)" in results[0].cause and "ASCEND_NODE_DEVICES" in \
        results[0].cause, explain(results)
    assert results[0].seconds < 40, explain(results)


def test_an_api_server_stopped_in_the_middle_of_the_wait_lets_it_complete(
        tmp_path: Path, plane: Plane, admin: Client) -> None:
    """Stopped for 6 s while node 0 and a follower wait (their watches and calls hang and
    time out), started again before the last pod comes: the progress lines name the API
    server, the role runs again from what the API holds, and every pod gets one table."""
    job = JobIdentity(NS, "paused-3", str(uuid.uuid4()))
    token = grant(plane, admin, job.name, 3)
    made = kube_nodes(tmp_path, plane, token, job.name, job.uid, 3, timeout=90)
    made[2].start_delay = math.inf  # 2 s after the API server is back
    at: dict[str, float] = {}

    def tick(elapsed: float, ended: Any, _running: Any) -> None:
        if "stopped" not in at and (ended or (opened(admin, job.name)
                                              and opened(admin, job.name, 1))):
            at["stopped"] = elapsed  # node 0 and node 1 wait (~4 s on a quiet machine)
            freeze(plane.api.pid)
        if "stopped" in at and "resumed" not in at and elapsed >= at["stopped"] + 6.0:
            at["resumed"] = elapsed
            os.kill(plane.api.pid, signal.SIGCONT)
            made[2].start_delay = elapsed + 2.0

    try:
        results = launch(made, 150, on_tick=tick)
    finally:
        os.kill(plane.api.pid, signal.SIGCONT)
    assert "resumed" in at
    assert [r.exit_code for r in results] == [0, 0, 0], explain(results)
    tables = local_tables(results)
    assert len(tables) == 1 and None not in tables, explain(results)
    assert any("the API server does not answer" in r.stderr for r in results[:2]), \
        explain(results)


def test_node_0_failing_locally_ends_every_pod_at_once(
        tmp_path: Path, plane: Plane, admin: Client) -> None:
    """Node 0 opens an attempt and aborts it with its cause: the followers that joined it
    exit 5 naming node 0's failure, long before their timeout."""
    job = JobIdentity(NS, "node0fail-3", str(uuid.uuid4()))
    token = grant(plane, admin, job.name, 3)
    made = kube_nodes(tmp_path, plane, token, job.name, job.uid, 3, timeout=60)
    made[0].env["ASCEND_NODE_DEVICES"] = "0,x"
    results = launch(made, 120)
    assert [r.exit_code for r in results] == [1, 5, 5], explain(results)
    for r in results[1:]:
        assert "master 0 (node 0) failed" in r.cause and "ASCEND_NODE_DEVICES" in r.cause, \
            explain(results)
        assert r.seconds < 40, explain(results)


def test_boot_execs_mindie_with_the_table_met_through_the_api(
        tmp_path: Path, plane: Plane, admin: Client) -> None:
    """The whole chain after the rendezvous through the API: the MindIE daemon starts on
    every pod with the same table, its master and world size, and no shared volume."""
    job = JobIdentity(NS, "boot-2", str(uuid.uuid4()))
    token = grant(plane, admin, job.name, 2)
    (tmp_path / "shared").mkdir()
    made = kube_nodes(tmp_path, plane, token, job.name, job.uid, 2, timeout=60, boot=True)
    results = launch(made, 120)
    assert [r.exit_code for r in results] == [0, 0], explain(results)
    assert len(local_tables(results)) == 1, explain(results)
    for node, r in zip(made, results):
        assert "Daemon start success!" in r.stdout, explain(results)
        report = (r.state_dir.parent / "daemon-report.txt").read_text().splitlines()
        env = dict(ln.split("=", 1) for ln in report[1:] if "=" in ln)
        assert env["MIES_CONTAINER_IP"] == node.env["K8S_POD_IP"]
        assert env["MASTER_IP"] == made[0].env["K8S_POD_IP"] and env["WORLD_SIZE"] == "4"
    assert list((tmp_path / "shared").iterdir()) == []


def test_two_live_pods_claiming_one_index_end_with_5(
        tmp_path: Path, plane: Plane, admin: Client) -> None:
    """The second twin finds the slot held by another live pod's document and marks its own
    contested; node 0 then settles a progress interval instead of completing, the first
    twin finds its slot overwritten and leaves a conflict document, and every pod exits 5
    naming the index, as on the volume (`test_rendezvous_cluster.py`)."""
    job = JobIdentity(NS, "twins-3", str(uuid.uuid4()))
    token = grant(plane, admin, job.name, 3)
    made = kube_nodes(tmp_path, plane, token, job.name, job.uid, 3, timeout=60)
    twin = kube_nodes(tmp_path / "twin", plane, token, job.name, job.uid, 3, timeout=60)[2]
    twin.env["K8S_POD_IP"] = "10.250.0.1"
    twin.devices = [type(d)(d.device_id, f"10.99.0.{d.device_id + 1}") for d in twin.devices]
    twin.index = 3
    # The twin overwrites node 2's slot, and node 1 completes the set before node 2 looks
    # at its slot again (every progress interval, 5 s here): node 0 must settle rather than
    # complete (without the settle it completes with the twin's document: [0, 0, 5, 0]).
    for node in (*made, twin):
        node.env["ASCEND_NODE_PROGRESS_INTERVAL"] = "5"
    # in order, each on the event before it (not at fixed seconds a loaded machine makes
    # wrong): node 2 publishes, the twin over it, then node 1
    made[2].start_delay = 0.3
    twin.start_delay = made[1].start_delay = math.inf
    slot = object_name(job.name, "node", 2)

    def tick(elapsed: float, ended: Any, _running: Any) -> None:
        if twin.start_delay == math.inf and (ended or opened(admin, job.name, 2)):
            twin.start_delay = elapsed
        elif twin.start_delay < math.inf and made[1].start_delay == math.inf:
            held = json.dumps(admin.get(CONFIGMAPS, slot).get("data") or {})
            if ended or "10.250.0.1" in held:
                made[1].start_delay = elapsed

    results = launch([*made, twin], 120, on_tick=tick)
    assert [r.exit_code for r in results] == [5, 5, 5, 5], explain(results)
    assert "two live pods claim worker 1 (node 2)" in results[0].cause, explain(results)
    assert max(r.seconds for r in results) < 45, explain(results)


def watches_of(result: NodeResult) -> int:
    found = re.findall(r"rendezvous through the API: \d+ requests \((\d+) watches\)",
                       result.stderr)
    assert found, result.stderr[-2000:]
    return int(found[-1])


def test_a_waiting_follower_costs_one_watch_per_progress_interval_and_nothing_more(
        tmp_path: Path, plane: Plane, admin: Client) -> None:
    """What a pod costs the API server while it waits (issue 38, item 5; docs/benchmarks.md):
    the watch of its attempt and progress objects, opened again every progress interval
    (`timeoutSeconds`, so the deadline and the progress lines keep their cadence), and no
    read per interval — not of its slot (node 0 asks a contested slot's pod to look, the
    settle annotation) nor of node 0's progress (the watch brings it). Its other calls are
    the fixed ones (review, list, its slot's read and create, ...) however long it waits."""
    job = JobIdentity(NS, "waiting-3", str(uuid.uuid4()))
    token = grant(plane, admin, job.name, 3)
    made = kube_nodes(tmp_path, plane, token, job.name, job.uid, 3, timeout=16,
                      ASCEND_NODE_PROGRESS_INTERVAL="1")
    results = launch(made[:2], 90)  # worker 1 (node 2) never starts
    assert [r.exit_code for r in results] == [4, 4], explain(results)
    follower = results[1]
    requests, watches = requests_of(follower), watches_of(follower)
    # ~14 intervals of waiting: before, each cost a watch, a read of the slot and one of
    # the progress (~3 per interval, ~45 in all); now one watch per interval.
    assert watches >= 5, explain(results)  # it did wait (a loaded machine starts late)
    assert requests - watches <= 8, (requests, watches, explain(results))
    assert "waiting for the table of attempt" in follower.cause, explain(results)
    assert "waiting for worker 1 (node 2)" in follower.cause, explain(results)


def test_a_403_on_a_call_the_rules_review_allowed_is_retried_until_the_deadline(
        tmp_path: Path, plane: Plane, admin: Client) -> None:
    """The job's RoleBinding gone for a while after every pod's rules review allowed its
    calls (what a kube-apiserver just restarted answers until its RBAC caches are filled:
    403 on every call, seen on the agent bed, tests/test_kube_rdzv_jobs.py), then back:
    node 0 retries as with a server that does not answer, saying so, and every pod gets
    the table - not exit 1 on the first 403."""
    job = JobIdentity(NS, "rbac-gap-2", str(uuid.uuid4()))
    token = grant(plane, admin, job.name, 2)
    made = kube_nodes(tmp_path, plane, token, job.name, job.uid, 2, timeout=90,
                      ASCEND_NODE_PROGRESS_INTERVAL="1")  # node 0 calls in the gap
    made[1].start_delay = math.inf  # 2 s after the binding is back
    binding = rbac_objects(job.name, NS, 2)[2]
    name = binding["metadata"]["name"]
    at: dict[str, float] = {}

    def tick(elapsed: float, ended: Any, _running: Any) -> None:
        if "removed" not in at and (ended or opened(admin, job.name)):
            at["removed"] = elapsed  # node 0's rules review passed: it opened its attempt
            admin.request("DELETE", Call("delete", BINDINGS, NS, name),
                          BINDINGS.path(NS, name))
        if "removed" in at and "back" not in at and elapsed >= at["removed"] + 8.0:
            at["back"] = elapsed
            admin.request("POST", Call("create", BINDINGS, NS), BINDINGS.path(NS), binding)
            made[1].start_delay = elapsed + 2.0

    results = launch(made, 150, on_tick=tick)
    assert "back" in at
    assert [r.exit_code for r in results] == [0, 0], explain(results)
    assert "though its rules review allowed it" in results[0].stderr, explain(results)
    tables = local_tables(results)
    assert len(tables) == 1 and None not in tables, explain(results)
