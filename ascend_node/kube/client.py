"""Requests to the API server over the standard library's HTTPS, JSON in and out.

One persistent connection for plain calls (a rendezvous makes a few calls a second at most,
and a TLS handshake costs more than the call), a connection of its own for each watch (its
answer is an endless chunked stream). Every socket operation has a time-out, so a server that
stops answering ends a call with `ApiUnanswered` instead of hanging the agent; the deadline of
the whole wait stays the caller's.

A kept-alive connection that the server has closed in between is found only when the next
request is written; such a request is sent once more on a fresh connection. For a write that
means it may have landed once already: every write the agent makes is a create-if-absent or
a compare-and-set, so a repeat ends in `AlreadyExists` or `Conflict`, and the caller reads the
object back and recognises its own document.

Watches (https://kubernetes.io/docs/reference/using-api/api-concepts/#efficient-detection-of-changes):
`?watch=true&resourceVersion=<rv>&timeoutSeconds=<n>` answers with one JSON `WatchEvent` per
line (k8s.io/apimachinery v0.30.2 pkg/apis/meta/v1/watch.go:31: `type`, `object`), ADDED,
MODIFIED, DELETED, BOOKMARK or ERROR (whose object is a `Status`: a 410 means list again).
The server ends the stream after `timeoutSeconds`; the generator then simply ends, and the
caller watches again from the last resourceVersion it saw.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import socket
import ssl
import tempfile
from collections.abc import Iterator
from typing import Any, Optional
from urllib.parse import urlencode, urlsplit

from ascend_node import __version__
from ascend_node.kube.config import Endpoint
from ascend_node.kube.errors import ApiUnanswered, KubeError, error_for
from ascend_node.kube.resources import PODS, PODS_LOG, Call, Resource

MAX_BODY = 64 << 20   # an answer larger than this is refused, not held in memory
MAX_EVENT = 8 << 20   # one watch event (a ConfigMap is at most 1 MiB of data, plus metadata)
_RETRY_ON_REUSE = (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError,
                   ssl.SSLEOFError)  # how a kept-alive connection the server closed shows


def ssl_context(ep: Endpoint) -> ssl.SSLContext:
    """Verify the server against the endpoint's CA (the system's when none is given), and
    present the client certificate when there is one. Never unverified (config.py)."""
    try:
        ctx = ssl.create_default_context(cafile=ep.ca_file, cadata=ep.ca_data)
    except (OSError, ssl.SSLError) as exc:
        raise KubeError(f"cannot load the API server's CA from {ep.source}: {exc}") from None
    if ep.cert_file or ep.cert_data:
        _load_client_cert(ctx, ep)
    return ctx


def _load_client_cert(ctx: ssl.SSLContext, ep: Endpoint) -> None:
    """`load_cert_chain` reads files only: inline PEM goes through a private temporary
    directory (0700) that is removed at once."""
    try:
        if ep.cert_file:
            ctx.load_cert_chain(ep.cert_file, ep.key_file)
            return
        with tempfile.TemporaryDirectory(prefix="ascend-node-kube-") as tmp:
            paths = []
            for name, text in (("cert.pem", ep.cert_data), ("key.pem", ep.key_data)):
                path = os.path.join(tmp, name)
                fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
                with os.fdopen(fd, "w") as fh:
                    fh.write(text or "")
                paths.append(path)
            ctx.load_cert_chain(paths[0], paths[1])
    except (OSError, ssl.SSLError) as exc:
        raise KubeError(f"cannot load the client certificate of {ep.source}: {exc}") from None


class Client:
    """Calls on namespaced resources of one API server; not shared between threads."""

    def __init__(self, endpoint: Endpoint, timeout: float = 10.0) -> None:
        url = urlsplit(endpoint.server)
        if url.scheme != "https" or not url.hostname:
            raise KubeError(f"API server {endpoint.server!r} ({endpoint.source}) is not an "
                            "https:// URL")
        self.endpoint = endpoint
        self.namespace = endpoint.namespace
        self.timeout = timeout
        self._host = url.hostname
        self._port = url.port or 443
        self._prefix = url.path.rstrip("/")  # a server behind a path (a proxy) keeps it
        self._ctx = ssl_context(endpoint)
        self._conn: Optional[http.client.HTTPSConnection] = None
        self._token_cache: tuple[Optional[tuple[int, int, int]], Optional[str]] = (None, None)
        # Calls made (a watch counts once, in both): what one rendezvous costs the API
        # server, logged at its end and measured by the tests (docs/benchmarks.md).
        self.requests = 0
        self.watches = 0

    # -- plumbing ---------------------------------------------------------------------

    def _token(self) -> Optional[str]:
        """The bearer token; a token file is read again whenever it changed (rotation)."""
        ep = self.endpoint
        if ep.token is not None or not ep.token_file:
            return ep.token
        try:
            st = os.stat(ep.token_file)
            key = (st.st_mtime_ns, st.st_ino, st.st_size)
            if self._token_cache[0] != key:
                with open(ep.token_file, encoding="utf-8") as fh:
                    self._token_cache = (key, fh.read(1 << 16).strip())
        except OSError as exc:
            raise KubeError(f"cannot read the token {ep.token_file}: "
                            f"{exc.strerror or exc}") from None
        return self._token_cache[1]

    def _headers(self, body: Optional[bytes]) -> dict[str, str]:
        headers = {"Accept": "application/json", "User-Agent": f"ascend-node/{__version__}"}
        token = self._token()
        if token:
            headers["Authorization"] = f"Bearer {token}"
        if body is not None:
            headers["Content-Type"] = "application/json"
        return headers

    def _connection(self, timeout: float) -> http.client.HTTPSConnection:
        return http.client.HTTPSConnection(self._host, self._port, timeout=timeout,
                                           context=self._ctx)

    def _unanswered(self, call: Call, exc: BaseException, waited: float) -> KubeError:
        where = f"{self.endpoint.server} ({self.endpoint.source})"
        if isinstance(exc, ssl.SSLCertVerificationError):
            return KubeError(
                f"the API server at {where} presented a certificate the agent does not trust: "
                f"{exc.verify_message}", "check the CA the endpoint names")
        if isinstance(exc, (socket.timeout, TimeoutError)):
            why = f"no answer within {waited:g} s"
        else:
            why = getattr(exc, "strerror", None) or str(exc) or type(exc).__name__
        return ApiUnanswered(f"the API server does not answer: {call.describe()} at {where}: "
                             f"{why}", "retried until the deadline", call=call)

    def _close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def close(self) -> None:
        self._close()

    def request(self, method: str, call: Call, path: str, body: Optional[Any] = None,
                timeout: Optional[float] = None) -> dict[str, Any]:
        """One call; its JSON answer, or the `errors` exception its status means."""
        data = None if body is None else json.dumps(body, separators=(",", ":")).encode()
        headers = self._headers(data)
        waited = timeout or self.timeout
        self.requests += 1
        for attempt in (0, 1):
            reused = self._conn is not None
            conn = self._conn or self._connection(waited)
            if conn.sock is not None:
                conn.sock.settimeout(waited)
            self._conn = conn
            try:
                conn.request(method, self._prefix + path, body=data, headers=headers)
                resp = conn.getresponse()
                payload = resp.read(MAX_BODY + 1)
            except _RETRY_ON_REUSE as exc:
                self._close()
                if reused and attempt == 0:
                    continue
                raise self._unanswered(call, exc, waited) from None
            except (OSError, http.client.HTTPException) as exc:
                self._close()
                raise self._unanswered(call, exc, waited) from None
            if resp.will_close or len(payload) > MAX_BODY:
                self._close()
            break
        if len(payload) > MAX_BODY:
            raise KubeError(f"{call.describe()}: the answer is larger than {MAX_BODY >> 20} MiB")
        if resp.status >= 400:
            raise error_for(call, resp.status, payload, resp.getheader("Retry-After"))
        try:
            doc = json.loads(payload.decode("utf-8"))
        except (UnicodeDecodeError, ValueError):
            raise KubeError(f"{call.describe()}: the API server's answer ({resp.status}) "
                            "is not JSON") from None
        if not isinstance(doc, dict):
            raise KubeError(f"{call.describe()}: the API server's answer is not an object")
        return doc

    # -- calls, in RBAC's words -------------------------------------------------------

    def get(self, res: Resource, name: str) -> dict[str, Any]:
        call = Call("get", res, self.namespace, name)
        return self.request("GET", call, res.path(self.namespace, name))

    def list(self, res: Resource, label_selector: Optional[str] = None,
             field_selector: Optional[str] = None) -> dict[str, Any]:
        call = Call("list", res, self.namespace, _selected_name(field_selector))
        query = _selectors(label_selector, field_selector)
        return self.request("GET", call, res.path(self.namespace, query=query or None))

    def create(self, res: Resource, obj: dict[str, Any]) -> dict[str, Any]:
        """Create-if-absent: a taken name raises `AlreadyExists`."""
        call = Call("create", res, self.namespace, obj.get("metadata", {}).get("name"))
        return self.request("POST", call, res.path(self.namespace), obj)

    def replace(self, res: Resource, obj: dict[str, Any]) -> dict[str, Any]:
        """Compare-and-set: `obj` carries the `metadata.resourceVersion` it was read at; if
        the object changed since, `Conflict`. Without one the write would be blind: refused."""
        meta = obj.get("metadata", {})
        if not meta.get("resourceVersion"):
            raise ValueError("replace() needs metadata.resourceVersion (compare-and-set)")
        call = Call("update", res, self.namespace, meta.get("name"))
        return self.request("PUT", call, res.path(self.namespace, meta["name"]), obj)

    def delete(self, res: Resource, name: str,
               resource_version: Optional[str] = None) -> dict[str, Any]:
        """Delete, only if still at `resource_version` when one is given (a precondition)."""
        call = Call("delete", res, self.namespace, name)
        body = None
        if resource_version:
            body = {"kind": "DeleteOptions", "apiVersion": "v1",
                    "preconditions": {"resourceVersion": resource_version}}
        return self.request("DELETE", call, res.path(self.namespace, name), body)

    def watch(self, res: Resource, resource_version: Optional[str] = None,
              label_selector: Optional[str] = None, timeout_seconds: int = 60,
              idle_timeout: Optional[float] = None,
              field_selector: Optional[str] = None) -> Iterator[dict[str, Any]]:
        """Events of `res` in the namespace, from `resource_version`, for up to
        `timeout_seconds` (then the server ends the stream and the generator returns).
        A stream silent for `idle_timeout` (default: `timeout_seconds` + the call time-out)
        raises `ApiUnanswered`, as does a stream cut inside an event; an ERROR event raises
        the exception of its Status (a 410 `Gone`: list again). A `field_selector` of
        `metadata.name=<name>` watches one object, and RBAC then authorizes the watch by that
        name (a Role's `resourceNames` can allow it)."""
        call = Call("watch", res, self.namespace, _selected_name(field_selector))
        query = {"watch": "true", "timeoutSeconds": str(int(timeout_seconds)),
                 "allowWatchBookmarks": "true", **_selectors(label_selector, field_selector)}
        if resource_version:
            query["resourceVersion"] = resource_version
        idle = idle_timeout if idle_timeout is not None else timeout_seconds + self.timeout
        self.requests += 1
        self.watches += 1
        conn = self._connection(self.timeout)
        try:
            try:
                conn.request("GET", self._prefix + res.path(self.namespace, query=query),
                             headers=self._headers(None))
                if conn.sock is not None:
                    conn.sock.settimeout(self.timeout)
                resp = conn.getresponse()
            except (OSError, http.client.HTTPException) as exc:
                raise self._unanswered(call, exc, self.timeout) from None
            if resp.status >= 400:
                raise error_for(call, resp.status, resp.read(MAX_BODY),
                                resp.getheader("Retry-After"))
            if conn.sock is not None:
                conn.sock.settimeout(idle)
            yield from self._events(call, resp, idle)
        finally:
            conn.close()

    def pod_log(self, name: str, container: Optional[str] = None,
                since_time: Optional[str] = None) -> LogStream:
        """A pod's log as it is written: `GET pods/<name>/log?follow=true&timestamps=true`
        (`PodLogOptions`; `sinceTime` RFC 3339 to resume). The API server proxies it from the
        pod's node, to the container's end; the caller reads it in chunks and closes it
        when it will (`LogStream.close` from another thread ends a blocked read)."""
        call = Call("get", PODS_LOG, self.namespace, name)
        query = {"follow": "true", "timestamps": "true"}
        if container:
            query["container"] = container
        if since_time:
            query["sinceTime"] = since_time
        path = PODS.path(self.namespace, name) + "/log?" + urlencode(sorted(query.items()))
        self.requests += 1
        conn = self._connection(self.timeout)
        try:
            conn.request("GET", self._prefix + path, headers={
                **self._headers(None), "Accept": "*/*"})
            resp = conn.getresponse()
        except (OSError, http.client.HTTPException) as exc:
            conn.close()
            raise self._unanswered(call, exc, self.timeout) from None
        if resp.status >= 400:
            payload = resp.read(MAX_BODY)
            conn.close()
            raise error_for(call, resp.status, payload, resp.getheader("Retry-After"))
        if conn.sock is not None:
            conn.sock.settimeout(None)  # a quiet container is no error; close() ends it
        return LogStream(conn, resp)

    def _events(self, call: Call, resp: http.client.HTTPResponse,
                idle: float) -> Iterator[dict[str, Any]]:
        while True:
            try:
                line = resp.readline(MAX_EVENT + 1)
            except (OSError, http.client.HTTPException) as exc:
                raise self._unanswered(call, exc, idle) from None
            if not line:
                return
            if not line.endswith(b"\n"):
                if len(line) > MAX_EVENT:
                    raise KubeError(f"{call.describe()}: a watch event is larger than "
                                    f"{MAX_EVENT >> 20} MiB")
                raise self._unanswered(call, ConnectionResetError(
                    "the watch stream ended inside an event"), idle)
            if not line.strip():
                continue
            try:
                event = json.loads(line.decode("utf-8"))
            except (UnicodeDecodeError, ValueError):
                raise KubeError(f"{call.describe()}: a watch event is not JSON") from None
            if not isinstance(event, dict) or not isinstance(event.get("object"), dict):
                raise KubeError(f"{call.describe()}: a watch event without an object")
            if event.get("type") == "ERROR":
                status = event["object"]
                raise error_for(call, int(status.get("code") or 500),
                                json.dumps(status).encode())
            yield event


class LogStream:
    """An open pod log: `read` returns the next bytes (b"" at its end); `close` may be
    called from another thread to end it (the blocked `read` then raises or returns b"")."""

    def __init__(self, conn: http.client.HTTPConnection,
                 resp: http.client.HTTPResponse) -> None:
        self._conn, self._resp = conn, resp
        self.closed = False

    def read(self) -> bytes:
        try:
            return self._resp.read1(65536)
        except AttributeError:
            # `close` from another thread closed the response under this read: http.client
            # then calls `close()` on the `fp` it has just set to None (CPython 3.11
            # Lib/http/client.py `_read_next_chunk_size` -> `_close_conn`). Closed by us: the
            # end of this stream, as a read after `close` is.
            if self.closed:
                return b""
            raise

    def close(self) -> None:
        self.closed = True
        sock = self._conn.sock
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
        self._conn.close()


def _selectors(label: Optional[str], fields: Optional[str]) -> dict[str, str]:
    out = {}
    if label:
        out["labelSelector"] = label
    if fields:
        out["fieldSelector"] = fields
    return out


def _selected_name(fields: Optional[str]) -> Optional[str]:
    """The name a list or watch is narrowed to, as the API server reads it for RBAC
    (k8s.io/apiserver v0.30.2 pkg/endpoints/request/requestinfo.go:233: an exact
    `metadata.name` field selector makes the request's name that name)."""
    if not fields:
        return None
    for term in fields.split(","):
        key, sep, value = term.partition("=")
        if key.strip() == "metadata.name" and sep:
            return value[1:].strip() if value.startswith("=") else value.strip()
    return None
