"""What the watch on the shared volume costs (issue 29, `rendezvous/volume_call.py`).

Prints the median time, on a local disk, of:

  * the mark alone (`with volume_call.call(...)`: what each door adds to each call);
  * a follower's glance (`Freshness.glance` of the run directory: one directory open)
    and a full read of `attempt.json` (`read_doc`), each of which now carries one or two
    marks — compare with the mark's cost;
  * `run_watched` of an empty function: the thread hand-off, paid once per rendezvous
    (and once for the first look at the shared directory), not per call.

    python bench/bench_volume_call.py [--repeat 200000]

On NFS each of those calls is a round trip (hundreds of microseconds at the least), so the
mark is noise there; its RPC count is none (the NFS figures: bench/bench_nfs_cost.py).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
import timeit
from pathlib import Path
from typing import Callable

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from ascend_node.rendezvous import volume_call  # noqa: E402
from ascend_node.rendezvous.freshness import Freshness  # noqa: E402
from ascend_node.rendezvous.models import AttemptDoc  # noqa: E402
from ascend_node.rendezvous.store import RunPaths, read_doc, write_doc  # noqa: E402


def _per_call_us(fn: Callable[[], object], repeat: int, rounds: int = 7) -> float:
    """Microseconds per call: the least disturbed of `rounds` rounds (this machine is
    shared), timed by `timeit` (the garbage collector off, as for any micro-benchmark)."""
    return min(timeit.repeat(fn, number=repeat, repeat=rounds)) / repeat * 1e6


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=200_000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        paths = RunPaths(Path(tmp), "bench")
        write_doc(paths.attempt_file, AttemptDoc(run_id="bench", attempt_id="a1",
                                                 opened_by="uid-0", node_count=64,
                                                 master_count=1), Path(tmp))
        fresh = Freshness(Path(tmp))

        def mark() -> None:
            with volume_call.call("open", paths.root):
                pass

        def nothing() -> None:
            pass

        few = max(args.repeat // 20, 1000)
        mark_us = _per_call_us(mark, args.repeat)
        empty_us = _per_call_us(nothing, args.repeat)
        glance_us = _per_call_us(lambda: fresh.glance(paths.root), few)
        read_us = _per_call_us(lambda: read_doc(paths.attempt_file, AttemptDoc, "bench"), few)
        watched_us = _per_call_us(
            lambda: volume_call.run_watched(nothing, time.monotonic() + 60, tmp, 60), 2000)
    print(f"mark (with volume_call.call):     {mark_us - empty_us:8.2f} us per call")
    print(f"glance of the run directory:      {glance_us:8.2f} us (1 mark)")
    print(f"read_doc of attempt.json:         {read_us:8.2f} us (2 marks: stat, read)")
    print(f"run_watched of an empty function: {watched_us:8.2f} us (once per rendezvous)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
