"""Every knob of the contract, each with its environment twin and where its value came from.

An image is configured without changing its command, so every option has an
environment twin (docs/design.md, "Commands"). Precedence: flag, then environment,
then default. `--verbose` prints the `sources` map, because "which value won" is the
first question when a multi-node job misbehaves.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Literal, Optional

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from ascend_node.discover.identity import check_run_id, run_id_from_volcano_hosts
from ascend_node.errors import ConfigError, refused_value
from ascend_node.preflight.policy import parse_policy
from ascend_node.quantities import parse_seconds

DEFAULT_HCCL_JSON = "/user/serverid/devindex/config/hccl.json"
"""Where MindCluster's Ascend Operator mounts the rank table it writes (Ascend/mind-cluster
component/ascend-operator/pkg/ranktable/ and
docs/zh/scheduling/06_api/14_hccl.json_file_description.md)."""


class Settings(BaseModel):
    """Validated settings; `sources[name]` says flag / environment variable / default."""

    model_config = ConfigDict(defer_build=True, frozen=True, extra="forbid")

    shared_dir: Optional[Path] = None
    run_id: Optional[str] = None
    timeout: float = Field(900.0, gt=0, allow_inf_nan=False)
    master_file: Path = Path("/master")
    world_size_file: Path = Path("/world_size")
    state_dir: Path = Path("/run/ascend-node")
    devices: Optional[str] = None
    hccn_tool: Optional[str] = None
    npu_smi: Optional[str] = None
    hccn_conf: Path = Path("/etc/hccn.conf")
    file_owner: Optional[tuple[int, int]] = None
    tool_timeout: float = Field(10.0, gt=0, allow_inf_nan=False)
    allow_uneven_devices: bool = False
    poll_interval: float = Field(0.2, gt=0, le=30, allow_inf_nan=False)
    progress_interval: float = Field(10.0, gt=0, allow_inf_nan=False)
    master_port: Optional[int] = Field(None, ge=1, le=65535)
    table_version: Literal["auto", "1.0", "1.2"] = "auto"
    # The Job was rendered for Atlas A3 SuperPoD nodes (`manifest --a3`): a node that
    # reports no super pod says so loudly instead of quietly joining a v1.0 table.
    a3: bool = False
    table_source: Literal["auto", "volume", "mindcluster"] = "auto"
    hccl_json: Path = Path(DEFAULT_HCCL_JSON)
    # Where the pods meet: on the shared volume (the default) or through the Kubernetes API
    # (`kube`: no shared directory needed; docs/rendezvous.md "Through the Kubernetes API").
    # No `auto`: guessing from a missing directory would turn a PVC that failed to mount
    # into a silent switch to the API, with a Role the job may not have.
    rendezvous: Literal["volume", "kube"] = "volume"
    # None: strict, or warn for `boot` into a training launcher (preflight.policy)
    preflight: Optional[Literal["strict", "warn", "off"]] = None
    preflight_ping_timeout: float = Field(5.0, gt=0, le=120, allow_inf_nan=False)
    # How long a member waits for a process still holding its NPUs (preflight.gather).
    preflight_hold_wait: float = Field(30.0, ge=0, le=600, allow_inf_nan=False)
    # Where the container's CANN and driver live (their version files, preflight).
    ascend_root: Path = Path("/usr/local/Ascend")
    # The file holding the job's rendezvous key (a mounted Secret). The key itself is
    # never a setting: `rendezvous.seal.load_key` reads it, so --verbose cannot print it.
    rendezvous_key_file: Optional[Path] = None
    sources: dict[str, str] = Field(default_factory=dict)

    @field_validator("file_owner", mode="before")
    @classmethod
    def _owner(cls, value: Any) -> Any:
        if value is None or isinstance(value, tuple):
            return value
        return parse_owner(str(value))


def parse_owner(text: str) -> tuple[int, int]:
    """`UID[:GID]` (numeric; GID defaults to the running gid)."""
    uid_s, _, gid_s = text.strip().partition(":")
    if not uid_s.isdigit() or (gid_s and not gid_s.isdigit()):
        raise ValueError(f"{text!r} is not UID[:GID] with numeric ids")
    return int(uid_s), int(gid_s) if gid_s else os.getgid()


def _choice(*allowed: str) -> Callable[[str], str]:
    def parse(text: str) -> str:
        value = text.strip().lower()
        if value not in allowed:
            raise ValueError(f"{text!r} is not one of {', '.join(allowed)}")
        return value
    return parse


def _bool(text: str) -> bool:
    low = text.strip().lower()
    if low in ("1", "true", "yes", "on"):
        return True
    if low in ("0", "false", "no", "off", ""):
        return False
    raise ValueError(f"{text!r} is not a boolean (use 1/0, true/false)")


@dataclass(frozen=True)
class Option:
    name: str
    flag: Optional[str]
    env: str
    fallbacks: tuple[str, ...] = ()  # further environment variables, in order
    parse: Callable[[str], Any] = str


OPTIONS: tuple[Option, ...] = (
    Option("shared_dir", "--shared-dir", "ASCEND_NODE_SHARED_DIR", ("MODEL_PATH",), Path),
    Option("run_id", "--run-id", "ASCEND_NODE_RUN_ID", ("KUBEFLOW_RUN_ID", "KFJ_RUN_ID")),
    Option("timeout", "--timeout", "ASCEND_NODE_TIMEOUT", (), parse_seconds),
    Option("master_file", "--master-file", "ASCEND_NODE_MASTER_FILE", (), Path),
    Option("world_size_file", "--world-size-file", "ASCEND_NODE_WORLD_SIZE_FILE", (), Path),
    Option("state_dir", "--state-dir", "ASCEND_NODE_STATE_DIR", (), Path),
    Option("devices", "--devices", "ASCEND_NODE_DEVICES"),
    Option("hccn_tool", "--hccn-tool", "ASCEND_NODE_HCCN_TOOL"),
    Option("npu_smi", None, "ASCEND_NODE_NPU_SMI"),
    Option("hccn_conf", None, "ASCEND_NODE_HCCN_CONF", (), Path),
    Option("file_owner", "--file-owner", "ASCEND_NODE_FILE_OWNER", (), parse_owner),
    Option("tool_timeout", None, "ASCEND_NODE_TOOL_TIMEOUT", (), parse_seconds),
    Option("allow_uneven_devices", "--allow-uneven-devices",
           "ASCEND_NODE_ALLOW_UNEVEN_DEVICES", (), _bool),
    Option("poll_interval", None, "ASCEND_NODE_POLL_INTERVAL", (), parse_seconds),
    Option("progress_interval", None, "ASCEND_NODE_PROGRESS_INTERVAL", (), parse_seconds),
    Option("master_port", "--master-port", "ASCEND_NODE_MASTER_PORT", ("MASTER_PORT",), int),
    Option("table_version", "--table-version", "ASCEND_NODE_TABLE_VERSION", (),
           _choice("auto", "1.0", "1.2")),
    Option("a3", None, "ASCEND_NODE_A3", (), _bool),
    Option("table_source", "--table-source", "ASCEND_NODE_TABLE_SOURCE", (),
           _choice("auto", "volume", "mindcluster")),
    Option("hccl_json", "--hccl-json", "ASCEND_NODE_HCCL_JSON", (), Path),
    Option("rendezvous", "--rendezvous", "ASCEND_NODE_RENDEZVOUS", (), _choice("volume", "kube")),
    Option("preflight", "--preflight", "ASCEND_NODE_PREFLIGHT", (), parse_policy),
    Option("preflight_ping_timeout", None, "ASCEND_NODE_PREFLIGHT_PING_TIMEOUT", (),
           parse_seconds),
    Option("preflight_hold_wait", None, "ASCEND_NODE_PREFLIGHT_HOLD_WAIT", (),
           parse_seconds),
    Option("ascend_root", None, "ASCEND_NODE_ASCEND_ROOT", (), Path),
    Option("rendezvous_key_file", "--rendezvous-key-file", "ASCEND_NODE_RENDEZVOUS_KEY_FILE",
           (), Path),
)


def resolve_settings(flags: Mapping[str, Any], environ: Mapping[str, str]) -> Settings:
    """Flags (None = not given) over environment over defaults; the error names the culprit:
    a refused flag is a usage error (2), a refused environment variable a ConfigError (1)."""
    values: dict[str, Any] = {}
    sources: dict[str, str] = {}
    for opt in OPTIONS:
        given = flags.get(opt.name)
        if given is not None and given is not False:
            values[opt.name], sources[opt.name] = given, f"flag {opt.flag}"
            continue
        for var in (opt.env, *opt.fallbacks):
            raw = environ.get(var)
            if raw is not None and raw.strip():
                try:
                    values[opt.name] = opt.parse(raw.strip())
                except ValueError as exc:
                    raise ConfigError(
                        f"{var}={raw!r} is invalid: {_why(exc)}",
                        f"fix or unset {var}" + (f" (or pass {opt.flag})" if opt.flag else ""),
                    ) from exc
                sources[opt.name] = f"environment {var}"
                break
        else:
            sources[opt.name] = "default"
    if "run_id" not in values:
        found = run_id_from_volcano_hosts(environ)
        if found:
            values["run_id"], sources["run_id"] = found, "discovered (Volcano job name)"
    if "run_id" in values:
        values["run_id"] = check_run_id(str(values["run_id"]), sources["run_id"])
    try:
        return Settings(**values, sources=sources)
    except ValidationError as exc:
        err = exc.errors()[0]
        name = str(err["loc"][0]) if err["loc"] else "?"
        src = sources.get(name, "?")
        flag = next((o.flag for o in OPTIONS if o.name == name), None)
        var = src[len("environment "):] if src.startswith("environment ") else ""
        # Quote what the operator wrote, under the name they wrote it.
        accepted = accepted_values(err)
        if var:
            raise ConfigError(
                f"{var}={environ.get(var, '')!r} is invalid: {err['msg']}",
                f"fix or unset {var}" + (f" (or pass {flag})" if flag else "")
                + (f": {accepted}" if accepted else ""),
            ) from exc
        shown = flag or name.replace("_", "-")
        raise refused_value(
            src,
            f"{shown}={values.get(name)!r} is invalid: {err['msg']}",
            f"{shown} takes {accepted}" if accepted else f"see `ascend-node <command> --help` "
            f"for {shown}",
        ) from exc


def accepted_values(err: Any) -> str:
    """What a refused value should have been, from the field's own bound (`a value <= 30`),
    so the hint names values instead of pointing at a help that lists none."""
    ctx = err.get("ctx") or {}
    bounds = [f"{word} {ctx[key]:g}" if isinstance(ctx[key], float) else f"{word} {ctx[key]}"
              for key, word in (("gt", ">"), ("ge", ">="), ("lt", "<"), ("le", "<="))
              if key in ctx]
    if bounds:
        return "a value " + " and ".join(bounds)
    if "expected" in ctx:
        return f"one of {ctx['expected']}"
    return ""


def _why(exc: ValueError) -> str:
    text = str(exc)
    return text if text else exc.__class__.__name__


def describe_sources(settings: Settings) -> list[str]:
    """One line per setting: value and where it came from (for --verbose)."""
    lines = []
    for opt in OPTIONS:
        value = getattr(settings, opt.name)
        lines.append(f"{opt.name} = {shown_setting(value)}  "
                     f"[{settings.sources.get(opt.name, 'default')}]")
    return lines


def shown_setting(value: Any) -> str:
    """A setting's value as `--verbose` prints it: a path as the path (`/run/ascend-node`,
    not `PosixPath('/run/ascend-node')`: what the operator typed or can paste), anything
    else as Python writes it (`'r1'`, `None`, `(1000, 1000)`)."""
    return str(value) if isinstance(value, os.PathLike) else repr(value)
