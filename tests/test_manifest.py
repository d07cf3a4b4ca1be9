"""Contract tests for the rendered Volcano Job manifests (ascend_node.jobspec.job).

Every manifest must (a) pass Volcano's own Job CRD schema, made strict the way the API
server is (unknown fields rejected, int32 ranges), and (b) keep the promises the agent
relies on: gang size, exit-code policies, downward-API identity, probes, NPU resources.
"""

from __future__ import annotations

import copy
import importlib.machinery
import importlib.util
import json
import re
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml
from hypothesis import example, given, settings
from hypothesis import strategies as st

from ascend_node.errors import ClusterInconsistent, PeerTimeout, UsageError
from ascend_node.jobspec.job import (
    DEFAULT_LOAD_TIMEOUT_S,
    STARTUP_GRACE_S,
    ManifestParams,
    render_job,
    render_yaml,
    to_yaml,
)

ROOT = Path(__file__).resolve().parent.parent
CRD_PATH = ROOT / "fixtures" / "volcano" / "batch.volcano.sh_jobs.yaml"

BASE: dict[str, Any] = {"image": "registry.example.com/mindie:2.1", "pvc": "model-pvc",
                        "run_id": "run-1"}
TRAIN_CMD = ["run_mindformer.py", "--config", "/mnt/model/pretrain.yaml"]


def params(kind: str = "mindie", nodes: int = 2, **kw: Any) -> ManifestParams:
    values = {**BASE, "kind": kind, "name": f"{kind}-job", "nodes": nodes, **kw}
    if kind == "training" and "command" not in kw:
        values["command"] = TRAIN_CMD
    return ManifestParams(**values)


CASES = [
    pytest.param(kind, nodes, rdma, id=f"{kind}-{nodes}-{'rdma' if rdma else 'nordma'}")
    for kind, nodes in [("mindie", 1), ("mindie", 2), ("mindie", 4),
                        ("training", 1), ("training", 2), ("training", 4)]
    for rdma in (None, "rdma/hca")
]


# --- the CRD schema, made strict -------------------------------------------------------

def _strict(schema: Any) -> Any:
    """Turn a k8s structural schema into a JSON Schema that rejects what the API server does.

    - `x-kubernetes-int-or-string` gets an explicit anyOf when it lacks one;
    - objects with `properties` reject unknown fields (the API server prunes or, with
      kubectl's strict validation, refuses them; a typo like `minAvaliable` must fail);
    - `format: int32` / `int64` get their numeric ranges.
    Walks only schema positions, so a field *named* "properties" is not mistaken for one.
    """
    if not isinstance(schema, dict):
        return schema
    out = dict(schema)
    if isinstance(out.get("properties"), dict):
        out["properties"] = {k: _strict(v) for k, v in out["properties"].items()}
        if "additionalProperties" not in out and not out.get(
                "x-kubernetes-preserve-unknown-fields"):
            out["additionalProperties"] = False
    for key in ("items", "not"):
        if isinstance(out.get(key), dict):
            out[key] = _strict(out[key])
    if isinstance(out.get("additionalProperties"), dict):
        out["additionalProperties"] = _strict(out["additionalProperties"])
    for key in ("anyOf", "allOf", "oneOf"):
        if isinstance(out.get(key), list):
            out[key] = [_strict(s) for s in out[key]]
    if out.get("x-kubernetes-int-or-string") and "anyOf" not in out:
        out["anyOf"] = [{"type": "integer"}, {"type": "string"}]
    bits = {"int32": 31, "int64": 63}.get(out.get("format", ""))
    if bits is not None:
        out.setdefault("minimum", -(2**bits))
        out.setdefault("maximum", 2**bits - 1)
    return out


@pytest.fixture(scope="module")
def validator() -> jsonschema.Draft7Validator:
    crd = yaml.safe_load(CRD_PATH.read_text(encoding="utf-8"))
    (version,) = [v for v in crd["spec"]["versions"] if v["name"] == "v1alpha1"]
    schema = _strict(version["schema"]["openAPIV3Schema"])
    jsonschema.Draft7Validator.check_schema(schema)
    return jsonschema.Draft7Validator(schema)


