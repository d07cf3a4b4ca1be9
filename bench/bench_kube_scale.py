"""Cost at scale of the rendezvous through the API (issue 38, item 5), beside the volume's.

For each N of `--nodes`, against the kube bed's API server (`scripts/kube-bed up`; the bed of
`--run-dir`, else one started here and stopped after), with N agent processes of
`ascend-node simulate --rendezvous kube` (each with a ServiceAccount token of the job's own
Role, `sim/kube_sim.py`), on this 2-core machine:

- **a completing rendezvous**: the API requests every pod made (its own count, the agent's
  `rendezvous through the API: R requests (W watches)` line; node 0 apart), cross-checked
  against kube-apiserver's `apiserver_request_total` for configmaps and the rules review
  (whose delta also holds the bed's own controllers' few calls); the most watches open on
  configmaps at once (`apiserver_longrunning_requests`, sampled every 0.25 s, less the
  bed's own); the simulation's wall time and its slowest node's rendezvous phase;
- **the same N on the volume** (`simulate` without `--rendezvous`, a local directory), run
  right after: the lag of the API beside it;
- **waiting**: N pods of which the last never comes, for `--wait` s (`--absent`): requests
  per waiting pod per second, and the watches held, while nothing changes.

    .venv/bin/python bench/bench_kube_scale.py [--nodes 8 64 128] [--devices 2] [--wait 30]
        [--run-dir RUN | --bare]

`--bare`: a bare kube-apiserver + etcd of the bed's build (`tests/kube_apiserver.py`, no
controllers, no Volcano: its Job CRD alone, from fixtures/volcano, so that `simulate` can own
its objects by a vcjob), for measuring the agents' calls without the bed's own.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any, Optional

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.kube_bed import load_scripts  # noqa: E402

NS = "bench-scale"
_SAMPLE = re.compile(r'^(\w+)\{([^}]*)\} ([0-9.e+-]+)$')
_AGENT = re.compile(r"rendezvous through the API: (\d+) requests \((\d+) watches\)")
RESOURCES = ("configmaps", "selfsubjectrulesreviews")
BARE_TOKEN = "bench-kube-scale-admin"
VOLCANO_CRD = ROOT / "fixtures" / "volcano" / "batch.volcano.sh_jobs.yaml"


class BareKube:
    """The two calls the bench makes of the bed's client (`get`, `create`), as the admin
    token of a bare API server (`tests/kube_apiserver.control_plane`)."""

    def __init__(self, url: str, ca: Path) -> None:
        import ssl
        self.url, self.ctx = url, ssl.create_default_context(cafile=str(ca))

    def request(self, method: str, path: str, body: Optional[bytes] = None,
                content_type: str = "application/json") -> Any:
        req = urllib.request.Request(self.url + path, data=body, method=method)
        req.add_header("Authorization", f"Bearer {BARE_TOKEN}")
        if body is not None:
            req.add_header("Content-Type", content_type)
        with urllib.request.urlopen(req, context=self.ctx, timeout=30) as resp:
            data = resp.read()
        return json.loads(data) if data[:1] in (b"{", b"[") else data.decode()

    def get(self, path: str) -> Any:
        return self.request("GET", path)

    def create(self, path: str, obj: dict[str, Any]) -> Any:
        return self.request("POST", path, json.dumps(obj).encode())


@contextlib.contextmanager
def bare_plane(tmp: Path) -> Any:
    """A bare API server with Volcano's Job CRD, and an admin kubeconfig: (kube, kubeconfig)."""
    import yaml

    from tests.kube_apiserver import binaries, control_plane
    bin_dir = binaries()
    if bin_dir is None:
        raise SystemExit("no kube-apiserver/etcd in ~/.cache/ascend-node-kube (scripts/kube-bed)")
    with control_plane(tmp, {BARE_TOKEN: ("admin", "system:masters")}, bin_dir) as plane:
        kube = BareKube(plane.url, plane.ca)
        kube.create("/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
                    yaml.safe_load(VOLCANO_CRD.read_text()))
        deadline = time.monotonic() + 60
        while True:  # until the CRD is served
            try:
                kube.get("/apis/batch.volcano.sh/v1alpha1")
                break
            except Exception:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.5)
        kubeconfig = tmp / "admin.kubeconfig"
        kubeconfig.write_text(json.dumps({
            "apiVersion": "v1", "kind": "Config", "current-context": "admin",
            "clusters": [{"name": "bare", "cluster": {"server": plane.url,
                                                      "certificate-authority": str(plane.ca)}}],
            "users": [{"name": "admin", "user": {"token": BARE_TOKEN}}],
            "contexts": [{"name": "admin", "context": {"cluster": "bare", "user": "admin"}}]}))
        yield kube, kubeconfig


