"""What one follower's end of the wait costs the NFS server (issue 29).

On the real NFS bed (tests/nfs_bed.py: one kernel nfsd, two UML clients, default mounts),
client 0 writes a completed attempt of N nodes (attempt, N member slots, the outcome with
its rank table); then, on client 1, node 5 comes back to it (a container restart: its
slot is there, the verdict too) and accepts the table — its whole run is the end of a
wait. The follower runs in-process and reads its client's `/proc/self/mountstats` before
and after, so the difference is its RPCs, by operation. Two outcomes, alternating:

  before  the outcome without slot stamps (as written before them): every slot is read,
          the follower's acceptance of before this change
  after   node 0's records with each slot's stamp: one listing, the sample, the changed

    python bench/bench_nfs_end_of_wait.py [--nodes 64] [--trials 3] [--vers 4.2]

Root and the bed's packages needed (scripts/ci-setup-nfs).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import statistics
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from bench_nfs_forgery import parse_ops  # noqa: E402

from tests.nfs_bed import GUEST_SHARED, Bed, explain, why_not  # noqa: E402

ME = 5


def _mountstats() -> Counter[str]:
    return parse_ops(Path("/proc/self/mountstats").read_text())


def pod_setup(run_id: str, nodes: int, stamps: bool) -> None:
    """Client 0: a completed attempt, as node 0 leaves it."""
    from ascend_node.ranktable import build_rank_table, render_rank_table
    from ascend_node.rendezvous import freshness
    from ascend_node.rendezvous.models import AttemptDoc, OutcomeDoc, TableRecord
    from ascend_node.rendezvous.participant import to_server
    from ascend_node.rendezvous.store import RunPaths, create_doc, write_doc
    from tests.rdzv_docs import member

    shared = Path(GUEST_SHARED)
    paths = RunPaths(shared, run_id)
    members = [member(i, nodes=nodes) for i in range(nodes)]
    members = [m.model_copy(update={"run_id": run_id}) for m in members]
    write_doc(paths.attempt_file, AttemptDoc(run_id=run_id, attempt_id="a1",
                                             opened_by="uid-0", node_count=nodes,
                                             master_count=1), shared)
    for m in members:
        create_doc(paths.slot("a1", m.data.global_index), m, shared)
    listed = freshness.list_files(paths.attempt_dir("a1")) or {}
    text = render_rank_table(build_rank_table([to_server(m.data) for m in members]))
    write_doc(paths.outcome("a1"), OutcomeDoc(
        run_id=run_id, attempt_id="a1", result="table",
        members=tuple(TableRecord(global_index=i, incarnation=m.incarnation,
                                  digest=m.data.digest(),
                                  slot_stamp=listed[f"node-{i}.json"] if stamps else None)
                      for i, m in enumerate(members)),
        ranktable_text=text, ranktable_sha256=hashlib.sha256(text.encode()).hexdigest()),
        shared)
    print(json.dumps({"written": len(listed)}))


def pod_follow(run_id: str, nodes: int) -> None:
    """Client 1: node ME comes back to the completed attempt and accepts its table."""
    from ascend_node.discover.identity import NodeIdentity
    from ascend_node.rendezvous.protocol import Rendezvous
    from ascend_node.rendezvous.store import RunPaths
    from tests.rdzv_docs import data

    ident = NodeIdentity("worker", ME - 1, 1, nodes - 1, data(ME).pod_ip, data(ME).host_ip,
                         f"uid-{ME}")
    rdzv = Rendezvous(RunPaths(Path(GUEST_SHARED), run_id), ident, data(ME),
                      deadline=time.monotonic() + 60, timeout=60, progress_interval=1e9)
    before = _mountstats()
    start = time.monotonic()
    outcome = rdzv.run()
    took = time.monotonic() - start
    after = _mountstats()
    print(json.dumps({"result": outcome.result, "seconds": took,
                      "ops": dict(after - before)}))


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--nodes", type=int, default=64)
    ap.add_argument("--trials", type=int, default=3)
    ap.add_argument("--vers", default="4.2")
    ap.add_argument("--pod", nargs="+", help=argparse.SUPPRESS)  # inside a client guest
    args = ap.parse_args()
    if args.pod:
        if args.pod[0] == "setup":
            pod_setup(args.pod[1], int(args.pod[2]), args.pod[3] == "1")
        else:
            pod_follow(args.pod[1], int(args.pod[2]))
        return 0
    if why_not():
        print(f"skipped: {why_not()}")
        return 0
    results: dict[str, list[Counter[str]]] = {"before": [], "after": []}
    with Bed(Path(tempfile.mkdtemp(prefix="bench-end-")), vers=args.vers, clients=2) as bed:
        print(f"bed booted in {bed.boot_seconds:.1f} s (v{args.vers}, default options), "
              f"N = {args.nodes}", flush=True)
        for trial in range(args.trials):
            for variant in results:
                run_id = f"e{trial}-{variant}"
                pods = bed.pods(2, run_id=f"{run_id}-pods")
                for pod, mode in zip(pods, ("setup", "follow")):
                    pod.argv = [sys.executable, str(Path(__file__).resolve()), "--pod",
                                mode, run_id, str(args.nodes),
                                "1" if variant == "after" else "0"]
                    pod.env["PYTHONPATH"] = str(ROOT)
                got = bed.run(pods[:1], hard_timeout=120)  # client 0
                if got[0].exit_code != 0:
                    print(f"setup failed:\n{explain(got)}")
                    return 1
                got = bed.run(pods[1:], hard_timeout=120)  # client 1
                if got[0].exit_code != 0:
                    print(f"follower failed:\n{explain(got)}")
                    return 1
                report = json.loads(got[0].stdout.strip().splitlines()[-1])
                ops = Counter(report["ops"])
                results[variant].append(ops)
                print(f"  trial {trial} {variant:6}: {sum(ops.values()):5} RPCs in "
                      f"{report['seconds']:.2f} s ("
                      f"{', '.join(f'{k} {v}' for k, v in ops.most_common(8))})", flush=True)
    ops_seen = sorted({op for runs in results.values() for c in runs for op in c},
                      key=lambda op: -sum(c[op] for c in results["before"]))
    print(f"\nmedian RPCs of node {ME}'s end of the wait, N = {args.nodes} (client 1):")
    print(f"{'op':>14} " + " ".join(f"{v:>7}" for v in results))
    for op in [*ops_seen, "total"]:
        cells = []
        for runs in results.values():
            vals = [sum(c.values()) if op == "total" else c[op] for c in runs]
            cells.append(f"{statistics.median(vals):>7.0f}")
        print(f"{op:>14} " + " ".join(cells))
    return 0


if __name__ == "__main__":
    sys.exit(main())
