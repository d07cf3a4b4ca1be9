"""A real loopback HTTPS server for the Kubernetes client's tests.

Real TLS (a CA and a server certificate for 127.0.0.1 made by `openssl` here), real sockets,
real HTTP/1.1 with keep-alive and chunked transfer encoding — the behaviours the client relies
on. What it answers is written by each test, in the shapes the API server uses: error bodies
are `Status` objects as k8s.io/apimachinery v0.30.2 builds them (pkg/apis/meta/v1/types.go:746,
pkg/api/errors/errors.go), a watch is one JSON `WatchEvent` per line (watch.go:31). It is not an
API server: the proofs against kube-apiserver itself come with the control-plane bed
(issue 37, `scripts/kube-bed`, marker `kube`).
"""

from __future__ import annotations

import json
import shutil
import socket
import ssl
import subprocess
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Callable, Optional

import pytest

Handler = Callable[["Request"], None]


@dataclass(frozen=True)
class Pki:
    ca: Path
    cert: Path
    key: Path


def make_pki(directory: Path, name: str = "ca") -> Pki:
    """A CA and a server certificate for 127.0.0.1 signed by it, by openssl."""
    if shutil.which("openssl") is None:
        pytest.skip("openssl is not installed (it makes the test certificates)")
    directory.mkdir(parents=True, exist_ok=True)
    ca, ca_key = directory / f"{name}.crt", directory / f"{name}.key"
    cert, key = directory / f"{name}-server.crt", directory / f"{name}-server.key"
    csr, ext = directory / f"{name}-server.csr", directory / f"{name}-ext.cnf"
    run = lambda *a: subprocess.run(["openssl", *a], check=True, capture_output=True)  # noqa: E731
    run("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj",
        f"/CN={name}-test-ca", "-keyout", str(ca_key), "-out", str(ca))
    run("req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=kube-apiserver",
        "-keyout", str(key), "-out", str(csr))
    ext.write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\n")
    run("x509", "-req", "-in", str(csr), "-CA", str(ca), "-CAkey", str(ca_key),
        "-CAcreateserial", "-days", "2", "-extfile", str(ext), "-out", str(cert))
    return Pki(ca, cert, key)


class Request(BaseHTTPRequestHandler):
    """One request; `self.server.handler` (the test's function) answers it."""

    protocol_version = "HTTP/1.1"  # keep-alive, and chunked answers are allowed
    server: Server

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def _dispatch(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        self.body = self.rfile.read(length) if length else b""
        self.server.seen.append((self.command, self.path, dict(self.headers), self.body,
                                 self.client_address[1]))
        self.server.handler(self)

    do_GET = do_POST = do_PUT = do_DELETE = do_PATCH = _dispatch

    def json_body(self) -> Any:
        return json.loads(self.body)

    def answer(self, code: int, doc: Any, close: bool = False,
               headers: Optional[dict[str, str]] = None) -> None:
        data = json.dumps(doc).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(data)
        self.wfile.flush()
        if close:  # as a server whose idle keep-alive ran out: no "Connection: close" said
            self.close_connection = True

    def start_chunked(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        self.wfile.flush()

    def chunk(self, data: bytes) -> None:
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        self.wfile.flush()

    def end_chunked(self) -> None:
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()


class Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, pki: Pki, handler: Handler) -> None:
        super().__init__(("127.0.0.1", 0), Request)
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(str(pki.cert), str(pki.key))
        self.socket = ctx.wrap_socket(self.socket, server_side=True)
        self.handler = handler
        self.seen: list[tuple[str, str, dict[str, str], bytes, int]] = []
        self.stop = threading.Event()  # set at the end: handlers that hang return

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.server_address[1]}"


@contextmanager
def serving(pki: Pki, handler: Handler) -> Iterator[Server]:
    server = Server(pki, handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.stop.set()
        server.shutdown()
        server.server_close()


def free_port() -> int:
    """A loopback port nothing listens on (bound, then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Store:
    """ConfigMaps with resourceVersions, answering as the API server documents it
    (https://kubernetes.io/docs/reference/using-api/api-concepts/#resource-versions): a create
    of a taken name is 409 AlreadyExists, an update whose metadata.resourceVersion is not the
    stored one is 409 Conflict with the registry's message (k8s.io/apiserver v0.30.2
    pkg/registry/generic/registry/store.go:243), and every write moves the version on."""

    objects: dict[str, dict[str, Any]] = field(default_factory=dict)
    version: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def __call__(self, req: Request) -> None:
        name = req.path.split("?")[0].rsplit("/", 1)[1]
        with self.lock:
            if req.command == "POST":
                obj = req.json_body()
                name = obj["metadata"]["name"]
                if name in self.objects:
                    return req.answer(409, status(409, "AlreadyExists",
                                                  f'configmaps "{name}" already exists', name))
                return req.answer(201, self._put(name, obj))
            if req.command == "PUT":
                obj = req.json_body()
                have = self.objects.get(name)
                if have is None:
                    return req.answer(404, status(404, "NotFound",
                                                  f'configmaps "{name}" not found', name))
                if obj["metadata"].get("resourceVersion") != have["metadata"]["resourceVersion"]:
                    return req.answer(409, status(
                        409, "Conflict", f'Operation cannot be fulfilled on configmaps "{name}": '
                        "the object has been modified; please apply your changes to the latest "
                        "version and try again", name))
                return req.answer(200, self._put(name, obj))
            have = self.objects.get(name)
            if have is None:
                return req.answer(404, status(404, "NotFound", f'configmaps "{name}" not found',
                                              name))
            return req.answer(200, have)

    def _put(self, name: str, obj: dict[str, Any]) -> dict[str, Any]:
        self.version += 1
        stored = json.loads(json.dumps(obj))
        stored["metadata"]["resourceVersion"] = str(self.version)
        self.objects[name] = stored
        return stored


def status(code: int, reason: str, message: str, name: str = "",
           kind: str = "configmaps", causes: Optional[list[dict[str, str]]] = None
           ) -> dict[str, Any]:
    """A `Status` as the API server sends it (types.go:746; errors.go `NewForbidden`,
    `NewConflict`, `NewAlreadyExists`, `NewInvalid`)."""
    details: dict[str, Any] = {"name": name, "kind": kind}
    if causes:
        details["causes"] = causes
    return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": message, "reason": reason, "details": details, "code": code}
