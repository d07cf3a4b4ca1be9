"""MindIE `config.json`: the few keys multi-node serving depends on, and nothing else.

MindIE decides multi-node mode only from `BackendConfig.multiNodesInferEnabled`, starts
TLS between nodes unless told otherwise (its default config ships with TLS on and no
certificates), refuses to listen on 0.0.0.0 unless `allowAllZeroIpListening`, and
checks at parse time that `npuDeviceIds`, `modelInstanceNumber` and
`ModelConfig[0].worldSize` agree — even in multi-node mode, where it later replaces
both with this server's devices from the rank table. `patch_config` sets exactly those
keys and keeps every other key, value and key order as the operator wrote them, so a
diff of the file shows only what the agent had to change (the returned `changes`).

Device ids: `npuDeviceIds` holds *logical* ids — the indexes the container's runtime sees,
0..n-1 in the order of its visible devices — not the physical ids of the rank table
(MindIE-LLM docs/zh/user_guide/user_manual/service_parameter_configuration.md). `boot`
therefore passes `list(range(local device count))`. (Multi-node MindIE overrides it with the
rank table's device_ids (backend_config.cpp), which agree only on whole-node, unremapped
containers; that is the rank table's concern, not this file's.)

The file must be a regular file owned by the uid that runs the daemon, mode 0640 or
stricter, not a symlink (MindIE checks all of it; docs/mindie-config.md rule 7) — `write_config`
produces exactly that, atomically.
"""

from __future__ import annotations

import copy
import errno
import ipaddress
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Optional

from ascend_node.atomic import atomic_write_text
from ascend_node.errors import ConfigError
from ascend_node.handoff.mindie_startup import (
    DEFAULT_MIES_INSTALL_PATH,
    MODEL_NAME_RULE,
    model_name_ok,
)

DEFAULT_CONFIG_PATH = DEFAULT_MIES_INSTALL_PATH + "/conf/config.json"
CONFIG_MODE = 0o640

_MAX_DEVICE_ID = 63


def config_path_from_env(environ: Mapping[str, str]) -> Path:
    """Where MindIE reads its config: `MIES_CONFIG_JSON_PATH`, else
    `$MIES_INSTALL_PATH/conf/config.json`, else the default install path."""
    explicit = environ.get("MIES_CONFIG_JSON_PATH", "").strip()
    if explicit:
        return Path(explicit)
    install = environ.get("MIES_INSTALL_PATH", "").strip() or DEFAULT_MIES_INSTALL_PATH
    return Path(install) / "conf" / "config.json"


