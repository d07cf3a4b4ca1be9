"""Checks of MindIE's config.json: a file MindIE accepts, in agreement with the rank table
and with this node's devices (MindIE validates these fields at parse time)."""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

from ascend_node.doctor.report import CheckResult, Finding, ok, skip, verdict
from ascend_node.errors import ConfigError


@dataclass(frozen=True)
class MindieState:
    path: Path
    explicit: bool
    config: Optional[dict[str, Any]]
    error: str = ""
    mode: Optional[int] = None
    uid: Optional[int] = None
    symlink: bool = False


def read_mindie_state(environ: Mapping[str, str]) -> MindieState:
    from ascend_node.handoff import mindie_config as mindie

    path = mindie.config_path_from_env(environ)
    explicit = bool(environ.get("MIES_CONFIG_JSON_PATH", "").strip())
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return MindieState(path, explicit, None, "absent")
    except OSError as exc:
        return MindieState(path, explicit, None, f"cannot be read: {exc.strerror}")
    link = stat.S_ISLNK(info.st_mode)
    try:
        real = os.stat(path)
        config = mindie.load_config(path)
    except (ConfigError, OSError) as exc:
        cause = exc.cause if isinstance(exc, ConfigError) else str(exc.strerror)
        return MindieState(path, explicit, None, cause, symlink=link)
    return MindieState(path, explicit, config, "", stat.S_IMODE(real.st_mode), real.st_uid,
                       link)


def check_mindie_config(m: MindieState, owner_uid: int) -> CheckResult:
    """`mindie.config`: readable JSON, and a file MindIE accepts (mode <= 0640, owner, no link)."""
    cid = "mindie.config"
    if m.config is None and m.error == "absent":
        if m.explicit:
            return CheckResult(cid, "fail", f"MIES_CONFIG_JSON_PATH={m.path} does not exist",
                               "point MIES_CONFIG_JSON_PATH at MindIE's config.json")
        return skip(cid, f"no MindIE config at {m.path} (not a MindIE container)")
    if m.config is None:
        return CheckResult(cid, "fail", f"{m.path}: {m.error}",
                           "fix the file or restore MindIE's default config.json")
    findings = []
    if m.symlink:
        findings.append(Finding("fail", f"{m.path} is a symlink: MindIE refuses links",
                                "let `ascend-node boot` write a regular copy"))
    if m.mode is not None and ((m.mode >> 6) & 7 > 6 or (m.mode >> 3) & 7 > 4 or m.mode & 7):
        findings.append(Finding("fail", f"{m.path} has mode {m.mode:04o}: MindIE requires "
                                "0640 or stricter", f"chmod 640 {m.path}"))
    if m.uid is not None and m.uid != owner_uid:
        findings.append(Finding("fail", f"{m.path} is owned by uid {m.uid}, not uid "
                                f"{owner_uid} that runs the server",
                                "give it to the server's uid (--file-owner)"))
    return verdict(cid, findings, f"{m.path} readable, mode and owner accepted")


def backend_config(config: Mapping[str, Any]) -> Mapping[str, Any]:
    """`BackendConfig` of a config.json, or {} when it is missing or not an object."""
    backend = config.get("BackendConfig")
    return backend if isinstance(backend, Mapping) else {}


