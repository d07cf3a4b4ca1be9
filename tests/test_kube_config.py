"""Where the agent finds the API server and its credentials (ascend_node/kube/config.py), and
what each refused input says. Pure parsing over files in a temporary directory; the real
ServiceAccount mount and kubeconfig of a cluster are exercised on the control-plane bed
(issue 37, marker `kube`)."""

from __future__ import annotations

import base64
import json
import sys
from pathlib import Path
from typing import Any

import pytest

from ascend_node.errors import ConfigError
from ascend_node.kube.config import (
    from_kubeconfig,
    in_cluster,
    kubeconfig_paths,
    parse_kubeconfig_text,
)

ENV = {"KUBERNETES_SERVICE_HOST": "10.96.0.1", "KUBERNETES_SERVICE_PORT": "443"}
PEM = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"


def sa_dir(tmp: Path, token: str = "tok", ns: str = "team-a\n", ca: bool = True) -> Path:
    d = tmp / "sa"
    d.mkdir()
    (d / "token").write_text(token)
    (d / "namespace").write_text(ns)
    if ca:
        (d / "ca.crt").write_text(PEM)
    return d


def test_in_cluster_reads_the_service_account_and_the_service_address(tmp_path: Path) -> None:
    ep = in_cluster(ENV, sa_dir(tmp_path))
    assert ep.server == "https://10.96.0.1:443"
    assert ep.namespace == "team-a"
    assert ep.token_file == str(tmp_path / "sa" / "token") and ep.token is None
    assert ep.ca_file == str(tmp_path / "sa" / "ca.crt")


def test_in_cluster_brackets_an_ipv6_service_address(tmp_path: Path) -> None:
    ep = in_cluster({"KUBERNETES_SERVICE_HOST": "fd00::1", "KUBERNETES_SERVICE_PORT": "443"},
                    sa_dir(tmp_path))
    assert ep.server == "https://[fd00::1]:443"


@pytest.mark.parametrize(("env", "sa", "expected"), [
    ({}, {}, "KUBERNETES_SERVICE_HOST/KUBERNETES_SERVICE_PORT are not set"),
    ({**ENV, "KUBERNETES_SERVICE_PORT": "https"}, {}, "KUBERNETES_SERVICE_PORT='https' is not"),
    (ENV, {"token": ""}, "token"),
    (ENV, {"ns": " \n"}, "namespace"),
    (ENV, {"ca": False}, "cannot read ServiceAccount CA"),
])
def test_in_cluster_refuses_naming_the_missing_piece(tmp_path: Path, env: dict[str, str],
                                                     sa: dict[str, Any], expected: str) -> None:
    with pytest.raises(ConfigError) as info:
        in_cluster(env, sa_dir(tmp_path, **sa))
    assert expected in str(info.value)
    assert "automountServiceAccountToken" in info.value.hint


def test_kubeconfig_paths_follow_kubectl(tmp_path: Path) -> None:
    assert kubeconfig_paths("/x/k", {"KUBECONFIG": "/a:/b"}) == [Path("/x/k")]
    assert kubeconfig_paths(None, {"KUBECONFIG": "/a::/b"}) == [Path("/a"), Path("/b")]
    assert kubeconfig_paths(None, {}, home=tmp_path) == [tmp_path / ".kube" / "config"]


def kubeconfig(**over: Any) -> dict[str, Any]:
    cluster = {"server": "https://127.0.0.1:6443", "certificate-authority": "ca.crt",
               **over.pop("cluster", {})}
    user = over.pop("user", {"token": "abc"})
    return {"apiVersion": "v1", "kind": "Config", "current-context": "bed",
            "clusters": [{"name": "bed", "cluster": cluster}],
            "users": [{"name": "agent", "user": user}],
            "contexts": [{"name": "bed", "context": {"cluster": "bed", "user": "agent",
                                                      "namespace": "team-a"}}], **over}


YAML = """apiVersion: v1
kind: Config
current-context: bed
clusters:
- name: bed
  cluster:
    server: https://127.0.0.1:6443
    certificate-authority-data: {ca}
users:
- name: agent
  user:
    client-certificate: certs/agent.crt
    client-key: certs/agent.key
contexts:
- name: bed
  context: {{cluster: bed, user: agent}}
"""


