"""Where the API server is and how the agent proves who it is.

In a pod (`in_cluster`): the ServiceAccount's files that the kubelet mounts at
/var/run/secrets/kubernetes.io/serviceaccount/{token,ca.crt,namespace}, and the Service address
the kubelet puts in every container's environment, KUBERNETES_SERVICE_HOST/PORT
(https://kubernetes.io/docs/tasks/run-application/access-api-from-pod/). The token file is
read again when it changes: a projected token is rotated by the kubelet before it expires.

Outside (`from_kubeconfig`, for `doctor`, `report`, `status`, `clean` run by an operator): a
kubeconfig (https://kubernetes.io/docs/concepts/configuration/organize-cluster-access-kubeconfig/),
`--kubeconfig`, else every file of $KUBECONFIG merged (the first to set a name wins, as
kubectl merges), else ~/.kube/config. Only what the agent can honour is read: the current
context's server, its CA (`certificate-authority(-data)`), and a token (`token`,
`tokenFile`) or a client certificate (`client-certificate(-data)`, `client-key(-data)`).
Refused, naming the entry: `insecure-skip-tls-verify` (the rendezvous takes the rank table
from the API server; an unverified server could hand every pod a forged one), and `exec`,
`auth-provider` and basic-auth users (plugins the agent does not run; a token from `kubectl
create token` or a certificate works).

A kubeconfig is YAML, and `kubectl config view --raw --flatten -o json` writes the same as
JSON. JSON is read with the standard library; YAML needs PyYAML, imported only here and only
for a file that is not JSON — never on a pod's path (tests/pod_imports.json).
"""

from __future__ import annotations

import base64
import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from ascend_node.errors import ConfigError

SERVICE_ACCOUNT_DIR = Path("/var/run/secrets/kubernetes.io/serviceaccount")
_MAX_FILE = 1 << 20  # a token, CA or kubeconfig larger than 1 MiB is not one


@dataclass(frozen=True)
class Endpoint:
    """An API server and the agent's credentials for it; `source` names where they came
    from (for messages: "the ServiceAccount in /var/run/...", "kubeconfig ~/.kube/config")."""

    server: str                      # https://host:port, no trailing slash
    namespace: str
    source: str
    ca_file: Optional[str] = None    # PEM file; or ca_data
    ca_data: Optional[str] = None    # PEM text
    token: Optional[str] = None      # a fixed bearer token; or token_file (re-read on change)
    token_file: Optional[str] = None
    cert_file: Optional[str] = None  # client certificate and key: files, or PEM text
    key_file: Optional[str] = None
    cert_data: Optional[str] = None
    key_data: Optional[str] = None
    extra: dict[str, str] = field(default_factory=dict)


def _read(path: Path, what: str, hint: str) -> str:
    try:
        with open(path, "rb") as fh:
            data = fh.read(_MAX_FILE + 1)
    except OSError as exc:
        raise ConfigError(f"cannot read {what} {path}: {exc.strerror or exc}", hint) from None
    if len(data) > _MAX_FILE:
        raise ConfigError(f"{what} {path} is larger than 1 MiB", hint)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise ConfigError(f"{what} {path} is not UTF-8 text", hint) from None


def _host_port(host: str, port: str) -> str:
    return f"[{host}]:{port}" if ":" in host and not host.startswith("[") else f"{host}:{port}"


def in_cluster(env: Mapping[str, str], directory: Path = SERVICE_ACCOUNT_DIR) -> Endpoint:
    """The pod's own ServiceAccount. Refused with the missing piece named when the pod has
    no token (automountServiceAccountToken: false) or no Service address."""
    host = env.get("KUBERNETES_SERVICE_HOST", "").strip()
    port = env.get("KUBERNETES_SERVICE_PORT", "").strip()
    hint = ("run in a pod with a ServiceAccount token mounted (automountServiceAccountToken "
            "not false); outside a pod, use a kubeconfig")
    if not host or not port:
        raise ConfigError("KUBERNETES_SERVICE_HOST/KUBERNETES_SERVICE_PORT are not set: "
                          "not in a Kubernetes pod", hint)
    if not port.isdigit() or not 0 < int(port) < 65536:
        raise ConfigError(f"KUBERNETES_SERVICE_PORT={port!r} is not a port number", hint)
    token_file = directory / "token"
    if not _read(token_file, "ServiceAccount token", hint).strip():
        raise ConfigError(f"ServiceAccount token {token_file} is empty", hint)
    ca_file = directory / "ca.crt"
    _read(ca_file, "ServiceAccount CA", hint)
    namespace = _read(directory / "namespace", "ServiceAccount namespace", hint).strip()
    if not namespace:
        raise ConfigError(f"ServiceAccount namespace {directory / 'namespace'} is empty", hint)
    return Endpoint(server=f"https://{_host_port(host, port)}", namespace=namespace,
                    source=f"the ServiceAccount in {directory}", ca_file=str(ca_file),
                    token_file=str(token_file))


