"""The coordinator's and the controller's hand-over (ascend_node.pd.handover, pd-boot):
MindIE-Motor's start-up rules before exec, then a real exec with what each program needs."""

from __future__ import annotations

import copy
import json
import os
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from ascend_node.errors import ConfigError
from ascend_node.pd.handover import (
    controller_env,
    controller_problems,
    coordinator_argv,
    coordinator_problems,
)
from ascend_node.pd.motor_rules import check_table_path
from ascend_node.pd.service import global_table_path
from tests import pd_docs

MOTOR = Path(__file__).resolve().parents[1] / "fixtures" / "mindie-motor"
SHIPPED = json.loads((MOTOR / "ms_controller.json").read_text())
COORDINATOR = json.loads((MOTOR / "ms_coordinator.json").read_text())
CROSS_NODE = json.loads((MOTOR / "global_rank_table_cross_node_a2.json").read_text())
JOB = {"VC_COORDINATOR_NUM": "1", "VC_CONTROLLER_NUM": "1", "VC_PREFILL_0_NUM": "1",
       "VC_DECODE_0_NUM": "1"}


def multi_node(**p: Any) -> dict[str, Any]:
    config = copy.deepcopy(SHIPPED)
    multi = config["multi_node_infer_config"]
    multi["multi_node_infer_enable"] = True
    # The a2 cross-node table's P instance holds 2 devices (2 servers x 1).
    multi["p_node_config"].update({"enable_dist_dp_server": False, "tp_size": 2,
                                   "dp_size": 1, "cp_size": 1, **p})
    multi["d_node_config"].update(enable_dist_dp_server=True)
    return config


def test_the_controllers_tables_pass_with_a_multi_node_config() -> None:
    assert controller_problems(multi_node(), CROSS_NODE, {}) == []


def _drop(key: str) -> dict[str, Any]:
    config = multi_node()
    del config[key]
    return config


@pytest.mark.parametrize(("config", "environ", "where", "says"), [
    (multi_node(), {"MINDX_TASK_ID": "job-1"}, "MINDX_TASK_ID", "asks ClusterD"),
    (multi_node(), {"MINDX_SERVER_IP": "10.0.0.1"}, "MINDX_SERVER_IP", "unset both"),
    (SHIPPED, {}, "ms_controller.json multi_node_infer_config.multi_node_infer_enable",
     "is false, but the service has 3 instances"),
    (_drop("rank_table_detecting_seconds"), {},
     "ms_controller.json rank_table_detecting_seconds", "is missing"),
    ({**multi_node(), "http_retries": "3"}, {}, "ms_controller.json http_retries",
     "is string \"3\", not a number"),
    ({**multi_node(), "is_heterogeneous": "false"}, {}, "ms_controller.json is_heterogeneous",
     "not a boolean"),
    ({**multi_node(), "deploy_mode": "pd"}, {}, "ms_controller.json deploy_mode",
     "accepts pd_separate"),
    ({**multi_node(), "transfer_type": "H2DTransfer"}, {}, "ms_controller.json transfer_type",
     "accepts D2DTransfer"),
    ({**multi_node(), "has_flex": True}, {}, "ms_controller.json has_flex", "refuses"),
    (multi_node(tp_size=4, dp_size=4), {}, "$.server_group_list[2].server_list",
     "tp_size*dp_size*cp_size is 16"),
    ([], {}, "ms_controller.json", "is array, not a JSON object"),
])
def test_each_refusal_names_the_key(config: Any, environ: dict[str, str], where: str,
                                    says: str) -> None:
    problems = controller_problems(config, CROSS_NODE, environ)
    assert any(p.where == where and says in p.message for p in problems), problems


def test_the_coordinators_deploy_mode() -> None:
    assert coordinator_problems(COORDINATOR) == []
    bad = copy.deepcopy(COORDINATOR)
    bad["digs_scheduler_config"]["deploy_mode"] = "mixed"
    assert "accepts pd_separate" in coordinator_problems(bad)[0].message


def test_what_each_program_is_given() -> None:
    env = controller_env({"MINDX_TASK_ID": "x", "PATH": "/bin"}, "/shared/g.json")
    assert env == {"PATH": "/bin", "GLOBAL_RANK_TABLE_FILE_PATH": "/shared/g.json"}
    assert coordinator_argv(["mindie_motor_coordinator"], "172.16.0.10") == [
        "mindie_motor_coordinator", "172.16.0.10", "172.16.0.10"]
    assert coordinator_argv(["c", "1.2.3.4", "5.6.7.8"], "172.16.0.10") == [
        "c", "1.2.3.4", "5.6.7.8"]


