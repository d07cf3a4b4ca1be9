"""A small Kubernetes API client on the standard library: HTTPS with the bed's CA and a client cert.

scripts/kube_bed.py uses it to set up the control plane (CRDs, webhook configurations, nodes,
leases) and the tests use it to apply what `ascend-node manifest` prints and to watch what
Volcano and the scheduler make of it. No kubectl and no client library: a test bed that needs
nothing but Python and the binaries scripts/kube-bed-build makes.

Paths follow the API's REST layout (https://kubernetes.io/docs/reference/using-api/api-concepts/):
core objects under /api/v1, the rest under /apis/<group>/<version>; a namespaced kind adds
/namespaces/<ns>. The API server accepts YAML request bodies (Content-Type application/yaml),
so documents are sent as written, never re-encoded by us.
"""

from __future__ import annotations

import json
import re
import ssl
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Optional

# Kind -> (plural, namespaced) for the kinds the bed and its tests handle. The API server's
# discovery (/apis/<group>/<version>) is the source of these names; listing them here keeps a
# request one round trip.
KINDS: dict[str, tuple[str, bool]] = {
    "Namespace": ("namespaces", False),
    "Node": ("nodes", False),
    "Pod": ("pods", True),
    "Service": ("services", True),
    "ConfigMap": ("configmaps", True),
    "Secret": ("secrets", True),
    "ServiceAccount": ("serviceaccounts", True),
    "PersistentVolume": ("persistentvolumes", False),
    "PersistentVolumeClaim": ("persistentvolumeclaims", True),
    "Event": ("events", True),
    "Lease": ("leases", True),
    "CustomResourceDefinition": ("customresourcedefinitions", False),
    "MutatingWebhookConfiguration": ("mutatingwebhookconfigurations", False),
    "ValidatingWebhookConfiguration": ("validatingwebhookconfigurations", False),
    "Job": ("jobs", True),  # batch.volcano.sh/v1alpha1 (and batch/v1: same plural)
    "PodGroup": ("podgroups", True),
    "Queue": ("queues", False),
    "Command": ("commands", True),
    "NetworkPolicy": ("networkpolicies", True),
    "Role": ("roles", True),
    "RoleBinding": ("rolebindings", True),
    "ClusterRole": ("clusterroles", False),
    "ClusterRoleBinding": ("clusterrolebindings", False),
}


class ApiError(Exception):
    """A non-2xx answer: the HTTP status and the API's Status message."""

    def __init__(self, status: int, method: str, path: str, body: str) -> None:
        try:
            message = json.loads(body).get("message", body)
        except ValueError:
            message = body
        super().__init__(f"{method} {path}: HTTP {status}: {message}")
        self.status = status
        self.message = message


def path_for(api_version: str, kind: str, namespace: Optional[str] = None,
             name: Optional[str] = None, subresource: Optional[str] = None) -> str:
    """/api/v1/namespaces/default/pods/x/status and the like."""
    plural, namespaced = KINDS[kind]
    base = "/api/v1" if api_version == "v1" else f"/apis/{api_version}"
    if namespaced:
        base += f"/namespaces/{namespace or 'default'}"
    base += f"/{plural}"
    if name:
        base += f"/{name}"
        if subresource:
            base += f"/{subresource}"
    return base


@dataclass(frozen=True)
class Credentials:
    """Where a client finds the server and proves who it is (files the bed wrote)."""

    server: str
    ca_file: Path
    cert_file: Path
    key_file: Path


