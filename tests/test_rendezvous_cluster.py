"""The rendezvous contract, with N real agent processes on a shared temporary directory."""

from __future__ import annotations

import json
import math
import random
import re
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from ascend_node.ranktable import validate_rank_table
from ascend_node.rendezvous.participant import names_of
from ascend_node.sim.cluster import launch
from tests.cluster_helpers import (
    attempt_doc,
    codes,
    explain,
    make_nodes,
    progress_doc,
    run,
    shared_table,
    table_of,
)
from tests.forger import Forger

pytestmark = pytest.mark.multiprocess

SAFETY_NET = 600.0
"""Peer timeout of tests whose contract is not a timeout: it only keeps a broken build
from hanging forever, and no load on a shared 2-core machine comes near it."""


def assert_agreement(tmp, results, nodes, devices_per_node):
    assert codes(results) == [0] * len(nodes), explain(results)
    tables = {table_of(r) for r in results}
    assert len(tables) == 1, "tables differ between nodes"
    text = tables.pop()
    assert (tmp / "shared" / "ranktable-t.json").read_bytes() == text
    table = json.loads(text)
    assert table["status"] == "completed" and table["version"] == "1.0"
    servers = table["server_list"]
    assert [s["container_ip"] for s in servers] == [n.env["K8S_POD_IP"] for n in nodes]
    ranks = [int(d["rank_id"]) for s in servers for d in s["device"]]
    assert ranks == list(range(len(ranks)))
    for server, count in zip(servers, devices_per_node):
        ids = [int(d["device_id"]) for d in server["device"]]
        assert ids == sorted(ids) and len(ids) == count
    return table


def test_64_nodes_masters_and_workers_any_order_agree(tmp_path):
    # The contract here is agreement, not speed: 64 agents need ~20 s of CPU, which a
    # loaded 2-core machine spreads over minutes. The peer and tool timeouts are only
    # what keeps a broken build from hanging, so they sit far beyond any load.
    nodes = make_nodes(tmp_path, 64, devices=2, masters=2, timeout=SAFETY_NET,
                       ASCEND_NODE_TOOL_TIMEOUT=str(SAFETY_NET))
    order = list(range(64))
    random.shuffle(order)
    for rank, node in zip(order, nodes):
        node.start_delay = rank * 0.01
    table = assert_agreement(tmp_path, run(nodes), nodes, [2] * 64)
    assert validate_rank_table(table, "hccl") == []  # MindIE itself stops at 60 servers


def test_20_concurrent_trials_of_16_nodes_lose_no_entry(tmp_path):
    for trial in range(20):
        tmp = tmp_path / f"trial-{trial}"
        masters = random.choice([1, 2, 4])
        nodes = make_nodes(tmp, 16, devices=2, masters=masters, timeout=60)
        for node in nodes:
            node.start_delay = random.uniform(0, 0.3)
        assert_agreement(tmp, run(nodes), nodes, [2] * 16)


def test_uneven_devices_use_prefix_sums_when_allowed(tmp_path):
    nodes = make_nodes(tmp_path, 3, devices=4, timeout=SAFETY_NET,
                       ASCEND_NODE_ALLOW_UNEVEN_DEVICES="1")
    nodes[1].devices = nodes[1].devices[:2]
    nodes[1].env["ASCEND_VISIBLE_DEVICES"] = "0,1"
    table = assert_agreement(tmp_path, run(nodes), nodes, [4, 2, 4])
    assert [d["rank_id"] for d in table["server_list"][2]["device"]] == ["6", "7", "8", "9"]


PROGRESS = re.compile(r"\] (\d+)/4 present, waiting for (.*)$", re.M)


