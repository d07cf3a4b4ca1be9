"""The operator's commands for a job that met through the Kubernetes API, run from a
kubeconfig outside the cluster (issue 38, item 1): real `ascend-node` processes against a
real kube-apiserver (`tests/kube_apiserver.py`) with the operator's token in a kubeconfig."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from ascend_node.kube.client import Client
from ascend_node.kube.errors import NotFound
from ascend_node.kube.resources import CONFIGMAPS
from ascend_node.rendezvous.kube_layout import JobIdentity, new_object, object_name
from tests.kube_apiserver import Plane
from tests.test_kube_rendezvous import ADMIN_TOKEN, NS, admin, plane  # noqa: F401

pytestmark = pytest.mark.kube


def kubeconfig(tmp: Path, bed: Plane) -> Path:
    """A kubeconfig as kubectl reads it: the API server, its CA, the operator's token."""
    path = tmp / "kubeconfig"
    path.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "bed",
        "clusters": [{"name": "bed", "cluster": {"server": bed.url,
                                                 "certificate-authority": str(bed.ca)}}],
        "users": [{"name": "operator", "user": {"token": ADMIN_TOKEN}}],
        "contexts": [{"name": "bed", "context": {"cluster": "bed", "user": "operator",
                                                 "namespace": NS}}]}))
    return path


def agent(*args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("ASCEND_NODE_", "KUBERNETES_", "KUBECONFIG"))}
    return subprocess.run([sys.executable, "-m", "ascend_node", *args], env=env,
                          capture_output=True, text=True, timeout=60)


def test_clean_removes_one_jobs_rendezvous_objects_and_nothing_else(
        tmp_path: Path, plane: Plane, admin: Client) -> None:  # noqa: F811
    mine = JobIdentity(NS, "clean-me", str(uuid.uuid4()))
    other = JobIdentity(NS, "clean-me-not", str(uuid.uuid4()))
    instance = JobIdentity(NS, "clean-me", mine.uid, "decode-0")
    for job in (mine, other, instance):
        for kind, index in (("attempt", None), ("node", 0), ("node", 1)):
            admin.create(CONFIGMAPS, new_object(job, kind, index))
    foreign = {"apiVersion": "v1", "kind": "ConfigMap",
               "metadata": {"name": "clean-me-settings", "namespace": NS,
                            "labels": {"ascend-node.io/job-name": "clean-me"}}}
    admin.create(CONFIGMAPS, foreign)  # not the agent's: no managed-by label
    config = kubeconfig(tmp_path, plane)

    refused = agent("clean", "--rendezvous", "kube", "--job", "clean-me",
                    "--kubeconfig", str(config))
    assert refused.returncode == 2 and "nothing removed" in refused.stderr
    assert admin.get(CONFIGMAPS, object_name(mine.name, "attempt"))

    done = agent("clean", "--rendezvous", "kube", "--job", "clean-me", "--kubeconfig",
                 str(config), "--yes")
    assert done.returncode == 0, done.stderr
    removed = sorted(line.split()[1] for line in done.stdout.splitlines())
    assert removed == sorted(f"configmap/{object_name(j.scope, k, i)}"
                             for j in (mine, instance)
                             for k, i in (("attempt", None), ("node", 0), ("node", 1)))
    for job in (mine, instance):
        with pytest.raises(NotFound):
            admin.get(CONFIGMAPS, object_name(job.scope, "attempt"))
    assert admin.get(CONFIGMAPS, object_name(other.name, "node", 1))
    assert admin.get(CONFIGMAPS, "clean-me-settings")

    again = agent("clean", "--rendezvous", "kube", "--job", "clean-me", "--kubeconfig",
                  str(config), "--yes")
    assert again.returncode == 0 and "absent   no rendezvous objects of job clean-me" in \
        again.stdout, again.stderr
    missing = agent("clean", "--rendezvous", "kube", "--kubeconfig", str(config), "--yes")
    assert missing.returncode == 2 and "needs --job" in missing.stderr
