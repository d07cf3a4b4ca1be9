"""What the coordinator's and the controller's pods hand over to MindIE-Motor (pure).

`ascend-node pd-boot -- CMD` in those pods: checks that need no NPU, then `exec`. A refusal
is one line, exit 1, before exec, as for MindIE's own start-up rules: a controller that
starts on a bad configuration fails minutes later, on every rank-table read, in its log.

Controller (MindIE-Motor controller/constant/ControllerConfig.cpp 108-313, 399-443,
516-545; Controller.cpp 164-170): every key it requires at start present with its type;
`deploy_mode` and `role_decision_methods` / `transfer_type` among the values it accepts;
multi-node mode on when the table has more than one instance; the table itself under the
configuration's flags (`motor_rules`); `MINDX_TASK_ID` and `MINDX_SERVER_IP` absent (with
both set the controller asks ClusterD instead of reading the file); then
`GLOBAL_RANK_TABLE_FILE_PATH` pointed at the **live** file `pd-table` keeps current (MindIE-
Motor's own boot.sh copies it once, which without ClusterD is never refreshed).

Coordinator (coordinator/main.cpp 22-45, configure/Configure.cpp 442-446): its
`digs_scheduler_config.deploy_mode` accepted; started as `<CMD> <pod IP> <pod IP>` (its
argv[1] and argv[2] replace the predict and management listen addresses, which the shipped
file sets to 127.0.0.1, unreachable from the other pods).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ascend_node.pd.motor_rules import check_global_table, flags_from_controller_config
from ascend_node.ranktable.values import kind_of, show

DEPLOY_MODES = ("pd_separate", "pd_disaggregation", "pd_disaggregation_single_container",
                "single_node")
CLUSTERD_ENV = ("MINDX_TASK_ID", "MINDX_SERVER_IP")
TABLE_ENV = "GLOBAL_RANK_TABLE_FILE_PATH"
# The controller's required keys by type (ControllerConfig.cpp; defaults in its shipped file).
_NUMBERS = ("rank_table_detecting_seconds", "cluster_synchronization_seconds",
            "disappeared_server_waiting_seconds", "mindie_server_control_port",
            "mindie_server_port", "mindie_server_metric_port", "mindie_ms_coordinator_port",
            "node_manager_port", "mindie_ms_coordinator_external_port", "controller_alarm_port",
            "initial_dist_server_port", "server_online_attempt_times",
            "server_online_wait_seconds", "init_role_attempt_times", "check_role_attempt_times",
            "check_role_wait_seconds", "http_timeout_seconds", "http_retries",
            "default_p_rate", "default_d_rate")
_STRINGS = ("deploy_mode", "global_rank_table_file_path", "role_decision_methods",
            "digs_model_config_path", "digs_machine_config_path", "model_type",
            "transfer_type")
_BOOLS = ("allow_all_zero_ip_listening", "is_heterogeneous")
_OBJECTS = ("process_manager", "cluster_status", "digs_periodic_role_decision", "http_server",
            "tls_config")


@dataclass(frozen=True)
class Refusal:
    """Why MindIE-Motor would not come up: the key, what it holds, and the remedy."""

    where: str
    message: str

    def __str__(self) -> str:
        return f"{self.where}: {self.message}"


def controller_problems(config: Any, table: Any, environ: Mapping[str, str]) -> list[Refusal]:
    """Every reason the controller would fail on this configuration and table."""
    out: list[Refusal] = []
    for name in CLUSTERD_ENV:
        if environ.get(name):
            out.append(Refusal(name, f"is set ({show(environ[name])}): with MINDX_TASK_ID and "
                               "MINDX_SERVER_IP the controller asks ClusterD for the table "
                               "instead of reading the file; unset both"))
    if not isinstance(config, Mapping):
        out.append(Refusal("ms_controller.json", f"is {kind_of(config)}, not a JSON object"))
        return out
    for keys, kinds, what in ((_NUMBERS, (int, float), "a number"), (_STRINGS, (str,), "a string"),
                              (_BOOLS, (bool,), "a boolean"), (_OBJECTS, (dict,), "an object")):
        for key in keys:
            if key not in config:
                out.append(Refusal(f"ms_controller.json {key}", "is missing; the controller "
                                   "requires it (its shipped file has the default)"))
            elif not isinstance(config[key], kinds) or (
                    what == "a number" and isinstance(config[key], bool)):
                out.append(Refusal(f"ms_controller.json {key}", f"is {kind_of(config[key])} "
                                   f"{show(config[key])}, not {what}"))
    checks = (("deploy_mode", DEPLOY_MODES), ("role_decision_methods", ("digs",)),
              ("transfer_type", ("D2DTransfer",)))
    for key, allowed in checks:
        value = config.get(key)
        if isinstance(value, str) and value not in allowed:
            out.append(Refusal(f"ms_controller.json {key}", f"is {show(value)}; the controller "
                               f"accepts {', '.join(allowed)}"))
    if config.get("has_flex") is True:
        out.append(Refusal("ms_controller.json has_flex", "is true, which the controller "
                           "refuses"))
    try:
        flags = flags_from_controller_config(config)
    except ValueError as exc:
        out.append(Refusal("ms_controller.json", str(exc)))
        return out
    groups = table.get("server_group_list") if isinstance(table, Mapping) else None
    instances = [g for g in groups or [] if isinstance(g, Mapping)
                 and str(g.get("group_id", "")) not in ("0", "1")]
    if len(instances) > 1 and not flags.multi_node:
        out.append(Refusal("ms_controller.json multi_node_infer_config."
                           "multi_node_infer_enable", f"is false, but the service has "
                           f"{len(instances)} instances: set it to true (single-node mode "
                           "reads one instance group)"))
        return out
    out.extend(Refusal(p.path, p.message) for p in check_global_table(table, flags))
    return out


def coordinator_problems(config: Any) -> list[Refusal]:
    """Every reason the coordinator would refuse its configuration at start."""
    if not isinstance(config, Mapping):
        return [Refusal("ms_coordinator.json", f"is {kind_of(config)}, not a JSON object")]
    digs = config.get("digs_scheduler_config")
    mode = digs.get("deploy_mode") if isinstance(digs, Mapping) else None
    if mode not in DEPLOY_MODES:
        return [Refusal("ms_coordinator.json digs_scheduler_config.deploy_mode",
                        f"is {show(mode)}; the coordinator accepts {', '.join(DEPLOY_MODES)}")]
    return []


def controller_env(environ: Mapping[str, str], table_path: str) -> dict[str, str]:
    """The controller's environment: the live table's path; nothing of ClusterD's."""
    env = {k: v for k, v in environ.items() if k not in CLUSTERD_ENV}
    env[TABLE_ENV] = table_path
    return env


def coordinator_argv(command: Sequence[str], pod_ip: str) -> list[str]:
    """The coordinator's command, with its two listen addresses when none were given."""
    argv = list(command)
    return [*argv, pod_ip, pod_ip] if len(argv) == 1 else argv
