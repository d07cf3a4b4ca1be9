"""`ascend-node manifest --kind mindie-pd`: the PD service's Job and ConfigMap (docs/pd.md).

What a user relies on: the Job passes Volcano's CRD and every pod template Kubernetes' own
schema (>= 1.29: the controller's table writer is a native sidecar); each pod finds its role,
instance and place from its environment exactly as `pd.roles` reads it (the rendered
variables plus what Volcano's env/svc plugins add); the controller's rendered configuration
accepts the global table the builder writes for that shape, and `pd-boot` accepts both
configurations; a broken instance is restarted alone, an inconsistent cluster aborts; a
meaningless option is refused with exit 2 and one line.
"""

from __future__ import annotations

import copy
import json
from typing import Any

import kubernetes_validate
import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from ascend_node.errors import UsageError
from ascend_node.jobspec.job import ManifestParams, to_yaml
from ascend_node.jobspec.pd_job import (
    MOTOR_MOUNT,
    PdShape,
    configmap_name,
    render_pd_configmap,
    render_pd_job,
    render_pd_yaml,
    table_path,
)
from ascend_node.pd.global_table import Instance, ServicePod, build_global_table
from ascend_node.pd.handover import controller_problems, coordinator_problems
from ascend_node.pd.motor_rules import check_table_path, flags_from_controller_config
from ascend_node.pd.roles import instance_environ, read_pd_identity
from ascend_node.ranktable import DeviceEntry, ServerEntry, build_rank_table
from ascend_node.rendezvous.decide import Open, Reuse, choose_attempt
from ascend_node.rendezvous.models import AttemptDoc, OutcomeDoc, TableRecord
from tests.cli_helpers import cli_runner
from tests.kubelet_bed import volcano_env
from tests.test_manifest import _errors, validator  # noqa: F401  (the CRD fixture)
from tests.volcano_model import JobRun, PodEvent, apply_policies, request_for

K8S_VERSIONS = ("1.29", kubernetes_validate.latest_version())

# The shapes: the proof's, the A2 and A3 DeepSeek samples (docs/pd.md), and small ones.
SHAPES = {
    "1p2-1d1": (PdShape(1, 1, 2, 1), {}),
    "1p1-1d1": (PdShape(prefill_pods=1, decode_pods=1), {}),
    "a2-deepseek": (PdShape(1, 1, 2, 8), {}),
    "a3-deepseek": (PdShape(4, 1, 1, 4), {"a3": True, "npus_per_node": 16}),
    "3p-2d-keyed-user": (PdShape(3, 2, 1, 2), {"rendezvous_key_secret": "pd-key",
                                                "run_as_user": 1001}),
}


def params(**kw: Any) -> ManifestParams:
    values: dict[str, Any] = {"kind": "mindie", "name": "pd", "nodes": 1,
                              "image": "registry.example.com/mindie:2.1", "pvc": "shared",
                              "run_id": "svc-1", **kw}
    return ManifestParams(**values)


def shape_and_params(case: str) -> tuple[PdShape, ManifestParams]:
    shape, kw = SHAPES[case]
    return shape, params(**kw)


def tasks(job: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {t["name"]: t for t in job["spec"]["tasks"]}


def env_of(container: dict[str, Any]) -> dict[str, Any]:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container["env"]}


# ------------------------------------------------------------------ schemas and shape

@pytest.mark.parametrize("case", SHAPES)
def test_the_job_satisfies_volcanos_crd(validator, case: str) -> None:  # noqa: F811
    shape, p = shape_and_params(case)
    assert _errors(validator, render_pd_job(p, shape)) == []


@pytest.mark.parametrize("version", K8S_VERSIONS)
@pytest.mark.parametrize("case", SHAPES)
def test_pods_and_configmap_satisfy_kubernetes_schemas(case: str, version: str) -> None:
    shape, p = shape_and_params(case)
    job = render_pd_job(p, shape)
    for task in job["spec"]["tasks"]:
        pod = {"apiVersion": "v1", "kind": "Pod",
               "metadata": {"name": f"pd-{task['name']}-0", **task["template"]["metadata"]},
               "spec": task["template"]["spec"]}
        kubernetes_validate.validate(pod, version, strict=True)
    kubernetes_validate.validate(render_pd_configmap(p, shape), version, strict=True)


