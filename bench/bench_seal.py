"""What the forged-table defences cost one pod, in CPU (issue: forged tables).

Prints, for a job of N nodes (8 NPUs each), the median time of:

  * reading the outcome document with and without a rendezvous key (the key adds one
    JSON parse and one HMAC-SHA256 over the canonical bytes; the file is read once);
  * writing it signed vs. unsigned (node 0, once per attempt);
  * the follower's acceptance checks without a key: the outcome's own consistency
    (sha256, records, rank ids) and the cross-check of the sampled slots' entries.

    python bench/bench_seal.py [--nodes 8 128 1024] [--repeat 20]

The file operations are counted by `tests/test_seal.py::test_acceptance_reads_each_slot_
once_and_nothing_more_per_poll`; their NFS cost is in docs/rendezvous.md (threat model).
"""

from __future__ import annotations

import argparse
import hashlib
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from ascend_node.ranktable import build_rank_table, render_rank_table  # noqa: E402
from ascend_node.rendezvous import decide  # noqa: E402
from ascend_node.rendezvous.models import OutcomeDoc, TableRecord  # noqa: E402
from ascend_node.rendezvous.participant import to_server  # noqa: E402
from ascend_node.rendezvous.seal import RendezvousKey  # noqa: E402
from ascend_node.rendezvous.store import RunPaths, read_doc, write_doc  # noqa: E402
from tests.rdzv_docs import member  # noqa: E402


def _median_ms(fn: Callable[[], object], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1000


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--nodes", type=int, nargs="+", default=[8, 128, 1024])
    ap.add_argument("--repeat", type=int, default=20)
    args = ap.parse_args()
    print(f"{'N':>6} {'outcome KB':>10} {'read ms':>8} {'read+key':>9} {'write ms':>9} "
          f"{'write+key':>10} {'checks ms':>10}")
    for n in args.nodes:
        print(_row(n, args.repeat), flush=True)


def _row(n: int, repeat: int) -> str:
    key = RendezvousKey(b"0123456789abcdef0123456789abcdef")
    members = [member(i, nodes=n, base=i // 200) for i in range(n)]
    text = render_rank_table(build_rank_table([to_server(m.data) for m in members]))
    outcome = OutcomeDoc(run_id="run-1", attempt_id="a1", result="table",
                         members=tuple(TableRecord(global_index=i, incarnation=m.incarnation,
                                                   digest=m.data.digest())
                                       for i, m in enumerate(members)),
                         ranktable_text=text,
                         ranktable_sha256=hashlib.sha256(text.encode()).hexdigest())
    sample_ids = decide.cross_check_sample(n // 2, n, _counter(n))
    slots = {i: members[i] for i in sample_ids}

    def checks() -> None:
        assert decide.outcome_consistency(outcome, n, 1) is None
        assert decide.cross_check(outcome, slots, 1) is None

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        paths = RunPaths(root, "run-1")
        plain, signed = paths.outcome("a1"), paths.outcome("a2")
        write_doc(plain, outcome, root)
        write_doc(signed, outcome.model_copy(update={"attempt_id": "a2"}), root, key=key)
        size = plain.stat().st_size / 1024
        r0 = _median_ms(lambda: read_doc(plain, OutcomeDoc, "run-1"), repeat)
        r1 = _median_ms(lambda: read_doc(signed, OutcomeDoc, "run-1", key), repeat)
        w0 = _median_ms(lambda: write_doc(plain, outcome, root), repeat)
        w1 = _median_ms(lambda: write_doc(plain, outcome, root, key=key), repeat)
    c = _median_ms(checks, repeat)
    return f"{n:>6} {size:>10.0f} {r0:>8.2f} {r1:>9.2f} {w0:>9.2f} {w1:>10.2f} {c:>10.2f}"


def _counter(n: int) -> Callable[[int, int], int]:
    state = iter(range(1, 10 * n))
    return lambda a, b: a + next(state) % (b - a + 1)

if __name__ == "__main__":
    main()
