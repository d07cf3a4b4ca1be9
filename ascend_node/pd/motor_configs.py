"""The controller's and the coordinator's configuration for a rendered PD Job (pure).

`ascend-node manifest --kind mindie-pd` puts these two files into a ConfigMap, so that the
controller's configuration says what the Job's shape says: the P/D flags and instance sizes
the controller checks every instance against (`motor_rules`), multi-node mode on, no TLS on
a cluster-internal service. A hand-edited copy would drift from the Job the first time an
instance size changed; rendering both from one shape keeps them together.

The values are MindIE-Motor's shipped defaults (`config/ms_controller.json`,
`config/ms_coordinator.json` @5dfb024e, copies in `fixtures/mindie-motor/`) with these
changes, each for a reason:

- `multi_node_infer_config.multi_node_infer_enable` true: every instance with more than one
  pod, and a service with more than one instance, needs it (single-node mode reads one
  instance group);
- both `enable_dist_dp_server` false: `ascend-node boot` starts centralized instances only
  (a distributed-DP instance needs MindIE-Motor's node manager and per-DP configs, which
  `boot` refuses); the builder then writes `deploy_server` "0" for both roles
  (`motor_rules.deploy_server_for`) and the controller tells P from D by `node_machine_num`
  (the pods of an instance: NodeScheduler.cpp 282-320), else by its role manager;
- `tp_size` the NPUs of a pod, `dp_size` the pods of an instance, `cp_size` 1: a centralized
  instance must hold exactly tp*dp*cp devices (DpGroupingUtil.cpp), the shape of the
  documented DeepSeek prefill (2 pods x 8 NPUs: dp 2, tp 8);
- every `*_tls_enable` false: the servers of a rendered Job serve plain http on the pod
  network (docs/deploy.md, "TLS"), so the controller and the coordinator talk plain http to
  them and to each other;
- `digs_periodic_role_decision.auto_pd_role_switching_enable` false: the Job names its
  prefill and decode tasks, and the global table keeps their groups; a periodic role switch
  would turn a `prefill-<i>` task into a decode instance behind the operator's back;
- `global_rank_table_file_path` the live table `pd-table` keeps (`pd-boot` also exports it
  as `GLOBAL_RANK_TABLE_FILE_PATH`, which wins).
"""

from __future__ import annotations

import json
from typing import Any

# Which file is which, in the ConfigMap and where it is mounted.
CONTROLLER_FILE = "ms_controller.json"
COORDINATOR_FILE = "ms_coordinator.json"

_CONTROLLER_TLS = ("request_coordinator", "request_server", "http_server", "cluster",
                   "etcd_server", "ccae", "alarm", "external_coordinator")
_COORDINATOR_TLS = ("controller_server", "request_server", "mindie_client",
                    "mindie_mangment", "external", "status", "etcd_server", "alarm_client")


def _node_config(pods: int, npus_per_pod: int) -> dict[str, Any]:
    return {"enable_dist_dp_server": False, "node_machine_num": pods,
            "tp_size": npus_per_pod, "dp_size": pods, "sp_size": 1, "cp_size": 1}