def test_the_schema_check_is_not_vacuous(validator) -> None:  # noqa: F811
    shape, p = shape_and_params("1p2-1d1")
    job = copy.deepcopy(render_pd_job(p, shape))
    job["spec"]["tasks"][2]["policies"][0]["event"] = "Bogus"
    assert any("event" in e for e in _errors(validator, job))
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "x"},
           "spec": {**job["spec"]["tasks"][1]["template"]["spec"]}}
    pod["spec"]["initContainers"] = [dict(pod["spec"]["initContainers"][0], restartPolicy=3)]
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(pod, K8S_VERSIONS[-1], strict=True)


@pytest.mark.parametrize("case", SHAPES)
def test_one_task_per_instance_with_its_pods(case: str) -> None:
    shape, p = shape_and_params(case)
    job = render_pd_job(p, shape)
    replicas = {t["name"]: t["replicas"] for t in job["spec"]["tasks"]}
    want = {"coordinator": 1, "controller": 1,
            **{f"prefill-{i}": shape.prefill_pods for i in range(shape.prefill)},
            **{f"decode-{j}": shape.decode_pods for j in range(shape.decode)}}
    assert replicas == want
    assert list(replicas)[:2] == ["coordinator", "controller"]
    assert job["spec"]["minAvailable"] == sum(want.values())  # the whole service, gang-scheduled
    assert job["spec"]["plugins"] == {"env": [], "svc": ["--disable-network-policy=true"]}


def test_the_yaml_stream_is_the_configmap_then_the_job() -> None:
    shape, p = shape_and_params("a2-deepseek")
    docs = list(yaml.safe_load_all(render_pd_yaml(p, shape)))
    assert docs == [render_pd_configmap(p, shape), render_pd_job(p, shape)]
    text = render_pd_yaml(p, shape)
    assert "ms_controller.json: |\n    {\n" in text  # the files readable, as literal blocks


@given(st.lists(st.text(st.characters(min_codepoint=0x20, max_codepoint=0x7E), min_size=1,
                        max_size=20), min_size=1, max_size=5),
       st.sampled_from(["", "\n", "\n\n", " ", "\t"]))
def test_multi_line_text_round_trips_through_a_yaml_reader(lines: list[str], end: str) -> None:
    text = "\n".join(lines) + end
    assert yaml.safe_load(to_yaml({"data": {"f": text}})) == {"data": {"f": text}}


# ------------------------------------------------------------------ identity per pod

def pod_environ(job: dict[str, Any], task: str, index: int) -> dict[str, str]:
    """A pod's environment as Volcano's env/svc plugins and the rendered env give it (the
    downward-API fields filled in)."""
    replicas = {t["name"]: t["replicas"] for t in job["spec"]["tasks"]}
    env = volcano_env(job["metadata"]["name"], replicas, task, index)
    (container,) = tasks(job)[task]["template"]["spec"]["containers"]
    for e in container["env"]:
        env[e["name"]] = e["value"] if "value" in e else f"<{e['valueFrom']}>"
    return env


@pytest.mark.parametrize("case", SHAPES)
def test_every_pod_finds_its_role_instance_and_place(case: str) -> None:
    shape, p = shape_and_params(case)
    job = render_pd_job(p, shape)
    for task, t in tasks(job).items():
        for index in range(t["replicas"]):
            env = pod_environ(job, task, index)
            me = read_pd_identity(env)
            assert (me.task, me.place, me.task_pods) == (task, index, t["replicas"])
            assert me.counts == {"prefill": shape.prefill, "decode": shape.decode}
            if me.is_server:
                # The identity `roles.instance_environ` describes is what the pod has.
                wanted = instance_environ(me, p.run_id)
                assert {k: env[k] for k in wanted} == wanted
                assert env["ASCEND_NODE_RUN_ID"] == f"{p.run_id}-{task}"


