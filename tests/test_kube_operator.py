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


def test_status_shows_a_jobs_rendezvous_from_a_kubeconfig(
        tmp_path: Path, plane: Plane, admin: Client) -> None:  # noqa: F811
    """`status --rendezvous kube --job J`: 3 and "no attempt yet" before the job's pods
    meet; 3 naming who is missing while node 0 waits; 0 and the table's sha256 once every
    pod holds it — read from the API with the operator's kubeconfig."""
    from ascend_node.sim.cluster import launch
    from tests.test_kube_rendezvous import grant, kube_nodes

    config = kubeconfig(tmp_path, plane)
    job = JobIdentity(NS, "status-2", str(uuid.uuid4()))

    def status() -> subprocess.CompletedProcess[str]:
        return agent("status", "--rendezvous", "kube", "--job", job.name, "--kubeconfig",
                     str(config))

    before = status()
    assert before.returncode == 3 and "status-2: no attempt yet" in before.stdout, \
        before.stderr
    token = grant(plane, admin, job.name, 2)
    alone = kube_nodes(tmp_path / "alone", plane, token, job.name, job.uid, 2, timeout=8)
    results = launch(alone[:1], 60)  # node 0 alone: it waits for node 1, then exits 4
    assert results[0].exit_code == 4, results[0].stderr[-2000:]
    waiting = status()
    assert waiting.returncode == 3, waiting.stderr
    assert "2 nodes) open: 1 of 2 present; missing: worker 0 (node 1)" in waiting.stdout, \
        waiting.stdout
    made = kube_nodes(tmp_path / "both", plane, token, job.name, job.uid, 2, timeout=60)
    results = launch(made, 90)
    assert [r.exit_code for r in results] == [0, 0], [r.stderr[-2000:] for r in results]
    done = agent("status", "--rendezvous", "kube", "--job", job.name, "--kubeconfig",
                 str(config), "--json")
    assert done.returncode == 0, done.stderr
    view = json.loads(done.stdout)
    assert view["exit_code"] == 0 and [r["state"] for r in view["rendezvous"]] == ["done"]
    assert "complete: table sha256" in view["rendezvous"][0]["line"]
    unasked = agent("status", "--job", job.name, "--kubeconfig", str(config))
    assert unasked.returncode == 2 and "use it with --rendezvous kube" in unasked.stderr
    bad = agent("status", "--rendezvous", "kube", "--job", "Bad_Name", "--kubeconfig",
                str(config))
    assert bad.returncode == 1 and "--job='Bad_Name' is not a vcjob name" in bad.stderr, \
        bad.stderr


def test_doctor_checks_a_jobs_role_binding_and_objects_from_a_kubeconfig(
        tmp_path: Path, plane: Plane, admin: Client) -> None:  # noqa: F811
    """`doctor --rendezvous kube --job J`: a job whose pods met is healthy (0); a Role
    edited to lose `update` fails naming the call and the pod (1); an object under the job's
    label owned by another uid is named (a leftover)."""
    from ascend_node.rendezvous.kube_layout import service_account_name
    from ascend_node.sim.cluster import launch
    from tests.test_kube_rendezvous import ROLES, grant, kube_nodes

    config = kubeconfig(tmp_path, plane)
    job = JobIdentity(NS, "doctor-2", str(uuid.uuid4()))
    token = grant(plane, admin, job.name, 2)
    results = launch(kube_nodes(tmp_path, plane, token, job.name, job.uid, 2, timeout=60), 90)
    assert [r.exit_code for r in results] == [0, 0], [r.stderr[-2000:] for r in results]

    def doctor() -> dict[str, str]:
        done = agent("doctor", "--rendezvous", "kube", "--job", job.name, "--kubeconfig",
                     str(config), "--json")
        view = json.loads(done.stdout)
        assert done.returncode == view["exit_code"], done.stderr
        return {c["id"]: f"{c['status']}: {c['message']}" for c in view["checks"]}

    healthy = doctor()
    assert all(v.startswith("ok") for v in healthy.values()), healthy
    assert "allows every call of the 2 pod(s)" in healthy["kube.role"]

    role = admin.get(ROLES, service_account_name(job.name))
    for rule in role["rules"]:
        rule["verbs"] = [v for v in rule["verbs"] if v != "update"]
    role["rules"] = [r for r in role["rules"] if r["verbs"]]
    admin.replace(ROLES, role)
    leftover = new_object(JobIdentity(NS, job.name, str(uuid.uuid4())), "progress")
    leftover["metadata"]["name"] = "doctor-2-stray"  # the job's label, another uid
    admin.create(CONFIGMAPS, leftover)
    broken = doctor()
    assert broken["kube.role"].startswith("fail: doctor-2 node 0: Role doctor-2-ascend-node "
                                          "does not allow update on configmaps/"), broken
    assert broken["kube.objects"].startswith("warn: ConfigMap doctor-2-stray is not this "
                                             "job's"), broken
    assert broken["kube.binding"].startswith("ok")
    unasked = agent("doctor", "--job", job.name, "--kubeconfig", str(config))
    assert unasked.returncode == 2 and "use it with --rendezvous kube" in unasked.stderr


