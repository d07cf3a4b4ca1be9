"""What one MindIE probe costs: `ascend-node status --serving` against MindIE's answers.

Why: the rendered MindIE pods run `status --serving` as their startup probe every 3 s
(for up to the weight load's two hours) and as readiness/liveness afterwards, so its wall
and CPU time are paid again and again in every pod; the startup probe's period is also
how soon a loaded pod turns Ready. This times the real console script against the fake
daemon's management server on loopback (ascend_node/sim/fake_mindie.py, MindIE's codes) in
each state a probe meets: serving (200), loading (503), nothing listening yet (refused);
plain `status` beside it for the floor of the bootstrap probe.

Usage: .venv/bin/python bench/bench_serving.py [--repeat 21]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(ROOT))

from bench_startup import measure  # noqa: E402

from ascend_node.statedir import StatusDoc, write_status  # noqa: E402


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def state_for(tmp: Path, name: str, pid: int, port: int) -> tuple[Path, Path]:
    """A state dir saying boot exec'd `pid`, and a config.json with its management port."""
    state = tmp / name / "state"
    state.mkdir(parents=True)
    write_status(state, StatusDoc(state="done", phase="exec", command="boot", exit_code=0,
                                  pid=pid, message="exec mindieservice_daemon"))
    (state / "env.json").write_text(json.dumps({"env": {
        "MASTER_IP": "127.0.0.1", "MIES_CONTAINER_IP": "127.0.0.1"}}))
    config = json.loads((ROOT / "ascend_node/sim/data/mindie-config.json").read_text())
    config["ServerConfig"].update(httpsEnabled=False, managementIpAddress="127.0.0.1",
                                  managementPort=port)
    path = tmp / name / "config.json"
    path.write_text(json.dumps(config))
    return state, path


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=21)
    args = parser.parse_args()
    exe = str(Path(sys.executable).parent / "ascend-node")
    with tempfile.TemporaryDirectory(prefix="bench-serving-") as raw:
        tmp = Path(raw)
        servers = []
        cases = []
        for name, load_s in (("serving", 0.0), ("loading", 3600.0)):
            port = free_port()
            state, config = state_for(tmp, name, 0, port)
            env = {**os.environ, "MIES_CONFIG_JSON_PATH": str(config),
                   "ASCEND_NODE_SIM_LOAD_S": str(load_s)}
            proc = subprocess.Popen([sys.executable, "-m", "ascend_node.sim.fake_mindie"],
                                    env=env, stdout=subprocess.DEVNULL)
            servers.append(proc)
            state, config = state_for(tmp, name + "-probe", proc.pid, port)
            cases.append((name, state, config))
        refused_state, refused_config = state_for(tmp, "refused", os.getpid(), free_port())
        cases.append(("refused", refused_state, refused_config))
        time.sleep(1.0)  # the servers listen
        try:
            rows = []
            for name, state, config in cases:
                env = {**os.environ, "MIES_CONFIG_JSON_PATH": str(config)}
                label = f"status --serving ({name})"
                rows += measure([(label, [exe, "status", "--serving", "--state-dir",
                                          str(state)])], env, args.repeat)
            rows += measure([("status (bootstrap done)",
                              [exe, "status", "--state-dir", str(cases[0][1])])],
                            dict(os.environ), args.repeat)
        finally:
            for proc in servers:
                proc.kill()
                proc.wait()
    print(f"# status --serving: median of {args.repeat} runs each, {exe}")
    print(f"# Python {platform.python_version()}, {platform.machine()}, {os.cpu_count()} CPUs, "
          f"load average {os.getloadavg()[0]:.2f}")
    print("| probe | wall median | wall min | CPU median | exit |")
    print("|---|--:|--:|--:|--:|")
    for label, wall, fastest, cpu, code in rows:
        print(f"| `{label}` | {wall * 1000:.0f} ms | {fastest * 1000:.0f} ms | "
              f"{cpu * 1000:.0f} ms | {code} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