def test_missing_node_times_out_with_4_naming_it(tmp_path):
    """A 4 s timeout counts from each agent's start, so on a loaded machine a present
    peer may publish only after node 0's deadline, and node 0 may get no progress tick
    between the last publish and its deadline. What is certain is asserted: everyone
    ends with 4 naming the absent node, and node 0's message names exactly the nodes
    its last view (its progress document, written before the deadline check) lacked.
    `test_node_0_says_whom_it_waits_for_until_the_late_node_comes` pins the lines of
    the usual case without a deadline in the way."""
    nodes = make_nodes(tmp_path, 4, masters=1, timeout=4)
    started = [n for n in nodes if n.index != 2]
    results = run(started)
    assert codes(results) == [4, 4, 4], explain(results)
    for r in results:
        error = next(ln for ln in r.stderr.splitlines() if "error:" in ln)
        assert "timed out after 4 s waiting for peers: " in error, r.stderr
        assert "worker 1 (node 2)" in error.split(" missing: ", 1)[1], r.stderr
    last_view = progress_doc(tmp_path)
    assert 2 in last_view["missing"]
    assert (f"{len(last_view['missing'])} of 4 missing: "
            f"{names_of(last_view['missing'], 1)}\n") in results[0].stderr, results[0].stderr
    # Node 0 says whom it waits for from its first poll on (not only after an interval).
    lines = PROGRESS.findall(results[0].stderr)
    assert lines, results[0].stderr
    for present, waiting in lines:
        assert "worker 1 (node 2)" in waiting.split(", ")
        assert int(present) + len(waiting.split(", ")) == 4
    status = json.loads((results[1].state_dir / "status.json").read_text())
    assert status["state"] == "failed" and status["exit_code"] == 4


def test_node_0_says_whom_it_waits_for_until_the_late_node_comes(tmp_path):
    """The progress lines of a wait for one node, awaited (not timed): node 0 names the
    one node it waits for, each follower names it as the only other node node 0 waits
    for; then the late node starts and everyone gets the table."""
    nodes = make_nodes(tmp_path, 4, masters=1, timeout=SAFETY_NET)
    expected = {0: "] 3/4 present, waiting for worker 1 (node 2)\n"}
    expected.update({i: "node 0 still waits for 1 other node(s): worker 1 (node 2)\n"
                     for i in (1, 3)})
    logs = {i: nodes[i].state_dir.parent / "stderr.txt" for i in expected}

    def said() -> dict[int, str]:
        return {i: p.read_text() if p.is_file() else "" for i, p in logs.items()}

    with ThreadPoolExecutor(1) as pool:
        early = pool.submit(run, [n for n in nodes if n.index != 2], SAFETY_NET)
        try:
            deadline = time.monotonic() + SAFETY_NET
            while not all(expected[i] in text for i, text in said().items()):
                if early.done() or time.monotonic() > deadline:
                    break
                time.sleep(0.1)
            seen = said()
        finally:
            late = run([nodes[2]], SAFETY_NET)  # the late node completes the job either way
        results = early.result()
    assert all(expected[i] in text for i, text in seen.items()), seen
    assert codes(results) == [0, 0, 0] and codes(late) == [0], explain([*results, *late])
    assert len({table_of(r) for r in [*results, *late]}) == 1


def test_missing_node_0_is_named_by_everyone(tmp_path):
    nodes = make_nodes(tmp_path, 3, timeout=3)
    results = run(nodes[1:])
    assert codes(results) == [4, 4]
    assert all("missing: master 0 (node 0)" in r.stderr for r in results), explain(results)


def _start_once_contested(tmp_path, node, index=2):
    """An `on_tick` starting `node` (until then `start_delay` inf) once the slot of node
    `index` holds a document marked contested (both twins have published), or once any
    node ended: not at a fixed second, which a loaded machine made too early."""
    forger = Forger(tmp_path / "shared")
    node.start_delay = math.inf

    def tick(elapsed, ended, _running):
        if node.start_delay != math.inf:
            return
        attempt = forger.read(forger.root / "attempt.json")
        slot = attempt and forger.read(forger.root / "attempts" / str(attempt["attempt_id"])
                                       / f"node-{index}.json")
        if ended or (slot and slot.get("contested")):
            node.start_delay = elapsed

    return tick