def kubeconfig_paths(flag: Optional[str], env: Mapping[str, str],
                     home: Optional[Path] = None) -> list[Path]:
    """`--kubeconfig`, else the files of $KUBECONFIG (os.pathsep-separated, empty parts
    skipped), else ~/.kube/config."""
    if flag:
        return [Path(flag).expanduser()]
    listed = [Path(p).expanduser() for p in env.get("KUBECONFIG", "").split(os.pathsep) if p]
    if listed:
        return listed
    return [(home or Path.home()) / ".kube" / "config"]


def parse_kubeconfig_text(text: str, path: str) -> dict[str, Any]:
    """A kubeconfig's document: JSON with the standard library, YAML with PyYAML (imported
    here, lazily). Anything but a mapping is refused naming the file."""
    hint = "a kubeconfig as kubectl writes it (kubectl config view --raw --flatten -o json)"
    try:
        doc = json.loads(text)
    except ValueError:
        try:
            import yaml
        except ImportError:
            raise ConfigError(f"kubeconfig {path} is not JSON and PyYAML is not installed "
                              "to read it as YAML",
                              "pip install pyyaml, or convert it: kubectl config view --raw "
                              "--flatten -o json > FILE") from None
        loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
        try:
            doc = yaml.load(text, Loader=loader)
        except yaml.YAMLError as exc:
            line = getattr(getattr(exc, "problem_mark", None), "line", None)
            where = f" (line {line + 1})" if line is not None else ""
            raise ConfigError(f"kubeconfig {path} is neither JSON nor valid YAML{where}",
                              hint) from None
    if not isinstance(doc, dict):
        raise ConfigError(f"kubeconfig {path} is not a mapping of clusters, users, contexts",
                          hint)
    return doc


def merge_kubeconfigs(docs: list[tuple[str, dict[str, Any]]]) -> dict[str, Any]:
    """kubectl's merge of several files: the first `current-context` set wins, and for
    clusters, users and contexts the first entry of each name wins."""
    out: dict[str, Any] = {"clusters": [], "users": [], "contexts": []}
    seen: dict[str, set[str]] = {k: set() for k in out}
    for path, doc in docs:
        if "current-context" not in out and doc.get("current-context"):
            out["current-context"] = doc["current-context"]
        for key in ("clusters", "users", "contexts"):
            entries = doc.get(key) or []
            if not isinstance(entries, list):
                raise ConfigError(f"kubeconfig {path}: `{key}` is not a list")
            for entry in entries:
                if not isinstance(entry, dict) or not isinstance(entry.get("name"), str):
                    raise ConfigError(f"kubeconfig {path}: an entry of `{key}` has no name")
                if entry["name"] not in seen[key]:
                    seen[key].add(entry["name"])
                    out[key].append({**entry, "_file": path})
    return out


def _named(config: dict[str, Any], key: str, name: str, what: str) -> dict[str, Any]:
    for entry in config[key]:
        if entry["name"] == name:
            body = entry.get(what)
            if not isinstance(body, dict):
                raise ConfigError(f"kubeconfig {entry['_file']}: {what} {name!r} is empty")
            return {**body, "_file": entry["_file"]}
    raise ConfigError(f"kubeconfig: {what} {name!r} is not defined",
                      "kubectl config get-contexts lists what is")


def _relative(base: str, value: Any, where: str) -> str:
    """A file named in a kubeconfig: relative paths are relative to that kubeconfig."""
    if not isinstance(value, str) or not value:
        raise ConfigError(f"kubeconfig {base}: {where} is not a path")
    p = Path(value).expanduser()
    return str(p if p.is_absolute() else Path(base).parent / p)


def _pem(value: Any, where: str, path: str) -> str:
    try:
        return base64.b64decode(str(value), validate=True).decode("ascii")
    except (ValueError, UnicodeDecodeError):
        raise ConfigError(f"kubeconfig {path}: {where} is not base64 of a PEM text") from None


