"""The kube bed for pytest: one real control plane per session (scripts/kube_bed.py).

The session's first `kube` test builds the binaries if this machine's cache lacks them
(scripts/kube-bed-build; ~20 min cold on 2 cores, docs/benchmarks.md) and starts etcd,
kube-apiserver, kube-controller-manager, Volcano's webhook-manager, controller-manager and
scheduler and 4 fake nodes in a temporary run directory; the session's end stops them all.
Without a Go toolchain or openssl every `kube` test skips and says why.

A pod that Volcano binds to a fake node is never run (no kubelet, no node agent yet) and so
never confirms its own deletion: `Bed.purge` force-deletes (grace period 0) what a test made,
as `kubectl delete --force` would, so the NPUs it held are free for the next test.
"""

from __future__ import annotations

import importlib.util
import shutil
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any, Callable

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPTS = ROOT / "scripts"
JOBS_API = "batch.volcano.sh/v1alpha1"


def load_scripts() -> tuple[ModuleType, ModuleType]:
    """scripts/kube_bed.py and scripts/kube_api.py as modules (the scripts dir is no package)."""
    mods = []
    for name in ("kube_api", "kube_bed"):
        if name not in sys.modules:
            spec = importlib.util.spec_from_file_location(name, SCRIPTS / f"{name}.py")
            assert spec and spec.loader
            module = importlib.util.module_from_spec(spec)
            sys.modules[name] = module
            spec.loader.exec_module(module)
        mods.append(sys.modules[name])
    return mods[0], mods[1]


@dataclass
class Bed:
    run: Path
    kube: Any  # kube_api.Kube as admin (system:masters)
    api: ModuleType  # scripts/kube_api.py
    nodes: list[str]

    def namespace(self, name: str) -> str:
        self.kube.create("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace",
                                                "metadata": {"name": name}})
        # kube-controller-manager makes its `default` ServiceAccount; a pod created before
        # that is refused by the ServiceAccount admission plugin, as on any cluster.
        self.wait(f"ServiceAccount {name}/default", lambda: self.kube.get(
            f"/api/v1/namespaces/{name}/serviceaccounts")["items"])
        return name

    def jobs_path(self, ns: str, name: str = "") -> str:
        return str(self.api.path_for(JOBS_API, "Job", ns, name or None))

    def apply(self, ns: str, text: str) -> list[Any]:
        """Every document of a rendered stream, created in `ns` in order (as `kubectl
        create -f` does)."""
        return [self.kube.create_yaml(self.api.document_path(doc, ns), doc)
                for doc in self.api.split_documents(text)]

    def pods(self, ns: str) -> list[dict[str, Any]]:
        return list(self.kube.get(f"/api/v1/namespaces/{ns}/pods")["items"])

    def podgroups(self, ns: str) -> list[dict[str, Any]]:
        path = f"/apis/scheduling.volcano.sh/v1beta1/namespaces/{ns}/podgroups"
        return list(self.kube.get(path)["items"])

    def wait(self, what: str, probe: Callable[[], Any], timeout: float = 120.0) -> Any:
        return self.kube.wait_for(what, probe, timeout)

    def stop_apiserver(self) -> None:
        """Only the bed's kube-apiserver stopped (scripts/kube_bed.py `stop_apiserver`)."""
        load_scripts()[1].stop_apiserver(self.run)

    def start_apiserver(self) -> None:
        """It started again as it ran, returning once ready (`start_apiserver`)."""
        load_scripts()[1].start_apiserver(self.run)

    def purge(self, ns: str) -> None:
        """Delete the namespace's Volcano Jobs, then force-delete its pods until none is
        left (nothing runs them, so nothing would confirm a graceful deletion)."""
        for job in self.kube.get(self.jobs_path(ns))["items"]:
            try:
                self.kube.delete(self.jobs_path(ns, job["metadata"]["name"]))
            except self.api.ApiError as e:
                if e.status != 404:
                    raise
        deadline = time.monotonic() + 60
        while True:
            pods = self.pods(ns)
            if not pods:
                break
            for pod in pods:
                path = f"/api/v1/namespaces/{ns}/pods/{pod['metadata']['name']}"
                try:
                    self.kube.request("DELETE", path, b'{"gracePeriodSeconds": 0}')
                except self.api.ApiError as e:
                    if e.status != 404:
                        raise
            if time.monotonic() > deadline:
                left = [p["metadata"]["name"] for p in pods]
                raise TimeoutError(f"pods of {ns} still there: {left}")
            time.sleep(0.5)
        self.kube.delete(f"/api/v1/namespaces/{ns}")


def open_bed(tmp_path_factory: pytest.TempPathFactory, nodes: int = 4,
             a3: bool = False) -> Iterator[Bed]:
    """Start a bed for the session, yield it, stop it; skip (saying why) when it cannot run."""
    if shutil.which("openssl") is None:
        pytest.skip("openssl not installed: the kube bed signs its certificates with it")
    api, bed = load_scripts()
    run = tmp_path_factory.mktemp("kube-bed-a3" if a3 else "kube-bed")
    try:
        bed.up(run, nodes, a3)
    except SystemExit as e:
        if e.code == 3:
            pytest.skip("no Go toolchain (go on PATH or /usr/local/go/bin/go): the kube bed's "
                        "binaries are built from the Go module proxy (scripts/kube-bed-build)")
        raise
    except bed.BedError as e:
        bed.down(run)
        pytest.fail(f"kube bed did not come up: {e}")
    try:
        yield Bed(run, bed.client(run), api, bed.node_names(nodes))
    finally:
        bed.down(run)