def _five_quickly(results, timeout_s, words):
    """Exit 5 for everyone, long before the timeout: the abort did not wait for it."""
    assert codes(results) == [5] * len(results), explain(results)
    assert max(r.seconds for r in results) < timeout_s / 2
    for r in results:
        assert words in r.stderr, r.stderr


def test_device_ip_collision_ends_everyone_with_5(tmp_path):
    nodes = make_nodes(tmp_path, 4, timeout=SAFETY_NET)
    nodes[3].devices[1].ip = nodes[1].devices[0].ip
    _five_quickly(run(nodes), SAFETY_NET, f"device IP {nodes[1].devices[0].ip} is used on")


def test_device_count_mismatch_ends_everyone_with_5(tmp_path):
    nodes = make_nodes(tmp_path, 3, timeout=SAFETY_NET)
    nodes[2].env["ASCEND_VISIBLE_DEVICES"] = "0,1"
    _five_quickly(run(nodes), SAFETY_NET, "device counts differ")


def test_two_live_pods_claiming_one_index_end_with_5(tmp_path):
    nodes = make_nodes(tmp_path, 3, timeout=60)
    twin = make_nodes(tmp_path / "twin", 3)[2]
    twin.env.update({k: nodes[0].env[k] for k in ("ASCEND_NODE_SHARED_DIR",)})
    twin.env["K8S_POD_IP"] = "10.250.0.1"
    twin.devices = [type(d)(d.device_id, f"10.99.0.{d.device_id + 1}") for d in twin.devices]
    twin.index = 3
    # Both twins publish before the last member (node 1) arrives, the second 0.3 s after
    # the first: node 0 never completes while a slot is contested. (A twin arriving after
    # the table completed is a documented limit: it cannot be told from a re-created pod.)
    nodes[2].start_delay = 0.3
    results = launch([*nodes, twin], 60, on_tick=_start_once_contested(tmp_path, nodes[1]))
    _five_quickly(results, 60, "two live pods claim worker 1 (node 2)")


def test_twins_starting_together_end_with_5(tmp_path):
    """Exactly one twin creates the slot; the other finds it taken and marks its own
    document contested, so node 0 waits for the objection instead of completing."""
    nodes = make_nodes(tmp_path, 3, timeout=60)
    twin = make_nodes(tmp_path / "twin", 3)[2]
    twin.env["ASCEND_NODE_SHARED_DIR"] = nodes[0].env["ASCEND_NODE_SHARED_DIR"]
    twin.env["K8S_POD_IP"] = "10.250.0.1"
    twin.devices = [type(d)(d.device_id, f"10.99.0.{d.device_id + 1}") for d in twin.devices]
    twin.index = 3
    _five_quickly(launch([*nodes, twin], 60, on_tick=_start_once_contested(tmp_path, nodes[1])),
                  60, "two live pods claim worker 1 (node 2)")


def test_local_failure_is_1_and_peers_exit_5_naming_it(tmp_path):
    nodes = make_nodes(tmp_path, 3, timeout=60)
    nodes[1].devices[2].ip = None
    results = run(nodes)
    assert codes(results) == [5, 1, 5], explain(results)
    assert "device 2 has no usable RoCE IP" in results[1].stderr
    for r in (results[0], results[2]):
        assert "worker 0 (node 1) failed: device 2 has no usable RoCE IP" in r.stderr
        assert r.seconds < 30


# ------------------------------------------------------------------ restarts


