"""The Kubernetes API client (ascend_node/kube/client.py) against a real loopback HTTPS server.

What is real here: TLS verified against a CA made by openssl, sockets, HTTP/1.1 keep-alive and
chunked streams, time-outs, and answers in the API server's own shapes (`Status` objects as
k8s.io/apimachinery v0.30.2 builds them; the store answers 409 AlreadyExists / 409 Conflict as
the registry does; tests/kube_tls.py cites each). What is not: the API server itself. Against a
real kube-apiserver v1.30.2: tests/test_kube_apiserver.py (RBAC's own 403, the registry's 409s,
etcd's resourceVersions under concurrent writers, the 1 MiB limit, a watch by label); an API
server restarted mid-call and real ServiceAccount tokens in pods come with the control-plane
bed of issue 37 (`scripts/kube-bed`, marker `kube`), and are not claimed here.
"""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from ascend_node.kube.client import Client
from ascend_node.kube.config import Endpoint
from ascend_node.kube.errors import (
    AlreadyExists,
    ApiUnanswered,
    Conflict,
    Forbidden,
    Gone,
    Invalid,
    KubeError,
    NotFound,
    Unauthorized,
)
from ascend_node.kube.resources import CONFIGMAPS, PODS
from tests.kube_tls import Pki, Request, Store, free_port, make_pki, serving, status

NS = "team-a"
SA_USER = "system:serviceaccount:team-a:ascend-node"


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


def client(url: str, pki: Pki, tmp: Path, token: str = "tok-1", timeout: float = 10.0) -> Client:
    token_file = tmp / "token"
    token_file.write_text(token)
    return Client(Endpoint(server=url, namespace=NS, source="test", ca_file=str(pki.ca),
                           token_file=str(token_file)), timeout=timeout)