def test_report_draws_a_jobs_timeline_from_the_pods_summaries_in_the_api(
        tmp_path: Path, plane: Plane, admin: Client) -> None:  # noqa: F811
    """`report --rendezvous kube --job J` (issue 38, item 1): each pod leaves its timeline
    summary in its own slot object when its rendezvous ends (`summary.json` beside
    `slot.json`, within the Role's get/update of its slot), and the operator draws the same
    report as on the volume from a kubeconfig: every pod's row, the table decided; a pod
    whose rendezvous failed shows its exit code and cause."""
    from ascend_node.rendezvous.kube_participant import get_object
    from ascend_node.sim.cluster import launch
    from tests.test_kube_rendezvous import grant, kube_nodes

    config = kubeconfig(tmp_path, plane)
    job = JobIdentity(NS, "report-2", str(uuid.uuid4()))
    token = grant(plane, admin, job.name, 2)

    def report(*extra: str) -> subprocess.CompletedProcess[str]:
        return agent("report", "--rendezvous", "kube", "--job", job.name, "--kubeconfig",
                     str(config), *extra)

    none = report()
    assert none.returncode == 1 and "no rendezvous objects of job report-2" in none.stderr, \
        none.stderr
    alone = kube_nodes(tmp_path / "alone", plane, token, job.name, job.uid, 2, timeout=8)
    results = launch(alone[:1], 60)  # node 0 alone: it waits for node 1, then exits 4
    assert results[0].exit_code == 4, results[0].stderr[-2000:]
    failed = report("--json")
    assert failed.returncode == 0, failed.stderr
    view = json.loads(failed.stdout)
    [summary] = view["summaries"]
    assert (summary["global_index"], summary["state"], summary["exit_code"]) == (0, "failed", 4)
    assert "missing: worker 0 (node 1)" in summary["cause"]

    made = kube_nodes(tmp_path / "both", plane, token, job.name, job.uid, 2, timeout=60)
    results = launch(made, 90)
    assert [r.exit_code for r in results] == [0, 0], [r.stderr[-2000:] for r in results]
    done = report("--json")
    assert done.returncode == 0, done.stderr
    view = json.loads(done.stdout)
    assert sorted((s["global_index"], s["state"]) for s in view["summaries"]) == [
        (0, "table"), (1, "table")]
    attempt = {s["attempt_id"] for s in view["summaries"]}
    assert len(attempt) == 1 and view["decision"] == "table", view
    assert all(s["phases"] for s in view["summaries"])  # the timeline's bars
    text = report()
    assert text.returncode == 0 and "table" in text.stdout, text.stderr
    # the slot still holds the member document node 0 decided on, beside the summary
    slot = get_object(admin, object_name(job.name, "node", 1))
    assert slot is not None and set(slot["data"]) == {"slot.json", "summary.json"}
    unasked = agent("report", "--job", job.name, "--kubeconfig", str(config))
    assert unasked.returncode == 2 and "use it with --rendezvous kube" in unasked.stderr