def endpoint_from_kubeconfig(config: dict[str, Any], context: Optional[str] = None,
                             namespace: Optional[str] = None) -> Endpoint:
    """The Endpoint of `context` (else the current context) of a merged kubeconfig."""
    name = context or config.get("current-context")
    if not name:
        raise ConfigError("kubeconfig: no current-context and no --context",
                          "kubectl config use-context NAME")
    ctx = _named(config, "contexts", str(name), "context")
    cluster = _named(config, "clusters", str(ctx.get("cluster", "")), "cluster")
    user = _named(config, "users", str(ctx.get("user", "")), "user")
    cpath, upath = cluster["_file"], user["_file"]
    server = cluster.get("server")
    if not isinstance(server, str) or not server.startswith("https://"):
        raise ConfigError(f"kubeconfig {cpath}: cluster {ctx.get('cluster')!r} has server "
                          f"{server!r}, not an https:// URL",
                          "the agent talks to the API server over TLS only")
    if cluster.get("insecure-skip-tls-verify"):
        raise ConfigError(
            f"kubeconfig {cpath}: cluster {ctx.get('cluster')!r} sets insecure-skip-tls-verify",
            "the agent refuses an API server it cannot verify (a forged server could hand out "
            "a forged rank table): set certificate-authority or certificate-authority-data")
    for plugin in ("exec", "auth-provider", "username", "password"):
        if plugin in user:
            raise ConfigError(
                f"kubeconfig {upath}: user {ctx.get('user')!r} authenticates with `{plugin}`, "
                "which the agent does not run",
                "use a token (kubectl create token SERVICEACCOUNT) or a client certificate")
    ep: dict[str, Any] = {"server": server.rstrip("/"),
                          "namespace": namespace or ctx.get("namespace") or "default",
                          "source": f"kubeconfig {cpath} (context {name!r})"}
    if "certificate-authority-data" in cluster:
        ep["ca_data"] = _pem(cluster["certificate-authority-data"],
                             "certificate-authority-data", cpath)
    elif "certificate-authority" in cluster:
        ep["ca_file"] = _relative(cpath, cluster["certificate-authority"],
                                  "certificate-authority")
    if "token" in user:
        ep["token"] = str(user["token"])
    elif "tokenFile" in user:
        ep["token_file"] = _relative(upath, user["tokenFile"], "tokenFile")
    if "client-certificate-data" in user:
        ep["cert_data"] = _pem(user["client-certificate-data"], "client-certificate-data", upath)
    elif "client-certificate" in user:
        ep["cert_file"] = _relative(upath, user["client-certificate"], "client-certificate")
    if "client-key-data" in user:
        ep["key_data"] = _pem(user["client-key-data"], "client-key-data", upath)
    elif "client-key" in user:
        ep["key_file"] = _relative(upath, user["client-key"], "client-key")
    has_cert = "cert_data" in ep or "cert_file" in ep
    has_key = "key_data" in ep or "key_file" in ep
    if has_cert != has_key:
        raise ConfigError(f"kubeconfig {upath}: user {ctx.get('user')!r} has a client "
                          "certificate without its key, or a key without its certificate")
    if not has_cert and "token" not in ep and "token_file" not in ep:
        raise ConfigError(f"kubeconfig {upath}: user {ctx.get('user')!r} has no token and no "
                          "client certificate", "kubectl create token SERVICEACCOUNT")
    return Endpoint(**ep)


def from_kubeconfig(flag: Optional[str], env: Mapping[str, str], context: Optional[str] = None,
                    namespace: Optional[str] = None, home: Optional[Path] = None) -> Endpoint:
    """The operator's API server from a kubeconfig (see the module's docstring)."""
    paths = kubeconfig_paths(flag, env, home)
    docs = []
    hint = "set KUBECONFIG, or put the kubeconfig at ~/.kube/config"
    for path in paths:
        if not path.exists() and not flag and len(paths) > 1:
            continue  # kubectl skips a missing file of a $KUBECONFIG list
        docs.append((str(path), parse_kubeconfig_text(_read(path, "kubeconfig", hint),
                                                      str(path))))
    if not docs:
        raise ConfigError(f"no kubeconfig found in {os.pathsep.join(map(str, paths))}", hint)
    return endpoint_from_kubeconfig(merge_kubeconfigs(docs), context, namespace)
