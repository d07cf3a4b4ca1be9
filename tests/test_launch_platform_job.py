"""The platform's requests laid over the Job `manifest` renders (issue 39, Deliver 1: the Job
launch creates holds what the platform asked), refusing what would collide."""

from __future__ import annotations

from typing import Any

import pytest

from ascend_node.errors import ConfigError
from ascend_node.handoff.mindie_startup import DEFAULT_MIES_INSTALL_PATH
from ascend_node.jobspec.job import ManifestParams, render_job
from ascend_node.jobspec.pd_job import PdShape, render_pd_job
from ascend_node.launch.platform_env import FormFields, PlatformRequest, read_request
from ascend_node.launch.platform_job import overlay

ENV = {
    "KFJ_RUN_ID": "run-1", "KFJ_TASK_NAME": "train", "KFJ_CREATOR": "alice",
    "KFJ_PIPELINE_NAME": "llama_finetune", "KFJ_TASK_IMAGES": "registry/mf:1",
    "KFJ_TASK_VOLUME_MOUNT": "ws(pvc):/mnt,10.0.0.5/data(nfs):/data,cfg(configmap):/etc/cfg",
    "KFJ_TASK_RESOURCE_CPU": "32", "KFJ_TASK_RESOURCE_MEMORY": "256Gi",
    "KFJ_TASK_NODE_SELECTOR": "train=true", "HUBSECRET": "hubsecret",
    "IMAGE_PULL_POLICY": "Always", "DEFAULT_POD_RESOURCES": '{"ephemeral-storage": "20Gi"}',
}


def rendered(req: PlatformRequest) -> dict[str, Any]:
    return render_job(ManifestParams(**req.manifest, pvc=None, rendezvous="kube",
                                     namespace="ns"))


def test_every_pod_gets_what_the_platform_asked() -> None:
    req = read_request(ENV, FormFields(num_worker=3, command="python3 t.py",
                                       working_dir="/mnt/alice"))
    job = overlay(rendered(req), req)
    assert job["metadata"]["labels"]["pipeline-name"] == "llama_finetune"
    assert job["metadata"]["labels"]["run-id"] == "run-1"
    for task in job["spec"]["tasks"]:
        spec = task["template"]["spec"]
        server = spec["containers"][0]
        assert {"name": "ws", "persistentVolumeClaim": {"claimName": "ws"}} in spec["volumes"]
        assert {"name": "10-0-0-5-data", "nfs": {"server": "10.0.0.5", "path": "/data"}} \
            in spec["volumes"]
        assert {"name": "ws", "mountPath": "/mnt/alice", "subPath": "alice"} \
            in server["volumeMounts"]
        assert {"name": "cfg", "mountPath": "/etc/cfg"} in server["volumeMounts"]
        assert spec["nodeSelector"] == {"train": "true"}
        assert spec["imagePullSecrets"] == [{"name": "hubsecret"}]
        assert server["imagePullPolicy"] == "Always"
        assert server["workingDir"] == "/mnt/alice"
        assert server["resources"]["requests"]["cpu"] == "32"
        assert server["resources"]["limits"]["memory"] == "256Gi"
        assert server["resources"]["limits"]["ephemeral-storage"] == "20Gi"
        assert server["resources"]["limits"]["huawei.com/Ascend910"] == "8"
        assert task["template"]["metadata"]["labels"]["pipeline-name"] == "llama_finetune"


def test_working_dir_is_the_commands_and_the_motor_daemons_keep_their_own() -> None:
    """A PD service: --working_dir for every prefill and decode pod (the user's command);
    the coordinator and controller keep MindIE-Motor's install directory, against which it
    resolves its configuration's relative paths."""
    req = read_request(ENV, FormFields(command="x", working_dir="/mnt/alice"))
    job = overlay(render_pd_job(ManifestParams(kind="mindie", name="j", nodes=1, image="img",
                                               pvc="pvc", run_id="r1"), PdShape()), req)
    dirs = {t["name"]: t["template"]["spec"]["containers"][0]["workingDir"]
            for t in job["spec"]["tasks"]}
    assert dirs == {"coordinator": DEFAULT_MIES_INSTALL_PATH,
                    "controller": DEFAULT_MIES_INSTALL_PATH,
                    "prefill-0": "/mnt/alice", "decode-0": "/mnt/alice"}


def test_the_rendered_job_is_not_changed_in_place() -> None:
    req = read_request(ENV, FormFields(num_worker=2, command="x"))
    job = rendered(req)
    before = repr(job)
    overlay(job, req)
    assert repr(job) == before


@pytest.mark.parametrize("extra, cause", [
    ({"KFJ_TASK_VOLUME_MOUNT": "x(pvc-share):/run/ascend-node"},
     "KFJ_TASK_VOLUME_MOUNT mounts /run/ascend-node is where the pod mounts the agent's state dir"),
    ({"KFJ_TASK_VOLUME_MOUNT": "x(pvc-share):/usr/local/Ascend/driver/lib"},
     "KFJ_TASK_VOLUME_MOUNT mounts /usr/local/Ascend/driver/lib is inside /usr/local/Ascend/driver"),
    ({"KFJ_TASK_VOLUME_MOUNT": "x(pvc-share):/etc"},
     "KFJ_TASK_VOLUME_MOUNT mounts /etc is a system directory of the image"),
    ({"KFJ_TASK_VOLUME_MOUNT": "ascend-driver(pvc-share):/mnt/d"},
     "KFJ_TASK_VOLUME_MOUNT mounts volume 'ascend-driver', a name the Job already uses"),
    ({"DEFAULT_POD_RESOURCES": '{"huawei.com/Ascend910": "1"}'},
     "DEFAULT_POD_RESOURCES (or KFJ_TASK_RESOURCE_*) sets huawei.com/Ascend910, which the Job "
     "already sets"),
])
def test_a_collision_with_the_job_is_a_bad_environment_value(extra: dict[str, str],
                                                              cause: str) -> None:
    req = read_request({**ENV, **extra}, FormFields(num_worker=2, command="x"))
    with pytest.raises(ConfigError) as info:
        overlay(rendered(req), req)
    assert info.value.cause.startswith(cause), info.value.cause
    assert info.value.exit_code == 1 and info.value.hint


def test_a_node_selector_key_the_job_selects_otherwise_is_refused() -> None:
    req = read_request({**ENV, "KFJ_TASK_NODE_SELECTOR": "accelerator-type=x"},
                       FormFields(num_worker=2, command="x"))
    job = render_job(ManifestParams(**{**req.manifest, "npus_per_node": 16}, pvc=None,
                                    rendezvous="kube", namespace="ns", a3=True))
    with pytest.raises(ConfigError) as info:
        overlay(job, req)
    assert info.value.cause == ("KFJ_TASK_NODE_SELECTOR gives accelerator-type=x, but the Job "
                                "selects accelerator-type=module-a3-16-super-pod")
