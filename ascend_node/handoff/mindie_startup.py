"""MindIE's own start-up rules for `config.json`, applied before the server is exec'd.

The MindIE daemon's first step is its C++ config manager (`ConfigManager::CreateInstance`,
MindIE-LLM `src/config_manager/*.cpp`), which refuses to start on a long list of rules, each
printed as its own line, after the pod has already been scheduled, pulled and bootstrapped.
Every rule of that list that needs no NPU is a pure function of the config, a few
environment variables and what is on disk, so the agent applies them itself, in
milliseconds, and says the first one in one line with its remedy (docs/mindie-config.md).

`startup_problems` is the pure core: a config dict, `StartupFacts` (the environment the
server will see) and a `FileView` (lstat/stat of paths) in, a list of `StartupProblem`s
out, each naming its JSON path, the file at fault and the remedy. `boot` applies it to the
config.json it has just written; `doctor` applies it to the file in place (`mindie.startup`).

What MindIE does, and what the rules copy (MindIE-LLM 8b4871a, server_config.cpp,
backend_config.cpp, model_deploy_config.cpp, param_checker.cpp, config_manager_impl.cpp):
- TLS paths are `home + "/" + value`, with `home` = `$MIES_INSTALL_PATH` (else the daemon's
  install directory); CA and CRL files are `home + "/" + <dir key> + <file>` — a plain string
  concatenation, so a directory value without a trailing `/` names another file.
- A TLS file must be a regular file, not a symlink, and (unless
  `MINDIE_CHECK_INPUTFILES_PERMISSION=0`) owned by the server's uid with mode 0640 or
  stricter; a TLS directory must exist.
- The management and metrics endpoints need their own TLS files unless they share the
  business endpoint's address and port (`managementIpAddress == ipAddress` and
  `managementPort == port == metricsPort`); their CA files live under `tlsCaPath`.
"""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, Optional, Protocol

FileKind = Literal["file", "dir", "link", "other"]

DEFAULT_MIES_INSTALL_PATH = "/usr/local/Ascend/mindie/latest/mindie-service"
"""MindIE's install directory when `MIES_INSTALL_PATH` is unset (the default daemon's)."""

MODEL_NAME_RULE = "1-256 of [a-zA-Z0-9_.-], starting and ending with a letter or digit"
_MODEL_NAME = re.compile(r"[A-Za-z0-9_.-]{1,256}")
_MAX_TLS_FILES = 3
_HTTPS_REMEDY = ("pass --no-https (or ASCEND_NODE_HTTPS=0) to serve plain HTTP, or mount the "
                 "certificates under {home}/security (MIES_INSTALL_PATH)")
_WEIGHTS_REMEDY = ("set MODEL_PATH (or --model-weight-path) to the directory holding the "
                   "model's config.json and weights")
_SHIPPED_REMEDY = "start from MindIE's shipped config.json"


def model_name_ok(name: str) -> bool:
    """MindIE's rule for `modelName` (model_deploy_config.cpp `CheckModelNameLength`)."""
    return bool(_MODEL_NAME.fullmatch(name)) and name[0].isalnum() and name[-1].isalnum()


@dataclass(frozen=True)
class FileInfo:
    kind: FileKind
    mode: int  # permission bits
    uid: int


class FileView(Protocol):
    """What the rules may ask of the filesystem; None means absent or unreadable."""

    def lstat(self, path: str) -> Optional[FileInfo]: ...

    def stat(self, path: str) -> Optional[FileInfo]: ...


def _info(st: os.stat_result) -> FileInfo:
    mode = st.st_mode
    kind: FileKind = ("file" if stat.S_ISREG(mode) else "dir" if stat.S_ISDIR(mode)
                      else "link" if stat.S_ISLNK(mode) else "other")
    return FileInfo(kind, stat.S_IMODE(mode), st.st_uid)


class DiskView:
    """The real filesystem."""

    def lstat(self, path: str) -> Optional[FileInfo]:
        try:
            return _info(os.lstat(path))
        except (OSError, ValueError):
            return None

    def stat(self, path: str) -> Optional[FileInfo]:
        try:
            return _info(os.stat(path))
        except (OSError, ValueError):
            return None


