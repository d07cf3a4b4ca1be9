"""Stalls of the NFS bed itself, without the agent: the yardstick for NFS timing bounds.

Two client guests of tests/nfs_bed.py (v4.2, default mounts): pods on client 0 write a
file, fsync it and rename it into one directory every 50 ms, the way node 0 and the
members publish; pods on client 1 open and close that directory and read one file of it
every 0.2 s, the way a waiting pod looks (rendezvous/freshness.py). Prints, per trial, the
longest single directory open the readers saw. Standard library only in the pods.

    sudo .venv/bin/python bench/bench_nfs_stall.py [--trials 3] [--no-delegations]

Found in issue 13's session: on a loaded 2-core host, single opens of 8-21 s (both readers
of one client blocked together), with and without NFSv4 delegations, and no UDP receive
errors on the host: the bed's clients freeze now and then, and any time bound on a bed
test must allow for that or measure something the freeze cannot fake.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.nfs_bed import Bed, why_not

SESSION_OPS = ("EXCHANGE_ID", "CREATE_SESSION", "DESTROY_SESSION", "RECLAIM_COMPLETE")

POD = r'''
import json, os, sys, time
role, d = sys.argv[1], os.path.join(os.environ["ASCEND_NODE_SHARED_DIR"], "stall")
os.makedirs(d, exist_ok=True)
end, worst, k = time.monotonic() + 20, 0.0, 0
me = os.environ["ROLE"] + os.environ["VC_TASK_INDEX"]
while time.monotonic() < end:
    if role == "writer":
        tmp = os.path.join(d, f".tmp-{me}")
        with open(tmp, "w") as f:
            f.write(json.dumps({"k": k}) * 20)
            f.flush()
            os.fsync(f.fileno())
        os.rename(tmp, os.path.join(d, "progress.json" if k % 2 else f"slot-{me}-{k % 50}.json"))
        k += 1
        time.sleep(0.05)
    else:
        t = time.monotonic()
        os.close(os.open(d, os.O_RDONLY | os.O_DIRECTORY))
        worst = max(worst, time.monotonic() - t)
        try:
            with open(os.path.join(d, "progress.json")) as f:
                f.read()
        except OSError:
            pass
        time.sleep(0.2)
print(json.dumps({"role": role, "worst": round(worst, 3)}))
'''


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=3)
    ap.add_argument("--no-delegations", action="store_true",
                    help="the server grants no NFSv4 delegations (fs.leases-enable=0)")
    ap.add_argument("--same-name", action="store_true",
                    help="both client guests keep one hostname (the bed before issue 20)")
    ap.add_argument("--grace", type=int, default=10, help="nfsd's NFSv4 grace period, s")
    ap.add_argument("--lease", type=int, default=10, help="nfsd's NFSv4 lease time, s")
    ap.add_argument("--wait-grace", action="store_true",
                    help="start the first trial only after the grace period is over")
    args = ap.parse_args()
    reason = why_not()
    if reason:
        print(f"bench_nfs_stall: cannot run: {reason}", file=sys.stderr)
        return 2
    work = Path(tempfile.mkdtemp(prefix="bench-nfs-stall-"))
    pod = work / "stall_pod.py"
    pod.write_text(POD)
    with Bed(work / "bed", vers="4.2", clients=2, delegations=not args.no_delegations,
             grace=args.grace, lease=args.lease, same_name=args.same_name) as bed:
        print(f"{bed.server_ready}; clients mounted {bed.boot_seconds:.1f} s after boot",
              flush=True)
        if args.wait_grace:
            time.sleep(max(0.0, bed.server_ready_at + args.grace + 1 - time.monotonic()))
        for trial in range(args.trials):
            before = bed.client_counters()
            since = time.monotonic() - bed.server_ready_at
            nodes = bed.pods(4, devices=1, run_id=f"stall{trial}", timeout=60)
            for node in nodes:  # pod i runs on client i % 2
                node.argv = [sys.executable, str(pod),
                             "writer" if node.index % 2 == 0 else "reader"]
            results = bed.run(nodes, hard_timeout=60)
            worst = [json.loads(r.stdout.strip().splitlines()[-1])["worst"]
                     for r in results if r.index % 2 == 1 and r.stdout.strip()]
            after = bed.client_counters()
            churn = [sum(a.get(op, 0) - b.get(op, 0) for op in SESSION_OPS)
                     for a, b in zip(after, before)]
            print(f"trial {trial + 1} ({since:.0f} s after nfsd started): longest directory "
                  "open on client 1: " + ", ".join(f"{w:.2f} s" for w in worst)
                  + "; session set-ups per client (EXCHANGE_ID, CREATE_SESSION, "
                  f"DESTROY_SESSION, RECLAIM_COMPLETE): {churn}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
