"""An earlier run's Jobs: found by the label `manifest` renders, chosen for deletion by a
pure function (issue 39, "Before creating")."""

from __future__ import annotations

from typing import Any, Optional

import pytest

from ascend_node.jobspec.job import ManifestParams, render_job
from ascend_node.jobspec.skeleton import RUN_ID_LABEL, run_id_label_value
from ascend_node.launch.earlier_run import pods_left, run_selector, to_delete
from ascend_node.launch.submit import update_for
from ascend_node.rendezvous.kube_layout import rbac_objects


def _job(name: str, run_label: Optional[str], uid: str = "u", phase: str = "",
         managed: bool = True, deleting: bool = False, ns: str = "kubeflow") -> dict[str, Any]:
    labels: dict[str, str] = {}
    if run_label is not None:
        labels[RUN_ID_LABEL] = run_label
    if managed:
        labels["app.kubernetes.io/managed-by"] = "ascend-node"
    meta: dict[str, Any] = {"name": name, "namespace": ns, "uid": uid, "labels": labels}
    if deleting:
        meta["deletionTimestamp"] = "2026-12-05T09:00:00Z"
    job: dict[str, Any] = {"metadata": meta}
    if phase:
        job["status"] = {"state": {"phase": phase}}
    return job


@pytest.mark.parametrize("run_id, value", [
    ("run-7f3a", "run-7f3a"),
    ("a" * 63, "a" * 63),
    ("a" * 64, None),
    ("run.", None),       # ends with '.': not a label value
    ("run_", None),
])
def test_the_run_id_label_value_is_the_run_id_or_a_stable_hash(run_id: str,
                                                                value: Optional[str]) -> None:
    got = run_id_label_value(run_id)
    if value == run_id:
        assert got == run_id
    else:
        assert got.startswith("h-") and len(got) == 22
        assert got == run_id_label_value(run_id)  # stable: the selector finds it again
        assert got != run_id_label_value(run_id + "x")


def test_the_job_and_every_pod_template_carry_the_run_id_label() -> None:
    p = ManifestParams(kind="training", name="train", nodes=3, image="i:1", pvc="data",
                       run_id="run-42", command=["python", "t.py"])
    job = render_job(p)
    assert job["metadata"]["labels"][RUN_ID_LABEL] == "run-42"
    for task in job["spec"]["tasks"]:
        assert task["template"]["metadata"]["labels"][RUN_ID_LABEL] == "run-42"
    # what launch selects by matches what manifest rendered
    labels = job["metadata"]["labels"]
    for term in run_selector("run-42").split(","):
        key, value = term.split("=")
        assert labels[key] == value


def test_the_selector_names_the_run_and_ascend_nodes_own_jobs() -> None:
    assert run_selector("run-42") == \
        "run-id=run-42,app.kubernetes.io/managed-by=ascend-node"


CASES = [
    # (jobs, new name, created uid, expected (name, reason start))
    ([], "t-1", None, []),
    ([_job("t-1", "r1", phase="Running")], "t-1", None,
     [("t-1", "Running", "an earlier attempt of run 'r1' under the new Job's name")]),
    ([_job("old", "r1", phase="Completed"), _job("t-1", "r1", phase="Failed")], "t-1", None,
     [("old", "Completed", "an earlier attempt of run 'r1'"),
      ("t-1", "Failed", "an earlier attempt of run 'r1' under the new Job's name")]),
    # another run's Job, or one that some other tool labelled, is never ours to delete
    ([_job("x", "r2"), _job("y", "r1", managed=False), _job("z", None)], "t-1", None, []),
    # the Job this launch created is not an earlier run
    ([_job("t-1", "r1", uid="mine")], "t-1", "mine", []),
    ([_job("t-1", "r1", uid="old")], "t-1", "mine",
     [("t-1", "", "an earlier attempt of run 'r1' under the new Job's name")]),
    ([_job("t-0", "r1", deleting=True)], "t-1", None,
     [("t-0", "", "already being deleted; waiting for it and its pods to go")]),
]


