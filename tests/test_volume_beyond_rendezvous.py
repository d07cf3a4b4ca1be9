"""A shared volume that stops answering never outlives a command's bound, on every path of a
pod and of an operator beyond the rendezvous itself (issue 29): `boot` after the table,
MindCluster's file source, `doctor --peers`, `report` and `clean`.

Fast and on a local disk: real agent processes whose calls below FROZEN_VOLUME_ROOT wait
while a flag file exists, as on a `hard` NFS mount whose server froze
(`tests/frozen_volume.py`). Each test asserts the contract's exit code for a time-out (4),
that it came within the command's bound plus `SLACK`, and that the message names the
volume's path and what could not be done. The rendezvous's own cases are in
`tests/test_volume_stall.py`; the same on a real NFS server in `tests/test_nfs_faults.py`.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from ascend_node.doctor.runner import VOLUME_ANSWER
from ascend_node.sim.cluster import SimSpec, launch, prepare
from tests.cluster_helpers import explain, make_nodes

FAKE = Path(__file__).with_name("frozen_volume.py")
SLACK = 10.0  # the bound: nothing outlives its deadline + 10 s
WAIT = 3.0  # report's and clean's bound in these tests (FROZEN_VOLUME_WAIT; 60 s for real)


def _cause(stderr: str) -> str:
    line = next((x for x in stderr.splitlines() if x.startswith("ascend-node: error: ")), "")
    assert line, stderr
    return line.removeprefix("ascend-node: error: ")


def _operator(tmp_path: Path, *args: str) -> tuple[subprocess.CompletedProcess[str], float,
                                                     Path]:
    """`ascend-node ARGS` with the shared directory frozen from the start."""
    shared, flag = tmp_path / "shared", tmp_path / "frozen"
    (shared / ".ascend-node" / "r1").mkdir(parents=True)
    flag.touch()
    env = {**os.environ, "FROZEN_VOLUME_ROOT": str(shared), "FROZEN_VOLUME_FLAG": str(flag),
           "FROZEN_VOLUME_WAIT": f"{WAIT:g}", "ASCEND_NODE_SHARED_DIR": str(shared),
           "ASCEND_NODE_RUN_ID": "r1", "ASCEND_NODE_STATE_DIR": str(tmp_path / "state")}
    started = time.monotonic()
    done = subprocess.run([sys.executable, str(FAKE), *args], env=env, capture_output=True,
                          text=True, timeout=120, stdin=subprocess.DEVNULL)
    return done, time.monotonic() - started, shared


def test_report_on_a_volume_that_does_not_answer_exits_4_naming_it(tmp_path: Path) -> None:
    done, seconds, shared = _operator(tmp_path, "report")
    assert done.returncode == 4, done.stderr
    assert seconds < WAIT + SLACK
    cause = _cause(done.stderr)
    assert "the shared volume has not answered" in cause and str(shared) in cause, cause
    assert "the run's records could not be read" in cause


def test_clean_on_a_volume_that_does_not_answer_exits_4_naming_it(tmp_path: Path) -> None:
    done, seconds, shared = _operator(tmp_path, "clean", "--yes")
    assert done.returncode == 4, done.stderr
    assert seconds < WAIT + SLACK
    cause = _cause(done.stderr)
    assert "the shared volume has not answered" in cause and str(shared) in cause, cause
    assert (shared / ".ascend-node" / "r1").is_dir()  # nothing was removed


def test_doctor_peers_on_a_volume_that_does_not_answer_exits_4_naming_it(
        tmp_path: Path) -> None:
    node = make_nodes(tmp_path, 2, devices=2)[0]
    shared, flag = tmp_path / "shared", tmp_path / "frozen"
    flag.touch()
    env = {**node.env, "FROZEN_VOLUME_ROOT": str(shared), "FROZEN_VOLUME_FLAG": str(flag)}
    started = time.monotonic()
    done = subprocess.run([sys.executable, str(FAKE), "doctor", "--peers", "--json"], env=env,
                          capture_output=True, text=True, timeout=VOLUME_ANSWER + 120,
                          stdin=subprocess.DEVNULL)
    assert done.returncode == 4, done.stderr
    # + 15 s for the interpreter's start and imports on a loaded machine (seen: 10 s): the
    # bound is the agent's, from its own start
    assert time.monotonic() - started < VOLUME_ANSWER + SLACK + 15
    cause = _cause(done.stderr)
    assert "the shared volume has not answered" in cause and str(shared) in cause, cause
    assert "the peers' facts could not be read" in cause


def _frozen_pod(tmp_path: Path, frozen: Path, timeout: float, boot: bool = False,
                **env: str):  # type: ignore[no-untyped-def]
    """One pod (a job of one node) whose calls below `frozen` wait from its start."""
    spec = SimSpec(nodes=1, devices=2, run_id="v", timeout=timeout, boot=boot,
                   extra_env={"ASCEND_NODE_PROGRESS_INTERVAL": "1", **env})
    shared = tmp_path / "shared"
    shared.mkdir(parents=True, exist_ok=True)
    pod = prepare(spec, tmp_path / "work", shared)[0]
    flag = tmp_path / "frozen"
    flag.touch()
    frozen.mkdir(parents=True, exist_ok=True)
    pod.env.update({"FROZEN_VOLUME_ROOT": str(frozen), "FROZEN_VOLUME_FLAG": str(flag)})
    pod.argv = [sys.executable, str(FAKE), *pod.argv[3:]]
    return pod


def test_boot_after_the_table_with_the_wheel_on_a_frozen_volume_exits_4_by_its_deadline(
        tmp_path: Path) -> None:
    wheels = tmp_path / "shared" / "wheels"
    pod = _frozen_pod(tmp_path, wheels, timeout=8, boot=True,
                      ASCEND_NODE_ATB_WHEEL_DIR=str(wheels))
    result = launch([pod], 60)[0]
    assert result.exit_code == 4, explain([result])
    assert result.seconds < 8 + SLACK, explain([result])
    cause = _cause(result.stderr)
    assert "the shared volume has not answered" in cause and str(wheels) in cause, cause
    assert "the atb_llm wheel could not be read" in cause
    assert "rank table ready" in result.stderr  # the table came first: this is after it


def test_the_mindcluster_file_on_a_frozen_volume_exits_4_by_the_deadline_naming_it(
        tmp_path: Path) -> None:
    config = tmp_path / "configmap"
    pod = _frozen_pod(tmp_path, config, timeout=5, ASCEND_NODE_TABLE_SOURCE="mindcluster",
                      ASCEND_NODE_HCCL_JSON=str(config / "hccl.json"))
    result = launch([pod], 60)[0]
    assert result.exit_code == 4, explain([result])
    assert result.seconds < 5 + SLACK, explain([result])
    cause = _cause(result.stderr)
    assert "the shared volume has not answered" in cause and str(config) in cause, cause
    assert "MindCluster's rank table could not be read" in cause
