"""`doctor` in a PD service's pod: `pd.role` names the pod's role, its instance and the
global rank table's state (ascend_node/doctor/pd_role.py).

The verdicts by a table of cases; then doctor run in a pod of a service `simulate --pd`
brought up (its workspace kept), which must find the pod in its instance's group.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any, Optional

import pytest

from ascend_node.doctor.pd_role import check_pd_role, expected_group
from ascend_node.pd.roles import read_pd_identity
from ascend_node.ranktable import Problem

JOB = {"VC_COORDINATOR_NUM": "1", "VC_CONTROLLER_NUM": "1", "VC_PREFILL_0_NUM": "2",
       "VC_PREFILL_1_NUM": "1", "VC_DECODE_0_NUM": "1"}
PATH = Path("/shared/.ascend-node/svc/pd/global_ranktable.json")


def me(task: str, place: int = 0) -> Any:
    return read_pd_identity({**JOB, "ASCEND_NODE_PD_TASK": task, "VC_TASK_INDEX": str(place)})


def table(**groups: list[str]) -> dict[str, Any]:
    return {"status": "completed", "server_group_list": [
        {"group_id": gid, "server_list": [{"server_ip": ip} for ip in ips]}
        for gid, ips in groups.items()]}


@pytest.mark.parametrize("task, expected", [
    ("coordinator", "0"), ("controller", "1"), ("prefill-0", "2"), ("prefill-1", "3"),
    ("decode-0", "4"),
])
def test_the_group_each_pod_belongs_to(task: str, expected: str) -> None:
    assert expected_group(me(task)) == expected


@pytest.mark.parametrize("task, place, path, problems, doc, status, fragment", [
    ("prefill-0", 1, PATH, [], table(**{"0": ["10.0.0.1"], "2": ["10.0.1.1", "10.0.1.2"]}),
     "ok", "prefill-0 pod 1 of 2 (prefill instance 0, meets its peers as run svc-prefill-0)"
           "; global rank table"),
    ("prefill-0", 1, PATH, [], table(**{"0": ["10.0.0.1"], "2": ["10.0.1.1", "10.0.1.2"]}),
     "ok", "this pod (pod IP 10.0.1.2) in group 2"),
    ("coordinator", 0, PATH, [], table(**{"0": ["10.0.1.2"], "2": ["10.0.1.1"]}), "ok",
     "coordinator (pod 0 of 1)"),
    ("decode-0", 0, PATH, [], table(**{"0": ["10.0.0.1"], "2": ["10.0.1.1"]}), "warn",
     "without group 4 (decode-0's)"),
    ("prefill-0", 0, PATH, [], table(**{"0": ["10.0.0.1"], "2": ["10.0.1.9"]}), "warn",
     "group 2 does not list this pod's IP 10.0.1.2"),
    ("prefill-0", 0, PATH, None, None, "warn", "no global rank table at"),
    ("prefill-0", 0, PATH, [Problem("$.status", "status is not completed"),
                            Problem("$.x", "y")], None, "fail",
     "breaks the controller's rules: $.status: status is not completed (and 1 more)"),
    ("prefill-0", 0, None, None, None, "skip", "no shared directory and run id"),
])
def test_pd_role(task: str, place: int, path: Optional[Path], problems: Any, doc: Any,
                 status: str, fragment: str) -> None:
    result = check_pd_role(me(task, place), None, "svc", path, problems, doc, "10.0.1.2")
    assert (result.id, result.status) == ("pd.role", status), result.message
    assert fragment in result.message


def test_an_identity_that_cannot_be_told_fails_with_its_cause() -> None:
    result = check_pd_role(None, ("ASCEND_NODE_PD_TASK='x' names no task", "render it"),
                           None, None, None, None, None)
    assert (result.status, result.message, result.remedy) == (
        "fail", "ASCEND_NODE_PD_TASK='x' names no task", "render it")


@pytest.mark.multiprocess
def test_doctor_in_a_server_pod_of_a_running_service(tmp_path: Path) -> None:
    from ascend_node.sim.pd_service import PdSpec, server_pods, simulate_pd

    spec = PdSpec(devices=2, timeout=60, run_id="svc")
    report = simulate_pd(spec, keep=True)
    try:
        assert report.ok
        task, place, node = server_pods(spec, tmp_path / "again", report.shared_dir)[1]
        assert (task, place) == ("prefill-0", 1)
        env = {k: v for k, v in os.environ.items() if not k.startswith("ASCEND_NODE_")}
        env.update(node.env)
        done = subprocess.run([sys.executable, "-m", "ascend_node", "doctor", "--json"],
                              env=env, capture_output=True, text=True, timeout=120)
        checks = {c["id"]: c for c in json.loads(done.stdout)["checks"]}
        role = checks["pd.role"]
        assert role["status"] == "ok", role
        assert role["message"].startswith("prefill-0 pod 1 of 2 (prefill instance 0, meets "
                                          "its peers as run svc-prefill-0)")
        assert f"this pod (pod IP {node.env['K8S_POD_IP']}) in group 2" in role["message"]
    finally:
        shutil.rmtree(report.workspace, ignore_errors=True)
