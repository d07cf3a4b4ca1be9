"""Steps 6-8: install, configure, exec — the ENTRYPOINT use of the agent.

After the rank table (steps 1-5, `chain.table.ranktable`), `boot` installs the atb_llm
wheel, sources the vendor `set_env.sh` scripts, patches MindIE's `config.json`, and
replaces itself with the server. Every step is idempotent, so a container restart
repeats nothing that is done and reaches the same result.
"""

from __future__ import annotations

import logging
import os
import shlex
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn, Optional

from ascend_node import events
from ascend_node.chain.table import TableResult, leave_summary
from ascend_node.errors import ConfigError, UsageError
from ascend_node.handoff.exec import check_interpreter, exec_command
from ascend_node.handoff.install import WHEEL_DIR_ENV, install_atb_wheel, wheel_dirs_from_env
from ascend_node.handoff.launchers import LAUNCHERS, USER_WINS, check_msrun_args, plan_launch
from ascend_node.handoff.mindie_config import (
    config_path_from_env,
    load_config,
    patch_config,
    render_config,
    write_config,
)
from ascend_node.handoff.mindie_startup import (
    MODEL_NAME_RULE,
    DiskView,
    facts_from_env,
    model_name_ok,
    startup_problems,
    summarise,
)
from ascend_node.handoff.outputs import StatusDoc, write_env, write_status
from ascend_node.handoff.server_env import (
    HCCL_ROOTINFO,
    EnvChanges,
    proxy_changes,
    rank_table_notes,
    rootinfo_note,
)
from ascend_node.handoff.setenv import capture_set_env, set_env_scripts_from_env
from ascend_node.rendezvous.seal import STRIP_FROM_EXEC
from ascend_node.rendezvous.store import RunPaths
from ascend_node.rendezvous.volume_call import run_watched
from ascend_node.settings import Settings

log = logging.getLogger("ascend_node.boot")

RANK_TABLE_VARS = ("RANK_TABLE_FILE", "RANKTABLEFILE")


@dataclass(frozen=True)
class BootOptions:
    launcher: str = "mindie"
    command: tuple[str, ...] = ()
    https: Optional[bool] = None
    tls_certs: bool = False
    model_name: Optional[str] = None
    model_weight_path: Optional[str] = None
    launcher_args: tuple[str, ...] = ()


MODEL_DIR_ENV = "ASCEND_NODE_MODEL_DIR"
LAUNCHER_ARGS_ENV = "ASCEND_NODE_LAUNCHER_ARGS"


def boot_options_from_env(
    environ: Mapping[str, str], launcher: Optional[str], command: Sequence[str],
    https: Optional[bool], model_name: Optional[str], model_weight_path: Optional[str],
    model_dir: Optional[str] = None, launcher_args: Optional[str] = None,
) -> BootOptions:
    """The boot-only options, flag over environment; a refused flag is a usage error (2),
    a refused variable a ConfigError (1), as for every setting (settings.py)."""
    chosen = launcher or environ.get("ASCEND_NODE_LAUNCHER", "").strip() or "mindie"
    if chosen not in LAUNCHERS:
        raise ConfigError(f"launcher {chosen!r} is not one of {', '.join(LAUNCHERS)}",
                          "use --launcher mindie|msrun|ranktable-env|torch")
    if https is None:
        https = _env_bool(environ, "ASCEND_NODE_HTTPS", "--https / --no-https")
    certs = _env_bool(environ, "ASCEND_NODE_TLS_CERTS") is True
    name, name_from = _pick(model_name, "--model-name", environ, "MODEL_NAME")
    # MODEL_NAME is a common name: only MindIE's boot reads it (a training image may hold
    # anything there); the flag is refused for any launcher.
    if name is not None and (chosen == "mindie" or model_name) and not model_name_ok(name):
        _refuse(name_from, f"{name_from} {name!r} is a modelName MindIE refuses",
                f"use {MODEL_NAME_RULE}")
    # modelWeightPath: the model's own directory when one is given, else MODEL_PATH (which
    # is also the shared directory the rendezvous uses, docs/deploy.md).
    weights, weights_from = _pick(model_weight_path or model_dir,
                                  "--model-weight-path" if model_weight_path else "--model-dir",
                                  environ, MODEL_DIR_ENV)
    if weights is not None and not weights.startswith("/"):
        _refuse(weights_from, f"{weights_from} {weights!r} is not an absolute path",
                "give the directory holding the model's config.json and weights")
    if weights is None:
        weights = environ.get("MODEL_PATH", "").strip() or None  # blank = unset
    args_text, args_from = _pick(launcher_args, "--launcher-args", environ, LAUNCHER_ARGS_ENV)
    extra: tuple[str, ...] = ()
    if args_text is not None:
        try:
            if chosen != "msrun":
                raise UsageError(f"{args_from} is for msrun, not launcher {chosen}",
                                 "give the launcher's options in the command after --")
            extra = tuple(check_msrun_args(shlex.split(args_text)))
        except ValueError as exc:  # shlex: an unclosed quote
            _refuse(args_from, f"{args_from} {args_text!r} is not shell words: {exc}",
                    "quote it as a shell would")
        except UsageError as exc:
            _refuse(args_from, f"{args_from}: {exc.cause}", exc.hint)
    return BootOptions(
        launcher=chosen, command=tuple(command), https=https, tls_certs=certs,
        model_name=name, model_weight_path=weights, launcher_args=extra,
    )


