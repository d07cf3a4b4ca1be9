"""Jobs rendered with `manifest --rendezvous kube` run for real: no shared volume at all.

The pods meet through the API server (docs/rendezvous.md, "Through the Kubernetes API") as
Volcano's controller creates them and the nodes' agent runs them (tests/kube_agent_bed.py):
the token is the one the ServiceAccount admission plugin's projected volume names and the
TokenRequest API issues, the CA is kube-controller-manager's `kube-root-ca.crt`, the address
is what the agent puts in KUBERNETES_SERVICE_HOST/PORT (the bridge's gateway: the bed has no
kube-proxy, docs/kube-node-agent.md). The Job holds no PersistentVolumeClaim: the weights
are on each node's local disk (a `hostPath` the test adds, what a cluster without a
ReadWriteMany volume uses), where the fake daemon also leaves its report.
"""

from __future__ import annotations

import json
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.kube_agent_bed import MOTOR_FAKE, SIM_DIR, AgentBed, Timeline, open_agent
from tests.kube_bed import Bed
from tests.test_kube_jobs import (
    IMAGE,
    epoch,
    job_status,
    ready,
    ready_at,
    render,
    scheduled_at,
    started_at,
)

pytestmark = [pytest.mark.kube, pytest.mark.containers]

WEIGHTS = "/mnt/model"        # where the pods see the weights (--model-dir)
NODE_WEIGHTS = "data/models"  # under each fake node's root: its local disk
SA_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"


@pytest.fixture(scope="module")
def agent(kube_bed: Bed) -> Iterator[AgentBed]:
    yield from open_agent(kube_bed)


def node_roots(agent: AgentBed) -> dict[str, Path]:
    return {p.parent.name: p for p in (Path(agent.containers.work) / "kube-nodes").glob(
        "*/root")}


def local_weights(agent: AgentBed) -> None:
    """Every node's local disk holds the model's config.json, the fakes' report directory
    and the MindIE-Motor fakes: what the claim held in tests/test_kube_jobs.py."""
    from ascend_node.sim.fake_tools import SIM_MODEL_CONFIG

    for root in node_roots(agent).values():
        host = root / NODE_WEIGHTS
        subprocess.run(["rm", "-rf", str(host)], check=True)
        (host / SIM_DIR / "bin").mkdir(parents=True)
        (host / SIM_DIR).chmod(0o777)
        (host / "config.json").write_text(SIM_MODEL_CONFIG)
        for role in ("coordinator", "controller"):
            script = host / SIM_DIR / "bin" / f"mindie_motor_{role}"
            script.write_text(MOTOR_FAKE.format(role=role))
            script.chmod(0o755)


def with_local_weights(text: str, bed: Bed) -> str:
    """The rendered stream with each pod's weights on its node's disk: a `hostPath` volume
    mounted at --model-dir in every container (the manifest leaves where the weights come
    from to the platform when there is no claim)."""
    docs = []
    for doc in bed.api.split_documents(text):
        obj = yaml.safe_load(doc)
        if obj.get("kind") == "Job":
            for task in obj["spec"]["tasks"]:
                spec = task["template"]["spec"]
                spec.setdefault("volumes", []).append(
                    {"name": "local-weights",
                     "hostPath": {"path": f"/{NODE_WEIGHTS}", "type": "Directory"}})
                for c in spec["containers"]:
                    c.setdefault("volumeMounts", []).append(
                        {"name": "local-weights", "mountPath": WEIGHTS})
        docs.append(yaml.safe_dump(obj, sort_keys=False))
    return "---\n".join(docs)


def no_claim(objs: list[dict[str, Any]]) -> None:
    """No PersistentVolumeClaim anywhere in what is applied."""
    assert not any(o["kind"] == "PersistentVolumeClaim" for o in objs)
    for job in (o for o in objs if o["kind"] == "Job"):
        for task in job["spec"]["tasks"]:
            vols = task["template"]["spec"].get("volumes", [])
            assert not any("persistentVolumeClaim" in v for v in vols), vols


