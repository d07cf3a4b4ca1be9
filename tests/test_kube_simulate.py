"""`simulate --rendezvous kube`: the simulated pods meet through a real API server.

Against the kube bed's kube-apiserver, kube-controller-manager (its garbage collector) and
Volcano (tests/kube_bed.py), from the operator's kubeconfig: the nodes hold one table, the
simulation's own vcjob owns the objects and ran no pod, and nothing of it is left after.
Bad inputs (no bed needed): `--kubeconfig` without `--rendezvous kube`, an unknown
rendezvous, `--shared-dir` with kube.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

import pytest

from tests.kube_bed import Bed


def simulate(*args: str, kubeconfig: str = "") -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("KUBERNETES_", "ASCEND_NODE_", "KUBECONFIG"))}
    if kubeconfig:
        env["KUBECONFIG"] = kubeconfig
    return subprocess.run([sys.executable, "-m", "ascend_node", "simulate", *args],
                          capture_output=True, text=True, env=env, timeout=300)


@pytest.mark.kube
def test_simulate_meets_through_a_bed_that_is_up(kube_bed: Bed) -> None:
    ns = kube_bed.namespace("sim-kube")
    kube = kube_bed.kube
    seen: dict[str, Any] = {}
    try:
        done = simulate("--nodes", "4", "--devices", "2", "--rendezvous", "kube",
                        "--namespace", ns, "--timeout", "60", "--json",
                        kubeconfig=str(kube_bed.run / "admin.kubeconfig"))
        assert done.returncode == 0, done.stdout + done.stderr
        doc = json.loads(done.stdout)
        first = done.stderr.splitlines()[0]
        assert "meeting through https://127.0.0.1:" in first and f" as job {ns}/sim-" in first
        job = first.rsplit("/", 1)[1]
        assert doc["ok"] and doc["identical_tables"], doc  # one table, byte for byte
        assert [r["exit_code"] for r in doc["results"]] == [0, 0, 0, 0], doc
        assert len(doc["ranktable"]["server_list"]) == 4
        assert doc["shared_dir"] is None  # no shared directory was made
        # nothing of the simulation is left: its vcjob deleted, its RBAC objects deleted,
        # and the garbage collector removes the rendezvous' objects with the vcjob
        assert not kube.get(kube_bed.jobs_path(ns))["items"]
        assert not kube_bed.pods(ns)  # and it never ran a pod
        rbac = f"/apis/rbac.authorization.k8s.io/v1/namespaces/{ns}"
        assert not [r for r in kube.get(f"{rbac}/roles")["items"]
                    if r["metadata"]["name"].startswith(job)]

        def collected() -> bool:
            items = kube.get(f"/api/v1/namespaces/{ns}/configmaps")["items"]
            seen["left"] = [c["metadata"]["name"] for c in items
                            if c["metadata"]["name"].startswith(f"{job}-rdzv-")]
            return not seen["left"]
        kube_bed.wait("the rendezvous' objects collected with the vcjob", collected, 120)
    finally:
        kube_bed.purge(ns)


@pytest.mark.parametrize(("args", "line"), [
    (["--kubeconfig", "/nonexistent"], "--kubeconfig needs --rendezvous kube"),
    (["--rendezvous", "nfs"], "--rendezvous 'nfs' is not one of volume, kube"),
    (["--rendezvous", "kube", "--shared-dir", "/tmp"],
     "--shared-dir is not with --rendezvous kube"),
    (["--rendezvous", "kube", "--pd"], "--pd is not with --rendezvous kube yet"),
])
def test_simulate_kube_bad_inputs_exit_2(args: list[str], line: str) -> None:
    done = simulate(*args)
    assert done.returncode == 2, done.stdout + done.stderr
    assert line in done.stderr.splitlines()[0], done.stderr


def test_simulate_kube_without_a_kubeconfig_is_one_line_exit_1() -> None:
    """As `doctor`, `status` and `launch` read a kubeconfig: a file that is not there is a
    configuration error naming it (1), before any node starts."""
    done = simulate("--rendezvous", "kube", "--kubeconfig", "/nonexistent/kubeconfig")
    assert done.returncode == 1, done.stdout + done.stderr
    first = done.stderr.splitlines()[0]
    assert first == ("ascend-node: error: cannot read kubeconfig /nonexistent/kubeconfig: "
                     "No such file or directory"), done.stderr
