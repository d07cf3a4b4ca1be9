"""What each Kubernetes API client costs a pod before its first request (issue 38).

Why: the agent's pod commands are fresh Python processes and their imports are pinned
(tests/pod_imports.json); a rendezvous through the API puts a client on that path. Measured
for the official `kubernetes` client, `lightkube`, and the agent's own standard-library client
(`ascend_node.kube`), each in a fresh process:

- import: the wall time of `python -c 'import X'` and `-X importtime`'s cumulative time of X;
- setup: the wall time of "load the in-cluster config + build a client" (a ServiceAccount
  directory with a real CA certificate, made by openssl, and a token), the modules and the
  resident memory that setup added to the bare interpreter.

Median (and minimum) of `--repeat` runs, the candidates interleaved so that the machine's
load falls on each alike. The two third-party clients are installed in a throwaway venv:

    python3 -m venv /tmp/kc-bench-venv && /tmp/kc-bench-venv/bin/pip install kubernetes lightkube
    .venv/bin/python bench/bench_kube_client.py --other-python /tmp/kc-bench-venv/bin/python
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

PROBE = r"""
import sys, os, time
%s
def rss():
    with open('/proc/self/status') as fh:
        for line in fh:
            if line.startswith('VmRSS:'):
                return int(line.split()[1])
n0, r0, t0 = len(sys.modules), rss(), time.perf_counter()
SA = sys.argv[1]
env = {'KUBERNETES_SERVICE_HOST': '10.96.0.1', 'KUBERNETES_SERVICE_PORT': '443'}
os.environ.update(env)  # lightkube reads the process environment only
%s
t1 = time.perf_counter()
print(repr((len(sys.modules) - n0, rss() - r0, t1 - t0)))
"""

PINNED = Path(__file__).resolve().parents[1] / "tests" / "pod_imports.json"
POD_PATH = f"""
import json
for m in json.load(open({str(PINNED)!r}))["ranktable"]["ascend_node"]:
    __import__(m)
import typer, pydantic
"""
"""What a pod's `ranktable` has imported already (tests/pod_imports.json): the client's cost
on that path is what it adds to this."""

SETUP = {
    "kubernetes": """
from kubernetes import client
from kubernetes.config.incluster_config import InClusterConfigLoader
InClusterConfigLoader(token_filename=SA + '/token', cert_filename=SA + '/ca.crt',
                      environ=env).load_and_set()
api = client.CoreV1Api()
""",
    "lightkube": """
from lightkube import Client, KubeConfig
from lightkube.resources.core_v1 import ConfigMap
api = Client(KubeConfig.from_service_account(service_account=SA), namespace='default')
""",
    "ascend_node.kube": """
from pathlib import Path
from ascend_node.kube.config import in_cluster
from ascend_node.kube.client import Client
api = Client(in_cluster(env, Path(SA)))
""",
}
SETUP["ascend_node.kube, on the ranktable path"] = SETUP["ascend_node.kube"]


def service_account(tmp: Path) -> Path:
    sa = tmp / "sa"
    sa.mkdir()
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
                    "-subj", "/CN=bench-ca", "-keyout", str(tmp / "ca.key"),
                    "-out", str(sa / "ca.crt")], check=True, capture_output=True)
    (sa / "token").write_text("bench-token")
    (sa / "namespace").write_text("default")
    return sa


def wall(argv: list[str]) -> tuple[float, str]:
    t0 = time.perf_counter()
    out = subprocess.run(argv, check=True, capture_output=True, text=True)
    return time.perf_counter() - t0, out.stdout + out.stderr


def importtime_ms(python: str, module: str) -> float:
    _, text = wall([python, "-X", "importtime", "-c", f"import {module}"])
    for line in text.splitlines():
        m = re.match(r"import time:\s+\d+ \|\s+(\d+) \| (\S+)$", line)
        if m and m.group(2) == module:
            return int(m.group(1)) / 1000
    raise RuntimeError(f"no import line for {module}")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=9)
    ap.add_argument("--other-python", default="/tmp/kc-bench-venv/bin/python")
    args = ap.parse_args()
    pythons = {"kubernetes": args.other_python, "lightkube": args.other_python,
               "ascend_node.kube": sys.executable,
               "ascend_node.kube, on the ranktable path": sys.executable}
    rows: dict[str, dict[str, list[float]]] = {
        k: {"pass": [], "import": [], "importtime": [], "setup": [], "setup_in": [],
            "modules": [], "rss": []} for k in SETUP}
    with tempfile.TemporaryDirectory() as tmp:
        sa = service_account(Path(tmp))
        for _ in range(args.repeat):
            for name, code in SETUP.items():
                py = pythons[name]
                r = rows[name]
                r["pass"].append(wall([py, "-c", "pass"])[0])
                mod = name if "." not in name else "ascend_node.kube.client"
                r["import"].append(wall([py, "-c", f"import {mod}"])[0])
                r["importtime"].append(importtime_ms(py, mod))
                prelude = POD_PATH if "ranktable" in name else ""
                t, out = wall([py, "-c", PROBE % (prelude, code), str(sa)])
                modules, rss_kb, inside = eval(out.strip().splitlines()[-1])  # our own repr
                r["setup"].append(t)
                r["setup_in"].append(inside)
                r["modules"].append(modules)
                r["rss"].append(rss_kb)
    summary = {}
    for name, r in rows.items():
        summary[name] = {
            "python -c pass ms (median)": round(statistics.median(r["pass"]) * 1000, 1),
            "python -c 'import X' ms (median / min)": (
                round(statistics.median(r["import"]) * 1000, 1), round(min(r["import"]) * 1000, 1)),
            "-X importtime cumulative ms (median)": round(statistics.median(r["importtime"]), 1),
            "config + client, process wall ms (median / min)": (
                round(statistics.median(r["setup"]) * 1000, 1), round(min(r["setup"]) * 1000, 1)),
            "config + client, in-process ms (median)": round(
                statistics.median(r["setup_in"]) * 1000, 1),
            "modules added": int(statistics.median(r["modules"])),
            "RSS added MiB": round(statistics.median(r["rss"]) / 1024, 1),
        }
    print(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()