def _errors(validator: jsonschema.Draft7Validator, job: dict[str, Any]) -> list[str]:
    return [f"{list(e.absolute_path)}: {e.message}" for e in validator.iter_errors(job)]


@pytest.mark.parametrize("kind,nodes,rdma", CASES)
def test_rendered_job_satisfies_volcano_crd(validator, kind, nodes, rdma) -> None:
    job = render_job(params(kind, nodes, rdma_resource=rdma))
    assert job["apiVersion"] == "batch.volcano.sh/v1alpha1"
    assert job["kind"] == "Job"
    assert _errors(validator, job) == []


@pytest.mark.parametrize(
    "mutate,where",
    [
        (lambda j: j["spec"].__setitem__("minAvailable", "2"), "minAvailable"),
        (lambda j: j["spec"].__setitem__("minAvaliable", 2), "spec"),
        (lambda j: j["spec"]["policies"][0].__setitem__("event", "Bogus"), "event"),
        (lambda j: j["spec"]["tasks"][0].__setitem__("name", "Master"), "name"),
        (lambda j: j["spec"]["tasks"][0].__setitem__("replicas", 2**31), "replicas"),
        (lambda j: j["spec"]["tasks"][0]["template"]["spec"]["containers"][0]
         .__setitem__("imagePullPolicy", 3), "imagePullPolicy"),
        (lambda j: j["spec"]["tasks"][0]["template"]["spec"]["containers"][0]["resources"]
         ["limits"].__setitem__("huawei.com/Ascend910", [8]), "huawei.com/Ascend910"),
    ],
    ids=["minAvailable-string", "unknown-field", "bad-event", "task-name-case",
         "replicas-overflow", "pull-policy-type", "quantity-type"],
)
def test_schema_rejects_broken_jobs(validator, mutate, where) -> None:
    """The validation is not vacuous: each single defect is caught, at the right place."""
    job = copy.deepcopy(render_job(params("mindie", 2)))
    mutate(job)
    errors = _errors(validator, job)
    assert errors, "schema accepted a broken job"
    assert any(where in e for e in errors), errors


# --- the agent's contract ----------------------------------------------------------------

def _tasks(job: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {t["name"]: t for t in job["spec"]["tasks"]}


def _container(task: dict[str, Any]) -> dict[str, Any]:
    (c,) = task["template"]["spec"]["containers"]
    return c


def _env(c: dict[str, Any]) -> dict[str, Any]:
    names = [e["name"] for e in c["env"]]
    assert len(names) == len(set(names)), f"duplicate env names: {names}"
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in c["env"]}


@pytest.mark.parametrize("kind,nodes,rdma", CASES)
def test_gang_and_tasks(kind, nodes, rdma) -> None:
    job = render_job(params(kind, nodes, rdma_resource=rdma))
    spec = job["spec"]
    assert spec["minAvailable"] == nodes
    assert spec["schedulerName"] == "volcano"
    assert set(spec["plugins"]) == {"env", "svc"}
    tasks = _tasks(job)
    assert tasks["master"]["replicas"] == 1
    if nodes == 1:
        assert list(tasks) == ["master"]
    else:
        assert list(tasks) == ["master", "worker"]
        assert tasks["worker"]["replicas"] == nodes - 1
    assert sum(t["replicas"] for t in tasks.values()) == nodes
    for task in tasks.values():
        # Exit-code policies only fire once the pod has failed; any other restart
        # policy restarts the container in place and hides the code from Volcano.
        assert task["template"]["spec"]["restartPolicy"] == "Never"