def test_container_restart_gets_the_same_table_without_a_new_round(tmp_path):
    nodes = make_nodes(tmp_path, 3, timeout=SAFETY_NET)
    first = run(nodes)
    assert codes(first) == [0, 0, 0], explain(first)
    before = attempt_doc(tmp_path)
    table = table_of(first[0])
    for index in (1, 0):  # a follower, then the assembler, restart alone
        again = run([nodes[index]])
        assert codes(again) == [0], explain(again)
        assert table_of(again[0]) == table
        assert attempt_doc(tmp_path) == before
        assert again[0].seconds < SAFETY_NET / 2  # it waited for no peer (none runs)


def test_container_restart_with_empty_state_dir_gets_the_same_table(tmp_path):
    nodes = make_nodes(tmp_path, 2, timeout=SAFETY_NET)
    first = run(nodes)
    assert codes(first) == [0, 0]
    table = table_of(first[1])
    for child in nodes[1].state_dir.iterdir():
        child.unlink()
    again = run([nodes[1]])
    assert codes(again) == [0] and table_of(again[0]) == table


def recreate(node, new_ip=None, new_device_base=None):
    import uuid

    node.env["POD_UID"] = str(uuid.uuid4())
    if new_ip:
        node.env["K8S_POD_IP"] = new_ip
    if new_device_base is not None:
        for d in node.devices:
            d.ip = f"10.{new_device_base}.{node.index}.{d.device_id + 1}"


def test_job_restart_builds_a_new_table_and_uses_nothing_old(tmp_path):
    nodes = make_nodes(tmp_path, 4, timeout=SAFETY_NET)
    assert codes(run(nodes)) == [0] * 4
    old = attempt_doc(tmp_path)
    for node in nodes:
        recreate(node, new_ip=f"10.210.0.{node.index + 1}", new_device_base=77)
    nodes[3].start_delay = 2.0  # a late pod: its old slot sits in the old attempt
    nodes[1].start_delay = 0.0
    nodes[0].start_delay = 0.5  # followers come first and see the old, completed attempt
    results = run(nodes)
    assert codes(results) == [0] * 4, explain(results)
    table = shared_table(tmp_path)
    assert [s["container_ip"] for s in table["server_list"]] == [
        f"10.210.0.{i + 1}" for i in range(4)]
    assert all(d["device_ip"].startswith("10.77.") for s in table["server_list"]
               for d in s["device"])
    assert attempt_doc(tmp_path)["attempt_id"] != old["attempt_id"]


def test_recreated_pod_with_identical_data_is_admitted(tmp_path):
    nodes = make_nodes(tmp_path, 3, timeout=SAFETY_NET)
    first = run(nodes)
    assert codes(first) == [0, 0, 0]
    recreate(nodes[2])
    again = run([nodes[2]])
    assert codes(again) == [0], explain(again)
    assert table_of(again[0]) == table_of(first[0])


def test_recreated_pod_with_changed_data_is_refused_until_the_job_restarts(tmp_path):
    # Only the refused pod's wait is meant to end at its timeout (3 s); the runs that
    # must succeed get a timeout no load comes near (3 s failed them on a loaded machine).
    nodes = make_nodes(tmp_path, 3, timeout=SAFETY_NET)
    first = run(nodes)
    assert codes(first) == [0, 0, 0], explain(first)
    recreate(nodes[2], new_ip="10.210.0.99")
    nodes[2].env["ASCEND_NODE_TIMEOUT"] = "3"
    again = run([nodes[2]])
    assert codes(again) == [4], explain(again)
    assert "the job must be restarted" in again[0].stderr
    assert "worker 1 (node 2)" in again[0].stderr
    # The job restarts: node 0 sees node 2's new data and opens a new attempt.
    for node in nodes[:2]:
        recreate(node)
    for node in nodes:
        node.env["ASCEND_NODE_TIMEOUT"] = f"{SAFETY_NET:g}"
    results = run(nodes)
    assert codes(results) == [0, 0, 0], explain(results)
    assert shared_table(tmp_path)["server_list"][2]["container_ip"] == "10.210.0.99"