def check_mindie_multinode(
    m: MindieState, server_count: Optional[int], node_count: Optional[int], table_used: bool,
) -> CheckResult:
    """`mindie.multinode`: multiNodesInferEnabled agrees with the table's server_count
    (MindIE decides multi-node from that flag alone)."""
    cid = "mindie.multinode"
    if m.config is None:
        return skip(cid, "no MindIE config")
    enabled = backend_config(m.config).get("multiNodesInferEnabled")
    count = server_count if server_count is not None else node_count
    where = "the rank table's server_count" if server_count is not None else "the job's nodes"
    if count is None:
        return CheckResult(cid, "warn", "node count unknown (no rank table, no identity)")
    fix = "set BackendConfig.multiNodesInferEnabled accordingly (`ascend-node boot` does)"
    if count > 1 and enabled is not True:
        return CheckResult(cid, "fail", f"{where} is {count} but "
                           f"BackendConfig.multiNodesInferEnabled is {json.dumps(enabled)}", fix)
    if count <= 1 and enabled is True:
        return CheckResult(cid, "fail", f"{where} is {count} but multiNodesInferEnabled is "
                           "true", fix)
    if count > 1 and not table_used:
        return CheckResult(cid, "fail", "multiNodesInferEnabled is true but no rank table is in "
                           "use (RANK_TABLE_FILE unset, no state-dir copy)",
                           "run `ascend-node ranktable` or start through `ascend-node boot`")
    return ok(cid, f"multiNodesInferEnabled={json.dumps(enabled)} for {count} node(s)")


def check_mindie_devices(m: MindieState, local_count: int) -> CheckResult:
    """`mindie.devices`: npuDeviceIds, modelInstanceNumber and worldSize agree with the
    local device count (MindIE checks them at parse time even in multi-node mode)."""
    cid = "mindie.devices"
    if m.config is None:
        return skip(cid, "no MindIE config")
    backend = backend_config(m.config)
    ids = backend.get("npuDeviceIds")
    deploy = backend.get("ModelDeployConfig")
    models = deploy.get("ModelConfig") if isinstance(deploy, Mapping) else None
    world = models[0].get("worldSize") if (isinstance(models, list) and models
                                           and isinstance(models[0], Mapping)) else None
    fix = (f"set npuDeviceIds to [[0..{local_count - 1}]], modelInstanceNumber to 1 and "
           f"worldSize to {local_count} (`ascend-node boot` does)")
    findings = []
    if not (isinstance(ids, list) and ids and all(isinstance(g, list) for g in ids)):
        findings.append(Finding("fail", f"BackendConfig.npuDeviceIds is {json.dumps(ids)}, "
                                "not a list of device-id lists", fix))
    else:
        if backend.get("modelInstanceNumber") != len(ids):
            findings.append(Finding("fail", f"modelInstanceNumber "
                                    f"{json.dumps(backend.get('modelInstanceNumber'))} != "
                                    f"{len(ids)} npuDeviceIds groups", fix))
        if len(ids[0]) != local_count:
            findings.append(Finding("fail", f"npuDeviceIds[0] has {len(ids[0])} devices, this "
                                    f"node has {local_count}", fix))
        if world != len(ids[0]):
            findings.append(Finding("fail", f"ModelConfig[0].worldSize {json.dumps(world)} != "
                                    f"{len(ids[0])} devices in npuDeviceIds[0]", fix))
    return verdict(cid, findings, f"npuDeviceIds and worldSize match {local_count} devices")


def check_mindie_startup(m: MindieState, server_env: Mapping[str, str],
                         owner_uid: int) -> CheckResult:
    """`mindie.startup`: MindIE's own start-up rules that need no NPU (https and its
    certificates, the weight directory's config.json, modelName, npuDeviceIds/worldSize,
    0.0.0.0 listeners, ports), the same function `boot` applies before exec.

    `server_env`: the environment the server gets (this shell's, with the agent's env.json
    over it). The file's own mode and owner are `mindie.config`'s, so not repeated here."""
    from ascend_node.handoff.mindie_startup import DiskView, facts_from_env, startup_problems

    cid = "mindie.startup"
    if m.config is None:
        return skip(cid, "no MindIE config")
    facts = facts_from_env(server_env, owner_uid)
    problems = startup_problems(m.config, facts, DiskView())
    findings = [Finding("fail", p.cause, p.remedy) for p in problems]
    return verdict(cid, findings, f"{m.path} passes MindIE's start-up rules (TLS files under "
                   f"{facts.home})")
