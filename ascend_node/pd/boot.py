"""`ascend-node pd-boot -- CMD`: the coordinator's and the controller's start (docs/pd.md).

The door around `handover`'s pure checks: read the configuration files, wait (bounded) for
the global table in the controller's pod, publish the coordinator's addresses, `exec`.
Server pods do not come here: they run `ascend-node boot` under their instance's identity.
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Callable, NoReturn, Optional

from ascend_node.atomic import atomic_write_bytes
from ascend_node.discover.identity import read_pod_ip
from ascend_node.errors import ConfigError, PeerTimeout
from ascend_node.handoff.exec import exec_command
from ascend_node.pd.files import file_rule_problems
from ascend_node.pd.handover import (
    Refusal,
    controller_env,
    controller_problems,
    coordinator_argv,
    coordinator_problems,
)
from ascend_node.pd.motor_rules import check_table_path
from ascend_node.pd.roles import PdIdentity, read_pd_identity
from ascend_node.pd.service import ServicePodDoc, announce, global_table_path
from ascend_node.rendezvous.seal import RendezvousKey
from ascend_node.statedir import DEFAULT_STATE_DIR

log = logging.getLogger("ascend_node.pd")
CONTROLLER_CONFIG_ENV = "MINDIE_MS_CONTROLLER_CONFIG_FILE_PATH"
COORDINATOR_CONFIG_ENV = "MINDIE_MS_COORDINATOR_CONFIG_FILE_PATH"
CONFIG_MODE = 0o640


def pd_boot(command: Sequence[str], environ: Mapping[str, str], shared_dir: Path, run_id: str,
            timeout: float, config: Optional[Path] = None, key: Optional[RendezvousKey] = None,
            execute: Callable[[Sequence[str], Mapping[str, str]], NoReturn] = exec_command,
            clock: Callable[[], float] = time.monotonic,
            sleep: Callable[[float], None] = time.sleep,
            state_dir: Path = DEFAULT_STATE_DIR,
            announcer: Optional[Callable[[PdIdentity], ServicePodDoc]] = None,
            table_path: Optional[Path] = None) -> NoReturn:
    """`announcer` and `table_path`: the coordinator's announcement and the controller's
    table for `--rendezvous kube` (`pd.kube_service`, the table in the controller's own
    pod); by default both on the shared volume under `shared_dir`."""
    me = read_pd_identity(environ)
    if me.is_server:
        raise ConfigError(f"{me.task} is a server: pd-boot starts the coordinator and the "
                          "controller", "run `ascend-node boot` in server pods (their "
                          "instance's identity is in the rendered Job)")
    if not command:
        raise ConfigError("no command after `--`", "give the MindIE-Motor program: "
                          "`pd-boot -- mindie_motor_controller` (or _coordinator)")
    if me.role == "coordinator":
        path = config or _env_path(environ, COORDINATOR_CONFIG_ENV)
        env = dict(environ)
        if path is not None:
            _refuse(coordinator_problems(_read_json(path)), path)
            env[COORDINATOR_CONFIG_ENV] = str(readable_copy(path, state_dir))
        doc = (announcer(me) if announcer is not None
               else announce(shared_dir, run_id, me, environ, key))
        argv = coordinator_argv(command, doc.pod_ip)
        log.info("coordinator %d: %s", me.place, " ".join(argv))
        execute(argv, env)
    path = config or _env_path(environ, CONTROLLER_CONFIG_ENV)
    if path is None:
        raise ConfigError(f"no controller configuration: --controller-config and "
                          f"{CONTROLLER_CONFIG_ENV} are unset",
                          "point either at the ms_controller.json the controller runs with")
    table_path = table_path or global_table_path(shared_dir, run_id)
    why = check_table_path(str(table_path))
    if why is not None:
        raise ConfigError(f"global rank table path {table_path}: {why}",
                          "mount the shared volume at a plain path (no '..')")
    table = _wait_for_table(table_path, timeout, clock, sleep)
    _refuse(controller_problems(_read_json(path), table, environ), path)
    pod_ip, _ = read_pod_ip(environ, lambda: None)
    env = controller_env(environ, str(table_path))
    env.setdefault("POD_IP", pod_ip)  # the controller's probe and alarm listeners use it
    env[CONTROLLER_CONFIG_ENV] = str(readable_copy(path, state_dir))
    log.info("controller: %s reading the live table %s", " ".join(command), table_path)
    execute(list(command), env)


def readable_copy(path: Path, state_dir: Path) -> Path:
    """The configuration at a path MindIE-Motor's file check accepts: `path` itself when it
    passes, else a copy under `<state_dir>/motor/`, written by rename, mode 0640, owned by
    this process's uid (the daemon's, after exec).

    MindIE-Motor checks its configuration file as it checks the table (Util.cpp 170-280: no
    `..`, not a symlink, mode 0640 or stricter, owned by its uid). A ConfigMap's mounted
    file is a symlink into `..data/`, mode 0644 and root's: refused on all three counts,
    which is why MindIE-Motor's own boot.sh copies its configuration into `conf/` first.
    The copy is taken after the checks, from the same bytes."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise ConfigError(f"cannot read {path}: {exc.strerror}",
                          "mount the MindIE-Motor configuration into the pod") from exc
    if file_rule_problems(path, os.geteuid()) == ([], True):
        return path
    copy = state_dir / "motor" / path.name
    why = check_table_path(str(copy))
    if why is not None:
        raise ConfigError(f"cannot hand MindIE-Motor a copy of {path} at {copy}: {why}",
                          "set ASCEND_NODE_STATE_DIR to a plain path")
    try:
        copy.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_bytes(copy, data, mode=CONFIG_MODE)
    except OSError as exc:
        raise ConfigError(f"cannot write {copy}: {exc.strerror}",
                          "give the pod a writable state dir (ASCEND_NODE_STATE_DIR)") from exc
    log.info("%s: handing MindIE-Motor a copy at %s (mode 0640, uid %d)", path, copy,
             os.geteuid())
    return copy


def _wait_for_table(path: Path, timeout: float, clock: Callable[[], float],
                    sleep: Callable[[float], None]) -> Any:
    deadline = clock() + timeout
    while True:
        try:
            return json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            pass
        except (OSError, UnicodeDecodeError, ValueError) as exc:
            raise ConfigError(f"cannot read the global rank table {path}: {exc}",
                              "pd-table writes it by rename; check the volume") from exc
        if clock() >= deadline:
            raise PeerTimeout(f"no global rank table at {path} after {timeout:g} s",
                              "pd-table (the controller pod's sidecar) writes it once every "
                              "instance is complete; see its log")
        sleep(0.5)


def _env_path(environ: Mapping[str, str], name: str) -> Optional[Path]:
    value = environ.get(name, "").strip()
    return Path(value) if value else None


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ConfigError(f"cannot read {path}: {exc.strerror}",
                          "mount the MindIE-Motor configuration into the pod") from exc
    except (UnicodeDecodeError, ValueError) as exc:
        raise ConfigError(f"{path} is not JSON: {exc}", "fix the file") from exc


def _refuse(problems: list[Refusal], path: Path) -> None:
    if problems:
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        raise ConfigError(f"MindIE-Motor would refuse to start: {problems[0]}{more}",
                          f"fix {path} or the environment; `ascend-node validate --global` "
                          "lists the table's problems")