@pytest.mark.parametrize("kind", ["mindie", "training"])
def test_policies_act_on_agent_exit_codes(kind) -> None:
    policies = render_job(params(kind, 4))["spec"]["policies"]
    by_code = {p["exitCode"]: p["action"] for p in policies if "exitCode" in p}
    assert by_code == {PeerTimeout.exit_code: "RestartJob",
                       ClusterInconsistent.exit_code: "AbortJob"}
    assert (PeerTimeout.exit_code, ClusterInconsistent.exit_code) == (4, 5)
    # Volcano's admission webhook: never event and exitCode together, never exit code 0.
    for p in policies:
        assert ("exitCode" in p) != ("event" in p or "events" in p), p
        assert p.get("exitCode") != 0
    # The controller returns the first match, and a failed pod also raises PodFailed:
    # exit-code policies must come before any policy on PodFailed or "*".
    events = [i for i, p in enumerate(policies) if p.get("event") in ("PodFailed", "*")]
    codes = [i for i, p in enumerate(policies) if "exitCode" in p]
    assert all(c < e for c in codes for e in events)


@pytest.mark.parametrize("kind,nodes,rdma", CASES)
def test_container_identity_env(kind, nodes, rdma) -> None:
    p = params(kind, nodes, rdma_resource=rdma, run_id="job-42", timeout=600,
               model_path="/data/models")
    for role, task in _tasks(render_job(p)).items():
        env = _env(_container(task))
        assert env["ROLE"] == role
        assert env["POD_UID"] == {"fieldRef": {"fieldPath": "metadata.uid"}}
        assert env["K8S_POD_IP"] == {"fieldRef": {"fieldPath": "status.podIP"}}
        assert env["K8S_HOST_IP"] == {"fieldRef": {"fieldPath": "status.hostIP"}}
        assert env["ASCEND_NODE_JOB_VERSION"] == {
            "fieldRef": {"fieldPath": "metadata.annotations['volcano.sh/job-version']"}}
        assert env["ASCEND_NODE_JOB_INSTANCE"] == {
            "fieldRef": {"fieldPath": "metadata.annotations['scheduling.k8s.io/group-name']"}}
        assert env["ASCEND_NODE_RUN_ID"] == "job-42"
        assert env["ASCEND_NODE_TIMEOUT"] == "600"
        assert env["MODEL_PATH"] == "/data/models"
        # The svc plugin injects VC_MASTER_NUM / VC_WORKER_NUM for tasks that exist;
        # a one-node job has no worker task, so the count must be given explicitly.
        if nodes == 1:
            assert env["VC_WORKER_NUM"] == "0"
        else:
            assert "VC_WORKER_NUM" not in env and "VC_MASTER_NUM" not in env


@pytest.mark.parametrize("kind,nodes,rdma", CASES)
def test_resources_volumes_and_capabilities(kind, nodes, rdma) -> None:
    p = params(kind, nodes, rdma_resource=rdma, npus_per_node=16, pvc="shared-weights",
               model_path="/data/models")
    for task in _tasks(render_job(p)).values():
        pod = task["template"]["spec"]
        c = _container(task)
        expected = {"huawei.com/Ascend910": "16"}
        if rdma:
            expected[rdma] = "1"
        assert c["resources"] == {"limits": expected, "requests": expected}
        caps = c.get("securityContext", {}).get("capabilities", {}).get("add", [])
        assert ("IPC_LOCK" in caps) == bool(rdma)
        volumes = {v["name"]: v for v in pod["volumes"]}
        (model_mount,) = [m for m in c["volumeMounts"] if m["mountPath"] == "/data/models"]
        assert volumes[model_mount["name"]]["persistentVolumeClaim"] == {
            "claimName": "shared-weights"}
        assert not model_mount.get("readOnly", False), "the agent writes rendezvous state there"
        mounted = {m["name"] for m in c["volumeMounts"]}
        assert mounted <= set(volumes)


def test_driver_mounts_can_be_left_out() -> None:
    c = _container(_tasks(render_job(params(mount_driver=False)))["master"])
    assert [m["mountPath"] for m in c["volumeMounts"]] == ["/mnt/model", "/dev/shm"]


