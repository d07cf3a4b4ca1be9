"""Is MindIE serving? Its own health endpoints, asked the way a probe should ask them.

`ascend-node status` answers for the bootstrap; once `boot` has exec'd the daemon, only
MindIE knows whether it can serve. MindIE-LLM registers, on its **management** server
(`ServerConfig.managementIpAddress`:`managementPort`, 1026 in the shipped config.json;
https when `httpsEnabled`), `GET /v2/health/ready` and `GET /v2/health/live`
(src/server/endpoint/http_wrapper/http_handler.cpp, `ManagementInitialize` ->
`InitializeServiceStatusResource`, `CheckHealthAndStop`, `HandleGetLivenessAndReadiness`,
`HandleHealthResponse`):

| MindIE's state | ready | live |
|---|---|---|
| stopping (`/stopService` was called) | 503 + message | 503 |
| not healthy yet (1) | 503, no body | 503 |
| a slave node ABNORMAL, or node status unreadable | 500 + the nodes | 500 |
| `SERVICE_NORMAL` | 200, no body | 200 |
| `SERVICE_BUSY` | 503 "alive but busy" | 200 |
| any other service state | 500 "Service is abnormal" | 500 |

(1) The daemon sets its health flag only after `EndPoint::Start` returned, i.e. after the
weights loaded (src/server/daemon/llm_daemon.cpp, `RunEP`: `HealthManager::UpdateHealth(true)`
right after it prints "Daemon start success!").

Before the management server listens at all there is no answer (connection refused).
So: 200 = serving; 503 or no listener while the server process lives = still loading (or
busy); 500 = abnormal. The master's answer covers its slaves (a slave reported ABNORMAL
turns the master's ready and live into 500). Whether a slave node's own daemon serves these
endpoints could not be established from the stored MindIE source (the endpoint's start-up,
`EndPoint::Start`, is not in it), so a slave asks its master: a multi-node instance serves,
or not, as one.

This module is a door plus pure parts: `endpoint_from_config` and `judge` are pure,
`ask` does one HTTP(S) request with the standard library only (a socket, and `ssl`: a
probe's path must not grow a dependency), without certificate verification: the address
is a pod IP inside the cluster, for which no certificate names it.
"""

from __future__ import annotations

import json
import socket
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Optional

from ascend_node.errors import ConfigError

READY_PATH = "/v2/health/ready"
LIVE_PATH = "/v2/health/live"
DEFAULT_MANAGEMENT_PORT = 1026  # ServerConfig.managementPort in MindIE's shipped config.json
DEFAULT_TIMEOUT_S = 3.0
EXIT_SERVING, EXIT_ABNORMAL, EXIT_LOADING = 0, 1, 3
Probe = Literal["ready", "live"]


@dataclass(frozen=True)
class Endpoint:
    """Where MindIE's management server listens, as the patched config.json says."""

    scheme: str  # http | https
    host: str
    port: int

    def url(self, path: str) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.scheme}://{host}:{self.port}{path}"


@dataclass(frozen=True)
class Answer:
    """What one request got: an HTTP status (and the start of the body), or why none."""

    status: Optional[int] = None
    body: str = ""
    refused: bool = False  # nothing listens (yet)
    error: str = ""  # timeout, reset, TLS failure... (status is None)


@dataclass(frozen=True)
class Verdict:
    exit_code: int
    state: str  # serving | loading | abnormal
    detail: str


def endpoint_from_config(config: Mapping[str, Any], host: Optional[str] = None) -> Endpoint:
    """The management endpoint of `config` (MindIE's config.json); `host` overrides the
    address (a slave asks its master). ConfigError naming the field when it is unusable."""
    server = config.get("ServerConfig")
    if not isinstance(server, Mapping):
        raise ConfigError("config.json has no ServerConfig object",
                          "point MIES_CONFIG_JSON_PATH at MindIE's config.json")
    port = server.get("managementPort", DEFAULT_MANAGEMENT_PORT)
    if not isinstance(port, int) or isinstance(port, bool) or not 1 <= port <= 65535:
        raise ConfigError(f"ServerConfig.managementPort {port!r} is not a TCP port",
                          "fix managementPort in config.json (MindIE's default is 1026)")
    https = server.get("httpsEnabled", True)
    if not isinstance(https, bool):
        raise ConfigError(f"ServerConfig.httpsEnabled {https!r} is not true or false",
                          "fix httpsEnabled in config.json")
    address = host if host else server.get("managementIpAddress")
    if not isinstance(address, str) or not address.strip():
        raise ConfigError(f"ServerConfig.managementIpAddress {address!r} is not an address",
                          "run `ascend-node boot`, which sets it to the pod IP")
    return Endpoint("https" if https else "http", address.strip(), port)


def judge(probe: Probe, answer: Answer, url: str) -> Verdict:
    """MindIE's answer as an exit code (0 serving, 3 loading or busy, 1 abnormal)."""
    said = f"{url} answered {answer.status}" if answer.status is not None else ""
    if answer.status == 200:
        return Verdict(EXIT_SERVING, "serving", said)
    body = f" {answer.body}" if answer.body else ""
    if answer.status == 503:
        what = ("busy or still loading" if probe == "ready" else "not healthy yet (loading "
                "weights) or stopping")
        return Verdict(EXIT_LOADING, "loading", f"{said}{body} (MindIE: {what})")
    if answer.status is not None:
        return Verdict(EXIT_ABNORMAL, "abnormal", f"{said}{body} (MindIE: abnormal)")
    if answer.refused:
        return Verdict(EXIT_LOADING, "loading",
                       f"nothing listens on {url} yet (MindIE starts its management server "
                       "while it loads)")
    return Verdict(EXIT_ABNORMAL, "abnormal", f"no answer from {url}: {answer.error}")


