"""`status --serving`: MindIE's own health endpoints decide, asked as the probes ask them.

Pure parts by table (what each MindIE answer means, where the endpoint is); then the real
thing on loopback: the fake daemon's server (ascend_node/sim/fake_mindie.py, MindIE's
codes) in its own process, a state dir saying `boot` exec'd it, and the real command.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Optional

import pytest

from ascend_node.errors import ConfigError
from ascend_node.handoff.serving import (
    Answer,
    Endpoint,
    ask,
    ask_host,
    endpoint_from_config,
    judge,
)
from ascend_node.statedir import StatusDoc, write_status

ROOT = Path(__file__).resolve().parents[1]
SHIPPED = json.loads((ROOT / "ascend_node" / "sim" / "data" / "mindie-config.json").read_text())
URL = "http://10.0.0.1:1026/v2/health/ready"


@pytest.mark.parametrize(("probe", "answer", "code", "state", "words"), [
    ("ready", Answer(status=200), 0, "serving", "answered 200"),
    ("ready", Answer(status=503), 3, "loading", "busy or still loading"),
    ("ready", Answer(status=503, body='{"message":"Service is alive but busy"}'), 3, "loading",
     "alive but busy"),
    ("ready", Answer(status=500, body='{"message":"Service is abnormal"}'), 1, "abnormal",
     "Service is abnormal"),
    ("ready", Answer(status=404), 1, "abnormal", "answered 404"),
    ("ready", Answer(refused=True), 3, "loading", "nothing listens"),
    ("ready", Answer(error="no answer within 3 s"), 1, "abnormal", "no answer within 3 s"),
    ("live", Answer(status=200), 0, "serving", "answered 200"),
    ("live", Answer(status=503), 3, "loading", "loading weights"),
    ("live", Answer(status=500), 1, "abnormal", "abnormal"),
])
def test_each_mindie_answer_has_one_meaning(probe: Any, answer: Answer, code: int, state: str,
                                            words: str) -> None:
    verdict = judge(probe, answer, URL)
    assert (verdict.exit_code, verdict.state) == (code, state)
    assert words in verdict.detail
    assert "\n" not in verdict.detail


def _server(**changes: Any) -> dict[str, Any]:
    config = json.loads(json.dumps(SHIPPED))
    config["ServerConfig"].update(changes)
    return config


def test_the_endpoint_is_the_management_server_of_the_patched_file() -> None:
    assert endpoint_from_config(SHIPPED) == Endpoint("https", "127.0.0.2", 1026)
    plain = _server(httpsEnabled=False, managementIpAddress="10.1.2.3", managementPort=2026)
    assert endpoint_from_config(plain) == Endpoint("http", "10.1.2.3", 2026)
    assert endpoint_from_config(plain, "10.9.9.9").host == "10.9.9.9"
    assert Endpoint("https", "fe80::1", 1026).url("/x") == "https://[fe80::1]:1026/x"


@pytest.mark.parametrize(("changes", "field"), [
    ({"managementPort": 0}, "managementPort"),
    ({"managementPort": "1026"}, "managementPort"),
    ({"httpsEnabled": "false"}, "httpsEnabled"),
    ({"managementIpAddress": ""}, "managementIpAddress"),
])
def test_a_bad_config_field_is_named(changes: dict[str, Any], field: str) -> None:
    with pytest.raises(ConfigError, match=field):
        endpoint_from_config(_server(**changes))
    with pytest.raises(ConfigError, match="ServerConfig"):
        endpoint_from_config({})


@pytest.mark.parametrize(("env", "host"), [
    ({"MASTER_IP": "10.0.0.1", "MIES_CONTAINER_IP": "10.0.0.1"}, None),  # the master
    ({"MASTER_IP": "10.0.0.1", "MIES_CONTAINER_IP": "10.0.0.2"}, "10.0.0.1"),  # a slave
    ({"MIES_CONTAINER_IP": "10.0.0.2"}, None),
])
def test_a_slave_asks_its_master(env: dict[str, str], host: Optional[str]) -> None:
    assert ask_host(env) == host


# ---- the real server and the real command -----------------------------------------

def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class FakeMindIE:
    """fake_mindie.py in its own process; `state_dir` says boot exec'd it (its pid)."""

    def __init__(self, work: Path, load_s: float, https: bool = False,
                 load_status: int = 503, client_ca: str = "", ip: str = "127.0.0.1",
                 backend: dict[str, Any] | None = None,
                 env: dict[str, str] | None = None) -> None:
        self.port = _free_port()
        self.ip = ip
        self.install = work / "mindie-service"
        (self.install / "conf").mkdir(parents=True)
        config = _server(httpsEnabled=https, managementIpAddress=ip, ipAddress=ip,
                         managementPort=self.port)
        config["BackendConfig"].update(backend or {})
        if https:
            cert = self.install / config["ServerConfig"]["managementTlsCert"]
            key = self.install / config["ServerConfig"]["managementTlsPk"]
            cert.parent.mkdir(parents=True)
            key.parent.mkdir(parents=True)
            subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes",
                            "-subj", "/CN=mindie", "-days", "1", "-keyout", str(key),
                            "-out", str(cert)], check=True, capture_output=True, timeout=60)
        (self.install / "conf" / "config.json").write_text(json.dumps(config))
        self.report = work / "report"
        self.env = {**os.environ, "MIES_INSTALL_PATH": str(self.install),
                    "ASCEND_NODE_SIM_LOAD_S": str(load_s),
                    "ASCEND_NODE_SIM_LOAD_STATUS": str(load_status),
                    "ASCEND_NODE_SIM_REPORT": str(self.report),
                    "ASCEND_NODE_SIM_CLIENT_CA": client_ca, **(env or {})}
        self.proc = subprocess.Popen([sys.executable, "-m", "ascend_node.sim.fake_mindie"],
                                     env=self.env, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True)
        self.state_dir = work / "state"
        self.state_dir.mkdir()
        write_status(self.state_dir, StatusDoc(state="done", phase="exec", command="boot",
                                               exit_code=0, pid=self.proc.pid,
                                               message="exec mindieservice_daemon"))
        (self.state_dir / "env.json").write_text(json.dumps({"env": {
            "MASTER_IP": "127.0.0.1", "MIES_CONTAINER_IP": "127.0.0.1", "WORLD_SIZE": "8"}}))
        self.wait_listening()

    def wait_listening(self, timeout: float = 30) -> None:
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            assert self.proc.poll() is None, self.proc.communicate()
            try:
                socket.create_connection((self.ip, self.port), 1).close()
                return
            except OSError:
                time.sleep(0.05)
        raise AssertionError("fake MindIE never listened")

    def status(self, *flags: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "ascend_node", "status", "--serving", *flags,
             "--state-dir", str(self.state_dir)],
            env=self.env, capture_output=True, text=True, timeout=60)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.communicate(timeout=30)


