"""What assembling a PD service's global rank table costs the controller's pod.

Lays out a service of P + D instances (pods x NPUs each) on a temporary directory as the
instances' node 0s leave it (attempt, member slots, table outcome), then times, median of
`--repeat`:

  * the first look: reading every instance's attempt, outcome and members, building the
    table, rendering and writing it by rename (what `pd-table` does once the last
    instance completes; target <= 0.5 s at 16 instances x 4 pods);
  * a watcher's look at an unchanged service (two small reads and a stat per instance).

    python bench/bench_pd_table.py [--instances 2 16] [--pods 4] [--npus 16]

The time from the last instance's table to the global table is this first look plus at
most one `pd-table` interval (0.5 s): docs/pd.md.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from ascend_node.pd.files import write_global_table  # noqa: E402
from ascend_node.pd.motor_rules import InstanceFlags  # noqa: E402
from ascend_node.pd.service import (  # noqa: E402
    Seen,
    global_table_path,
    read_service,
    table_from_view,
)
from tests.pd_docs import announce_coordinator, publish_instance  # noqa: E402

FLAGS = InstanceFlags(multi_node=True, p_distributed=False, d_distributed=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--instances", type=int, nargs="+", default=[2, 16])
    parser.add_argument("--pods", type=int, default=4)
    parser.add_argument("--npus", type=int, default=16)
    parser.add_argument("--repeat", type=int, default=15)
    args = parser.parse_args()
    print(f"{'instances':>9} {'pods':>5} {'NPUs':>5}  first look (ms)  watcher look (ms)")
    for count in args.instances:
        with tempfile.TemporaryDirectory() as tmp:
            shared = Path(tmp)
            prefill = count // 2
            counts = {"prefill": prefill, "decode": count - prefill}
            tasks = [f"prefill-{i}" for i in range(prefill)]
            tasks += [f"decode-{j}" for j in range(count - prefill)]
            for n, task in enumerate(tasks):
                publish_instance(shared, "svc", task, n + 1, pods=args.pods,
                                 devices=args.npus)
            announce_coordinator(shared, "svc", {"VC_COORDINATOR_NUM": "1"})
            out = global_table_path(shared, "svc")
            firsts, looks = [], []
            for _ in range(args.repeat):
                seen: Seen = {}
                t0 = time.perf_counter()
                view = read_service(shared, "svc", counts, seen=seen)
                doc = table_from_view(view, counts, FLAGS)
                assert doc is not None and not view.missing()
                write_global_table(out, doc)
                firsts.append(time.perf_counter() - t0)
                t0 = time.perf_counter()
                read_service(shared, "svc", counts, seen=seen)
                looks.append(time.perf_counter() - t0)
            print(f"{count:>9} {args.pods:>5} {args.npus:>5}  "
                  f"{statistics.median(firsts) * 1e3:>15.1f}  "
                  f"{statistics.median(looks) * 1e3:>17.1f}")


if __name__ == "__main__":
    main()