def _pick(flag_value: Optional[str], flag: str, environ: Mapping[str, str], var: str
          ) -> tuple[Optional[str], str]:
    """(value, what it came from) — the flag, else the variable (blank = unset)."""
    if flag_value is not None and flag_value != "":
        return flag_value, flag
    raw = environ.get(var, "").strip()
    return (raw, var) if raw else (None, var)


def _refuse(source: str, cause: str, hint: str) -> NoReturn:
    if source.startswith("--"):
        raise UsageError(cause, hint)
    raise ConfigError(cause, f"{hint}; or fix or unset {source}")


def _env_bool(environ: Mapping[str, str], name: str, flag: str = "") -> Optional[bool]:
    """A yes/no variable: None when unset or empty; a typo is an error, not a silent no
    (`ASCEND_NODE_HTTPS=of` must not keep MindIE's https on unnoticed)."""
    raw = environ.get(name, "")
    value = raw.strip().lower()
    if not value:
        return None
    if value in ("1", "true", "yes", "on"):
        return True
    if value in ("0", "false", "no", "off"):
        return False
    raise ConfigError(f"{name}={raw!r} is not a boolean (use 1/0, true/false)",
                      f"fix or unset {name}" + (f" (or pass {flag})" if flag else ""))


def prepare_exec(
    settings: Settings, environ: Mapping[str, str], result: TableResult, opts: BootOptions,
) -> tuple[list[str], dict[str, str], dict[str, str], EnvChanges]:
    """Everything before exec: returns (argv, full env, the variables the agent set, what
    it took out of the environment and noted about it)."""
    identity = result.discovery.identity
    state_dir = str(settings.state_dir)

    dirs = wheel_dirs_from_env(environ)
    with events.phase("install") as detail:
        # The wheel may sit on the shared volume: a read of it stuck past the pod's
        # deadline is exit 4 naming the volume (pip's own child has its time-out).
        installed = run_watched(
            lambda: install_atb_wheel(dirs, state_dir, required=WHEEL_DIR_ENV in environ),
            result.started + settings.timeout, dirs[0], settings.timeout,
            settings.progress_interval, what="the atb_llm wheel could not be read",
            name="install", stuck_only=True)
        detail["result"] = "no wheel" if installed is None else installed.reason
    if installed is None:
        log.info("no atb_llm wheel in %s; assuming the image ships it", ", ".join(dirs))
    else:
        log.info("atb_llm %s: %s", installed.wheel.version, installed.reason)

    # The rendezvous key stays with the agent: neither the vendor scripts nor the server
    # get it (it would show in their /proc/<pid>/environ and in every child they start).
    environ = {k: v for k, v in environ.items() if k not in STRIP_FROM_EXEC}
    scripts = set_env_scripts_from_env(environ)
    with events.phase("set_env", scripts=len(scripts)):
        delta = capture_set_env(scripts, dict(environ)) if scripts else None
    env = delta.apply(environ) if delta else dict(environ)
    for name in STRIP_FROM_EXEC:  # in case a set_env script exported it again
        env.pop(name, None)
    if delta:
        log.info("sourced %s (%d variables set)", ", ".join(delta.scripts), len(delta.changed))
        for line in delta.output:
            log.debug("set_env: %s", line)

    table_env = dict(result.env)
    one_node = identity.node_count == 1
    pd_server = _is_pd_server(environ)
    config_path: Optional[Path] = None
    if opts.launcher == "mindie":
        with events.phase("config"):
            config_path = _configure_mindie(settings, env, result, opts, pd_server)
        if config_path is not None and env.get("MIES_CONFIG_JSON_PATH") == str(config_path):
            table_env["MIES_CONFIG_JSON_PATH"] = str(config_path)  # reported with the rest
        if pd_server:  # the controller talks to its management port on the pod IP
            from ascend_node.pd.server_config import pd_server_env

            table_env.update(pd_server_env(identity.pod_ip))
        if one_node:
            # MindIE's docs: unset the rank table for single-node inference.
            for name in RANK_TABLE_VARS:
                table_env.pop(name, None)
                env.pop(name, None)
    seconds_left = settings.timeout - (time.monotonic() - result.started)
    launch = plan_launch(
        opts.launcher, table=result.table, container_ip=identity.pod_ip,
        command=list(opts.command) or None, rank_table_file=result.env["RANK_TABLE_FILE"],
        mindie_env=table_env, master_port=settings.master_port, seconds_left=seconds_left,
        launcher_args=opts.launcher_args,
    )
    nic = _nic_env(opts.launcher, identity.pod_ip, env)
    planned = {k: v for k, v in launch.env.items() if not (k in USER_WINS and env.get(k))}
    # A wheel installed for a non-root uid lives under the state dir (install.private_lib_for).
    wheel_env = dict(installed.env) if installed is not None else {}
    added = {**(delta.changed if delta else {}), **wheel_env, **table_env, **planned, **nic}
    env.update(wheel_env)
    env.update(table_env)
    env.update(planned)
    env.update(nic)
    changes = server_env_changes(environ, opts.launcher, identity.node_count,
                                 None if (opts.launcher == "mindie" and one_node)
                                 else result.env["RANK_TABLE_FILE"])
    for name in changes.unset:
        env.pop(name, None)
    for note in changes.notes:
        log.info("server environment: %s", note)
    if config_path is not None:
        with events.phase("config_check"):
            check_mindie_startup(config_path, env, settings)
    if launch.check is not None:
        found = check_interpreter(*launch.check, env)
        log.info("%s will start %s, which finds %s", launch.check.launcher, found,
                 launch.check.module)
    return list(launch.argv), env, added, changes