@pytest.mark.parametrize("timeout", [1, 900, 3600])
def test_training_probes_call_status_and_outlast_the_peer_wait(timeout) -> None:
    """Training: the bootstrap's startup probe only (no Service, so no readiness gate)."""
    for task in _tasks(render_job(params("training", 2, timeout=timeout))).values():
        c = _container(task)
        start = c["startupProbe"]
        assert start["exec"]["command"] == ["ascend-node", "status"]
        assert start["timeoutSeconds"] >= 5
        budget = start["periodSeconds"] * start["failureThreshold"]
        assert budget >= timeout + STARTUP_GRACE_S
        assert budget < timeout + STARTUP_GRACE_S + start["periodSeconds"]
        assert "livenessProbe" not in c and "readinessProbe" not in c


@pytest.mark.parametrize(("timeout", "load"), [(1, None), (900, None), (900, 60),
                                               (3600, 6 * 3600)])
def test_mindie_startup_waits_for_the_peers_and_the_weights(timeout, load) -> None:
    """MindIE pods: startup = `status --serving` (bootstrap, then MindIE's readiness), long
    enough for the agent's wait plus the weight load (2 h unless --load-timeout)."""
    job = render_job(params("mindie", 3, timeout=timeout, load_timeout=load))
    expected = timeout + STARTUP_GRACE_S + (DEFAULT_LOAD_TIMEOUT_S if load is None else load)
    for task in _tasks(job).values():
        start = _container(task)["startupProbe"]
        assert start["exec"]["command"] == ["ascend-node", "status", "--serving"]
        budget = start["periodSeconds"] * start["failureThreshold"]
        assert expected <= budget < expected + start["periodSeconds"]
        assert start["periodSeconds"] <= 3, "how soon a loaded pod turns Ready"
    assert DEFAULT_LOAD_TIMEOUT_S >= 3600


def test_only_the_serving_pod_gets_mindie_readiness_and_liveness() -> None:
    tasks = _tasks(render_job(params("mindie", 3)))
    master, worker = _container(tasks["master"]), _container(tasks["worker"])
    assert master["readinessProbe"]["exec"]["command"] == ["ascend-node", "status", "--serving"]
    assert master["livenessProbe"]["exec"]["command"] == ["ascend-node", "status", "--serving",
                                                          "--live"]
    live = master["livenessProbe"]
    assert live["periodSeconds"] * live["failureThreshold"] >= 30, "no restart on one hiccup"
    assert "readinessProbe" not in worker and "livenessProbe" not in worker
    single = _container(_tasks(render_job(params("mindie", 1)))["master"])
    assert {"startupProbe", "readinessProbe", "livenessProbe"} <= set(single)


@pytest.mark.parametrize(("kind", "value"), [("mindie", 59), ("mindie", 0),
                                              ("mindie", 8 * 24 * 3600), ("training", 3600)])
def test_a_bad_load_timeout_is_a_usage_error(kind, value) -> None:
    extra = {"command": TRAIN_CMD} if kind == "training" else {}
    with pytest.raises(UsageError, match=r"load[-_]timeout"):
        ManifestParams(kind=kind, name="job", nodes=2, image="img", pvc="model", run_id="r",
                       load_timeout=value, **extra)


@pytest.mark.parametrize(
    "kind,command,args",
    [("mindie", None, None), ("mindie", ["my-server", "--port", "1025"],
                              ["my-server", "--port", "1025"]),
     ("training", TRAIN_CMD, TRAIN_CMD)],
)
def test_entrypoint_is_the_agent(kind, command, args) -> None:
    c = _container(_tasks(render_job(params(kind, 2, command=command)))["worker"])
    launcher = ["--launcher", "msrun"] if kind == "training" else []  # the agent runs msrun
    assert c["command"] == ["tini", "--", "ascend-node", "boot", *launcher, "--"]
    assert c.get("args") == args


