"""A PD service meeting through the Kubernetes API, with no shared directory (issue 38): real
`ascend-node` processes against a real kube-apiserver (`tests/kube_apiserver.py`), each with a
real token of the ServiceAccount whose Role `kube_layout.rbac_objects` renders for the
service (every instance's objects and the service pods' by name).

Each instance's pods run the ordinary `ascend-node ranktable` under their instance's identity
(`pd.roles.instance_environ`) and meet through their instance's own objects
(`<job>.<task>-rdzv-*`); the coordinator runs `pd-announce`, the controller pod's `pd-table`
reads it all from the API and writes the global table in its own state directory. The shape
and the assertions are `tests/test_pd_service.py`'s on the volume.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from ascend_node.kube.client import Client
from ascend_node.kube.resources import CONFIGMAPS
from ascend_node.pd.motor_configs import CONTROLLER_FILE, motor_files
from ascend_node.pd.motor_rules import check_global_table
from ascend_node.pd.roles import instance_environ, read_pd_identity
from ascend_node.rendezvous.kube_layout import JOB_UID_LABEL, JobIdentity
from ascend_node.sim.cluster import SimNode, SimSpec, launch, prepare
from tests.kube_apiserver import Plane
from tests.test_kube_rendezvous import NS, admin, grant, plane  # noqa: F401

pytestmark = pytest.mark.kube

RUN = "svc"
JOB = {"VC_COORDINATOR_NUM": "1", "VC_CONTROLLER_NUM": "1", "VC_PREFILL_0_NUM": "2",
       "VC_DECODE_0_NUM": "1"}
INSTANCES = {"prefill-0": 2, "decode-0": 1}


def api_env(where: Path, bed: Plane, token: str, job: JobIdentity) -> dict[str, str]:
    """What a pod of the rendered Job has for the API: its ServiceAccount's files (moved by
    the testing knob), the Service's address, Volcano's annotations by the downward API."""
    sa_dir = where / "serviceaccount"
    sa_dir.mkdir(parents=True, exist_ok=True)
    (sa_dir / "token").write_text(token)
    (sa_dir / "ca.crt").write_bytes(bed.ca.read_bytes())
    (sa_dir / "namespace").write_text(NS)
    url = urlsplit(bed.url)
    return {"ASCEND_NODE_RENDEZVOUS": "kube", "ASCEND_NODE_SERVICE_ACCOUNT_DIR": str(sa_dir),
            "KUBERNETES_SERVICE_HOST": str(url.hostname),
            "KUBERNETES_SERVICE_PORT": str(url.port),
            "ASCEND_NODE_JOB_NAME": job.name, "ASCEND_NODE_POD_GROUP": f"{job.name}-{job.uid}"}


def instance_pods(tmp: Path, bed: Plane, token: str, job: JobIdentity, task: str,
                  subnet: int) -> list[SimNode]:
    spec = SimSpec(nodes=INSTANCES[task], devices=4, masters=0, run_id=f"{RUN}-{task}",
                   timeout=60)
    nodes = prepare(spec, tmp / f"work-{task}", tmp / "unused")
    for node in nodes:
        me = read_pd_identity({**JOB, "ASCEND_NODE_PD_TASK": task,
                               "VC_TASK_INDEX": str(node.index)})
        node.env.pop("ASCEND_NODE_SHARED_DIR", None)
        node.env.update(instance_environ(me, RUN))
        node.env.update({**JOB, "ASCEND_NODE_PD_TASK": task,
                         "K8S_POD_IP": f"172.16.{subnet}.{10 + node.index}",
                         "K8S_HOST_IP": f"192.168.{subnet}.{10 + node.index}",
                         **api_env(node.state_dir.parent, bed, token, job)})
        for device in node.devices:
            device.ip = f"10.{subnet}.{node.index}.{device.device_id + 1}"
    return nodes


def agent(tmp: Path, bed: Plane, token: str, job: JobIdentity, *args: str, task: str,
          pod_ip: str, **extra: str) -> subprocess.Popen[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ASCEND_NODE_", "VC_"))}
    env.update(extra)
    env.update({**JOB, "ASCEND_NODE_PD_TASK": task, "VC_TASK_INDEX": "0",
                "K8S_POD_IP": pod_ip, "K8S_HOST_IP": "192.168.0.1", "POD_UID": f"uid-{task}",
                "ASCEND_NODE_RUN_ID": RUN, "ASCEND_NODE_TIMEOUT": "60",
                "ASCEND_NODE_STATE_DIR": str(tmp / f"state-{task}"),
                **api_env(tmp / f"pod-{task}", bed, token, job)})
    return subprocess.Popen([sys.executable, "-m", "ascend_node", *args], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_instances_meet_apart_through_the_api_and_the_controller_pod_writes_the_global_table(
        tmp_path: Path, plane: Plane, admin: Client) -> None:  # noqa: F811
    job = JobIdentity(NS, "pd-svc", str(uuid.uuid4()))
    token = grant(plane, admin, job.name, 0, instances=INSTANCES)
    table_path = tmp_path / "state-controller" / "pd" / "global_ranktable.json"
    config = tmp_path / CONTROLLER_FILE
    config.write_text(motor_files(2, 1, 4, str(table_path))[CONTROLLER_FILE])
    writer = agent(tmp_path, plane, token, job, "pd-table", "--controller-config",
                   str(config), "--once", task="controller", pod_ip="172.16.0.11")
    results = launch([*instance_pods(tmp_path, plane, token, job, "prefill-0", 1),
                      *instance_pods(tmp_path, plane, token, job, "decode-0", 2)],
                     timeout=90)
    assert [r.exit_code for r in results] == [0, 0, 0], [r.stderr[-2000:] for r in results]
    assert not (tmp_path / "unused").exists() or not any((tmp_path / "unused").iterdir())
    announce = agent(tmp_path, plane, token, job, "pd-announce", task="coordinator",
                     pod_ip="172.16.0.10")
    assert announce.wait(60) == 0, announce.communicate()[1]
    _, err = writer.communicate(timeout=90)
    assert writer.returncode == 0, err

    doc = json.loads(table_path.read_text())
    from ascend_node.pd.controller_config import read_flags

    assert check_global_table(doc, read_flags(config)) == []
    groups = doc["server_group_list"]
    assert [g["group_id"] for g in groups] == ["0", "1", "2", "3"]
    assert groups[0]["server_list"] == [{"server_id": "192.168.0.1",
                                         "server_ip": "172.16.0.10"}]
    assert groups[1]["server_list"] == [{"server_id": "192.168.0.1",
                                         "server_ip": "172.16.0.11"}]
    prefill, decode = groups[2], groups[3]
    assert [s["server_ip"] for s in prefill["server_list"]] == ["172.16.1.10", "172.16.1.11"]
    assert [s["server_id"] for s in prefill["server_list"]] == ["192.168.1.10", "192.168.1.11"]
    assert [d["rank_id"] for d in prefill["server_list"][1]["device"]] == ["4", "5", "6", "7"]
    assert [s["server_ip"] for s in decode["server_list"]] == ["172.16.2.10"]
    # each instance's pods hold their own instance's table, byte for byte the same
    tables = [r.local_table() for r in results]
    counts = sorted(json.loads(t or b"{}")["server_count"] for t in set(tables))
    assert counts == ["1", "2"] and len(tables) == 3, counts
    # every object the service wrote is the vcjob's, each instance's apart
    names = sorted(o["metadata"]["name"] for o in admin.list(
        CONFIGMAPS, f"{JOB_UID_LABEL}={job.uid}").get("items") or [])
    assert "pd-svc.prefill-0-rdzv-attempt" in names and "pd-svc.decode-0-rdzv-attempt" in names
    assert "pd-svc.pd-coordinator-0" in names and "pd-svc.pd-controller-0" in names
    assert not any(n.startswith("pd-svc-rdzv") for n in names), names

    # The controller's start in the same pod: pd-boot finds the table in the state directory
    # the writer shares with it, and hands the controller that path.
    program = tmp_path / "bin" / "mindie_motor_controller"
    program.parent.mkdir()
    program.write_text(f"#!{sys.executable}\nimport json, os\n"
                       "json.dump({'table': os.environ.get('GLOBAL_RANK_TABLE_FILE_PATH')}, "
                       "open(os.environ['FAKE_REPORT'], 'w'))\n")
    program.chmod(0o755)
    boot = agent(tmp_path, plane, token, job, "pd-boot", "--motor-config", str(config), "--",
                 program.name, task="controller", pod_ip="172.16.0.11",
                 FAKE_REPORT=str(tmp_path / "report.json"),
                 PATH=f"{program.parent}:{os.environ['PATH']}")
    assert boot.wait(60) == 0, boot.communicate()[1]
    assert json.loads((tmp_path / "report.json").read_text()) == {"table": str(table_path)}