# ------------------------------------------------------------- pd-boot, real exec

_FAKE = """#!{python}
import json, os, sys
json.dump({{"argv": sys.argv[1:], "pid": os.getpid(),
            "env": {{k: v for k, v in os.environ.items()
                    if k.startswith(("GLOBAL_", "MINDX_", "POD_IP", "MINDIE_MS"))}}}},
          open(os.environ["FAKE_REPORT"], "w"))
"""


def fake_program(tmp: Path, name: str) -> Path:
    path = tmp / "bin" / name
    path.parent.mkdir(exist_ok=True)
    path.write_text(_FAKE.format(python=sys.executable))
    path.chmod(0o755)
    return path


def pd_boot(tmp: Path, task: str, program: Path, *extra: str, **env: str
            ) -> tuple[subprocess.CompletedProcess[str], dict[str, Any]]:
    base = {k: v for k, v in os.environ.items() if not k.startswith(("ASCEND_NODE_", "VC_"))}
    base.update({**JOB, "ASCEND_NODE_PD_TASK": task, "VC_TASK_INDEX": "0",
                 "K8S_POD_IP": "172.16.0.11" if task == "controller" else "172.16.0.10",
                 "K8S_HOST_IP": "192.168.0.1", "POD_UID": f"u-{task}",
                 "ASCEND_NODE_SHARED_DIR": str(tmp / "shared"), "ASCEND_NODE_RUN_ID": "svc",
                 "ASCEND_NODE_TIMEOUT": "5", "FAKE_REPORT": str(tmp / "report.json"),
                 "PATH": f"{program.parent}:{os.environ['PATH']}", **env})
    done = subprocess.run([sys.executable, "-m", "ascend_node", "pd-boot", *extra, "--",
                           program.name], env=base, capture_output=True, text=True,
                          timeout=60)
    report = tmp / "report.json"
    return done, json.loads(report.read_text()) if report.exists() else {}


def test_the_controller_is_execd_on_the_live_table(tmp_path: Path) -> None:
    (tmp_path / "shared").mkdir()
    table = global_table_path(tmp_path / "shared", "svc")
    table.parent.mkdir(parents=True)
    table.write_text(json.dumps(CROSS_NODE))
    config = tmp_path / "ms_controller.json"
    config.write_text(json.dumps(multi_node()))
    config.chmod(0o640)  # a file MindIE-Motor accepts is handed over as it is
    program = fake_program(tmp_path, "mindie_motor_controller")
    done, report = pd_boot(tmp_path, "controller", program,
                           MINDIE_MS_CONTROLLER_CONFIG_FILE_PATH=str(config))
    assert done.returncode == 0, done.stderr
    assert report["env"] == {"GLOBAL_RANK_TABLE_FILE_PATH": str(table), "POD_IP": "172.16.0.11",
                             "MINDIE_MS_CONTROLLER_CONFIG_FILE_PATH": str(config)}
    assert report["argv"] == []


def test_the_controller_is_refused_before_exec(tmp_path: Path) -> None:
    (tmp_path / "shared").mkdir()
    table = global_table_path(tmp_path / "shared", "svc")
    table.parent.mkdir(parents=True)
    table.write_text(json.dumps(CROSS_NODE))
    config = tmp_path / "ms_controller.json"
    config.write_text(json.dumps(SHIPPED))  # single-node: refuses 3 instances
    program = fake_program(tmp_path, "mindie_motor_controller")
    done, report = pd_boot(tmp_path, "controller", program, "--motor-config", str(config),
                           MINDX_TASK_ID="job-1")
    assert done.returncode == 1 and report == {}
    lines = done.stderr.strip().splitlines()
    assert "MindIE-Motor would refuse to start: MINDX_TASK_ID: is set" in done.stderr
    assert "(and 1 more)" in done.stderr
    assert len([x for x in lines if x.startswith("ascend-node: error:")]) == 1


def test_the_controller_waits_for_the_table_then_times_out(tmp_path: Path) -> None:
    (tmp_path / "shared").mkdir()
    config = tmp_path / "ms_controller.json"
    config.write_text(json.dumps(multi_node()))
    program = fake_program(tmp_path, "mindie_motor_controller")
    done, report = pd_boot(tmp_path, "controller", program, "--motor-config", str(config),
                           ASCEND_NODE_TIMEOUT="2")
    assert done.returncode == 4 and report == {}
    assert "no global rank table at" in done.stderr and "after 2 s" in done.stderr


