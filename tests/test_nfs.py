"""The rendezvous on real Linux NFS clients at DEFAULT mount options (issue 10).

One kernel nfsd and two independent NFS clients, each a User Mode Linux guest
(tests/nfs_bed.py, scripts/nfs-testbed); the real agent runs as pods inside the client
guests, pod i on client i % 2, every pod's shared dir on its guest's NFS mount and its
state dir on guest tmpfs. Default options mean the client trusts cached negative
lookups until the directory's attributes expire (acdirmin 30 s .. acdirmax 60 s): a
protocol that does not revalidate directories before polling takes 30-150 s here
(issue 10's table), so the bounds below (seconds, from one common start) fail unless
the lookup cache is defeated.

One booted bed per NFS version is shared by the tests (module-scoped fixture); each
test uses its own run id. Python starts ~5x slower in a guest (~2-3 s per pod).
Skips, with the reason, when not root or UML / nfs tools / gcc are missing
(scripts/ci-setup-nfs installs them).
"""

from __future__ import annotations

import datetime
import json
import math
import re
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.nfs_bed import Bed, BedError, PodResult, explain, why_not

pytestmark = [pytest.mark.nfs, pytest.mark.multiprocess]

# s from the common start to the last pod holding the table: above the 3-12 s measured
# (guest Python start-up, shared CPU), well under acdirmin's 30 s of a cached ENOENT.
AGREE_WITHIN = 20.0


@pytest.fixture(scope="module", params=["4.2", "3"], ids=["v4.2", "v3"])
def bed(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
        ) -> Iterator[Bed]:
    reason = why_not()
    if reason:
        pytest.skip(reason)
    work = tmp_path_factory.mktemp(f"nfsbed-v{request.param}")
    b = Bed(work, vers=request.param, options="", clients=2)
    try:
        try:
            b.start()
        except BedError as exc:
            pytest.fail(f"the NFS test bed did not come up: {exc}")
        yield b
    finally:
        b.close()


def _last_done(bed: Bed, results: list[PodResult]) -> float:
    done = max(r.end for r in results) - bed.last_start
    print(f"nfs v{bed.vers}: {len(results)} pods, last done {done:.2f} s after the start")
    return done


def _last_published(bed: Bed, results: list[PodResult]) -> float:
    """Host time of the last `published ... into attempt` log line (1 s resolution; the
    guest clock is the host's to within milliseconds)."""
    day = datetime.datetime.fromtimestamp(bed.last_start)
    stamps = []
    for r in results:
        for line in r.stderr.splitlines():
            m = re.match(r"(\d\d):(\d\d):(\d\d) \[node \d+ [^]]*\] published \S+ \d+ "
                         r"\(node \d+\) into attempt", line)
            if m:
                h, mi, sec = (int(g) for g in m.groups())
                stamps.append(day.replace(hour=h, minute=mi, second=sec,
                                          microsecond=0).timestamp())
    assert len(stamps) == len(results), explain(results)
    return max(stamps)


def _stamps_of(result: PodResult, pattern: str) -> list[float]:
    """Host times (1 s resolution) of a pod's log lines whose message matches `pattern`."""
    return [t for t, _m in _matches(result, pattern)]


def _stamp_of(result: PodResult, pattern: str) -> tuple[float, str] | None:
    """The first line matching `pattern`: (host time, the pattern's first group)."""
    found = _matches(result, pattern)
    return (found[0][0], found[0][1].group(1)) if found else None


def _matches(result: PodResult, pattern: str) -> list[tuple[float, re.Match[str]]]:
    day = datetime.datetime.now()
    out = []
    for line in result.stderr.splitlines():
        stamp = re.match(r"(\d\d):(\d\d):(\d\d) \[[^]]*\] (.*)$", line)
        found = re.search(pattern, stamp.group(4)) if stamp else None
        if stamp and found:
            h, mi, sec = (int(g) for g in stamp.groups()[:3])
            out.append((day.replace(hour=h, minute=mi, second=sec, microsecond=0).timestamp(),
                        found))
    return out


def _tables(results: list[PodResult]) -> set[str | None]:
    return {r.table for r in results}