def metrics(kube: Any) -> tuple[dict[tuple[str, str], float], float]:
    """(requests by (resource, verb) for RESOURCES, watches open on configmaps)."""
    text = kube.get("/metrics")
    counts: dict[tuple[str, str], float] = {}
    watches = 0.0
    for line in str(text).splitlines():
        m = _SAMPLE.match(line)
        if not m:
            continue
        name, labels_text, value = m.groups()
        labels = dict(re.findall(r'(\w+)="([^"]*)"', labels_text))
        if name == "apiserver_request_total" and labels.get("resource") in RESOURCES:
            key = (labels["resource"], labels["verb"])
            counts[key] = counts.get(key, 0.0) + float(value)
        elif (name == "apiserver_longrunning_requests" and labels.get("verb") == "WATCH"
              and labels.get("resource") == "configmaps"):
            watches += float(value)
    return counts, watches


class WatchSampler:
    """The most configmap watches open at once while running."""

    def __init__(self, kube: Any) -> None:
        self.kube, self.peak, self.stop = kube, 0.0, threading.Event()
        self.thread = threading.Thread(target=self.loop, daemon=True)

    def loop(self) -> None:
        while not self.stop.is_set():
            with contextlib.suppress(Exception):  # a sample lost under load: the next
                self.peak = max(self.peak, metrics(self.kube)[1])
            self.stop.wait(0.25)

    def __enter__(self) -> WatchSampler:
        self.thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop.set()
        self.thread.join()


def simulate(args: list[str], kubeconfig: Optional[Path]) -> tuple[dict[str, Any], float]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("KUBERNETES_", "ASCEND_NODE_"))}
    argv = [sys.executable, "-m", "ascend_node", "simulate", *args, "--json", "--keep"]
    if kubeconfig is not None:
        argv += ["--rendezvous", "kube", "--kubeconfig", str(kubeconfig), "--namespace", NS]
    t0 = time.monotonic()
    done = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=1800)
    wall = time.monotonic() - t0
    try:
        doc = json.loads(done.stdout)
    except ValueError:
        raise SystemExit(f"simulate {' '.join(args)}: exit {done.returncode}\n"
                         f"{done.stderr[-3000:]}") from None
    return doc, wall


def agent_counts(doc: dict[str, Any]) -> dict[int, tuple[int, int]]:
    """node -> (requests, watches) from each agent's own line in its kept log."""
    out = {}
    for row in doc["results"]:
        if row.get("absent") or not row.get("log"):
            continue
        found = _AGENT.findall(Path(row["log"]).read_text(errors="replace"))
        if found:
            out[row["node"]] = (int(found[-1][0]), int(found[-1][1]))
    return out


def rendezvous_s(doc: dict[str, Any]) -> float:
    return max(float((r.get("phases") or {}).get("rendezvous", 0.0))
               for r in doc["results"] if not r.get("absent"))


def delta(a: dict[tuple[str, str], float], b: dict[tuple[str, str], float]) -> dict[str, int]:
    return {f"{res} {verb}": int(b.get((res, verb), 0) - a.get((res, verb), 0))
            for res, verb in sorted(set(a) | set(b)) if b.get((res, verb), 0) != a.get(
                (res, verb), 0)}


def workspace(doc: dict[str, Any]) -> None:
    if doc.get("workspace"):
        subprocess.run(["rm", "-rf", doc["workspace"]], check=False)


