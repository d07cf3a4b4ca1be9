"""The platform's way of asking (issue 39, Deliver 1): cube-studio's `KFJ_*` environment and
the seed's form fields read into `manifest`'s options, every bad value named with its exit
code. Syntaxes: docs/launch.md (cube-studio at 852a7bd2)."""

from __future__ import annotations

import pytest

from ascend_node.errors import ConfigError, UsageError
from ascend_node.jobspec.job import ManifestParams, render_job
from ascend_node.launch.platform_env import (
    FormFields,
    Volume,
    job_name,
    parse_accelerators,
    parse_node_selector,
    parse_volume_mounts,
    read_request,
)

CUBE_ENV = {
    "KFJ_NAMESPACE": "pipeline",
    "KFJ_RUN_ID": "run-20261205-7f3a",
    "KFJ_PIPELINE_ID": "42",
    "KFJ_PIPELINE_NAME": "llama_finetune",
    "KFJ_TASK_ID": "7",
    "KFJ_TASK_NAME": "train_llama",
    "KFJ_CREATOR": "alice",
    "KFJ_RUNNER": "bob",
    "KFJ_TASK_PROJECT_NAME": "nlp",
    "KFJ_TASK_IMAGES": "registry/mindformers:1.3",
    "KFJ_TASK_VOLUME_MOUNT": "kubeflow-user-workspace(pvc):/mnt,kubeflow-archives(pvc-share):/archives",
    "KFJ_TASK_RESOURCE_CPU": "32",
    "KFJ_TASK_RESOURCE_MEMORY": "256G",
    "KFJ_TASK_RESOURCE_GPU": "8(npu,910b)",
    "KFJ_TASK_NODE_SELECTOR": "cpu=true,train=true",
    "GPU_RESOURCE_NAME": "huawei.com/Ascend910",
    "HUBSECRET": "hubsecret,team-registry",
    "DEFAULT_POD_RESOURCES": '{"ephemeral-storage": "20Gi"}',
}


def test_a_cube_studio_step_becomes_manifest_options_and_the_rest() -> None:
    form = FormFields(num_worker=4, image=None, working_dir="/mnt/alice/llama",
                      command="python3 run_mindformer.py --config c.yaml")
    req = read_request(CUBE_ENV, form)
    assert req.manifest == {
        "kind": "training", "run_id": "run-20261205-7f3a", "namespace": "pipeline",
        "name": job_name("train_llama", "run-20261205-7f3a"), "nodes": 4,
        "image": "registry/mindformers:1.3",
        "command": ["bash", "-c", "python3 run_mindformer.py --config c.yaml"],
        "npus_per_node": 8, "npu_resource": "huawei.com/Ascend910",
    }
    assert req.node_selector == {"cpu": "true", "train": "true", "gpu-type": "910b"}
    assert req.resources == {"cpu": "32", "memory": "256G", "ephemeral-storage": "20Gi"}
    assert req.pull_secrets == ("hubsecret", "team-registry")
    assert req.working_dir == "/mnt/alice/llama"
    assert req.volumes == (
        Volume("kubeflow-user-workspace", "pvc", "kubeflow-user-workspace", "/mnt/alice",
               sub_path="alice"),
        Volume("kubeflow-archives", "pvc-share", "kubeflow-archives", "/archives"),
    )
    assert req.labels["pipeline-name"] == "llama_finetune"
    assert req.annotations["project"] == "nlp"
    # the options are exactly what manifest takes: the Job renders from them
    job = render_job(ManifestParams(**req.manifest, pvc=None, rendezvous="kube"))
    assert job["metadata"]["labels"]["run-id"] == "run-20261205-7f3a"


def test_the_form_image_wins_over_kfj_task_images() -> None:
    req = read_request(CUBE_ENV, FormFields(image="mine:2"))
    assert req.manifest["image"] == "mine:2"


@pytest.mark.parametrize("task, run, want", [
    ("train_llama", None, "train-llama"),
    ("Train Llama!", None, "train-llama"),
    ("7-step", None, "job-7-step"),
    (None, None, "job"),
    ("x" * 80, "r1", "x" * 33 + "-" + job_name(None, "r1")[-6:]),
])
def test_the_job_name_is_a_dns_label_stable_for_a_run(task: str, run: str, want: str) -> None:
    got = job_name(task, run)
    assert got == want
    assert len(got) <= 40


def test_two_runs_of_one_task_get_two_names_and_a_retry_the_same() -> None:
    assert job_name("t", "r1") == job_name("t", "r1") != job_name("t", "r2")


@pytest.mark.parametrize("text, want", [
    ("8", (8, None)), ("8(npu)", (8, None)), ("8\uff08npu\uff09", (8, None)),
    ("8(910b)", (8, "910b")), ("16(ascend,910c)", (16, "910c")), ("8\uff08npu\uff0c910b\uff09", (8, "910b")),
    (" 4 ", (4, None)),
])
def test_accelerator_syntax(text: str, want: tuple[int, str]) -> None:
    assert parse_accelerators(text) == want


