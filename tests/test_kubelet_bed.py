"""The kubelet bed's pure parts: probe scheduling as the kubelet does it, in virtual time.

tests/kubelet_bed.py runs rendered pods in podman and probes them on their schedule; what
it decides (when a probe runs, when a container counts as started or ready, when it is
killed) is the state machine tested here, case by case, against kubelet's
pkg/kubelet/prober/worker.go and prober_manager.go.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from ascend_node.jobspec.job import ManifestParams, render_job
from tests.kubelet_bed import (
    KubeletError,
    PodPlan,
    ProbeSpec,
    resolve_env,
    security_args,
    simulate,
    volcano_env,
)

EXEC = {"exec": {"command": ["true"]}}


def spec(kind: str, period: int = 10, failures: int = 3, delay: int = 0,
         successes: int = 1) -> ProbeSpec:
    return ProbeSpec(kind, EXEC, delay, period, 1, successes, failures)


def times(events: list[tuple[float, str]], what: str) -> list[float]:
    return [t for t, w in events if w == what]


def test_kubernetes_defaults_fill_what_a_probe_leaves_out() -> None:
    (only,) = ProbeSpec.of({"readinessProbe": {"httpGet": {"port": 80}}})
    assert (only.initial_delay, only.period, only.timeout, only.success_threshold,
            only.failure_threshold) == (0, 10, 1, 1, 3)
    with pytest.raises(KubeletError):
        ProbeSpec.of({"livenessProbe": {"periodSeconds": 3}})


def test_startup_gates_readiness_and_liveness_and_readiness_runs_at_once() -> None:
    specs = [spec("startup", period=3, failures=100), spec("readiness", period=5),
             spec("liveness", period=10)]
    events = simulate(specs, lambda kind, t: t >= 7, until=30)
    assert times(events, "started") == [9.0]  # probes at 0, 3, 6 fail; 9 succeeds
    assert times(events, "ready") == [9.0]  # the immediate readiness run
    probed_before = {w.split()[1] for t, w in events if w.startswith("probe") and t < 9}
    assert probed_before == {"startup"}
    assert not [w for t, w in events if w == "probe startup ok" and t > 9]  # stops after start


def test_no_readiness_probe_means_ready_once_started() -> None:
    events = simulate([spec("startup", period=3, failures=100)], lambda k, t: t >= 4, until=20)
    assert times(events, "started") == times(events, "ready") == [6.0]


def test_startup_failure_threshold_kills_the_container() -> None:
    events = simulate([spec("startup", period=2, failures=5), spec("readiness")],
                      lambda k, t: False, until=100)
    assert events[-1] == (8.0, "killed by startup")  # 0, 2, 4, 6, 8: five failures
    assert "ready" not in [w for _, w in events]


def test_liveness_needs_consecutive_failures_and_then_kills() -> None:
    def answer(kind: str, t: float) -> bool:
        if kind == "liveness":
            return not (t >= 20 and t != 30)  # one success at 30 resets the count
        return True
    events = simulate([spec("startup", period=1), spec("readiness", period=5),
                       spec("liveness", period=10, failures=3)], answer, until=200)
    assert events[-2:] == [(60.0, "killed by liveness"), (60.0, "unready")]


def test_readiness_flaps_without_killing() -> None:
    events = simulate([spec("readiness", period=5, failures=2)],
                      lambda k, t: not 10 <= t < 25, until=40)
    assert times(events, "ready") == [0.0, 25.0]
    assert times(events, "unready") == [15.0]  # two failures: 10 and 15
    assert not [w for _, w in events if w.startswith("killed")]


def test_initial_delay_and_success_threshold() -> None:
    events = simulate([spec("readiness", period=2, delay=5, successes=2)],
                      lambda k, t: True, until=20)
    assert times(events, "probe readiness ok")[:2] == [6.0, 8.0]
    assert times(events, "ready") == [8.0]


def _plan(**kw: Any) -> PodPlan:
    values: dict[str, Any] = {"name": "job-master-0", "task": "master", "index": 0,
                              "ip": "10.233.1.10", "host_ip": "10.100.1.10", "uid": "u-1",
                              "container": {}, "spec": {}}
    values.update(kw)
    return PodPlan(**values)


def test_the_rendered_env_resolves_as_the_kubelet_resolves_it() -> None:
    job = render_job(ManifestParams(kind="mindie", name="job", nodes=2, image="i", pvc="m",
                                    run_id="r"))
    container = job["spec"]["tasks"][0]["template"]["spec"]["containers"][0]
    env = resolve_env(container, _plan(), "ns", {"volcano.sh/job-version": "3"})
    assert env["POD_UID"] == "u-1" and env["K8S_POD_IP"] == "10.233.1.10"
    assert env["K8S_HOST_IP"] == "10.100.1.10" and env["ASCEND_NODE_JOB_VERSION"] == "3"
    assert env["ROLE"] == "master"
    with pytest.raises(KubeletError, match=r"spec\.bogus"):
        resolve_env({"env": [{"name": "X", "valueFrom": {"fieldRef": {"fieldPath":
                                                                     "spec.bogus"}}}]},
                    _plan(), "ns", {})
    assert resolve_env({"env": [{"name": "A", "value": "1"},
                                {"name": "B", "value": "$(A)-x"}]}, _plan(), "ns", {}) == {
        "A": "1", "B": "1-x"}


def test_volcano_env_per_task() -> None:
    env = volcano_env("job", {"master": 1, "worker": 2}, "worker", 1)
    assert env["VC_TASK_INDEX"] == env["VK_TASK_INDEX"] == "1"
    assert env["VC_MASTER_NUM"] == "1" and env["VC_WORKER_NUM"] == "2"
    assert env["VC_WORKER_HOSTS"] == "job-worker-0.job,job-worker-1.job"


def test_security_context_becomes_podman_flags() -> None:
    args, group = security_args({"runAsUser": 1001, "runAsGroup": 1001, "fsGroup": 1001},
                                {"capabilities": {"add": ["IPC_LOCK"]},
                                 "allowPrivilegeEscalation": False})
    assert args[:2] == ["--user", "1001:1001"] and group == 1001
    assert "--cap-add" in args and "no-new-privileges" in args
    with pytest.raises(KubeletError, match="runAsNonRoot"):
        security_args({"runAsNonRoot": True}, {})
    with pytest.raises(KubeletError, match="seLinuxOptions"):
        security_args({}, {"seLinuxOptions": {}})


def test_http_and_tcp_probes_ask_the_pod_ip_as_the_kubelet_does(tmp_path: Any) -> None:
    """httpGet: 200-399 is success, named ports resolve to containerPorts; tcpSocket:
    a connection is success (against loopback standing in for the pod IP)."""
    import threading
    from http.server import BaseHTTPRequestHandler, HTTPServer
    from types import SimpleNamespace

    from tests.kubelet_bed import ContainerProbes, KubeletBed, PodRun

    codes = {"/ok": 200, "/moved": 302, "/busy": 503}

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(codes.get(self.path, 404))
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args: Any) -> None:
            pass

    server = HTTPServer(("127.0.0.1", 0), Handler)
    port = server.server_address[1]
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        kb = KubeletBed(SimpleNamespace(work=tmp_path), {"metadata": {"name": "j"}}, 1, {})
        plan = _plan(ip="127.0.0.1", container={"ports": [{"name": "mgmt",
                                                            "containerPort": port}]})
        run = PodRun(plan, ContainerProbes([]))

        def http(path: str, p: Any = port) -> bool:
            probe = ProbeSpec("readiness", {"httpGet": {"path": path, "port": p}}, timeout=2)
            return kb.probe(run, probe)[0]

        assert http("/ok") and http("/moved") and http("/ok", "mgmt")
        assert not http("/busy") and not http("/missing")
        assert kb.probe(run, ProbeSpec("liveness", {"tcpSocket": {"port": port}}))[0]
        with pytest.raises(KubeletError, match="named port"):
            http("/ok", "nope")
    finally:
        server.shutdown()
        server.server_close()
    closed = ProbeSpec("liveness", {"tcpSocket": {"port": port}})
    assert not kb.probe(run, closed)[0]


def test_the_pod_template_becomes_one_podman_run(tmp_path: Any) -> None:
    """Volumes, env, entrypoint, securityContext of a rendered pod, without podman."""
    from types import SimpleNamespace

    from tests.kubelet_bed import KubeletBed

    job = render_job(ManifestParams(kind="mindie", name="job", nodes=2, image="img", pvc="m",
                                    run_id="r", rendezvous_key_secret="k", npus_per_node=4))
    worker = job["spec"]["tasks"][1]["template"]["spec"]
    worker["securityContext"] = {"runAsUser": 1001, "runAsGroup": 1001, "fsGroup": 1001}
    worker["volumes"].append({"name": "tls", "secret": {"secretName": "tls"}})
    worker["containers"][0]["volumeMounts"].append(
        {"name": "tls", "mountPath": "/opt/tls/server.pem", "subPath": "server.pem"})
    fake_bed = SimpleNamespace(work=tmp_path, cgroup_args=lambda name: [])

    def node(root: Any, plan: Any) -> None:
        (root / "usr/local/Ascend/driver").mkdir(parents=True, exist_ok=True)
        (root / "etc").mkdir(exist_ok=True)
        (root / "etc/hccn.conf").write_text("address_0=1.2.3.4\n")
        (root / "usr/local/bin").mkdir(parents=True, exist_ok=True)
        (root / "usr/local/bin/npu-smi").write_text("#!/bin/sh\n")
        (root / "usr/local/dcmi").mkdir(parents=True, exist_ok=True)
        (root / "etc/ascend_install.info").write_text("Driver_Install_Path_Param=/usr/local\n")

    kb = KubeletBed(fake_bed, job, 9, {"m": tmp_path / "pvc"},
                    {"k": {"key": "secret-key"}, "tls": {"server.pem": "PEM"}},
                    node_files=node)
    master, worker_plan = kb.plans()
    argv = kb.run_argv(worker_plan)
    assert argv[argv.index("--user") + 1] == "1001:1001" and "--group-add" in argv
    assert f"{tmp_path / 'pvc'}:/mnt/model" in argv
    tls = next(a for a in argv if a.endswith(":/opt/tls/server.pem:ro"))
    assert Path(tls.split(":")[0]).read_text() == "PEM"  # the file itself, not a directory
    key_mount = next(a for a in argv if ":/etc/ascend-node/rendezvous-key" in a)
    assert key_mount.endswith(":ro")
    assert oct(os.stat(key_mount.split(":")[0] + "/key").st_mode & 0o777) == "0o440"
    assert argv[argv.index("--entrypoint") + 1] == json.dumps(
        ["tini", "--", "ascend-node", "boot", "--"])
    env = dict(a.split("=", 1) for a in argv[1:] if "=" in a and not a.startswith("-"))
    assert env["VC_TASK_INDEX"] == "0" and env["ROLE"] == "worker"
    assert env["ASCEND_VISIBLE_DEVICES"] == "0,1,2,3" and env["K8S_POD_IP"] == worker_plan.ip
    assert "--shm-size" in argv
    npu_smi = next(a for a in argv if a.endswith(":/usr/local/bin/npu-smi:ro"))
    assert npu_smi.startswith(str(tmp_path))  # the node's, through the manifest's hostPath
    # a node without the driver or /etc/hccn.conf fails the pod, as the kubelet fails it
    bare = KubeletBed(fake_bed, job, 9, {"m": tmp_path / "pvc"}, {"k": {"key": "x"}})
    with pytest.raises(KubeletError, match="does not exist on the node"):
        bare.run_argv(master)
    with pytest.raises(KubeletError, match="Secret 'k' does not exist"):
        KubeletBed(fake_bed, job, 9, {"m": tmp_path / "pvc"}, {}, node_files=node).run_argv(
            master)


def test_init_containers_get_npus_only_by_requesting_them(tmp_path: Any) -> None:
    """The device plugin allocates per container: the rendered init container requests the
    server's NPUs and gets them; one that requests none (the manifest before issue 36) gets
    no ASCEND_VISIBLE_DEVICES, whatever its pod's app container asks for."""
    from types import SimpleNamespace

    from tests.kubelet_bed import KubeletBed

    job = render_job(ManifestParams(kind="mindie", name="job", nodes=2, image="img", pvc="m",
                                    run_id="r", npus_per_node=4, init_container=True,
                                    mount_driver=False))
    fake_bed = SimpleNamespace(work=tmp_path, cgroup_args=lambda name: [])
    kb = KubeletBed(fake_bed, job, 9, {"m": tmp_path / "pvc"})
    master, _ = kb.plans()
    (init,) = kb.inits_of(master.spec)
    assert kb.sidecars_of(master.spec) == []

    def env_of(argv: list[str]) -> dict[str, str]:
        return dict(argv[i + 1].split("=", 1) for i, a in enumerate(argv) if a == "-e")

    argv = kb.run_argv(master, init=init)
    assert argv[argv.index("--name") + 1] == "job-master-0--ranktable"
    assert argv[argv.index("--ip") + 1] == master.ip  # the pod's address while it runs
    assert env_of(argv)["ASCEND_VISIBLE_DEVICES"] == "0,1,2,3"
    bare = dict(init)
    del bare["resources"]
    assert "ASCEND_VISIBLE_DEVICES" not in env_of(kb.run_argv(master, init=bare))
    assert env_of(kb.run_argv(master))["ASCEND_VISIBLE_DEVICES"] == "0,1,2,3"