def test_a_json_kubeconfig_with_a_relative_ca_and_a_token(tmp_path: Path) -> None:
    path = tmp_path / "kc.json"
    path.write_text(json.dumps(kubeconfig()))
    ep = from_kubeconfig(str(path), {})
    assert ep.server == "https://127.0.0.1:6443"
    assert ep.ca_file == str(tmp_path / "ca.crt")  # relative to the kubeconfig
    assert ep.token == "abc" and ep.namespace == "team-a"
    assert "context 'bed'" in ep.source


def test_a_yaml_kubeconfig_with_inline_ca_and_client_certificate_files(tmp_path: Path) -> None:
    pytest.importorskip("yaml")
    path = tmp_path / "config"
    path.write_text(YAML.format(ca=base64.b64encode(PEM.encode()).decode()))
    ep = from_kubeconfig(None, {"KUBECONFIG": str(path)})
    assert ep.ca_data == PEM
    assert ep.cert_file == str(tmp_path / "certs" / "agent.crt")
    assert ep.key_file == str(tmp_path / "certs" / "agent.key")
    assert ep.namespace == "default"


def test_without_pyyaml_a_yaml_kubeconfig_says_how_to_convert_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "yaml", None)  # as if PyYAML were not installed
    with pytest.raises(ConfigError) as info:
        parse_kubeconfig_text("apiVersion: v1\n", "/k/config")
    assert "/k/config is not JSON and PyYAML is not installed" in str(info.value)
    assert "kubectl config view --raw --flatten -o json" in info.value.hint
    assert parse_kubeconfig_text('{"a": 1}', "/k/c.json") == {"a": 1}  # JSON needs nothing


def test_merged_kubeconfigs_first_name_wins(tmp_path: Path) -> None:
    first = kubeconfig(cluster={"server": "https://first:6443"})
    second = kubeconfig(cluster={"server": "https://second:6443"})
    second["current-context"] = "other"
    (tmp_path / "a").write_text(json.dumps(first))
    (tmp_path / "b").write_text(json.dumps(second))
    ep = from_kubeconfig(None, {"KUBECONFIG": f"{tmp_path / 'missing'}:{tmp_path / 'a'}:"
                                              f"{tmp_path / 'b'}"})
    assert ep.server == "https://first:6443"


@pytest.mark.parametrize(("doc", "expected"), [
    (kubeconfig(cluster={"insecure-skip-tls-verify": True}), "sets insecure-skip-tls-verify"),
    (kubeconfig(user={"exec": {"command": "aws"}}), "authenticates with `exec`"),
    (kubeconfig(user={"auth-provider": {"name": "oidc"}}), "authenticates with `auth-provider`"),
    (kubeconfig(user={"username": "u", "password": "p"}), "authenticates with `username`"),
    (kubeconfig(user={}), "user 'agent' has no token and no client certificate"),
    (kubeconfig(user={"client-certificate": "a.crt"}), "certificate without its key"),
    (kubeconfig(cluster={"server": "http://127.0.0.1:8080"}), "not an https:// URL"),
    (kubeconfig(cluster={"certificate-authority-data": "not base64!"}), "is not base64"),
    ({**kubeconfig(), "current-context": ""}, "no current-context"),
    ({**kubeconfig(), "current-context": "nope"}, "context 'nope' is not defined"),
    ({**kubeconfig(), "clusters": {"bed": {}}}, "`clusters` is not a list"),
    ([1, 2], "is not a mapping"),
])
def test_a_kubeconfig_the_agent_cannot_honour_is_refused_naming_the_entry(
        tmp_path: Path, doc: Any, expected: str) -> None:
    path = tmp_path / "kc.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(ConfigError) as info:
        from_kubeconfig(str(path), {})
    assert expected in str(info.value)


def test_no_kubeconfig_anywhere(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read kubeconfig"):
        from_kubeconfig(None, {}, home=tmp_path)


def test_a_file_that_is_neither_json_nor_yaml(tmp_path: Path) -> None:
    pytest.importorskip("yaml")
    path = tmp_path / "kc"
    path.write_text("clusters: [\n  - {name: a\n")
    with pytest.raises(ConfigError, match="neither JSON nor valid YAML"):
        from_kubeconfig(str(path), {})
