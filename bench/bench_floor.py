"""The agent beside the floor (issue 13, item 1): same pods, same fake tools, one run.

For each N, starts N real pods at once on one shared directory, first the floor
(`bench/floor_pod.py`, a minimal correct program for the same exchange), then the agent
(`python -m ascend_node ranktable`), alternating per trial, and prints the lag from the
last pod started to the last pod done, and the ratio agent / floor. Also prints what the
harness alone costs: N pods of `python -c pass` plus one fake `hccn_tool` call per device.

    python bench/bench_floor.py [--sizes 2,8,32] [--devices 8] [--trials 3] [--shared DIR]
        [--preflight]

The agent runs with `ASCEND_NODE_PREFLIGHT=off` unless `--preflight`: the floor makes the
IP query only, and the pre-flight's link/health/TLS queries are a feature of their own
(bench/bench_preflight.py measures them).

Target (2 cores): agent <= 1.3x the floor at N = 2 and N = 32; N = 256 agrees.

The package's bytecode is compiled first, as pip does when it installs the wheel into an
image: without it (a source checkout under PYTHONDONTWRITEBYTECODE=1, as on our CI
machines) every agent pod would compile its modules from source, about 0.1 s of CPU each,
which no installed agent pays. The total CPU of the pods is printed beside the lag:
on one machine the lag of N pods started at once is about their CPU / the cores.
"""

from __future__ import annotations

import argparse
import compileall
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Optional

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ascend_node.sim.cluster import SimSpec, prepare
from ascend_node.sim.fake_tools import write_node_data

FLOOR = Path(__file__).resolve().parent / "floor_pod.py"
PACKAGE = Path(__file__).resolve().parents[1] / "ascend_node"


def children_cpu() -> float:
    """CPU seconds of every waited-for child so far (the pods and their tool calls)."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def run_pods(argvs: list[list[str]], envs: list[dict[str, str]], limit: float) -> float:
    """Start every pod at once; seconds from the last start to the last exit."""
    procs = []
    for argv, env in zip(argvs, envs):
        procs.append(subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL,
                                      stdout=subprocess.DEVNULL, stderr=subprocess.PIPE))
    last_start = time.monotonic()
    for proc in procs:
        try:
            _, err = proc.communicate(timeout=limit)
        except subprocess.TimeoutExpired:
            for p in procs:
                p.kill()
            raise SystemExit(f"a pod did not finish within {limit:g} s") from None
        if proc.returncode != 0:
            raise SystemExit(f"a pod exited {proc.returncode}: {err.decode()[-500:]}")
    return time.monotonic() - last_start


def trial(kind: str, n: int, devices: int, shared_root: Optional[Path],
          preflight: bool = False) -> tuple[float, float]:
    """(lag, CPU seconds of all pods) of one run of N pods of `kind`."""
    work = Path(tempfile.mkdtemp(prefix=f"bench-floor-{kind}-{n}-"))
    shared = Path(tempfile.mkdtemp(dir=shared_root)) if shared_root else work / "shared"
    shared.mkdir(exist_ok=True)
    try:
        nodes = prepare(SimSpec(nodes=n, devices=devices, run_id="bench", timeout=600),
                        work, shared)
        for node in nodes:
            write_node_data(node.data_dir, node.devices)
        if kind == "floor":
            argvs = [[sys.executable, str(FLOOR)] for _ in nodes]
        elif kind == "agent":
            argvs = [[sys.executable, "-m", "ascend_node", "ranktable"] for _ in nodes]
        else:  # the harness alone: an interpreter start and the fake tool per device
            script = ("import os,subprocess,sys;t=os.environ['ASCEND_NODE_HCCN_TOOL'];"
                      "[subprocess.run([t,'-i',d,'-ip','-g'],capture_output=True) "
                      "for d in os.environ['ASCEND_VISIBLE_DEVICES'].split(',')]")
            argvs = [[sys.executable, "-c", script] for _ in nodes]
        envs = [dict(node.env) for node in nodes]
        if kind == "agent" and not preflight:
            for env in envs:  # the floor asks hccn_tool for IPs only, not link/health/TLS
                env["ASCEND_NODE_PREFLIGHT"] = "off"
        cpu = children_cpu()
        lag = run_pods(argvs, envs, limit=600)
        cpu = children_cpu() - cpu
        if kind == "agent":
            tables = {(node.state_dir / "ranktable.json").read_bytes() for node in nodes}
            if len(tables) != 1:
                raise SystemExit(f"N={n}: the agent's tables differ")
        return lag, cpu
    finally:
        shutil.rmtree(work, ignore_errors=True)
        if shared_root:
            shutil.rmtree(shared, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="2,8,32")
    parser.add_argument("--devices", type=int, default=8)
    parser.add_argument("--trials", type=int, default=3)
    parser.add_argument("--preflight", action="store_true",
                        help="leave the agent's pre-flight health queries on (3 more hccn_tool "
                             "calls per device, which the floor does not make)")
    parser.add_argument("--shared", type=Path, default=None,
                        help="make each run's shared directory below this one (e.g. NFS)")
    args = parser.parse_args()
    compileall.compile_dir(str(PACKAGE), quiet=1)
    print(f"{'N':>5} {'harness s':>10} {'floor s':>10} {'agent s':>10} {'ratio':>6} "
          f"{'floor cpu':>10} {'agent cpu':>10}  (medians of {args.trials}; last pod started "
          "-> last pod done; cpu: all pods' CPU seconds)")
    for n in (int(x) for x in args.sizes.split(",")):
        got: dict[str, list[tuple[float, float]]] = {"harness": [], "floor": [], "agent": []}
        for _ in range(args.trials):
            for kind in got:
                got[kind].append(trial(kind, n, args.devices, args.shared, args.preflight))
        lag = {k: statistics.median(x[0] for x in v) for k, v in got.items()}
        cpu = {k: statistics.median(x[1] for x in v) for k, v in got.items()}
        print(f"{n:>5} {lag['harness']:>10.2f} {lag['floor']:>10.2f} {lag['agent']:>10.2f} "
              f"{lag['agent'] / lag['floor']:>6.2f} {cpu['floor']:>10.2f} {cpu['agent']:>10.2f}"
              "  agent trials " + ", ".join(f"{x[0]:.2f}" for x in got["agent"]), flush=True)


if __name__ == "__main__":
    main()