@dataclass(frozen=True)
class StartupFacts:
    """Everything besides the config that MindIE's checks read."""

    home: str  # MindIE's install dir: where relative TLS paths start
    server_uid: int  # the uid the server will run as
    config_path: str = ""  # the config.json MindIE will read ("" = not a file, skip its rule)
    config_from_env: bool = False  # given by MIES_CONFIG_JSON_PATH (then a symlink is refused)
    container_ip: str = ""  # MIES_CONTAINER_IP: replaces ServerConfig.ipAddress
    container_management_ip: str = ""  # MIES_CONTAINER_MANAGEMENT_IP
    check_permissions: bool = True  # MINDIE_CHECK_INPUTFILES_PERMISSION != "0"


@dataclass(frozen=True)
class StartupProblem:
    """One refusal: `rule` groups them (https, weights, ...), `key` is the JSON path."""

    rule: str
    key: str
    cause: str
    remedy: str
    file: str = ""


def facts_from_env(environ: Mapping[str, str], server_uid: int, config_path: str = ""
                   ) -> StartupFacts:
    """The facts from the environment the server will get."""
    home = environ.get("MIES_INSTALL_PATH", "").strip() or DEFAULT_MIES_INSTALL_PATH
    return StartupFacts(
        home=home.rstrip("/") or "/", server_uid=server_uid, config_path=config_path,
        config_from_env=bool(environ.get("MIES_CONFIG_JSON_PATH", "").strip()),
        container_ip=environ.get("MIES_CONTAINER_IP", "").strip(),
        container_management_ip=environ.get("MIES_CONTAINER_MANAGEMENT_IP", "").strip(),
        check_permissions=environ.get("MINDIE_CHECK_INPUTFILES_PERMISSION", "").strip() != "0",
    )


def mode_ok(mode: int) -> bool:
    """0640 or stricter, digit by digit, as MindIE compares (0600, 0440 pass; 0644 fails)."""
    return (mode >> 6) & 7 <= 6 and (mode >> 3) & 7 <= 4 and mode & 7 == 0


# ------------------------------------------------------------------------- the rules

def startup_problems(config: Mapping[str, Any], facts: StartupFacts, fs: FileView
                     ) -> list[StartupProblem]:
    """Every start-up refusal MindIE would print for this config that needs no NPU: the
    file, missing sections, https and its certificates, the weights, modelName, devices,
    listeners, inter-node TLS, ports — the most common refusals of a shipped config first,
    so that the first problem is the one to fix first."""
    out: list[StartupProblem] = []
    out += _config_file(facts, fs)
    server = config.get("ServerConfig")
    backend = config.get("BackendConfig")
    if not isinstance(server, Mapping):
        out.append(StartupProblem("shape", "ServerConfig", "config.json has no ServerConfig "
                                  "object (MindIE: key 'ServerConfig' not found)",
                                  _SHIPPED_REMEDY))
        server = {}
    if not isinstance(backend, Mapping):
        out.append(StartupProblem("shape", "BackendConfig", "config.json has no BackendConfig "
                                  "object (MindIE: key 'BackendConfig' not found)",
                                  _SHIPPED_REMEDY))
        backend = {}
    models = _models(backend)
    if backend and not models:
        out.append(StartupProblem("shape", "BackendConfig.ModelDeployConfig.ModelConfig",
                                  "config.json has no BackendConfig.ModelDeployConfig."
                                  "ModelConfig list of model objects", _SHIPPED_REMEDY))
    if server.get("httpsEnabled") is True:
        out += _https(server, facts, fs)
    out += _weights(models, fs)
    out += _model_names(models)
    if backend and models:
        out += _devices(backend, models)
    out += _listeners(server, facts)
    if (backend.get("multiNodesInferEnabled") is True
            and backend.get("interNodeTLSEnabled") is True):
        out += _internode_tls(backend, facts, fs)
    port, mport = server.get("port"), backend.get("multiNodesInferPort")
    if isinstance(port, int) and port == mport:
        out.append(StartupProblem(
            "ports", "ServerConfig.port",
            f"ServerConfig.port {port} equals BackendConfig.multiNodesInferPort (MindIE: "
            "Endpoint port cannot be equal to multiNodesInferPort)",
            "give the server and the inter-node channel different ports"))
    return _dedupe(out)


def _dedupe(problems: Sequence[StartupProblem]) -> list[StartupProblem]:
    seen: set[tuple[str, str]] = set()
    out = []
    for p in problems:
        if (p.key, p.file or p.cause) not in seen:
            seen.add((p.key, p.file or p.cause))
            out.append(p)
    return out


