"""Issue 30's N = 8 figure with each of this round's cuts switched off in turn (A/B in one
tree, interleaved round after round with the floor), so that what each cut bought is
measured on the same machine under the same load.

Each variant runs the agent through a small wrapper that undoes the named cuts in the pod's
process before `ascend_node.cli.main` runs (same tree, same bytecode):

- `end_now`: a pod's command ends without the interpreter's teardown (`cli.app.end_now`);
- `node0_nap`: node 0 polls every quarter poll while the last slot of a start burst is
  missing (`rendezvous.cadence.node0_nap`);
- `after_publish`: a follower looks every quarter poll in the first poll interval after
  its own publish (`rendezvous.cadence.after_publish_nap`).

    python bench/bench_speed_ab.py [--rounds 7] [--nodes 8] [--devices 8] [--lag]
"""

from __future__ import annotations

import argparse
import compileall
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))

import bench_speed as speed  # noqa: E402

WRAPPER = """
import os, sys
off = set(filter(None, os.environ.get("AB_OFF", "").split(",")))
if "end_now" in off:
    import ascend_node.cli
    ascend_node.cli.end_now = lambda code: None
if "node0_nap" in off:
    from ascend_node.rendezvous import cadence
    cadence.node0_nap = lambda poll_interval, missing, since_arrival: poll_interval
if "after_publish" in off:
    from ascend_node.rendezvous import cadence
    cadence.after_publish_nap = lambda *args: None
from ascend_node.cli import main
sys.argv[0] = "ascend-node"
main()
"""

VARIANTS = {
    "all cuts": "",
    "without end_now": "end_now",
    "without node0_nap": "node0_nap",
    "without after_publish": "after_publish",
    "none (main)": "end_now,node0_nap,after_publish",
}


def _starter(job: speed.Job, off: str) -> Callable[[int], None]:
    def start(index: int) -> None:
        env = dict(job.envs[index], AB_OFF=off)
        job.procs.append(subprocess.Popen(
            [sys.executable, "-c", WRAPPER, "ranktable"], env=env,
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE))
    return start


def agent_lag(devices: int, off: str) -> float:
    """bench_speed.lag_all_at_once for the agent at N = 2, with the cuts in `off` undone."""
    job = speed.Job(2, devices, "agent", preflight=False)
    start = _starter(job, off)
    try:
        start(0)
        start(1)
        last_start = time.monotonic()
        job.wait_all()
        return time.monotonic() - last_start
    finally:
        job.close()


def agent_path(n: int, devices: int, off: str) -> tuple[float, float]:
    """bench_speed.last_pod_path for the agent, with the cuts in `off` undone."""
    job = speed.Job(n, devices, "agent", preflight=False)
    start = _starter(job, off)
    try:
        for i in range(n - 1):
            start(i)
        speed.wait_for(lambda: all(speed.published("agent", job.shared, i)
                                   for i in range(n - 1)), 300, f"{n - 1} pods publishing")
        time.sleep(1.0)
        start(n - 1)
        last_start = time.monotonic()
        cpu = job.wait_all()
        return time.monotonic() - last_start, cpu[job.procs[-1].pid]
    finally:
        job.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--nodes", type=int, default=8)
    parser.add_argument("--devices", type=int, default=8)
    parser.add_argument("--lag", action="store_true",
                        help="the N = 2 lag (both started at once) instead of the N = 8 path")
    args = parser.parse_args()
    compileall.compile_dir(str(speed.ROOT / "ascend_node"), quiet=1)
    print(f"bench_speed_ab: python {sys.version.split()[0]}, {speed.load()}")
    if args.lag:
        lags: dict[str, list[float]] = {"floor": [], **{v: [] for v in VARIANTS}}
        for _ in range(args.rounds):
            lags["floor"].append(speed.lag_all_at_once("floor", 2, args.devices, False))
            for variant, off in VARIANTS.items():
                lags[variant].append(agent_lag(args.devices, off))
        report(lags, f"N = 2, last start -> all hold the table (medians of {args.rounds} "
                     "interleaved rounds)")
        print(f"\nend: {speed.load()}")
        return
    got: dict[str, list[float]] = {"floor": [], **{v: [] for v in VARIANTS}}
    for _ in range(args.rounds):
        got["floor"].append(speed.last_pod_path("floor", args.nodes, args.devices, False)[0])
        for variant, off in VARIANTS.items():
            got[variant].append(agent_path(args.nodes, args.devices, off)[0])
    report(got, f"N = {args.nodes}, the last pod's critical path (medians of {args.rounds} "
                "interleaved rounds)")
    print(f"\nend: {speed.load()}")


def report(got: dict[str, list[float]], title: str) -> None:
    floor = statistics.median(got["floor"])
    print(f"\n{title}")
    for kind, values in got.items():
        mid = statistics.median(values)
        vs = "" if kind == "floor" else f"  agent - floor {mid - floor:+.2f} s"
        print(f"  {kind:22} {mid:5.2f} s{vs}   trials " + ", ".join(f"{x:.2f}" for x in values))


if __name__ == "__main__":
    main()