def ask(endpoint: Endpoint, path: str, timeout: float = DEFAULT_TIMEOUT_S,
        client_cert: Optional[tuple[str, str]] = None) -> Answer:
    """One GET; never raises for network trouble (the answer says what happened).

    `client_cert` (certificate file, key file) is presented over https: MindIE's TLS is
    two-way when its config names CAs to verify clients with (`managementTlsCaFile`), and a
    probe without a certificate then fails the handshake.

    A plain HTTP/1.1 request on a socket rather than `http.client`: the probe runs every few
    seconds in every pod, and http.client's imports (the email parser) cost it ~20 ms a run.
    `ssl` is imported only for https."""
    host = f"[{endpoint.host}]" if ":" in endpoint.host else endpoint.host
    request = (f"GET {path} HTTP/1.1\r\nHost: {host}:{endpoint.port}\r\n"
               "User-Agent: ascend-node-status\r\nAccept: */*\r\nConnection: close\r\n\r\n")
    try:
        sock = socket.create_connection((endpoint.host, endpoint.port), timeout=timeout)
    except ConnectionRefusedError:
        return Answer(refused=True)
    except (socket.timeout, TimeoutError):
        return Answer(error=f"no answer within {timeout:g} s")
    except OSError as exc:
        return Answer(error=exc.strerror or str(exc))
    try:
        if endpoint.scheme == "https":
            import ssl

            ctx = ssl.create_default_context()
            ctx.check_hostname = False  # a pod IP: no certificate names it
            ctx.verify_mode = ssl.CERT_NONE
            if client_cert is not None:
                ctx.load_cert_chain(*client_cert)
            sock = ctx.wrap_socket(sock)
        sock.sendall(request.encode("ascii"))
        data = b""
        while not _complete(data):
            chunk = sock.recv(4096)
            if not chunk:
                break
            data += chunk
    except (socket.timeout, TimeoutError):
        if b"\r\n\r\n" not in data:  # the status line and headers arrived: judge them
            return Answer(error=f"no answer within {timeout:g} s")
    except OSError as exc:  # ssl.SSLError is an OSError
        return Answer(error=str(exc) or type(exc).__name__)
    finally:
        sock.close()
    head, _, body = data.partition(b"\r\n\r\n")
    status_line = head.split(b"\r\n", 1)[0].decode("latin-1", "replace")
    parts = status_line.split()
    if len(parts) < 2 or not parts[0].startswith("HTTP/") or not parts[1].isdigit():
        return Answer(error=f"not an HTTP answer: {status_line[:60]!r}")
    text = body[:300].decode("utf-8", "replace")
    return Answer(status=int(parts[1]), body=" ".join(text.split())[:200])


def _complete(data: bytes) -> bool:
    """Enough of a response to judge: the headers and the body (or its first 300 bytes;
    a server that keeps the connection open despite `Connection: close` is not waited for)."""
    head, sep, body = data.partition(b"\r\n\r\n")
    if not sep:
        return len(data) > 65536
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length" and value.strip().isdigit():
            return len(body) >= min(int(value), 300)
    return len(body) >= 300


def read_config(path: Path) -> dict[str, Any]:
    """config.json as the agent patched it (plain json: a probe skips the patcher's checks)."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConfigError(f"no MindIE config at {path}",
                          "set MIES_CONFIG_JSON_PATH as the server container has it") from None
    except (OSError, ValueError) as exc:
        raise ConfigError(f"cannot read MindIE config {path}: {exc}",
                          "check the file `boot` patched") from exc
    if not isinstance(data, dict):
        raise ConfigError(f"MindIE config {path} is not a JSON object", "check the file")
    return data


def ask_host(env: Mapping[str, str]) -> Optional[str]:
    """The master's address when this node is a slave of a multi-node instance, else None
    (ask this node's own managementIpAddress). `env` is what boot handed the server."""
    master, mine = env.get("MASTER_IP", ""), env.get("MIES_CONTAINER_IP", "")
    return master if master and mine and master != mine else None


CLIENT_CERT_ENV = ("ASCEND_NODE_SERVING_CERT", "ASCEND_NODE_SERVING_KEY")


def client_cert_from_env(environ: Mapping[str, str]) -> Optional[tuple[str, str]]:
    """The probe's client certificate and key (both or neither), for two-way TLS."""
    cert, key = (environ.get(name, "").strip() for name in CLIENT_CERT_ENV)
    if bool(cert) != bool(key):
        raise ConfigError(f"only one of {' and '.join(CLIENT_CERT_ENV)} is set",
                          "set both (a client certificate and its key) or neither")
    for name, path in zip(CLIENT_CERT_ENV, (cert, key)):
        if path and not Path(path).is_file():
            raise ConfigError(f"{name}={path} is not a file", f"fix or unset {name}")
    return (cert, key) if cert else None


def serving(config: Mapping[str, Any], env: Mapping[str, str], probe: Probe = "ready",
            timeout: float = DEFAULT_TIMEOUT_S,
            client_cert: Optional[tuple[str, str]] = None) -> Verdict:
    """Ask MindIE (this node's, or the master's on a slave) and judge its answer."""
    endpoint = endpoint_from_config(config, ask_host(env))
    path = READY_PATH if probe == "ready" else LIVE_PATH
    url = endpoint.url(path)
    verdict = judge(probe, ask(endpoint, path, timeout, client_cert), url)
    if ask_host(env) is not None:
        return Verdict(verdict.exit_code, verdict.state,
                       f"{verdict.detail} [this node is a slave; the master answers for the "
                       "instance]")
    return verdict


__all__ = ["Answer", "Endpoint", "Verdict", "ask", "client_cert_from_env",
           "endpoint_from_config", "judge", "read_config", "serving"]
