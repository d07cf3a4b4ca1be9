"""What the PD service reads from the shared volume, and `pd-table`'s wait, on a local disk.

Every state an instance can be in (no attempt, an open attempt, an abort, a table whose
text does not match its digest, a final table) has one outcome; the writer waits for the
whole service before its first table, then rewrites only on a change.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ascend_node.errors import ConfigError, PeerTimeout
from ascend_node.pd.motor_rules import InstanceFlags
from ascend_node.pd.roles import read_pd_identity
from ascend_node.pd.service import (
    ServicePodDoc,
    announce,
    global_table_path,
    pd_dir,
    read_instance,
    read_service_pods,
)
from ascend_node.pd.watch import run_pd_table
from ascend_node.rendezvous.store import RunPaths, write_doc
from tests import pd_docs as docs

RUN = "svc"
JOB = {"VC_COORDINATOR_NUM": "1", "VC_CONTROLLER_NUM": "1", "VC_PREFILL_0_NUM": "1",
       "VC_DECODE_0_NUM": "1"}
COUNTS = {"prefill": 1, "decode": 1}
FLAGS = InstanceFlags(multi_node=True, p_distributed=False, d_distributed=True)


def publish_instance(shared: Path, task: str, subnet: int, **kw: object) -> None:
    docs.publish_instance(shared, RUN, task, subnet, **kw)  # type: ignore[arg-type]


def coordinator(shared: Path) -> None:
    docs.announce_coordinator(shared, RUN, JOB)


@pytest.mark.parametrize(("setup", "waiting"), [
    ({}, "no attempt yet"),
    ({"outcome": False}, "attempt a1 is still open"),
    ({"result": "abort"}, "attempt a1 aborted: worker 0 (node 0) failed: no IP"),
    ({"text": '{"forged": true}'}, "attempt a1's table does not match its sha256"),
])
def test_an_instance_without_a_final_table_is_waited_for(tmp_path: Path, setup: dict[str, object],
                                                        waiting: str) -> None:
    if setup:
        publish_instance(tmp_path, "decode-0", 2, **setup)  # type: ignore[arg-type]
    state = read_instance(tmp_path, RUN, "decode-0")
    assert state.table is None
    assert state.waiting == waiting


def test_a_final_table_comes_with_its_pods_host_ips(tmp_path: Path) -> None:
    publish_instance(tmp_path, "decode-0", 2)
    state = read_instance(tmp_path, RUN, "decode-0")
    assert state.table is not None and state.waiting == ""
    assert state.host_ips == {"172.16.2.10": "192.168.2.10"}


def test_service_pods_are_read_from_their_own_files_only(tmp_path: Path) -> None:
    coordinator(tmp_path)
    # A document that claims another task than its file's name is not believed.
    write_doc(pd_dir(tmp_path, RUN) / "coordinator-1.json",
              ServicePodDoc(run_id=RUN, task="controller", place=0, pod_ip="172.16.9.9",
                            host_ip="192.168.9.9", incarnation="x"), tmp_path)
    pods = read_service_pods(tmp_path, RUN)
    assert [p.pod_ip for p in pods["coordinator"]] == ["172.16.0.10"]
    assert pods["controller"] == []


def test_only_coordinators_and_the_controller_announce(tmp_path: Path) -> None:
    env = {**JOB, "ASCEND_NODE_PD_TASK": "decode-0", "VC_TASK_INDEX": "0",
           "K8S_POD_IP": "172.16.2.10"}
    with pytest.raises(ConfigError, match="is a server"):
        announce(tmp_path, RUN, read_pd_identity(env), env)
    env = {**JOB, "VC_COORDINATOR_NUM": "3", "ASCEND_NODE_PD_TASK": "coordinator",
           "VC_TASK_INDEX": "2", "K8S_POD_IP": "172.16.0.12"}
    with pytest.raises(ConfigError, match="at most 2 coordinators"):
        announce(tmp_path, RUN, read_pd_identity(env), env)


class Clock:
    """A clock that moves only when the loop sleeps; stops the loop after `naps` naps."""

    def __init__(self, naps: int = 1000) -> None:
        self.now = 0.0
        self.naps = naps

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.naps -= 1
        if self.naps < 0:
            raise StopIteration
        self.now += seconds


def test_the_first_table_waits_for_the_whole_service(tmp_path: Path) -> None:
    publish_instance(tmp_path, "prefill-0", 1)
    coordinator(tmp_path)
    clock = Clock()
    with pytest.raises(PeerTimeout, match=r"waiting after 5 s for: decode-0 \(no attempt yet\)"):
        run_pd_table(tmp_path, RUN, COUNTS, FLAGS, global_table_path(tmp_path, RUN),
                     timeout=5, watch=False, clock=clock, sleep=clock.sleep)
    assert not global_table_path(tmp_path, RUN).exists()
    assert 4.0 <= clock.now <= 6.0


def test_once_writes_one_table_and_watch_rewrites_only_on_a_change(tmp_path: Path) -> None:
    publish_instance(tmp_path, "prefill-0", 1)
    publish_instance(tmp_path, "decode-0", 2)
    coordinator(tmp_path)
    out = global_table_path(tmp_path, RUN)
    assert run_pd_table(tmp_path, RUN, COUNTS, FLAGS, out, timeout=5, watch=False) == 1
    first = out.stat().st_ino
    clock = Clock(naps=5)
    with pytest.raises(StopIteration):  # five unchanged looks: nothing rewritten
        run_pd_table(tmp_path, RUN, COUNTS, FLAGS, out, timeout=5, watch=True,
                     clock=clock, sleep=clock.sleep)
    assert out.stat().st_ino != first  # the watcher's own first write
    second = out.stat().st_ino
    writes: list[int] = []

    class Counting(Clock):
        def sleep(self, seconds: float) -> None:
            writes.append(out.stat().st_ino)
            if len(writes) == 2:  # the decode instance restarts: its attempt is open
                publish_instance(tmp_path, "decode-0", 2, outcome=False)
                (RunPaths(tmp_path, f"{RUN}-decode-0").outcome("a1")).unlink()
            super().sleep(seconds)

    counting = Counting(naps=4)
    with pytest.raises(StopIteration):
        run_pd_table(tmp_path, RUN, COUNTS, FLAGS, out, timeout=5, watch=True,
                     clock=counting, sleep=counting.sleep)
    doc = json.loads(out.read_text())
    assert [g["group_id"] for g in doc["server_group_list"]] == ["0", "1", "2"]
    assert second != writes[0]  # this watcher wrote its first table too
    assert writes[0] == writes[1] and writes[2] != writes[1]  # one rewrite, on the change


def test_a_watcher_reads_an_unchanged_outcome_once(tmp_path: Path) -> None:
    from ascend_node.pd.service import Seen

    publish_instance(tmp_path, "decode-0", 2)
    seen: Seen = {}
    first = read_instance(tmp_path, RUN, "decode-0", seen=seen)
    slot = RunPaths(tmp_path, f"{RUN}-decode-0").slot("a1", 0)
    slot.unlink()  # not read again while the outcome is the same file
    assert read_instance(tmp_path, RUN, "decode-0", seen=seen) == first
    publish_instance(tmp_path, "decode-0", 2)  # a new outcome (by rename): read afresh
    slot.unlink()
    again = read_instance(tmp_path, RUN, "decode-0", seen=seen)
    assert again.table == first.table and again.host_ips == {}


@pytest.mark.parametrize("task", ["coordinator", "controller"])
def test_a_restarted_coordinator_or_controller_is_rewritten_into_its_group(
        tmp_path: Path, task: str) -> None:
    """Issue 31, restarts: the coordinator's or the controller's pod comes back with a new
    pod IP and announces itself again; the watcher rewrites group "0" (or "1") with it and
    leaves every instance's group as it was."""
    publish_instance(tmp_path, "prefill-0", 1)
    publish_instance(tmp_path, "decode-0", 2)
    coordinator(tmp_path)
    pod = {**JOB, "ASCEND_NODE_PD_TASK": "controller", "VC_TASK_INDEX": "0",
           "K8S_POD_IP": "172.16.1.10", "K8S_HOST_IP": "192.168.1.1", "POD_UID": "k0"}
    announce(tmp_path, RUN, read_pd_identity(pod), pod)
    out = global_table_path(tmp_path, RUN)
    assert run_pd_table(tmp_path, RUN, COUNTS, FLAGS, out, timeout=5, watch=False) == 1
    before = {g["group_id"]: g for g in json.loads(out.read_text())["server_group_list"]}
    group = "0" if task == "coordinator" else "1"
    assert before[group]["server_list"][0]["server_ip"] == (
        "172.16.0.10" if task == "coordinator" else "172.16.1.10")
    again = {**JOB, "ASCEND_NODE_PD_TASK": task, "VC_TASK_INDEX": "0",
             "K8S_POD_IP": "172.16.7.77", "K8S_HOST_IP": "192.168.7.7", "POD_UID": "new"}

    class Restarting(Clock):
        def sleep(self, seconds: float) -> None:
            if self.naps == 3:  # the pod comes back while the watcher runs
                announce(tmp_path, RUN, read_pd_identity(again), again)
            super().sleep(seconds)

    clock = Restarting(naps=4)
    with pytest.raises(StopIteration):
        run_pd_table(tmp_path, RUN, COUNTS, FLAGS, out, timeout=5, watch=True,
                     clock=clock, sleep=clock.sleep)
    after = {g["group_id"]: g for g in json.loads(out.read_text())["server_group_list"]}
    assert [s["server_ip"] for s in after[group]["server_list"]] == ["172.16.7.77"]
    assert [s["server_id"] for s in after[group]["server_list"]] == ["192.168.7.7"]
    assert {k: v for k, v in after.items() if k != group} == \
        {k: v for k, v in before.items() if k != group}


def test_a_global_table_path_that_cannot_be_written_is_one_line_not_a_traceback(
        tmp_path: Path) -> None:
    """`pd-table --rendezvous kube` writes into a state directory nothing made before (its
    directory is made); a path under a file cannot be, and says so (exit 1)."""
    from ascend_node.pd.files import write_global_table

    doc = {"version": "1.0", "status": "completed", "server_group_list": []}
    made = tmp_path / "state" / "pd" / "global_ranktable.json"
    write_global_table(made, doc)
    assert json.loads(made.read_text())["status"] == "completed"
    (tmp_path / "file").write_text("")
    with pytest.raises(ConfigError, match="cannot write the global rank table"):
        write_global_table(tmp_path / "file" / "pd" / "global_ranktable.json", doc)