@pytest.mark.parametrize("text, cause", [
    ("eight", "KFJ_TASK_RESOURCE_GPU='eight' is not COUNT, COUNT(VENDOR), COUNT(TYPE) or COUNT(VENDOR,TYPE)"),
    ("8(nvidia)", "KFJ_TASK_RESOURCE_GPU='8(nvidia)' asks for nvidia accelerators; ascend-node runs Ascend NPU jobs"),
    ("8(nvidia,v100)", "KFJ_TASK_RESOURCE_GPU='8(nvidia,v100)' asks for nvidia accelerators; ascend-node runs Ascend NPU jobs"),
    ("-1", "KFJ_TASK_RESOURCE_GPU='-1' asks for a privileged container; the agent needs none (the NPUs come from the device plugin)"),
    ("0", "KFJ_TASK_RESOURCE_GPU='0' is out of range: NPUs per pod are 1-16"),
    ("32", "KFJ_TASK_RESOURCE_GPU='32' is out of range: NPUs per pod are 1-16"),
    ("8()", "KFJ_TASK_RESOURCE_GPU='8()' has an empty or over-long (...) part"),
    ("8(a,b,c)", "KFJ_TASK_RESOURCE_GPU='8(a,b,c)' has an empty or over-long (...) part"),
    ("8(npu,9 1)", None),  # spaces are dropped: type '91'
])
def test_bad_accelerator_values_are_named(text: str, cause: str) -> None:
    if cause is None:
        assert parse_accelerators(text) == (8, "91")
        return
    with pytest.raises(ConfigError) as info:
        parse_accelerators(text)
    assert info.value.cause == cause
    assert info.value.exit_code == 1 and info.value.hint


def test_node_selector_separators() -> None:
    assert parse_node_selector("a=1;b=2\nc=3\td=4,") == {"a": "1", "b": "2", "c": "3", "d": "4"}
    assert parse_node_selector("example.com/zone=z1") == {"example.com/zone": "z1"}