def test_pods_on_two_clients_agree_on_one_table_quickly(bed: Bed) -> None:
    nodes = bed.pods(4, devices=2, run_id="agree", timeout=60)
    results = bed.run(nodes, hard_timeout=90)
    assert [r.exit_code for r in results] == [0] * 4, explain(results)
    assert {r.client for r in results} == {0, 1}
    tables = _tables(results)
    assert len(tables) == 1 and None not in tables, explain(results)
    table = json.loads(next(iter(tables)) or "")
    assert [s["container_ip"] for s in table["server_list"]] == [
        n.env["K8S_POD_IP"] for n in nodes]
    done = _last_done(bed, results)
    assert done < AGREE_WITHIN, (
        f"last pod held the table {done:.1f} s after the common start (bound "
        f"{AGREE_WITHIN} s): the NFS lookup cache was not defeated\n{explain(results)}")


def test_a_missing_pod_ends_everyone_else_with_4_naming_it(bed: Bed) -> None:
    nodes = bed.pods(4, devices=2, run_id="missing", timeout=15)
    started = [n for n in nodes if n.index != 2]  # worker 1 (node 2) never starts
    results = bed.run(started, hard_timeout=60)
    assert [r.exit_code for r in results] == [4, 4, 4], explain(results)
    for r in results:
        assert "missing: worker 1 (node 2)" in r.stderr, explain([r])
        assert "node 1)" not in r.stderr.split("missing:")[-1], explain([r])
    assert _last_done(bed, results) < 15 + 10, explain(results)


def test_a_device_ip_on_two_nodes_ends_everyone_with_5_within_10_s(bed: Bed) -> None:
    nodes = bed.pods(4, devices=2, run_id="collide", timeout=60)
    nodes[3].devices[1].ip = nodes[1].devices[0].ip
    results = bed.run(nodes, hard_timeout=90)
    assert [r.exit_code for r in results] == [5] * 4, explain(results)
    for r in results:
        assert f"device IP {nodes[1].devices[0].ip} is used on" in r.stderr, explain([r])
    # Measured from the last slot published (the moment the conflict can be seen): a pod's
    # own start-up in a guest takes 2-7 s on a loaded 2-core machine, which is not the
    # protocol's. Log stamps have 1 s resolution, hence the +1.
    published = _last_published(bed, results)
    done = max(r.end for r in results) - published
    assert done < 10 + 1, (f"everyone ended {done:.1f} s after the last slot was published "
                           f"(bound 10 s)\n{explain(results)}")
    assert _last_done(bed, results) < AGREE_WITHIN, explain(results)


def test_a_container_restart_gets_the_same_table_back(bed: Bed) -> None:
    nodes = bed.pods(4, devices=2, run_id="restart", timeout=60)
    first = bed.run(nodes, hard_timeout=90)
    assert [r.exit_code for r in first] == [0] * 4, explain(first)
    table = first[0].table
    assert table and _tables(first) == {table}
    for index in (1, 0):  # a follower on client 1, then the assembler on client 0
        again = bed.run([nodes[index]], hard_timeout=60)
        assert [r.exit_code for r in again] == [0], explain(again)
        assert again[0].table == table  # byte-identical
        assert _last_done(bed, again) < AGREE_WITHIN, explain(again)


def test_a_job_restart_never_reuses_the_old_table(bed: Bed) -> None:
    nodes = bed.pods(4, devices=2, run_id="jobrestart", timeout=60,
                     ASCEND_NODE_JOB_VERSION="1")
    first = bed.run(nodes, hard_timeout=90)
    assert [r.exit_code for r in first] == [0] * 4, explain(first)
    old = first[0].table
    for node in nodes:  # Volcano RestartJob: every pod re-created, job version bumped
        node.env["POD_UID"] = str(uuid.uuid4())
        node.env["ASCEND_NODE_JOB_VERSION"] = "2"
    nodes[2].env["K8S_POD_IP"] = "10.210.0.42"
    nodes[1].start_delay, nodes[0].start_delay = 0.0, 1.0  # followers first see the old one
    results = bed.run(nodes, hard_timeout=90)
    assert [r.exit_code for r in results] == [0] * 4, explain(results)
    tables = _tables(results)
    assert len(tables) == 1 and old not in tables, explain(results)
    table = json.loads(next(iter(tables)) or "")
    assert table["server_list"][2]["container_ip"] == "10.210.0.42"
    assert _last_done(bed, results) < AGREE_WITHIN + 1, explain(results)
    # The cache this guards against would show as followers still seeing the old
    # attempt.json after node 0 replaced it: they log the old attempt's version every
    # progress interval (2 s). So: none may still log it 2 intervals + 1 s (stamps) after
    # node 0 opened the new one. (The bed's clients once froze for 20-50 s here: both
    # guests presented one NFSv4 client owner, and nfsd tore down one's session whenever
    # the other set up its own; each guest now has its own hostname, docs/benchmarks.md.)
    opened = _stamp_of(results[0], r"opened attempt (\S+)")
    assert opened is not None, explain(results[:1])
    for r in results[1:]:
        stale = [t for t in _stamps_of(r, r"waiting: attempt \S+ is for job version 1")
                 if t > opened[0] + 2 * 2 + 1]
        assert not stale, (f"pod {r.index} still saw the old attempt "
                           f"{max(stale) - opened[0]:.0f} s after node 0 opened "
                           f"{opened[1]}\n{explain(results)}")


