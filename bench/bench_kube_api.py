"""What the rendezvous' calls cost on a real kube-apiserver v1.30.2 + etcd (issue 38, early
figures for "Cost at scale"; the whole rendezvous is measured on the bed once it is wired).

- one call's latency through `ascend_node.kube.Client` on a kept-alive connection: GET,
  create, compare-and-set update (median and p95 of `--calls`);
- the fan-out of one write of the attempt object to W followers each watching it by name
  (`fieldSelector=metadata.name=...`), W in `--watchers`: the lag from the start of the write
  (the writer's call) to each follower's event (median and max over the followers, median
  over `--writes` writes), for a small attempt document and for one of an outcome's size
  at 1,024 pods (216 KB);
- kube-apiserver's resident memory and CPU time while the W watches are open and served.

The followers are threads of this process (one connection each), so on 2 cores their own
reading competes with the API server's sending: the lags are an upper bound.

Needs the bed's binaries (~/.cache/ascend-node-kube, issue 37) and openssl:
    .venv/bin/python bench/bench_kube_api.py [--watchers 8 64 256] [--writes 5] [--calls 200]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ascend_node.kube.client import Client
from ascend_node.kube.config import Endpoint
from ascend_node.kube.resources import CONFIGMAPS, Call, Resource
from tests.kube_apiserver import binaries, control_plane

NS = "bench"
TOKEN = "bench-admin"


def client(url: str, ca: Path) -> Client:
    return Client(Endpoint(server=url, namespace=NS, source="bench", ca_file=str(ca),
                           token=TOKEN), timeout=60)


def cm(name: str, data: dict[str, str]) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": data}


def ms(values: list[float]) -> str:
    values = sorted(values)
    p95 = values[min(len(values) - 1, int(len(values) * 0.95))]
    return f"median {statistics.median(values) * 1000:.1f} ms, p95 {p95 * 1000:.1f} ms"


def proc_stat(pid: int) -> tuple[float, float]:
    """(resident MiB, CPU seconds) of a process."""
    rss = 0.0
    with open(f"/proc/{pid}/status") as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                rss = int(line.split()[1]) / 1024
    with open(f"/proc/{pid}/stat") as fh:
        fields = fh.read().rsplit(")", 1)[1].split()
    import os
    tick = os.sysconf("SC_CLK_TCK")
    return rss, (int(fields[11]) + int(fields[12])) / tick


def latencies(c: Client, calls: int) -> dict[str, str]:
    c.create(CONFIGMAPS, cm("lat", {"v": "0"}))
    gets, creates, updates = [], [], []
    for i in range(calls):
        t = time.perf_counter()
        obj = c.get(CONFIGMAPS, "lat")
        gets.append(time.perf_counter() - t)
        obj["data"]["v"] = str(i)
        t = time.perf_counter()
        c.replace(CONFIGMAPS, obj)
        updates.append(time.perf_counter() - t)
        t = time.perf_counter()
        c.create(CONFIGMAPS, cm(f"lat-{i}", {"slot.json": "x" * 1400}))
        creates.append(time.perf_counter() - t)
    return {"get": ms(gets), "create (1.4 KB slot)": ms(creates), "update (CAS)": ms(updates)}


def fan_out(url: str, ca: Path, api_pid: int, watchers: int, writes: int,
            payload: int) -> dict[str, Any]:
    name = f"attempt-{watchers}-{payload}"
    writer = client(url, ca)
    obj = writer.create(CONFIGMAPS, cm(name, {"outcome.json": "", "n": "-1"}))
    got: list[dict[int, float]] = [{} for _ in range(watchers)]
    ready = threading.Barrier(watchers + 1)

    def follow(w: int) -> None:
        c = client(url, ca)
        first = True
        for event in c.watch(CONFIGMAPS, field_selector=f"metadata.name={name}",
                             timeout_seconds=120):
            if first:
                first = False
                ready.wait()
            n = int(event["object"].get("data", {}).get("n", "-1"))
            if n >= 0:
                got[w][n] = time.perf_counter()
            if n == writes - 1:
                break

    threads = [threading.Thread(target=follow, args=(w,), daemon=True) for w in range(watchers)]
    rss0, cpu0 = proc_stat(api_pid)
    for t in threads:
        t.start()
    ready.wait()
    rss1, cpu1 = proc_stat(api_pid)
    sent: list[float] = []
    for n in range(writes):
        time.sleep(0.5)
        obj["data"] = {"outcome.json": "o" * payload, "n": str(n)}
        sent.append(time.perf_counter())
        obj = writer.replace(CONFIGMAPS, obj)
    for t in threads:
        t.join(120)
    rss2, cpu2 = proc_stat(api_pid)
    medians, maxes = [], []
    for n in range(writes):
        lags = [g[n] - sent[n] for g in got if n in g]
        medians.append(statistics.median(lags))
        maxes.append(max(lags))
    return {"watchers": watchers, "payload bytes": payload,
            "lag median ms": round(statistics.median(medians) * 1000, 1),
            "lag max ms (median over writes)": round(statistics.median(maxes) * 1000, 1),
            "missed": sum(1 for g in got for n in range(writes) if n not in g),
            "apiserver RSS MiB: before / watches open / after": (round(rss0), round(rss1),
                                                                  round(rss2)),
            "apiserver CPU s: opening the watches / serving the writes": (
                round(cpu1 - cpu0, 2), round(cpu2 - cpu1, 2))}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--watchers", type=int, nargs="+", default=[8, 64, 256])
    ap.add_argument("--writes", type=int, default=5)
    ap.add_argument("--calls", type=int, default=200)
    args = ap.parse_args()
    bin_dir = binaries()
    if bin_dir is None:
        sys.exit("no kube-apiserver in ~/.cache/ascend-node-kube (the bed's build, issue 37)")
    with tempfile.TemporaryDirectory() as tmp, \
            control_plane(Path(tmp), {TOKEN: ("admin", "system:masters")}, bin_dir) as plane:
        admin = client(plane.url, plane.ca)
        namespaces = Resource("", "v1", "namespaces", "Namespace")
        admin.request("POST", Call("create", namespaces, ""), "/api/v1/namespaces",
                      {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}})
        out: dict[str, Any] = {"calls": latencies(admin, args.calls), "fan-out": []}
        for w in args.watchers:
            for payload in (1_000, 216_000):
                out["fan-out"].append(fan_out(plane.url, plane.ca, plane.api.pid, w,
                                              args.writes, payload))
        print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
