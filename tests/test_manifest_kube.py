"""`manifest --rendezvous kube`: the job's ServiceAccount, Role and RoleBinding rendered
before the Job, the pods run under it with the identity the agent needs from the downward
API, and no shared PVC."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import kubernetes_validate
import pytest
import yaml

from ascend_node.errors import UsageError
from ascend_node.jobspec.job import ManifestParams, render_job, render_rbac, render_yaml
from ascend_node.rendezvous.kube_docs import first_denied, needed_calls
from ascend_node.rendezvous.kube_layout import identity_env

BASE: dict[str, Any] = dict(kind="training", name="llama", nodes=4, image="img", pvc=None,
                            run_id="llama", namespace="team-a", rendezvous="kube",
                            command=["train.py"])


def pod_specs(job: dict[str, Any]) -> list[dict[str, Any]]:
    return [t["template"]["spec"] for t in job["spec"]["tasks"]]


def test_kube_renders_rbac_service_account_and_no_pvc() -> None:
    p = ManifestParams(**BASE)
    rbac = render_rbac(p)
    assert [o["kind"] for o in rbac] == ["ServiceAccount", "Role", "RoleBinding"]
    assert all(o["metadata"]["namespace"] == "team-a" for o in rbac)
    for obj in rbac:
        kubernetes_validate.validate(obj, kubernetes_validate.latest_version(), strict=True)
    # the Role grants every call every pod of the job makes (the agent's own check)
    for index in range(4):
        assert first_denied(rbac[1]["rules"], needed_calls("llama", index, 4)) is None
    assert {v for r in rbac[1]["rules"] for v in r["verbs"]} == {
        "create", "get", "update", "list", "watch"}
    job = render_job(p)
    for spec in pod_specs(job):
        assert spec["serviceAccountName"] == "llama-ascend-node" == rbac[0]["metadata"]["name"]
        assert not any("persistentVolumeClaim" in v for v in spec["volumes"])
        env = spec["containers"][0]["env"]
        names = [e["name"] for e in env]
        assert "MODEL_PATH" not in names  # no shared directory at all
        assert {"name": "ASCEND_NODE_RENDEZVOUS", "value": "kube"} in env
        assert all(e in env for e in identity_env())
    docs = list(yaml.safe_load_all(render_yaml(p)))
    assert [d["kind"] for d in docs] == ["ServiceAccount", "Role", "RoleBinding", "Job"]


def test_the_volume_renders_as_before() -> None:
    p = ManifestParams(**{**BASE, "rendezvous": "volume", "pvc": "shared"})
    assert render_rbac(p) == []
    for spec in pod_specs(render_job(p)):
        assert "serviceAccountName" not in spec
        assert {"name": "model", "persistentVolumeClaim": {"claimName": "shared"}} in \
            spec["volumes"]
        assert "ASCEND_NODE_RENDEZVOUS" not in [e["name"] for e in spec["containers"][0]["env"]]


@pytest.mark.parametrize("overrides, bad", [
    (dict(namespace=None), "--rendezvous kube needs --namespace"),
    (dict(rendezvous="volume"), "no --pvc"),
    (dict(rendezvous="nfs"), "--rendezvous 'nfs' is not one of volume, kube"),
    (dict(kind="mindie", command=None), "MindIE needs its weights"),
])
def test_bad_combinations_are_named(overrides: dict[str, Any], bad: str) -> None:
    with pytest.raises(UsageError) as info:
        ManifestParams(**{**BASE, **overrides})
    assert bad in info.value.cause


def test_the_init_container_meets_through_the_api_under_the_job_service_account() -> None:
    """`--init-container --rendezvous kube` (refused until issue 38's bed run): the
    `ranktable` init container gets the rendezvous and the job's identity (it meets the
    peers; the pod's ServiceAccount token is mounted in init containers too), the server
    container only the hand-over, and no claim anywhere."""
    p = ManifestParams(**{**BASE, "kind": "mindie", "command": None, "model_dir": "/mnt/w",
                          "init_container": True, "init_image": "init-img"})
    for spec in pod_specs(render_job(p)):
        assert spec["serviceAccountName"] == "llama-ascend-node"
        assert not any("persistentVolumeClaim" in v for v in spec["volumes"])
        (init,) = spec["initContainers"]
        assert init["command"] == ["ascend-node", "ranktable"]
        assert {"name": "ASCEND_NODE_RENDEZVOUS", "value": "kube"} in init["env"]
        assert all(e in init["env"] for e in identity_env())
        assert "MODEL_PATH" not in [e["name"] for e in init["env"]]
        (server,) = spec["containers"]
        assert "ASCEND_NODE_RENDEZVOUS" not in [e["name"] for e in server["env"]]
        kubernetes_validate.validate({"apiVersion": "v1", "kind": "Pod", "metadata": {
            "name": "x"}, "spec": spec}, kubernetes_validate.latest_version(), strict=True)


def test_the_command_line_renders_a_list_with_the_rbac_objects() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "ascend_node", "manifest", "--kind", "training", "--name", "llama",
         "--nodes", "2", "--rendezvous", "kube", "--namespace", "team-a", "--json", "--",
         "train.py"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    assert [i["kind"] for i in doc["items"]] == ["ServiceAccount", "Role", "RoleBinding", "Job"]
    refused = subprocess.run(
        [sys.executable, "-m", "ascend_node", "manifest", "--kind", "mindie-pd",
         "--rendezvous", "kube", "--namespace", "team-a"], capture_output=True, text=True,
        timeout=60)
    # a PD service through the API is rendered (below); without weights it is refused
    assert refused.returncode == 2 and "MindIE needs its weights" in refused.stderr


# ------------------------------------------------------------------ a PD service (issue 38)

def test_a_pd_service_through_the_api_renders_its_role_and_no_pvc() -> None:
    """`manifest --kind mindie-pd --rendezvous kube`: the Role names every instance's
    objects and the service pods' (each pod's own calls pass the agent's check), every pod
    runs under the ServiceAccount with the job's identity, no PVC, and the controller reads
    the global table from the state directory its table writer shares with it."""
    from ascend_node.jobspec.pd_job import (
        PdShape,
        render_pd_configmap,
        render_pd_job,
        render_pd_rbac,
    )
    from ascend_node.rendezvous.kube_layout import JobIdentity, service_object_name

    shape = PdShape(2, 1, 2, 1)
    p = ManifestParams(kind="mindie", name="svc", nodes=2, image="img", pvc=None,
                       run_id="svc", namespace="team-a", rendezvous="kube",
                       model_dir="/models/x")
    rbac = render_pd_rbac(p, shape)
    assert [o["kind"] for o in rbac] == ["ServiceAccount", "Role", "RoleBinding"]
    for obj in rbac:
        kubernetes_validate.validate(obj, kubernetes_validate.latest_version(), strict=True)
    rules = rbac[1]["rules"]
    for task, pods in shape.tasks():
        scope = JobIdentity("team-a", "svc", "", task).scope
        for index in range(pods):
            assert first_denied(rules, needed_calls(scope, index, pods)) is None, (task, index)
    named = [n for r in rules for n in r.get("resourceNames", [])]
    assert service_object_name("svc", "coordinator", 0) in named
    assert service_object_name("svc", "controller", 0) in named
    assert not any(n.startswith("svc-rdzv-") for n in named)  # no plain job's objects
    job = render_pd_job(p, shape)
    for spec in pod_specs(job):
        assert spec["serviceAccountName"] == "svc-ascend-node"
        assert not any("persistentVolumeClaim" in v for v in spec["volumes"])
        for c in spec.get("initContainers", []) + spec["containers"]:
            env = c["env"]
            assert {"name": "ASCEND_NODE_RENDEZVOUS", "value": "kube"} in env, c["name"]
            assert all(e in env for e in identity_env())
            assert "MODEL_PATH" not in [e["name"] for e in env]
    controller = json.loads(render_pd_configmap(p, shape)["data"]["ms_controller.json"])
    assert controller["global_rank_table_file_path"] == \
        "/run/ascend-node/pd/global_ranktable.json"


def test_a_pd_service_through_the_api_is_rendered_by_the_cli() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "ascend_node", "manifest", "--kind", "mindie-pd", "--name",
         "svc", "--image", "img", "--model-dir", "/models/x", "--rendezvous", "kube",
         "--namespace", "team-a"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    kinds = [d["kind"] for d in yaml.safe_load_all(done.stdout)]
    assert kinds == ["ServiceAccount", "Role", "RoleBinding", "ConfigMap", "Job"]