def test_a_pod_that_comes_back_does_not_take_a_table_a_re_created_peer_outdated(tmp_path):
    """docs/rendezvous.md "The end of the wait": after a table completed, node 2 is
    re-created with another pod IP and leaves its new data in its slot; node 1 then comes
    back (a container restart: same POD_UID, same data) and reads the old verdict. Node 0
    does not restart, so only node 1's own read of the slots (`_outdated_slots`) can tell
    that the table's entry for node 2 is dead: node 1 must wait for a new attempt and exit
    4 at its timeout, not take the old table and exit 0."""
    from ascend_node.handoff.outputs import ENV_JSON, ENV_SCRIPT, LOCAL_TABLE

    nodes = make_nodes(tmp_path, 3, timeout=SAFETY_NET)
    first = run(nodes)
    assert codes(first) == [0, 0, 0], explain(first)
    aid = attempt_doc(tmp_path)["attempt_id"]
    old_table = table_of(first[1])
    attempt = tmp_path / "shared" / ".ascend-node" / "t" / "attempts" / aid
    outcome = (attempt / "outcome.json").read_bytes()

    # Node 2 re-created with other data: it refuses the table, leaves its new data in its
    # slot of the same attempt, and (node 0 opening no new attempt) exits 4.
    recreate(nodes[2], new_ip="10.210.0.99")
    # (8 s: the first look comes long before it even on a loaded machine)
    nodes[2].env["ASCEND_NODE_TIMEOUT"] = "8"
    [k] = run([nodes[2]])
    assert k.exit_code == 4, explain([k])
    assert (f"attempt {aid} completed with different data for worker 1 (node 2)"
            in k.stderr), explain([k])
    assert "the job must be restarted" in k.stderr
    assert "10.210.0.99" in (attempt / "node-2.json").read_text()

    # Node 1 comes back unchanged. What its first run wrote is left as it was, so that
    # this start is seen to write none of it again.
    node_dir = nodes[1].state_dir.parent
    outputs = [nodes[1].state_dir / name for name in (LOCAL_TABLE, ENV_SCRIPT, ENV_JSON)]
    outputs += [node_dir / "master", node_dir / "world_size"]
    before = {p: (p.stat().st_ino, p.stat().st_mtime_ns) for p in outputs}
    nodes[1].env["ASCEND_NODE_TIMEOUT"] = "8"
    [j] = run([nodes[1]])
    assert j.exit_code == 4, explain([j])
    lines = [line for line in j.stderr.splitlines() if "ascend-node: error:" in line]
    assert len(lines) == 1, explain([j])
    assert (f"timed out after 8 s: attempt {aid}'s table no longer matches worker 1 "
            "(node 2) (re-created with new data); waiting for node 0 to open a new "
            "attempt, and no new attempt opened") in lines[0], explain([j])
    assert ("  hint: the job must be restarted (all pods) to build a new rank table"
            in j.stderr.splitlines()), explain([j])
    assert "rank table ready" not in j.stderr
    assert {p: (p.stat().st_ino, p.stat().st_mtime_ns) for p in outputs} == before
    assert table_of(j) == old_table
    status = json.loads((nodes[1].state_dir / "status.json").read_text())
    assert status["state"] == "failed", status
    # Nothing on the volume changed the old verdict: it is still there for node 0 to see.
    assert attempt_doc(tmp_path)["attempt_id"] == aid
    assert (attempt / "outcome.json").read_bytes() == outcome


def test_sigterm_while_waiting_exits_143_and_leaves_no_partial_file(tmp_path):
    import signal
    import subprocess

    nodes = make_nodes(tmp_path, 2, timeout=60)
    node = nodes[1]
    from ascend_node.sim.fake_tools import write_node_data

    write_node_data(node.data_dir, node.devices)
    proc = subprocess.Popen(node.argv, env=node.env, stderr=subprocess.PIPE,
                            stdout=subprocess.PIPE)
    time.sleep(1.5)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=20)
    assert proc.returncode == 143, err.decode()
    assert b"terminated" in err
    leftovers = [p for p in (tmp_path / "shared").rglob("*") if ".tmp" in p.name]
    assert leftovers == []
    assert not (node.state_dir / "ranktable.json").exists()


