"""The rendered PD service runs: `manifest --kind mindie-pd`'s YAML, pod by pod, in podman.

The Job and the ConfigMap that `ascend-node manifest --kind mindie-pd` prints for 1 prefill
instance of 2 pods and 1 decode instance of 1 pod are run by tests/kubelet_bed.py as the
kubelet would run them (Volcano's env, the downward API, the ConfigMap as the kubelet lays
it out — `..data` symlinks —, the controller's table writer as a native sidecar, the
probes on their schedule). Only the vendor side is fake: NPUs, hccn_tool and the MindIE
daemon (tests/test_manifest_pods.py's), and MindIE-Motor's coordinator and controller
(`ascend_node/sim/fake_motor.py`, started under the names the rendered commands exec:
`mindie_motor_coordinator`, `mindie_motor_controller`; the fake controller re-reads the
table as the real one does and applies its loader's and its file check's rules).

What a user relies on, and what is asserted: every pod comes up; the servers are Ready;
the controller's pod holds a global table the controller's rules accept, with every
instance in its group, and the fake controller took it; then a decode pod killed is, by
the rendered policy, its task restarted (the bed plays Volcano's `RestartTask`), and the
table is rewritten with the new address in the same group while the prefill instance is
left running — and the table writer, killed before, was started again beside the
controller by the kubelet (a native sidecar) and did the rewrite. Root only; skips
without podman/mmdebstrap.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from ascend_node.pd.files import validate_global_file
from ascend_node.pd.motor_rules import flags_from_controller_config
from tests.kubelet_bed import KubeletBed, PodPlan
from tests.test_manifest_pods import (  # noqa: F401  (the bed fixture)
    MODEL_PATH,
    NPUS,
    SIM_DIR,
    SUBNETS,
    bed,
    node_files,
)
from tests.volcano_model import PodEvent, apply_policies, request_for

pytestmark = [pytest.mark.containers]

NAME, RUN = "pdsvc", "pdsvc-1"
LOAD_S = 3.0
MOTOR_BIN = f"{MODEL_PATH}/{SIM_DIR}/bin"  # the fake daemons' names, on the PVC
IMAGE_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
FAKE = """#!/bin/sh
# MindIE-Motor's {role}, faked (ascend_node/sim/fake_motor.py)
exec python3 -m ascend_node.sim.fake_motor {role} "$@"
"""


def render() -> list[dict[str, Any]]:
    """What a platform engineer would `kubectl apply`: the command's own YAML output."""
    done = subprocess.run(
        [sys.executable, "-m", "ascend_node", "manifest", "--kind", "mindie-pd", "--name", NAME,
         "--run-id", RUN, "--prefill", "1", "--prefill-pods", "2", "--decode", "1",
         "--decode-pods", "1", "--image", "localhost/ascend-node-mindie:test", "--pvc", "model",
         "--npus-per-node", str(NPUS), "--model-path", MODEL_PATH, "--timeout", "120"],
        capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return [d for d in yaml.safe_load_all(done.stdout) if d]


def table(shared: Path) -> Any:
    path = shared / ".ascend-node" / RUN / "pd" / "global_ranktable.json"
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def groups(doc: Any) -> dict[str, list[str]]:
    """group id -> its servers' pod IPs."""
    return {g["group_id"]: [s["server_ip"] for s in g["server_list"]]
            for g in doc["server_group_list"]}


def test_the_rendered_service_comes_up_and_a_decode_restart_is_rewritten(
        bed: Any) -> None:  # noqa: F811
    configmap, job = render()
    shared = bed.work / "pvcs" / NAME
    subprocess.run(["rm", "-rf", str(shared)], check=True)
    (shared / SIM_DIR / "bin").mkdir(parents=True)
    (shared / SIM_DIR).chmod(0o777)
    from ascend_node.sim.fake_tools import SIM_MODEL_CONFIG

    (shared / "config.json").write_text(SIM_MODEL_CONFIG)
    for role in ("coordinator", "controller"):
        script = shared / SIM_DIR / "bin" / f"mindie_motor_{role}"
        script.write_text(FAKE.format(role=role))
        script.chmod(0o755)

    def fakes(plan: PodPlan) -> dict[str, str]:
        if plan.task in ("coordinator", "controller"):
            return {"PATH": f"{MOTOR_BIN}:{IMAGE_PATH}", "PYTHONUNBUFFERED": "1",
                    "ASCEND_NODE_SIM_MOTOR_PERIOD": "1",
                    "ASCEND_NODE_SIM_MOTOR_STATE": f"{MODEL_PATH}/{SIM_DIR}/{plan.task}.jsonl"}
        return {"ASCEND_NODE_SIM_DATA": "/usr/local/Ascend/driver/sim-data",
                "ASCEND_NODE_SIM_SERVE": "health", "ASCEND_NODE_SIM_LOAD_S": str(LOAD_S),
                "ASCEND_NODE_SIM_REPORT": f"{MODEL_PATH}/{SIM_DIR}/{plan.name}",
                "PYTHONUNBUFFERED": "1"}

    kb = KubeletBed(bed, job, next(SUBNETS), {"model": shared}, extra_env=fakes,
                    node_files=node_files,
                    config_maps={configmap["metadata"]["name"]: configmap["data"]})
    config = json.loads(configmap["data"]["ms_controller.json"])
    flags = flags_from_controller_config(config)
    try:
        t0 = time.monotonic()
        kb.start()
        by_name = {p.name: p for p in kb.pods}
        assert sorted(by_name) == [f"{NAME}-{t}" for t in (
            "controller-0", "coordinator-0", "decode-0-0", "prefill-0-0", "prefill-0-1")]
        assert by_name[f"{NAME}-controller-0"].sidecars == [f"{NAME}-controller-0--pd-table"]
        kb.wait_for(lambda: all(p.ready for p in kb.pods), 300, "every pod Ready")
        ip = {p.name: p.plan.ip for p in kb.pods}

        def complete() -> bool:
            doc = table(shared)
            return doc is not None and sorted(groups(doc)) == ["0", "1", "2", "3"]

        t_ready = time.monotonic()
        kb.wait_for(complete, 120, "the global table with every group")
        t_table = time.monotonic()
        path = shared / ".ascend-node" / RUN / "pd" / "global_ranktable.json"
        assert validate_global_file(path, flags, check_owner_uid=0) == []
        before = groups(table(shared))
        assert before == {"0": [ip[f"{NAME}-coordinator-0"]], "1": [ip[f"{NAME}-controller-0"]],
                          "2": [ip[f"{NAME}-prefill-0-0"], ip[f"{NAME}-prefill-0-1"]],
                          "3": [ip[f"{NAME}-decode-0-0"]]}
        # The fake controller took it, started on a real copy of the ConfigMap's file.
        state = shared / SIM_DIR / "controller.jsonl"

        def accepted() -> list[dict[str, Any]]:
            lines = state.read_text().splitlines() if state.is_file() else []
            return [e for e in map(json.loads, lines) if e.get("event") == "accepted"]

        kb.wait_for(lambda: bool(accepted()), 60, "the fake controller took the table")
        assert (accepted()[-1]["prefill"], accepted()[-1]["decode"]) == (1, 1)
        copy = kb.dir / f"{NAME}-controller-0" / "emptydir" / "ascend-node-state" / "motor" \
            / "ms_controller.json"
        assert copy.is_file() and not copy.is_symlink() and copy.stat().st_mode & 0o777 == 0o640
        assert json.loads(copy.read_text()) == config

        # The table writer dies: the kubelet starts the native sidecar again, the
        # controller (the pod's main container) runs on; the rewrite below is its work.
        controller = by_name[f"{NAME}-controller-0"]
        (writer,) = controller.sidecars
        bed.podman("kill", "-s", "KILL", writer, check=False)
        kb.wait_for(lambda: any(w.startswith(f"sidecar {writer} exited") for _, w in
                                controller.events), 60, "the writer seen ending")
        kb.wait_for(lambda: bed.state(writer).get("Running") is True, 60,
                    "the writer running again")
        assert controller.phase == "Running" and controller.ready

        # A decode pod dies; the rendered policy restarts its task only.
        decode = by_name[f"{NAME}-decode-0-0"]
        bed.podman("kill", "-s", "KILL", decode.name, check=False)
        kb.wait_for(lambda: decode.phase == "Failed", 60, "the decode pod Failed")
        action = apply_policies(job, request_for(PodEvent("failed", decode.exit_code or 137,
                                                          task="decode-0")), 0)
        assert action == "RestartTask"
        prefill_started = {n: bed.state(n).get("StartedAt") for n in by_name if "prefill" in n}
        (new,) = kb.restart_task("decode-0")
        assert new.name == decode.name and new.plan.ip != decode.plan.ip
        t_restart = time.monotonic()
        kb.wait_for(lambda: new.ready, 300, "the restarted decode pod Ready")
        t_new_ready = time.monotonic()

        def rewritten() -> bool:
            doc = table(shared)
            return doc is not None and groups(doc).get("3") == [new.plan.ip]

        kb.wait_for(rewritten, 120, "the table rewritten with the new decode address")
        print(f"measured: every pod Ready {t_ready - t0:.1f} s after start, the complete "
              f"table {t_table - t0:.1f} s; after RestartTask the decode pod Ready in "
              f"{t_new_ready - t_restart:.1f} s, the table rewritten "
              f"{time.monotonic() - t_restart:.1f} s after it (load average "
              f"{os.getloadavg()[0]:.1f})")
        after = groups(table(shared))
        assert {k: v for k, v in after.items() if k != "3"} == \
            {k: v for k, v in before.items() if k != "3"}
        assert validate_global_file(path, flags, check_owner_uid=0) == []
        # The prefill instance was left alone, serving.
        for n, started in prefill_started.items():
            assert bed.state(n).get("StartedAt") == started
            assert by_name[n].ready
        kb.wait_for(lambda: any(new.plan.ip in " ".join(e["nodes"]) for e in accepted()), 60,
                    "the fake controller saw the new decode node")
        gone = [n for e in accepted() for n in e["scale_in"]]
        assert any(n.startswith(f"{decode.plan.ip}:") for n in gone), accepted()
    finally:
        print(kb.describe())
        kb.stop()