def server_env_changes(environ: Mapping[str, str], launcher: str, node_count: int,
                       table: Optional[str], rootinfo: Path = Path(HCCL_ROOTINFO)
                       ) -> EnvChanges:
    """Proxies unset for the server, and notes on rank tables from elsewhere (items 4 and
    6 of docs/preflight.md, "In boot")."""
    proxies = proxy_changes(environ, launcher, node_count)
    notes = [*proxies.notes, *rank_table_notes(environ, table)]
    found = rootinfo_note(rootinfo, table)
    if found:
        log.warning("%s", found)
        notes.append(found)
    return EnvChanges(proxies.unset, tuple(notes))


def check_mindie_startup(path: Path, env: Mapping[str, str], settings: Settings) -> None:
    """MindIE's own start-up rules (mindie_startup), on the file just written and the
    environment the server will get: ConfigError with one line instead of MindIE's many."""
    problems = startup_problems(
        load_config(path), facts_from_env(env, _server_uid(settings), str(path)), DiskView())
    for p in problems:
        log.debug("MindIE start-up check: %s", p.cause)
    if problems:
        raise ConfigError(*summarise(problems))
    log.info("MindIE config %s passes MindIE's start-up checks", path)


def _server_uid(settings: Settings) -> int:
    return settings.file_owner[0] if settings.file_owner else os.getuid()


def _nic_env(launcher: str, pod_ip: str, env: Mapping[str, str]) -> dict[str, str]:
    """GLOO_SOCKET_IFNAME / HCCL_IF_IP where the defaults may miss the pod IP (hostnic)."""
    from ascend_node.handoff.hostnic import GLOO_LAUNCHERS, HCCL_LAUNCHERS, nic_plan, probe_nic

    if launcher not in GLOO_LAUNCHERS + HCCL_LAUNCHERS:
        return {}
    plan = nic_plan(launcher, pod_ip, probe_nic(), env)
    for note in plan.notes:
        log.warning("%s", note)
    return plan.env


def _is_pd_server(environ: Mapping[str, str]) -> bool:
    """A prefill or decode pod of a PD service; the PD modules load only for one."""
    if not environ.get("ASCEND_NODE_PD_TASK"):
        return False
    from ascend_node.pd.roles import is_pd_server

    return is_pd_server(environ)