def _config_file(facts: StartupFacts, fs: FileView) -> list[StartupProblem]:
    if not facts.config_path:
        return []
    path = facts.config_path
    fix = "let `ascend-node boot` write it (mode 0640, --file-owner for the server's uid)"
    link = fs.lstat(path)
    info = fs.stat(path)
    if info is None:
        return [StartupProblem("file", "config.json", f"config.json {path} does not exist",
                               "point MIES_CONFIG_JSON_PATH at MindIE's config.json", path)]
    out = []
    if link is not None and link.kind == "link" and facts.config_from_env:
        out.append(StartupProblem("file", "config.json", f"config.json {path} is a symlink "
                                  "(MindIE refuses a link given by MIES_CONFIG_JSON_PATH)",
                                  fix, path))
    if not mode_ok(info.mode):
        out.append(StartupProblem("file", "config.json", f"config.json {path} has mode "
                                  f"{info.mode:04o} (MindIE requires 0640 or stricter)",
                                  f"chmod 640 {path}", path))
    if info.uid != facts.server_uid:
        out.append(StartupProblem("file", "config.json", f"config.json {path} is owned by uid "
                                  f"{info.uid}, not uid {facts.server_uid} that runs the "
                                  "server (MindIE: owner id diff)", fix, path))
    return out


def _models(backend: Mapping[str, Any]) -> list[tuple[str, Mapping[str, Any]]]:
    deploy = backend.get("ModelDeployConfig")
    models = deploy.get("ModelConfig") if isinstance(deploy, Mapping) else None
    if not isinstance(models, list):
        return []
    base = "BackendConfig.ModelDeployConfig.ModelConfig"
    return [(f"{base}[{i}]", m) for i, m in enumerate(models) if isinstance(m, Mapping)]


def _devices(backend: Mapping[str, Any], models: Sequence[tuple[str, Mapping[str, Any]]]
             ) -> list[StartupProblem]:
    ids = backend.get("npuDeviceIds")
    fix = ("make npuDeviceIds one list per modelInstanceNumber, each as long as "
           "ModelConfig[0].worldSize (`ascend-node boot` sets all three from the local NPUs)")
    if not isinstance(ids, list) or not all(isinstance(g, list) for g in ids):
        return [StartupProblem("devices", "BackendConfig.npuDeviceIds",
                               "BackendConfig.npuDeviceIds is not a list of device-id lists",
                               fix)]
    out = []
    count = backend.get("modelInstanceNumber")
    if count != len(ids):
        out.append(StartupProblem(
            "devices", "BackendConfig.modelInstanceNumber",
            f"BackendConfig.npuDeviceIds has {len(ids)} group(s) but modelInstanceNumber is "
            f"{count!r} (MindIE: The size of npuDeviceIds does not equal to "
            "modelInstanceNumber)", fix))
    world = models[0][1].get("worldSize") if models else None
    for i, group in enumerate(ids):
        if len(group) != world:
            out.append(StartupProblem(
                "devices", f"BackendConfig.npuDeviceIds[{i}]",
                f"BackendConfig.npuDeviceIds[{i}] has {len(group)} device(s) but "
                f"ModelConfig[0].worldSize is {world!r} (MindIE: The size of npuDeviceIds "
                "(subset) does not equal to worldSize)", fix))
    return out


def _model_names(models: Sequence[tuple[str, Mapping[str, Any]]]) -> list[StartupProblem]:
    out = []
    for where, model in models:
        name = model.get("modelName")
        if not isinstance(name, str) or not model_name_ok(name):
            out.append(StartupProblem(
                "model-name", f"{where}.modelName",
                f"{where}.modelName {name!r} breaks MindIE's rule ({MODEL_NAME_RULE})",
                "pass --model-name (or MODEL_NAME) with a valid name"))
    return out


def _weights(models: Sequence[tuple[str, Mapping[str, Any]]], fs: FileView
             ) -> list[StartupProblem]:
    out = []
    for where, model in models:
        path = model.get("modelWeightPath")
        key = f"{where}.modelWeightPath"
        if not isinstance(path, str) or not path.strip():
            out.append(StartupProblem("weights", key, f"{key} is not set", _WEIGHTS_REMEDY))
            continue
        folder = fs.stat(path)
        if folder is None or folder.kind != "dir":
            what = "does not exist" if folder is None else "is not a directory"
            out.append(StartupProblem("weights", key, f"{key} {path} {what}",
                                      _WEIGHTS_REMEDY, path))
            continue
        inner = path.rstrip("/") + "/config.json"
        found = fs.stat(inner)
        if found is None or found.kind != "file":
            out.append(StartupProblem(
                "weights", key, f"{key} {path} has no config.json (MindIE: Path not found: "
                f"{inner})", _WEIGHTS_REMEDY, inner))
    return out