def measure(kube: Any, kubeconfig: Path, n: int, devices: int, wait: float) -> dict[str, Any]:
    row: dict[str, Any] = {"nodes": n}
    _, base_watches = metrics(kube)
    before, _ = metrics(kube)
    with WatchSampler(kube) as sampler:
        doc, _ = simulate(["--nodes", str(n), "--devices", str(devices), "--timeout",
                           "600"], kubeconfig)
    after, _ = metrics(kube)
    counts = agent_counts(doc)
    workspace(doc)
    assert doc["ok"], f"kube {n}: not ok"
    followers = [c[0] for i, c in counts.items() if i != 0]
    row["kube"] = {
        "wall_s": round(doc["wall_seconds"], 2), "rendezvous_max_s": round(rendezvous_s(doc), 2),
        "node0_requests": counts.get(0, (0, 0))[0], "node0_watches": counts.get(0, (0, 0))[1],
        "follower_requests_median": statistics.median(followers) if followers else None,
        "follower_requests_max": max(followers) if followers else None,
        "all_requests_agents": sum(c[0] for c in counts.values()),
        "apiserver_requests": delta(before, after),
        "peak_watches": round(sampler.peak - base_watches),
    }
    vol, _ = simulate(["--nodes", str(n), "--devices", str(devices), "--timeout", "600"], None)
    workspace(vol)
    assert vol["ok"], f"volume {n}: not ok"
    row["volume"] = {"wall_s": round(vol["wall_seconds"], 2),
                     "rendezvous_max_s": round(rendezvous_s(vol), 2)}
    # waiting: the last node never comes; the others wait `wait` s and exit 4
    before, _ = metrics(kube)
    with WatchSampler(kube) as sampler:
        doc, _ = simulate(["--nodes", str(n), "--devices", str(devices), "--timeout",
                           f"{wait:g}", "--absent", str(n - 1)], kubeconfig)
    after, _ = metrics(kube)
    counts = agent_counts(doc)
    workspace(doc)
    waiting = [c[0] for i, c in counts.items() if i != 0]
    row["waiting"] = {
        "seconds": wait,
        "follower_requests_median": statistics.median(waiting) if waiting else None,
        "per_follower_per_s": round(statistics.median(waiting) / wait, 3) if waiting else None,
        "node0_requests": counts.get(0, (0, 0))[0],
        "apiserver_requests": delta(before, after),
        "peak_watches": round(sampler.peak - base_watches),
        "exit_codes": sorted({r["exit_code"] for r in doc["results"] if not r.get("absent")}),
    }
    return row


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, nargs="+", default=[8, 64, 128])
    ap.add_argument("--devices", type=int, default=2)
    ap.add_argument("--wait", type=float, default=30.0)
    ap.add_argument("--run-dir", type=Path, default=None,
                    help="a bed that is up (scripts/kube-bed up --run-dir RUN)")
    ap.add_argument("--bare", action="store_true",
                    help="a bare kube-apiserver of its own instead of the bed")
    args = ap.parse_args()
    if args.bare:
        with tempfile.TemporaryDirectory(prefix="bench-kube-bare-") as tmp, \
                bare_plane(Path(tmp)) as (kube, kubeconfig):
            kube.create("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace",
                                               "metadata": {"name": NS}})
            for n in args.nodes:
                print(json.dumps(measure(kube, kubeconfig, n, args.devices, args.wait)),
                      flush=True)
        return 0
    _, bed = load_scripts()
    run = args.run_dir
    own = run is None
    if own:
        run = Path(tempfile.mkdtemp(prefix="bench-kube-scale-"))
        bed.up(run, 1, False)
    try:
        kube = bed.client(run)
        with contextlib.suppress(Exception):  # there from an earlier run
            kube.create("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace",
                                               "metadata": {"name": NS}})
        for n in args.nodes:
            row = measure(kube, run / "admin.kubeconfig", n, args.devices, args.wait)
            print(json.dumps(row), flush=True)
    finally:
        if own:
            bed.down(run)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