def controller_config(prefill_pods: int, decode_pods: int, npus_per_pod: int,
                      table_path: str) -> dict[str, Any]:
    """ms_controller.json for P instances of `prefill_pods` pods and D instances of
    `decode_pods` pods, each pod with `npus_per_pod` NPUs."""
    return {
        "allow_all_zero_ip_listening": False,
        "deploy_mode": "pd_separate",
        "initial_dist_server_port": 10000,
        "cluster_port": 8899,
        "process_manager": {"to_file": True,
                            "file_path": "./logs/controller_process_status.json"},
        "cluster_status": {"to_file": True, "file_path": "./logs/cluster_status_output.json"},
        "controller_backup_cfg": {"function_sw": False,
                                  "database_server_dns": "etcd.default.svc.cluster.local",
                                  "database_server_port": 2379},
        "global_rank_table_file_path": table_path,
        "scaling_rule_file_path": "./conf/elastic_scaling.json",
        "cluster_synchronization_seconds": 1,
        "rank_table_detecting_seconds": 5,
        "disappeared_server_waiting_seconds": 7200,
        "default_p_rate": 0,
        "default_d_rate": 0,
        "is_heterogeneous": False,
        "server_online_attempt_times": 36,
        "server_online_wait_seconds": 5,
        "init_role_attempt_times": 2,
        "check_role_attempt_times": 300,
        "check_role_wait_seconds": 5,
        "mindie_server_control_port": 1026,
        "mindie_server_port": 1025,
        "mindie_server_metric_port": 1027,
        "controller_alarm_port": 1027,
        "mindie_ms_coordinator_port": 1026,
        "node_manager_port": 1028,
        "mindie_ms_coordinator_external_port": 1028,
        "http_timeout_seconds": 5,
        "http_retries": 3,
        "role_decision_methods": "digs",
        "digs_request_summary_input_length": 3000,
        "digs_request_summary_output_length": 200,
        "digs_model_config_path": "./conf/model_config/llama2-70B.json",
        "digs_machine_config_path": "./conf/machine_config/800IA2.json",
        "digs_prefill_slo": 1000,
        "digs_decode_slo": 50,
        "multi_node_infer_config": {
            "multi_node_infer_enable": True,
            "p_node_config": _node_config(prefill_pods, npus_per_pod),
            "d_node_config": _node_config(decode_pods, npus_per_pod),
        },
        "model_type": "llama2-70B",
        "transfer_type": "D2DTransfer",
        "digs_pp": 1,
        "digs_periodic_role_decision": {"auto_pd_role_switching_enable": False,
                                        "role_decision_time_period": 86400,
                                        "tasks_end_wait_seconds": 300},
        "http_server": {"ip": "127.0.0.1", "port": 1026},
        "tls_config": {f"{name}_tls_enable": False for name in _CONTROLLER_TLS},
        "log_info": {"log_level": "INFO", "to_file": True, "to_stdout": True,
                     "run_log_path": "./logs/ms_controller_run_log.txt",
                     "operation_log_path": "./logs/ms_controller_operation_log.txt",
                     "max_log_str_size": 8192, "max_log_file_size": 20,
                     "max_log_file_num": 10},
    }


def coordinator_config() -> dict[str, Any]:
    """ms_coordinator.json: the shipped file without TLS. Its listen addresses stay
    127.0.0.1: `pd-boot` starts the coordinator with its pod IP as argv[1] and argv[2],
    which replace them (coordinator/main.cpp 22-45). Ports are strings, as it reads them."""
    return {
        "http_config": {
            "allow_all_zero_ip_listening": False,
            "predict_ip": "127.0.0.1", "predict_port": "1025",
            "manage_ip": "127.0.0.1", "manage_port": "1026",
            "alarm_port": "1027", "external_port": "1028", "status_port": "1029",
            "server_thread_num": 10, "client_thread_num": 10,
            "http_timeout_seconds": 600, "keep_alive_seconds": 180,
            "server_name": "MindIE-MS", "user_agent": "Coordinator/1.0",
        },
        "request_limit": {"single_node_max_requests": 1000, "max_requests": 10000,
                          "body_limit": 1},
        "metrics_config": {"enable": False, "trigger_size": 100},
        "prometheus_metrics_config": {"reuse_time": 3},
        "exception_config": {"max_retry": 5, "schedule_timeout": 600,
                             "first_token_timeout": 600, "infer_timeout": 600,
                             "tokenizer_timeout": 300},
        "log_info": {"log_level": "INFO", "to_file": True, "to_stdout": True,
                     "run_log_path": "./logs/ms_coordinator_run_log.txt",
                     "operation_log_path": "./logs/ms_coordinator_operation_log.txt",
                     "max_log_str_size": 4096, "max_log_file_size": 20,
                     "max_log_file_num": 10},
        "digs_scheduler_config": {
            "deploy_mode": "pd_separate", "scheduler_type": "digs_scheduler",
            "algorithm_type": "load_balance", "cache_size": "100", "slots_thresh": "0.05",
            "block_thresh": "0.05", "max_schedule_count": "10000", "reordering_type": "1",
            "max_res_num": "5000", "res_limit_rate": "1.1", "select_type": "2",
            "load_cost_values": "1, 0",
            "load_cost_coefficient": "0, 0.22, 1024, 24, 6, 0, 1, 0, 1",
        },
        "string_token_rate": 4.02,
        "tls_config": {f"{name}_tls_enable": False for name in _COORDINATOR_TLS},
        "backup_config": {"database_server_dns": "etcd.default.svc.cluster.local",
                          "database_server_port": 2379, "function_enable": False},
    }


def motor_files(prefill_pods: int, decode_pods: int, npus_per_pod: int,
                table_path: str) -> dict[str, str]:
    """Both files by name, as text: what the rendered ConfigMap holds and what
    `simulate --pd` writes for its controller and coordinator, byte for byte, so that the
    simulation runs the configuration a user of `manifest --kind mindie-pd` gets."""
    controller = controller_config(prefill_pods, decode_pods, npus_per_pod, table_path)
    return {CONTROLLER_FILE: json.dumps(controller, indent=2) + "\n",
            COORDINATOR_FILE: json.dumps(coordinator_config(), indent=2) + "\n"}
