"""What the forged-table defences cost the NFS server (issue: forged tables).

On the real NFS bed (tests/nfs_bed.py: one kernel nfsd, two UML clients, default v4.2
mounts), runs an N-pod rendezvous that completes at once (every pod starts at one
instant) and reads each client's `/proc/self/mountstats` before and after it (a "pod"
that only prints the file), so the difference is the RPCs of that rendezvous, by
operation, summed over both clients. Variants, alternating trial by trial:

  base   the agent before the defences (its package from a directory given with --base,
         e.g. `git archive <commit> ascend_node | tar -x -C DIR`), on PYTHONPATH
  nokey  this tree, no key: node 0's slot read once per follower, cross-checks,
         node 0's stat of outcome.json per poll and its read-back
  key    this tree with ASCEND_NODE_RENDEZVOUS_KEY (no extra file operation)

    python bench/bench_nfs_forgery.py --base /tmp/base [--nodes 4] [--trials 3]

Root and the bed's packages needed (scripts/ci-setup-nfs).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.nfs_bed import GUEST_SHARED, Bed, explain, why_not  # noqa: E402

KEY = "5f0c1a2b3c4d5e6f708192a3b4c5d6e7f8091a2b3c4d5e6f"


def parse_ops(text: str, mount_point: str = GUEST_SHARED) -> Counter[str]:
    """Per-operation RPC counts of the NFS mount at `mount_point` in a mountstats text."""
    ops: Counter[str] = Counter()
    inside = per_op = False
    for line in text.splitlines():
        if line.startswith("device "):
            inside = f" mounted on {mount_point} " in line
            per_op = False
            continue
        if not inside:
            continue
        if line.strip() == "per-op statistics":
            per_op = True
            continue
        if per_op and ":" in line:
            name, _, rest = line.strip().partition(":")
            fields = rest.split()
            if fields and fields[0].isdigit():
                ops[name] += int(fields[0])
    return ops


def snapshot(bed: Bed, tag: str) -> Counter[str]:
    nodes = bed.pods(bed.clients, run_id=f"snap-{tag}")
    for node in nodes:
        node.argv = ["cat", "/proc/self/mountstats"]
    total: Counter[str] = Counter()
    for r in bed.run(nodes, hard_timeout=30):
        total += parse_ops(r.stdout)
    return total


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--base", type=Path, required=True)
    ap.add_argument("--nodes", type=int, default=4)
    ap.add_argument("--trials", type=int, default=3)
    ap.add_argument("--vers", default="4.2")
    args = ap.parse_args()
    if why_not():
        print(f"skipped: {why_not()}")
        return 0
    results: dict[str, list[Counter[str]]] = {"base": [], "nokey": [], "key": []}
    with Bed(Path(tempfile.mkdtemp(prefix="bench-forgery-")), vers=args.vers,
             clients=2) as bed:
        print(f"bed booted in {bed.boot_seconds:.1f} s (v{args.vers}, default options)",
              flush=True)
        for trial in range(args.trials):
            for variant in results:
                extra = {"ASCEND_NODE_RENDEZVOUS_KEY": KEY} if variant == "key" else {}
                nodes = bed.pods(args.nodes, run_id=f"f{trial}-{variant}", timeout=60,
                                 ASCEND_NODE_PREFLIGHT="off", **extra)
                if variant == "base":
                    for node in nodes:
                        node.env["PYTHONPATH"] = str(args.base)
                before = snapshot(bed, f"{trial}-{variant}-a")
                got = bed.run(nodes, hard_timeout=90)
                took = max(r.end for r in got) - bed.last_start
                after = snapshot(bed, f"{trial}-{variant}-b")
                if any(r.exit_code != 0 for r in got) or len({r.table for r in got}) != 1:
                    print(f"  trial {trial} {variant}: FAILED\n{explain(got)}")
                    return 1
                diff = after - before
                results[variant].append(diff)
                print(f"  trial {trial} {variant:5}: {took:5.1f} s, {sum(diff.values())} RPCs "
                      f"({', '.join(f'{k} {v}' for k, v in diff.most_common(6))})", flush=True)
    ops = sorted({op for runs in results.values() for c in runs for op in c},
                 key=lambda op: -sum(c[op] for c in results["base"]))
    print(f"\nmedian RPCs per completed {args.nodes}-pod rendezvous (both clients):")
    print(f"{'op':>12} " + " ".join(f"{v:>7}" for v in results))
    for op in [*ops, "total"]:
        cells = []
        for runs in results.values():
            vals = [sum(c.values()) if op == "total" else c[op] for c in runs]
            cells.append(f"{statistics.median(vals):>7.0f}")
        print(f"{op:>12} " + " ".join(cells))
    return 0


if __name__ == "__main__":
    sys.exit(main())