@pytest.mark.parametrize("text, part", [
    ("cpu", "has 'cpu', not a label key=value pair"),
    ("cpu=tr ue", "has 'cpu=tr ue', not a label key=value pair"),
    ("a=1,a=2", "gives 'a' two values ('1', '2')"),
])
def test_bad_node_selectors_are_named(text: str, part: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_node_selector(text)
    assert info.value.cause == f"KFJ_TASK_NODE_SELECTOR={text!r} {part}"


def test_volume_kinds() -> None:
    vols, skipped = parse_volume_mounts(
        "ws(pvc):/mnt;shared(pvc-share):/shared,10.0.0.5/exports/data(nfs):/data,"
        "/data/k8s(hostpath):/k8s,cfg(configmap):/etc/cfg,tok(secret):/etc/tok", "alice")
    assert vols == (
        Volume("ws", "pvc", "ws", "/mnt/alice", sub_path="alice"),
        Volume("shared", "pvc-share", "shared", "/shared"),
        Volume("10-0-0-5-exports-data", "nfs", "/exports/data", "/data", server="10.0.0.5"),
        Volume("data-k8s", "hostpath", "/data/k8s", "/k8s"),
        Volume("cfg", "configmap", "cfg", "/etc/cfg"),
        Volume("tok", "secret", "tok", "/etc/tok"),
    )
    assert skipped == []


def test_a_repeated_source_or_mount_is_skipped_and_said() -> None:
    vols, skipped = parse_volume_mounts("a(pvc-share):/x,a(pvc-share):/y,b(pvc-share):/x", None)
    assert [v.name for v in vols] == ["a"]
    assert skipped == [
        "KFJ_TASK_VOLUME_MOUNT: 'a(pvc-share):/y' skipped: its source or mount came earlier",
        "KFJ_TASK_VOLUME_MOUNT: 'b(pvc-share):/x' skipped: its source or mount came earlier",
    ]


@pytest.mark.parametrize("text, creator, start", [
    ("ws:/mnt", "a", "KFJ_TASK_VOLUME_MOUNT='ws:/mnt' has 'ws:/mnt', not SOURCE(KIND):MOUNT"),
    ("ws(s3):/mnt", "a", "KFJ_TASK_VOLUME_MOUNT='ws(s3):/mnt' has 'ws(s3):/mnt' of kind 's3'"),
    ("ws(storage):/mnt", "a", "KFJ_TASK_VOLUME_MOUNT='ws(storage):/mnt' has 'ws(storage):/mnt' of kind 'storage'"),
    ("ws(pvc):mnt", "a", "KFJ_TASK_VOLUME_MOUNT='ws(pvc):mnt' has 'ws(pvc):mnt': mount 'mnt'"),
    ("ws(pvc):/a/../etc", "a", "KFJ_TASK_VOLUME_MOUNT='ws(pvc):/a/../etc' has"),
    ("ws(pvc):/mnt", None, "KFJ_TASK_VOLUME_MOUNT has 'ws(pvc):/mnt' (a per-user folder of the claim) but KFJ_CREATOR=None"),
    ("Ws_1(pvc-share):/m", "a", "KFJ_TASK_VOLUME_MOUNT='Ws_1(pvc-share):/m' has 'Ws_1(pvc-share):/m': 'Ws_1' is not a pvc-share name"),
    ("server/x(nfs):/m", "a", "KFJ_TASK_VOLUME_MOUNT='server/x(nfs):/m' has 'server/x(nfs):/m': not IP/PATH(nfs)"),
    ("data(hostpath):/m", "a", "KFJ_TASK_VOLUME_MOUNT='data(hostpath):/m' has 'data(hostpath):/m': host path 'data'"),
])
def test_bad_volume_mounts_are_named(text: str, creator: str, start: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_volume_mounts(text, creator)
    assert info.value.cause.startswith(start)
    assert info.value.hint


@pytest.mark.parametrize("var, value, cause", [
    ("KFJ_RUN_ID", "../x", "run id '../x' (from environment KFJ_RUN_ID) is not a safe file-name part"),
    ("KFJ_NAMESPACE", "Team_A", "KFJ_NAMESPACE='Team_A' is not a namespace name"),
    ("KFJ_TASK_RESOURCE_CPU", "lots", "KFJ_TASK_RESOURCE_CPU='lots' is not a Kubernetes quantity"),
    ("KFJ_TASK_RESOURCE_MEMORY", "-4G", "KFJ_TASK_RESOURCE_MEMORY='-4G' is not a Kubernetes quantity"),
    ("KFJ_TASK_RESOURCE_MEMORY", "4GB", "KFJ_TASK_RESOURCE_MEMORY='4GB' is not a Kubernetes quantity"),
    ("KFJ_TASK_IMAGES", "a b", "KFJ_TASK_IMAGES 'a b' is not one image reference"),
    ("GPU_RESOURCE_NAME", "huawei.com/Ascend 910", "GPU_RESOURCE_NAME='huawei.com/Ascend 910' is not an extended resource name"),
    ("HUBSECRET", "hub,Bad_Secret", "HUBSECRET='hub,Bad_Secret' names 'Bad_Secret', not a Secret name"),
    ("DEFAULT_POD_RESOURCES", "{cpu: 1}", "DEFAULT_POD_RESOURCES='{cpu: 1}' is not JSON (Expecting property name enclosed in double quotes)"),
    ("DEFAULT_POD_RESOURCES", "[1]", "DEFAULT_POD_RESOURCES='[1]' is not a JSON object"),
    ("DEFAULT_POD_RESOURCES", '{"cpu": true}', "DEFAULT_POD_RESOURCES='{\"cpu\": true}' gives 'cpu' the value True, not a quantity"),
    ("DEFAULT_POD_RESOURCES", '{"cpu": "x"}', "DEFAULT_POD_RESOURCES='{\"cpu\": \"x\"}' gives 'cpu' the value 'x', not a quantity"),
    ("IMAGE_PULL_POLICY", "always", "IMAGE_PULL_POLICY='always' is not a pull policy"),
])
def test_a_bad_environment_value_exits_1_naming_variable_and_value(var: str, value: str,
                                                                    cause: str) -> None:
    env = dict(CUBE_ENV, **{var: value})
    with pytest.raises(ConfigError) as info:
        read_request(env, FormFields())
    assert not isinstance(info.value, UsageError)
    assert info.value.exit_code == 1
    assert info.value.cause.startswith(cause), info.value.cause
    assert info.value.hint


@pytest.mark.parametrize("form, cause", [
    (FormFields(num_worker=0), "--num_worker 0 is out of range"),
    (FormFields(image="a b"), "--image 'a b' is not one image reference"),
    (FormFields(command="  "), "--command '' is empty"),
    (FormFields(working_dir="mnt"), "--working_dir 'mnt' is not an absolute path"),
    (FormFields(working_dir="/mnt/../etc"), "--working_dir '/mnt/../etc' is not an absolute path"),
])
def test_a_bad_form_field_exits_2_naming_the_flag(form: FormFields, cause: str) -> None:
    with pytest.raises(UsageError) as info:
        read_request(CUBE_ENV, form)
    assert info.value.exit_code == 2
    assert info.value.cause == cause
    assert info.value.hint


def test_an_empty_variable_is_not_injected() -> None:
    """cube-studio renders an unset template variable as an empty string."""
    env = {"KFJ_TASK_RESOURCE_GPU": "", "KFJ_TASK_VOLUME_MOUNT": " ", "HUBSECRET": ""}
    req = read_request(env, FormFields())
    assert req.volumes == () and req.pull_secrets == () and "npus_per_node" not in req.manifest


def test_rdma_is_asked_only_with_a_count() -> None:
    env = {"RDMA_RESOURCE_NAME": "rdma/hca"}
    assert "rdma_resource" not in read_request(env, FormFields()).manifest
    env["KFJ_TASK_RESOURCE_RDMA"] = "1"
    assert read_request(env, FormFields()).manifest["rdma_resource"] == "rdma/hca"
