"""The kubelet's `containerLogs` endpoint for the kube bed's fake nodes (issue 39).

`kubectl logs` and every client of `GET /api/v1/namespaces/<ns>/pods/<pod>/log` reach a
container's log through the API server, which dials the pod's node: the address its Node
object lists first among `--kubelet-preferred-address-types`, the port its
`status.daemonEndpoints.kubeletEndpoint.Port` (kubernetes v1.30.2 pkg/kubelet/client/
kubelet_client.go `GetConnectionInfo`; pkg/registry/core/pod/strategy.go `LogLocation`), and
asks `GET https://<ip>:<port>/containerLogs/<ns>/<pod>/<container>?follow=..&timestamps=..
&sinceTime=..&tailLines=..&limitBytes=..&previous=..` with its `--kubelet-client-certificate`.

Here one HTTPS server per fake node listens on that node's InternalIP (the agent puts the
address on the host's loopback device, as a real node's kubelet listens on an address its
host holds) and answers from the container's podman log (`podman logs --timestamps
[--follow] [--since] [--tail]`, stdout and stderr in the order podman wrote them, as the
kubelet merges a container's two streams). Its certificate is signed by the bed's CA with
the node's IP as SAN, so the API server verifies it (`--kubelet-certificate-authority`); a
client must present a certificate the CA signed (the kubelet's `--client-ca-file`).

What the kubelet does and this does too (pkg/kubelet/kuberuntime/logs/logs.go):
* lines as `<RFC 3339, nanoseconds, UTC> <text>` with `timestamps=true`, the text alone
  without;
* `sinceTime`: lines whose time is not before it; `sinceSeconds` the same from now;
* `tailLines`: the last N lines; `limitBytes`: the stream stops after that many bytes;
* `follow`: the response goes on until the container ends (podman's follow ends there),
  or the client goes away;
* `previous`: the agent never restarts a container, so there is no previous one: 400 with
  the kubelet's words.

Not done: the kubelet's authorization of the caller (a SubjectAccessReview for `nodes/proxy`
or `nodes/log`); any CA-signed client is served.

The pure part (`request_of`, `kubelet_line`) is tested by tests/test_kube_node_logs.py.
"""

from __future__ import annotations

import http.server
import select
import socket
import ssl
import subprocess
import threading
import time
import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Optional

PATH_PREFIX = "/containerLogs/"


