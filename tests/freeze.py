"""Stopping a process for real, for the tests that freeze a server or a pod (SIGSTOP)."""

from __future__ import annotations

import os
import signal
import time


def freeze(pid: int, timeout: float = 30.0) -> None:
    """SIGSTOP `pid` and return once every thread of it is stopped. The kernel wakes one
    thread for a stop signal and that thread stops the others when it next runs: on a
    loaded machine the rest ran on for a while after kill() returned, and answered a call
    the test sent to a server it thought frozen."""
    os.kill(pid, signal.SIGSTOP)
    deadline = time.monotonic() + timeout
    while True:
        states = []
        for task in os.listdir(f"/proc/{pid}/task"):
            try:
                with open(f"/proc/{pid}/task/{task}/stat") as f:
                    states.append(f.read().rsplit(")", 1)[1].split()[0])
            except OSError:
                continue  # a thread that just ended
        if all(state in ("T", "t", "Z", "X") for state in states):
            return
        if time.monotonic() > deadline:
            raise RuntimeError(f"pid {pid} not stopped {timeout:g} s after SIGSTOP: "
                               f"thread states {sorted(set(states))}")
        time.sleep(0.01)