def test_a_job_re_deployed_with_another_node_count_waits_for_node_0s_new_attempt(
        bed: Bed) -> None:
    """Issue 36: the same run id, 2 nodes then 3 (the workers started 8 s before node 0,
    on both clients): each worker reads the 2-node job's completed attempt through its
    own client's caches, waits saying so, and joins the attempt node 0 opens for 3 —
    where a worker holding the same data as in the 2-node table used to exit 5 calling
    that table a forgery, and the others 4 naming it."""
    first = bed.pods(2, devices=2, run_id="resize", timeout=60)
    done = bed.run(first, hard_timeout=90)
    assert [r.exit_code for r in done] == [0, 0], explain(done)
    nodes = bed.pods(3, devices=2, run_id="resize", timeout=60, job="resize-3")
    nodes[0].start_delay = 8.0
    results = bed.run(nodes, hard_timeout=120)
    assert [r.exit_code for r in results] == [0, 0, 0], explain(results)
    assert {r.client for r in results[1:]} == {0, 1}
    for r in results[1:]:
        assert re.search(r"waiting: attempt \S+ completed for 2 nodes \(1 master\), this "
                         r"pod's job has 3 nodes \(1 master\): an earlier start of the job",
                         r.stderr), explain([r])
    tables = _tables(results)
    assert len(tables) == 1 and done[0].table not in tables, explain(results)
    table = json.loads(next(iter(tables)) or "")
    assert [s["container_ip"] for s in table["server_list"]] == [
        n.env["K8S_POD_IP"] for n in nodes]


def test_the_bed_leaves_nothing_running(tmp_path: Path) -> None:
    """Guests are killed by process group and the namespace deleted, even when the
    bed times out (here: a boot deadline no guest can meet)."""
    reason = why_not()
    if reason:
        pytest.skip(reason)
    b = Bed(tmp_path / "bed", vers="4.2", clients=1, boot_timeout=1.5)
    with pytest.raises(BedError, match="in time"), b:
        pass
    pids = [g.proc.pid for g in b.guests]
    assert pids == []
    netns = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    assert b.netns not in netns
    ps = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout
    assert f"umid={b.netns}" not in ps


KILLED_OWNER = """
import sys, time
from pathlib import Path
sys.path.insert(0, sys.argv[2])
from tests.nfs_bed import Bed
bed = Bed(Path(sys.argv[1]), clients=1)
bed.start()
print("up", bed.netns, flush=True)
time.sleep(300)
"""


def test_a_killed_owner_leaves_no_guest_behind(tmp_path: Path) -> None:
    """The process that started the bed dies by SIGKILL (a CI timeout): its watchdog
    still kills every guest's process group and deletes the namespace."""
    reason = why_not()
    if reason:
        pytest.skip(reason)
    owner = subprocess.Popen(
        [sys.executable, "-c", KILLED_OWNER, str(tmp_path / "bed"),
         str(Path(__file__).resolve().parents[1])],
        stdout=subprocess.PIPE, text=True)
    try:
        assert owner.stdout is not None
        line = owner.stdout.readline()
        assert line.startswith("up "), line
        netns = line.split()[1]
        assert f"umid={netns}" in subprocess.run(["ps", "-eo", "args"], capture_output=True,
                                                 text=True).stdout
    finally:
        owner.kill()
        owner.wait()
    for _ in range(50):
        ps = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout
        ns = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
        if f"umid={netns}" not in ps and netns not in ns:
            break
        time.sleep(0.2)
    assert f"umid={netns}" not in ps
    assert netns not in ns