def _listeners(server: Mapping[str, Any], facts: StartupFacts) -> list[StartupProblem]:
    if server.get("allowAllZeroIpListening") is True:
        return []
    out = []
    ip = facts.container_ip or server.get("ipAddress")
    if ip == "0.0.0.0":
        out.append(StartupProblem(
            "listen", "ServerConfig.ipAddress",
            "ServerConfig.ipAddress is 0.0.0.0 and MIES_CONTAINER_IP is unset (MindIE: Input "
            "ipAddress [0.0.0.0] is invalid)",
            "set ipAddress to the pod IP (`ascend-node boot` does, and exports "
            "MIES_CONTAINER_IP)"))
    mgmt = (facts.container_management_ip or server.get("managementIpAddress")
            or server.get("ipAddress"))
    if mgmt == "0.0.0.0":
        out.append(StartupProblem(
            "listen", "ServerConfig.managementIpAddress",
            "ServerConfig.managementIpAddress is 0.0.0.0 (MindIE refuses it even when "
            "MIES_CONTAINER_IP is set)",
            "set managementIpAddress to the pod IP (`ascend-node boot` does)"))
    return out


# ------------------------------------------------------------------------------ TLS

@dataclass(frozen=True)
class _Endpoint:
    label: str  # how the one line names it
    cert: str
    key: str
    ca_files: str
    crl_dir: str
    crl_files: str


_BUSINESS = _Endpoint("", "tlsCert", "tlsPk", "tlsCaFile", "tlsCrlPath", "tlsCrlFiles")
_MANAGEMENT = _Endpoint("management ", "managementTlsCert", "managementTlsPk",
                        "managementTlsCaFile", "managementTlsCrlPath", "managementTlsCrlFiles")
_METRICS = _Endpoint("metrics ", "metricsTlsCert", "metricsTlsPk", "metricsTlsCaFile",
                     "metricsTlsCrlPath", "metricsTlsCrlFiles")


class _Tls:
    """Builds TLS problems for one section (ServerConfig or BackendConfig)."""

    def __init__(self, section: Mapping[str, Any], prefix: str, rule: str, remedy: str,
                 facts: StartupFacts, fs: FileView) -> None:
        self.section, self.prefix, self.rule, self.remedy = section, prefix, rule, remedy
        self.facts, self.fs = facts, fs
        self.out: list[StartupProblem] = []

    def string(self, key: str) -> str:
        value = self.section.get(key)
        return value if isinstance(value, str) else ""

    def names(self, key: str) -> list[str]:
        value = self.section.get(key)
        return [v for v in value if isinstance(v, str)] if isinstance(value, list) else []

    def problem(self, key: str, cause: str, path: str = "", remedy: str = "") -> None:
        self.out.append(StartupProblem(self.rule, f"{self.prefix}.{key}", cause,
                                       remedy or self.remedy, path))

    def file(self, key: str, path: str) -> None:
        """MindIE's file check: regular, not a link, owner and mode (ParamChecker::CheckPath)."""
        shown = f"{self.prefix}.{key}"
        link = self.fs.lstat(path)
        if link is None:
            self.problem(key, f"{shown} file {path} does not exist", path)
            return
        if link.kind == "link":
            self.problem(key, f"{shown} file {path} is a symlink (MindIE refuses links)", path,
                         f"copy the file to {path} (a Secret volume's files are links: mount "
                         "it with subPath or copy it in an init step)")
            return
        if link.kind != "file":
            self.problem(key, f"{shown} {path} is not a regular file", path)
            return
        if not self.facts.check_permissions:
            return
        if not mode_ok(link.mode):
            self.problem(key, f"{shown} file {path} has mode {link.mode:04o} (MindIE requires "
                         "0640 or stricter)", path, f"chmod 600 {path}")
        if link.uid != self.facts.server_uid:
            self.problem(key, f"{shown} file {path} is owned by uid {link.uid}, not uid "
                         f"{self.facts.server_uid} that runs the server", path,
                         f"chown {self.facts.server_uid} {path}")

    def directory(self, key: str, path: str) -> bool:
        info = self.fs.stat(path)
        if info is None or info.kind != "dir":
            self.problem(key, f"{self.prefix}.{key} directory {path} does not exist", path)
            return False
        return True

    def at_home(self, value: str) -> str:
        return f"{self.facts.home}/{value}"

    def key_file(self, key: str) -> None:
        value = self.string(key)
        if not value:
            self.problem(key, f"{self.prefix}.{key} is not set")
        else:
            self.file(key, self.at_home(value))

    def cas(self, files_key: str, dir_key: str) -> None:
        names = self.names(files_key)
        if not 1 <= len(names) <= _MAX_TLS_FILES:
            self.problem(files_key, f"{self.prefix}.{files_key} lists {len(names)} CA file(s); "
                         f"MindIE needs 1 to {_MAX_TLS_FILES}")
        folder = self.at_home(self.string(dir_key))
        self.directory(dir_key, folder)
        for name in names:
            self.file(files_key, folder + name)

    def crls(self, files_key: str, dir_key: str) -> None:
        """CRLs may be omitted: checked only when both the directory and the list are set."""
        names = self.names(files_key)
        if not self.string(dir_key) or not names:
            return
        if len(names) > _MAX_TLS_FILES:
            self.problem(files_key, f"{self.prefix}.{files_key} lists {len(names)} CRL files; "
                         f"MindIE takes at most {_MAX_TLS_FILES}")
        folder = self.at_home(self.string(dir_key))
        self.directory(dir_key, folder)
        for name in names:
            self.file(files_key, folder + name)