@pytest.mark.parametrize("kind,nodes", [("mindie", 2), ("training", 4)])
def test_one_pod_per_host(kind, nodes) -> None:
    job = render_job(params(kind, nodes))
    for task in _tasks(job).values():
        pod = task["template"]
        (term,) = pod["spec"]["affinity"]["podAntiAffinity"][
            "requiredDuringSchedulingIgnoredDuringExecution"]
        assert term["topologyKey"] == "kubernetes.io/hostname"
        selector = term["labelSelector"]["matchLabels"]
        # The selector must match the pods of every task of this job (and only them).
        for other in _tasks(job).values():
            labels = other["template"]["metadata"]["labels"]
            assert selector.items() <= labels.items()
        assert selector == {"app.kubernetes.io/instance": job["metadata"]["name"]}


def test_mindie_master_reachable_from_outside_the_job() -> None:
    assert render_job(params("mindie"))["spec"]["plugins"]["svc"] == [
        "--disable-network-policy=true"]
    assert render_job(params("training"))["spec"]["plugins"]["svc"] == []


def test_namespace_only_when_given() -> None:
    assert "namespace" not in render_job(params())["metadata"]
    assert render_job(params(namespace="ai-infra"))["metadata"]["namespace"] == "ai-infra"


# --- validation --------------------------------------------------------------------------

@pytest.mark.parametrize(
    "overrides,bad",
    [
        ({"kind": "vllm"}, "'vllm'"),
        ({"name": "Foo"}, "'Foo'"),
        ({"name": "1job"}, "'1job'"),
        ({"name": "job-"}, "'job-'"),
        ({"name": "a" * 60, "nodes": 2}, "'" + "a" * 60 + "-worker-0'"),
        ({"nodes": 0}, "--nodes 0"),
        ({"nodes": True}, "nodes True"),
        ({"nodes": 61}, "nodes 61"),
        ({"npus_per_node": 0}, "--npus-per-node 0"),
        ({"npus_per_node": 17}, "--npus-per-node 17"),
        ({"timeout": 0}, "--timeout 0"),
        ({"image": ""}, "image ''"),
        ({"image": "reg/img latest"}, "'reg/img latest'"),
        ({"pvc": "Model_PVC"}, "'Model_PVC'"),
        ({"queue": "Default"}, "'Default'"),
        ({"namespace": "AI"}, "'AI'"),
        ({"run_id": ""}, "run id ''"),
        ({"run_id": "a/b"}, "'a/b'"),
        ({"run_id": "a..b"}, "'a..b'"),
        ({"model_path": "models"}, "'models'"),
        ({"model_path": "/"}, "'/'"),
        ({"model_path": "/mnt/../etc"}, "'/mnt/../etc'"),
        ({"model_path": "/mnt/my model"}, "'/mnt/my model'"),
        ({"rdma_resource": "hca"}, "'hca'"),
        ({"rdma_resource": "rdma/"}, "'rdma/'"),
        ({"npu_resource": "Ascend910"}, "'Ascend910'"),
        ({"command": []}, "[]"),
        ({"command": [""]}, "['']"),
    ],
)
def test_bad_values_are_named(overrides, bad) -> None:
    with pytest.raises(UsageError) as exc:
        params(**{"kind": "mindie", "nodes": 2, **overrides})
    assert bad in exc.value.cause
    assert exc.value.hint


def test_training_needs_a_launcher() -> None:
    with pytest.raises(UsageError, match="training manifest has no command"):
        ManifestParams(kind="training", name="t", nodes=2, **BASE)


def test_training_is_not_capped_at_mindie_limit() -> None:
    assert render_job(params("training", 64))["spec"]["minAvailable"] == 64


_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


@settings(max_examples=200, deadline=None)
@given(name=st.from_regex(r"[a-z][-a-z0-9]{0,70}", fullmatch=True),
       nodes=st.integers(min_value=1, max_value=5000))
def test_accepted_names_give_valid_pod_hostnames(name, nodes) -> None:
    """Whatever the validator accepts, Volcano's pod names are valid hostnames."""
    try:
        job = render_job(params("training", nodes, name=name))
    except UsageError:
        return
    for task in job["spec"]["tasks"]:
        longest = f"{name}-{task['name']}-{task['replicas'] - 1}"
        assert len(longest) <= 63 and _LABEL.match(longest)