def cm(name: str, rv: str = "", data: Any = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": NS}
    if rv:
        meta["resourceVersion"] = rv
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": data or {}}


def test_a_get_carries_the_token_and_reads_it_again_when_it_is_rotated(pki: Pki,
                                                                        tmp_path: Path) -> None:
    """The kubelet rotates a projected ServiceAccount token in place; a client that kept the
    first one would get 401s once it expires."""
    with serving(pki, lambda r: r.answer(200, cm("x", "7"))) as srv:
        c = client(srv.url, pki, tmp_path)
        assert c.get(CONFIGMAPS, "x")["metadata"]["resourceVersion"] == "7"
        time.sleep(0.05)
        (tmp_path / "token").write_text("tok-2\n")
        c.get(CONFIGMAPS, "x")
    (m1, p1, h1, _, _), (_, _, h2, _, _) = srv.seen
    assert (m1, p1) == ("GET", f"/api/v1/namespaces/{NS}/configmaps/x")
    assert h1["Authorization"] == "Bearer tok-1"
    assert h2["Authorization"] == "Bearer tok-2"


def test_a_403_is_one_line_naming_verb_resource_namespace_and_the_rule(pki: Pki,
                                                                       tmp_path: Path) -> None:
    """RBAC's refusal as the API server words it (k8s.io/apiserver v0.30.2
    endpoints/handlers/responsewriters/errors.go:51 inside errors.go NewForbidden)."""
    msg = (f'configmaps is forbidden: User "{SA_USER}" cannot create resource "configmaps" '
           f'in API group "" in the namespace "{NS}"')
    with serving(pki, lambda r: r.answer(403, status(403, "Forbidden", msg))) as srv, \
            pytest.raises(Forbidden) as info:
        client(srv.url, pki, tmp_path).create(CONFIGMAPS, cm("job-slot-0"))
    err = info.value
    assert err.exit_code == 1
    line = str(err)
    assert "\n" not in line
    assert 'create configmaps "job-slot-0" in namespace "team-a"' in line
    assert SA_USER in line
    assert 'apiGroups: [""], resources: ["configmaps"], verbs: ["create"]' in line
    assert "--verb=create --resource=configmaps" in err.hint


@pytest.mark.parametrize(("code", "reason", "expected"), [
    (409, "AlreadyExists", AlreadyExists),
    (409, "Conflict", Conflict),
    (404, "NotFound", NotFound),
    (401, "Unauthorized", Unauthorized),
    (410, "Expired", Gone),
    (422, "Invalid", Invalid),
    (500, "InternalError", ApiUnanswered),
    (429, "TooManyRequests", ApiUnanswered),
])
def test_each_answer_is_its_own_exception(pki: Pki, tmp_path: Path, code: int, reason: str,
                                          expected: type[KubeError]) -> None:
    """409 means two opposite things: a taken name for create-if-absent, a moved
    resourceVersion for compare-and-set — the reason tells them apart, not the code."""
    body = status(code, reason, f"{reason} happened", "x")
    with serving(pki, lambda r: r.answer(code, body, headers={"Retry-After": "2"})) as srv, \
            pytest.raises(KubeError) as info:
        client(srv.url, pki, tmp_path).get(CONFIGMAPS, "x")
    assert type(info.value) is expected
    assert info.value.code == code
    assert info.value.reason == reason
    if expected is ApiUnanswered:
        assert info.value.exit_code == 4
        assert info.value.retry_after == 2.0  # type: ignore[attr-defined]


def test_a_422_names_the_fields_the_api_server_refused(pki: Pki, tmp_path: Path) -> None:
    body = status(422, "Invalid", 'ConfigMap "x" is invalid: []: Too long', "x",
                  causes=[{"reason": "FieldValueTooLong", "message": "Too long: must have at "
                           "most 1048576 bytes", "field": "[]"}])
    with serving(pki, lambda r: r.answer(422, body)) as srv, pytest.raises(Invalid) as info:
        client(srv.url, pki, tmp_path).create(CONFIGMAPS, cm("x"))
    assert "[]: Too long: must have at most 1048576 bytes" in str(info.value)


def test_compare_and_set_loses_no_update(pki: Pki, tmp_path: Path) -> None:
    """Two writers read the same version and both write: exactly one wins, the other gets
    Conflict, re-reads, and its write lands on top — neither update is lost. (Against the
    registry's documented answers here; against etcd behind kube-apiserver on the bed.)"""
    store = Store()
    with serving(pki, store) as srv:
        a, b = client(srv.url, pki, tmp_path), client(srv.url, pki, tmp_path)
        a.create(CONFIGMAPS, cm("slots", data={}))
        with pytest.raises(AlreadyExists):
            b.create(CONFIGMAPS, cm("slots", data={}))
        seen_a, seen_b = a.get(CONFIGMAPS, "slots"), b.get(CONFIGMAPS, "slots")
        seen_a["data"]["a"] = "1"
        a.replace(CONFIGMAPS, seen_a)
        seen_b["data"]["b"] = "1"
        with pytest.raises(Conflict):
            b.replace(CONFIGMAPS, seen_b)
        again = b.get(CONFIGMAPS, "slots")
        again["data"]["b"] = "1"
        b.replace(CONFIGMAPS, again)
        assert a.get(CONFIGMAPS, "slots")["data"] == {"a": "1", "b": "1"}
        with pytest.raises(ValueError, match="resourceVersion"):
            a.replace(CONFIGMAPS, cm("slots", data={"blind": "write"}))


def test_a_server_that_does_not_answer_ends_the_call_at_the_time_out(pki: Pki,
                                                                     tmp_path: Path) -> None:
    """An API server that accepts and then says nothing must not hang the agent."""
    def hang(r: Request) -> None:
        r.server.stop.wait(60)

    with serving(pki, hang) as srv:
        t0 = time.monotonic()
        with pytest.raises(ApiUnanswered) as info:
            client(srv.url, pki, tmp_path, timeout=0.5).get(PODS, "me")
        took = time.monotonic() - t0
    assert took < 30  # 0.5 s asked; generous for a loaded machine
    assert info.value.exit_code == 4
    assert "does not answer" in str(info.value) and "no answer within 0.5 s" in str(info.value)
    assert 'get pods "me" in namespace "team-a"' in str(info.value)


def test_nothing_listening_is_unanswered_naming_the_server(pki: Pki, tmp_path: Path) -> None:
    url = f"https://127.0.0.1:{free_port()}"
    with pytest.raises(ApiUnanswered) as info:
        client(url, pki, tmp_path).get(CONFIGMAPS, "x")
    assert url in str(info.value) and "refused" in str(info.value).lower()


def test_a_server_with_another_ca_is_refused_not_retried(pki: Pki, tmp_path: Path) -> None:
    other = make_pki(tmp_path / "other", "other")
    with serving(other, lambda r: r.answer(200, {})) as srv, pytest.raises(KubeError) as info:
        client(srv.url, pki, tmp_path).get(CONFIGMAPS, "x")
    assert type(info.value) is KubeError and info.value.exit_code == 1
    assert "certificate" in str(info.value)
    assert srv.seen == []


def test_a_kept_alive_connection_the_server_closed_is_replaced(pki: Pki, tmp_path: Path) -> None:
    """The server drops an idle keep-alive connection without saying so; the next call finds
    it only when it writes, and is sent once more on a new connection."""
    with serving(pki, lambda r: r.answer(200, cm("x", "1"), close=True)) as srv:
        c = client(srv.url, pki, tmp_path)
        c.get(CONFIGMAPS, "x")
        time.sleep(0.2)
        assert c.get(CONFIGMAPS, "x")["metadata"]["name"] == "x"
    assert len(srv.seen) == 2
    assert srv.seen[0][4] != srv.seen[1][4]  # two connections (client ports)


def test_connections_are_kept_alive(pki: Pki, tmp_path: Path) -> None:
    with serving(pki, lambda r: r.answer(200, cm("x", "1"))) as srv:
        c = client(srv.url, pki, tmp_path)
        for _ in range(3):
            c.get(CONFIGMAPS, "x")
    assert len({port for *_, port in srv.seen}) == 1


def _events(*events: dict[str, Any]) -> bytes:
    return b"".join(json.dumps(e).encode() + b"\n" for e in events)


def test_a_watch_yields_each_event_of_a_chunked_stream_and_ends_with_it(pki: Pki,
                                                                        tmp_path: Path) -> None:
    """Events split across chunks and several events in one chunk, as a stream arrives."""
    added = {"type": "ADDED", "object": cm("a", "5", {"k": "v"})}
    modified = {"type": "MODIFIED", "object": cm("a", "6", {"k": "w"})}
    bookmark = {"type": "BOOKMARK", "object": {"kind": "ConfigMap", "apiVersion": "v1",
                                               "metadata": {"resourceVersion": "9"}}}
    stream = _events(added, modified, bookmark)

    def watch(r: Request) -> None:
        r.start_chunked()
        r.chunk(stream[:7])
        time.sleep(0.05)
        r.chunk(stream[7:len(stream) - 20])
        time.sleep(0.05)
        r.chunk(stream[len(stream) - 20:])
        r.end_chunked()

    with serving(pki, watch) as srv:
        got = list(client(srv.url, pki, tmp_path).watch(
            CONFIGMAPS, resource_version="4", label_selector="a=b", timeout_seconds=30))
    assert got == [added, modified, bookmark]
    path = srv.seen[0][1]
    assert path.startswith(f"/api/v1/namespaces/{NS}/configmaps?")
    for part in ("watch=true", "resourceVersion=4", "timeoutSeconds=30", "labelSelector=a%3Db",
                 "allowWatchBookmarks=true"):
        assert part in path


def test_a_watch_error_event_410_is_gone(pki: Pki, tmp_path: Path) -> None:
    """A watch from a compacted resourceVersion: the server sends an ERROR event whose
    object is a Status with code 410; the caller must list again."""
    err = {"type": "ERROR", "object": status(410, "Expired",
                                             "too old resource version: 4 (120)")}

    def watch(r: Request) -> None:
        r.start_chunked()
        r.chunk(_events(err))
        r.end_chunked()

    with serving(pki, watch) as srv, pytest.raises(Gone):
        list(client(srv.url, pki, tmp_path).watch(CONFIGMAPS, resource_version="4"))


def test_a_silent_watch_stream_ends_at_its_idle_time_out(pki: Pki, tmp_path: Path) -> None:
    first = {"type": "ADDED", "object": cm("a", "5")}

    def watch(r: Request) -> None:
        r.start_chunked()
        r.chunk(_events(first))
        r.server.stop.wait(60)

    with serving(pki, watch) as srv:
        got: list[dict[str, Any]] = []
        t0 = time.monotonic()
        with pytest.raises(ApiUnanswered, match=r"no answer within 0\.5 s"):
            for event in client(srv.url, pki, tmp_path).watch(CONFIGMAPS, idle_timeout=0.5):
                got.append(event)
    assert got == [first]
    assert time.monotonic() - t0 < 30


def test_a_watch_cut_inside_an_event_is_unanswered_not_an_end(pki: Pki, tmp_path: Path) -> None:
    """A stream that stops mid-event (the API server restarted) is not a clean end: the
    half event is never handed on, and the caller hears that the server went away."""
    def watch(r: Request) -> None:
        r.start_chunked()
        r.chunk(_events({"type": "ADDED", "object": cm("a", "5")}) + b'{"type":"MODI')
        r.end_chunked()

    with serving(pki, watch) as srv:
        got: list[dict[str, Any]] = []
        with pytest.raises(ApiUnanswered, match="inside an event"):
            for event in client(srv.url, pki, tmp_path).watch(CONFIGMAPS):
                got.append(event)
    assert [e["type"] for e in got] == ["ADDED"]


def test_a_watch_refused_by_rbac_names_the_watch_verb(pki: Pki, tmp_path: Path) -> None:
    msg = (f'configmaps is forbidden: User "{SA_USER}" cannot watch resource "configmaps" '
           f'in API group "" in the namespace "{NS}"')
    with serving(pki, lambda r: r.answer(403, status(403, "Forbidden", msg))) as srv, \
            pytest.raises(Forbidden, match=r'verbs: \["watch"\]'):
        list(client(srv.url, pki, tmp_path).watch(CONFIGMAPS))


def test_a_delete_with_a_precondition_sends_it(pki: Pki, tmp_path: Path) -> None:
    with serving(pki, lambda r: r.answer(200, status(200, "", ""))) as srv:
        client(srv.url, pki, tmp_path).delete(CONFIGMAPS, "x", resource_version="12")
    method, path, _, body, _ = srv.seen[0]
    assert (method, path) == ("DELETE", f"/api/v1/namespaces/{NS}/configmaps/x")
    assert json.loads(body)["preconditions"] == {"resourceVersion": "12"}


def test_concurrent_clients_each_get_their_answer(pki: Pki, tmp_path: Path) -> None:
    """One client per thread (a client is not shared): answers never cross."""
    def echo(r: Request) -> None:
        r.answer(200, cm(r.path.rsplit("/", 1)[1], "1"))

    out: dict[str, str] = {}
    with serving(pki, echo) as srv:
        def one(name: str) -> None:
            out[name] = client(srv.url, pki, tmp_path).get(CONFIGMAPS, name)["metadata"]["name"]
        threads = [threading.Thread(target=one, args=(f"n{i}",)) for i in range(6)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
    assert out == {f"n{i}": f"n{i}" for i in range(6)}


def test_a_watch_of_one_object_is_refused_naming_it(pki: Pki, tmp_path: Path) -> None:
    """A watch narrowed by `fieldSelector=metadata.name=<name>` is authorized by that name
    (k8s.io/apiserver v0.30.2 pkg/endpoints/request/requestinfo.go:233), so a Role's
    `resourceNames` decide it; the 403 line names the object."""
    with serving(pki, lambda r: r.answer(403, status(403, "Forbidden", "no"))) as srv, \
            pytest.raises(Forbidden) as info:
        list(client(srv.url, pki, tmp_path).watch(
            CONFIGMAPS, field_selector="metadata.name==job-rdzv-attempt"))
    assert 'watch configmaps "job-rdzv-attempt" in namespace "team-a"' in str(info.value)
    assert "fieldSelector=metadata.name%3D%3Djob-rdzv-attempt" in srv.seen[0][1]
