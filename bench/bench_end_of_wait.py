"""What one follower reads once node 0's verdict is there (issue 29, the end of the wait).

An in-process follower (node 5) of a job of N nodes publishes, polls, and finds the
table at its third poll; counted from the moment the verdict is written: the files it
opens for reading and the directories it lists. Three outcomes:

  * ``no stamps``: an outcome without `slot_stamp` (as written before it existed): the
    follower reads every slot, the cost of before this change;
  * ``stamps``: node 0's records carry each slot's stamp: one listing, the cross-check
    sample, its own slot and the outcome;
  * ``stamps, 2 changed``: two peers outside the sample republished (a container
    restart) after the verdict: those two are read as well.

    python bench/bench_end_of_wait.py [--nodes 12 64 1024]

Counts, not times: on NFS each open is 3-4 RPCs (OPEN, READ, CLOSE, maybe a LOOKUP) and
a listing one READDIRPLUS per ~100 entries (docs/rendezvous.md, "The end of the wait").
`tests/test_seal.py::test_acceptance_reads_each_slot_once_and_nothing_more_per_poll`
pins the same counts at N = 12 and 64.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import random
import stat
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from ascend_node.discover.identity import NodeIdentity  # noqa: E402
from ascend_node.ranktable import build_rank_table, render_rank_table  # noqa: E402
from ascend_node.rendezvous import freshness  # noqa: E402
from ascend_node.rendezvous.models import AttemptDoc, OutcomeDoc, TableRecord  # noqa: E402
from ascend_node.rendezvous.participant import to_server  # noqa: E402
from ascend_node.rendezvous.protocol import Rendezvous  # noqa: E402
from ascend_node.rendezvous.store import RunPaths, create_doc, write_doc  # noqa: E402
from tests.rdzv_docs import RUN, data, member  # noqa: E402

ME = 5


def count(nodes: int, stamps: bool, changed: int) -> tuple[int, int, int, int]:
    """(files opened, of them other members' slots, listings, entries listed) after the
    verdict, for follower ME of a job of `nodes`."""
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        paths = RunPaths(root, RUN)
        write_doc(paths.attempt_file, AttemptDoc(run_id=RUN, attempt_id="a1",
                                                 opened_by="uid-0", node_count=nodes,
                                                 master_count=1), root)
        members = [member(i, nodes=nodes, base=i // 200) for i in range(nodes)]
        for m in members[:-1]:
            if m.data.global_index != ME:
                create_doc(paths.slot("a1", m.data.global_index), m, root)
        text = render_rank_table(build_rank_table([to_server(m.data) for m in members]))
        opened: list[str] = []
        listings: list[int] = []
        after: list[int] = []  # len(opened), len(listings) when the verdict was written
        real_open, real_scandir = os.open, os.scandir

        def recording_open(path, flags, *args, **kwargs):  # type: ignore[no-untyped-def]
            fd = real_open(path, flags, *args, **kwargs)
            if not stat.S_ISDIR(os.fstat(fd).st_mode) and not flags & (os.O_WRONLY
                                                                       | os.O_CREAT):
                opened.append(Path(path).name)
            return fd

        def recording_scandir(path):  # type: ignore[no-untyped-def]
            listings.append(sum(1 for _ in real_scandir(path)))
            return real_scandir(path)

        polls = 0

        def sleep(_s: float) -> None:
            nonlocal polls
            polls += 1
            if polls != 3:
                return
            os.open, os.scandir = real_open, real_scandir
            create_doc(paths.slot("a1", nodes - 1), members[-1], root)
            listed = freshness.list_files(paths.attempt_dir("a1")) or {}
            outcome = OutcomeDoc(
                run_id=RUN, attempt_id="a1", result="table",
                members=tuple(TableRecord(
                    global_index=i, incarnation=m.incarnation, digest=m.data.digest(),
                    slot_stamp=listed[f"node-{i}.json"] if stamps else None)
                    for i, m in enumerate(members)),
                ranktable_text=text,
                ranktable_sha256=hashlib.sha256(text.encode()).hexdigest())
            write_doc(paths.outcome("a1"), outcome, root)
            for index in range(nodes - 2, nodes - 2 - changed, -1):
                write_doc(paths.slot("a1", index), members[index], root)
            after[:] = [len(opened), len(listings)]
            os.open, os.scandir = recording_open, recording_scandir  # type: ignore[assignment]

        ident = NodeIdentity("worker", ME - 1, 1, nodes - 1, data(ME).pod_ip,
                             data(ME).host_ip, f"uid-{ME}")
        os.open, os.scandir = recording_open, recording_scandir  # type: ignore[assignment]
        try:
            result = Rendezvous(paths, ident, data(ME), deadline=time.monotonic() + 600,
                                timeout=600, progress_interval=1e9, sleep=sleep).run()
        finally:
            os.open, os.scandir = real_open, real_scandir
        assert result.result == "table"
        files = opened[after[0]:]
        slots = [n for n in files if n.startswith("node-") and n != f"node-{ME}.json"]
        return len(files), len(slots), len(listings) - after[1], sum(listings[after[1]:])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--nodes", type=int, nargs="+", default=[12, 64, 1024])
    args = ap.parse_args()
    random.seed(29)
    print(f"{'N':>6}  {'outcome':<18} {'opens':>6} {'peer slots':>10} {'listings':>8} "
          f"{'entries':>8}")
    for n in args.nodes:
        for label, stamps, changed in (("no stamps", False, 0), ("stamps", True, 0),
                                       ("stamps, 2 changed", True, 2)):
            opens, slots, lists, entries = count(n, stamps, changed)
            print(f"{n:>6}  {label:<18} {opens:>6} {slots:>10} {lists:>8} {entries:>8}",
                  flush=True)


if __name__ == "__main__":
    main()
