"""What waiting pods ask of the NFS server: RPCs per second and per rendezvous, by operation.

Two client guests of tests/nfs_bed.py and one kernel nfsd. Node 0 runs alone on client 0,
every other pod on client 1, so each client's `/proc/self/mountstats` delta is one role's
cost: client 0 is node 0, client 1 divided by its pods is one follower. Pods that share a
client share its caches (one OPEN of the verdict serves them all), so `--per-pod` boots one
client guest per pod instead, as in a real job (one pod per node). The server's own
counters (`/proc/net/rpc/nfsd`: NFSv4 COMPOUNDs, or NFSv3 calls) give the total it served.

Two phases per N:

- **wait**: node N-1 never starts (the pods wait until their timeout). Counters are read
  `--settle` s after the start (the pods have waited that long) and `--window` s later:
  RPC/s of one waiting follower and of node 0, by operation.
- **complete**: node N-1 starts `--late` s after the others (they have backed off by
  then). Counters are read just before it starts and after every pod ended: the RPCs of
  a completing rendezvous, by operation; and how long after node 0 wrote its table each
  follower held its own (both by the pods' local table files' mtimes, guest clocks
  corrected to the host's).

Then fits cost = a·N + b to the measured points and projects to N = 1,024 and 4,096.

    sudo .venv/bin/python bench/bench_nfs_cost.py [--sizes 2,4,8] [--vers 4.2,3]
        [--window 30] [--settle 12] [--late 15] [--src DIR]

`--src DIR` runs the pods with DIR first on PYTHONPATH (an older `ascend_node` copy: the
before/after comparison). Root only; ~2 min per N and version.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.nfs_bed import Bed, explain, why_not

# /proc/net/rpc/nfsd "proc4ops" indices (RFC 8881 operation numbers) worth showing.
V4_OPS = {3: "ACCESS", 4: "CLOSE", 9: "GETATTR", 15: "LOOKUP", 18: "OPEN", 22: "PUTFH",
          25: "READ", 26: "READDIR", 28: "REMOVE", 29: "RENAME", 34: "SETATTR",
          38: "WRITE", 53: "SEQUENCE", 8: "DELEGRETURN", 11: "LINK"}
V3_PROCS = ["NULL", "GETATTR", "SETATTR", "LOOKUP", "ACCESS", "READLINK", "READ", "WRITE",
            "CREATE", "MKDIR", "SYMLINK", "MKNOD", "REMOVE", "RMDIR", "RENAME", "LINK",
            "READDIR", "READDIRPLUS", "FSSTAT", "FSINFO", "PATHCONF", "COMMIT"]

def delta(after: Mapping[str, int], before: Mapping[str, int]) -> dict[str, int]:
    return {k: v - before.get(k, 0) for k, v in after.items() if v - before.get(k, 0)}


def server_rpcs(after: dict[str, list[int]], before: dict[str, list[int]], vers: str
                ) -> tuple[int, dict[str, int]]:
    """RPCs the server served between two snapshots, and its count per operation."""
    if vers == "3":
        a, b = after.get("proc3", []), before.get("proc3", [])
        per = {name: a[i + 1] - b[i + 1] for i, name in enumerate(V3_PROCS)
               if i + 1 < len(a) and a[i + 1] - b[i + 1]}
        return sum(per.values()), per
    a, b = after.get("proc4", [0, 0, 0]), before.get("proc4", [0, 0, 0])
    ops_a, ops_b = after.get("proc4ops", []), before.get("proc4ops", [])
    per = {name: ops_a[i + 1] - ops_b[i + 1] for i, name in V4_OPS.items()
           if i + 1 < len(ops_a) and ops_a[i + 1] - ops_b[i + 1]}
    return a[2] - b[2], per


def ops_line(ops: Mapping[str, float], scale: float = 1.0) -> str:
    """Every operation seen, most frequent first (PUTFH and SEQUENCE, parts of every
    NFSv4.1+ COMPOUND rather than RPCs of their own, left out)."""
    shown = sorted(((v, k) for k, v in ops.items()
                    if v and k not in ("PUTFH", "SEQUENCE")), reverse=True)
    return ", ".join(f"{k} {v * scale:.2f}" for v, k in shown)


PER_POD = False  # --per-pod: pod i on client i (every pod its own NFS client, as in a job)


def place(index: int) -> int:
    if PER_POD:
        return index
    return 0 if index == 0 else 1


def follower_counts(counters: list[dict[str, int]], before: list[dict[str, int]], n: int
                    ) -> dict[str, int]:
    """The followers' RPCs, summed over the clients they run on."""
    out: dict[str, int] = {}
    clients = range(1, n - 1) if PER_POD else range(1, 2)
    for c in clients:
        for k, v in delta(counters[c], before[c]).items():
            out[k] = out.get(k, 0) + v
    return out