def load_config(path: Path) -> dict[str, Any]:
    """Read config.json as an ordered dict; ConfigError naming the file otherwise."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(
            f"MindIE config {path} does not exist",
            "set MIES_CONFIG_JSON_PATH to the config.json of the MindIE install",
        ) from None
    except OSError as exc:
        raise ConfigError(f"cannot read MindIE config {path}: {exc.strerror}") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigError(
            f"MindIE config {path} is not valid JSON: {exc.msg} at line {exc.lineno}",
            "fix the file or restore MindIE's default config.json",
        ) from None
    if not isinstance(data, dict):
        raise ConfigError(f"MindIE config {path} is not a JSON object")
    return data


def _section(parent: dict[str, Any], key: str, where: str) -> dict[str, Any]:
    value = parent.get(key)
    if not isinstance(value, dict):
        raise ConfigError(
            f"MindIE config has no {where}{key} object",
            "start from MindIE's default config.json",
        )
    return value


def _set(section: dict[str, Any], key: str, value: Any, label: str, changes: list[str]) -> None:
    """Set in place (keeps the key's position); record a change only when it differs
    (JSON-wise, so `1` and `true` differ)."""
    if key in section:
        old = json.dumps(section[key])
        if old == json.dumps(value):
            return
        changes.append(f"{label}.{key}: {old} -> {json.dumps(value)}")
    else:
        changes.append(f"{label}.{key}: (absent) -> {json.dumps(value)}")
    section[key] = value


def _check_ids(local_device_ids: Sequence[int]) -> list[int]:
    ids = list(local_device_ids)
    if not ids:
        raise ConfigError("no local NPU for MindIE (npuDeviceIds would be empty)")
    for dev in ids:
        if isinstance(dev, bool) or not isinstance(dev, int) or not 0 <= dev <= _MAX_DEVICE_ID:
            raise ConfigError(
                f"npuDeviceIds value {dev!r} is not a device id in 0-{_MAX_DEVICE_ID}",
                "pass logical ids 0..n-1",
            )
    if len(set(ids)) != len(ids):
        raise ConfigError(f"npuDeviceIds {ids} repeats a device", "pass logical ids 0..n-1")
    return ids


def _check_ip(container_ip: str, allow_all_zero: bool) -> str:
    try:
        addr = ipaddress.ip_address(container_ip)
    except ValueError:
        raise ConfigError(
            f"container IP {container_ip!r} is not an IP address",
            "set POD_IP from the downward API (status.podIP)",
        ) from None
    if addr.is_unspecified and not allow_all_zero:
        raise ConfigError(
            f"container IP {container_ip} would make MindIE listen on all addresses",
            "MindIE refuses that unless ServerConfig.allowAllZeroIpListening is true; "
            "use the pod IP",
        )
    return str(addr)


def patch_config(
    config: Mapping[str, Any],
    *,
    nodes: int,
    local_device_ids: Sequence[int],
    container_ip: str,
    https_enabled: Optional[bool],
    tls_certs_configured: bool,
    model_name: Optional[str],
    model_weight_path: Optional[str],
) -> tuple[dict[str, Any], list[str]]:
    """Return (patched copy, human-readable changes); `config` itself is not modified.

    - `BackendConfig.multiNodesInferEnabled` = nodes > 1;
    - `ServerConfig.interCommTLSEnabled` and `BackendConfig.interNodeTLSEnabled` =
      false unless `tls_certs_configured` (then kept);
    - `ServerConfig.httpsEnabled` = `https_enabled` (None keeps the file's value);
    - `ServerConfig.ipAddress` and `managementIpAddress` = `container_ip` (the pod IP:
      reachable by peers and by kubelet probes; the shipped 127.0.0.x are not);
    - `BackendConfig.npuDeviceIds` = [local_device_ids], `modelInstanceNumber` = 1,
      `ModelDeployConfig.ModelConfig[0].worldSize` = len(local_device_ids);
    - `ModelConfig[0].modelName` / `modelWeightPath` when given (None keeps them).
    """
    if isinstance(nodes, bool) or not isinstance(nodes, int) or nodes < 1:
        raise ConfigError(f"node count {nodes!r} is not a positive integer")
    ids = _check_ids(local_device_ids)
    if model_name is not None and not model_name_ok(model_name):
        raise ConfigError(
            f"MindIE modelName {model_name!r} is invalid",
            f"use {MODEL_NAME_RULE}",
        )
    if model_weight_path is not None and not model_weight_path.strip():
        raise ConfigError("MindIE modelWeightPath is empty", "give the model weight directory")

    patched: dict[str, Any] = copy.deepcopy(dict(config))
    server = _section(patched, "ServerConfig", "")
    backend = _section(patched, "BackendConfig", "")
    deploy = _section(backend, "ModelDeployConfig", "BackendConfig.")
    models = deploy.get("ModelConfig")
    if not isinstance(models, list) or not models or not isinstance(models[0], dict):
        raise ConfigError(
            "MindIE config has no BackendConfig.ModelDeployConfig.ModelConfig[0] object",
            "start from MindIE's default config.json",
        )
    model: dict[str, Any] = models[0]
    ip = _check_ip(container_ip, server.get("allowAllZeroIpListening") is True)

    changes: list[str] = []
    model_label = "BackendConfig.ModelDeployConfig.ModelConfig[0]"
    _set(server, "ipAddress", ip, "ServerConfig", changes)
    _set(server, "managementIpAddress", ip, "ServerConfig", changes)
    if https_enabled is not None:
        _set(server, "httpsEnabled", bool(https_enabled), "ServerConfig", changes)
    if not tls_certs_configured:
        _set(server, "interCommTLSEnabled", False, "ServerConfig", changes)
        _set(backend, "interNodeTLSEnabled", False, "BackendConfig", changes)
    _set(backend, "multiNodesInferEnabled", nodes > 1, "BackendConfig", changes)
    _set(backend, "modelInstanceNumber", 1, "BackendConfig", changes)
    _set(backend, "npuDeviceIds", [ids], "BackendConfig", changes)
    _set(model, "worldSize", len(ids), model_label, changes)
    if model_name is not None:
        _set(model, "modelName", model_name, model_label, changes)
    if model_weight_path is not None:
        _set(model, "modelWeightPath", model_weight_path, model_label, changes)
    return patched, changes


def render_config(config: Mapping[str, Any]) -> str:
    """The bytes we write: 4-space JSON like MindIE's own file, UTF-8, final newline."""
    return json.dumps(config, indent=4, ensure_ascii=False) + "\n"


def write_config(
    path: Path,
    config: Mapping[str, Any],
    owner_uid: Optional[int] = None,
    owner_gid: Optional[int] = None,
) -> None:
    """Write atomically as a regular file, mode 0640, owned by `owner_uid:owner_gid`
    (None = the running uid/gid) — what MindIE's permission check demands.

    A symlink at `path` (a ConfigMap mount) is replaced by a regular file. OSErrors
    become ConfigError naming the path.
    """
    try:
        atomic_write_text(
            path, render_config(config), mode=CONFIG_MODE, uid=owner_uid, gid=owner_gid
        )
    except PermissionError as exc:
        raise ConfigError(
            f"cannot write MindIE config {path}: {exc.strerror}",
            "run as the owner of the MindIE install, or point MIES_CONFIG_JSON_PATH "
            "at a writable copy (owner changes need root: --file-owner)",
        ) from None
    except OSError as exc:
        hint = "check that the directory exists and has free space"
        if exc.errno == errno.EROFS:
            hint = "point MIES_CONFIG_JSON_PATH at a writable path (ConfigMaps are read-only)"
        raise ConfigError(
            f"cannot write MindIE config {path}: {exc.strerror or exc}", hint
        ) from None