def test_output_files_of_the_contract(tmp_path):
    import os
    import stat
    import subprocess

    nodes = make_nodes(tmp_path, 2, devices=4, timeout=SAFETY_NET)
    if os.geteuid() == 0:
        nodes[1].env["ASCEND_NODE_FILE_OWNER"] = "4321:4322"
    results = run(nodes)
    assert codes(results) == [0, 0], explain(results)
    node = nodes[1]
    local = node.state_dir / "ranktable.json"
    st = os.lstat(local)
    assert stat.S_ISREG(st.st_mode) and stat.S_IMODE(st.st_mode) == 0o640
    if os.geteuid() == 0:
        assert (st.st_uid, st.st_gid) == (4321, 4322)
    else:
        assert st.st_uid == os.geteuid()
    shared = tmp_path / "shared" / "ranktable-t.json"
    assert stat.S_IMODE(os.lstat(shared).st_mode) == 0o640
    assert local.read_bytes() == shared.read_bytes()
    assert stat.S_IMODE(os.stat(node.state_dir).st_mode) == 0o750
    master = node.state_dir.parent / "master"
    assert master.read_text() == nodes[0].env["K8S_POD_IP"] + "\n"
    assert (node.state_dir.parent / "world_size").read_text() == "8\n"
    env = json.loads((node.state_dir / "env.json").read_text())
    assert env == {"schema_version": 1, "env": {
        "RANK_TABLE_FILE": str(local), "RANKTABLEFILE": str(local),
        "MIES_CONTAINER_IP": node.env["K8S_POD_IP"],
        "MASTER_IP": nodes[0].env["K8S_POD_IP"], "WORLD_SIZE": "8"}}
    for shell in ("sh", "bash"):
        out = subprocess.run(
            [shell, "-c", f'. "{node.state_dir}/source_mul_env.sh"; '
             'echo "$RANK_TABLE_FILE $MIES_CONTAINER_IP $MASTER_IP $WORLD_SIZE"'],
            capture_output=True, text=True, check=True).stdout.split()
        assert out == [str(local), node.env["K8S_POD_IP"], nodes[0].env["K8S_POD_IP"], "8"]
    status = json.loads((node.state_dir / "status.json").read_text())
    assert status["schema_version"] == 1 and status["state"] == "done"
    printed = json.loads(results[1].stdout)
    assert printed["schema_version"] == 1 and printed["rank_table_file"] == str(local)


def test_one_node_job_still_gets_a_table(tmp_path):
    nodes = make_nodes(tmp_path, 1, devices=8, timeout=SAFETY_NET)
    results = run(nodes)
    assert codes(results) == [0], explain(results)
    table = json.loads(table_of(results[0]))
    assert table["server_count"] == "1" and len(table["server_list"][0]["device"]) == 8
    assert validate_rank_table(table, "hccl") == []


def test_job_version_keeps_a_restarted_job_off_the_old_table_even_with_same_data(tmp_path):
    """With Volcano's job version mapped in, a pod re-created by RestartJob with unchanged
    addresses does not take the previous start's table, whatever the start order."""
    nodes = make_nodes(tmp_path, 3, timeout=SAFETY_NET, ASCEND_NODE_JOB_VERSION="1")
    assert codes(run(nodes)) == [0, 0, 0]
    old = attempt_doc(tmp_path)
    assert old["job_version"] == 1
    for node in nodes:
        recreate(node)
        node.env["ASCEND_NODE_JOB_VERSION"] = "2"
    recreate(nodes[2], new_ip="10.210.0.42")
    nodes[1].start_delay, nodes[2].start_delay, nodes[0].start_delay = 0.0, 0.2, 1.0
    results = run(nodes)
    assert codes(results) == [0, 0, 0], explain(results)
    new = attempt_doc(tmp_path)
    assert new["attempt_id"] != old["attempt_id"] and new["job_version"] == 2
    assert "the job was restarted: job version 2" in new["reason"]
    table = shared_table(tmp_path)
    assert table["server_list"][2]["container_ip"] == "10.210.0.42"
    assert {table_of(r) for r in results} == {
        (tmp_path / "shared" / "ranktable-t.json").read_bytes()}