def all_counts(counters: list[dict[str, int]], before: list[dict[str, int]]
               ) -> dict[str, int]:
    out: dict[str, int] = {}
    for a, b in zip(counters, before):
        for k, v in delta(a, b).items():
            out[k] = out.get(k, 0) + v
    return out


def pods(bed: Bed, n: int, run_id: str, timeout: float, src: str,
         late: float = 0.0, absent: bool = False) -> list:
    env = {"ASCEND_NODE_PROGRESS_INTERVAL": "10"}  # the default, not the bed's 2 s
    if src:
        env["PYTHONPATH"] = src
    nodes = bed.pods(n, devices=2, run_id=run_id, timeout=timeout, **env)
    if absent:
        nodes = nodes[:-1]
    elif late:
        nodes[-1].start_delay = late
    return nodes


def wait_phase(bed: Bed, vers: str, n: int, args: argparse.Namespace) -> dict:
    timeout = args.settle + args.window + 8
    nodes = pods(bed, n, f"w{n}-{vers}", timeout, args.src, absent=True)
    bed.start_run(nodes, hard_timeout=timeout + 30, place=place)
    time.sleep(max(0.0, bed.last_start + args.settle - time.time()))
    c0, s0, t0 = bed.client_counters(), bed.server_counters(), time.time()
    time.sleep(max(0.0, t0 + args.window - time.time()))
    c1, s1, t1 = bed.client_counters(), bed.server_counters(), time.time()
    results = bed.finish_run()
    seconds = t1 - t0
    followers = n - 2  # present on client 1
    node0 = delta(c1[0], c0[0])
    fol = follower_counts(c1, c0, n)
    total, per = server_rpcs(s1, s0, vers)
    codes = sorted({r.exit_code for r in results})
    return {"seconds": seconds, "node0": node0, "follower": fol, "followers": followers,
            "server": total, "server_ops": per, "codes": codes}


def complete_phase(bed: Bed, vers: str, n: int, args: argparse.Namespace) -> dict:
    timeout = args.late + 60
    nodes = pods(bed, n, f"c{n}-{vers}", timeout, args.src, late=args.late)
    bed.start_run(nodes, hard_timeout=timeout + 30, place=place)
    time.sleep(max(0.0, bed.last_start + args.late - 1.0 - time.time()))
    c0, s0 = bed.client_counters(), bed.server_counters()
    results = bed.finish_run()
    c1, s1 = bed.client_counters(), bed.server_counters()
    ok = all(r.exit_code == 0 for r in results) and len({r.table for r in results}) == 1
    if not ok:
        print(explain(results), flush=True)
    node0 = next(r for r in results if r.index == 0)
    lags = [r.table_mtime - node0.table_mtime for r in results
            if r.index != 0 and r.table_mtime is not None and node0.table_mtime is not None]
    total, per = server_rpcs(s1, s0, vers)
    ops = all_counts(c1, c0)
    return {"ok": ok, "server": total, "server_ops": per, "client_ops": ops, "lags": lags,
            "done": max(r.end for r in results) - bed.last_start}


