"""A PD service's two levels on real Linux NFS clients (issue 31; tests/nfs_bed.py).

Three NFS clients (UML guests) of one kernel nfsd: the prefill instance's two pods on
client 0, the decode instance's pod on client 1, and on client 2 the coordinator's pod
(`pd-boot -- mindie_motor_coordinator`) and the controller's (`pd-table --watch` and
`pd-boot -- mindie_motor_controller`, the fakes of sim/fake_motor.py), with a reader
polling the global table every 0.1 s; a second reader on client 0. The decode instance is
restarted mid-run with a new pod IP: it must come back in the same group while neither
reader ever reads a torn or invalid table, and the fake controller sees the restart as a
scale-in then a scale-out.

The instance pods run `ascend-node ranktable` (the instance's rendezvous, as every pod of
the instance does before `boot`'s exec). Skips, with the reason, without root / UML / the
nfs tools (scripts/ci-setup-nfs).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ascend_node.pd.motor_configs import CONTROLLER_FILE, COORDINATOR_FILE, motor_files
from ascend_node.pd.motor_rules import check_global_table, flags_from_controller_config
from ascend_node.pd.roles import instance_environ, read_pd_identity
from ascend_node.sim.cluster import SimNode
from ascend_node.sim.fake_motor import (
    ADDRESSES_ENV,
    PERIOD_ENV,
    STATE_ENV,
    install_motor_fakes,
)
from tests.nfs_bed import GUEST_PODS, GUEST_SHARED, Bed, BedError, explain, why_not

pytestmark = [pytest.mark.nfs, pytest.mark.multiprocess]

RUN = "pdnfs"
JOB = {"VC_COORDINATOR_NUM": "1", "VC_CONTROLLER_NUM": "1", "VC_PREFILL_0_NUM": "2",
       "VC_DECODE_0_NUM": "1"}
TABLE = f"{GUEST_SHARED}/.ascend-node/{RUN}/pd/global_ranktable.json"
STOP = f"{GUEST_SHARED}/stop-{RUN}"
NEW_DECODE_IP = "172.16.2.20"

# A process of a service pod that runs until the stop file appears on its NFS mount,
# then is ended with SIGTERM (the pod deleted at the end of the test).
UNTIL_STOP = r"""
import os, signal, subprocess, sys, time
stop = sys.argv[1]
p = subprocess.Popen(sys.argv[2:])
while p.poll() is None and not os.path.exists(stop):
    time.sleep(0.2)
if p.poll() is None:
    p.send_signal(signal.SIGTERM)
    try:
        p.wait(20)
    except subprocess.TimeoutExpired:
        p.kill()
code = p.wait()
print(f"until-stop: exit {code}", file=sys.stderr)
sys.exit(0 if code in (0, -15, 143) else 1)
"""

# The restart waits until the fake controller has accepted the first decode pod (else it
# could start before the controller does, and the controller never see the old pod): the
# gate, on the decode pod's client, creates the gate file if missing and waits for content;
# the opener, on the controller's client, appends once the controller's state says so. A
# file this client created (or never looked up) is not hidden by a cached "no such file".
GATE = r"""
import os, sys, time
gate = sys.argv[1]
open(gate, "a").close()
deadline = time.time() + 150
while time.time() < deadline:
    with open(gate, "rb") as f:
        if os.fstat(f.fileno()).st_size > 0:
            break
    time.sleep(0.2)
os.execv(sys.argv[2], sys.argv[2:])
"""
OPENER = r"""
import json, sys, time
state, gate, wanted = sys.argv[1:4]
deadline = time.time() + 150
while time.time() < deadline:
    try:
        lines = [json.loads(x) for x in open(state).read().splitlines() if x.strip()]
    except (OSError, ValueError):
        lines = []
    if any(x["event"] == "accepted" and any(n.startswith(wanted + ":") for n in x["nodes"])
           for x in lines):
        with open(gate, "a") as f:
            f.write("open\n")
        sys.exit(0)
    time.sleep(0.2)
sys.exit(1)
"""
GATE_FILE = f"{GUEST_SHARED}/gate-{RUN}"
MOTOR_STATE = f"{GUEST_PODS}/{RUN}-motor-state.jsonl"  # the controller's client's tmpfs

# A controller-like reader: the table every 0.1 s, judged by the controller's rules.
READER = r"""
import json, os, sys, time
from ascend_node.pd.motor_rules import check_global_table, flags_from_controller_config
path, config, new_ip, stop, limit = sys.argv[1:6]
flags = flags_from_controller_config(json.load(open(config)))
out = {"reads": 0, "missing": 0, "bad": [], "decode_ips": [], "first": None, "last": None}
t0, since = time.time(), None
while time.time() - t0 < float(limit):
    try:
        with open(path, "rb") as f:
            data = f.read()
    except FileNotFoundError:
        out["missing"] += 1
        time.sleep(0.1)
        continue
    out["reads"] += 1
    try:
        doc = json.loads(data)
    except ValueError as exc:
        out["bad"].append(f"torn: {exc}: {data[:60]!r}")
        time.sleep(0.1)
        continue
    problems = check_global_table(doc, flags)
    if problems:
        out["bad"].append(f"invalid: {problems[0].path}: {problems[0].message}")
    groups = {g["group_id"]: g for g in doc["server_group_list"]}
    ip = groups["3"]["server_list"][0]["server_ip"] if "3" in groups else None
    if not out["decode_ips"] or out["decode_ips"][-1] != ip:
        out["decode_ips"].append(ip)
    if out["first"] is None:
        out["first"], out["first_seen"] = doc, round(time.time() - t0, 2)
    out["last"] = doc
    if ip == new_ip:
        since = since or time.time()
        if time.time() - since >= 3:
            break
    time.sleep(0.1)