def test_a_waiting_follower_asks_the_server_for_at_most_5_rpcs_a_second(bed: Bed) -> None:
    """The load bound (docs/rendezvous.md, "Poll cost"), counted by the client kernel
    (/proc/self/mountstats): node 1 alone on client 1, node 2 never starts; from 20 s
    after the start (node 1 has waited over 10 s) for 15 s, client 1 sends <= 5 RPC/s."""
    nodes = bed.pods(3, devices=2, run_id="cost", timeout=45)
    bed.start_run(nodes[:2], hard_timeout=90, place=lambda i: i)
    time.sleep(max(0.0, bed.last_start + 20 - time.time()))
    before, t0 = bed.client_counters()[1], time.time()
    time.sleep(15)
    after, t1 = bed.client_counters()[1], time.time()
    results = bed.finish_run()
    assert [r.exit_code for r in results] == [4, 4], explain(results)
    sent = {op: after[op] - before.get(op, 0) for op in after if after[op] != before.get(op, 0)}
    rate = sum(sent.values()) / (t1 - t0)
    assert rate <= 5.0, f"{rate:.1f} RPC/s from one waiting follower: {sent}"


@pytest.mark.parametrize(("vers", "first"), [("4.2", "node0"), ("4.2", "follower"),
                                             ("3", "follower"), ("4.2", "attempt")])
def test_no_5_s_window_of_a_large_jobs_follower_holds_more_than_25_rpcs(
        vers: str, first: str, tmp_path: Path) -> None:
    """Issue 29's target, its join included (docs/rendezvous.md, "The start burst"): node 0
    alone on client 0, node 1 alone on client 1, of a job of 64 nodes whose other pods
    never come. Client 1's RPCs (the client's own lease renewals apart) are sampled every
    second from the common start for 25 s; every 5 s between two samples holds at most
    25 — and one glance more for each 0.4 s a slow sample stretched it beyond 5 s. A bed
    of its own: a client that served earlier runs returns their delegations meanwhile.
    Each order ("The join"): node 0 first (the follower starts 1 s later); the follower
    first, glancing at a volume without the run's directories until node 0 makes them
    (node 0 starts 1 s later); and the follower meeting node 0's `attempt.json` before the
    attempt's directory, which it must not make (node 0 held 5 s between the two by
    bench/slow_attempt_dir.py, the follower started 2 s after node 0: 26-28 RPCs before
    the fix, bench/bench_nfs_burst.py --node0-pause)."""
    reason = why_not()
    if reason:
        pytest.skip(reason)
    with Bed(tmp_path / "bed", vers=vers, options="", clients=2) as bed:
        nodes = bed.pods(64, devices=2, run_id="window", timeout=40)[:2]
        if first == "attempt":
            slow = str(Path(__file__).resolve().parents[1] / "bench" / "slow_attempt_dir.py")
            nodes[0].argv = [nodes[0].argv[0], slow, "5", *nodes[0].argv[3:]]
            nodes[1].start_delay = 2.0
        else:
            nodes[1 if first == "node0" else 0].start_delay = 1.0
        bed.start_run(nodes, hard_timeout=90, place=lambda i: i)
        samples: list[tuple[float, int, dict[str, int]]] = []
        for k in range(26):
            time.sleep(max(0.0, bed.last_start + k - time.time()))
            ops = bed.client_counters()[1]
            samples.append((time.time(), sum(v for op, v in ops.items()
                                             if op not in ("SEQUENCE", "RENEW")), ops))
        results = bed.finish_run()
        start = bed.last_start
    assert [r.exit_code for r in results] == [4, 4], explain(results)
    assert samples[-1][1] - samples[0][1] > 25, "the follower asked nothing: not measured"
    for (t0, n0, a), (t1, n1, b) in zip(samples, samples[5:]):
        allowed = 25 + max(0, math.ceil((t1 - t0 - 5.0) / 0.4))
        assert n1 - n0 <= allowed, (
            f"{n1 - n0} RPCs in {t1 - t0:.1f} s from {t0 - start:.1f} s "
            f"({ {op: b[op] - a.get(op, 0) for op in b if b[op] != a.get(op, 0)} }): "
            f"{[n - samples[0][1] for _, n, _ in samples]}")
