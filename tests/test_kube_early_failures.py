"""A pod that fails before its discovery, through the Kubernetes API (issue 38, as issue 36
on the volume): real `ascend-node` processes with `--rendezvous kube` against a real
kube-apiserver (`tests/kube_apiserver.py`), under the Role `manifest` renders. The failed pod
exits with its own cause; its peers exit 5 within seconds naming it and that cause, not 4 at
their `--timeout` naming it missing (docs/rendezvous.md, "A pod that fails before its
discovery")."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from ascend_node.kube.client import Client
from ascend_node.rendezvous.kube_layout import JobIdentity
from ascend_node.rendezvous.participant import names_of
from ascend_node.sim.cluster import launch
from tests.cluster_helpers import explain
from tests.kube_apiserver import Plane
from tests.test_kube_rendezvous import (  # noqa: F401
    NS,
    admin,
    grant,
    kube_nodes,
    plane,
    start_on,
)

pytestmark = pytest.mark.kube


@pytest.mark.parametrize(("failing", "argv", "env", "code", "cause"), [
    (1, ["ranktable", "--master-file", "/nonexistent-dir/m"], {}, 1,
     "cannot write /nonexistent-dir/m (flag --master-file): directory /nonexistent-dir does "
     "not exist"),
    (0, ["ranktable"], {"ASCEND_NODE_WORLD_SIZE_FILE": "/nonexistent-dir/w"}, 1,
     "cannot write /nonexistent-dir/w (environment ASCEND_NODE_WORLD_SIZE_FILE): directory "
     "/nonexistent-dir does not exist"),
    (2, ["boot", "--model-dir", "relative/dir", "--", "true"], {}, 2, "--model-dir"),
], ids=["master-file-of-a-worker", "world-size-file-of-node-0", "boot-option-of-a-worker"])
def test_a_pod_failing_before_its_discovery_ends_its_peers_with_5_naming_it(
        tmp_path: Path, plane: Plane, admin: Client, failing: int,  # noqa: F811
        argv: list[str], env: dict[str, str], code: int, cause: str) -> None:
    job = JobIdentity(NS, f"early-{failing}-{code}", str(uuid.uuid4()))
    token = grant(plane, admin, job.name, 3)
    made = kube_nodes(tmp_path, plane, token, job.name, job.uid, 3, timeout=60)
    made[failing].argv = [*made[failing].argv[:3], *argv]  # python -m ascend_node ...
    made[failing].env.update(env)
    # a worker fails once node 0 has opened its attempt (node 0's own discovery is done)
    results = launch(made, 120, on_tick=start_on(admin, job.name, made[failing])
                     if failing else None)
    expected = [5, 5, 5]
    expected[failing] = code
    assert [r.exit_code for r in results] == expected, explain(results)
    assert cause in results[failing].cause, explain(results)
    name = names_of([failing], 1)
    for r in results:
        if r.index != failing:
            assert f"{name} failed: {cause}" in r.cause, explain([r])
            assert r.seconds < 40, explain([r])  # not the timeout (60 s)