class KubeRun:
    """One Job rendered with `--rendezvous kube` in its own namespace."""

    def __init__(self, agent: AgentBed, ns: str, name: str, *flags: str,
                 weights: bool = True) -> None:
        self.agent, self.ns, self.name = agent, ns, name
        agent.kube_bed.namespace(ns)
        self.text = render("--namespace", ns, "--name", name, "--image", IMAGE,
                           "--rendezvous", "kube", "--timeout", "120", *flags)
        if weights:
            local_weights(agent)
            self.text = with_local_weights(self.text, agent.kube_bed)
        self.objs = [yaml.safe_load(d) for d in agent.kube_bed.api.split_documents(self.text)]
        self.stop = threading.Event()
        self.timeline = Timeline(time.monotonic())

    def __enter__(self) -> KubeRun:
        no_claim(self.objs)
        self.timeline = Timeline(time.monotonic())
        api = self.agent.kube_bed.api
        for doc in api.split_documents(self.text):  # as `kubectl apply -f` posts each
            obj = yaml.safe_load(doc)
            self.agent.kube.create_yaml(api.path_for(obj["apiVersion"], obj["kind"], self.ns),
                                        doc)
        self.agent.watch(self.ns, self.timeline, self.stop)
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop.set()
        self.agent.purge(self.ns)

    def pods(self) -> list[dict[str, Any]]:
        return sorted(self.agent.kube_bed.pods(self.ns), key=lambda p: p["metadata"]["name"])

    def describe(self) -> str:
        lines = []
        for p in self.pods():
            st = p.get("status", {})
            states = [(c["name"], c.get("state", {})) for c in st.get("containerStatuses", [])]
            lines.append(f"{p['metadata']['name']} on {p['spec'].get('nodeName')}: "
                         f"{st.get('phase')} ready={ready(p)} {states}")
        return "\n".join(lines) + "\n--- agent log:\n" + self.agent.log_tail()

    def wait(self, what: str, probe: Any, timeout: float = 300) -> Any:
        try:
            return self.agent.kube_bed.wait(what, probe, timeout)
        except TimeoutError as e:
            raise AssertionError(f"{e}\n{self.describe()}") from None

    def wait_ready(self, count: int, exclude: frozenset[str] = frozenset(),
                   timeout: float = 300) -> list[dict[str, Any]]:
        def probe() -> list[dict[str, Any]]:
            failed = [(name, term.get("exitCode"), term.get("message", "").strip()[-300:])
                      for (name, _), (_, term) in list(self.timeline.terminated.items())
                      if term.get("exitCode")]
            if failed:  # a pod's agent gave up: say why now, not at the time-out
                raise AssertionError(f"{failed}\n{self.describe()}")
            pods = [p for p in self.pods() if p["metadata"]["uid"] not in exclude]
            return pods if len(pods) == count and all(ready(p) for p in pods) else []
        return list(self.wait(f"{count} pods of {self.ns} Ready", probe, timeout))

    def report(self, pod: dict[str, Any]) -> Path:
        root = node_roots(self.agent)[pod["spec"]["nodeName"]]
        return Path(root, NODE_WEIGHTS, SIM_DIR, str(pod["metadata"]["name"]))

    def daemon_env(self, pod: dict[str, Any]) -> dict[str, str]:
        lines = self.report(pod).read_text().splitlines()
        return dict(line.split("=", 1) for line in lines[1:] if "=" in line)

    def loaded_at(self, pod: dict[str, Any]) -> float:
        mark = self.report(pod).with_name(pod["metadata"]["name"] + ".loaded")
        return float(mark.read_text()) if mark.is_file() else 0.0

    def config_maps(self) -> list[dict[str, Any]]:
        return list(self.agent.kube.get(f"/api/v1/namespaces/{self.ns}/configmaps")["items"])


def check_tables(agent: AgentBed, run: KubeRun, pods: list[dict[str, Any]], npus: int,
                 table_env: str = "RANK_TABLE_FILE") -> bytes:
    """One table, byte for byte, on every pod, naming every pod IP; each daemon started
    with the platform's env; returns the table."""
    ips = [p["status"]["podIP"] for p in pods]
    assert len(set(ips)) == len(pods) and len({p["spec"]["nodeName"] for p in pods}) == len(pods)
    assert min(started_at(p) for p in pods) >= max(scheduled_at(p) for p in pods)
    master = next(p for p in pods if p["metadata"]["name"].endswith("-master-0"))
    tables = set()
    for pod in pods:
        env = run.daemon_env(pod)
        assert env["POD_UID"] == pod["metadata"]["uid"]
        assert env["MASTER_IP"] == master["status"]["podIP"]
        assert env["WORLD_SIZE"] == str(npus * len(pods))
        assert env["ASCEND_NODE_RENDEZVOUS"] == "kube"
        assert "MODEL_PATH" not in env  # no shared directory at all
        table = agent.containers.podman("exec", agent.container(pod), "cat", env[table_env],
                                        check=False, timeout=60)
        assert table.returncode == 0, table.stderr
        tables.add(table.stdout)
    assert len(tables) == 1, "every pod must hold the same table"
    text = str(tables.pop())
    assert sorted(s["container_ip"] for s in json.loads(text)["server_list"]) == sorted(ips)
    return text.encode()