class Kube:
    """One authenticated client; every method raises ApiError on a non-2xx answer."""

    def __init__(self, creds: Credentials, timeout: float = 30.0) -> None:
        self.creds = creds
        self.timeout = timeout
        ctx = ssl.create_default_context(cafile=str(creds.ca_file))
        ctx.load_cert_chain(str(creds.cert_file), str(creds.key_file))
        self._ctx = ctx

    def request(self, method: str, path: str, body: Optional[bytes] = None,
                content_type: str = "application/json") -> Any:
        req = urllib.request.Request(self.creds.server + path, data=body, method=method)
        req.add_header("Accept", "application/json")
        if body is not None:
            req.add_header("Content-Type", content_type)
        try:
            with urllib.request.urlopen(req, context=self._ctx, timeout=self.timeout) as resp:
                data = resp.read()
        except urllib.error.HTTPError as e:
            raise ApiError(e.code, method, path, e.read().decode("utf-8", "replace")) from None
        if not data:
            return None
        return json.loads(data) if data[:1] in (b"{", b"[") else data.decode()

    def watch(self, path: str, seconds: int = 60) -> Iterator[dict[str, Any]]:
        """The watch events of a collection (`{"type": "ADDED", "object": {...}}`), one JSON
        document per line as the API server streams them, until it ends the watch after
        `seconds`; `path` may carry a query (fieldSelector, resourceVersion)."""
        sep = "&" if "?" in path else "?"
        req = urllib.request.Request(
            f"{self.creds.server}{path}{sep}watch=1&timeoutSeconds={seconds}", method="GET")
        req.add_header("Accept", "application/json")
        try:
            resp = urllib.request.urlopen(req, context=self._ctx, timeout=seconds + 30)
        except urllib.error.HTTPError as e:
            raise ApiError(e.code, "GET", path, e.read().decode("utf-8", "replace")) from None
        with resp:
            for line in resp:
                if line.strip():
                    yield json.loads(line)

    def get(self, path: str) -> Any:
        return self.request("GET", path)

    def create(self, path: str, obj: dict[str, Any]) -> Any:
        return self.request("POST", path, json.dumps(obj).encode())

    def create_yaml(self, path: str, text: str) -> Any:
        return self.request("POST", path, text.encode(), "application/yaml")

    def merge_patch(self, path: str, patch: dict[str, Any]) -> Any:
        return self.request("PATCH", path, json.dumps(patch).encode(),
                            "application/merge-patch+json")

    def delete(self, path: str) -> Any:
        return self.request("DELETE", path)

    def ensure(self, path: str, obj: dict[str, Any]) -> Any:
        """Create, or leave as is when it already exists (409): `up` is idempotent."""
        try:
            return self.create(path, obj)
        except ApiError as e:
            if e.status != 409:
                raise
            return None

    def wait_for(self, what: str, probe: Callable[[], Any], timeout: float,
                 interval: float = 0.5) -> Any:
        """Poll `probe` until it returns something truthy; TimeoutError naming `what`."""
        deadline = time.monotonic() + timeout
        last: object = None
        while True:
            try:
                got = probe()
                if got:
                    return got
                last = got
            except (ApiError, OSError) as e:
                last = e
            if time.monotonic() > deadline:
                raise TimeoutError(f"{what}: not within {timeout:.0f} s (last: {last})")
            time.sleep(interval)


_TOP_FIELD = re.compile(r"^(apiVersion|kind):\s*(\S+)\s*$", re.M)
_METADATA_NAME = re.compile(r"^metadata:\s*\n(?:[ \t].*\n)*?[ \t]+name:\s*(\S+)\s*$", re.M)


def split_documents(text: str) -> list[str]:
    """A multi-document YAML stream, split at its `---` lines; empty documents dropped."""
    docs = re.split(r"^---[ \t]*$", text, flags=re.M)
    return [d for d in docs if re.search(r"^\w", d, re.M)]


def document_path(doc: str, namespace: Optional[str] = None) -> str:
    """The collection path a YAML document is POSTed to, from its top-level apiVersion/kind;
    a namespaced kind goes to `namespace` (the caller's: this reads no metadata.namespace,
    and the API server refuses a body whose namespace differs from the path's)."""
    fields = dict(_TOP_FIELD.findall(doc))
    if "apiVersion" not in fields or "kind" not in fields:
        raise ValueError("YAML document without a top-level apiVersion and kind")
    return path_for(fields["apiVersion"], fields["kind"], namespace)


def document_name(doc: str) -> str:
    m = _METADATA_NAME.search(doc)
    if not m:
        raise ValueError("YAML document without metadata.name")
    return m.group(1).strip("'\"")
