"""The kube bed with its nodes' agent: rendered Jobs applied, scheduled by Volcano, run in podman.

tests/kube_bed.py gives the real control plane and fake nodes; scripts/kube_node_agent.py is
what runs the pods bound to them (as each node's `system:node:<node>` identity), in podman
with the container bed's images (scripts/container_bed.py). This module starts that agent
for a test module and gives the tests what they need around it: a model claim backed by a
host directory (a hostPath PersistentVolume, bound by kube-controller-manager's binder), a
`podman exec` into a pod's container, and a timeline of every pod (created by Volcano's
controller, bound by its scheduler, Running and Ready as the agent reported them).

Only the vendor side is fake: the fake MindIE daemon, hccn_tool and npu-smi, whose switches
(`ASCEND_NODE_SIM_*`, `SIM_ENV`) the agent adds to every container — the fakes' own knobs,
never anything the Job asks for. Root only; skips without podman/mmdebstrap.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any, Optional

import pytest

from tests.kube_bed import Bed

ROOT = Path(__file__).resolve().parents[1]
MODEL_PATH = "/mnt/model"
SIM_DIR = ".sim"  # on the claim: each pod's daemon report and load-end mark
LOAD_S = 6.0  # the fake daemon's "weight load"
SIM_ENV = {
    "ASCEND_NODE_SIM_DATA": "/usr/local/Ascend/driver/sim-data",  # on the node's driver
    "ASCEND_NODE_SIM_SERVE": "health",
    "ASCEND_NODE_SIM_LOAD_S": f"{LOAD_S:g}",
    "ASCEND_NODE_SIM_REPORT": f"{MODEL_PATH}/{SIM_DIR}/{{pod}}",
    "PYTHONUNBUFFERED": "1",
    # MindIE-Motor's coordinator and controller, faked (ascend_node/sim/fake_motor.py) under
    # the names the rendered mindie-pd commands exec, found first on PATH from the claim
    "PATH": f"{MODEL_PATH}/{SIM_DIR}/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:"
            "/sbin:/bin",
    "ASCEND_NODE_SIM_MOTOR_PERIOD": "1",
    "ASCEND_NODE_SIM_MOTOR_STATE": f"{MODEL_PATH}/{SIM_DIR}/{{task}}.jsonl",
}
MOTOR_FAKE = """#!/bin/sh
# MindIE-Motor's {role}, faked (ascend_node/sim/fake_motor.py)
exec python3 -m ascend_node.sim.fake_motor {role} "$@"
"""


def _load(name: str) -> ModuleType:
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, ROOT / "scripts" / f"{name}.py")
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


@dataclass
class Timeline:
    """First time (s after apply) each pod was seen created, bound, Running, Ready."""

    t0: float
    seen: dict[str, dict[str, float]] = field(default_factory=dict)
    # (pod, uid) -> (the pod, its first terminated container state) as the watch saw it
    terminated: dict[tuple[str, str], tuple[dict[str, Any], dict[str, Any]]] = field(
        default_factory=dict)

    def note(self, pod: str, what: str) -> None:
        self.seen.setdefault(pod, {}).setdefault(what, time.monotonic() - self.t0)

    def last(self, what: str) -> float:
        return max(p[what] for p in self.seen.values())

    def first(self, what: str) -> float:
        return min(p[what] for p in self.seen.values())

    def summary(self) -> str:
        phases = ("created", "bound", "running", "ready")
        return "  ".join(f"{w} {self.last(w):.1f} s" for w in phases
                         if all(w in p for p in self.seen.values()))


@dataclass
class AgentBed:
    kube_bed: Bed
    containers: Any  # container_bed.Bed
    proc: subprocess.Popen[bytes]
    log: Path

    @property
    def kube(self) -> Any:
        return self.kube_bed.kube

    def log_tail(self, lines: int = 30) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])

    def container(self, pod: dict[str, Any], name: Optional[str] = None) -> str:
        """The podman name of a pod's container (its first app container by default)."""
        meta = pod["metadata"]
        name = name or pod["spec"]["containers"][0]["name"]
        return f"kb_{meta['namespace']}_{meta['name']}_{meta['uid'][:8]}_{name}"

    def exec(self, pod: dict[str, Any], *argv: str) -> subprocess.CompletedProcess[str]:
        done: subprocess.CompletedProcess[str] = self.containers.podman(
            "exec", self.container(pod), *argv, check=False, timeout=60)
        return done

    def claim(self, ns: str, name: str, uid: Optional[int] = None) -> Path:
        """A ReadWriteMany claim bound to a hostPath PV: the shared model volume, holding
        the model's config.json at MODEL_PATH (docs/deploy.md) and the fakes' marks."""
        from ascend_node.sim.fake_tools import SIM_MODEL_CONFIG

        host = Path(self.containers.work) / "kube-claims" / f"{ns}-{name}"
        subprocess.run(["rm", "-rf", str(host)], check=True)
        (host / SIM_DIR).mkdir(parents=True)
        (host / SIM_DIR).chmod(0o777)
        (host / "config.json").write_text(SIM_MODEL_CONFIG)
        (host / SIM_DIR / "bin").mkdir()
        for role in ("coordinator", "controller"):
            script = host / SIM_DIR / "bin" / f"mindie_motor_{role}"
            script.write_text(MOTOR_FAKE.format(role=role))
            script.chmod(0o755)
        if uid is not None:
            subprocess.run(["chown", "-R", f"{uid}:{uid}", str(host)], check=True)
        pv = f"{ns}-{name}"
        self.kube.create("/api/v1/persistentvolumes", {
            "apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": pv},
            "spec": {"capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteMany"],
                     "persistentVolumeReclaimPolicy": "Retain", "storageClassName": "",
                     "hostPath": {"path": str(host), "type": "Directory"}}})
        self.kube.create(f"/api/v1/namespaces/{ns}/persistentvolumeclaims", {
            "apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": name},
            "spec": {"accessModes": ["ReadWriteMany"], "storageClassName": "",
                     "volumeName": pv, "resources": {"requests": {"storage": "1Gi"}}}})
        path = f"/api/v1/namespaces/{ns}/persistentvolumeclaims/{name}"
        self.kube_bed.wait(f"claim {ns}/{name} Bound",
                           lambda: self.kube.get(path)["status"].get("phase") == "Bound")
        return host

    def watch(self, ns: str, timeline: Timeline, stop: threading.Event) -> threading.Thread:
        """Watch the namespace's pods into `timeline` until `stop`: every state the API
        server held, even one replaced within a second (a failed pod a restart deletes)."""
        def note(p: dict[str, Any]) -> None:
            name = p["metadata"]["name"]
            timeline.note(name, "created")
            if p["spec"].get("nodeName"):
                timeline.note(name, "bound")
            status = p.get("status", {})
            if status.get("phase") == "Running":
                timeline.note(name, "running")
            if any(c["type"] == "Ready" and c["status"] == "True"
                   for c in status.get("conditions", [])):
                timeline.note(name, "ready")
            for c in status.get("containerStatuses", []):
                term = c.get("state", {}).get("terminated")
                if term:
                    timeline.terminated.setdefault((name, p["metadata"]["uid"]), (p, term))

        def loop() -> None:
            path = f"/api/v1/namespaces/{ns}/pods"
            while not stop.is_set():
                try:
                    listed = self.kube.get(path)
                    for p in listed["items"]:
                        note(p)
                    rv = listed["metadata"]["resourceVersion"]
                    while not stop.is_set():
                        for event in self.kube.watch(f"{path}?resourceVersion={rv}", 5):
                            if event["type"] == "ERROR":
                                raise OSError(str(event["object"]))
                            note(event["object"])
                            rv = event["object"]["metadata"]["resourceVersion"]
                except Exception:  # a broken watch: list again
                    stop.wait(0.2)
        t = threading.Thread(target=loop, daemon=True)
        t.start()
        return t

    def purge(self, ns: str, timeout: float = 120) -> None:
        """Delete the namespace's Jobs and wait until the agent confirmed every pod's
        deletion (no force: the agent is the node side now)."""
        jobs = self.kube.get(self.kube_bed.jobs_path(ns))["items"]
        for job in jobs:
            with contextlib.suppress(Exception):  # already gone
                self.kube.delete(self.kube_bed.jobs_path(ns, job["metadata"]["name"]))
        self.kube_bed.wait(f"pods of {ns} gone", lambda: not self.kube_bed.pods(ns), timeout)
        self.kube.delete(f"/api/v1/namespaces/{ns}")