def _https(server: Mapping[str, Any], facts: StartupFacts, fs: FileView
           ) -> list[StartupProblem]:
    tls = _Tls(server, "ServerConfig", "https", _HTTPS_REMEDY.format(home=facts.home), facts,
               fs)
    ip = facts.container_ip or server.get("ipAddress")
    mgmt_ip = (facts.container_management_ip or server.get("managementIpAddress")
               or server.get("ipAddress"))
    port = server.get("port")
    mgmt_port = server.get("managementPort", port)
    shared = mgmt_ip == ip and mgmt_port == port and mgmt_port == server.get("metricsPort")
    for ep in (_BUSINESS,) if shared else (_BUSINESS, _MANAGEMENT, _METRICS):
        tls.key_file(ep.cert)
        tls.crls(ep.crl_files, ep.crl_dir)
        tls.cas(ep.ca_files, "tlsCaPath")  # every endpoint's CAs live under tlsCaPath
        tls.key_file(ep.key)
    return tls.out


def _internode_tls(backend: Mapping[str, Any], facts: StartupFacts, fs: FileView
                   ) -> list[StartupProblem]:
    """Multi-node only: BackendConfig's inter-node TLS files (backend_config.cpp
    `CheckInterTlsParam`). CRLs are left out: MindIE checks that directory as a file."""
    remedy = (f"mount the inter-node certificates under {facts.home}/security, or leave "
              "ASCEND_NODE_TLS_CERTS unset so `ascend-node boot` turns inter-node TLS off")
    tls = _Tls(backend, "BackendConfig", "internode-tls", remedy, facts, fs)
    tls.key_file("interNodeTlsCert")
    tls.key_file("interNodeTlsPk")
    tls.cas("interNodeTlsCaFiles", "interNodeTlsCaPath")
    return tls.out


# -------------------------------------------------------------------------- one line

def summarise(problems: Sequence[StartupProblem]) -> tuple[str, str]:
    """(cause, hint) for one error line: the first refusal named in full, the rest of its
    kind counted, other kinds named by key; every distinct remedy once."""
    first = problems[0]
    same = [p for p in problems if p.rule == first.rule]
    others = [p for p in problems if p.rule != first.rule]
    cause = first.cause
    if first.rule == "https":
        cause = f"ServerConfig.httpsEnabled is true but {cause}"
    elif first.rule == "internode-tls":
        cause = f"BackendConfig.interNodeTLSEnabled is true but {cause}"
    if len(same) > 1:
        noun = "TLS paths" if first.rule in ("https", "internode-tls") else "problems like it"
        cause += f" (and {len(same) - 1} more {noun})"
    if others:
        keys = list(dict.fromkeys(p.key for p in others))
        shown = ", ".join(keys[:3]) + (", ..." if len(keys) > 3 else "")
        cause += f"; {len(others)} more problem(s): {shown}"
    remedies = list(dict.fromkeys(p.remedy for p in problems if p.remedy))
    hint = "; ".join(remedies[:3])
    hint += ("; " if hint else "") + "`ascend-node doctor` lists every problem"
    return f"MindIE would refuse to start: {cause}", hint


__all__ = [
    "DEFAULT_MIES_INSTALL_PATH",
    "MODEL_NAME_RULE",
    "DiskView",
    "FileInfo",
    "FileView",
    "StartupFacts",
    "StartupProblem",
    "facts_from_env",
    "mode_ok",
    "model_name_ok",
    "startup_problems",
    "summarise",
]