if stop != "-":
    open(stop, "w").close()
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def bed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Bed]:
    reason = why_not()
    if reason:
        pytest.skip(reason)
    b = Bed(tmp_path_factory.mktemp("nfsbed-pd"), vers="4.2", clients=3)
    try:
        try:
            b.start()
        except BedError as exc:
            pytest.fail(f"the NFS test bed did not come up: {exc}")
        yield b
    finally:
        b.close()


# The controller's and the coordinator's configurations `manifest --kind mindie-pd` renders
# for this shape (1 P x 2 pods + 1 D x 1 pod, 2 NPUs each; pd.motor_configs), the table
# where the guests see it: both instances centralized, told apart by node_machine_num.
MOTOR_FILES = motor_files(2, 1, 2, TABLE)


def controller_config(bed: Bed) -> Path:
    path = bed.work / CONTROLLER_FILE
    path.write_text(MOTOR_FILES[CONTROLLER_FILE])
    return path


def _move(node: SimNode, pod_dir: str) -> None:
    """Give a pod its own directory on its guest's tmpfs (a restarted pod is a new one)."""
    node.state_dir = Path(pod_dir) / "state"
    node.env.update({"ASCEND_NODE_STATE_DIR": str(node.state_dir),
                     "ASCEND_NODE_MASTER_FILE": f"{pod_dir}/master",
                     "ASCEND_NODE_WORLD_SIZE_FILE": f"{pod_dir}/world_size",
                     "ASCEND_NODE_HCCN_CONF": f"{pod_dir}/hccn.conf"})


def instance_pods(bed: Bed, task: str, subnet: int, first: int, generation: int = 0
                  ) -> list[SimNode]:
    pods = int(JOB[f"VC_{task.upper().replace('-', '_')}_NUM"])
    nodes = bed.pods(pods, devices=2, run_id=f"{RUN}-{task}", timeout=60)
    for node in nodes:
        place = node.index
        me = read_pd_identity({**JOB, "ASCEND_NODE_PD_TASK": task,
                               "VC_TASK_INDEX": str(place)})
        node.env.update(instance_environ(me, RUN))
        node.env.update({**JOB, "ASCEND_NODE_PD_TASK": task,
                         "K8S_POD_IP": f"172.16.{subnet}.{10 + place + 10 * generation}",
                         "K8S_HOST_IP": f"192.168.{subnet}.{10 + place}",
                         "ASCEND_NODE_JOB_VERSION": str(generation)})
        for device in node.devices:
            device.ip = f"10.{subnet}.{place + 10 * generation}.{device.device_id + 1}"
        _move(node, f"{GUEST_PODS}/{RUN}-{task}/g{generation}-node-{place}")
        node.index = first + place
    return nodes


def service_pods(bed: Bed, config: Path) -> list[SimNode]:
    """0 coordinator, 1 pd-table, 2 controller, 3 the controller client's reader (writes
    the stop file), 4 a reader on client 0, 5 the restart's gate opener."""
    fakes = install_motor_fakes(bed.work / "motor-bin")
    coordinator_config = bed.work / COORDINATOR_FILE
    coordinator_config.write_text(MOTOR_FILES[COORDINATOR_FILE])
    nodes = bed.pods(6, devices=1, run_id=f"{RUN}-svc", timeout=120)
    agent = [sys.executable, "-m", "ascend_node"]
    until = [sys.executable, "-c", UNTIL_STOP, STOP]
    addresses = "172.16.0.10=127.0.0.10,172.16.0.11=127.0.0.11"
    commands = [
        ("coordinator", "172.16.0.10", [*until, *agent, "pd-boot", "--",
                                        str(fakes["coordinator"])]),
        ("controller", "172.16.0.11", [*until, *agent, "pd-table", "--controller-config",
                                       str(config), "--watch"]),
        ("controller", "172.16.0.11", [*until, *agent, "pd-boot", "--",
                                       str(fakes["controller"])]),
        ("controller", "172.16.0.11", [sys.executable, "-c", READER, TABLE, str(config),
                                       NEW_DECODE_IP, STOP, "150"]),
        ("controller", "172.16.0.12", [sys.executable, "-c", READER, TABLE, str(config),
                                       NEW_DECODE_IP, "-", "150"]),
        ("controller", "172.16.0.11", [sys.executable, "-c", OPENER, MOTOR_STATE, GATE_FILE,
                                       "172.16.2.10"]),
    ]
    for node, (task, ip, argv) in zip(nodes, commands):
        for name in ("ROLE", "VC_MASTER_NUM", "VC_WORKER_NUM"):
            node.env.pop(name, None)
        node.env.update({**JOB, "ASCEND_NODE_PD_TASK": task, "VC_TASK_INDEX": "0",
                         "ASCEND_NODE_RUN_ID": RUN, "K8S_POD_IP": ip,
                         "K8S_HOST_IP": "192.168.0.1", "ASCEND_NODE_SIM_PYTHON": sys.executable,
                         "MINDIE_MS_COORDINATOR_CONFIG_FILE_PATH": str(coordinator_config),
                         "MINDIE_MS_CONTROLLER_CONFIG_FILE_PATH": str(config),
                         ADDRESSES_ENV: addresses, PERIOD_ENV: "0.5",
                         STATE_ENV: MOTOR_STATE})
        node.argv = argv
    return nodes