def test_servers_boot_mindie_and_the_service_pods_pd_boot() -> None:
    shape, p = shape_and_params("1p2-1d1")
    t = tasks(render_pd_job(p, shape))
    (server,) = t["decode-0"]["template"]["spec"]["containers"]
    assert server["command"] == ["tini", "--", "ascend-node", "boot", "--"]
    assert "args" not in server  # the MindIE daemon, boot's default
    assert server["resources"]["limits"] == {"huawei.com/Ascend910": "8"}
    (coord,) = t["coordinator"]["template"]["spec"]["containers"]
    assert coord["command"][3:] == ["pd-boot", "--motor-config",
                                    f"{MOTOR_MOUNT}/ms_coordinator.json", "--",
                                    "mindie_motor_coordinator"]
    ctrl_spec = t["controller"]["template"]["spec"]
    (ctrl,) = ctrl_spec["containers"]
    assert ctrl["command"][3:] == ["pd-boot", "--motor-config",
                                   f"{MOTOR_MOUNT}/ms_controller.json", "--",
                                   "mindie_motor_controller"]
    (writer,) = ctrl_spec["initContainers"]
    assert writer["restartPolicy"] == "Always"  # native sidecar: runs beside, restarted alone
    assert writer["command"][3:] == ["pd-table", "--controller-config",
                                     f"{MOTOR_MOUNT}/ms_controller.json", "--watch"]
    for c in (coord, ctrl, writer):
        assert "resources" not in c  # no NPU for the coordinator and the controller
        assert env_of(c)["ASCEND_NODE_RUN_ID"] == p.run_id  # the service's run, not an instance's
        assert {"name": "motor-config", "mountPath": MOTOR_MOUNT, "readOnly": True} \
            in c["volumeMounts"]
    (vol,) = [v for v in ctrl_spec["volumes"] if v["name"] == "motor-config"]
    assert vol == {"name": "motor-config", "configMap": {"name": configmap_name(p)}}


def test_probes_servers_as_mindie_and_nothing_that_kills_a_waiting_controller() -> None:
    shape, p = shape_and_params("1p2-1d1")
    t = tasks(render_pd_job(p, shape))
    for task in ("prefill-0", "decode-0"):
        (c,) = t[task]["template"]["spec"]["containers"]
        assert c["startupProbe"]["exec"]["command"] == ["ascend-node", "status", "--serving"]
        assert c["readinessProbe"]["exec"]["command"] == ["ascend-node", "status", "--serving"]
    spec = t["controller"]["template"]["spec"]
    for c in spec["containers"] + spec["initContainers"]:
        assert not {"startupProbe", "livenessProbe", "readinessProbe"} & set(c)
    (coord,) = t["coordinator"]["template"]["spec"]["containers"]
    assert "livenessProbe" not in coord and "startupProbe" not in coord
    assert coord["readinessProbe"]["tcpSocket"] == {"port": 1025}


def test_servers_repel_servers_only() -> None:
    """One server pod per node; the coordinator and controller may share a server's node."""
    shape, p = shape_and_params("1p2-1d1")
    t = tasks(render_pd_job(p, shape))
    term = t["decode-0"]["template"]["spec"]["affinity"]["podAntiAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"][0]
    selector = term["labelSelector"]["matchLabels"]
    for name, task in t.items():
        labels = task["template"]["metadata"]["labels"]
        matches = all(labels.get(k) == v for k, v in selector.items())
        assert matches == name.startswith(("prefill-", "decode-")), name


# ------------------------------------------------------------------ the configurations

def instance_table(pods: int, npus: int, subnet: int) -> dict[str, Any]:
    servers = [ServerEntry(global_index=i, pod_ip=f"172.16.{subnet}.{10 + i}",
                           host_ip=f"192.168.{subnet}.{10 + i}",
                           devices=tuple(DeviceEntry(d, f"10.{subnet}.{i}.{d + 1}")
                                         for d in range(npus))) for i in range(pods)]
    return build_rank_table(servers, "1.0")


