"""Issue 30's table, each figure beside its stand-in measured in the same run.

The machine this runs on is shared, so an absolute figure says little on its own; every
figure is therefore measured interleaved with the program it is compared to (round after
round: stand-in, agent, stand-in, agent, ...) and printed with the ratio of the medians:

- `ascend-node --help` beside `python -c pass` (the interpreter and its site) and beside a
  plain typer app of two commands with the same settings (what any typer CLI pays): wall
  and CPU (user + system) medians, the ratios, and ours minus the typer app (ms that are
  ours to spend).
- N = 2, last pod started -> every pod holds the table: the agent (`ranktable`,
  pre-flight off as for the floor) beside the seed (`bench/seed_pod.py`: one shared JSON,
  read-modify-write, 5 s polls) and the floor (`bench/floor_pod.py`); the target is the
  seed / agent ratio >= 15.
- N = 8, the last pod's critical path while the others wait: N - 1 pods are started and
  left until each has published and waits; then the last pod starts, and the figure is
  its start -> every pod done. The agent beside the floor; target: agent - floor <= 0.25 s.
  The last pod's own CPU seconds are printed too (what its critical path is made of).

    python bench/bench_speed.py [--rounds 9] [--lag-rounds 5] [--nodes 8] [--devices 8]
        [--skip-help] [--skip-seed] [--preflight]

The package's bytecode is compiled first (as pip does on install; this machine sets
PYTHONDONTWRITEBYTECODE=1). The load average is printed at the start and the end.
"""

from __future__ import annotations

import argparse
import compileall
import glob
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable, Optional

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from ascend_node.sim.cluster import SimSpec, prepare  # noqa: E402
from ascend_node.sim.fake_tools import write_node_data  # noqa: E402

BENCH = Path(__file__).resolve().parent
TYPER_STANDIN = """
import typer
app = typer.Typer(add_completion=False, rich_markup_mode=None, pretty_exceptions_enable=False)
@app.command()
def first(flag: bool = typer.Option(False, help="a flag")) -> None:
    "The first command."
@app.command()
def second(name: str = typer.Option("x", help="a name")) -> None:
    "The second command."
app()
"""


def load() -> str:
    one, five, fifteen = os.getloadavg()
    return f"load average {one:.2f}, {five:.2f}, {fifteen:.2f} ({os.cpu_count()} CPUs)"


def timed(argv: list[str], env: Optional[dict[str, str]] = None) -> tuple[float, float]:
    """(wall s, CPU s) of one run of argv, its children included."""
    start = time.perf_counter()
    proc = subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    proc.returncode = os.waitstatus_to_exitcode(status)
    err = proc.stderr.read().decode() if proc.stderr else ""
    if proc.returncode != 0:
        raise SystemExit(f"{argv[:4]} exited {proc.returncode}: {err[-400:]}")
    return wall, usage.ru_utime + usage.ru_stime


def median(values: list[float]) -> float:
    return statistics.median(values)


def help_figures(rounds: int) -> None:
    exe = Path(sys.executable).with_name("ascend-node")
    ours = [str(exe), "--help"] if exe.exists() else [sys.executable, "-m", "ascend_node",
                                                      "--help"]
    kinds = {"python -c pass": [sys.executable, "-c", "pass"],
             "typer app, 2 commands": [sys.executable, "-c", TYPER_STANDIN, "--help"],
             "ascend-node --help": ours}
    got: dict[str, list[tuple[float, float]]] = {k: [] for k in kinds}
    for argv in kinds.values():  # warm-up: page cache, bytecode
        timed(argv)
    for _ in range(rounds):
        for kind, argv in kinds.items():
            got[kind].append(timed(argv))
    wall = {k: median([w for w, _ in v]) for k, v in got.items()}
    cpu = {k: median([c for _, c in v]) for k, v in got.items()}
    print(f"\n--help (medians of {rounds} interleaved rounds; {ours[0]})")
    print(f"  {'':24} {'wall ms':>8} {'cpu ms':>8}")
    for kind in kinds:
        print(f"  {kind:24} {wall[kind] * 1000:8.0f} {cpu[kind] * 1000:8.0f}")
    ours_k, typer_k, pass_k = "ascend-node --help", "typer app, 2 commands", "python -c pass"
    print(f"  ratio ours / python -c pass: wall {wall[ours_k] / wall[pass_k]:.2f}x, "
          f"cpu {cpu[ours_k] / cpu[pass_k]:.2f}x")
    print(f"  ratio ours / typer app:      wall {wall[ours_k] / wall[typer_k]:.2f}x, "
          f"cpu {cpu[ours_k] / cpu[typer_k]:.2f}x")
    print(f"  ours - typer app:            wall {(wall[ours_k] - wall[typer_k]) * 1000:+.0f} ms, "
          f"cpu {(cpu[ours_k] - cpu[typer_k]) * 1000:+.0f} ms")