def fit(points: Sequence[tuple[int, float]]) -> tuple[float, float]:
    """Least squares a·N + b."""
    if len(points) < 2:
        n, y = points[0]
        return y / n, 0.0
    xs, ys = [p[0] for p in points], [p[1] for p in points]
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    a = sum((x - mx) * (y - my) for x, y in points) / sum((x - mx) ** 2 for x in xs)
    return a, my - a * mx


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="2,4,8")
    ap.add_argument("--vers", default="4.2,3")
    ap.add_argument("--window", type=float, default=30.0)
    ap.add_argument("--settle", type=float, default=12.0)
    ap.add_argument("--late", type=float, default=15.0)
    ap.add_argument("--phases", default="wait,complete")
    ap.add_argument("--src", default="", help="PYTHONPATH for the pods (an older copy)")
    ap.add_argument("--mem", default="512M")
    ap.add_argument("--per-pod", action="store_true",
                    help="one client guest per pod (as many guests as the largest N)")
    args = ap.parse_args()
    global PER_POD
    PER_POD = args.per_pod
    reason = why_not()
    if reason:
        print(f"bench_nfs_cost: cannot run: {reason}", file=sys.stderr)
        return 2
    sizes = [int(s) for s in args.sizes.split(",")]
    phases = args.phases.split(",")
    summary: list[str] = []
    for vers in args.vers.split(","):
        waits: list[tuple[int, dict]] = []
        completes: list[tuple[int, dict]] = []
        with Bed(Path(tempfile.mkdtemp(prefix="bench-nfs-cost-")), vers=vers,
                 clients=max(sizes) if PER_POD else 2, mem=args.mem) as bed:
            print(f"vers={vers}: booted in {bed.boot_seconds:.1f} s; {bed.server_ready}",
                  flush=True)
            for n in sizes:
                if "wait" in phases and n >= 3:
                    w = wait_phase(bed, vers, n, args)
                    waits.append((n, w))
                    s = w["seconds"]
                    f = w["followers"]
                    print(f"  N={n} wait ({s:.0f} s window, exits {w['codes']}): "
                          f"follower {sum(w['follower'].values()) / s / f:.2f} RPC/s "
                          f"[{ops_line(w['follower'], 1 / s / f)}]; node 0 "
                          f"{sum(w['node0'].values()) / s:.2f} RPC/s "
                          f"[{ops_line(w['node0'], 1 / s)}]; server {w['server'] / s:.2f} "
                          f"RPC/s [{ops_line(w['server_ops'], 1 / s)}]", flush=True)
                if "complete" in phases:
                    c = complete_phase(bed, vers, n, args)
                    completes.append((n, c))
                    lags = c["lags"] or [float("nan")]
                    print(f"  N={n} complete ({'ok' if c['ok'] else 'FAILED'}, last pod "
                          f"done {c['done']:.1f} s after the start): server {c['server']} "
                          f"RPCs [{ops_line(c['server_ops'])}]; clients "
                          f"{sum(c['client_ops'].values())} [{ops_line(c['client_ops'])}]; "
                          f"followers held the table {statistics.median(lags):.2f} s "
                          f"(median), {max(lags):.2f} s (worst) after node 0", flush=True)
        if waits:
            fol = statistics.fmean(sum(w["follower"].values()) / w["seconds"] / w["followers"]
                                   for _, w in waits)
            node0 = statistics.fmean(sum(w["node0"].values()) / w["seconds"] for _, w in waits)
            summary.append(f"v{vers} waiting: server RPC/s = {fol:.2f}·(followers waiting) + "
                           f"{node0:.2f} (node 0) → N=1024: {fol * 1023 + node0:,.0f} RPC/s, "
                           f"N=4096: {fol * 4095 + node0:,.0f} RPC/s")
            for n, w in waits:
                pred = fol * (n - 2) + node0
                summary.append(f"    N={n}: measured server {w['server'] / w['seconds']:.1f} "
                               f"RPC/s, formula {pred:.1f}")
        if completes:
            a, b = fit([(n, c["server"]) for n, c in completes])
            summary.append(f"v{vers} completing rendezvous: server RPCs = {a:.1f}·N + {b:.0f} "
                           f"→ N=1024: {a * 1024 + b:,.0f}, N=4096: {a * 4096 + b:,.0f}")
            for n, c in completes:
                summary.append(f"    N={n}: measured {c['server']}, formula {a * n + b:.0f}")
            lags = [x for _, c in completes for x in c["lags"]]
            if lags:
                summary.append(f"    followers held the table after node 0: median "
                               f"{statistics.median(lags):.2f} s, worst {max(lags):.2f} s "
                               f"({len(lags)} followers)")
    print()
    print("\n".join(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