@pytest.mark.parametrize("case", ["1p2-1d1", "1p1-1d1", "a2-deepseek", "3p-2d-keyed-user"])
def test_the_controller_config_accepts_the_table_of_its_shape(case: str) -> None:
    """The rendered ms_controller.json and the table `pd-table` builds for that shape pass
    every check `pd-boot` makes before exec (the controller's loader, rule by rule)."""
    shape, p = shape_and_params(case)
    files = render_pd_configmap(p, shape)["data"]
    config = json.loads(files["ms_controller.json"])
    flags = flags_from_controller_config(config)
    instances = ([Instance("prefill", i, instance_table(shape.prefill_pods, p.npus_per_node,
                                                         10 + i)) for i in range(shape.prefill)]
                 + [Instance("decode", j, instance_table(shape.decode_pods, p.npus_per_node,
                                                         100 + j)) for j in range(shape.decode)])
    table = build_global_table([ServicePod("172.16.0.10", "192.168.0.1")],
                               [ServicePod("172.16.0.11", "192.168.0.1")], instances,
                               {"prefill": shape.prefill, "decode": shape.decode}, flags)
    assert controller_problems(config, table, {}) == []
    assert coordinator_problems(json.loads(files["ms_coordinator.json"])) == []
    # Each centralized instance holds tp*dp*cp devices; the pods count tells P from D.
    assert flags.p_devices == shape.prefill_pods * p.npus_per_node
    assert flags.d_devices == shape.decode_pods * p.npus_per_node
    assert not flags.p_distributed and not flags.d_distributed and flags.multi_node


def sizes_by_role(config: dict[str, Any], table: dict[str, Any]) -> dict[str, list[tuple]]:
    """With both instances centralized every group's `deploy_server` is "0", and the
    controller tells P from D by `node_machine_num` (NodeScheduler.cpp 282-320, per the
    facts file: UNCONFIRMED), then groups DP ranks by tp*dp*cp: per role, each instance
    group's (servers, devices) against (node_machine_num, tp*dp*cp)."""
    multi = config["multi_node_infer_config"]
    out: dict[str, list[tuple]] = {}
    for group in table["server_group_list"]:
        if group["group_id"] in ("0", "1"):
            continue
        servers = group["server_list"]
        role = next(r for r in ("p", "d")
                    if multi[f"{r}_node_config"]["node_machine_num"] == len(servers))
        node = multi[f"{role}_node_config"]
        devices = sum(len(s["device"]) for s in servers)
        out.setdefault(role, []).append(
            (len(servers), devices, node["node_machine_num"],
             node["tp_size"] * node["dp_size"] * node["cp_size"]))
    return out


def test_each_instance_group_has_the_size_its_role_says() -> None:
    shape, p = shape_and_params("1p2-1d1")
    config = json.loads(render_pd_configmap(p, shape)["data"]["ms_controller.json"])
    flags = flags_from_controller_config(config)
    table = build_global_table([ServicePod("172.16.0.10", "192.168.0.1")], [],
                               [Instance("prefill", 0, instance_table(2, 8, 10)),
                                Instance("decode", 0, instance_table(1, 8, 100))],
                               {"prefill": 1, "decode": 1}, flags)
    assert {g["deploy_server"] for g in table["server_group_list"]
            if g["group_id"] not in ("0", "1")} == {"0"}
    assert sizes_by_role(config, table) == {"p": [(2, 16, 2, 16)], "d": [(1, 8, 1, 8)]}


def test_the_configs_point_at_the_live_table() -> None:
    shape, p = shape_and_params("1p2-1d1")
    config = json.loads(render_pd_configmap(p, shape)["data"]["ms_controller.json"])
    assert config["global_rank_table_file_path"] == table_path(p) == \
        "/mnt/model/.ascend-node/svc-1/pd/global_ranktable.json"
    assert check_table_path(table_path(p)) is None
    assert not any(config["tls_config"].values())  # plain http, as the servers serve