@pytest.fixture
def fakes(tmp_path: Path) -> Iterator[list[FakeMindIE]]:
    made: list[FakeMindIE] = []
    yield made
    for fake in made:
        fake.stop()


def test_a_multi_node_master_serves_only_once_its_slaves_have_loaded(
        tmp_path: Path, fakes: list[FakeMindIE]) -> None:
    """The fake loads an instance as one, as MindIE does: a master whose own load ended
    keeps answering 503 while a slave (started later, or slower) still loads, so a probe
    can never see the instance served before each of its nodes is (test_manifest_pods
    relies on it under load)."""
    inter = {"multiNodesInferEnabled": True, "multiNodesInferPort": _free_port()}
    table = tmp_path / "ranktable.json"
    table.write_text(json.dumps({"server_list": [{"container_ip": "127.0.0.3"},
                                                 {"container_ip": "127.0.0.4"}]}))
    roles = {"MASTER_IP": "127.0.0.3", "RANK_TABLE_FILE": str(table)}
    (tmp_path / "m").mkdir()
    (tmp_path / "s").mkdir()
    master = FakeMindIE(tmp_path / "m", load_s=0.0, ip="127.0.0.3", backend=inter,
                        env={**roles, "MIES_CONTAINER_IP": "127.0.0.3"})
    fakes.append(master)
    time.sleep(1.0)  # the master's own load is long over
    assert master.status().returncode == 3
    slave = FakeMindIE(tmp_path / "s", load_s=2.0, ip="127.0.0.4", backend=inter,
                       env={**roles, "MIES_CONTAINER_IP": "127.0.0.4"})
    fakes.append(slave)
    assert master.status().returncode == 3  # the slave is still loading
    end = time.monotonic() + 60
    while not (tmp_path / "m" / "report.loaded").exists():
        assert time.monotonic() < end, "the master never served after its slave loaded"
        time.sleep(0.1)
    served = master.status()
    assert served.returncode == 0, served.stdout + served.stderr
    slave_loaded = float((tmp_path / "s" / "report.loaded").read_text())
    assert float((tmp_path / "m" / "report.loaded").read_text()) >= slave_loaded


