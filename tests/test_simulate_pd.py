"""`ascend-node simulate --pd`: a PD service as local processes (ascend_node/sim/pd_service.py).

What a user relies on: the simulation runs the configuration `manifest --kind mindie-pd`
renders for the same shape (byte for byte); the 1 P (2 pods) + 1 D (1 pod) service comes up —
every server boots on its instance's table, the controller pod's `pd-table` writes a global
table the controller's rules accept, and the fake controller reads it from the live path,
sees group "2" (prefill-0) a prefill instance of 2 servers and group "3" (decode-0) a decode
instance of 1, both centralized, and tells the coordinator; with as many pods per P as per D
instance the roles are left to the controller's role manager, and said so; a missing pod ends
the run with the contract's exit 4 naming who is missing; options that mean nothing with
--pd (and the PD sizes without it) are usage errors (exit 2).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from ascend_node.errors import UsageError
from ascend_node.jobspec.job import ManifestParams
from ascend_node.jobspec.pd_job import PdShape, render_pd_configmap
from ascend_node.pd.motor_rules import check_global_table, flags_from_controller_config
from ascend_node.pd.service import global_table_path
from ascend_node.sim.pd_options import build_pd_spec
from ascend_node.sim.pd_service import (
    PdSpec,
    controller_config,
    motor_files,
    parse_absent,
    roles_decided,
)
from tests.cli_helpers import cli_runner


def simulate(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ASCEND_NODE_", "VC_"))}
    return subprocess.run([sys.executable, "-m", "ascend_node", "simulate", "--pd", *args],
                          env=env, capture_output=True, text=True, timeout=timeout)


# --- the service, as processes ---------------------------------------------------------------

@pytest.mark.multiprocess
def test_the_1p2_1d1_service_comes_up_and_the_controller_accepts_it() -> None:
    done = simulate("--devices", "4", "--timeout", "60", "--json", "--keep")
    assert done.returncode == 0, done.stdout + done.stderr
    doc = json.loads(done.stdout)
    work = Path(doc["workspace"])
    try:
        assert doc["ok"] is True
        pods = {p["pod"]: p for p in doc["pods"]}
        assert sorted(pods) == ["controller", "coordinator", "decode-0/0", "pd-table",
                                "prefill-0/0", "prefill-0/1"]
        assert all(pods[name]["serving"] for name in ("coordinator", "pd-table", "controller"))
        assert [pods[f"prefill-0/{i}"]["exit_code"] for i in (0, 1)] == [0, 0]
        assert (pods["prefill-0/0"]["group"], pods["decode-0/0"]["group"]) == ("2", "3")
        assert pods["prefill-0/1"]["ranks"] == "4-7"  # its instance's ranks, from 0
        assert pods["decode-0/0"]["ranks"] == "0-3"
        table = doc["global_table"]
        spec = PdSpec(devices=4)
        assert doc["global_table_problems"] == []
        # the configuration it ran with is the manifest's for this shape
        shared = Path(doc["global_table_path"]).parents[3]
        assert json.loads((work / "controller" / "ms_controller.json").read_text()) == \
            controller_config(spec, shared)
        assert check_global_table(table, flags_from_controller_config(
            controller_config(spec, shared))) == []
        assert [g["group_id"] for g in table["server_group_list"]] == ["0", "1", "2", "3"]
        # every instance centralized: deploy_server "0" for both roles
        assert [g["deploy_server"] for g in table["server_group_list"][2:]] == ["0", "0"]
        # The fake controller read the live file and saw the whole service, each instance
        # in the role of its task (node_machine_num: P's 2 pods, D's 1) ...
        view = doc["controller"]
        assert (view["prefill"], view["decode"], view["undecided"]) == (1, 1, 0)
        assert view["path"] == doc["global_table_path"]
        assert view["groups"] == ["0", "1", "2", "3"]
        assert doc["coordinator_refreshes"] >= 1
        # how soon the table followed (the target is 1 s; the bound is for a loaded machine)
        assert 0 <= doc["table_lag_seconds"] < 10 and 0 <= doc["accept_lag_seconds"] < 10
        # ... and told the coordinator of the instances' nodes: one per instance, at its
        # master (a centralized instance), spanning the instance's pods and NPUs.
        told = [json.loads(line) for line in
                (work / "coordinator" / "state.jsonl").read_text().splitlines()]
        refreshes = [t for t in told if t["event"] == "refresh"]
        assert refreshes
        nodes = {i["group"]: (i["role"], i["servers"], i["devices"], i["server_ip"])
                 for i in refreshes[-1]["instances"]}
        assert nodes == {"2": ("prefill", 2, 8, pods["prefill-0/0"]["pod_ip"]),
                         "3": ("decode", 1, 4, pods["decode-0/0"]["pod_ip"])}
        assert len(refreshes[-1]["instances"]) == 2
        # Every server booted its fake daemon on its instance's table, in PD mode.
        report = work / "prefill-0" / "node-1" / "daemon-report.txt"
        daemon_env = dict(line.split("=", 1) for line in report.read_text().splitlines()
                          if "=" in line)
        assert daemon_env["WORLD_SIZE"] == "8"
        assert daemon_env["MIES_CONTAINER_MANAGEMENT_IP"] == pods["prefill-0/1"]["pod_ip"]
    finally:
        import shutil

        shutil.rmtree(work, ignore_errors=True)


@pytest.mark.multiprocess
def test_equal_pods_per_instance_leave_the_roles_to_the_role_manager_and_say_so() -> None:
    """1 P x 1 pod + 1 D x 1 pod: both groups' deploy_server "0" and equal node_machine_num,
    so nothing in the table or the configuration tells P from D (docs/pd.md's hazard)."""
    done = simulate("--prefill-pods", "1", "--devices", "2", "--timeout", "60", "--no-keep")
    assert done.returncode == 0, done.stdout + done.stderr
    assert ("groups 0, 1, 2, 3; 0 P + 0 D instances + 2 with the role undecided (P and D "
            "instances have equal pods, so node_machine_num cannot tell them apart: the "
            "real controller's role manager picks), 2 nodes") in done.stdout
    assert "the service came up" in done.stdout


@pytest.mark.multiprocess
def test_a_missing_decode_pod_ends_the_service_with_4_naming_it() -> None:
    done = simulate("--devices", "2", "--timeout", "4", "--absent", "decode-0/0", "--no-keep")
    assert done.returncode == 4, done.stdout + done.stderr
    assert "decode-0/0" in done.stdout and "absent" in done.stdout
    # the line names decode-0; on a loaded machine prefill-0 may be unfinished at 4 s too,
    # and is then named before it
    (line,) = [x for x in done.stdout.splitlines() if "pd-table: exit 4: " in x]
    assert "the global rank table is still waiting after 4 s for: " in line, done.stdout
    assert line.endswith("decode-0 (no attempt yet)"), done.stdout
    assert "THE SERVICE DID NOT COME UP" in done.stdout
    assert "global rank table: none written" in done.stdout


@pytest.mark.multiprocess
def test_a_missing_pod_of_a_two_pod_instance_is_named_by_its_peer() -> None:
    done = simulate("--devices", "2", "--timeout", "4", "--absent", "prefill-0/1",
                    "--json", "--no-keep")
    assert done.returncode == 4, done.stdout + done.stderr
    doc = json.loads(done.stdout)
    pods = {p["pod"]: p for p in doc["pods"]}
    assert pods["prefill-0/1"]["absent"] is True
    assert pods["prefill-0/0"]["exit_code"] == 4
    assert "worker 1" in pods["prefill-0/0"]["cause"]  # its instance's missing peer
    assert "prefill-0" in pods["pd-table"]["cause"]
    assert doc["ok"] is False and doc["controller"] is None


# --- options ---------------------------------------------------------------------------------

@pytest.mark.parametrize("args, fragment", [
    (["--pd", "--nodes", "3"], "--nodes means nothing with --pd"),
    (["--pd", "--masters", "0"], "--masters means nothing with --pd"),
    (["--pd", "--boot"], "--boot means nothing with --pd"),
    (["--pd", "--table-out", "t.json"], "--table-out means nothing with --pd"),
    (["--pd", "--report"], "--report means nothing with --pd"),
    (["--pd", "--bad-device", "0:0:no-ip"], "--bad-device means nothing with --pd"),
    (["--pd", "--a3", "--super-pod-size", "2"], "--super-pod-size means nothing with --pd"),
    (["--prefill", "2"], "--prefill needs --pd"),
    (["--decode-pods", "2"], "--decode-pods needs --pd"),
    (["--pd", "--absent", "decode-1/0"], "'decode-1/0' is not TASK/POD of this service"),
    (["--pd", "--absent", "prefill-0/2"], "prefill-0 has pods 0-1"),
    (["--pd", "--timeout", "0"], "--timeout 0 is not"),
    (["--pd", "--prefill", "0"], "--prefill"),
])
def test_meaningless_combinations_are_usage_errors(args: list[str], fragment: str) -> None:
    from ascend_node.cli import app

    result = cli_runner().invoke(app, ["simulate", *args])
    assert result.exit_code == 2, result.output
    assert fragment in result.stderr


@pytest.mark.parametrize("text, expected", [
    ("decode-0/0", {("decode-0", 0)}),
    ("prefill-0/1, decode-0/0", {("prefill-0", 1), ("decode-0", 0)}),
])
def test_absent_pods(text: str, expected: set[tuple[str, int]]) -> None:
    assert parse_absent(text, PdSpec()) == expected


def test_absent_every_server_is_refused() -> None:
    with pytest.raises(UsageError, match="names every server pod"):
        parse_absent("prefill-0/0,prefill-0/1,decode-0/0", PdSpec())


def test_the_spec_from_the_options() -> None:
    spec = build_pd_spec(set(), pd=True, prefill=2, decode=1, prefill_pods=1, decode_pods=2,
                         devices=None, a3=True, timeout=30, tool_delay=0, run_id="svc",
                         absent=None)
    assert spec.devices == 16  # --a3's default
    assert spec.tasks() == [("prefill-0", 1), ("prefill-1", 1), ("decode-0", 2)]
    assert spec.job_env() == {"VC_COORDINATOR_NUM": "1", "VC_CONTROLLER_NUM": "1",
                              "VC_PREFILL_0_NUM": "1", "VC_PREFILL_1_NUM": "1",
                              "VC_DECODE_0_NUM": "2"}


SPECS = [PdSpec(), PdSpec(prefill=2, prefill_pods=1, decode_pods=4, devices=16, a3=True),
         PdSpec(prefill_pods=1, devices=2, run_id="svc-1")]


@pytest.mark.parametrize("spec", SPECS)
def test_the_configurations_are_the_manifests_for_the_same_shape(spec: PdSpec,
                                                                  tmp_path: Path) -> None:
    """Byte for byte what `manifest --kind mindie-pd` puts into its ConfigMap for this shape
    with the shared volume where the simulation keeps it: one source (pd.motor_configs)."""
    p = ManifestParams(kind="mindie", name="pd", nodes=1, image="mindie:2.1", pvc="shared",
                       run_id=spec.run_id, npus_per_node=spec.devices,
                       model_path=str(tmp_path), a3=spec.a3)
    shape = PdShape(spec.prefill, spec.decode, spec.prefill_pods, spec.decode_pods)
    assert motor_files(spec, tmp_path) == render_pd_configmap(p, shape)["data"]


@pytest.mark.parametrize("spec", SPECS)
def test_the_controllers_configuration_fits_the_service(spec: PdSpec, tmp_path: Path) -> None:
    """Every instance centralized (what `boot` starts), tp*dp = its NPUs (the controller's
    DP grouping), node_machine_num its pods, the live table on the shared volume."""
    config: dict[str, Any] = controller_config(spec, tmp_path)
    flags = flags_from_controller_config(config)
    assert flags.multi_node and not flags.p_distributed and not flags.d_distributed
    assert flags.p_devices == spec.prefill_pods * spec.devices
    assert flags.d_devices == spec.decode_pods * spec.devices
    multi = config["multi_node_infer_config"]
    assert (multi["p_node_config"]["node_machine_num"],
            multi["d_node_config"]["node_machine_num"]) == (spec.prefill_pods, spec.decode_pods)
    assert config["global_rank_table_file_path"] == str(global_table_path(tmp_path,
                                                                          spec.run_id))
    assert roles_decided(spec) == (spec.prefill_pods != spec.decode_pods)


def _processes_of(work: Path) -> list[int]:
    """Processes whose command line or environment names the workspace."""
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            blob = (Path("/proc", pid, "cmdline").read_bytes()
                    + Path("/proc", pid, "environ").read_bytes())
        except OSError:
            continue
        if str(work).encode() in blob:
            found.append(int(pid))
    return found


@pytest.mark.multiprocess
def test_sigterm_stops_every_pod_and_removes_the_workspace() -> None:
    import signal
    import time

    env = {k: v for k, v in os.environ.items() if not k.startswith(("ASCEND_NODE_", "VC_"))}
    proc = subprocess.Popen([sys.executable, "-m", "ascend_node", "simulate", "--pd",
                             "--devices", "2", "--absent", "decode-0/0", "--timeout", "60"],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stderr is not None
    first = proc.stderr.readline()  # "simulate: starting a PD service ... in <workspace>"
    work = Path(first.rsplit(" in ", 1)[1].strip())
    deadline = time.monotonic() + 30
    while not (work / "controller" / "stderr.txt").exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    time.sleep(1.0)  # the service pods and the servers are running (decode-0 never comes)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 143, err
    assert "simulate terminated by signal 15 (SIGTERM): every pod stopped, workspace removed" \
        in err
    assert not work.exists()
    assert _processes_of(work) == []
