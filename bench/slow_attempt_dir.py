"""Run node 0 with a pause between opening its attempt and making the attempt's directory
(bench/bench_nfs_burst.py --node0-pause; issue 29, a follower that meets `attempt.json`
before the directory).

    python bench/slow_attempt_dir.py SECONDS ARGS...   (as `python -m ascend_node ARGS...`)

Node 0 writes `attempt.json`, then publishes its own slot, which makes the attempt's
directory: a few round trips apart, so in a gang start a follower that glanced at the
run directory appearing can read `attempt.json` before the directory exists — a race
that a loaded node 0 widens. This stretches it to SECONDS, so the bed meets the case
every run: node 0's first publish sleeps first. Only the timing changes; every call on
the volume is the agent's own.
"""

from __future__ import annotations

import runpy
import sys
import time

from ascend_node.rendezvous.assembler import Assembler

PAUSE = float(sys.argv[1])
_publish = Assembler._publish
_paused: list[bool] = []


def _slow_publish(self, *args, **kwargs):  # type: ignore[no-untyped-def]
    if not _paused:
        _paused.append(True)
        time.sleep(PAUSE)
    return _publish(self, *args, **kwargs)


Assembler._publish = _slow_publish  # type: ignore[method-assign]
sys.argv = ["ascend_node", *sys.argv[2:]]
runpy.run_module("ascend_node", run_name="__main__", alter_sys=True)
