"""Rendered Jobs run for real: applied, gang-scheduled by Volcano, run by the nodes' agent.

`ascend-node manifest`'s YAML goes to the API server as a user's `kubectl apply` sends it;
Volcano's webhooks admit it, its controller creates the pods, the `<job>-svc` ConfigMap and
the headless Service, its scheduler binds the pods to the bed's fake Ascend nodes, and the
node agent (scripts/kube_node_agent.py, as each node's `system:node:<node>` identity) runs
them in podman and reports their status back (tests/kube_agent_bed.py). Nothing of Volcano
or the kubelet is imitated here: what the pods get is what the platform gave them.
"""

from __future__ import annotations

import calendar
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.kube_agent_bed import MODEL_PATH, SIM_DIR, AgentBed, Timeline, open_agent
from tests.kube_bed import Bed

ROOT = Path(__file__).resolve().parent.parent

pytestmark = [pytest.mark.kube, pytest.mark.containers]

IMAGE = "localhost/ascend-node-mindie:test"
NPU = "huawei.com/Ascend910"


@pytest.fixture(scope="module")
def agent(kube_bed: Bed) -> Iterator[AgentBed]:
    yield from open_agent(kube_bed)


def render(*args: str) -> str:
    done = subprocess.run([sys.executable, "-m", "ascend_node", "manifest", *args],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout


def ready(pod: dict[str, Any]) -> bool:
    return any(c["type"] == "Ready" and c["status"] == "True"
               for c in pod.get("status", {}).get("conditions", []))


class JobRun:
    """One rendered Job in its own namespace, its pods' timeline recorded from apply on."""

    def __init__(self, agent: AgentBed, ns: str, name: str, *flags: str,
                 uid: Any = None, image: str = IMAGE) -> None:
        self.agent, self.ns, self.name = agent, ns, name
        agent.kube_bed.namespace(ns)
        self.claim = agent.claim(ns, "model", uid)
        self.text = render("--namespace", ns, "--name", name, "--image", image,
                           "--pvc", "model", "--model-path", MODEL_PATH, "--timeout", "120",
                           *flags)
        if "--init-container" in flags:
            self.text = self._with_server_config(self.text, uid)
        self.stop = threading.Event()
        self.timeline = Timeline(time.monotonic())

    def _with_server_config(self, text: str, uid: Any) -> str:
        """The init-container variant patches no MindIE config.json (its server image has no
        agent): the platform engineer ships one and names it with MindIE's own variable, as
        tests/test_manifest_pods.py's run of that variant does. Here: the simulation's file
        with HTTPS off, on the claim, and `MIES_CONFIG_JSON_PATH` added to each server
        container of the rendered Job."""
        shipped = json.loads((ROOT / "ascend_node/sim/data/mindie-config.json").read_text())
        shipped["ServerConfig"]["httpsEnabled"] = False
        target = self.claim / SIM_DIR / "mindie-config.json"
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(json.dumps(shipped))
        target.chmod(0o640)
        if uid is not None:
            os.chown(target, uid, -1)
        docs = []
        for doc in self.agent.kube_bed.api.split_documents(text):
            obj = yaml.safe_load(doc)
            for task in obj.get("spec", {}).get("tasks", []) if obj.get("kind") == "Job" else []:
                for container in task["template"]["spec"]["containers"]:
                    container.setdefault("env", []).append(
                        {"name": "MIES_CONFIG_JSON_PATH",
                         "value": f"{MODEL_PATH}/{SIM_DIR}/mindie-config.json"})
            docs.append(yaml.safe_dump(obj, sort_keys=False))
        return "---\n".join(docs)

    def __enter__(self) -> JobRun:
        self.timeline = Timeline(time.monotonic())
        api = self.agent.kube_bed.api
        for doc in api.split_documents(self.text):  # as `kubectl apply -f` posts each
            obj = yaml.safe_load(doc)
            path = api.path_for(obj["apiVersion"], obj["kind"], self.ns)
            self.agent.kube.create_yaml(path, doc)
        self.agent.watch(self.ns, self.timeline, self.stop)
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop.set()
        self.agent.purge(self.ns)

    def pods(self) -> list[dict[str, Any]]:
        return sorted(self.agent.kube_bed.pods(self.ns), key=lambda p: p["metadata"]["name"])

    def wait_ready(self, count: int, timeout: float = 240) -> list[dict[str, Any]]:
        def probe() -> list[dict[str, Any]]:
            pods = self.pods()
            failed = [p["metadata"]["name"] for p in pods
                      if p.get("status", {}).get("phase") == "Failed"]
            if failed:
                raise AssertionError(f"{failed} Failed\n{self.describe()}")
            return pods if len(pods) == count and all(ready(p) for p in pods) else []
        try:
            pods = list(self.agent.kube_bed.wait(f"{count} pods of {self.ns} Ready", probe,
                                                 timeout))
        except TimeoutError as e:
            raise AssertionError(f"{e}\n{self.describe()}") from None
        for p in pods:  # seen Ready here, if the timeline's poll has not yet
            self.timeline.note(p["metadata"]["name"], "ready")
        return pods

    def describe(self) -> str:
        lines = []
        for p in self.pods():
            st = p.get("status", {})
            states = [(c["name"], list(c.get("state", {}))) for c in
                      st.get("containerStatuses", [])]
            lines.append(f"{p['metadata']['name']} on {p['spec'].get('nodeName')}: "
                         f"{st.get('phase')} ready={ready(p)} {states}")
        return "\n".join(lines) + "\n--- agent log:\n" + self.agent.log_tail()

    def loaded_at(self, pod: str) -> float:
        mark = self.claim / SIM_DIR / f"{pod}.loaded"
        return float(mark.read_text()) if mark.is_file() else 0.0

    def daemon_env(self, pod: str) -> dict[str, str]:
        lines = (self.claim / SIM_DIR / pod).read_text().splitlines()
        return dict(line.split("=", 1) for line in lines[1:] if "=" in line)


def started_at(pod: dict[str, Any]) -> str:
    (c,) = pod["status"]["containerStatuses"]
    return str(c["state"].get("running", c["state"].get("terminated", {}))["startedAt"])


def scheduled_at(pod: dict[str, Any]) -> str:
    return str(next(c["lastTransitionTime"] for c in pod["status"]["conditions"]
                    if c["type"] == "PodScheduled"))


def ready_at(pod: dict[str, Any]) -> str:
    return str(next(c["lastTransitionTime"] for c in pod["status"]["conditions"]
                    if c["type"] == "Ready"))


def epoch(stamp: str) -> int:
    return calendar.timegm(time.strptime(stamp, "%Y-%m-%dT%H:%M:%SZ"))


def test_a_two_pod_mindie_job_runs_through_volcano_and_the_node_agent(agent: AgentBed) -> None:
    """Applied as printed; Volcano gang-binds both pods; the agent runs them; both hold the
    same rank table; the fake daemon serves; Ready only once MindIE says so."""
    with JobRun(agent, "kj-mindie-2", "mj", "--kind", "mindie", "--nodes", "2") as run:
        pods = run.wait_ready(2)
        t = run.timeline
        print(f"mindie 2 pods: apply -> {t.summary()}")
        names = [p["metadata"]["name"] for p in pods]
        assert names == ["mj-master-0", "mj-worker-0"]
        # gang: no container started before every pod of the job was bound
        assert min(started_at(p) for p in pods) >= max(scheduled_at(p) for p in pods)
        assert len({p["spec"]["nodeName"] for p in pods}) == 2  # the anti-affinity
        ips = [p["status"]["podIP"] for p in pods]
        assert len(set(ips)) == 2
        master_ip = ips[0]
        tables = set()
        for pod, ip in zip(pods, ips):
            name = pod["metadata"]["name"]
            # Ready follows MindIE: not before the (fake) weight load ended
            loaded = max(run.loaded_at(name), run.loaded_at("mj-master-0"))
            assert loaded, f"{name}: the fake daemon never finished loading"
            assert epoch(ready_at(pod)) >= int(loaded), (name, ready_at(pod), loaded)
            env = run.daemon_env(name)
            assert env["MIES_CONTAINER_IP"] == ip == env["K8S_POD_IP"]
            assert env["MASTER_IP"] == master_ip
            assert env["WORLD_SIZE"] == "16"
            assert env["POD_UID"] == pod["metadata"]["uid"]
            assert env["ASCEND_NODE_JOB_VERSION"] == pod["metadata"]["annotations"][
                "volcano.sh/job-version"]
            # Volcano's pod group, `<job>-<job uid>`: the job version's scope
            job_uid = agent.kube.get(agent.kube_bed.jobs_path(run.ns, run.name))["metadata"][
                "uid"]
            assert env["ASCEND_NODE_JOB_INSTANCE"] == f"{run.name}-{job_uid}"
            assert env["VC_WORKER_NUM"] == "1"  # Volcano's env/svc plugins, not ours
            assert sorted(env["ASCEND_VISIBLE_DEVICES"].split(",")) == [str(d) for d in range(8)]
            table = agent.exec(pod, "cat", env["RANK_TABLE_FILE"])
            assert table.returncode == 0, table.stderr
            tables.add(table.stdout)
        assert len(tables) == 1, "every pod must hold the same table"
        table = json.loads(tables.pop())
        assert [s["container_ip"] for s in table["server_list"]] == ips
        # the fake daemon serves: MindIE's management port answers on the master's pod IP
        served = agent.exec(pods[0], "ascend-node", "status", "--serving")
        assert served.returncode == 0, served.stdout + served.stderr


def check_job(agent: AgentBed, run: JobRun, pods: list[dict[str, Any]], npus: int) -> None:
    """What every rendered MindIE job must show once Ready: one table on every pod, naming
    every pod IP, each pod's daemon started with what the platform gave it, Ready not before
    MindIE's load ended."""
    ips = [p["status"]["podIP"] for p in pods]
    assert len(set(ips)) == len(pods) and len({p["spec"]["nodeName"] for p in pods}) == len(pods)
    assert min(started_at(p) for p in pods) >= max(scheduled_at(p) for p in pods)
    master = next(p for p in pods if p["metadata"]["name"].endswith("-master-0"))
    tables = set()
    for pod in pods:
        name = pod["metadata"]["name"]
        loaded = max(run.loaded_at(name), run.loaded_at(master["metadata"]["name"]))
        assert loaded and epoch(ready_at(pod)) >= int(loaded), (name, ready_at(pod), loaded)
        env = run.daemon_env(name)
        assert env["MIES_CONTAINER_IP"] == pod["status"]["podIP"]
        # the downward API's pod IP reaches the agent's container (the server's, or the
        # init container of --init-container, whose server container needs none)
        assert env.get("K8S_POD_IP", env["MIES_CONTAINER_IP"]) == pod["status"]["podIP"]
        assert env["MASTER_IP"] == master["status"]["podIP"]
        assert env["WORLD_SIZE"] == str(npus * len(pods))
        assert len(env["ASCEND_VISIBLE_DEVICES"].split(",")) == npus
        table = agent.exec(pod, "cat", env["RANK_TABLE_FILE"])
        assert table.returncode == 0, table.stderr
        tables.add(table.stdout)
    assert len(tables) == 1, "every pod must hold the same table"
    assert sorted(s["container_ip"] for s in json.loads(tables.pop())["server_list"]) == \
        sorted(ips)


VARIANTS = [
    pytest.param(4, [], id="mindie-4"),
    pytest.param(2, ["--run-as-user", "1001"], id="run-as-user-1001"),
    pytest.param(2, ["--rendezvous-key"], id="rendezvous-key"),
    # the init container requests the NPUs and the server gets kubelet-asked probes
    # (issue 36 item 3): Ready only once MindIE has loaded
    pytest.param(2, ["--init-container", "--init-image", "localhost/ascend-node-init:test"],
                 id="init-container"),
]


@pytest.mark.parametrize(("nodes", "flags"), VARIANTS)
def test_each_rendered_variant_runs_to_ready(agent: AgentBed, nodes: int,
                                             flags: list[str]) -> None:
    ns = "kv-" + ("".join(c for c in "-".join(flags) if c.isalnum())[:20].lower()
                  or f"mindie{nodes}")
    uid = int(flags[flags.index("--run-as-user") + 1]) if "--run-as-user" in flags else None
    with JobRun(agent, ns, "vj", "--kind", "mindie", "--nodes", str(nodes), *flags,
                uid=uid) as run:
        pods = run.wait_ready(nodes, timeout=300)
        print(f"{ns}: apply -> {run.timeline.summary()}")
        check_job(agent, run, pods, 8)
        if uid is not None:
            ids = agent.exec(pods[0], "id", "-u")
            assert ids.stdout.strip() == str(uid)


def job_status(agent: AgentBed, ns: str, name: str) -> dict[str, Any]:
    return dict(agent.kube.get(agent.kube_bed.jobs_path(ns, name)).get("status", {}))


def test_a_daemon_killed_after_ready_restarts_the_job_under_the_same_names(
        agent: AgentBed) -> None:
    """PodFailed -> RestartJob as Volcano's controller runs it: every pod deleted (the agent
    confirms each deletion), re-created under the same names with new UIDs and a bumped
    `volcano.sh/job-version`, and the new attempt's table on every pod, all Ready again."""
    with JobRun(agent, "kp-restart", "rj", "--kind", "mindie", "--nodes", "2") as run:
        first = run.wait_ready(2)
        version = {p["metadata"]["annotations"]["volcano.sh/job-version"] for p in first}
        assert len(version) == 1
        v0 = int(version.pop())
        uids = {p["metadata"]["uid"] for p in first}
        master = first[0]
        pid = (run.claim / SIM_DIR / "rj-master-0").read_text().splitlines()[0].split("=")[1]
        agent.exec(master, "kill", "-KILL", pid)

        def restarted() -> list[dict[str, Any]]:
            pods = run.pods()
            fresh = [p for p in pods if p["metadata"]["uid"] not in uids and ready(p)]
            return pods if len(fresh) == 2 and len(pods) == 2 else []
        t0 = time.monotonic()
        try:
            again = list(agent.kube_bed.wait("the job re-created and Ready", restarted, 300))
        except TimeoutError as e:
            raise AssertionError(f"{e}\n{run.describe()}") from None
        print(f"restart: kill -> all Ready again {time.monotonic() - t0:.1f} s")
        assert [p["metadata"]["name"] for p in again] == ["rj-master-0", "rj-worker-0"]
        # bumped, and the same on every pod; not necessarily by one: Volcano v1.10.0 bumps
        # `Status.Version` on every killJob (job_controller_actions.go "Job version is
        # bumped only when job is killed"), and the Restarting state runs killJob on each
        # sync until the old pods are gone - here it went 0 -> 2 in one restart
        (v1,) = {p["metadata"]["annotations"]["volcano.sh/job-version"] for p in again}
        assert int(v1) > v0
        status = job_status(agent, run.ns, "rj")
        assert status.get("retryCount") == 1, status
        assert status["state"]["phase"] == "Running", status
        for pod in again:
            env = run.daemon_env(pod["metadata"]["name"])
            assert env["ASCEND_NODE_JOB_VERSION"] == v1
            assert env["POD_UID"] == pod["metadata"]["uid"]
        check_job(agent, run, again, 8)


def test_exit_5_aborts_the_job(agent: AgentBed) -> None:
    """Every fake node's NPUs answering with the same device IPs: the cluster is
    inconsistent, a pod exits 5 and Volcano's controller aborts the job (AbortJob), no
    retry."""
    from ascend_node.sim.cluster import device_ip
    from ascend_node.sim.fake_tools import FakeDevice, write_node_data

    roots = sorted((Path(agent.containers.work) / "kube-nodes").glob("*/root"))
    data = "usr/local/Ascend/driver/sim-data"
    saved = {r: {f.name: f.read_bytes() for f in (r / data).iterdir()} for r in roots}
    try:
        for root in roots:
            write_node_data(root / data, [FakeDevice(d, device_ip(0, d)) for d in range(8)])
        with JobRun(agent, "kp-abort", "aj", "--kind", "mindie", "--nodes", "2") as run:
            def aborted() -> dict[str, Any]:
                st = job_status(agent, run.ns, "aj")
                return st if st.get("state", {}).get("phase") == "Aborted" else {}
            try:
                status = agent.kube_bed.wait("the job Aborted", aborted, 240)
            except TimeoutError as e:
                raise AssertionError(f"{e}\n{run.describe()}") from None
            assert not status.get("retryCount"), status
            codes = [c["state"]["terminated"]["exitCode"] for p in run.pods()
                     for c in p["status"].get("containerStatuses", [])
                     if "terminated" in c.get("state", {})]
            assert 5 in codes, run.describe()
    finally:
        for root, files in saved.items():
            for name, blob in files.items():
                (root / data / name).write_bytes(blob)


def pd_groups(doc: Any) -> dict[str, list[str]]:
    """group id -> its servers' pod IPs."""
    return {g["group_id"]: [s["server_ip"] for s in g["server_list"]]
            for g in doc["server_group_list"]}


def test_mindie_pd_comes_up_and_volcano_1_10_leaves_a_failed_decode_pod_failed(
        agent: AgentBed) -> None:
    """1 prefill instance of 2 pods, 1 decode of 1, the coordinator and the controller (with
    its table writer as a native sidecar): all Ready, the global table names every group and
    passes the controller's rules. Then a decode pod killed: the rendered task policy says
    `RestartTask`, which Volcano v1.10.0's webhook accepts (validate/util.go) but its job
    controller does not implement - state/running.go has no case for it, so the request
    falls to `SyncJob` and the failed pod stays Failed, the instance down, no retry. What
    tests/volcano_model.py and the podman bed (`KubeletBed.restart_task`) assumed is not
    what this Volcano does; this test holds the real behaviour so that a Volcano that does
    restart the task (or a manifest that stops relying on it) shows up here."""
    from ascend_node.pd.files import validate_global_file
    from ascend_node.pd.motor_rules import flags_from_controller_config

    run_id = "pd-1"
    with JobRun(agent, "kp-pd", "pd", "--kind", "mindie-pd", "--run-id", run_id,
                "--prefill", "1", "--prefill-pods", "2", "--decode", "1",
                "--decode-pods", "1") as run:
        pods = run.wait_ready(5, timeout=300)
        print(f"mindie-pd 5 pods: apply -> {run.timeline.summary()}")
        ip = {p["metadata"]["name"]: p["status"]["podIP"] for p in pods}
        path = run.claim / ".ascend-node" / run_id / "pd" / "global_ranktable.json"

        def complete() -> Any:
            try:
                doc = json.loads(path.read_text())
            except (OSError, ValueError):
                return None
            return doc if sorted(pd_groups(doc)) == ["0", "1", "2", "3"] else None
        try:
            before = pd_groups(agent.kube_bed.wait("the global table", complete, 120))
        except TimeoutError as e:
            raise AssertionError(f"{e}\n{run.describe()}") from None
        assert before == {"0": [ip["pd-coordinator-0"]], "1": [ip["pd-controller-0"]],
                          "2": [ip["pd-prefill-0-0"], ip["pd-prefill-0-1"]],
                          "3": [ip["pd-decode-0-0"]]}
        (cm,) = [yaml.safe_load(d) for d in agent.kube_bed.api.split_documents(run.text)
                 if "kind: ConfigMap" in d]
        flags = flags_from_controller_config(json.loads(cm["data"]["ms_controller.json"]))
        assert validate_global_file(path, flags, check_owner_uid=0) == []

        uids = {p["metadata"]["name"]: p["metadata"]["uid"] for p in pods}
        decode = next(p for p in pods if p["metadata"]["name"] == "pd-decode-0-0")
        agent.containers.podman("kill", "-s", "KILL", agent.container(decode), check=False)

        def failed() -> Any:
            pod = next(p for p in run.pods() if p["metadata"]["name"] == "pd-decode-0-0")
            return pod if pod["status"].get("phase") == "Failed" else None
        agent.kube_bed.wait("the decode pod Failed", failed, 60)
        # A RestartJob acted within seconds here (test above); give RestartTask 20 s.
        time.sleep(20)
        now = {p["metadata"]["name"]: p for p in run.pods()}
        assert now["pd-decode-0-0"]["metadata"]["uid"] == uids["pd-decode-0-0"]
        assert now["pd-decode-0-0"]["status"]["phase"] == "Failed"
        for name, pod in now.items():
            if name != "pd-decode-0-0":
                assert pod["metadata"]["uid"] == uids[name] and ready(pod), name
        status = job_status(agent, run.ns, "pd")
        assert status["state"]["phase"] == "Running" and not status.get("retryCount"), status


def test_exit_4_restarts_the_job_with_a_new_attempt(agent: AgentBed) -> None:
    """The worker's node pulls its image slowly the first time (longer than the rendered
    --timeout): the master's wait for its peers times out, it exits 4 naming the missing
    node in its termination message, and Volcano's controller restarts the job
    (RestartJob): the same pod names, new UIDs, a greater job version, retryCount 1, and
    the second attempt's table on both."""
    slow = Path(agent.containers.work) / "kube-nodes" / "slow-pulls"
    slow.mkdir(parents=True, exist_ok=True)
    (slow / "kp-exit4_xj-worker-0").write_text("90")
    try:
        with JobRun(agent, "kp-exit4", "xj", "--kind", "mindie", "--nodes", "2",
                    "--timeout", "20") as run:
            def exited_4() -> Any:
                return next((seen for seen in list(run.timeline.terminated.values())
                             if seen[1].get("exitCode") == 4), None)
            try:
                failed, term = agent.kube_bed.wait("a pod exits 4", exited_4, 180)
            except TimeoutError as e:
                raise AssertionError(f"{e}\n{run.describe()}") from None
            message = term.get("message", "")
            print(f"exit 4: {failed['metadata']['name']}: {message.strip()[-300:]!r}")
            assert failed["metadata"]["name"] == "xj-master-0"
            assert "waiting for peers" in message and "worker 0" in message, message
            uids = {uid for _, uid in run.timeline.terminated} | {failed["metadata"]["uid"]}
            v0 = int(failed["metadata"]["annotations"]["volcano.sh/job-version"])

            def again() -> list[dict[str, Any]]:
                pods = run.pods()
                fresh = [p for p in pods if p["metadata"]["uid"] not in uids and ready(p)]
                return pods if len(fresh) == 2 and len(pods) == 2 else []
            try:
                pods = list(agent.kube_bed.wait("the job re-created and Ready", again, 300))
            except TimeoutError as e:
                raise AssertionError(f"{e}\n{run.describe()}") from None
            assert [p["metadata"]["name"] for p in pods] == ["xj-master-0", "xj-worker-0"]
            (v1,) = {p["metadata"]["annotations"]["volcano.sh/job-version"] for p in pods}
            assert int(v1) > v0
            status = job_status(agent, run.ns, "xj")
            assert status.get("retryCount") == 1, status
            for pod in pods:
                assert run.daemon_env(pod["metadata"]["name"])["ASCEND_NODE_JOB_VERSION"] == v1
            check_job(agent, run, pods, 8)
    finally:
        (slow / "kp-exit4_xj-worker-0").unlink(missing_ok=True)


def tls_secret(agent: AgentBed, ns: str, name: str, work: Path) -> bytes:
    """The Secret `manifest --https --tls-secret` names: MindIE's 16 files under the keys the
    manifest mounts (`TLS_ITEMS`), made by openssl — a CA, a server certificate and key it
    signed, and a CRL it issued (the CRL paths MindIE's config.json lists). Returns the
    server certificate (DER), to compare with what the daemon presents."""
    import base64
    import ssl

    from ascend_node.jobspec.job import TLS_ITEMS
    from tests.kube_tls import make_pki

    pki = make_pki(work, "mindie")
    conf = work / "crl.cnf"
    (work / "index.txt").write_text("")
    (work / "crlnumber").write_text("01\n")
    conf.write_text(f"[ca]\ndefault_ca = d\n[d]\ndatabase = {work}/index.txt\n"
                    f"crlnumber = {work}/crlnumber\ndefault_md = sha256\n"
                    "default_crl_days = 2\n")
    crl = work / "crl.pem"
    subprocess.run(["openssl", "ca", "-gencrl", "-config", str(conf), "-keyfile",
                    str(pki.ca.with_suffix(".key")), "-cert", str(pki.ca), "-out", str(crl)],
                   check=True, capture_output=True)

    def content(rel: str) -> bytes:
        if rel.endswith("crl.pem"):
            return crl.read_bytes()
        if rel.endswith("key.pem"):
            return pki.key.read_bytes()
        if rel.endswith("ca.pem"):
            return pki.ca.read_bytes()
        return pki.cert.read_bytes()

    agent.kube.create(f"/api/v1/namespaces/{ns}/secrets", {
        "apiVersion": "v1", "kind": "Secret", "metadata": {"name": name}, "type": "Opaque",
        "data": {key: base64.b64encode(content(rel)).decode() for key, rel in TLS_ITEMS}})
    return ssl.PEM_cert_to_DER_cert(pki.cert.read_text())


def test_https_with_the_tls_secret_serves_tls_and_turns_ready(agent: AgentBed,
                                                               tmp_path: Path) -> None:
    """`--https --tls-secret`: the Secret's 16 files mounted one by one (subPath: regular
    files, as MindIE requires) where MindIE's config.json points; the agent's MindIE checks
    pass (owner, mode, no symlink), the daemon serves its management endpoint over TLS with
    the Secret's certificate, `status --serving` (the probes) asks it over https, and every
    pod turns Ready after the load, holding the same table."""
    import ssl

    from ascend_node.handoff.serving import DEFAULT_MANAGEMENT_PORT

    run = JobRun(agent, "kv-https", "hj", "--kind", "mindie", "--nodes", "2", "--https",
                 "--tls-secret", "mindie-tls")
    served_cert = tls_secret(agent, "kv-https", "mindie-tls", tmp_path)
    with run:
        pods = run.wait_ready(2, timeout=300)
        print(f"kv-https: apply -> {run.timeline.summary()}")
        check_job(agent, run, pods, 8)
        master = pods[0]
        assert run.daemon_env("hj-master-0")["ASCEND_NODE_HTTPS"] == "1"
        ip = master["status"]["podIP"]
        got = agent.exec(master, "python3", "-c",
                         f"import ssl; print(ssl.get_server_certificate(('{ip}', "
                         f"{DEFAULT_MANAGEMENT_PORT})))")
        assert got.returncode == 0, got.stderr
        assert ssl.PEM_cert_to_DER_cert(got.stdout.strip()) == served_cert
        plain = agent.exec(master, "python3", "-c",
                           "import urllib.request as u; "
                           f"u.urlopen('http://{ip}:{DEFAULT_MANAGEMENT_PORT}/', timeout=5)")
        assert plain.returncode != 0, "the management port must not answer plain http"


TRAINING_IMAGE = "localhost/ascend-node-training:test"
# msrun, faked as the containers bed fakes it (tests/test_containers.py RECORDER): it records
# how `boot` started it, then exits 0 like a finished run. Real msrun (MindSpore's) runs in
# tests/test_launchers_real.py; here the subject is the Job around it. On the claim's
# .sim/bin, first on PATH (kube_agent_bed.SIM_ENV), with the `python` msrun's workers would
# run finding an (empty) mindspore, which `boot` checks before exec.
FAKE_MSRUN = """#!/bin/sh
# Fake msrun: records how it was started, then exits like a finished training run.
out={sim}/$(hostname).msrun
cp "$RANK_TABLE_FILE" "$out.table"
{{ echo "argv=$*"; env; }} > "$out.tmp" && mv "$out.tmp" "$out"
"""


def test_a_training_job_runs_msrun_on_every_pod_and_completes(agent: AgentBed) -> None:
    """`--kind training` (msrun): gang-scheduled, every pod's agent builds the same table and
    execs msrun with the world it computed (the master's IP, this pod's rank), every pod exits
    0 and Volcano's controller completes the Job."""
    run = JobRun(agent, "kv-training", "tj", "--kind", "training", "--nodes", "2", "--",
                 "train.py", "--config", "c.yaml", image=TRAINING_IMAGE)
    bin_dir = run.claim / SIM_DIR / "bin"
    (bin_dir / "msrun").write_text(FAKE_MSRUN.format(sim=f"{MODEL_PATH}/{SIM_DIR}"))
    (bin_dir / "python").write_text(
        f'#!/bin/sh\nPYTHONPATH={MODEL_PATH}/{SIM_DIR}/site exec python3 "$@"\n')
    for name in ("msrun", "python"):
        (bin_dir / name).chmod(0o755)
    (run.claim / SIM_DIR / "site" / "mindspore").mkdir(parents=True)
    (run.claim / SIM_DIR / "site" / "mindspore" / "__init__.py").write_text("")
    with run:
        def completed() -> dict[str, Any]:
            st = job_status(agent, run.ns, "tj")
            phase = st.get("state", {}).get("phase")
            if phase in ("Failed", "Aborted"):
                raise AssertionError(f"job {phase}\n{run.describe()}")
            return st if phase == "Completed" else {}
        try:
            status = agent.kube_bed.wait("the training job Completed", completed, 300)
        except TimeoutError as e:
            raise AssertionError(f"{e}\n{run.describe()}") from None
        print(f"kv-training: apply -> {run.timeline.summary()}")
        assert status.get("succeeded") == 2 and not status.get("retryCount"), status
        pods = run.pods()
        assert [p["metadata"]["name"] for p in pods] == ["tj-master-0", "tj-worker-0"]
        assert all(p["status"]["phase"] == "Succeeded" for p in pods), run.describe()
        assert len({p["spec"]["nodeName"] for p in pods}) == 2
        assert min(started_at(p) for p in pods) >= max(scheduled_at(p) for p in pods)
        ips = [p["status"]["podIP"] for p in pods]
        tables = set()
        for rank, pod in enumerate(pods):
            lines = (run.claim / SIM_DIR / f"{pod['metadata']['name']}.msrun").read_text()
            env = dict(line.split("=", 1) for line in lines.splitlines() if "=" in line)
            args = [a for a in env["argv"].split() if not a.startswith("--cluster_time_out=")]
            assert args == ["--worker_num=16", "--local_worker_num=8",
                            f"--master_addr={ips[0]}", "--master_port=8118",
                            f"--node_rank={rank}", "--join=True",
                            "train.py", "--config", "c.yaml"], env["argv"]
            assert env["MIES_CONTAINER_IP"] == ips[rank]
            assert len(env["ASCEND_VISIBLE_DEVICES"].split(",")) == 8
            tables.add((run.claim / SIM_DIR / f"{pod['metadata']['name']}.msrun.table"
                        ).read_text())
        assert len(tables) == 1, "every pod must hold the same table"
        table = json.loads(tables.pop())
        assert [s["container_ip"] for s in table["server_list"]] == ips
