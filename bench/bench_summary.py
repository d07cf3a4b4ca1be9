"""What leaving the timeline summary costs a pod, and what `report` costs an operator.

Why: the summary is written after the rendezvous's outcome is decided and before exec,
so it cannot change the outcome, but its time is added to every pod's start (twice for
`boot`: after the rendezvous and before exec). Target: a few ms on a local disk, a few
round trips on a network volume; nothing that grows with the cluster.

Each round is a fresh Python process that has already imported what a pod has at that
point (the rendezvous, pydantic) and holds a recorder with the events of an 8-NPU boot;
it times the first summary (the one after the rendezvous: it imports the summary model
and psutil and measures the volume's clock) and the second (before exec). `--dir` puts
the shared directory elsewhere (an NFS mount, for instance). Then `report` on a 64-node
run's summaries, as a subprocess (what the operator waits for).

Usage: .venv/bin/python bench/bench_summary.py [--repeat 11] [--dir /mnt/nfs/x]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

POD = r"""
import json, sys, time
from pathlib import Path
from ascend_node import events
from ascend_node.discover.identity import NodeIdentity
from ascend_node.rendezvous.protocol import Rendezvous  # what a pod has imported by now
from ascend_node.rendezvous.models import MemberDoc, OutcomeDoc
shared, state = Path(sys.argv[1]), Path(sys.argv[2])
rec = events.Recorder.open(state, "boot")
events.activate(rec)
now = time.time()
events.record("startup", now - 1, now - 0.9)
for d in range(8):
    events.record("discovery.hccn_tool", now - 0.9, now - 0.5, device=d)
events.record("discovery", now - 0.9, now - 0.5)
events.record("rendezvous", now - 0.5, now)
ident = NodeIdentity("worker", 3, 1, 63, "10.0.0.4", "10.1.0.4", "pod-4")
from ascend_node.chain.table import leave_summary  # noqa: E402 (bootstrap is imported by then)
from ascend_node.settings import resolve_settings  # noqa: E402
settings = resolve_settings({"shared_dir": shared, "run_id": "bench", "state_dir": state}, {})
t0 = time.perf_counter()
leave_summary(settings, ident, "boot", "table", "a-1")
t1 = time.perf_counter()
for name in ("outputs", "install", "set_env", "config", "exec"):
    events.record(name, time.time(), time.time())
leave_summary(settings, ident, "boot", "exec", "a-1")
t2 = time.perf_counter()
path = shared / ".ascend-node" / "bench" / "timeline" / "a-1" / "node-4.json"
print(json.dumps({"first": t1 - t0, "second": t2 - t1, "bytes": path.stat().st_size}))
"""


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=11)
    parser.add_argument("--dir", type=Path, default=None)
    args = parser.parse_args()
    firsts, seconds, size = [], [], 0
    for _ in range(args.repeat):
        with tempfile.TemporaryDirectory(dir=args.dir) as shared, \
                tempfile.TemporaryDirectory() as state:
            done = subprocess.run([sys.executable, "-c", POD, shared, state],
                                  capture_output=True, text=True, check=True)
            got = json.loads(done.stdout)
            firsts.append(got["first"] * 1000)
            seconds.append(got["second"] * 1000)
            size = got["bytes"]
    print(f"summary after the rendezvous: median {statistics.median(firsts):.1f} ms, "
          f"min {min(firsts):.1f} ms ({args.repeat} pods)")
    print(f"summary before exec:          median {statistics.median(seconds):.1f} ms, "
          f"min {min(seconds):.1f} ms")
    print(f"summary size: {size} bytes (8 NPUs, boot)")

    sys.path.insert(0, str(ROOT))
    from ascend_node.atomic import atomic_write_bytes
    from tests.report_cases import ATTEMPT, RUN, large_job

    with tempfile.TemporaryDirectory(dir=args.dir) as shared:
        directory = Path(shared) / ".ascend-node" / RUN / "timeline" / ATTEMPT
        directory.mkdir(parents=True)
        for s in large_job().summaries:
            atomic_write_bytes(directory / f"node-{s.global_index}.json",
                               s.model_dump_json().encode())
        walls = []
        for _ in range(max(3, args.repeat // 2)):
            t0 = time.perf_counter()
            subprocess.run([sys.executable, "-m", "ascend_node", "report", "--shared-dir",
                            shared, "--run-id", RUN, "--attempt", ATTEMPT, "--html",
                            str(Path(shared) / "r.html")], capture_output=True, check=True)
            walls.append((time.perf_counter() - t0) * 1000)
        print(f"report of 62 summaries (text + HTML): median {statistics.median(walls):.0f} ms")


if __name__ == "__main__":
    main()