# --- YAML output -------------------------------------------------------------------------

@pytest.mark.parametrize("kind,nodes,rdma", CASES)
def test_yaml_is_the_job(kind, nodes, rdma) -> None:
    p = params(kind, nodes, rdma_resource=rdma)
    assert yaml.safe_load(render_yaml(p)) == render_job(p)


_json_like = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(),
    lambda children: st.lists(children, max_size=4)
    | st.dictionaries(st.text(), children, max_size=4),
    max_leaves=20,
)


@settings(max_examples=300, deadline=None)
@given(_json_like)
@example({"A\n": None})  # `$` matched before a final newline: the key was left plain
@example(["a\n"])
def test_emitter_round_trips_through_a_yaml_reader(data) -> None:
    text = to_yaml(data)
    assert text.isascii()
    assert yaml.safe_load(text) == data


@pytest.mark.parametrize("word", ["yes", "No", "on", "OFF", "true", "null", "y", "1", "0x1f",
                                  "1e3", "12:30", "2024-01-01", "~", "- x", "a: b", "#c", ""])
def test_ambiguous_strings_stay_strings(word) -> None:
    assert yaml.safe_load(to_yaml({"k": word})) == {"k": word}


def test_emitter_refuses_floats() -> None:
    with pytest.raises(TypeError):
        to_yaml({"k": 1.5})


# --- checked-in examples -----------------------------------------------------------------

def _load_script(name: str) -> Any:
    path = ROOT / "scripts" / name
    loader = importlib.machinery.SourceFileLoader(name.replace("-", "_"), str(path))
    spec = importlib.util.spec_from_loader(loader.name, loader)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


def test_checked_in_examples_match_the_renderer(validator) -> None:
    rendered = _load_script("render-examples").rendered()
    assert sorted(rendered) == ["examples/volcano/mindie-2x8.yaml",
                                "examples/volcano/mindie-4x8.yaml",
                                "examples/volcano/mindie-pd-1p2-1d8.yaml",
                                "examples/volcano/training-4.yaml"]
    for rel, text in rendered.items():
        on_disk = (ROOT / rel).read_text(encoding="utf-8")
        assert on_disk == text, f"{rel} is stale: run scripts/render-examples"
        docs = list(yaml.safe_load_all(on_disk))  # a PD service: its ConfigMap, then the Job
        assert [d["kind"] for d in docs][-1] == "Job"
        assert _errors(validator, docs[-1]) == []


@pytest.mark.parametrize("data", [{"k" * 2000: "v"}, {"k" * 2000: {"a": [1, {"b": None}]}},
                                  [{"x" * 1500: []}]])
def test_keys_longer_than_yaml_implicit_limit(data) -> None:
    """YAML caps implicit keys at 1024 characters; longer ones need the explicit form."""
    assert yaml.safe_load(to_yaml(data)) == data


# --- A3 SuperPoD variant ---------------------------------------------------------------


@pytest.mark.parametrize("nodes", [1, 2, 4])
def test_a3_variant_is_valid_and_asks_for_whole_super_pod_nodes(validator, nodes) -> None:
    job = render_job(params("mindie", nodes, npus_per_node=16, a3=True))
    assert _errors(validator, job) == []
    for task in job["spec"]["tasks"]:
        spec = task["template"]["spec"]
        assert spec["nodeSelector"] == {"accelerator-type": "module-a3-16-super-pod"}
        limits = spec["containers"][0]["resources"]["limits"]
        assert limits["huawei.com/Ascend910"] == "16"
    eight = render_job(params("mindie", 2, npus_per_node=8, a3=True))
    assert (eight["spec"]["tasks"][0]["template"]["spec"]["nodeSelector"]
            == {"accelerator-type": "module-a3-8-super-pod"})
    assert "nodeSelector" not in render_job(params())["spec"]["tasks"][0]["template"]["spec"]


def test_a3_variant_refuses_a_partial_node() -> None:
    with pytest.raises(UsageError, match=r"--a3 with --npus-per-node 4"):
        params("mindie", 2, npus_per_node=4, a3=True)