# ------------------------------------------------------------------ Volcano's policies

@pytest.mark.parametrize("event,action", [
    (PodEvent("failed", 1, task="decode-0"), "RestartTask"),      # a server died
    (PodEvent("failed", 137, task="decode-0"), "RestartTask"),    # killed (liveness, OOM)
    (PodEvent("failed", 4, task="prefill-0"), "RestartTask"),     # its peers timed out
    (PodEvent("failed", 5, task="prefill-0"), "AbortJob"),        # inconsistent: no retry
    (PodEvent("failed", 5, task="controller"), "AbortJob"),
    (PodEvent("failed", 4, task="controller"), "RestartTask"),    # no table in time
    (PodEvent("failed", 1, task="coordinator"), "RestartTask"),
    (PodEvent("succeeded", task="decode-0"), "RestartTask"),      # a server never finishes
    (PodEvent("deleted", task="decode-0"), "SyncJob"),            # see below
    (PodEvent("running", task="decode-0"), "SyncJob"),
])
def test_pod_event_to_action(event: PodEvent, action: str) -> None:
    shape, p = shape_and_params("1p2-1d1")
    assert apply_policies(render_pd_job(p, shape), request_for(event), 0) == action


def test_a_restarted_task_does_not_restart_itself_again() -> None:
    """RestartTask deletes the task's pods, and each deletion is a `PodEvicted` of the same
    job version: a policy on PodEvicted would restart the task once per deleted pod, for
    ever. The rendered policies have none; a lost pod is re-created by Volcano's sync."""
    shape, p = shape_and_params("1p2-1d1")
    run = JobRun(render_pd_job(p, shape))
    assert run.on(PodEvent("failed", 1, task="prefill-0")) == "RestartTask"
    assert [run.on(PodEvent("deleted", task="prefill-0")) for _ in range(2)] == ["SyncJob"] * 2
    assert (run.phase, run.version, run.retry_count) == ("Running", 0, 0)
    assert run.task_restarts == {"prefill-0": 1}


def test_a_task_restart_gives_the_instance_a_fresh_attempt() -> None:
    """RestartTask leaves the job version alone, so what opens a new attempt is node 0's
    data: a re-created pod with a new IP no longer matches the completed table."""
    old, new = "a" * 64, "b" * 64  # node 0's data digests before and after
    attempt = AttemptDoc(run_id="svc-1-decode-0", attempt_id="a1", opened_by="old-uid",
                         node_count=2, master_count=0, job_version=0)
    outcome = OutcomeDoc(run_id="svc-1-decode-0", attempt_id="a1", result="table",
                         members=(TableRecord(global_index=0, incarnation="old-uid", digest=old),
                                  TableRecord(global_index=1, incarnation="old-1", digest=old)))
    new_pod = choose_attempt(attempt, outcome, "new-uid", new, 2, 0, job_version=0)
    assert isinstance(new_pod, Open), new_pod
    same = choose_attempt(attempt, outcome, "new-uid", old, 2, 0, job_version=0)
    assert isinstance(same, Reuse)  # same addresses: the table is still true


# ------------------------------------------------------------------ the command

@pytest.mark.parametrize("argv,says", [
    (["--nodes", "3"], "--nodes with --kind mindie-pd"),
    (["--decode", "0"], "--decode 0 is out of range"),
    (["--prefill-pods", "61"], "--prefill-pods 61 is out of range"),
    (["--prefill", "60", "--decode", "40"], "at most 96 instance groups"),
    (["--init-container"], "--init-container with --kind mindie-pd"),
    (["--https", "--tls-secret", "certs"], "--https with --kind mindie-pd"),
    (["--launcher", "torch"], "--launcher/--master-port"),
    (["--name", "a" * 55], "is too long for this shape"),
])
def test_meaningless_options_are_refused(argv: list[str], says: str) -> None:
    done = cli_runner().invoke(app_(), ["manifest", "--kind", "mindie-pd", *argv])
    assert done.exit_code == 2, done.stderr
    lines = [x for x in done.stderr.splitlines() if x.startswith("ascend-node: error:")]
    assert len(lines) == 1 and says in lines[0], done.stderr


