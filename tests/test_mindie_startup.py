"""MindIE's start-up rules (mindie_startup): tables of cases from what MindIE's config manager
refuses (docs/mindie-config.md), on an in-memory filesystem view."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any, Optional

import pytest

from ascend_node.handoff.mindie_startup import (
    DiskView,
    FileInfo,
    StartupFacts,
    facts_from_env,
    mode_ok,
    model_name_ok,
    startup_problems,
    summarise,
)

SHIPPED = json.loads((Path(__file__).parents[1] / "fixtures" / "mindie" / "config.json")
                     .read_text())
HOME = "/opt/mindie-service"
UID = 1000
WEIGHTS = "/data/atb_testdata/weights/llama1-65b-safetensors"
MODEL = "BackendConfig.ModelDeployConfig.ModelConfig[0]"

# Every TLS path MindIE checks for the shipped config.json (business, management, metrics;
# CAs of all three under tlsCaPath): MindIE prints 18 lines, two of them the same
# tlsCaPath directory again.
SHIPPED_TLS = [
    ("ServerConfig.tlsCert", f"{HOME}/security/certs/server.pem"),
    ("ServerConfig.tlsCrlPath", f"{HOME}/security/certs/"),
    ("ServerConfig.tlsCrlFiles", f"{HOME}/security/certs/server_crl.pem"),
    ("ServerConfig.tlsCaPath", f"{HOME}/security/ca/"),
    ("ServerConfig.tlsCaFile", f"{HOME}/security/ca/ca.pem"),
    ("ServerConfig.tlsPk", f"{HOME}/security/keys/server.key.pem"),
    ("ServerConfig.managementTlsCert", f"{HOME}/security/certs/management/server.pem"),
    ("ServerConfig.managementTlsCrlPath", f"{HOME}/security/management/certs/"),
    ("ServerConfig.managementTlsCrlFiles", f"{HOME}/security/management/certs/server_crl.pem"),
    ("ServerConfig.managementTlsCaFile", f"{HOME}/security/ca/management_ca.pem"),
    ("ServerConfig.managementTlsPk", f"{HOME}/security/keys/management/server.key.pem"),
    ("ServerConfig.metricsTlsCert", f"{HOME}/security/certs/metrics/server.pem"),
    ("ServerConfig.metricsTlsCrlPath", f"{HOME}/security/metrics/certs/"),
    ("ServerConfig.metricsTlsCrlFiles", f"{HOME}/security/metrics/certs/server_crl.pem"),
    ("ServerConfig.metricsTlsCaFile", f"{HOME}/security/ca/metrics_ca.pem"),
    ("ServerConfig.metricsTlsPk", f"{HOME}/security/keys/metrics/server.key.pem"),
]


class MemView:
    """An in-memory filesystem: path -> FileInfo; `links` are symlinks to files."""

    def __init__(self, files: Optional[dict[str, FileInfo]] = None,
                 links: tuple[str, ...] = ()) -> None:
        self.files = dict(files or {})
        self.links = set(links)

    def stat(self, path: str) -> Optional[FileInfo]:
        found = self.files.get(path) or self.files.get(path.rstrip("/"))
        return found

    def lstat(self, path: str) -> Optional[FileInfo]:
        if path in self.links:
            return FileInfo("link", 0o777, UID)
        return self.stat(path)


def f(mode: int = 0o600, uid: int = UID) -> FileInfo:
    return FileInfo("file", mode, uid)


def d() -> FileInfo:
    return FileInfo("dir", 0o750, UID)


def weights_view(extra: Optional[dict[str, FileInfo]] = None) -> dict[str, FileInfo]:
    return {WEIGHTS: d(), f"{WEIGHTS}/config.json": f(0o644), **(extra or {})}


def all_tls() -> dict[str, FileInfo]:
    return {path: d() if path.endswith("/") else f() for _, path in SHIPPED_TLS}


def facts(**kw: Any) -> StartupFacts:
    return StartupFacts(**{"home": HOME, "server_uid": UID, **kw})


def config(**changes: Any) -> dict[str, Any]:
    """The shipped config.json with `Section__key=value` changes (ModelConfig[0] as `Model`)."""
    cfg = copy.deepcopy(SHIPPED)
    for name, value in changes.items():
        section, key = name.split("__")
        target = (cfg["BackendConfig"]["ModelDeployConfig"]["ModelConfig"][0]
                  if section == "Model" else cfg[section])
        if value is DELETE:
            target.pop(key)
        else:
            target[key] = value
    return cfg


DELETE = object()
PLAIN = {"ServerConfig__httpsEnabled": False}


def keys(problems: list[Any]) -> list[tuple[str, str]]:
    return [(p.key, p.file) for p in problems]


# ------------------------------------------------------------------------------ https

def test_shipped_config_without_certificates_names_every_tls_path_mindie_checks() -> None:
    problems = startup_problems(SHIPPED, facts(), MemView(weights_view()))
    assert keys(problems) == SHIPPED_TLS
    assert all(p.rule == "https" for p in problems)
    assert "--no-https" in problems[0].remedy and "ASCEND_NODE_HTTPS=0" in problems[0].remedy
    assert f"{HOME}/security" in problems[0].remedy


def test_https_with_every_certificate_in_place_passes() -> None:
    assert startup_problems(SHIPPED, facts(), MemView(weights_view(all_tls()))) == []


def test_https_off_needs_no_certificates() -> None:
    assert startup_problems(config(**PLAIN), facts(), MemView(weights_view())) == []


@pytest.mark.parametrize(("changes", "env_ip", "expected"), [
    # One address and one port for all three endpoints: only the business TLS files.
    ({"ServerConfig__managementIpAddress": "10.0.0.5", "ServerConfig__ipAddress": "10.0.0.5",
      "ServerConfig__managementPort": 1025, "ServerConfig__metricsPort": 1025}, "", 6),
    # managementPort absent means `port`.
    ({"ServerConfig__managementIpAddress": "10.0.0.5", "ServerConfig__ipAddress": "10.0.0.5",
      "ServerConfig__managementPort": DELETE, "ServerConfig__metricsPort": 1025}, "", 6),
    # MIES_CONTAINER_IP replaces ipAddress only: management differs again.
    ({"ServerConfig__managementIpAddress": "10.0.0.5", "ServerConfig__ipAddress": "10.0.0.5",
      "ServerConfig__managementPort": 1025, "ServerConfig__metricsPort": 1025}, "10.0.0.9", 16),
    # Different ports (the shipped 1025/1026/1027): management and metrics files too.
    ({"ServerConfig__managementIpAddress": "10.0.0.5", "ServerConfig__ipAddress": "10.0.0.5"},
     "", 16),
])
def test_management_and_metrics_tls_follow_mindies_shared_endpoint_rule(
        changes: dict[str, Any], env_ip: str, expected: int) -> None:
    problems = startup_problems(config(**changes), facts(container_ip=env_ip),
                                MemView(weights_view()))
    assert len(problems) == expected, keys(problems)


def test_crls_are_optional_when_their_list_or_directory_is_empty() -> None:
    view = all_tls()
    for _, path in SHIPPED_TLS:
        if "crl" in path or path.endswith("/certs/"):
            view.pop(path, None)
    view[f"{HOME}/security/ca/"] = d()
    cfg = config(ServerConfig__tlsCrlFiles=[], ServerConfig__managementTlsCrlPath="",
                 ServerConfig__metricsTlsCrlFiles=[])
    assert startup_problems(cfg, facts(), MemView(weights_view(view))) == []


def test_a_ca_directory_without_trailing_slash_names_another_file() -> None:
    # MindIE concatenates tlsCaPath and the file name as strings.
    cfg = config(ServerConfig__tlsCaPath="security/ca")
    view = all_tls()
    view[f"{HOME}/security/ca"] = d()
    problems = startup_problems(cfg, facts(), MemView(weights_view(view)))
    assert ("ServerConfig.tlsCaFile", f"{HOME}/security/caca.pem") in keys(problems)


@pytest.mark.parametrize(("info", "check", "cause"), [
    (f(0o644), True, "has mode 0644 (MindIE requires 0640 or stricter)"),
    (f(0o660), True, "has mode 0660"),
    (f(0o600, uid=0), True, "is owned by uid 0, not uid 1000"),
    (f(0o644, uid=0), False, None),  # MINDIE_CHECK_INPUTFILES_PERMISSION=0
    (f(0o440), True, None),
    (d(), True, "is not a regular file"),
])
def test_certificate_files_need_mindies_mode_and_owner(info: FileInfo, check: bool,
                                                       cause: Optional[str]) -> None:
    view = all_tls()
    view[f"{HOME}/security/certs/server.pem"] = info
    problems = startup_problems(SHIPPED, facts(check_permissions=check),
                                MemView(weights_view(view)))
    if cause is None:
        assert problems == []
    else:
        assert [p.key for p in problems] == ["ServerConfig.tlsCert"]
        assert cause in problems[0].cause


def test_a_symlinked_certificate_is_refused_with_the_secret_volume_hint() -> None:
    cert = f"{HOME}/security/certs/server.pem"
    problems = startup_problems(SHIPPED, facts(), MemView(weights_view(all_tls()), (cert,)))
    assert keys(problems) == [("ServerConfig.tlsCert", cert)]
    assert "symlink" in problems[0].cause and "subPath" in problems[0].remedy


def test_unset_tls_keys_and_bad_ca_counts() -> None:
    cfg = config(ServerConfig__tlsCert=DELETE, ServerConfig__tlsCaFile=[])
    problems = startup_problems(cfg, facts(), MemView(weights_view(all_tls())))
    causes = [p.cause for p in problems]
    assert "ServerConfig.tlsCert is not set" in causes
    assert "ServerConfig.tlsCaFile lists 0 CA file(s); MindIE needs 1 to 3" in causes


# ---------------------------------------------------------------------------- weights

@pytest.mark.parametrize(("path", "view", "cause"), [
    (WEIGHTS, {}, f"{MODEL}.modelWeightPath {WEIGHTS} does not exist"),
    (WEIGHTS, {WEIGHTS: d()},
     f"has no config.json (MindIE: Path not found: {WEIGHTS}/config.json)"),
    (WEIGHTS, {WEIGHTS: f()}, "is not a directory"),
    (WEIGHTS, {WEIGHTS: d(), f"{WEIGHTS}/config.json": d()}, "has no config.json"),
    ("", {}, f"{MODEL}.modelWeightPath is not set"),
    (WEIGHTS + "/", weights_view(), None),
])
def test_the_weight_directory_must_hold_config_json(path: str, view: dict[str, FileInfo],
                                                    cause: Optional[str]) -> None:
    problems = startup_problems(config(**PLAIN, Model__modelWeightPath=path), facts(),
                                MemView(view))
    if cause is None:
        assert problems == []
        return
    assert [p.rule for p in problems] == ["weights"]
    assert cause in problems[0].cause
    assert "MODEL_PATH" in problems[0].remedy


# ------------------------------------------------------------------------- model name

@pytest.mark.parametrize(("name", "good"), [
    ("llama_65b", True), ("a", True), ("Qwen2.5-72B", True), ("x" * 256, True),
    ("x" * 257, False), ("", False), ("-llama", False), ("llama.", False), ("_", False),
    ("a b", False), ("模型", False), ("llama/65b", False),
])
def test_model_name_rule(name: str, good: bool) -> None:
    assert model_name_ok(name) is good
    problems = startup_problems(config(**PLAIN, Model__modelName=name), facts(),
                                MemView(weights_view()))
    assert [p.key for p in problems] == ([] if good else [f"{MODEL}.modelName"])


# ------------------------------------------------------------------- devices, listeners

@pytest.mark.parametrize(("changes", "expected"), [
    ({"BackendConfig__npuDeviceIds": [[0, 1]]}, ["BackendConfig.npuDeviceIds[0]"]),
    ({"Model__worldSize": 8}, ["BackendConfig.npuDeviceIds[0]"]),
    ({"BackendConfig__modelInstanceNumber": 2}, ["BackendConfig.modelInstanceNumber"]),
    ({"BackendConfig__npuDeviceIds": [0, 1, 2, 3]}, ["BackendConfig.npuDeviceIds"]),
    ({"BackendConfig__npuDeviceIds": [[0, 1, 2, 3]], "Model__worldSize": 4}, []),
])
def test_npu_device_ids_must_match_world_size(changes: dict[str, Any],
                                              expected: list[str]) -> None:
    problems = startup_problems(config(**PLAIN, **changes), facts(), MemView(weights_view()))
    assert [p.key for p in problems] == expected
    assert all("worldSize" in p.cause or "modelInstanceNumber" in p.cause
               or "not a list" in p.cause for p in problems)


@pytest.mark.parametrize(("ip", "mgmt", "allow", "env_ip", "expected"), [
    ("0.0.0.0", "10.0.0.5", False, "", ["ServerConfig.ipAddress"]),
    ("0.0.0.0", "10.0.0.5", False, "10.0.0.5", []),  # MIES_CONTAINER_IP replaces it
    ("10.0.0.5", "0.0.0.0", False, "10.0.0.5", ["ServerConfig.managementIpAddress"]),
    ("0.0.0.0", DELETE, False, "10.0.0.5", ["ServerConfig.managementIpAddress"]),
    ("0.0.0.0", "0.0.0.0", True, "", []),  # allowAllZeroIpListening
    ("10.0.0.5", "10.0.0.5", False, "", []),
])
def test_all_zero_listeners(ip: str, mgmt: Any, allow: bool, env_ip: str,
                            expected: list[str]) -> None:
    cfg = config(**PLAIN, ServerConfig__ipAddress=ip, ServerConfig__managementIpAddress=mgmt,
                 ServerConfig__allowAllZeroIpListening=allow)
    problems = startup_problems(cfg, facts(container_ip=env_ip), MemView(weights_view()))
    assert [p.key for p in problems] == expected


def test_missing_sections_and_clashing_ports() -> None:
    cfg = config(**PLAIN)
    del cfg["BackendConfig"]
    problems = startup_problems(cfg, facts(), MemView(weights_view()))
    assert [p.key for p in problems] == ["BackendConfig"]
    assert "key 'BackendConfig' not found" in problems[0].cause
    no_models = config(**PLAIN)
    no_models["BackendConfig"]["ModelDeployConfig"]["ModelConfig"] = []
    assert [p.key for p in startup_problems(no_models, facts(), MemView(weights_view()))] == [
        "BackendConfig.ModelDeployConfig.ModelConfig"]
    clash = config(**PLAIN, BackendConfig__multiNodesInferPort=1025)
    assert [p.key for p in startup_problems(clash, facts(), MemView(weights_view()))] == [
        "ServerConfig.port"]


def test_inter_node_tls_is_checked_only_in_multi_node_mode() -> None:
    on = config(**PLAIN, BackendConfig__multiNodesInferEnabled=True)
    problems = startup_problems(on, facts(), MemView(weights_view()))
    assert [p.key for p in problems] == [
        "BackendConfig.interNodeTlsCert", "BackendConfig.interNodeTlsPk",
        "BackendConfig.interNodeTlsCaPath", "BackendConfig.interNodeTlsCaFiles"]
    assert "ASCEND_NODE_TLS_CERTS" in problems[0].remedy
    off = config(**PLAIN, BackendConfig__multiNodesInferEnabled=True,
                 BackendConfig__interNodeTLSEnabled=False)
    assert startup_problems(off, facts(), MemView(weights_view())) == []


# ---------------------------------------------------------------------- the file itself

CONF = "/opt/mindie-service/conf/config.json"


@pytest.mark.parametrize(("info", "link", "from_env", "expected"), [
    (f(0o640), False, False, []),
    (f(0o600), False, False, []),
    (f(0o644), False, False, ["has mode 0644"]),
    (f(0o640, uid=0), False, False, ["is owned by uid 0, not uid 1000"]),
    (f(0o640), True, True, ["is a symlink"]),
    (f(0o640), True, False, []),  # a --config-file path is resolved first
    (None, False, False, ["does not exist"]),
])
def test_the_config_file_mode_owner_and_link(info: Optional[FileInfo], link: bool,
                                             from_env: bool, expected: list[str]) -> None:
    view = weights_view({CONF: info} if info else {})
    problems = startup_problems(config(**PLAIN), facts(config_path=CONF,
                                                       config_from_env=from_env),
                                MemView(view, (CONF,) if link else ()))
    assert len(problems) == len(expected)
    for p, text in zip(problems, expected):
        assert p.key == "config.json" and text in p.cause and p.file == CONF


@pytest.mark.parametrize(("mode", "good"), [
    (0o640, True), (0o600, True), (0o440, True), (0o400, True), (0o000, True),
    (0o644, False), (0o660, False), (0o700, False), (0o641, False), (0o740, False),
])
def test_mode_rule(mode: int, good: bool) -> None:
    assert mode_ok(mode) is good


# ------------------------------------------------------------------------- one line

def test_the_shipped_config_gives_one_line_with_key_file_and_remedies() -> None:
    problems = startup_problems(SHIPPED, facts(), MemView())
    cause, hint = summarise(problems)
    assert "\n" not in cause and "\n" not in hint
    assert cause == (
        "MindIE would refuse to start: ServerConfig.httpsEnabled is true but "
        f"ServerConfig.tlsCert file {HOME}/security/certs/server.pem does not exist "
        f"(and 15 more TLS paths); 1 more problem(s): {MODEL}.modelWeightPath")
    assert "--no-https (or ASCEND_NODE_HTTPS=0)" in hint and "MODEL_PATH" in hint
    assert "ascend-node doctor" in hint


def test_one_problem_is_said_alone() -> None:
    problems = startup_problems(config(**PLAIN, Model__modelName="-x"), facts(),
                                MemView(weights_view()))
    cause, _ = summarise(problems)
    assert cause == (f"MindIE would refuse to start: {MODEL}.modelName '-x' breaks MindIE's "
                     "rule (1-256 of [a-zA-Z0-9_.-], starting and ending with a letter or "
                     "digit)")


def test_facts_from_the_servers_environment() -> None:
    got = facts_from_env({"MIES_INSTALL_PATH": "/srv/mindie/", "MIES_CONTAINER_IP": "10.0.0.2",
                          "MINDIE_CHECK_INPUTFILES_PERMISSION": "0",
                          "MIES_CONFIG_JSON_PATH": "/etc/c.json"}, 7, "/etc/c.json")
    assert got == StartupFacts(home="/srv/mindie", server_uid=7, config_path="/etc/c.json",
                               config_from_env=True, container_ip="10.0.0.2",
                               check_permissions=False)
    assert facts_from_env({}, 0).home == "/usr/local/Ascend/mindie/latest/mindie-service"


def test_disk_view_reads_kind_mode_owner_and_links(tmp_path: Path) -> None:
    cert = tmp_path / "server.pem"
    cert.write_text("x")
    cert.chmod(0o600)
    (tmp_path / "link.pem").symlink_to(cert)
    view = DiskView()
    assert view.stat(str(cert)) == FileInfo("file", 0o600, cert.stat().st_uid)
    assert view.lstat(str(tmp_path / "link.pem")).kind == "link"  # type: ignore[union-attr]
    assert view.stat(str(tmp_path / "link.pem")).kind == "file"  # type: ignore[union-attr]
    assert view.stat(str(tmp_path)).kind == "dir"  # type: ignore[union-attr]
    assert view.stat(str(tmp_path / "absent")) is None
    assert view.stat("bad\0path") is None