def argv_of(kind: str) -> list[str]:
    if kind == "agent":
        return [sys.executable, "-m", "ascend_node", "ranktable"]
    return [sys.executable, str(BENCH / f"{kind}_pod.py")]


def published(kind: str, shared: Path, index: int) -> bool:
    """Whether pod `index` of `kind` has published its document (and so now waits)."""
    if kind == "agent":
        return bool(glob.glob(str(shared / ".ascend-node" / "*" / "attempts" / "*" /
                                  f"node-{index}.json")))
    if kind == "floor":
        return bool(glob.glob(str(shared / "floor-*" / f"node-{index}.json")))
    return False


class Job:
    """N simulated nodes (fake hccn_tool, 8 NPUs each) on one fresh shared directory."""

    def __init__(self, n: int, devices: int, kind: str, preflight: bool) -> None:
        self.work = Path(tempfile.mkdtemp(prefix=f"bench-speed-{kind}-{n}-"))
        self.shared = self.work / "shared"
        self.shared.mkdir()
        self.kind = kind
        self.nodes = prepare(SimSpec(nodes=n, devices=devices, run_id="speed", timeout=600),
                             self.work, self.shared)
        for node in self.nodes:
            write_node_data(node.data_dir, node.devices)
        self.envs = [dict(node.env) for node in self.nodes]
        if kind == "agent" and not preflight:
            for env in self.envs:  # the stand-ins ask hccn_tool for IPs only
                env["ASCEND_NODE_PREFLIGHT"] = "off"
        self.procs: list[subprocess.Popen[bytes]] = []

    def start(self, index: int) -> None:
        self.procs.append(subprocess.Popen(
            argv_of(self.kind), env=self.envs[index], stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE))

    def wait_all(self, limit: float = 600) -> dict[int, float]:
        """Wait for every pod; CPU seconds of each, by pid."""
        cpu: dict[int, float] = {}
        deadline = time.monotonic() + limit
        pending = {p.pid: p for p in self.procs}
        while pending:
            pid, status, usage = os.wait4(-1, os.WNOHANG)
            if pid == 0:
                if time.monotonic() > deadline:
                    self.kill()
                    raise SystemExit(f"{self.kind}: a pod did not finish within {limit:g} s")
                time.sleep(0.005)
                continue
            proc = pending.pop(pid, None)
            if proc is None:
                continue
            proc.returncode = os.waitstatus_to_exitcode(status)
            cpu[pid] = usage.ru_utime + usage.ru_stime
            if proc.returncode != 0:
                err = proc.stderr.read().decode() if proc.stderr else ""
                self.kill()
                raise SystemExit(f"{self.kind}: a pod exited {proc.returncode}: {err[-500:]}")
        tables = {(node.state_dir / "ranktable.json").read_bytes() for node in self.nodes}
        if len(tables) != 1:
            raise SystemExit(f"{self.kind}: the pods' tables differ")
        return cpu

    def kill(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.kill()

    def close(self) -> None:
        self.kill()
        shutil.rmtree(self.work, ignore_errors=True)


def lag_all_at_once(kind: str, n: int, devices: int, preflight: bool) -> float:
    """Every pod started at once: the last start -> every pod holds the table."""
    job = Job(n, devices, kind, preflight)
    try:
        for i in range(n):
            job.start(i)
        last_start = time.monotonic()
        job.wait_all()
        return time.monotonic() - last_start
    finally:
        job.close()


def wait_for(condition: Callable[[], bool], limit: float, what: str) -> None:
    deadline = time.monotonic() + limit
    while not condition():
        if time.monotonic() > deadline:
            raise SystemExit(f"{what} did not happen within {limit:g} s")
        time.sleep(0.02)


def oldest_publish(kind: str, shared: Path) -> float:
    """The wall-clock time of the earliest document a waiting pod published."""
    pattern = (".ascend-node/*/attempts/*/node-*.json" if kind == "agent"
               else "floor-*/node-*.json")
    times = [os.stat(p).st_mtime for p in glob.glob(str(shared / pattern))]
    return min(times) if times else time.time()


def last_pod_path(kind: str, n: int, devices: int, preflight: bool
                  ) -> tuple[float, float, float]:
    """N - 1 pods published and waiting, then the last: (its start -> all done, its CPU,
    how long the first waiting pod had waited since it published). On a busy machine the
    N - 1 starts take seconds; a follower that published more than `cadence.FAST_FOR`
    (10 s) ago is calm and glances every 0.5 s instead of looking every 0.2 s, so it may
    see the verdict up to ~0.4 s later: the third figure says which case a trial was."""
    job = Job(n, devices, kind, preflight)
    try:
        for i in range(n - 1):
            job.start(i)
        wait_for(lambda: all(published(kind, job.shared, i) for i in range(n - 1)), 300,
                 f"{kind}: {n - 1} pods publishing")
        time.sleep(1.0)  # every waiting pod back in its poll loop, the machine quiet again
        waited = time.time() - oldest_publish(kind, job.shared)
        job.start(n - 1)
        last_start = time.monotonic()
        cpu = job.wait_all()
        return time.monotonic() - last_start, cpu[job.procs[-1].pid], waited
    finally:
        job.close()


def lag_figures(rounds: int, devices: int, preflight: bool, seed: bool) -> None:
    kinds = ["seed", "floor", "agent"] if seed else ["floor", "agent"]
    got: dict[str, list[float]] = {k: [] for k in kinds}
    for _ in range(rounds):
        for kind in kinds:
            got[kind].append(lag_all_at_once(kind, 2, devices, preflight))
    lag = {k: median(v) for k, v in got.items()}
    print(f"\nN = 2, all started at once, last start -> all hold the table "
          f"(medians of {rounds} interleaved rounds)")
    for kind in kinds:
        print(f"  {kind:6} {lag[kind]:6.2f} s   trials " + ", ".join(f"{x:.2f}" for x in got[kind]))
    if seed:
        print(f"  seed / agent: {lag['seed'] / lag['agent']:.1f}x faster (target >= 15x)")
    print(f"  agent / floor: {lag['agent'] / lag['floor']:.2f}x, "
          f"agent - floor: {lag['agent'] - lag['floor']:+.2f} s")


def path_figures(rounds: int, n: int, devices: int, preflight: bool) -> None:
    got: dict[str, list[tuple[float, float, float]]] = {"floor": [], "agent": []}
    for _ in range(rounds):
        for kind in got:
            got[kind].append(last_pod_path(kind, n, devices, preflight))
    path = {k: median([p for p, _, _ in v]) for k, v in got.items()}
    cpu = {k: median([c for _, c, _ in v]) for k, v in got.items()}
    print(f"\nN = {n}, the last pod's critical path while {n - 1} wait: its start -> all done "
          f"(medians of {rounds} interleaved rounds)")
    for kind in got:
        print(f"  {kind:6} {path[kind]:6.2f} s  (its CPU {cpu[kind]:.2f} s)   trials "
              + ", ".join(f"{p:.2f}" for p, _, _ in got[kind]))
    waited = [w for _, _, w in got["agent"]]
    calm = sum(w > 10.0 for w in waited)
    print(f"  the first waiting agent pod had published {min(waited):.1f}-{max(waited):.1f} s "
          f"before the last start; {calm} of {len(waited)} trials over 10 s (its followers "
          "calm: a glance every 0.5 s, rendezvous/cadence.py)")
    print(f"  agent - floor: {path['agent'] - path['floor']:+.2f} s (target <= +0.25 s), "
          f"agent / floor {path['agent'] / path['floor']:.2f}x; "
          f"last pod's CPU agent - floor {cpu['agent'] - cpu['floor']:+.2f} s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=9, help="rounds of the --help figures")
    parser.add_argument("--lag-rounds", type=int, default=5,
                        help="rounds of the N = 2 and the N = 8 figures")
    parser.add_argument("--nodes", type=int, default=8)
    parser.add_argument("--devices", type=int, default=8)
    parser.add_argument("--skip-help", action="store_true")
    parser.add_argument("--skip-seed", action="store_true",
                        help="leave out the seed (each of its runs takes 5-10 s)")
    parser.add_argument("--preflight", action="store_true",
                        help="the agent with its pre-flight on (3 more hccn_tool calls per "
                             "device, which the stand-ins do not make)")
    args = parser.parse_args()
    compileall.compile_dir(str(ROOT / "ascend_node"), quiet=1)
    print(f"bench_speed: python {sys.version.split()[0]}, {load()}")
    if not args.skip_help:
        help_figures(args.rounds)
    lag_figures(args.lag_rounds, args.devices, args.preflight, not args.skip_seed)
    path_figures(args.lag_rounds, args.nodes, args.devices, args.preflight)
    print(f"\nend: {load()}")


if __name__ == "__main__":
    main()
