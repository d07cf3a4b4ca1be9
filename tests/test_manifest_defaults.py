"""What `ascend-node manifest` renders so that a job serves on defaults (issue 26): plain http
unless `--https` names a Secret, the model where it is, a non-root user, the init-container
variant, and training through the agent's own launcher. Each pod template validates against
Kubernetes' own schemas (kubernetes-validate bundles them) and the Job against Volcano's CRD.
"""

from __future__ import annotations

import json
import os
import shlex
from typing import Any

import kubernetes_validate
import pytest
import yaml
from typer.testing import CliRunner

from ascend_node.cli import app
from ascend_node.errors import UsageError
from ascend_node.handoff.launchers import check_msrun_args
from ascend_node.handoff.mindie_config import patch_config
from ascend_node.handoff.mindie_startup import (
    FileInfo,
    StartupFacts,
    startup_problems,
)
from ascend_node.jobspec.job import (
    TLS_HOME,
    TLS_ITEMS,
    ManifestParams,
    render_job,
)
from tests.test_manifest import _errors, validator  # noqa: F401  (the CRD fixture)

SHIPPED = os.path.join(os.path.dirname(__file__), "..", "fixtures", "mindie", "config.json")
K8S_VERSIONS = ("1.28", kubernetes_validate.latest_version())


def job(kind: str = "mindie", **kw: Any) -> dict[str, Any]:
    values: dict[str, Any] = {"name": "j", "nodes": 2, "image": "img", "pvc": "pvc",
                              "run_id": "r1"}
    if kind == "training":
        values["command"] = ["run_mindformer.py", "--config", "/mnt/model/c.yaml"]
    return render_job(ManifestParams(kind=kind, **{**values, **kw}))  # type: ignore[arg-type]