def test_the_coordinator_announces_itself_and_listens_on_its_pod_ip(tmp_path: Path) -> None:
    (tmp_path / "shared").mkdir()
    config = tmp_path / "ms_coordinator.json"
    config.write_text(json.dumps(COORDINATOR))
    program = fake_program(tmp_path, "mindie_motor_coordinator")
    done, report = pd_boot(tmp_path, "coordinator", program,
                           MINDIE_MS_COORDINATOR_CONFIG_FILE_PATH=str(config))
    assert done.returncode == 0, done.stderr
    assert report["argv"] == ["172.16.0.10", "172.16.0.10"]
    from ascend_node.pd.service import read_service_pods

    pods = read_service_pods(tmp_path / "shared", "svc")
    assert [(p.pod_ip, p.host_ip) for p in pods["coordinator"]] == [("172.16.0.10",
                                                                     "192.168.0.1")]


def test_a_server_pod_is_sent_to_boot(tmp_path: Path) -> None:
    (tmp_path / "shared").mkdir()
    program = fake_program(tmp_path, "mindieservice_daemon")
    done, _ = pd_boot(tmp_path, "decode-0", program)
    assert done.returncode == 1
    assert "decode-0 is a server: pd-boot starts the coordinator and the controller" in \
        done.stderr


def test_pd_docs_builders_stay_valid(tmp_path: Path) -> None:
    pd_docs.publish_instance(tmp_path, "svc", "decode-0", 3, pods=2)
    from ascend_node.pd.service import read_instance

    assert read_instance(tmp_path, "svc", "decode-0").table is not None


def configmap_volume(tmp: Path, files: dict[str, str]) -> Path:
    """A directory laid out as the kubelet mounts a ConfigMap (its atomic writer): the files
    in a timestamped directory, `..data` a symlink to it, each key a symlink through
    `..data`, mode 0644."""
    root = tmp / "configmap"
    stamp = root / "..2026_12_04_21_00_00.000000001"
    stamp.mkdir(parents=True)
    for name, text in files.items():
        (stamp / name).write_text(text)
        (stamp / name).chmod(0o644)
    (root / "..data").symlink_to(stamp.name)
    for name in files:
        (root / name).symlink_to(f"..data/{name}")
    return root


@pytest.mark.parametrize("task,name,content", [
    ("controller", "ms_controller.json", lambda: multi_node()),
    ("coordinator", "ms_coordinator.json", lambda: COORDINATOR),
])
def test_a_configmap_file_is_handed_over_as_a_real_copy(tmp_path: Path, task: str, name: str,
                                                        content: Any) -> None:
    """MindIE-Motor refuses its configuration through a ConfigMap's `..data` symlink (and
    at mode 0644): the daemon gets a regular 0640 copy of the same bytes, its own."""
    (tmp_path / "shared").mkdir()
    table = global_table_path(tmp_path / "shared", "svc")
    table.parent.mkdir(parents=True)
    table.write_text(json.dumps(CROSS_NODE))
    text = json.dumps(content(), indent=2) + "\n"
    mounted = configmap_volume(tmp_path, {name: text}) / name
    program = fake_program(tmp_path, f"mindie_motor_{task}")
    state = tmp_path / "state"
    done, report = pd_boot(tmp_path, task, program, "--motor-config", str(mounted),
                           ASCEND_NODE_STATE_DIR=str(state))
    assert done.returncode == 0, done.stderr
    env_name = f"MINDIE_MS_{task.upper()}_CONFIG_FILE_PATH"
    handed = Path(report["env"][env_name])
    assert handed == state / "motor" / name
    info = os.lstat(handed)
    assert stat.S_ISREG(info.st_mode) and stat.S_IMODE(info.st_mode) == 0o640
    assert info.st_uid == os.geteuid()
    assert handed.read_text() == text
    assert check_table_path(str(handed)) is None
    assert check_table_path(str(mounted.parent / "..data" / name)) is not None


def test_a_copy_only_where_one_is_needed(tmp_path: Path) -> None:
    from ascend_node.pd.boot import readable_copy

    plain = tmp_path / "ms_controller.json"
    plain.write_text("{}")
    plain.chmod(0o640)
    assert readable_copy(plain, tmp_path / "state") == plain
    plain.chmod(0o644)  # wider than the daemon accepts
    assert readable_copy(plain, tmp_path / "state") == tmp_path / "state" / "motor" / plain.name
    with pytest.raises(ConfigError, match="cannot hand MindIE-Motor a copy"):
        readable_copy(plain, tmp_path / "a..b")
    with pytest.raises(ConfigError, match="cannot read"):
        readable_copy(tmp_path / "missing.json", tmp_path / "state")