def check_api_reach(agent: AgentBed, pod: dict[str, Any]) -> None:
    """From inside the pod: the address the agent gave (KUBERNETES_SERVICE_HOST/PORT) is
    verified by the CA the pod got (`kube-root-ca.crt`, projected at ca.crt) with the
    hostname checked — never an unverified connection — and the token is accepted."""
    code = (
        "import json, os, ssl, urllib.request\n"
        f"d = '{SA_DIR}'\n"
        "host = os.environ['KUBERNETES_SERVICE_HOST']\n"
        "port = os.environ['KUBERNETES_SERVICE_PORT']\n"
        "ctx = ssl.create_default_context(cafile=d + '/ca.crt')\n"
        "assert ctx.check_hostname and ctx.verify_mode == ssl.CERT_REQUIRED\n"
        "ns = open(d + '/namespace').read()\n"
        "req = urllib.request.Request(f'https://{host}:{port}/api/v1/namespaces/{ns}/"
        "configmaps?limit=1', headers={'Authorization': 'Bearer ' + open(d + '/token')"
        ".read()})\n"
        "print(host, port, urllib.request.urlopen(req, context=ctx, timeout=30).status)\n")
    done = agent.containers.podman("exec", agent.container(pod), "python3", "-c", code,
                                   check=False, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
    host, port, status = done.stdout.split()
    assert status == "200"
    assert port == str(json.loads((agent.kube_bed.run / "state.json").read_text())["ports"][
        "kube-apiserver"])
    assert host != "127.0.0.1"


@pytest.mark.parametrize("nodes", [2, 4])
def test_mindie_meets_through_the_api_with_no_claim(agent: AgentBed, nodes: int) -> None:
    """`manifest --kind mindie --rendezvous kube`, applied as printed (plus the weights on
    each node's disk): Volcano gang-binds the pods, each meets its peers through the API
    server under the job's own ServiceAccount, every pod holds the same table, the fake
    daemon serves, and the rendezvous' objects are owned by the vcjob."""
    ns = f"kr-mindie-{nodes}"
    with KubeRun(agent, ns, "kj", "--kind", "mindie", "--nodes", str(nodes),
                 "--model-dir", WEIGHTS) as run:
        pods = run.wait_ready(nodes)
        print(f"{ns}: apply -> {run.timeline.summary()}")
        for pod in pods:
            spec = pod["spec"]
            assert spec["serviceAccountName"] == "kj-ascend-node"
            assert not any("persistentVolumeClaim" in v for v in spec["volumes"])
            loaded = run.loaded_at(pod)
            assert loaded and epoch(ready_at(pod)) >= int(loaded)
        check_api_reach(agent, pods[0])
        table = check_tables(agent, run, pods, 8)
        served = agent.exec(pods[0], "ascend-node", "status", "--serving")
        assert served.returncode == 0, served.stdout + served.stderr
        # what the pods wrote lives in the API, owned by the vcjob (deleting it removes them)
        job = agent.kube.get(agent.kube_bed.jobs_path(ns, "kj"))
        mine = [c for c in run.config_maps() if c["metadata"]["name"].startswith("kj-rdzv-")]
        assert mine, [c["metadata"]["name"] for c in run.config_maps()]
        for cm in mine:
            (owner,) = cm["metadata"]["ownerReferences"]
            assert (owner["kind"], owner["uid"]) == ("Job", job["metadata"]["uid"]), cm
        assert table  # (byte-identical on every pod: check_tables)
        if nodes == 2:
            check_other_job_cannot_write(agent, ns, "kj")


def sa_client(agent: AgentBed, ns: str, sa: str) -> Any:
    """The agent's own client under a real token of ServiceAccount `sa` (TokenRequest)."""
    from ascend_node.kube.client import Client
    from ascend_node.kube.config import Endpoint

    answer = agent.kube.create(f"/api/v1/namespaces/{ns}/serviceaccounts/{sa}/token", {
        "apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
        "spec": {"expirationSeconds": 3600}})
    state = json.loads((agent.kube_bed.run / "state.json").read_text())
    return Client(Endpoint(server=state["server"], namespace=ns, source="test",
                           ca_file=str(agent.kube_bed.run / "pki" / "ca.crt"),
                           token=str(answer["status"]["token"])), timeout=30)


def check_other_job_cannot_write(agent: AgentBed, ns: str, job: str) -> None:
    """A second job's ServiceAccount, Role and RoleBinding as `manifest` renders them, in the
    same namespace: its token can neither read nor replace this job's objects, and creating
    one under a taken name replaces nothing."""
    from ascend_node.kube.errors import AlreadyExists, Forbidden
    from ascend_node.kube.resources import CONFIGMAPS

    text = render("--namespace", ns, "--name", "other", "--image", IMAGE, "--rendezvous",
                  "kube", "--kind", "mindie", "--nodes", "2", "--model-dir", WEIGHTS)
    api = agent.kube_bed.api
    for doc in api.split_documents(text):
        obj = yaml.safe_load(doc)
        if obj["kind"] != "Job":
            agent.kube.create_yaml(api.path_for(obj["apiVersion"], obj["kind"], ns), doc)
    other = sa_client(agent, ns, "other-ascend-node")
    admin_view = agent.kube.get(f"/api/v1/namespaces/{ns}/configmaps/{job}-rdzv-attempt")

    def refused() -> Any:  # RBAC's cache takes a moment to see the new binding
        try:
            other.get(CONFIGMAPS, "other-rdzv-attempt")
        except Forbidden:
            return None
        except Exception:
            return True  # allowed (404): the binding is in effect
        return True
    agent.kube_bed.wait("the second job's RoleBinding in effect", refused, 60)
    forged = json.loads(json.dumps(admin_view))
    forged["data"]["outcome.json"] = "{}"
    with pytest.raises(Forbidden) as info:
        other.replace(CONFIGMAPS, forged)
    assert f'update configmaps "{job}-rdzv-attempt"' in str(info.value)
    with pytest.raises(Forbidden):
        other.get(CONFIGMAPS, f"{job}-rdzv-node-1")
    with pytest.raises(AlreadyExists):
        other.create(CONFIGMAPS, {"apiVersion": "v1", "kind": "ConfigMap",
                                  "metadata": {"name": f"{job}-rdzv-node-1"}, "data": {}})
    after = agent.kube.get(f"/api/v1/namespaces/{ns}/configmaps/{job}-rdzv-attempt")
    assert after["data"] == admin_view["data"]


def attempt_id(agent: AgentBed, ns: str, job: str) -> str:
    cm = agent.kube.get(f"/api/v1/namespaces/{ns}/configmaps/{job}-rdzv-attempt")
    return str(json.loads(cm["data"]["attempt.json"])["attempt_id"])


def first_exit(run: KubeRun, code: int) -> Any:
    return next((seen for seen in list(run.timeline.terminated.values())
                 if seen[1].get("exitCode") == code), None)


def test_a_peer_that_never_comes_exits_4_and_the_restart_meets_again(agent: AgentBed) -> None:
    """The worker's node pulls its image for longer than the rendered --timeout (the agent
    bed's slow pull): the master's wait through the API ends with exit 4 naming worker 0 in
    its termination message; Volcano restarts the job (RestartJob); the new pods open a new
    attempt in the API (a new attempt object, a new table) and all hold it."""
    slow = Path(agent.containers.work) / "kube-nodes" / "slow-pulls"
    slow.mkdir(parents=True, exist_ok=True)
    (slow / "kr-exit4_xj-worker-0").write_text("90")
    try:
        with KubeRun(agent, "kr-exit4", "xj", "--kind", "mindie", "--nodes", "2",
                     "--model-dir", WEIGHTS, "--timeout", "20") as run:
            failed, term = run.wait("a pod exits 4", lambda: first_exit(run, 4), 180)
            message = term.get("message", "")
            print(f"exit 4: {failed['metadata']['name']}: {message.strip()[-300:]!r}")
            assert failed["metadata"]["name"] == "xj-master-0"
            assert "1 of 2 missing: worker 0 (node 1)" in message, message
            first = attempt_id(agent, run.ns, "xj")
            uids = {uid for _, uid in run.timeline.terminated} | {failed["metadata"]["uid"]}
            v0 = int(failed["metadata"]["annotations"]["volcano.sh/job-version"])

            def again() -> list[dict[str, Any]]:
                pods = run.pods()
                fresh = [p for p in pods if p["metadata"]["uid"] not in uids and ready(p)]
                return pods if len(fresh) == 2 and len(pods) == 2 else []
            pods = list(run.wait("the job re-created and Ready", again, 300))
            (v1,) = {p["metadata"]["annotations"]["volcano.sh/job-version"] for p in pods}
            assert int(v1) > v0
            assert job_status(agent, run.ns, "xj").get("retryCount") == 1
            assert attempt_id(agent, run.ns, "xj") != first  # a new attempt in the API
            for pod in pods:
                assert run.daemon_env(pod)["ASCEND_NODE_JOB_VERSION"] == v1
            check_tables(agent, run, pods, 8)
    finally:
        (slow / "kr-exit4_xj-worker-0").unlink(missing_ok=True)


def test_a_role_missing_a_verb_is_the_403_line_and_exit_1(agent: AgentBed) -> None:
    """The rendered Role less `update`: the pods' first write through the API is refused;
    the pod says which verb on which object in which namespace and the rule that grants it,
    exit 1, long before the rendered --timeout."""
    run = KubeRun(agent, "kr-noupdate", "nj", "--kind", "mindie", "--nodes", "2",
                  "--model-dir", WEIGHTS, "--timeout", "300")
    docs = []
    for obj in run.objs:  # the Role as if applied without `update`
        if obj["kind"] == "Role":
            for rule in obj["rules"]:
                rule["verbs"] = [v for v in rule["verbs"] if v != "update"]
            obj["rules"] = [r for r in obj["rules"] if r["verbs"]]
        docs.append(yaml.safe_dump(obj, sort_keys=False))
    run.text = "---\n".join(docs)
    with run:
        failed, term = run.wait("a pod exits 1", lambda: first_exit(run, 1), 240)
        message = term.get("message", "")
        print(f"403: {failed['metadata']['name']}: {message.strip()[-400:]!r}")
        assert 'forbids update configmaps "nj-rdzv-' in message, message
        assert f'in namespace "{run.ns}"' in message and 'verbs: ["update"]' in message
        # (the hint naming `manifest --rendezvous kube` follows on stderr; the termination
        # message is the cause line: tests/test_kube_rendezvous.py checks the hint)
        started = epoch(term["startedAt"])
        assert epoch(term["finishedAt"]) - started < 120, term  # not the 300 s wait


MSRUN_FAKE = """#!/bin/sh
# Fake msrun (MindSpore's launcher): records how it was started, then runs on like training.
{ echo "pid=$$"; echo "argv=$*"; env; } > "$ASCEND_NODE_SIM_REPORT.tmp"
mv "$ASCEND_NODE_SIM_REPORT.tmp" "$ASCEND_NODE_SIM_REPORT"
exec sleep 3600
"""


def test_training_meets_through_the_api_and_starts_msrun(agent: AgentBed) -> None:
    """`manifest --kind training --rendezvous kube`: both pods meet through the API, hold
    the same table, and msrun (faked on the node's disk, as the image's MindSpore would be)
    is started with the world the table names."""
    run = KubeRun(agent, "kr-train-2", "tj", "--kind", "training", "--nodes", "2", "--",
                  "train.py", "--config", "c.yaml")
    for root in node_roots(agent).values():
        bin_dir = root / NODE_WEIGHTS / SIM_DIR / "bin"
        (bin_dir / "msrun").write_text(MSRUN_FAKE)
        # msrun's workers run `python` from PATH, which the agent checks finds MindSpore
        (bin_dir / "python").write_text('#!/bin/sh\nexec python3 "$@"\n')
        for f in ("msrun", "python"):
            (bin_dir / f).chmod(0o755)
        (root / NODE_WEIGHTS / SIM_DIR / "site" / "mindspore").mkdir(parents=True)
        (root / NODE_WEIGHTS / SIM_DIR / "site" / "mindspore" / "__init__.py").write_text("")
    docs = []
    for obj in run.objs:  # the image's MindSpore: the empty package above on PYTHONPATH
        if obj["kind"] == "Job":
            for task in obj["spec"]["tasks"]:
                for c in task["template"]["spec"]["containers"]:
                    c.setdefault("env", []).append(
                        {"name": "PYTHONPATH", "value": f"{WEIGHTS}/{SIM_DIR}/site"})
        docs.append(yaml.safe_dump(obj, sort_keys=False))
    run.text = "---\n".join(docs)
    with run:
        def launched() -> list[dict[str, Any]]:
            pods = run.pods()
            return pods if len(pods) == 2 and all(
                p["spec"].get("nodeName") and run.report(p).is_file() for p in pods) else []
        pods = run.wait("msrun started on both pods", launched, 300)
        print(f"training 2 pods: apply -> {run.timeline.summary()}")
        check_tables(agent, run, pods, 8)
        master = next(p for p in pods if p["metadata"]["name"] == "tj-master-0")
        for index, pod in enumerate(sorted(pods, key=lambda p: p["metadata"]["name"])):
            args = run.daemon_env(pod)["argv"].split()
            assert f"--master_addr={master['status']['podIP']}" in args, args
            assert "--worker_num=16" in args and f"--node_rank={index}" in args, args
            assert args[-3:] == ["train.py", "--config", "c.yaml"], args


def test_mindie_pd_meets_through_the_api_with_no_claim(agent: AgentBed) -> None:
    """`manifest --kind mindie-pd --rendezvous kube` (1 prefill instance of 2 pods, 1 decode
    of 1, as test_kube_jobs' PD test, which runs over the volume): applied as printed plus
    each node's local disk for the weights and the Motor fakes, no claim anywhere. Every pod
    Ready; each instance's pods meet in their own objects, the coordinator and controller in
    theirs, the controller pod's table writer builds the global table from the API into the
    pod's own state directory, and the (fake) controller accepts that table. A failed decode
    pod is not retried on Volcano v1.10.0 (no RestartTask: docs/kube-node-agent.md,
    test_kube_jobs proves it over the volume), so nothing here relies on a task restart."""
    from ascend_node.pd.motor_rules import check_global_table, flags_from_controller_config

    run_id = "pd-1"
    with KubeRun(agent, "kr-pd", "pd", "--kind", "mindie-pd", "--run-id", run_id,
                 "--prefill", "1", "--prefill-pods", "2", "--decode", "1",
                 "--decode-pods", "1", "--model-dir", WEIGHTS) as run:
        pods = run.wait_ready(5)
        print(f"mindie-pd 5 pods through the API: apply -> {run.timeline.summary()}")
        ip = {p["metadata"]["name"]: p["status"]["podIP"] for p in pods}
        by_name = {p["metadata"]["name"]: p for p in pods}
        for pod in pods:
            assert pod["spec"]["serviceAccountName"] == "pd-ascend-node"
        (cm,) = [o for o in run.objs if o["kind"] == "ConfigMap"]
        config = json.loads(cm["data"]["ms_controller.json"])
        path = config["global_rank_table_file_path"]
        assert path.startswith("/run/ascend-node/")  # the pod's emptyDir, no shared volume
        controller = by_name["pd-controller-0"]

        def table() -> Any:
            done = agent.exec(controller, "cat", path)
            if done.returncode:
                return None
            doc = json.loads(done.stdout)
            return doc if [g["group_id"] for g in doc["server_group_list"]] == [
                "0", "1", "2", "3"] else None
        doc = run.wait("the global table in the controller pod", table, 120)
        assert check_global_table(doc, flags_from_controller_config(config)) == []
        groups = {g["group_id"]: [s["server_ip"] for s in g["server_list"]]
                  for g in doc["server_group_list"]}
        assert groups == {"0": [ip["pd-coordinator-0"]], "1": [ip["pd-controller-0"]],
                          "2": [ip["pd-prefill-0-0"], ip["pd-prefill-0-1"]],
                          "3": [ip["pd-decode-0-0"]]}
        # the controller process itself was handed that path and accepted the table: the
        # fake Motor controller's record (its path check: mode, owner; its loader's rules),
        # on its node's local disk
        records = Path(node_roots(agent)[controller["spec"]["nodeName"]], NODE_WEIGHTS,
                       SIM_DIR)

        def accepted() -> Any:
            for f in records.glob("*.jsonl"):
                for line in f.read_text().splitlines():
                    rec = json.loads(line)
                    if rec.get("event") == "accepted" and rec.get("groups") == [
                            "0", "1", "2", "3"]:
                        return rec
            return None
        rec = run.wait("the controller accepts the global table", accepted, 120)
        assert rec["path"] == path and rec["prefill"] + rec["decode"] + rec[
            "undecided"] == 2, rec
        # each prefill pod holds its instance's table (2 servers, byte for byte the same on
        # both), the decode pod its own: the local table in the pod's state directory (a PD
        # server is given no RANK_TABLE_FILE: the controller hands out the global table)
        local = {}
        for name in ("pd-prefill-0-0", "pd-prefill-0-1", "pd-decode-0-0"):
            assert run.daemon_env(by_name[name])["ASCEND_NODE_RENDEZVOUS"] == "kube"
            done = agent.exec(by_name[name], "cat", "/run/ascend-node/ranktable.json")
            assert done.returncode == 0, done.stderr
            local[name] = done.stdout
        assert local["pd-prefill-0-0"] == local["pd-prefill-0-1"]
        for name, members in (("pd-prefill-0-0", ["pd-prefill-0-0", "pd-prefill-0-1"]),
                              ("pd-decode-0-0", ["pd-decode-0-0"])):
            servers = json.loads(local[name])["server_list"]
            assert sorted(s["container_ip"] for s in servers) == sorted(
                ip[m] for m in members), name
        names = sorted(c["metadata"]["name"] for c in run.config_maps())
        assert "pd.prefill-0-rdzv-attempt" in names and "pd.decode-0-rdzv-attempt" in names
        assert "pd.pd-coordinator-0" in names and "pd.pd-controller-0" in names
        job = agent.kube.get(agent.kube_bed.jobs_path(run.ns, "pd"))
        for c in run.config_maps():
            if c["metadata"]["name"].startswith("pd."):
                (owner,) = c["metadata"]["ownerReferences"]
                assert owner["uid"] == job["metadata"]["uid"], c["metadata"]["name"]


def test_the_init_container_variant_meets_through_the_api(agent: AgentBed) -> None:
    """`manifest --init-container --rendezvous kube`: the `ranktable` init container (the
    agent's image) meets the peers through the API under the job's ServiceAccount - the
    admission plugin's projected token is mounted in every container of the pod, init
    containers too - and leaves the table, master and world size in the pod's emptyDir for
    the server's image, which has no agent. Every pod Ready only once MindIE loaded, one
    table on every pod, no claim. (Was refused by `manifest`, exit 2, as not rendered.)"""
    shipped = json.loads((Path(__file__).resolve().parent.parent /
                          "ascend_node/sim/data/mindie-config.json").read_text())
    shipped["ServerConfig"]["httpsEnabled"] = False
    run = KubeRun(agent, "kr-init", "ij", "--kind", "mindie", "--nodes", "2",
                  "--model-dir", WEIGHTS, "--init-container", "--init-image",
                  "localhost/ascend-node-init:test")
    for root in node_roots(agent).values():
        # the platform's MindIE config.json (the server image has no agent to patch one),
        # named with MindIE's own variable, as test_kube_jobs' init-container variant does
        target = root / NODE_WEIGHTS / SIM_DIR / "mindie-config.json"
        target.write_text(json.dumps(shipped))
        target.chmod(0o640)
    docs = []
    for obj in run.objs:
        if obj["kind"] == "Job":
            for task in obj["spec"]["tasks"]:
                spec = task["template"]["spec"]
                assert spec["serviceAccountName"] == "ij-ascend-node"
                (init,) = spec["initContainers"]
                assert {"name": "ASCEND_NODE_RENDEZVOUS", "value": "kube"} in init["env"]
                for c in spec["containers"]:
                    c.setdefault("env", []).append(
                        {"name": "MIES_CONFIG_JSON_PATH",
                         "value": f"{WEIGHTS}/{SIM_DIR}/mindie-config.json"})
        docs.append(yaml.safe_dump(obj, sort_keys=False))
    run.text = "---\n".join(docs)
    with run:
        pods = run.wait_ready(2)
        print(f"init-container through the API: apply -> {run.timeline.summary()}")
        ips = {p["metadata"]["name"]: p["status"]["podIP"] for p in pods}
        tables = set()
        for pod in pods:
            (st,) = pod["status"]["initContainerStatuses"]
            assert st["state"]["terminated"]["exitCode"] == 0, st
            loaded = run.loaded_at(pod)
            assert loaded and epoch(ready_at(pod)) >= int(loaded)
            env = run.daemon_env(pod)  # the server's, from source_mul_env.sh
            assert env["MIES_CONTAINER_IP"] == pod["status"]["podIP"]
            assert env["MASTER_IP"] == ips["ij-master-0"]
            assert env["WORLD_SIZE"] == "16"
            assert "ASCEND_NODE_RENDEZVOUS" not in env  # the server's image has no agent
            table = agent.exec(pod, "cat", env["RANK_TABLE_FILE"])
            assert table.returncode == 0, table.stderr
            tables.add(table.stdout)
        assert len(tables) == 1, "every pod must hold the same table"
        assert sorted(s["container_ip"] for s in json.loads(tables.pop())["server_list"]) \
            == sorted(ips.values())
        job = agent.kube.get(agent.kube_bed.jobs_path(run.ns, "ij"))
        mine = [c for c in run.config_maps() if c["metadata"]["name"].startswith("ij-rdzv-")]
        assert mine
        for cm in mine:
            (owner,) = cm["metadata"]["ownerReferences"]
            assert owner["uid"] == job["metadata"]["uid"], cm["metadata"]["name"]


def test_the_api_server_restarted_mid_rendezvous_the_pods_complete(agent: AgentBed) -> None:
    """A 2-pod `--rendezvous kube` Job whose worker's node pulls its image slowly: once the
    master has opened its attempt in the API and waits for the worker, the bed's
    kube-apiserver (only it: etcd, the controllers, Volcano and the nodes' agent run on) is
    stopped for 20 s and started again. The master says the API server does not answer
    and retries (a stuck volume's handling, docs/rendezvous.md); once it is back the worker
    comes, both meet in the same attempt, hold one table and serve: no exit, no restart."""
    slow = Path(agent.containers.work) / "kube-nodes" / "slow-pulls"
    slow.mkdir(parents=True, exist_ok=True)
    mark = slow / "kr-apirestart_aj-worker-0"
    mark.write_text("100")
    try:
        with KubeRun(agent, "kr-apirestart", "aj", "--kind", "mindie", "--nodes", "2",
                     "--model-dir", WEIGHTS, "--timeout", "400") as run:
            def waiting() -> Any:  # the master in its wait, its attempt in the API
                if "running" not in run.timeline.seen.get("aj-master-0", {}):
                    return None
                try:
                    return attempt_id(agent, run.ns, "aj")
                except Exception:
                    return None
            first = run.wait("the master waiting in its attempt", waiting, 240)
            # (the worker is still "pulling": ContainerCreating, not started)
            assert "running" not in run.timeline.seen.get("aj-worker-0", {}), run.describe()
            t0 = time.monotonic()
            agent.kube_bed.stop_apiserver()
            time.sleep(20)
            agent.kube_bed.start_apiserver()
            print(f"API server down {time.monotonic() - t0:.1f} s (20 s stopped + restart)")
            pods = run.wait_ready(2, timeout=400)
            print(f"apiserver restart: apply -> {run.timeline.summary()}")
            assert not run.timeline.terminated, run.describe()
            master = next(p for p in pods if p["metadata"]["name"] == "aj-master-0")
            logs = agent.containers.podman("logs", agent.container(master), check=False)
            said = logs.stdout + logs.stderr
            assert "the API server does not answer" in said, said[-3000:]
            for line in said.splitlines():  # what the master said of the outage
                if "does not answer" in line or "rules review allowed" in line:
                    print(f"master: {line[:400]}")
            assert attempt_id(agent, run.ns, "aj") == first  # the same attempt, met
            assert not job_status(agent, run.ns, "aj").get("retryCount")
            check_tables(agent, run, pods, 8)
    finally:
        mark.unlink(missing_ok=True)