def test_serving_is_3_while_weights_load_then_0_then_1_when_abnormal(
        tmp_path: Path, fakes: list[FakeMindIE]) -> None:
    fake = FakeMindIE(tmp_path, load_s=4.0)
    fakes.append(fake)
    loading = fake.status()
    assert loading.returncode == 3, loading.stdout + loading.stderr
    assert loading.stdout.startswith("loading: "), loading.stdout
    assert f"http://127.0.0.1:{fake.port}/v2/health/ready answered 503" in loading.stdout
    assert fake.status("--live").returncode == 3  # MindIE's health flag is not set yet
    end = time.monotonic() + 30
    while not (fake.report.parent / "report.loaded").exists():
        assert time.monotonic() < end
        time.sleep(0.1)
    ready = fake.status()
    assert ready.returncode == 0, ready.stdout + ready.stderr
    assert ready.stdout.startswith("serving: "), ready.stdout
    as_json = fake.status("--json")
    assert json.loads(as_json.stdout)["state"] == "serving"
    os.kill(fake.proc.pid, signal.SIGUSR2)  # busy: not ready, still alive
    time.sleep(0.3)
    assert fake.status().returncode == 3
    assert fake.status("--live").returncode == 0
    os.kill(fake.proc.pid, signal.SIGUSR1)  # abnormal
    time.sleep(0.3)
    abnormal = fake.status()
    assert abnormal.returncode == 1 and "answered 500" in abnormal.stdout, abnormal.stdout
    assert fake.status("--live").returncode == 1
    fake.stop()
    gone = fake.status()
    assert gone.returncode == 1 and "is gone" in gone.stdout, gone.stdout


def test_a_500_while_loading_is_abnormal_not_loading(tmp_path: Path,
                                                     fakes: list[FakeMindIE]) -> None:
    fake = FakeMindIE(tmp_path, load_s=60.0, load_status=500)
    fakes.append(fake)
    assert fake.status().returncode == 1


@pytest.mark.skipif(shutil.which("openssl") is None, reason="openssl makes the test certificate")
def test_https_as_the_config_says_without_verifying_the_pod_ip(
        tmp_path: Path, fakes: list[FakeMindIE]) -> None:
    fake = FakeMindIE(tmp_path, load_s=0.0, https=True)
    fakes.append(fake)
    done = fake.status()
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"https://127.0.0.1:{fake.port}/" in done.stdout
    # and plain http against the TLS port is not taken for an answer
    answer = ask(Endpoint("http", "127.0.0.1", fake.port), "/v2/health/ready", 3)
    assert answer.status != 200


def _self_signed(where: Path, name: str) -> tuple[str, str]:
    cert, key = where / f"{name}.pem", where / f"{name}.key"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-subj",
                    f"/CN={name}", "-days", "1", "-keyout", str(key), "-out", str(cert)],
                   check=True, capture_output=True, timeout=60)
    return str(cert), str(key)


