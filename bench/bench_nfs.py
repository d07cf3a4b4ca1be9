"""The rendezvous on real NFS clients: default mounts vs `lookupcache=positive` (issue 10).

For NFS v4.2 and v3, default options and `lookupcache=positive`, N = 4 and N = 8 real
`ascend-node ranktable` pods over 2 NFS clients (UML guests of tests/nfs_bed.py, one
kernel nfsd), all started at one common instant: prints the time from that start to the
last pod holding the table, per trial, and the ratio default / positive of the medians.
Target (issue 10): default within 1.3x of positive. Root only; ~5 minutes.

    sudo .venv/bin/python bench/bench_nfs.py [--sizes 4,8] [--trials 3] [--vers 4.2,3]

Python starts ~5x slower in a guest than on the host, so every figure carries a few
seconds of UML overhead (the same 4 pods take ~1.5 s on a local disk).

`--floor` (issue 13, "keep the NFS behaviour, measure both"): default mounts only, the
agent (pre-flight off, as bench/bench_floor.py) beside `bench/floor_pod.py`, the minimal
program for the same exchange with the same NFS rule, in the same guests; prints both and
agent / floor.

    sudo .venv/bin/python bench/bench_nfs.py --floor [--sizes 2,8] [--vers 4.2]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.nfs_bed import Bed, explain, why_not

OPTIONS = {"default": "", "positive": "lookupcache=positive"}
FLOOR = Path(__file__).resolve().parent / "floor_pod.py"


def trials(vers: str, options: str, sizes: list[int], count: int, devices: int,
           timeout: float, floor: bool = False) -> dict[Any, list[float]]:
    """Seconds from the common start to the last pod holding a table, per N and trial;
    with `floor`, the floor program and the agent alternate, and the keys are
    (N, "floor") and (N, "agent")."""
    out: dict[Any, list[float]] = {} if floor else {n: [] for n in sizes}
    with Bed(Path(tempfile.mkdtemp(prefix="bench-nfs-")), vers=vers, options=options,
             clients=2) as bed:
        print(f"  vers={vers} {options or 'default options'}: booted in "
              f"{bed.boot_seconds:.1f} s", flush=True)
        for n in sizes:
            for k in range(count):
                for kind in ("floor", "agent") if floor else ("agent",):
                    nodes = bed.pods(n, devices=devices, run_id=f"b{n}-{k}-{kind}",
                                     timeout=timeout)
                    for node in nodes:
                        if kind == "floor":
                            node.argv = [sys.executable, str(FLOOR)]
                        elif floor:  # the floor asks for IPs only (bench_floor.py)
                            node.env["ASCEND_NODE_PREFLIGHT"] = "off"
                    results = bed.run(nodes, hard_timeout=timeout + 30)
                    done = max(r.end for r in results) - bed.last_start
                    ok = all(r.exit_code == 0 for r in results) and len(
                        {r.table for r in results}) == 1
                    out.setdefault((n, kind) if floor else n, []).append(
                        done if ok else float("inf"))
                    print(f"    N={n} trial {k + 1}{' ' + kind if floor else ''}: last pod "
                          f"done after {done:.2f} s"
                          + ("" if ok else f"  FAILED\n{explain(results)}"), flush=True)
    return out


def floor_table(args: argparse.Namespace, sizes: list[int]) -> int:
    print(f"{'vers':>4} {'N':>3}  {'floor (s)':<22} {'agent (s)':<22} {'median ratio':>12}")
    rows = []
    for vers in args.vers.split(","):
        got = trials(vers, "", sizes, args.trials, args.devices, args.timeout, floor=True)
        rows += [(vers, n, got[(n, "floor")], got[(n, "agent")]) for n in sizes]
    print()
    for vers, n, f, a in rows:
        print(f"{vers:>4} {n:>3}  {', '.join(f'{x:.2f}' for x in f):<22} "
              f"{', '.join(f'{x:.2f}' for x in a):<22} "
              f"{statistics.median(a) / statistics.median(f):>11.2f}x")
    return 0


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="4,8")
    ap.add_argument("--trials", type=int, default=3)
    ap.add_argument("--vers", default="4.2,3")
    ap.add_argument("--devices", type=int, default=2)
    ap.add_argument("--timeout", type=float, default=120.0)
    ap.add_argument("--floor", action="store_true",
                    help="default mounts only: the agent beside bench/floor_pod.py")
    args = ap.parse_args()
    reason = why_not()
    if reason:
        print(f"bench_nfs: cannot run: {reason}", file=sys.stderr)
        return 2
    sizes = [int(s) for s in args.sizes.split(",")]
    if args.floor:
        return floor_table(args, sizes)
    t0 = time.monotonic()
    table: dict[tuple[str, str], dict[int, list[float]]] = {}
    for vers in args.vers.split(","):
        for name, options in OPTIONS.items():
            table[(vers, name)] = trials(vers, options, sizes, args.trials, args.devices,
                                         args.timeout)
    print()
    print(f"{'vers':>4} {'N':>3}  {'default (s)':<22} {'positive (s)':<22} "
          f"{'median ratio':>12}")
    worst = 0.0
    for vers in args.vers.split(","):
        for n in sizes:
            d, p = table[(vers, "default")][n], table[(vers, "positive")][n]
            ratio = statistics.median(d) / statistics.median(p)
            worst = max(worst, ratio)
            print(f"{vers:>4} {n:>3}  {', '.join(f'{x:.2f}' for x in d):<22} "
                  f"{', '.join(f'{x:.2f}' for x in p):<22} {ratio:>11.2f}x")
    print(f"worst ratio {worst:.2f}x (target <= 1.3x); {time.monotonic() - t0:.0f} s total")
    return 0


if __name__ == "__main__":
    sys.exit(main())
