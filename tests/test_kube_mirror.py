"""The list-then-watch mirror (ascend_node/kube/mirror.py) against a real loopback HTTPS server
whose answers follow the API's documented recipe (a list carries the collection's
resourceVersion; a watch from it sends what changed after it, BOOKMARKs, and ends after
`timeoutSeconds`; a version too old is a 410, as an answer or as an ERROR event). The same
against a real kube-apiserver (a compacted version, a restarted server) comes with the
control-plane bed (issue 37, marker `kube`)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest

from ascend_node.kube.client import Client
from ascend_node.kube.config import Endpoint
from ascend_node.kube.errors import Forbidden
from ascend_node.kube.mirror import Change, Mirror
from ascend_node.kube.resources import CONFIGMAPS
from tests.kube_tls import Pki, Request, make_pki, serving, status

NS = "team-a"


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


def cm(name: str, rv: str, **data: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": name, "namespace": NS, "resourceVersion": rv}, "data": data}


def ev(kind: str, obj: dict[str, Any]) -> bytes:
    return json.dumps({"type": kind, "object": obj}).encode() + b"\n"


class Script:
    """Answers lists and watches in order; records each request's query."""

    def __init__(self, lists: list[dict[str, Any]], watches: list[Any]) -> None:
        self.lists = lists
        self.watches = watches
        self.queries: list[dict[str, str]] = []

    def __call__(self, req: Request) -> None:
        query = {k: v[0] for k, v in parse_qs(urlsplit(req.path).query).items()}
        self.queries.append(query)
        if query.get("watch") != "true":
            return req.answer(200, self.lists.pop(0))
        script = self.watches.pop(0) if self.watches else []
        if isinstance(script, tuple):  # (code, Status): the watch refused outright
            return req.answer(*script)
        req.start_chunked()
        for chunk in script:
            req.chunk(chunk)
        req.end_chunked()


def mirror(url: str, pki: Pki, tmp: Path) -> Mirror:
    (tmp / "token").write_text("t")
    client = Client(Endpoint(server=url, namespace=NS, source="test", ca_file=str(pki.ca),
                             token_file=str(tmp / "token")))
    return Mirror(client, CONFIGMAPS, label_selector="ascend-node.io/object=node", tick=5)


def take(m: Mirror, n: int) -> list[Change]:
    out = []
    for change in m.changes():
        out.append(change)
        if len(out) == n:
            break
    return out


def test_list_then_watch_from_its_version_then_watch_again_from_the_last_seen(
        pki: Pki, tmp_path: Path) -> None:
    listed = {"kind": "ConfigMapList", "apiVersion": "v1", "metadata": {"resourceVersion": "10"},
              "items": [cm("a", "8", v="1"), cm("b", "9", v="1")]}
    script = Script([listed], [
        [ev("MODIFIED", cm("a", "11", v="2")), ev("ADDED", cm("c", "12", v="1"))],
        [ev("BOOKMARK", {"kind": "ConfigMap", "apiVersion": "v1",
                         "metadata": {"resourceVersion": "20"}}),
         ev("DELETED", cm("b", "21", v="1"))],
    ])
    with serving(pki, script) as srv:
        m = mirror(srv.url, pki, tmp_path)
        got = take(m, 6)
    assert got == [Change("LISTED"), Change("MODIFIED", "a"), Change("ADDED", "c"),
                   Change("TICK"), Change("DELETED", "b"), Change("TICK")]
    assert sorted(m.objects) == ["a", "c"] and m.objects["a"]["data"] == {"v": "2"}
    assert m.resource_version == "21"
    first_watch, second_watch = script.queries[1], script.queries[2]
    assert "watch" not in script.queries[0]
    assert script.queries[0]["labelSelector"] == "ascend-node.io/object=node"
    assert (first_watch["resourceVersion"], first_watch["timeoutSeconds"]) == ("10", "5")
    assert second_watch["resourceVersion"] == "12"  # the last event's version
    assert (m.lists, m.watches) == (1, 2)


@pytest.mark.parametrize("how", ["error event", "answer"])
def test_a_version_too_old_lists_again(pki: Pki, tmp_path: Path, how: str) -> None:
    """410 Gone as the watch's ERROR event, or as its answer: list again, say LISTED."""
    gone = status(410, "Expired", "too old resource version: 10 (50)")
    first = {"kind": "ConfigMapList", "metadata": {"resourceVersion": "10"},
             "items": [cm("a", "8")]}
    second = {"kind": "ConfigMapList", "metadata": {"resourceVersion": "60"},
              "items": [cm("a", "55"), cm("d", "58")]}
    watch = [ev("ERROR", gone)] if how == "error event" else (410, gone)
    script = Script([first, second], [watch, [ev("MODIFIED", cm("d", "61"))]])
    with serving(pki, script) as srv:
        m = mirror(srv.url, pki, tmp_path)
        got = take(m, 3)
    assert got == [Change("LISTED"), Change("LISTED"), Change("MODIFIED", "d")]
    assert sorted(m.objects) == ["a", "d"] and m.objects["a"]["metadata"]["resourceVersion"] == "55"
    assert script.queries[3]["resourceVersion"] == "60"


def test_a_forbidden_watch_reaches_the_caller(pki: Pki, tmp_path: Path) -> None:
    listed = {"kind": "ConfigMapList", "metadata": {"resourceVersion": "1"}, "items": []}
    refused = (403, status(403, "Forbidden", 'configmaps is forbidden: User "u" cannot watch '
                           'resource "configmaps" in API group "" in the namespace "team-a"'))
    with serving(pki, Script([listed], [refused])) as srv:
        m = mirror(srv.url, pki, tmp_path)
        changes = m.changes()
        assert next(changes) == Change("LISTED")
        with pytest.raises(Forbidden, match=r'verbs: \["watch"\]'):
            next(changes)
