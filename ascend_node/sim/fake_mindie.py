"""The fake MindIE daemon's server: MindIE's health endpoints, as MindIE answers them.

`mindieservice_daemon` in the simulation and the container bed is a shell script
(fake_tools.FAKE_DAEMON_SCRIPT) that checks what MindIE checks at start and, when asked to
serve (ASCEND_NODE_SIM_SERVE=health), execs `python3 -m ascend_node.sim.fake_mindie` —
the same pid, so tini's exit code is this process's. It listens where the patched
config.json says MindIE's management server listens (`managementIpAddress`,
`managementPort`; https with `managementTlsCert`/`managementTlsPk` when `httpsEnabled`) and
answers `GET /v2/health/ready` and `/v2/health/live` with MindIE's codes
(handoff/serving.py has the table and its source):

- while "loading weights" (ASCEND_NODE_SIM_LOAD_S seconds, default 0): 503 on both, or
  ASCEND_NODE_SIM_LOAD_STATUS (e.g. 500) — MindIE's health flag is not set yet;
- a multi-node instance loads as one (`BackendConfig.multiNodesInferEnabled`, the servers
  of `RANK_TABLE_FILE`): every node opens its inter-node port (`multiNodesInferPort`) once
  its own load is done, and the master (`MIES_CONTAINER_IP` = `MASTER_IP`) stays loading
  until every slave's port accepts — so the instance never answers 200 while one of its
  nodes still loads, whichever node's daemon started last;
- then 200 on both, prints MindIE's "Daemon start success!" and, when
  ASCEND_NODE_SIM_REPORT is set, writes `<report>.loaded` (the wall-clock time the answers
  turned 200, for tests that measure how soon probes notice);
- SIGUSR1 turns it abnormal (500 on both, as MindIE's "Service is abnormal"), SIGUSR2
  busy (ready 503, live 200). SIGTERM ends it with the signal (exit 143 under tini);
- ASCEND_NODE_SIM_CLIENT_CA: over https, require a client certificate signed by that CA.

Standard library only; runs under the image's python3.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import ssl
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

DEFAULT_INSTALL = "/usr/local/Ascend/mindie/latest/mindie-service"


class State:
    """loading -> normal; abnormal / busy on a signal."""

    def __init__(self, load_s: float, load_status: int, slaves: int = 0) -> None:
        self.loaded_at = time.monotonic() + load_s
        self.loaded_wall = time.time() + load_s  # when answers turn 200, on the wall clock
        self.load_status = load_status
        self.mode = "normal"
        self.slaves_pending = slaves > 0  # a master waits for its slaves' loads too

    def answer(self, path: str) -> tuple[int, dict[str, str] | None]:
        if time.monotonic() < self.loaded_at or self.slaves_pending:
            return self.load_status, None
        if self.mode == "abnormal":
            return 500, {"message": "Service is abnormal"}
        if self.mode == "busy":
            if path.endswith("/live"):
                return 200, {"message": "Service is alive but busy"}
            return 503, {"message": "Service is alive but busy. Consider reducing request "
                                    "frequency"}
        return 200, None


def config_path(environ: dict[str, str]) -> tuple[Path, Path]:
    install = Path(environ.get("MIES_INSTALL_PATH", "").strip() or DEFAULT_INSTALL)
    explicit = environ.get("MIES_CONFIG_JSON_PATH", "").strip()
    return (Path(explicit) if explicit else install / "conf" / "config.json"), install


def slave_addresses(config: dict[str, Any], environ: dict[str, str]) -> list[tuple[str, int]]:
    """The inter-node addresses a master waits for: its slaves', from the rank table the
    agent handed over. None for a slave (`MIES_CONTAINER_IP` is not `MASTER_IP`), for one
    node, or for a config that is not multi-node."""
    backend = config.get("BackendConfig", {})
    mine, master = environ.get("MIES_CONTAINER_IP", ""), environ.get("MASTER_IP", "")
    if not backend.get("multiNodesInferEnabled") or mine != master:
        return []
    table = json.loads(Path(environ["RANK_TABLE_FILE"]).read_text(encoding="utf-8"))
    port = int(backend.get("multiNodesInferPort", 1120))
    return [(s["container_ip"], port) for s in table["server_list"]
            if s["container_ip"] != mine]


def open_inter_node_port(config: dict[str, Any]) -> socket.socket:
    """The node's inter-node port, listening once its own load is done (its slaves'
    readiness, as the master sees it)."""
    host = config["ServerConfig"].get("ipAddress", "127.0.0.1")
    port = int(config.get("BackendConfig", {}).get("multiNodesInferPort", 1120))
    sock = socket.create_server((host, port), reuse_port=False)
    sock.listen(16)
    return sock


def wait_for_slaves(slaves: list[tuple[str, int]]) -> None:
    pending = list(slaves)
    while pending:
        try:
            socket.create_connection(pending[0], 1).close()
            pending.pop(0)
        except OSError:
            time.sleep(0.2)


def make_server(config: dict[str, Any], install: Path, state: State,
                environ: dict[str, str] | None = None) -> ThreadingHTTPServer:
    server_conf = config["ServerConfig"]
    # MindIE's MIES_CONTAINER_MANAGEMENT_IP overrides managementIpAddress (pd/server_config.py;
    # the init-container variant sets it so that the kubelet's httpGet reaches the pod IP).
    host = ((environ or {}).get("MIES_CONTAINER_MANAGEMENT_IP", "").strip()
            or server_conf.get("managementIpAddress", "127.0.0.2"))
    port = int(server_conf.get("managementPort", 1026))

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_GET(self) -> None:
            if self.path not in ("/v2/health/ready", "/v2/health/live"):
                self._send(404, {"message": "not found (fake MindIE serves health only)"})
                return
            code, body = state.answer(self.path)
            self._send(code, body)

        def _send(self, code: int, body: dict[str, str] | None) -> None:
            data = json.dumps(body).encode() if body is not None else b""
            self.send_response(code)
            if body is not None:
                self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    httpd = ThreadingHTTPServer((host, port), Handler)
    httpd.daemon_threads = True
    if server_conf.get("httpsEnabled", True):
        cert = install / server_conf.get("managementTlsCert",
                                         "security/certs/management/server.pem")
        key = install / server_conf.get("managementTlsPk",
                                        "security/keys/management/server.key.pem")
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(str(cert), str(key))
        client_ca = os.environ.get("ASCEND_NODE_SIM_CLIENT_CA", "")
        if client_ca:  # two-way TLS, as MindIE's with managementTlsCaFile
            ctx.verify_mode = ssl.CERT_REQUIRED
            ctx.load_verify_locations(client_ca)
        httpd.socket = ctx.wrap_socket(httpd.socket, server_side=True)
    return httpd


def main() -> int:
    environ = dict(os.environ)
    path, install = config_path(environ)
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
        slaves = slave_addresses(config, environ)
        state = State(float(environ.get("ASCEND_NODE_SIM_LOAD_S", "0") or 0),
                      int(environ.get("ASCEND_NODE_SIM_LOAD_STATUS", "503") or 503),
                      len(slaves))
        httpd = make_server(config, install, state, environ)
    except (OSError, ValueError, KeyError, TypeError, ssl.SSLError) as exc:
        print(f"fake daemon: cannot start the management server: {exc}", file=sys.stderr)
        return 1

    def turn(mode: str) -> Any:
        def handler(signum: int, frame: Any) -> None:
            state.mode = mode
        return handler

    signal.signal(signal.SIGUSR1, turn("abnormal"))
    signal.signal(signal.SIGUSR2, turn("busy"))
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    time.sleep(max(0.0, state.loaded_at - time.monotonic()))
    if config.get("BackendConfig", {}).get("multiNodesInferEnabled"):
        try:
            _inter_node = open_inter_node_port(config)  # kept open for the daemon's life
        except OSError as exc:
            print(f"fake daemon: cannot open the inter-node port: {exc}", file=sys.stderr)
            return 1
    if state.slaves_pending:
        wait_for_slaves(slaves)
        state.loaded_wall = time.time()
        state.slaves_pending = False
    report = environ.get("ASCEND_NODE_SIM_REPORT", "")
    if report:
        # the moment the answers turned 200, not when this thread woke (later, under load)
        Path(report + ".loaded").write_text(f"{state.loaded_wall:.3f}\n")
    print("Daemon start success!", flush=True)
    while True:
        time.sleep(3600)


if __name__ == "__main__":
    sys.exit(main())