def _configure_mindie(
    settings: Settings, env: dict[str, str], result: TableResult, opts: BootOptions,
    pd_server: bool = False,
) -> Optional[Path]:
    """Patch config.json; its path, or None when this is not a MindIE container."""
    path = config_path_from_env(env)
    explicit = bool(env.get("MIES_CONFIG_JSON_PATH"))
    if not path.exists() and not explicit:
        log.info("no MindIE config at %s; skipping config.json (set MIES_CONFIG_JSON_PATH)",
                 path)
        return None
    config = load_config(path)
    identity = result.discovery.identity
    patched, changes = patch_config(
        config, nodes=identity.node_count,
        local_device_ids=list(range(len(result.discovery.devices))),
        container_ip=identity.pod_ip, https_enabled=opts.https,
        tls_certs_configured=opts.tls_certs, model_name=opts.model_name,
        model_weight_path=opts.model_weight_path,
    )
    if pd_server:  # a prefill or decode instance of a PD service (docs/pd.md)
        from ascend_node.pd.server_config import patch_pd_server

        patched, more = patch_pd_server(patched)
        changes += more
    owner = settings.file_owner
    uid, gid = owner if owner else (None, None)
    try:
        current = path.read_bytes()
    except OSError:
        current = b""
    st = path.lstat() if path.exists() else None
    same_owner = st is not None and (uid is None or st.st_uid == uid)
    if (current == render_config(patched).encode() and st is not None
            and not path.is_symlink() and (st.st_mode & 0o777) == 0o640 and same_owner):
        log.info("MindIE config %s already patched", path)
        return path
    if not explicit and not os.access(path.parent, os.W_OK | os.X_OK):
        # A non-root image whose MindIE install is root's (docs/deploy.md, "Non-root"):
        # the patched copy goes under the state dir, and the server reads it from there
        # (MIES_CONFIG_JSON_PATH, MindIE's own variable). An explicit path stays an error.
        moved = settings.state_dir / "mindie-config.json"
        log.info("MindIE config %s: its directory is not writable for uid %d; writing the "
                 "patched copy %s (MIES_CONFIG_JSON_PATH)", path, os.getuid(), moved)
        path = moved
        env["MIES_CONFIG_JSON_PATH"] = str(moved)
    write_config(path, patched, uid, gid)
    log.info("patched MindIE config %s: %s", path, "; ".join(changes) or "no changes")
    return path


def boot(
    settings: Settings, environ: Mapping[str, str], result: TableResult, opts: BootOptions,
) -> NoReturn:
    identity = result.discovery.identity
    try:
        _boot(settings, environ, result, opts)
    except BaseException as exc:
        # The node's timeline summary says how boot ended (never changes the exit code).
        if result.on_volume:
            leave_summary(settings, identity, "boot", "failed", result.attempt_id, exc)
        raise


def _boot(
    settings: Settings, environ: Mapping[str, str], result: TableResult, opts: BootOptions,
) -> NoReturn:
    if result.on_volume:
        # The pre-flight's reach documents are on the volume: watched like the
        # rendezvous, so a volume that stops answering after the table cannot hold the
        # pod past its deadline (exit 4 naming it; `volume_call`).
        run_watched(lambda: reachability(settings, result), result.started + settings.timeout,
                    settings.shared_dir or "the shared directory", settings.timeout,
                    settings.progress_interval, what="the pre-flight could not finish",
                    name="preflight", stuck_only=True)
    else:
        reachability(settings, result)
    argv, env, added, changes = prepare_exec(settings, environ, result, opts)
    write_env(settings.state_dir, added, settings.file_owner, unset=changes.unset,
              notes=changes.notes)
    write_status(settings.state_dir, StatusDoc(
        state="done", phase="exec", command="boot", exit_code=0, run_id=result.run_id,
        attempt_id=result.attempt_id, node=result.discovery.identity.name,
        message=f"exec {argv[0]}"))
    log.info("exec %s", " ".join(argv))
    now = time.time()
    # The last event this process writes: after exec the server owns the pid.
    events.record("exec", now, now, "exec", command=argv[0], launcher=opts.launcher)
    if result.on_volume:
        leave_summary(settings, result.discovery.identity, "boot", "exec", result.attempt_id)
    exec_command(argv, env)


def reachability(settings: Settings, result: TableResult) -> None:
    """Pre-flight pings right after the table, before the slow steps: every node gets
    here within about one poll of the others, so their results meet within seconds."""
    if settings.shared_dir is None or not result.on_volume or result.preflight == "off":
        return
    from ascend_node.preflight.stage import check_reachability  # not imported when off

    write_status(settings.state_dir, StatusDoc(
        state="in_progress", phase="preflight", command="boot", run_id=result.run_id,
        attempt_id=result.attempt_id, node=result.discovery.identity.name))
    with events.phase("preflight", policy=result.preflight) as detail:
        found = check_reachability(
            settings.state_dir, result.preflight, result.preflight_doc or {},
            RunPaths(settings.shared_dir, result.run_id), result.attempt_id,
            result.discovery.identity, result.table, result.discovery.hccn_tool,
            settings.preflight_ping_timeout, result.started, settings.poll_interval,
            key=result.key)
        if found is not None:
            detail.update(pings=len(found.pings), cluster_pings=found.cluster_pings,
                          unreachable=len(found.unreachable))


def describe(argv: Sequence[str], added: Mapping[str, Any]) -> str:
    return f"{' '.join(argv)} with {', '.join(sorted(added))}"


__all__ = ["BootOptions", "boot", "boot_options_from_env", "prepare_exec"]