@pytest.mark.skipif(shutil.which("openssl") is None, reason="openssl makes the test certificate")
def test_two_way_tls_needs_the_probe_certificate(tmp_path: Path,
                                                 fakes: list[FakeMindIE]) -> None:
    cert, key = _self_signed(tmp_path, "probe")
    fake = FakeMindIE(tmp_path / "m", load_s=0.0, https=True, client_ca=cert)
    fakes.append(fake)
    refused = fake.status()
    assert refused.returncode == 1 and "no answer from https://" in refused.stdout, \
        refused.stdout
    fake.env.update(ASCEND_NODE_SERVING_CERT=cert, ASCEND_NODE_SERVING_KEY=key)
    served = fake.status()
    assert served.returncode == 0, served.stdout + served.stderr
    fake.env.pop("ASCEND_NODE_SERVING_KEY")
    half = fake.status()
    assert half.returncode == 1 and "ASCEND_NODE_SERVING_KEY" in half.stdout, half.stdout


def test_before_exec_serving_answers_as_status_does(tmp_path: Path) -> None:
    state = tmp_path / "state"
    state.mkdir()
    cmd = [sys.executable, "-m", "ascend_node", "status", "--serving", "--state-dir", str(state)]
    missing = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    assert missing.returncode == 3 and missing.stdout.startswith("not_started"), missing.stdout
    write_status(state, StatusDoc(state="failed", phase="boot", command="boot", exit_code=4,
                                  message="peers timed out"))
    failed = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    assert failed.returncode == 1 and "exited 4: peers timed out" in failed.stdout


def test_nothing_listening_while_the_server_lives_is_loading(tmp_path: Path) -> None:
    state = tmp_path / "state"
    state.mkdir()
    config = tmp_path / "config.json"
    config.write_text(json.dumps(_server(httpsEnabled=False, managementIpAddress="127.0.0.1",
                                         managementPort=_free_port())))
    write_status(state, StatusDoc(state="done", phase="exec", command="boot", exit_code=0,
                                  pid=os.getpid()))
    (state / "env.json").write_text(json.dumps({"env": {"MIES_CONTAINER_IP": "127.0.0.1"}}))
    env = {**os.environ, "MIES_CONFIG_JSON_PATH": str(config)}
    done = subprocess.run([sys.executable, "-m", "ascend_node", "status", "--serving",
                           "--state-dir", str(state)], env=env, capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 3 and "nothing listens" in done.stdout, done.stdout
    config.write_text("{")
    bad = subprocess.run([sys.executable, "-m", "ascend_node", "status", "--serving",
                          "--state-dir", str(state)], env=env, capture_output=True,
                         text=True, timeout=60)
    assert bad.returncode == 1 and "cannot read MindIE config" in bad.stdout, bad.stdout


@pytest.mark.parametrize("argv", [["--live"], ["--serving", "--wait"],
                                  ["--serving", "--serving-timeout", "0"]])
def test_bad_flags_are_usage_errors(argv: list[str], tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-m", "ascend_node", "status", *argv,
                           "--state-dir", str(tmp_path)], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 2, done.stdout + done.stderr
    assert len(done.stderr.strip().splitlines()) <= 2, done.stderr


def test_a_server_that_keeps_the_connection_open_is_judged_at_once(tmp_path: Path) -> None:
    """cpp-httplib honours `Connection: close`; one that does not must not cost a timeout."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    port = listener.getsockname()[1]
    held: list[socket.socket] = []

    def serve() -> None:
        conn, _ = listener.accept()
        conn.recv(4096)
        conn.sendall(b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\n\r\n")
        held.append(conn)  # never closed while the client reads

    import threading

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    started = time.monotonic()
    answer = ask(Endpoint("http", "127.0.0.1", port), "/v2/health/ready", 5)
    assert answer.status == 503 and time.monotonic() - started < 2
    thread.join(5)
    for conn in held:
        conn.close()
    listener.close()
    garbage = ask(Endpoint("http", "127.0.0.1", _free_port()), "/v2/health/ready", 1)
    assert garbage.refused