# ------------------------------------------------------------------ another job size


def _workers_first(nodes, line):
    """Start every node but node 0 and wait until each has logged `line`, then start
    node 0: the followers meet whatever the volume held before node 0 could replace it.
    The results, in index order."""
    logs = [node.state_dir.parent / "stderr.txt" for node in nodes[1:]]
    with ThreadPoolExecutor(max_workers=1) as pool:
        workers = pool.submit(run, nodes[1:])
        while True:
            texts = [log.read_text(errors="replace") if log.is_file() else ""
                     for log in logs]
            if all(line in text for text in texts):
                break
            if workers.done() or any("ascend-node: error: " in text for text in texts):
                # A worker ended before node 0 started: it took the earlier start's
                # verdict for its own (its peers then wait until their timeout).
                pytest.fail("a worker ended before node 0 started:\n"
                            + explain(workers.result()))
            time.sleep(0.1)
        first = run(nodes[:1])
        return first + workers.result()


@pytest.mark.parametrize(("before", "after", "versions"), [
    (2, 3, {}),
    (3, 2, {}),
    (2, 4, {}),
    # The manifest maps Volcano's job version in; a re-deployed Job counts from 0 again.
    (2, 3, {"before": "3", "after": "0"}),
], ids=["2-then-3", "3-then-2", "2-then-4", "2-then-3-job-version-3-then-0"])
def test_a_job_re_deployed_with_another_node_count_builds_a_new_table(tmp_path, before, after,
                                                                     versions):
    """Issue 36: `manifest` makes the run id the job's name, so a job re-deployed with
    another --nodes on the same volume meets its earlier start's documents. Its workers,
    started before node 0, must wait for node 0's new attempt (saying so), never take
    the old table's failed checks for a forger's (exit 5) nor leave node 0 and the others
    waiting for them (exit 4)."""
    shared = tmp_path / "shared"
    old_env = {"ASCEND_NODE_JOB_VERSION": versions["before"]} if versions else {}
    first = make_nodes(tmp_path / "first", before, devices=2, timeout=SAFETY_NET,
                       shared=shared, **old_env)
    assert codes(run(first)) == [0] * before
    old = json.loads((shared / ".ascend-node" / "t" / "attempt.json").read_text())
    new_env = {"ASCEND_NODE_JOB_VERSION": versions["after"]} if versions else {}
    # (60 s: the contract is no exit 5, and before the fix a worker that did not take
    # the old table waited for node 0's verdict until its timeout)
    nodes = make_nodes(tmp_path / "second", after, devices=2, timeout=60, shared=shared,
                       **new_env)
    results = _workers_first(nodes, "an earlier start of the job")
    assert codes(results) == [0] * after, explain(results)
    for r in results[1:]:
        assert (f"waiting: attempt {old['attempt_id']} completed for {before} nodes "
                f"(1 master), this pod's job has {after} nodes (1 master): an earlier start "
                "of the job") in r.stderr, explain([r])
        assert "not the table node 0 built" not in r.stderr
    new = json.loads((shared / ".ascend-node" / "t" / "attempt.json").read_text())
    assert new["attempt_id"] != old["attempt_id"] and new["node_count"] == after
    assert f"was for {before} nodes" in new["reason"]
    texts = {table_of(r) for r in results}
    assert texts == {(shared / "ranktable-t.json").read_bytes()}
    table = json.loads(texts.pop())
    assert [s["container_ip"] for s in table["server_list"]] == [
        n.env["K8S_POD_IP"] for n in nodes]