def open_agent(kube_bed: Bed) -> Iterator[AgentBed]:
    """The container bed's images and the node agent over `kube_bed`, for one module."""
    if os.geteuid() != 0:
        pytest.skip("containers need root (podman with runc, bridge networks, cgroups)")
    cb = _load("container_bed")
    missing = cb.missing_tools()
    if missing:
        pytest.skip(f"not installed: {' '.join(missing)} (scripts/ci-setup-containers)")
    containers = cb.Bed()
    try:
        containers.lock()
    except cb.BedError as exc:
        pytest.skip(str(exc))
    containers.configure()
    try:
        containers.build_images()
    except cb.BedError as exc:
        pytest.skip(f"cannot build the images: {exc}")
    log = kube_bed.run / "logs" / "node-agent.log"
    argv = [sys.executable, str(ROOT / "scripts" / "kube_node_agent.py"),
            "--run-dir", str(kube_bed.run), "--work", str(containers.work)]
    for key, value in SIM_ENV.items():
        argv += ["--sim-env", f"{key}={value}"]
    with open(log, "wb") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, cwd=ROOT,
                                stdin=subprocess.DEVNULL)
    bed = AgentBed(kube_bed, containers, proc, log)
    try:
        deadline = time.monotonic() + 60
        while "serving" not in log.read_text(errors="replace"):
            if proc.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"the node agent did not start:\n{bed.log_tail()}")
            time.sleep(0.2)
        yield bed
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=120)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        lock = getattr(containers, "_lock", None)
        if lock is not None:
            lock.close()
