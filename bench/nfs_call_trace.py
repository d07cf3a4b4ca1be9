"""Run the agent with every marked call on the shared volume traced: which NFS RPCs each one
cost (bench/bench_nfs_burst.py --trace; issue 29, the join's RPCs).

    python bench/nfs_call_trace.py MOUNT_POINT ARGS...   (as `python -m ascend_node ARGS...`)

Every call of the doors on the volume is marked with `volume_call.call(action, path)`; this
wraps that marker so that, when an outermost call ends, the delta of this client's RPC counts
on MOUNT_POINT (`/proc/self/mountstats`, per operation) is printed to stderr with the time
since the start, the action and the path — and so is the delta between two calls (RPCs made
outside any marked call, e.g. a write-back or a CLOSE sent after the call returned). Reading
/proc costs no RPC. Only meaningful with this process alone on its NFS client.
"""

from __future__ import annotations

import runpy
import sys
import threading
import time

from ascend_node.rendezvous import volume_call

MOUNT = sys.argv[1]
STARTED = time.monotonic()
_state = threading.local()
_last: list[dict[str, int]] = []


def counts() -> dict[str, int]:
    ops: dict[str, int] = {}
    inside = False
    with open("/proc/self/mountstats") as f:
        for ln in f:
            if ln.startswith("device "):
                inside = f" mounted on {MOUNT} " in ln
            elif inside and ln.startswith("\t") and ":" in ln:
                name, _, rest = ln.strip().partition(":")
                nums = rest.split()
                if name.isupper() and len(nums) >= 8 and nums[0].isdigit():
                    ops[name] = int(nums[0])
    return ops


def delta(a: dict[str, int], b: dict[str, int]) -> dict[str, int]:
    return {k: v - a.get(k, 0) for k, v in b.items() if v - a.get(k, 0)}


def say(what: str, path: object, ops: dict[str, int]) -> None:
    if ops:
        sys.stderr.write(f"@@rpc {time.monotonic() - STARTED:7.3f} {sum(ops.values()):3d} "
                         f"{what} {path} {ops}\n")
        sys.stderr.flush()


inner_enter = volume_call.call.__enter__
inner_exit = volume_call.call.__exit__


def enter(self: volume_call.call) -> None:
    depth = getattr(_state, "depth", 0)
    if depth == 0:
        now = counts()
        if _last:
            say("(between calls)", "-", delta(_last[0], now))
        _state.before = now
    _state.depth = depth + 1
    inner_enter(self)


def leave(self: volume_call.call, *exc: object) -> None:
    inner_exit(self, *exc)
    _state.depth -= 1
    if _state.depth == 0:
        now = counts()
        say(self._action, self._path, delta(_state.before, now))
        _last[:] = [now]


volume_call.call.__enter__ = enter  # type: ignore[method-assign]
volume_call.call.__exit__ = leave  # type: ignore[method-assign]
_last.append(counts())
sys.argv = ["ascend_node", *sys.argv[2:]]
runpy.run_module("ascend_node", run_name="__main__", alter_sys=True)