@pytest.mark.parametrize("flag", ["--prefill", "--decode", "--prefill-pods", "--decode-pods"])
def test_shape_options_are_refused_for_other_kinds(flag: str) -> None:
    done = cli_runner().invoke(app_(), ["manifest", "--kind", "mindie", flag, "2"])
    assert done.exit_code == 2 and f"{flag} is for --kind mindie-pd" in done.stderr


def test_the_default_shape_is_one_the_controller_can_tell_apart() -> None:
    """The defaults are simulate --pd's (1 P of 2 pods, 1 D of 1): with every instance
    centralized the controller tells P from D by node_machine_num, so equal sizes would
    leave the roles to its role manager."""
    assert PdShape() == PdShape(1, 1, 2, 1)
    assert PdShape().roles_note() is None
    done = cli_runner().invoke(app_(), ["manifest", "--kind", "mindie-pd"])
    assert done.exit_code == 0
    assert "warning" not in done.stderr
    assert done.stdout.startswith("# PD service rendered by ascend-node: 1 prefill x 2 pod(s), "
                                  "1 decode x 1 pod(s)")


def test_equal_pods_per_p_and_d_instance_render_with_a_warning() -> None:
    done = cli_runner().invoke(app_(), ["manifest", "--kind", "mindie-pd",
                                        "--prefill-pods", "3", "--decode-pods", "3"])
    assert done.exit_code == 0
    warnings = [x for x in done.stderr.splitlines() if x.startswith("ascend-node: warning:")]
    assert len(warnings) == 1 and "both have 3 pod(s)" in warnings[0], done.stderr
    assert "--prefill-pods and --decode-pods" in warnings[0]
    assert done.stdout.startswith("# PD service rendered by ascend-node")


def test_the_command_prints_what_the_renderer_renders() -> None:
    done = cli_runner().invoke(app_(), ["manifest", "--kind", "mindie-pd", "--name", "pd",
                                        "--image", "registry.example.com/mindie:2.1",
                                        "--pvc", "shared", "--run-id", "svc-1",
                                        "--prefill-pods", "2", "--json"])
    assert done.exit_code == 0, done.stdout
    shape, p = shape_and_params("1p2-1d1")
    assert json.loads(done.stdout)["items"] == [render_pd_configmap(p, shape),
                                               render_pd_job(p, shape)]


def test_the_renderer_refuses_what_the_command_refuses() -> None:
    with pytest.raises(UsageError):
        render_pd_job(params(init_container=True), PdShape())
    with pytest.raises(UsageError):
        render_pd_configmap(params(), PdShape(prefill=0))


def app_() -> Any:
    from ascend_node.cli import app

    return app


def test_task_policies_are_what_volcanos_webhook_accepts() -> None:
    """Per task: never event and exitCode in one policy, no exit code 0, no event or code
    twice, actions among the webhook's (pkg/webhooks/admission/jobs/validate
    `policyActionMap`: RestartTask is one); the Job itself restarts nothing."""
    shape, p = shape_and_params("3p-2d-keyed-user")
    job = render_pd_job(p, shape)
    assert "policies" not in job["spec"]
    for task in job["spec"]["tasks"]:
        policies = task["policies"]
        events = [x["event"] for x in policies if "event" in x]
        codes = [x["exitCode"] for x in policies if "exitCode" in x]
        assert all(("event" in x) != ("exitCode" in x) for x in policies)
        assert 0 not in codes and len(set(codes)) == len(codes)
        assert len(set(events)) == len(events) and "PodEvicted" not in events
        assert {x["action"] for x in policies} <= {"AbortJob", "RestartJob", "RestartTask",
                                                   "TerminateJob", "CompleteJob", "ResumeJob"}