def test_a_job_re_deployed_at_the_same_size_after_a_restart_builds_a_new_table(tmp_path):
    """A Job restarted once (Volcano v1.10.0 bumps its version to 2) and then deleted and
    applied again under the same name: the new Job's pods are at version 0 and carry a new
    pod group (`<name>-<uid>`). Node 0 must open a new attempt for them; before the fix it
    called itself a leftover of the earlier start and exited 1."""
    shared = tmp_path / "shared"
    first = make_nodes(tmp_path / "first", 2, devices=2, timeout=SAFETY_NET, shared=shared,
                       ASCEND_NODE_JOB_VERSION="2", ASCEND_NODE_JOB_INSTANCE="t-1111")
    assert codes(run(first)) == [0, 0]
    old = json.loads((shared / ".ascend-node" / "t" / "attempt.json").read_text())
    assert old["job_instance"] == "t-1111"
    nodes = make_nodes(tmp_path / "second", 2, devices=2, timeout=60, shared=shared,
                       ASCEND_NODE_JOB_VERSION="0", ASCEND_NODE_JOB_INSTANCE="t-2222")
    results = run(nodes)
    assert codes(results) == [0, 0], explain(results)
    new = json.loads((shared / ".ascend-node" / "t" / "attempt.json").read_text())
    assert new["attempt_id"] != old["attempt_id"] and new["job_instance"] == "t-2222"
    assert "earlier Volcano Job of this name (pod group t-1111)" in new["reason"]
    assert {table_of(r) for r in results} == {(shared / "ranktable-t.json").read_bytes()}


# ------------------------------------------------------------------ failures before discovery


@pytest.mark.parametrize(("failing", "argv", "env", "code", "cause"), [
    (1, ["ranktable", "--master-file", "/nonexistent-dir/m"], {}, 1,
     "cannot write /nonexistent-dir/m (flag --master-file): directory /nonexistent-dir does "
     "not exist"),
    (0, ["ranktable"], {"ASCEND_NODE_WORLD_SIZE_FILE": "/nonexistent-dir/w"}, 1,
     "cannot write /nonexistent-dir/w (environment ASCEND_NODE_WORLD_SIZE_FILE): directory "
     "/nonexistent-dir does not exist"),
    (2, ["ranktable"], {"ASCEND_NODE_RENDEZVOUS_KEY_FILE": "/nonexistent-dir/key"}, 1,
     "cannot open the rendezvous key file /nonexistent-dir/key"),
    (1, ["boot", "--model-dir", "relative/dir", "--", "true"], {}, 2, "--model-dir"),
], ids=["master-file-of-a-worker", "world-size-file-of-node-0", "key-file-of-a-worker",
        "boot-option-of-a-worker"])
def test_a_pod_failing_before_its_discovery_ends_its_peers_with_5_naming_it(
        tmp_path, failing, argv, env, code, cause):
    """Issue 36: a pod whose output path cannot be written exits 1 before it discovers
    anything; its peers used to wait for it until their --timeout (4, "missing: worker
    0"). It publishes its failure as a pod failing in discovery does: the peers end with
    5 within seconds, naming it and its cause."""
    nodes = make_nodes(tmp_path, 3, devices=2, timeout=60)
    nodes[failing].argv = [*nodes[failing].argv[:3], *argv]  # python -m ascend_node ...
    nodes[failing].env.update(env)
    results = run(nodes)
    expected = [5, 5, 5]
    expected[failing] = code
    assert codes(results) == expected, explain(results)
    assert cause in results[failing].cause, explain(results)
    name = names_of([failing], 1)
    for r in results:
        if r.index != failing:
            assert f"{name} failed: {cause}" in r.cause, explain([r])
            assert r.seconds < 30, explain([r])  # not the timeout (60 s)