class LogRequestError(Exception):
    """A request the kubelet refuses: `status` and its message."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


@dataclass(frozen=True)
class LogRequest:
    namespace: str
    pod: str
    container: str
    follow: bool = False
    timestamps: bool = False
    since_ns: Optional[int] = None  # nanoseconds since the epoch
    tail: Optional[int] = None
    limit_bytes: Optional[int] = None


def _bool(query: Mapping[str, list[str]], key: str) -> bool:
    value = query.get(key, ["false"])[-1]
    if value not in ("true", "false", "1", "0", ""):
        raise LogRequestError(400, f"{key}: {value!r} is not a boolean")
    return value in ("true", "1", "")


def _int(query: Mapping[str, list[str]], key: str) -> Optional[int]:
    if key not in query:
        return None
    value = query[key][-1]
    if not value.lstrip("-").isdigit():
        raise LogRequestError(400, f"{key}: {value!r} is not an integer")
    return int(value)


def _rfc3339_ns(text: str) -> int:
    base, _, rest = text.partition(".")
    frac = ""
    zone = ""
    if rest:
        digits = len(rest) - len(rest.lstrip("0123456789"))
        frac, zone = rest[:digits], rest[digits:]
    else:
        for sign in ("Z", "+", "-"):
            at = base.find(sign, 11)
            if at > 0:
                base, zone = base[:at], base[at:]
                break
    zone = "+00:00" if zone in ("Z", "z") else zone
    when = datetime.fromisoformat(base + zone)
    if when.tzinfo is None:
        raise ValueError(text)
    return int(when.timestamp()) * 1_000_000_000 + int(frac.ljust(9, "0")[:9] or 0)


def request_of(path: str, now_ns: int) -> LogRequest:
    """The request a `GET /containerLogs/...` asks for, or LogRequestError (the kubelet's
    400/404 cases)."""
    url = urllib.parse.urlsplit(path)
    if not url.path.startswith(PATH_PREFIX):
        raise LogRequestError(404, f"{url.path}: not found")
    parts = [urllib.parse.unquote(p) for p in url.path[len(PATH_PREFIX):].split("/")]
    if len(parts) != 3 or not all(parts):
        raise LogRequestError(400, f"{url.path}: want /containerLogs/<namespace>/<pod>/"
                                   "<container>")
    query = urllib.parse.parse_qs(url.query, keep_blank_values=True)
    if _bool(query, "previous"):
        raise LogRequestError(400, f'previous terminated container "{parts[2]}" in pod '
                                   f'"{parts[1]}" not found')
    since: Optional[int] = None
    if "sinceTime" in query:
        try:
            since = _rfc3339_ns(query["sinceTime"][-1])
        except ValueError:
            raise LogRequestError(400, f"sinceTime: {query['sinceTime'][-1]!r} is not an "
                                       "RFC 3339 time") from None
    seconds = _int(query, "sinceSeconds")
    if seconds is not None:
        since = now_ns - seconds * 1_000_000_000
    tail, limit = _int(query, "tailLines"), _int(query, "limitBytes")
    for key, value in (("tailLines", tail), ("limitBytes", limit)):
        if value is not None and value < 0:
            raise LogRequestError(400, f"{key}: {value} is negative")
    if tail is not None and _bool(query, "follow"):
        raise LogRequestError(400, "tailLines with follow=true: not served by the kube bed's "
                                   "node agent (podman's log cannot tell the tail from what "
                                   "follows)")
    return LogRequest(parts[0], parts[1], parts[2], _bool(query, "follow"),
                      _bool(query, "timestamps"), since, tail, limit)


def podman_args(req: LogRequest, container: str) -> list[str]:
    """`podman logs` arguments for the request (the since/tail filters podman applies are
    applied again to its output: `kubelet_line`)."""
    argv = ["logs", "--timestamps"]
    if req.follow:
        argv.append("--follow")
    if req.since_ns is not None:
        # whole seconds, rounded down: podman's --since only narrows what it reads
        argv += ["--since", datetime.fromtimestamp(req.since_ns // 1_000_000_000,
                                                   tz=timezone.utc).strftime(
                                                       "%Y-%m-%dT%H:%M:%SZ")]
    # not --tail: podman 4.3 counts a partial line (no newline yet) as a line of its own and
    # joins it to the line before (seen on the bed); the tail is cut here (`_stream`)
    return [*argv, container]


def kubelet_line(line: str, req: LogRequest) -> Optional[str]:
    """One line of `podman logs --timestamps` as the kubelet sends it (RFC 3339 with nine
    fraction digits, UTC, `timestamps=true`; the text alone otherwise), or None when it is
    before `sinceTime`. A line podman did not stamp is passed on as it is."""
    stamp, sep, text = line.partition(" ")
    try:
        nanos = _rfc3339_ns(stamp) if sep else None
    except ValueError:
        nanos = None
    if nanos is None:
        return line
    if req.since_ns is not None and nanos < req.since_ns:
        return None
    if not req.timestamps:
        return text
    when = datetime.fromtimestamp(nanos // 1_000_000_000, tz=timezone.utc)
    return f"{when:%Y-%m-%dT%H:%M:%S}.{nanos % 1_000_000_000:09d}Z {text}"


# ---- the server ----------------------------------------------------------------------

# (namespace, pod, container) -> the podman container's name, None when no such container
# (LogRequestError: one the kubelet refuses, e.g. a container still waiting to start)
Finder = Callable[[str, str, str], Optional[str]]


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server

    def log_message(self, format: str, *args: object) -> None:
        pass

    def _refuse(self, status: int, message: str) -> None:
        body = (message + "\n").encode()
        self.send_response(status)
        self.send_header("Content-Type", "text/plain; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:
        self.close_connection = True
        try:
            req = request_of(self.path, time.time_ns())
        except LogRequestError as e:
            self._refuse(e.status, str(e))
            return
        try:
            name = self.server.find(req.namespace, req.pod, req.container)
        except LogRequestError as e:
            self._refuse(e.status, str(e))
            return
        if name is None:
            self._refuse(404, f'container "{req.container}" in pod "{req.pod}" '
                              f'(namespace "{req.namespace}") not found on this node')
            return
        proc = subprocess.Popen(["podman", *podman_args(req, name)], env=dict(
            self.server.env), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL)
        assert proc.stdout is not None
        try:
            self.send_response(200)
            self.send_header("Content-Type", "text/plain")
            self.send_header("Connection", "close")  # the body ends where the log ends
            self.end_headers()
            self.wfile.flush()
            self._stream(proc, req)
        except (OSError, ssl.SSLError):
            pass  # the client went away
        finally:
            if proc.poll() is None:
                proc.kill()
            proc.wait()
            proc.stdout.close()

    def _stream(self, proc: subprocess.Popen[bytes], req: LogRequest) -> None:
        assert proc.stdout is not None
        out, budget, pending = proc.stdout, req.limit_bytes, b""
        conn = self.connection
        if req.tail is not None:  # not followed (request_of): the whole log, then its tail
            data = out.read()
            lines = data.split(b"\n")
            last = lines.pop()  # b"" after a final newline, else a line without one
            texts = [(raw, "\n") for raw in lines] + ([(last, "")] if last else [])
            for raw, end in texts[max(0, len(texts) - req.tail):] if req.tail else []:
                budget = self._send(kubelet_line(raw.decode(errors="replace"), req), end,
                                    budget)
                if budget == 0:
                    return
            return
        while True:
            ready, _, _ = select.select([out, conn], [], [], 1.0)
            if conn in ready and self._client_gone():
                return
            if out not in ready:
                continue
            chunk = out.read1(65536)  # type: ignore[attr-defined]
            if not chunk:
                if pending:  # the container's last line had no newline: sent as it is
                    self._send(kubelet_line(pending.decode(errors="replace"), req), "",
                               budget)
                return
            *lines, pending = (pending + chunk).split(b"\n")
            for raw in lines:
                budget = self._send(kubelet_line(raw.decode(errors="replace"), req), "\n",
                                    budget)
                if budget == 0:
                    return

    def _send(self, line: Optional[str], end: str, budget: Optional[int]) -> Optional[int]:
        if line is None:
            return budget
        data = (line + end).encode()
        if budget is not None:
            data = data[:budget]
            budget -= len(data)
        self.wfile.write(data)
        self.wfile.flush()
        return budget

    def _client_gone(self) -> bool:
        """The client closed its side (the API server drops the dial when its own client
        is gone): a GET sends nothing more, so readable means EOF."""
        conn = self.connection
        try:
            conn.setblocking(False)
            try:
                return bool(conn.recv(1) == b"")
            finally:
                conn.setblocking(True)
        except (ssl.SSLWantReadError, BlockingIOError):
            return False
        except OSError:
            return True


class _Server(http.server.ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, address: tuple[str, int], find: Finder,
                 env: Mapping[str, str], context: ssl.SSLContext) -> None:
        super().__init__(address, _Handler)
        self.find, self.env, self.context = find, env, context

    def get_request(self) -> tuple[socket.socket, object]:
        sock, addr = self.socket.accept()
        sock.settimeout(30)  # the handshake; the stream itself uses select
        try:
            tls = self.context.wrap_socket(sock, server_side=True)
        except (OSError, ssl.SSLError):
            sock.close()
            raise
        tls.settimeout(None)
        return tls, addr

    def handle_error(self, request: object, client_address: object) -> None:
        pass  # a client that failed its handshake or went away


class NodeLogServer:
    """One fake node's kubelet port: HTTPS on `ip`, a port picked free (the node's
    advertised `kubeletEndpoint`), serving `/containerLogs/` until `stop`."""

    def __init__(self, ip: str, cert: str, key: str, ca: str, find: Finder,
                 env: Mapping[str, str]) -> None:
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(cert, key)
        ctx.load_verify_locations(ca)
        ctx.verify_mode = ssl.CERT_REQUIRED  # the kubelet's --client-ca-file
        self.ip = ip
        self._server = _Server((ip, 0), find, env, ctx)
        self.port = int(self._server.server_address[1])
        self._thread = threading.Thread(target=self._server.serve_forever,
                                        kwargs={"poll_interval": 0.5}, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()


# ---- the node's address on this host ---------------------------------------------------

def hold_address(ip: str) -> bool:
    """Put `ip` on the loopback device unless the host already has it (True: added, to be
    released). A node's InternalIP is an address of its host; here that host is this one."""
    if _local(ip):
        return False
    subprocess.run(["ip", "addr", "add", f"{ip}/32", "dev", "lo"], check=True,
                   capture_output=True, text=True)
    return True


