"""What the kube bed costs: its start-up by phase, its memory, and apply -> every pod bound.

Starts a bed (scripts/kube_bed.py) in a temporary run directory, prints `up`'s phases and
each process's resident memory (psutil), then applies the 4-pod MindIE Job that
`ascend-node manifest --nodes 4` prints and times, from the POST: the PodGroup, all pods
created (Volcano's job controller), all pods bound (Volcano's scheduler, gang). Then `down`.

    python bench/bench_kube_bed.py [--nodes 4] [--repeat 1]

The binaries must be built (scripts/kube-bed-build; a cold build is measured by running
that script with an empty cache, docs/benchmarks.md).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.kube_bed import Bed, load_scripts  # noqa: E402


def rss_mib(pid: int) -> float:
    proc = psutil.Process(pid)
    total = proc.memory_info().rss
    for child in proc.children(recursive=True):
        total += child.memory_info().rss
    return float(total) / 2**20


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--nodes", type=int, default=4)
    ap.add_argument("--repeat", type=int, default=1)
    args = ap.parse_args()
    api, kb = load_scripts()
    with tempfile.TemporaryDirectory(prefix="kube-bed-bench-") as tmp:
        run = Path(tmp) / "run"
        t0 = time.monotonic()
        kb.up(run, args.nodes, False)
        print(f"up: {time.monotonic() - t0:.1f} s; load {os.getloadavg()[0]:.1f}")
        try:
            state = kb._load(run)
            for phase, secs in state["timings_s"].items():
                print(f"  {phase:16} {secs:6.1f} s")
            total = 0.0
            for name, entry in state["pids"].items():
                mib = rss_mib(entry["pid"])
                total += mib
                print(f"  RSS {name:24} {mib:7.1f} MiB")
            print(f"  RSS {'total':24} {total:7.1f} MiB")
            bed = Bed(run, kb.client(run), api, kb.node_names(args.nodes))
            for i in range(args.repeat):
                apply_once(bed, f"bench-{i}", args.nodes)
            for name, entry in kb._load(run)["pids"].items():
                print(f"  RSS after the jobs {name:24} {rss_mib(entry['pid']):7.1f} MiB")
        finally:
            kb.down(run)
    return 0


def apply_once(bed: Bed, ns: str, pods: int) -> None:
    from tests.test_kube_volcano import model_claim

    bed.namespace(ns)
    model_claim(bed, ns)
    text = subprocess.run([sys.executable, "-m", "ascend_node", "manifest", "--namespace", ns,
                           "--nodes", str(pods), "--name", "bench"],
                          capture_output=True, text=True, check=True).stdout
    t0 = time.monotonic()
    bed.kube.create_yaml(bed.jobs_path(ns), text)
    marks: dict[str, float] = {}
    while len(marks) < 3:
        now = time.monotonic() - t0
        if "podgroup" not in marks and bed.podgroups(ns):
            marks["podgroup"] = now
        items = bed.pods(ns)
        if "created" not in marks and len(items) == pods:
            marks["created"] = now
        if len(items) == pods and all(p["spec"].get("nodeName") for p in items):
            marks["bound"] = now
            marks.setdefault("created", now)
            marks.setdefault("podgroup", now)
        if now > 300:
            raise TimeoutError(f"{ns}: {marks}")
        time.sleep(0.1)
    print(f"apply -> PodGroup {marks['podgroup']:.2f} s, all {pods} pods created "
          f"{marks['created']:.2f} s, all bound {marks['bound']:.2f} s "
          f"(load {os.getloadavg()[0]:.1f})")
    bed.purge(ns)


if __name__ == "__main__":
    sys.exit(main())
