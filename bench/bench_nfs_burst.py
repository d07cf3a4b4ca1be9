"""The start burst on the NFS bed (issue 29): what one follower asks of the server from its
very first second, by 5 s window, in a small job and in a large one.

tests/nfs_bed.py with two client guests (v4.2, default mounts). Node 0 runs alone on client
0 and one follower alone on client 1, both of a job of `--sizes` nodes whose other pods
never come (a faked N: the cadence depends only on the node count the pods are given).
Client 1's `/proc/self/mountstats` is read every `--every` s from the common start for
`--seconds` s: its deltas are that one follower's RPCs (but the client's own lease
renewals, SEQUENCE / RENEW, counted apart). Prints, per N, the follower's RPCs
in each 5 s window after its start, the peak window (RPC/s) and the mean.

    sudo .venv/bin/python bench/bench_nfs_burst.py [--sizes 8,64] [--seconds 40]

`--src DIR` runs the pods with DIR first on PYTHONPATH (an older copy: before/after).
`--node0-late S` starts node 0 S seconds after the follower (a follower that looks
before any attempt is open, then joins); a negative S starts the follower -S s after
node 0. `--trace` runs the follower under bench/nfs_call_trace.py and prints, for its
first `--seconds`, each call on the volume that cost RPCs: when, which, how many (the
join's cost, call by call). `--node0-pause S` runs node 0 under bench/slow_attempt_dir.py:
S s between its `attempt.json` and the attempt's directory (a follower then meets the
attempt before its directory).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.nfs_bed import GUEST_SHARED, Bed, why_not

WINDOW = 5.0
LEASE_OPS = ("SEQUENCE", "RENEW")
"""The client's own lease renewal (v4.1+, v4.0): sent by the NFS client for all its state
when it has nothing else to send within the lease, not by the agent's calls — counted
apart (the bed's lease is 10 s; a real server's 90 s)."""


def measure(bed: Bed, n: int, seconds: float, every: float, src: str, trace: bool = False,
            node0_late: float = 0.0, node0_pause: float = 0.0
            ) -> list[tuple[float, int, dict[str, int]]]:
    timeout = seconds + 30
    nodes = bed.pods(n, run_id=f"burst-{n}", timeout=timeout)[:2]
    if src:
        for node in nodes:
            node.env["PYTHONPATH"] = src
    nodes[0].start_delay = max(node0_late, 0.0)
    nodes[1].start_delay = max(-node0_late, 0.0)  # negative: the follower comes later
    if node0_pause > 0:
        slow = str(Path(__file__).resolve().parent / "slow_attempt_dir.py")
        nodes[0].argv = [nodes[0].argv[0], slow, str(node0_pause), *nodes[0].argv[3:]]
    if trace:
        tracer = str(Path(__file__).resolve().parent / "nfs_call_trace.py")
        nodes[1].argv = [nodes[1].argv[0], tracer, GUEST_SHARED, *nodes[1].argv[3:]]
    samples: list[tuple[float, int, dict[str, int]]] = []
    bed.start_run(nodes, hard_timeout=timeout + 30, place=lambda i: i)
    k = 0
    while True:
        at = bed.last_start + k * every
        if k * every > seconds:
            break
        time.sleep(max(0.0, at - time.time()))
        ops = bed.client_counters()[1]
        agent = sum(v for k, v in ops.items() if k not in LEASE_OPS)
        samples.append((time.time() - bed.last_start, agent, ops))
        k += 1
    results = bed.finish_run()
    if trace:
        for line in results[1].stderr.splitlines():
            if line.startswith("@@rpc "):
                print("    " + line[6:], flush=True)
    return samples


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="8,64")
    ap.add_argument("--seconds", type=float, default=40.0)
    ap.add_argument("--every", type=float, default=1.0)
    ap.add_argument("--src", default="")
    ap.add_argument("--vers", default="4.2", help="NFS version of the mounts: 4.2 or 3")
    ap.add_argument("--trace", action="store_true")
    ap.add_argument("--node0-late", type=float, default=0.0,
                    help="start node 0 this many s after the follower (it comes first); "
                         "negative: the follower this many s after node 0")
    ap.add_argument("--node0-pause", type=float, default=0.0,
                    help="node 0 waits this many s between attempt.json and its directory")
    args = ap.parse_args()
    reason = why_not()
    if reason:
        print(f"bench_nfs_burst: cannot run: {reason}", file=sys.stderr)
        return 2
    for n in (int(s) for s in args.sizes.split(",")):
        # A bed of its own for each N: a client that ran the previous size would return
        # that run's delegations (DELEGRETURN) inside this one's windows.
        with Bed(Path(tempfile.mkdtemp(prefix="bench-nfs-burst-")), vers=args.vers,
                 clients=2) as bed:
            print(f"booted in {bed.boot_seconds:.1f} s; {bed.server_ready}", flush=True)
            samples = measure(bed, n, args.seconds, args.every, args.src, args.trace,
                              args.node0_late, args.node0_pause)
            # the follower's own start: the first sample whose count moved
            base = samples[0][1]
            windows = []
            step = round(WINDOW / args.every)
            for i in range(0, len(samples) - step, step):
                windows.append(samples[i + step][1] - samples[i][1])
            sliding = [samples[i + step][1] - samples[i][1]
                       for i in range(len(samples) - step)]
            total = samples[-1][1] - base
            span = samples[-1][0] - samples[0][0]
            print(f"N={n}: one follower, RPCs per 5 s window from the start: {windows}; "
                  f"peak over any 5 s window {max(sliding)} RPCs, "
                  f"{max(sliding) / WINDOW:.1f} RPC/s (lease renewals apart); "
                  f"mean {total / span:.1f} RPC/s over {span:.0f} s", flush=True)
            for i in range(0, len(samples) - step, step):
                a, b = samples[i][2], samples[i + step][2]
                ops = {k: b[k] - a.get(k, 0) for k in b if b[k] - a.get(k, 0)}
                print(f"    {samples[i][0]:4.0f}-{samples[i + step][0]:3.0f} s: {ops}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
