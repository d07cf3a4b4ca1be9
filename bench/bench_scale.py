"""N = 512 simulated pods on one machine: they agree, and what a waiting pod costs in memory.

Real agent processes (`ascend-node ranktable`, the simulator's shell fakes for hccn_tool
and npu-smi) on one local shared directory. All pods but the last start (a few at a time,
so the machine is not asked to start 511 Pythons at once); once every one of them has
published and waits, the bench samples each waiting pod's memory (RSS, and USS: the
pages only that process holds, which is what another pod adds) and CPU over `--window`
seconds, then starts the last pod and times until every pod holds the table, and checks
that all exit 0 with one identical table. It also prints what the harness itself costs
(this process, and the fake tools' share of the pods' start).

    python bench/bench_scale.py [--nodes 512] [--window 20] [--batch 16]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ascend_node.sim.cluster import SimSpec, prepare
from ascend_node.sim.fake_tools import write_node_data

MiB = 1024 * 1024


def published(shared: Path, run_id: str) -> int:
    attempts = shared / ".ascend-node" / run_id / "attempts"
    dirs = list(attempts.iterdir()) if attempts.is_dir() else []
    return sum(1 for d in dirs for p in d.glob("node-*.json"))


def start(node: Any) -> tuple[subprocess.Popen[bytes], float]:
    write_node_data(node.data_dir, node.devices, node.seat, node.unreachable)
    node.state_dir.parent.mkdir(parents=True, exist_ok=True)
    out = open(node.state_dir.parent / "stdout.txt", "wb")  # noqa: SIM115
    err = open(node.state_dir.parent / "stderr.txt", "wb")  # noqa: SIM115
    proc = subprocess.Popen(node.argv, env=node.env, stdout=out, stderr=err,
                            stdin=subprocess.DEVNULL)
    out.close()
    err.close()
    return proc, time.monotonic()


def memory(procs: list[subprocess.Popen[bytes]]) -> tuple[list[float], list[float]]:
    rss, uss = [], []
    for proc in procs:
        try:
            info = psutil.Process(proc.pid).memory_full_info()
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
        rss.append(info.rss / MiB)
        uss.append(info.uss / MiB)
    return rss, uss


def cpu_seconds(procs: list[subprocess.Popen[bytes]]) -> float:
    total = 0.0
    for proc in procs:
        try:
            t = psutil.Process(proc.pid).cpu_times()
        except psutil.NoSuchProcess:
            continue
        total += t.user + t.system
    return total


def main() -> int:
    procs: list[subprocess.Popen[bytes]] = []
    try:
        return run(procs)
    finally:  # never leave waiting pods behind (an early exit, ^C)
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()


def run(procs: list[subprocess.Popen[bytes]]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=512)
    ap.add_argument("--devices", type=int, default=2)
    ap.add_argument("--window", type=float, default=20.0)
    ap.add_argument("--batch", type=int, default=16, help="pods started at a time")
    ap.add_argument("--timeout", type=float, default=1800.0)
    args = ap.parse_args()
    n = args.nodes
    work = Path(tempfile.mkdtemp(prefix=f"bench-scale-{n}-"))
    shared = work / "shared"
    shared.mkdir()
    nodes = prepare(SimSpec(nodes=n, devices=args.devices, run_id="scale",
                            timeout=args.timeout,
                            extra_env={"ASCEND_NODE_PREFLIGHT": "off"}), work, shared)
    me = psutil.Process()
    t0 = time.monotonic()
    for k in range(0, n - 1, args.batch):
        for node in nodes[k:min(k + args.batch, n - 1)]:
            procs.append(start(node)[0])
        # let this batch get past its start before the next (a 2-core machine)
        while published(shared, "scale") < min(k + args.batch, n - 1) - args.batch:
            time.sleep(0.2)
    while published(shared, "scale") < n - 1:
        if any(p.poll() is not None for p in procs):
            bad = next(p for p in procs if p.poll() is not None)
            print(f"a pod exited early ({bad.returncode}); see {work}", file=sys.stderr)
            return 1
        time.sleep(0.5)
    started = time.monotonic() - t0
    print(f"N={n}: {n - 1} pods started and published in {started:.0f} s "
          f"({started / (n - 1):.2f} s per pod, {args.batch} at a time)", flush=True)
    time.sleep(12)  # every pod calm (cadence.FAST_FOR) before the window
    rss, uss = memory(procs)
    cpu0, w0 = cpu_seconds(procs), time.monotonic()
    harness0 = sum(me.cpu_times()[:2])
    time.sleep(args.window)
    cpu1, w1 = cpu_seconds(procs), time.monotonic()
    harness1 = sum(me.cpu_times()[:2])
    waiting_cpu = (cpu1 - cpu0) / (w1 - w0)
    print(f"  waiting pod memory: RSS median {statistics.median(rss):.1f} MiB "
          f"(max {max(rss):.1f}), USS median {statistics.median(uss):.1f} MiB "
          f"(max {max(uss):.1f}); all {len(rss)} waiting pods: RSS {sum(rss) / 1024:.2f} GiB, "
          f"USS {sum(uss) / 1024:.2f} GiB", flush=True)
    print(f"  waiting pods' CPU: {waiting_cpu * 100:.1f} % of one core for all {len(procs)} "
          f"({waiting_cpu / len(procs) * 1e3:.2f} ms/s per pod); harness "
          f"{(harness1 - harness0) / (w1 - w0) * 100:.1f} % of a core, RSS "
          f"{me.memory_info().rss / MiB:.0f} MiB", flush=True)
    last, t_last = start(nodes[-1])
    procs.append(last)
    codes = []
    for proc in procs:
        try:
            codes.append(proc.wait(timeout=args.timeout))
        except subprocess.TimeoutExpired:
            proc.kill()
            codes.append(proc.wait())
    done = time.monotonic() - t_last
    tables = {(node.state_dir / "ranktable.json").read_text()
              if (node.state_dir / "ranktable.json").is_file() else None for node in nodes}
    ok = all(c == 0 for c in codes) and len(tables) == 1 and None not in tables
    print(f"  last pod started -> every pod exited: {done:.1f} s; exits "
          f"{sorted(set(codes))}; {'one identical table' if ok else 'TABLES DIFFER'} "
          f"on all {n} pods; total {time.monotonic() - t0:.0f} s", flush=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