def test_manifest_cli_a3_defaults_to_16_npus(validator) -> None:
    from typer.testing import CliRunner

    from ascend_node.cli import app

    result = CliRunner().invoke(app, ["manifest", "--kind", "mindie", "--a3", "--json"])
    assert result.exit_code == 0, result.output
    job = json.loads(result.stdout)
    assert _errors(validator, job) == []
    spec = job["spec"]["tasks"][0]["template"]["spec"]
    assert spec["containers"][0]["resources"]["requests"]["huawei.com/Ascend910"] == "16"
    assert spec["nodeSelector"]["accelerator-type"] == "module-a3-16-super-pod"


def test_rendezvous_key_secret_is_mounted_as_a_file_never_an_env_value(validator) -> None:
    job = render_job(params(rendezvous_key_secret="mindie-rendezvous-key"))
    assert _errors(validator, job) == []
    for task in job["spec"]["tasks"]:
        spec = task["template"]["spec"]
        (container,) = spec["containers"]
        env = {e["name"]: e for e in container["env"]}
        assert env["ASCEND_NODE_RENDEZVOUS_KEY_FILE"]["value"] == \
            "/etc/ascend-node/rendezvous-key/key"
        assert "ASCEND_NODE_RENDEZVOUS_KEY" not in env
        mount = next(m for m in container["volumeMounts"] if m["name"] == "rendezvous-key")
        assert mount == {"name": "rendezvous-key", "mountPath": "/etc/ascend-node/rendezvous-key",
                         "readOnly": True}
        vol = next(v for v in spec["volumes"] if v["name"] == "rendezvous-key")
        assert vol["secret"]["secretName"] == "mindie-rendezvous-key"
    with pytest.raises(UsageError, match="--rendezvous-key-secret"):
        params(rendezvous_key_secret="Not_A_Name")
    assert "rendezvous-key" not in json.dumps(render_job(params()))


def test_manifest_cli_renders_a_fresh_key_secret_beside_the_job(validator) -> None:
    from typer.testing import CliRunner

    from ascend_node.cli import app

    keys = set()
    for _ in range(2):
        result = CliRunner().invoke(app, ["manifest", "--name", "llm", "--rendezvous-key"])
        assert result.exit_code == 0, result.output
        secret, job = list(yaml.safe_load_all(result.stdout))
        assert secret["kind"] == "Secret" and secret["metadata"]["name"] == "llm-rendezvous-key"
        key = secret["stringData"]["key"]
        assert re.fullmatch(r"[0-9a-f]{64}", key)
        keys.add(key)
        assert _errors(validator, job) == []
        assert key not in yaml.safe_dump(job)
    assert len(keys) == 2  # a new key per rendering
    both = CliRunner().invoke(app, ["manifest", "--rendezvous-key",
                                    "--rendezvous-key-secret", "x"])
    assert both.exit_code == 2


@pytest.mark.parametrize(("flag", "value"), [("--no-https", "0"),
                                             ("--https --tls-secret certs", "1"), (None, "0")])
def test_manifest_https_choice_reaches_every_pod_as_the_boot_setting(validator, flag, value
                                                                     ) -> None:
    """`boot` refuses MindIE's shipped https config without certificates; the rendered Job
    always says which: plain http by default, https with the certificates of a Secret."""
    from typer.testing import CliRunner

    from ascend_node.cli import app

    args = ["manifest", "--kind", "mindie", "--json"] + (flag.split() if flag else [])
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    job = json.loads(result.stdout)
    assert _errors(validator, job) == []
    for task in job["spec"]["tasks"]:
        (container,) = task["template"]["spec"]["containers"]
        env = {e["name"]: e.get("value") for e in container["env"]}
        assert env.get("ASCEND_NODE_HTTPS") == value


def test_manifest_https_is_refused_for_training() -> None:
    with pytest.raises(UsageError, match="--https/--no-https"):
        params("training", 2, command=["msrun", "train.py"], https=False)
