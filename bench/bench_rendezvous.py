"""Rendezvous latency and assembler scale (issue: rendezvous, item 7).

Prints, for N = 8, 32 and 128 real agent processes on one shared directory, the lag from
the last node publishing its member file to the last node holding the table (both read
from file mtimes on the same filesystem, so no clock skew enters), and the assembler's
time for 4096 synthetic members (decision + table build + render, then the same with
the slot files read from disk).

    python bench/bench_rendezvous.py [--sizes 8,32,128] [--repeat 3]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ascend_node.discover.identity import NodeIdentity
from ascend_node.ranktable import build_rank_table, render_rank_table
from ascend_node.rendezvous import decide
from ascend_node.rendezvous.assembler import Assembler
from ascend_node.rendezvous.models import DeviceRecord, MemberData, MemberDoc
from ascend_node.rendezvous.protocol import to_server
from ascend_node.rendezvous.store import RunPaths, write_doc
from ascend_node.sim.cluster import SimSpec, launch, prepare


def lag_once(n: int, devices: int) -> tuple[float, float]:
    work = Path(tempfile.mkdtemp(prefix=f"bench-rdzv-{n}-"))
    shared = work / "shared"
    shared.mkdir()
    nodes = prepare(SimSpec(nodes=n, devices=devices, run_id="bench", timeout=300), work,
                    shared)
    t0 = time.monotonic()
    results = launch(nodes, 300)
    wall = time.monotonic() - t0
    bad = [r for r in results if r.exit_code != 0]
    if bad:
        raise SystemExit(f"N={n}: node {bad[0].index} exited {bad[0].exit_code}: "
                         f"{bad[0].last_error}")
    attempts = shared / ".ascend-node" / "bench" / "attempts"
    (attempt_dir,) = list(attempts.iterdir())
    last_publish = max(os.stat(attempt_dir / f"node-{i}.json").st_mtime for i in range(n))
    last_hold = max(os.stat(node.state_dir / "ranktable.json").st_mtime for node in nodes)
    return last_hold - last_publish, wall


def synthetic(n: int, devices: int = 16) -> list[MemberDoc]:
    out = []
    for i in range(n):
        data = MemberData(
            global_index=i, role="master" if i == 0 else "worker",
            task_index=0 if i == 0 else i - 1,
            pod_ip=f"10.{200 + i // 65536}.{i // 256 % 256}.{i % 256}",
            host_ip=f"10.{100 + i // 65536}.{i // 256 % 256}.{i % 256}",
            devices=tuple(DeviceRecord(device_id=d,
                                       device_ip=f"11.{i // 256 % 256}.{i % 256}.{d + 1}")
                          for d in range(devices)),
        )
        out.append(MemberDoc(run_id="bench", attempt_id="a1", incarnation=f"u{i}",
                             node_count=n, master_count=1, agent_version="b", data=data))
    return out


def assembler(n: int) -> tuple[float, float]:
    members = synthetic(n)
    t0 = time.perf_counter()
    verdict = decide.evaluate(dict(enumerate(members)), n, 1, False)
    assert isinstance(verdict, decide.Complete)
    text = render_rank_table(build_rank_table([to_server(m.data) for m in verdict.members]))
    pure = time.perf_counter() - t0
    assert len(text) > n

    shared = Path(tempfile.mkdtemp(prefix="bench-asm-"))
    paths = RunPaths(shared, "bench")
    for m in members:
        write_doc(paths.slot("a1", m.data.global_index), m, shared)
    ident = NodeIdentity("master", 0, 1, n - 1, members[0].data.pod_ip,
                         members[0].data.host_ip, "u0")
    rdzv = Assembler(paths, ident, members[0].data, deadline=time.monotonic() + 60,
                     timeout=60)
    cache: dict = {}
    t0 = time.perf_counter()
    slots = rdzv._scan_slots("a1", cache, rdzv._list_attempt("a1"))
    verdict = decide.evaluate(slots, n, 1, False)
    assert isinstance(verdict, decide.Complete)
    rdzv._complete("a1", verdict.members)
    with_io = time.perf_counter() - t0
    return pure, with_io


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="8,32,128")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--devices", type=int, default=8)
    ap.add_argument("--members", type=int, default=4096)
    args = ap.parse_args()
    print(f"cpus={os.cpu_count()} python={sys.version.split()[0]}")
    print(f"{'N':>5} {'lag median s':>13} {'lag max s':>10} {'wall median s':>14}")
    for n in (int(x) for x in args.sizes.split(",")):
        runs = [lag_once(n, args.devices) for _ in range(args.repeat)]
        lags = [r[0] for r in runs]
        walls = [r[1] for r in runs]
        print(f"{n:>5} {statistics.median(lags):>13.3f} {max(lags):>10.3f} "
              f"{statistics.median(walls):>14.2f}", flush=True)
    pure, io = assembler(args.members)
    print(f"assembler, {args.members} members x 16 devices: decide+build+render "
          f"{pure:.3f} s; with reading {args.members} slot files and writing the outcome "
          f"{io:.3f} s")


if __name__ == "__main__":
    main()