def test_a_pd_service_across_clients_and_a_decode_restart_rewritten_in_place(
        bed: Bed) -> None:
    config = controller_config(bed)
    service = service_pods(bed, config)
    svc = bed.start_run(service, hard_timeout=250, place=lambda i: 0 if i == 4 else 2)
    # P's pods on client 0, D's on client 1
    bed.start_run([*instance_pods(bed, "prefill-0", 1, 0),
                   *instance_pods(bed, "decode-0", 2, 2)], hard_timeout=90,
                  place=lambda i: 0 if i < 2 else 1)
    first = bed.finish_run()
    assert [r.exit_code for r in first] == [0, 0, 0], explain(first)
    # The job restarts the decode task: a new pod, a new address, a new job version (once
    # the controller has seen the old one: the gate).
    restarted = instance_pods(bed, "decode-0", 2, 0, generation=1)
    for node in restarted:
        node.argv = [sys.executable, "-c", GATE, GATE_FILE, *node.argv]
    bed.start_run(restarted, hard_timeout=200, place=lambda i: 1)
    again = bed.finish_run()
    assert [r.exit_code for r in again] == [0], explain(again)
    results = bed.finish_run(svc)
    coordinator, writer, controller, reader, far_reader, _opener = results
    assert [r.exit_code for r in results] == [0] * 6, explain(results)

    seen: list[dict[str, Any]] = [json.loads(r.stdout.strip().splitlines()[-1])
                                  for r in (reader, far_reader)]
    flags = flags_from_controller_config(json.loads(config.read_text()))
    for where, view in zip(("the controller's client", "client 0"), seen):
        print(f"{where}: {view['reads']} reads, first table after {view['first_seen']} s "
              f"({view['missing']} polls found none), decode IPs seen {view['decode_ips']}")
        assert view["reads"] > 20, (where, view)
        assert view["bad"] == [], (where, view["bad"][:3])  # never torn, never invalid
        assert view["decode_ips"][-1] == NEW_DECODE_IP, (where, view["decode_ips"])
        first_doc, last_doc = view["first"], view["last"]
        assert check_global_table(last_doc, flags) == []
        # the restarted instance is rewritten in its own group; the others untouched
        assert [g["group_id"] for g in last_doc["server_group_list"]] == ["0", "1", "2", "3"]
        assert last_doc["server_group_list"][:3] == first_doc["server_group_list"][:3]
        assert last_doc["server_group_list"][3]["server_list"][0]["server_id"] == \
            "192.168.2.10"
    # The controller's own client (the controller and pd-table share its pod's mount) saw
    # the first table and the rewrite. Another client may see the file appear only when
    # its cached "no such file" expires (acdirmin 30 s; docs/rendezvous.md): the reason the
    # table is written from the controller's pod.
    assert seen[0]["decode_ips"][0] == "172.16.2.10", seen[0]["decode_ips"]
    assert "global table written" in writer.stderr
    # The fake controller read the live file on NFS and saw the restart.
    out = controller.stdout
    assert "scale-out: node 172.16.2.10:" in out, controller.stdout + controller.stderr
    assert "scale-in: node 172.16.2.10:" in out and f"scale-out: node {NEW_DECODE_IP}:" in out
    assert out.index("scale-in: node 172.16.2.10:") < out.index(f"scale-out: node "
                                                                 f"{NEW_DECODE_IP}:")
    assert "rank table ignored" not in out.split("scale-out: node 172.16.1.10", 1)[-1]
    # each instance one node at its master, in its task's role (node_machine_num 2 and 1)
    assert "scale-out: node 172.16.1.10:1026 (group 2, prefill) added" in out
    assert f"scale-out: node {NEW_DECODE_IP}:1026 (group 3, decode) added" in out
    # The coordinator was told: of the first nodes and again after the restart. A refresh
    # may find it not yet listening (announced, then still starting python in its loaded
    # guest: one run saw "Connection refused" once); the controller retries at its next
    # look, as it does for any refresh that failed, and nothing else may fail.
    failed = [line for line in out.splitlines() if "refresh of coordinator" in line]
    assert all("Connection refused" in line for line in failed), failed
    assert coordinator.stdout.count("refresh from") >= 2, coordinator.stdout
    assert "listening on 172.16.0.10:1025" in coordinator.stdout