def release_address(ip: str) -> None:
    subprocess.run(["ip", "addr", "del", f"{ip}/32", "dev", "lo"], check=False,
                   capture_output=True)


def _local(ip: str) -> bool:
    try:
        with socket.socket() as s:
            s.bind((ip, 0))
        return True
    except OSError:
        return False


class NodeLogs:
    """Every fake node's kubelet port: each node's InternalIP held on this host, a serving
    certificate the bed's CA signs for it, the server, and the port written to the Node's
    `status.daemonEndpoints.kubeletEndpoint` (as that node, as the kubelet writes it)."""

    def __init__(self) -> None:
        self.servers: list[NodeLogServer] = []
        self.held: list[str] = []

    def start(self, run: Path, name: str, ip: str, patch: Callable[[str, Any], Any],
              find: Finder, env: Mapping[str, str]) -> int:
        import kube_bed

        pki = run / "pki"
        cert = f"kubelet-serving-{name}"
        kube_bed.make_cert(pki, cert, f"system:node:{name}", "system:nodes",
                           server_names=(f"IP:{ip}", f"DNS:{name}"))
        if hold_address(ip):
            self.held.append(ip)
        server = NodeLogServer(ip, str(pki / f"{cert}.crt"), str(pki / f"{cert}.key"),
                               str(pki / "ca.crt"), find, env)
        server.start()
        self.servers.append(server)
        patch(f"/api/v1/nodes/{name}/status", {"status": {"daemonEndpoints": {
            "kubeletEndpoint": {"Port": server.port}}}})
        return server.port

    def stop(self) -> None:
        for server in self.servers:
            server.stop()
        for ip in self.held:
            release_address(ip)
        self.servers, self.held = [], []