def pods(doc: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Each task's template as the Pod Volcano creates from it."""
    return {t["name"]: {"apiVersion": "v1", "kind": "Pod",
                        "metadata": {"name": f"j-{t['name']}-0", **t["template"]["metadata"]},
                        "spec": t["template"]["spec"]} for t in doc["spec"]["tasks"]}


def env_of(container: dict[str, Any]) -> dict[str, Any]:
    return {e["name"]: e.get("value") for e in container["env"]}


VARIANTS = {
    "mindie-defaults": dict(kind="mindie"),
    "mindie-https": dict(kind="mindie", https=True, tls_secret="mindie-certs"),
    "mindie-nonroot-subdir": dict(kind="mindie", run_as_user=1001,
                                  model_dir="/mnt/model/qwen2-72b", model_name="qwen2-72b"),
    "mindie-weights-claim": dict(kind="mindie", model_pvc="weights", model_dir="/mnt/weights"),
    "mindie-init": dict(kind="mindie", init_container=True, run_as_user=1001),
    "training-msrun": dict(kind="training", msrun_log_dir="/mnt/model/log", bind_core=True),
    "training-torch": dict(kind="training", launcher="torch", master_port=29600),
    "training-one-node-root": dict(kind="training", nodes=1, run_as_user=0),
    "mindie-kube-no-pvc": dict(kind="mindie", rendezvous="kube", pvc=None, namespace="team-a",
                               model_pvc="weights", model_dir="/mnt/weights"),
    "training-kube-no-pvc": dict(kind="training", rendezvous="kube", pvc=None,
                                 namespace="team-a"),
}


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_every_variant_is_a_valid_job_and_valid_pods(validator: Any, variant: str) -> None:  # noqa: F811
    kw = dict(VARIANTS[variant])
    doc = job(kw.pop("kind"), **kw)
    assert _errors(validator, doc) == []
    for pod in pods(doc).values():
        for version in K8S_VERSIONS:
            kubernetes_validate.validate(pod, version, strict=True)


def test_kubernetes_validate_would_catch_a_broken_pod() -> None:
    pod = pods(job())["master"]
    pod["spec"]["containers"][0]["securityContext"] = {"runAsUser": "1001"}
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(pod, K8S_VERSIONS[-1], strict=True)


# --- TLS -------------------------------------------------------------------------------

def test_defaults_serve_plain_http() -> None:
    for pod in pods(job()).values():
        (c,) = pod["spec"]["containers"]
        assert env_of(c)["ASCEND_NODE_HTTPS"] == "0"
        assert "ASCEND_NODE_TLS_CERTS" not in env_of(c)
        assert not any(v.get("secret") for v in pod["spec"]["volumes"])


def test_https_mounts_the_secret_where_mindies_start_up_rules_look() -> None:
    """The 16 files, each a subPath mount (a regular file, not the Secret's symlink), make
    MindIE's shipped config.json pass every TLS rule with https and inter-node TLS on."""
    for pod in pods(job(https=True, tls_secret="certs")).values():
        (c,) = pod["spec"]["containers"]
        env = env_of(c)
        assert (env["ASCEND_NODE_HTTPS"], env["ASCEND_NODE_TLS_CERTS"]) == ("1", "1")
        (vol,) = [v for v in pod["spec"]["volumes"] if v["name"] == "mindie-tls"]
        assert vol["secret"]["secretName"] == "certs"
        assert {i["key"] for i in vol["secret"]["items"]} == {k for k, _ in TLS_ITEMS}
        mounted = {m["mountPath"] for m in c["volumeMounts"] if m["name"] == "mindie-tls"}
        assert all(m.get("subPath") for m in c["volumeMounts"] if m["name"] == "mindie-tls")
    assert len(mounted) == 16
    with open(SHIPPED, encoding="utf-8") as fh:
        shipped = json.load(fh)
    patched, _ = patch_config(shipped, nodes=2, local_device_ids=list(range(8)),
                              container_ip="10.0.0.5", https_enabled=True,
                              tls_certs_configured=True, model_name=None,
                              model_weight_path="/mnt/model")

    class Mounted:
        dirs = {os.path.dirname(p) for p in mounted} | {"/mnt/model"}

        def lstat(self, path: str) -> FileInfo | None:
            if path in mounted:  # a Secret file: root's, defaultMode 0400
                return FileInfo("file", 0o400, 0)
            return self.stat(path)

        def stat(self, path: str) -> FileInfo | None:
            return FileInfo("dir", 0o755, 0) if path.rstrip("/") in self.dirs else None

    facts = StartupFacts(home=TLS_HOME, server_uid=0, container_ip="10.0.0.5")
    problems = [p for p in startup_problems(patched, facts, Mounted())
                if p.rule in ("https", "internode-tls")]
    assert problems == []
    # and without the mounts the same check names them: the test can fail
    assert [p for p in startup_problems(patched, facts, type("No", (), {
        "lstat": lambda s, p: None, "stat": lambda s, p: None})())
        if p.rule in ("https", "internode-tls")]


# --- bad input: one line naming the flag, exit 2 ----------------------------------------

BAD = [
    (["--run-as-user", "-1"], "--run-as-user"),
    (["--model-dir", "/opt/models/qwen"], "--model-dir"),
    (["--model-dir", "/mnt/model/../etc"], "--model-dir"),
    (["--model-pvc", "weights"], "--model-pvc"),
    (["--model-name", "qwen 72b"], "--model-name"),
    (["--model-name", "-qwen"], "--model-name"),
    (["--https"], "--https needs --tls-secret"),
    (["--tls-secret", "certs"], "--tls-secret"),
    (["--https", "--tls-secret", "certs", "--run-as-user", "1001"], "--run-as-user 1001"),
    (["--launcher", "msrun"], "--launcher"),
    (["--init-image", "x"], "--init-image"),
    (["--kind", "training", "--launcher", "horovod", "--", "t.py"], "--launcher 'horovod'"),
    (["--kind", "training", "--launcher", "torch", "--bind-core", "--", "torchrun", "t.py"],
     "--bind-core"),
    (["--kind", "training", "--master-port", "0", "--", "t.py"], "--master-port"),
    (["--kind", "training", "--init-container", "--", "t.py"], "--init-container"),
    (["--kind", "training", "--model-dir", "/mnt/model/x", "--", "t.py"], "--model-dir"),
]


@pytest.mark.parametrize(("args", "named"), BAD)
def test_bad_manifest_flags_are_usage_errors_naming_the_flag(args: list[str], named: str
                                                            ) -> None:
    result = CliRunner().invoke(app, ["manifest", *args])
    assert result.exit_code == 2, result.output
    errors = [ln for ln in result.output.splitlines() if ln.startswith("ascend-node: error:")]
    assert len(errors) == 1 and named in errors[0], result.output
    assert "apiVersion" not in result.output  # nothing half-written


# A path option that would become a mountPath colliding with another mount (the API server
# rejects two volumeMounts at one path) or hiding the image's system: refused, naming both.
COLLIDING = [
    (["--model-path", "/dev/shm"], "--model-path /dev/shm is where the pod mounts its shared"),
    (["--model-path", "/dev/shm/"], "--model-path /dev/shm/ is where the pod mounts its shared"),
    (["--model-path", "/dev/shm/m"], "is inside /dev/shm"),
    (["--model-path", "/etc"], "--model-path /etc is a system directory"),
    (["--model-path", "/usr"], "--model-path /usr is a system directory"),
    (["--model-path", "/usr/local/Ascend"], "holds /usr/local/Ascend/driver, where the pod"),
    (["--model-path", "/var/run"], "--model-path /var/run is a system directory"),
    (["--model-path", "/proc/model"], "is under /proc"),
    (["--model-path", "/run/ascend-node"], "the agent's state dir"),
    (["--model-path", "/etc/ascend-node"], "/etc/ascend-node"),
    (["--model-path", "/usr/local/Ascend/driver/model"], "is inside /usr/local/Ascend/driver"),
    (["--model-path", "/usr/local/Ascend/mindie"], "the image's CANN/MindIE install"),
    (["--model-path", "/etc/hccn.conf"], "/etc/hccn.conf"),
    (["--model-path", "/etc/volcano"], "Volcano's svc plugin"),
    (["--model-pvc", "w", "--model-dir", "/dev/shm"], "--model-dir /dev/shm is where"),
    (["--model-pvc", "w", "--model-dir", "/etc"], "--model-dir /etc is a system directory"),
    (["--kind", "training", "--model-path", "/tmp", "--", "t.py"], "--model-path /tmp is a"),
    (["--kind", "mindie-pd", "--model-path", "/dev/shm"], "--model-path /dev/shm is where"),
]


@pytest.mark.parametrize(("args", "named"), COLLIDING)
def test_a_path_that_collides_with_a_mount_is_refused_naming_both(args: list[str], named: str
                                                                  ) -> None:
    nodes = [] if "mindie-pd" in args else ["--nodes", "2"]
    result = CliRunner().invoke(app, ["manifest", "--name", "j", *nodes, "--image", "i",
                                      "--pvc", "p", *args])
    assert result.exit_code == 2, result.output
    errors = [ln for ln in result.output.splitlines() if ln.startswith("ascend-node: error:")]
    assert len(errors) == 1 and named in errors[0], result.output
    assert "hint: give --model-" in result.output
    assert "apiVersion" not in result.output  # nothing half-written


@pytest.mark.parametrize("path", ["/mnt/model", "/data/models", "/etc/model", "/opt/models",
                                  "/usr/local/model", "/home/m"])
def test_a_path_of_its_own_still_renders(path: str) -> None:
    result = CliRunner().invoke(app, ["manifest", "--name", "j", "--nodes", "2", "--image", "i",
                                      "--pvc", "p", "--model-path", path])
    assert result.exit_code == 0, result.output
    for pod in pods(yaml.safe_load(result.output)).values():
        for c in [*pod["spec"].get("initContainers", []), *pod["spec"]["containers"]]:
            paths = [m["mountPath"] for m in c["volumeMounts"]]
            assert len(paths) == len(set(paths)), paths


def test_usage_error_class() -> None:
    with pytest.raises(UsageError):
        ManifestParams(kind="mindie", name="j", nodes=2, image="i", pvc="p", run_id="r",
                       run_as_user=-1)


# --- the model where it is ----------------------------------------------------------------

def test_model_in_a_sub_directory_keeps_the_pvc_as_the_shared_dir() -> None:
    for pod in pods(job(model_dir="/mnt/model/qwen", model_name="qwen")).values():
        (c,) = pod["spec"]["containers"]
        env = env_of(c)
        assert env["MODEL_PATH"] == "/mnt/model"  # the rendezvous' directory
        assert env["ASCEND_NODE_MODEL_DIR"] == "/mnt/model/qwen"  # modelWeightPath
        assert env["MODEL_NAME"] == "qwen"


def test_model_on_its_own_claim_is_mounted_read_only_at_the_model_dir() -> None:
    pod = pods(job(model_pvc="weights", model_dir="/mnt/weights/qwen"))["master"]
    (c,) = pod["spec"]["containers"]
    (mount,) = [m for m in c["volumeMounts"] if m["name"] == "weights"]
    assert mount == {"name": "weights", "mountPath": "/mnt/weights/qwen", "readOnly": True}
    (vol,) = [v for v in pod["spec"]["volumes"] if v["name"] == "weights"]
    assert vol["persistentVolumeClaim"] == {"claimName": "weights", "readOnly": True}


# --- non-root ---------------------------------------------------------------------------------

def test_run_as_user_renders_the_user_and_a_writable_state_dir() -> None:
    for pod in pods(job(run_as_user=1001)).values():
        assert pod["spec"]["securityContext"] == {
            "runAsUser": 1001, "runAsGroup": 1001, "runAsNonRoot": True, "fsGroup": 1001}
        (c,) = pod["spec"]["containers"]
        assert {"name": "ascend-node-state", "mountPath": "/run/ascend-node"} in c["volumeMounts"]
        assert {"name": "ascend-node-state", "emptyDir": {}} in pod["spec"]["volumes"]
    root = pods(job(run_as_user=0))["master"]
    assert root["spec"]["securityContext"] == {"runAsUser": 0, "runAsGroup": 0}
    assert "securityContext" not in pods(job())["master"]["spec"]


# --- init container -----------------------------------------------------------------------------

def test_init_container_variant() -> None:
    for role, pod in pods(job(init_container=True, run_as_user=1001,
                              init_image="agent:1")).items():
        (init,) = pod["spec"]["initContainers"]
        (c,) = pod["spec"]["containers"]
        assert init["command"] == ["ascend-node", "ranktable"] and init["image"] == "agent:1"
        ienv = env_of(init)
        assert ienv["ROLE"] == role and ienv["ASCEND_NODE_STATE_DIR"] == "/run/ascend-node"
        assert ienv["ASCEND_NODE_MASTER_FILE"] == "/run/ascend-node/master"
        assert ienv["ASCEND_NODE_FILE_OWNER"] == "1001:1001"
        state = {"name": "ascend-node-state", "mountPath": "/run/ascend-node"}
        assert state in init["volumeMounts"] and state in c["volumeMounts"]
        assert c["image"] == "img"
        assert c["command"][:2] == ["bash", "-c"]
        assert "source /run/ascend-node/source_mul_env.sh" in c["command"][2]
        assert c["args"] == ["/usr/local/Ascend/mindie/latest/mindie-service/bin/"
                             "mindieservice_daemon"]
        for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
            command = c.get(probe, {}).get("exec", {}).get("command", [""])
            assert command[0] != "ascend-node"  # the server's image need not have the agent


def test_init_container_requests_the_npus_the_server_does() -> None:
    # Issue 36: the device plugin gives a container only the devices it requests; without a
    # request the init container had no ASCEND_VISIBLE_DEVICES and `ranktable` exited 1.
    for pod in pods(job(init_container=True, npus_per_node=4,
                        rdma_resource="rdma/hca")).values():
        (init,) = pod["spec"]["initContainers"]
        (c,) = pod["spec"]["containers"]
        npus = {"huawei.com/Ascend910": "4"}
        assert init["resources"] == {"limits": npus, "requests": npus}
        assert c["resources"]["limits"]["huawei.com/Ascend910"] == "4"


def test_init_container_server_gets_the_probes_of_the_plain_variant() -> None:
    # Issue 36: the server container had no probe, so it was Ready while weights loaded.
    # The same schedule as the plain variant, asked by the kubelet (no agent in the image).
    plain = pods(job(load_timeout=600))
    for role, pod in pods(job(init_container=True, load_timeout=600)).items():
        (c,) = pod["spec"]["containers"]
        (reference,) = plain[role]["spec"]["containers"]
        assert set(k for k in c if k.endswith("Probe")) == set(
            k for k in reference if k.endswith("Probe"))
        for kind in ("startupProbe", "readinessProbe", "livenessProbe"):
            if kind not in c:
                continue
            for key in ("periodSeconds", "timeoutSeconds"):
                assert c[kind][key] == reference[kind][key]
        assert {"name": "MIES_CONTAINER_MANAGEMENT_IP",
                "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}} in c["env"]
        if role == "master":
            assert c["readinessProbe"]["httpGet"] == {
                "path": "/v2/health/ready", "port": 1026, "scheme": "HTTP"}
            assert c["livenessProbe"]["httpGet"]["path"] == "/v2/health/live"
            assert c["startupProbe"]["failureThreshold"] * 3 >= 600 + 300
        else:
            assert c["startupProbe"]["exec"]["command"][:2] == ["bash", "-c"]
            assert "/run/ascend-node/master" in c["startupProbe"]["exec"]["command"][2]
    https = pods(job(init_container=True, https=True, tls_secret="certs"))["master"]
    (c,) = https["spec"]["containers"]
    assert c["readinessProbe"]["httpGet"]["scheme"] == "HTTPS"


# --- training through the agent ---------------------------------------------------------------

def test_training_runs_msrun_through_the_agent_with_its_options() -> None:
    doc = job("training", msrun_log_dir="/mnt/model/output/msrun_log", bind_core=True,
              master_port=8120)
    for pod in pods(doc).values():
        (c,) = pod["spec"]["containers"]
        assert c["command"][:6] == ["tini", "--", "ascend-node", "boot", "--launcher", "msrun"]
        assert c["command"][-1] == "--" and "bash" not in c["command"]
        (given,) = [a for a in c["command"] if a.startswith("--launcher-args=")]
        words = shlex.split(given.partition("=")[2])
        assert check_msrun_args(words) == ["--log_dir=/mnt/model/output/msrun_log",
                                           "--bind_core=True"]
        assert c["args"] == ["run_mindformer.py", "--config", "/mnt/model/c.yaml"]
        assert env_of(c)["ASCEND_NODE_MASTER_PORT"] == "8120"
        assert "readinessProbe" not in c  # no Service to be ready for
        assert "ASCEND_NODE_HTTPS" not in env_of(c)


def test_training_with_torch() -> None:
    (c,) = pods(job("training", launcher="torch"))["master"]["spec"]["containers"]
    assert c["command"] == ["tini", "--", "ascend-node", "boot", "--launcher", "torch", "--"]


def test_rendered_boot_command_parses_as_boot_does() -> None:
    """The rendered words reach `boot`'s option parser intact (the value starts with --)."""
    import typer.main

    (c,) = pods(job("training", msrun_log_dir="/x/log"))["master"]["spec"]["containers"]
    command: Any = typer.main.get_command(app)
    boot_cmd = command.commands["boot"]
    ctx = boot_cmd.make_context("boot", [*c["command"][4:], *c["args"]],
                                resilient_parsing=True)
    assert ctx.params["launcher"] == "msrun"
    assert ctx.params["launcher_args"] == "--log_dir=/x/log"
    assert ctx.args == ["run_mindformer.py", "--config", "/mnt/model/c.yaml"]


# --- the host's vendor tools --------------------------------------------------------------------

HOST_TOOLS = {"/usr/local/bin/npu-smi": "File", "/usr/local/dcmi": "Directory",
              "/etc/ascend_install.info": "File", "/usr/local/Ascend/driver": "Directory",
              "/etc/hccn.conf": "File"}


@pytest.mark.parametrize("variant", ["mindie", "training", "init", "a3", "pd"])
def test_every_container_that_runs_the_agent_mounts_the_host_s_npu_smi(variant: str) -> None:
    # Issue 36: no image ships npu-smi; without the host's, `discover` said "super pod -
    # [npu-smi not found]" and --a3 pods built v1.0, and the busy-NPU pre-flight and
    # doctor's npu.processes had nothing to ask. MindIE's/vllm-ascend's container
    # instructions bind npu-smi, /usr/local/dcmi and /etc/ascend_install.info.
    if variant == "pd":
        from ascend_node.jobspec.pd_job import PdShape, render_pd_job

        doc = render_pd_job(ManifestParams(kind="mindie", name="j", nodes=1, image="img",
                                           pvc="pvc", run_id="r1"), PdShape())
        specs = [t["template"]["spec"] for t in doc["spec"]["tasks"]
                 if t["name"].startswith(("prefill", "decode"))]
    else:
        kw: dict[str, Any] = {"init": {"init_container": True}, "a3": {"a3": True},
                              }.get(variant, {})
        doc = job("training" if variant == "training" else "mindie", **kw)
        specs = [t["template"]["spec"] for t in doc["spec"]["tasks"]]
    for spec in specs:
        volumes = {v["name"]: v for v in spec["volumes"]}
        for c in [*spec.get("initContainers", []), *spec["containers"]]:
            mounted = {m["mountPath"]: m for m in c["volumeMounts"]}
            for path, kind in HOST_TOOLS.items():
                m = mounted[path]
                assert m["readOnly"] is True
                assert volumes[m["name"]]["hostPath"] == {"path": path, "type": kind}
        if variant == "a3":
            for c in [*spec.get("initContainers", []), *spec["containers"]]:
                assert env_of(c)["ASCEND_NODE_A3"] == "1"
    bare = job("mindie", mount_driver=False)
    for t in bare["spec"]["tasks"]:
        for c in t["template"]["spec"]["containers"]:
            assert not set(HOST_TOOLS) & {m["mountPath"] for m in c["volumeMounts"]}
