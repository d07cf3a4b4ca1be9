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
            pods = [p for p in self.pods() if p["metadata"]["uid"] not in exclude]
            return pods if len(pods) == count and all(ready(p) for p in pods) else []
        return list(self.wait(f"{count} pods of {self.ns} Ready", probe, timeout))

    def report(self, pod: dict[str, Any]) -> Path:
        root = node_roots(self.agent)[pod["spec"]["nodeName"]]
        return root / NODE_WEIGHTS / SIM_DIR / pod["metadata"]["name"]

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
    text = tables.pop()
    assert sorted(s["container_ip"] for s in json.loads(text)["server_list"]) == sorted(ips)
    return text.encode()


def check_api_reach(agent: AgentBed, pod: dict[str, Any]) -> None:
    """From inside the pod: the address the agent gave (KUBERNETES_SERVICE_HOST/PORT) is
    verified by the CA the pod got (`kube-root-ca.crt`, projected at ca.crt) with the
    hostname checked — never an unverified connection — and the token is accepted."""
    code = (
        "import json, os, ssl, urllib.request\n"
        f"d = '{SA_DIR}'\n"
        "host, port = os.environ['KUBERNETES_SERVICE_HOST'], os.environ['KUBERNETES_SERVICE_PORT']\n"
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
