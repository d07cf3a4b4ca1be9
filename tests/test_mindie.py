"""Contract of ascend_node.handoff.mindie_config against MindIE's real default config.json."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ascend_node.errors import ConfigError
from ascend_node.handoff.mindie_config import (
    DEFAULT_CONFIG_PATH,
    config_path_from_env,
    load_config,
    patch_config,
    render_config,
    write_config,
)

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "mindie" / "config.json"
MODEL = "BackendConfig.ModelDeployConfig.ModelConfig[0]"


@pytest.fixture
def upstream() -> dict[str, Any]:
    return load_config(FIXTURE)


def patch(config: dict[str, Any], **overrides: Any) -> tuple[dict[str, Any], list[str]]:
    kwargs: dict[str, Any] = {
        "nodes": 2,
        "local_device_ids": list(range(8)),
        "container_ip": "172.16.0.2",
        "https_enabled": False,
        "tls_certs_configured": False,
        "model_name": None,
        "model_weight_path": None,
    }
    kwargs.update(overrides)
    return patch_config(config, **kwargs)


def flatten(value: Any, prefix: str = "") -> dict[str, Any]:
    """Leaf paths in document order, so key order is compared too."""
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        for key, item in value.items():
            out.update(flatten(item, f"{prefix}.{key}" if prefix else key))
        return out
    if isinstance(value, list) and value and all(isinstance(v, dict) for v in value):
        out = {}
        for i, item in enumerate(value):
            out.update(flatten(item, f"{prefix}[{i}]"))
        return out
    return {prefix: value}


def test_two_nodes_of_eight_changes_exactly_the_multi_node_keys(upstream: dict[str, Any]) -> None:
    patched, changes = patch(upstream, model_name="deepseek-r1", model_weight_path="/models/ds")
    before, after = flatten(upstream), flatten(patched)
    assert list(before) == list(after), "no key added, removed or reordered"
    diff = {k: (before[k], after[k]) for k in before if before[k] != after[k]}
    assert diff == {
        "ServerConfig.ipAddress": ("127.0.0.1", "172.16.0.2"),
        "ServerConfig.managementIpAddress": ("127.0.0.2", "172.16.0.2"),
        "ServerConfig.httpsEnabled": (True, False),
        "ServerConfig.interCommTLSEnabled": (True, False),
        "BackendConfig.npuDeviceIds": ([[0, 1, 2, 3]], [[0, 1, 2, 3, 4, 5, 6, 7]]),
        "BackendConfig.multiNodesInferEnabled": (False, True),
        "BackendConfig.interNodeTLSEnabled": (True, False),
        f"{MODEL}.modelName": ("llama_65b", "deepseek-r1"),
        f"{MODEL}.modelWeightPath": (
            "/data/atb_testdata/weights/llama1-65b-safetensors",
            "/models/ds",
        ),
        f"{MODEL}.worldSize": (4, 8),
    }
    assert changes == [
        'ServerConfig.ipAddress: "127.0.0.1" -> "172.16.0.2"',
        'ServerConfig.managementIpAddress: "127.0.0.2" -> "172.16.0.2"',
        "ServerConfig.httpsEnabled: true -> false",
        "ServerConfig.interCommTLSEnabled: true -> false",
        "BackendConfig.interNodeTLSEnabled: true -> false",
        "BackendConfig.multiNodesInferEnabled: false -> true",
        "BackendConfig.npuDeviceIds: [[0, 1, 2, 3]] -> [[0, 1, 2, 3, 4, 5, 6, 7]]",
        f"{MODEL}.worldSize: 4 -> 8",
        f'{MODEL}.modelName: "llama_65b" -> "deepseek-r1"',
        f'{MODEL}.modelWeightPath: "/data/atb_testdata/weights/llama1-65b-safetensors"'
        ' -> "/models/ds"',
    ]


def test_input_is_not_modified(upstream: dict[str, Any]) -> None:
    snapshot = json.dumps(upstream)
    patch(upstream)
    assert json.dumps(upstream) == snapshot


def test_patching_twice_changes_nothing_more(upstream: dict[str, Any]) -> None:
    once, _ = patch(upstream)
    twice, changes = patch(once)
    assert twice == once
    assert changes == []


@pytest.mark.parametrize(("nodes", "expected"), [(1, False), (2, True), (4, True), (60, True)])
def test_multi_node_flag_follows_node_count(
    upstream: dict[str, Any], nodes: int, expected: bool
) -> None:
    patched, _ = patch(upstream, nodes=nodes)
    assert patched["BackendConfig"]["multiNodesInferEnabled"] is expected


def test_one_node_turns_multi_node_off(upstream: dict[str, Any]) -> None:
    multi, _ = patch(upstream, nodes=2)
    single, changes = patch(multi, nodes=1)
    assert single["BackendConfig"]["multiNodesInferEnabled"] is False
    assert changes == ["BackendConfig.multiNodesInferEnabled: true -> false"]


@pytest.mark.parametrize(
    ("https", "certs", "https_after", "tls_after"),
    [
        (None, False, True, False),  # keep httpsEnabled as shipped
        (False, False, False, False),
        (True, True, True, True),  # certificates configured: TLS flags kept
        (None, True, True, True),
    ],
)
def test_https_and_tls(
    upstream: dict[str, Any], https: bool | None, certs: bool, https_after: bool, tls_after: bool
) -> None:
    patched, _ = patch(upstream, https_enabled=https, tls_certs_configured=certs)
    assert patched["ServerConfig"]["httpsEnabled"] is https_after
    assert patched["ServerConfig"]["interCommTLSEnabled"] is tls_after
    assert patched["BackendConfig"]["interNodeTLSEnabled"] is tls_after


def test_missing_tls_keys_are_added_false(upstream: dict[str, Any]) -> None:
    del upstream["ServerConfig"]["interCommTLSEnabled"]
    patched, changes = patch(upstream)
    assert patched["ServerConfig"]["interCommTLSEnabled"] is False
    assert "ServerConfig.interCommTLSEnabled: (absent) -> false" in changes


@pytest.mark.parametrize(("ids", "world"), [([0], 1), ([0, 1, 2, 3], 4), (list(range(16)), 16)])
def test_devices_world_size_and_instances_agree(
    upstream: dict[str, Any], ids: list[int], world: int
) -> None:
    upstream["BackendConfig"]["modelInstanceNumber"] = 2
    upstream["BackendConfig"]["npuDeviceIds"] = [[0, 1], [2, 3]]
    patched, _ = patch(upstream, local_device_ids=ids)
    backend = patched["BackendConfig"]
    assert backend["npuDeviceIds"] == [ids]
    assert backend["modelInstanceNumber"] == len(backend["npuDeviceIds"]) == 1
    assert backend["ModelDeployConfig"]["ModelConfig"][0]["worldSize"] == world


def test_ipv6_container_ip_is_normalised(upstream: dict[str, Any]) -> None:
    patched, _ = patch(upstream, container_ip="fd00:0::10")
    assert patched["ServerConfig"]["ipAddress"] == "fd00::10"


def test_all_zero_ip_only_with_allow_all_zero_listening(upstream: dict[str, Any]) -> None:
    with pytest.raises(ConfigError, match=r"0\.0\.0\.0 would make MindIE listen on all"):
        patch(upstream, container_ip="0.0.0.0")
    upstream["ServerConfig"]["allowAllZeroIpListening"] = True
    patched, _ = patch(upstream, container_ip="0.0.0.0")
    assert patched["ServerConfig"]["ipAddress"] == "0.0.0.0"


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"container_ip": "node-1"}, "container IP 'node-1' is not an IP address"),
        ({"nodes": 0}, "node count 0"),
        ({"nodes": True}, "node count True"),
        ({"local_device_ids": []}, "npuDeviceIds would be empty"),
        ({"local_device_ids": [0, 0]}, r"npuDeviceIds \[0, 0\] repeats a device"),
        ({"local_device_ids": [64]}, "npuDeviceIds value 64"),
        ({"local_device_ids": [-1]}, "npuDeviceIds value -1"),
        ({"model_name": "bad name"}, "modelName 'bad name' is invalid"),
        ({"model_name": ""}, "modelName '' is invalid"),
        ({"model_name": "x" * 257}, "is invalid"),
        ({"model_weight_path": " "}, "modelWeightPath is empty"),
    ],
)
def test_invalid_inputs(upstream: dict[str, Any], overrides: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        patch(upstream, **overrides)


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda c: c.pop("ServerConfig"), "no ServerConfig object"),
        (lambda c: c.__setitem__("BackendConfig", []), "no BackendConfig object"),
        (
            lambda c: c["BackendConfig"].pop("ModelDeployConfig"),
            "no BackendConfig.ModelDeployConfig object",
        ),
        (
            lambda c: c["BackendConfig"]["ModelDeployConfig"].__setitem__("ModelConfig", []),
            r"ModelConfig\[0\]",
        ),
    ],
)
def test_malformed_config(upstream: dict[str, Any], mutate: Any, message: str) -> None:
    mutate(upstream)
    with pytest.raises(ConfigError, match=message):
        patch(upstream)


@given(st.from_regex(r"[abcXYZ019]([abcXYZ019._-]{0,254}[abcXYZ019])?", fullmatch=True))
def test_valid_model_names_are_accepted(name: str) -> None:
    patched, _ = patch(load_config(FIXTURE), model_name=name)
    assert patched["BackendConfig"]["ModelDeployConfig"]["ModelConfig"][0]["modelName"] == name


@given(
    st.text(min_size=1, max_size=20).filter(
        lambda s: any(not (c.isascii() and (c.isalnum() or c in "-_.")) for c in s)
    )
)
def test_names_with_other_characters_are_rejected(name: str) -> None:
    with pytest.raises(ConfigError, match="modelName"):
        patch(load_config(FIXTURE), model_name=name)


@pytest.mark.parametrize("name", ["-llama", "llama.", "_", "a_", ".a", "a-"])
def test_names_must_start_and_end_with_a_letter_or_digit(name: str) -> None:
    # MindIE: "The first and last characters must be characters or digits."
    with pytest.raises(ConfigError, match=f"modelName {name!r} is invalid") as info:
        patch(load_config(FIXTURE), model_name=name)
    assert "starting and ending with a letter or digit" in info.value.hint


@pytest.mark.parametrize(
    ("environ", "expected"),
    [
        ({}, DEFAULT_CONFIG_PATH),
        ({"MIES_CONFIG_JSON_PATH": "/etc/mindie/config.json"}, "/etc/mindie/config.json"),
        ({"MIES_INSTALL_PATH": "/opt/mindie-service"}, "/opt/mindie-service/conf/config.json"),
        (
            {"MIES_CONFIG_JSON_PATH": "/a.json", "MIES_INSTALL_PATH": "/opt/x"},
            "/a.json",
        ),
        ({"MIES_CONFIG_JSON_PATH": " "}, DEFAULT_CONFIG_PATH),
    ],
)
def test_config_path(environ: dict[str, str], expected: str) -> None:
    assert config_path_from_env(environ) == Path(expected)


def test_default_path_is_mindies() -> None:
    assert DEFAULT_CONFIG_PATH == "/usr/local/Ascend/mindie/latest/mindie-service/conf/config.json"


def test_load_errors(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="does not exist"):
        load_config(tmp_path / "nope.json")
    bad = tmp_path / "bad.json"
    bad.write_text("{\n  'x': 1\n}")
    with pytest.raises(ConfigError, match=r"is not valid JSON: .* at line 2"):
        load_config(bad)
    bad.write_text("[1, 2]")
    with pytest.raises(ConfigError, match="is not a JSON object"):
        load_config(bad)


def test_write_then_load_round_trips_with_mindies_permissions(
    tmp_path: Path, upstream: dict[str, Any]
) -> None:
    target = tmp_path / "conf" / "config.json"
    target.parent.mkdir()
    source = tmp_path / "configmap.json"
    source.write_text(FIXTURE.read_text())
    target.symlink_to(source)  # as a ConfigMap mount would be
    patched, _ = patch(upstream)
    write_config(target, patched, os.getuid(), os.getgid())
    st_ = target.lstat()
    assert stat.S_ISREG(st_.st_mode), "MindIE rejects a symlinked config"
    assert stat.S_IMODE(st_.st_mode) == 0o640
    assert st_.st_uid == os.getuid()
    assert load_config(target) == patched
    assert list(load_config(target)) == list(upstream)
    assert target.read_text().endswith("}\n")
    assert source.read_text() == FIXTURE.read_text()


@pytest.mark.skipif(os.geteuid() != 0, reason="changing a file's owner needs root")
def test_write_gives_the_file_to_the_server_user(tmp_path: Path, upstream: dict[str, Any]) -> None:
    target = tmp_path / "config.json"
    write_config(target, upstream, 1001, 1001)
    assert (target.stat().st_uid, target.stat().st_gid) == (1001, 1001)


def test_write_failure_is_a_config_error_naming_the_path(tmp_path: Path) -> None:
    target = tmp_path / "missing-dir" / "config.json"
    with pytest.raises(ConfigError, match=f"cannot write MindIE config {target}"):
        write_config(target, {"a": 1})


def test_render_keeps_non_ascii_and_ends_with_newline() -> None:
    assert render_config({"modelName": "模型"}) == '{\n    "modelName": "模型"\n}\n'