@pytest.mark.parametrize("jobs, new, created, want", CASES)
def test_what_to_delete_from_a_job_list(jobs: list[dict[str, Any]], new: str,
                                        created: Optional[str],
                                        want: list[tuple[str, str, str]]) -> None:
    got = to_delete(jobs, "r1", new, created)
    assert [(d.name, d.phase, d.reason) for d in got] == want


def test_a_long_run_id_selects_by_its_hash() -> None:
    run = "r" * 100
    jobs = [_job("t", run_id_label_value(run))]
    assert [d.name for d in to_delete(jobs, run, "t")] == ["t"]


def test_the_deletion_line_says_what_and_why() -> None:
    (d,) = to_delete([_job("t-1", "r1", phase="Running")], "r1", "t-2")
    assert d.line() == "delete job kubeflow/t-1 (Running): an earlier attempt of run 'r1'"


def test_pods_left_are_those_of_a_deleted_job() -> None:
    deleted = to_delete([_job("t-1", "r1")], "r1", "t-1")

    def pod(name: str, job: str, ns: str = "kubeflow") -> dict[str, Any]:
        return {"metadata": {"name": name, "namespace": ns,
                             "labels": {"volcano.sh/job-name": job}}}

    pods = [pod("t-1-worker-1", "t-1"), pod("t-1-master-0", "t-1"), pod("other-0", "other"),
            pod("t-1-worker-0", "t-1", ns="elsewhere")]
    assert pods_left(pods, deleted) == ["t-1-master-0", "t-1-worker-1"]
    assert pods_left([], deleted) == []


def _role(rules: list[dict[str, Any]], rv: str = "7") -> dict[str, Any]:
    return {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
            "metadata": {"name": "j-rdzv", "namespace": "ns", "resourceVersion": rv},
            "rules": rules}


TWO = rbac_objects("j", "ns", 2)[1]
THREE = rbac_objects("j", "ns", 3)[1]
PD_MAP = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "pd", "namespace": "ns"},
          "data": {"ms_controller.json": "{}"}}


@pytest.mark.parametrize(("existing", "wanted", "updated"), [
    # a retry with the same shape: the Role the earlier launch made is reused as it is
    (_role(TWO["rules"]), TWO, False),
    # another --num_worker: the rules name other nodes' objects, so the Role is updated
    (_role(TWO["rules"]), THREE, True),
    (_role(THREE["rules"]), TWO, True),
    # a PD ConfigMap with the service's earlier config, then the same one
    ({**PD_MAP, "data": {"ms_controller.json": '{"old": 1}'}, "metadata": {"name": "pd",
      "resourceVersion": "3"}}, PD_MAP, True),
    ({**PD_MAP, "metadata": {"name": "pd", "resourceVersion": "3"}}, PD_MAP, False),
    # kinds whose content follows from the name alone, or must be kept (a Secret's key)
    ({"kind": "Secret", "metadata": {"name": "k"}, "data": {"key": "b2xk"}},
     {"kind": "Secret", "metadata": {"name": "k"}, "data": {"key": "bmV3"}}, False),
    ({"kind": "ServiceAccount", "metadata": {"name": "sa"}},
     {"kind": "ServiceAccount", "metadata": {"name": "sa"}}, False),
])
def test_a_retry_updates_only_a_role_or_configmap_that_differs(
        existing: dict[str, Any], wanted: dict[str, Any], updated: bool) -> None:
    update = update_for(existing, wanted)
    assert (update is not None) == updated
    if update is not None:  # the wanted object, written at the version it was read at
        assert update["metadata"]["resourceVersion"] == existing["metadata"]["resourceVersion"]
        assert {k: v for k, v in update.items() if k != "metadata"} == \
            {k: v for k, v in wanted.items() if k != "metadata"}
        assert update["metadata"]["name"] == wanted["metadata"]["name"]
