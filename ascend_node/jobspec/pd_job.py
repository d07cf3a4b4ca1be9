"""The Volcano Job of a PD-disaggregated MindIE service (`manifest --kind mindie-pd`).

One Job (docs/pd.md, "The job's shape"): a task `coordinator`, a task `controller` (1
replica), and one task per instance, `prefill-<i>` and `decode-<j>`, each with as many
replicas as the instance has pods; plus a ConfigMap with the controller's and the
coordinator's configuration, rendered from the same shape (`pd.motor_configs`). Pure, like
`manifest`: dicts in, dicts out.

What each task's pods rely on, and why it is rendered so:

- **servers** run `ascend-node boot` (MindIE with `inferMode` dmi, `boot`'s PD branch) under
  their instance's identity, set statically per task exactly as `pd.roles.instance_environ`
  computes it: `ROLE=worker`, `VC_MASTER_NUM=0`, `VC_WORKER_NUM=<replicas>`,
  `ASCEND_NODE_RUN_ID=<run>-<task>` — one rendezvous and one rank table per instance. Their
  probes are a MindIE pod's (`status --serving`), on every pod of the instance: one pod
  template serves all of a task's pods, and a slave's answer is its master's.
- **the controller** runs `pd-boot -- mindie_motor_controller`, and beside it `pd-table
  --watch`, which keeps the global table current (the controller re-reads the file, it
  never asks for it). The writer is a **native sidecar** (an init container with
  `restartPolicy: Always`, Kubernetes >= 1.29): Volcano's exit-code policies read the exit
  code of the pod's first container, which must be the controller; the pod must fail when
  the controller does (a second ordinary container would keep a dead controller's pod
  Running, and no policy would fire); and a writer that stops is restarted by the kubelet
  without touching the controller. No probe: a controller waiting for its instances is
  healthy.
- **the coordinator** runs `pd-boot -- mindie_motor_coordinator` (announced for group "0",
  started on its pod IP); ready once it listens on its predict port, where clients send.
- both read their configuration from the ConfigMap; `pd-boot` hands them a real copy (a
  ConfigMap's files are `..data` symlinks, which MindIE-Motor's path check refuses).

Policies, per task (Volcano `applyPolicies`: the task's first, the first match wins; exit
codes before events): exit 5 (inconsistent cluster) aborts the Job; exit 4 (the instance's
peers timed out), a failed pod, or a task whose pods all exited 0 restarts **that task
only** (`RestartTask`), so the other instances keep serving. No policy on `PodEvicted`: the
pods `RestartTask` deletes raise it themselves, with the same job version, so such a policy
would restart the task again and again; Volcano re-creates a lost pod by itself, and an
instance left with one new pod times out its rendezvous (exit 4) and is restarted whole.
`RestartTask` bumps neither the job version nor the retry count: the restarted instance's
node 0 sees a pod whose data (its IP) differs from its completed attempt and opens a new
one (`rendezvous.decide.choose_attempt`), and `maxRetry` does not bound a task's restarts.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

from ascend_node.errors import ClusterInconsistent, PeerTimeout, UsageError
from ascend_node.handoff.mindie_startup import DEFAULT_MIES_INSTALL_PATH
from ascend_node.jobspec.job import (
    KEY_ITEM,
    KEY_MOUNT_DIR,
    MAX_HOSTNAME,
    MINDIE_MAX_NODES,
    ManifestParams,
    _container,
    _field_env,
    _volumes,
    to_yaml,
)
from ascend_node.jobspec.mounts import STATE_MOUNT
from ascend_node.jobspec.skeleton import MANAGED_BY, job_labels, job_object, pod_head, pod_labels
from ascend_node.pd.motor_configs import (
    CONTROLLER_FILE,
    COORDINATOR_FILE,
    motor_files,
)
from ascend_node.pd.roles import TASK_ENV
from ascend_node.pd.service import GLOBAL_TABLE_NAME, global_table_path
from ascend_node.rendezvous.kube_layout import identity_env, rbac_objects, service_account_name

MAX_INSTANCES = 96  # the controller's multi-node mode reads groups 2..97
MOTOR_MOUNT = "/etc/ascend-node/motor"
COORDINATOR_PREDICT_PORT = 1025  # ms_coordinator.json http_config.predict_port
CONTROLLER_PORT = 1026  # ms_controller.json http_server.port
CONTROLLER_ALARM_PORT = 1027  # ms_controller.json controller_alarm_port
# The daemons MindIE-Motor installs (its boot.sh runs these two names).
CONTROLLER_DAEMON = "mindie_motor_controller"
COORDINATOR_DAEMON = "mindie_motor_coordinator"
SERVER_NAME = "mindie"  # app.kubernetes.io/name of the server pods (their anti-affinity)
MOTOR_NAME = "mindie-motor"  # ... of the coordinator's and the controller's

TASK_EXIT_ACTIONS = (
    (ClusterInconsistent.exit_code, "AbortJob"),
    (PeerTimeout.exit_code, "RestartTask"),
)
TASK_EVENT_ACTIONS = (("PodFailed", "RestartTask"), ("TaskCompleted", "RestartTask"))


@dataclass(frozen=True)
class PdShape:
    """How many prefill and decode instances, and how many pods each has."""

    prefill: int = 1
    decode: int = 1
    # Pods per instance by default as simulate --pd runs them: different sizes, because with
    # every instance centralized the controller tells P from D by node_machine_num alone.
    prefill_pods: int = 2
    decode_pods: int = 1

    def roles_note(self) -> Optional[str]:
        """A warning when nothing tells the controller which instances prefill (equal pods
        per P and per D instance: its role manager then picks), else None."""
        if self.prefill_pods != self.decode_pods:
            return None
        return (f"prefill and decode instances both have {self.prefill_pods} pod(s): the "
                "controller cannot tell them apart by node_machine_num and its role manager "
                "picks each instance's role (docs/pd.md); give them different --prefill-pods "
                "and --decode-pods to fix the roles")

    def tasks(self) -> list[tuple[str, int]]:
        """(task, replicas) of the instance tasks, prefill first: the global table's order."""
        return ([(f"prefill-{i}", self.prefill_pods) for i in range(self.prefill)]
                + [(f"decode-{j}", self.decode_pods) for j in range(self.decode)])


def check_shape(shape: PdShape, name: Optional[str] = None) -> None:
    """UsageError naming the flag of the first value a PD service cannot have (and, with
    the Job's `name`, a name too long for this shape's pod hostnames)."""
    for flag, value, hi in (("--prefill", shape.prefill, MAX_INSTANCES),
                            ("--decode", shape.decode, MAX_INSTANCES),
                            ("--prefill-pods", shape.prefill_pods, MINDIE_MAX_NODES),
                            ("--decode-pods", shape.decode_pods, MINDIE_MAX_NODES)):
        if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= hi:
            raise UsageError(f"{flag} {value!r} is out of range",
                             f"use an integer from 1 to {hi}, e.g. {flag} 1")
    if shape.prefill + shape.decode > MAX_INSTANCES:
        raise UsageError(f"--prefill {shape.prefill} + --decode {shape.decode} instances: the "
                         f"controller reads at most {MAX_INSTANCES} instance groups",
                         "render fewer instances")
    if name is not None:
        _check_name(name, shape)


def check_pd(p: ManifestParams, shape: PdShape) -> None:
    """The PD Job's own rules on top of `manifest.validate` (which `p` already passed)."""
    check_shape(shape)
    if p.kind != "mindie":
        raise UsageError("a PD service's servers are MindIE's", "use --kind mindie-pd")
    if p.init_container:
        raise UsageError("--init-container with --kind mindie-pd: a PD server's start needs "
                         "the agent in its container (boot's PD branch patches config.json)",
                         "leave --init-container out")
    if p.https:
        raise UsageError("--https with --kind mindie-pd: the controller's and the "
                         "coordinator's TLS items are not rendered",
                         "use --no-https (the default) for the service's internal traffic")
    _check_name(p.name, shape)


def _check_name(name: str, shape: PdShape) -> None:
    """Volcano names a pod `<job>-<task>-<index>` and the svc plugin makes that its
    hostname: at most 63 characters for the longest."""
    longest = max([f"{name}-{task}-{pods - 1}" for task, pods in
                   [*shape.tasks(), ("coordinator", 1), ("controller", 1)]], key=len)
    if len(longest) > MAX_HOSTNAME:
        raise UsageError(
            f"job name {name!r} is too long for this shape: pod hostname {longest!r} has "
            f"{len(longest)} characters (max {MAX_HOSTNAME})",
            f"shorten the name to at most {MAX_HOSTNAME - len(longest) + len(name)} "
            "characters")


def configmap_name(p: ManifestParams) -> str:
    return f"{p.name}-motor"


def table_path(p: ManifestParams) -> str:
    """The live global table, where `pd-table` writes it: on the shared volume, or, through
    the API, in the state directory's emptyDir the table writer shares with the controller
    in the controller's pod (`pd_cmds._api_table_path`)."""
    if p.rendezvous == "kube":
        return f"{STATE_MOUNT}/pd/{GLOBAL_TABLE_NAME}"
    return str(global_table_path(Path(p.model_path), p.run_id))


def render_pd_rbac(p: ManifestParams, shape: PdShape) -> list[dict[str, Any]]:
    """With `--rendezvous kube`: the service's ServiceAccount, Role and RoleBinding, the Role
    naming every instance's objects and the service pods' (`kube_layout.pd_names`)."""
    if p.rendezvous != "kube" or p.namespace is None:
        return []
    return rbac_objects(p.name, p.namespace, 0, dict(shape.tasks()))


def render_pd_configmap(p: ManifestParams, shape: PdShape) -> dict[str, Any]:
    """The ConfigMap holding ms_controller.json and ms_coordinator.json."""
    check_pd(p, shape)
    metadata: dict[str, Any] = {"name": configmap_name(p)}
    if p.namespace is not None:
        metadata["namespace"] = p.namespace
    metadata["labels"] = _labels(p, MOTOR_NAME)
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": metadata,
            "data": motor_files(shape.prefill_pods, shape.decode_pods, p.npus_per_node,
                                table_path(p))}


def render_pd_job(p: ManifestParams, shape: PdShape) -> dict[str, Any]:
    """The Volcano Job: coordinator, controller, then the instance tasks."""
    check_pd(p, shape)
    tasks = [_motor_task(p, "coordinator"), _motor_task(p, "controller")]
    tasks += [_server_task(p, task, pods) for task, pods in shape.tasks()]
    # maxRetry bounds RestartJob only; no policy here restarts the Job (see the module). The
    # svc plugin's NetworkPolicy admits only the Job's pods: clients outside it send to the
    # coordinator. The run's label, as on a plain job: `launch` finds an earlier run by it.
    return job_object(p.name, p.namespace, job_labels("mindie-pd", p.name, p.run_id), p.queue,
                      3, ["--disable-network-policy=true"], tasks)


def render_pd_yaml(p: ManifestParams, shape: PdShape) -> str:
    """The ConfigMap and the Job as one YAML stream (for `kubectl apply -f -`)."""
    header = (f"# PD service rendered by ascend-node: {shape.prefill} prefill x "
              f"{shape.prefill_pods} pod(s), {shape.decode} decode x {shape.decode_pods} "
              f"pod(s), {p.npus_per_node} NPUs per pod\n")
    rbac = "".join("# the agent's least privilege for the rendezvous through the API "
                   f"(docs/deploy.md)\n{to_yaml(obj)}---\n" for obj in render_pd_rbac(p, shape))
    return (rbac + header + to_yaml(render_pd_configmap(p, shape)) + "---\n"
            + to_yaml(render_pd_job(p, shape)))


def _labels(p: ManifestParams, name: str) -> dict[str, str]:
    """The ConfigMap's labels."""
    return {"app.kubernetes.io/name": name, "app.kubernetes.io/instance": p.name, **MANAGED_BY}


def _policies() -> list[dict[str, Any]]:
    return ([{"exitCode": code, "action": action} for code, action in TASK_EXIT_ACTIONS]
            + [{"event": event, "action": action} for event, action in TASK_EVENT_ACTIONS])


def _server_task(p: ManifestParams, task: str, pods: int) -> dict[str, Any]:
    # The instance as a plain MindIE job of `pods` nodes, whose serving pod's container
    # (probes included) every pod of the task gets; then the instance's identity.
    inner = ManifestParams(**{**p.__dict__, "nodes": pods})
    c = _container(inner, "master")
    c["env"] = _server_env(c["env"], p.run_id, task, pods)
    spec = pod_head(p.run_as_user, p.npus_per_node if p.a3 else None,
                    {"app.kubernetes.io/name": SERVER_NAME, "app.kubernetes.io/instance": p.name})
    spec["containers"] = [c]
    spec["volumes"] = _volumes(inner)
    if p.rendezvous == "kube":
        spec["serviceAccountName"] = service_account_name(p.name)
    labels = pod_labels(SERVER_NAME, p.name, task, p.run_id)
    return {"name": task, "replicas": pods, "policies": _policies(),
            "template": {"metadata": {"labels": labels}, "spec": spec}}


def _server_env(env: list[dict[str, Any]], run_id: str, task: str,
                pods: int) -> list[dict[str, Any]]:
    """A MindIE pod's environment with the instance's identity (`roles.instance_environ`)."""
    fixed = {"ROLE": "worker", "ASCEND_NODE_RUN_ID": f"{run_id}-{task}"}
    out = [dict(e, value=fixed[e["name"]]) if e["name"] in fixed else e
           for e in env if e["name"] not in ("VC_WORKER_NUM", "VC_MASTER_NUM")]
    # No task is named master or worker, so the svc plugin injects neither count.
    return [{"name": TASK_ENV, "value": task}, *out,
            {"name": "VC_MASTER_NUM", "value": "0"},
            {"name": "VC_WORKER_NUM", "value": str(pods)}]


def _motor_env(p: ManifestParams, task: str) -> list[dict[str, Any]]:
    env: list[dict[str, Any]] = [
        {"name": TASK_ENV, "value": task},
        *([{"name": "MODEL_PATH", "value": p.model_path}] if p.pvc is not None else []),
        {"name": "ASCEND_NODE_RUN_ID", "value": p.run_id},
        {"name": "ASCEND_NODE_TIMEOUT", "value": str(p.timeout)},
        {"name": "ASCEND_NODE_STATE_DIR", "value": STATE_MOUNT},
        _field_env("POD_UID", "metadata.uid"),
        _field_env("K8S_POD_IP", "status.podIP"),
        _field_env("K8S_HOST_IP", "status.hostIP"),
    ]
    if p.rendezvous == "kube":
        # The vcjob's name and uid from Volcano's own pod annotations (kube_layout).
        env += [{"name": "ASCEND_NODE_RENDEZVOUS", "value": "kube"}, *identity_env()]
    if p.rendezvous_key_secret is not None:
        env.append({"name": "ASCEND_NODE_RENDEZVOUS_KEY_FILE",
                    "value": f"{KEY_MOUNT_DIR}/{KEY_ITEM}"})
    return env


def _motor_mounts(p: ManifestParams) -> list[dict[str, Any]]:
    mounts: list[dict[str, Any]] = [
        *([{"name": "model", "mountPath": p.model_path}] if p.pvc is not None else []),
        {"name": "motor-config", "mountPath": MOTOR_MOUNT, "readOnly": True},
        {"name": "ascend-node-state", "mountPath": STATE_MOUNT},
    ]
    if p.rendezvous_key_secret is not None:
        mounts.append({"name": "rendezvous-key", "mountPath": KEY_MOUNT_DIR, "readOnly": True})
    return mounts


def _motor_volumes(p: ManifestParams) -> list[dict[str, Any]]:
    vols: list[dict[str, Any]] = [
        *([{"name": "model", "persistentVolumeClaim": {"claimName": p.pvc}}]
          if p.pvc is not None else []),
        {"name": "motor-config", "configMap": {"name": configmap_name(p)}},
        {"name": "ascend-node-state", "emptyDir": {}},
    ]
    if p.rendezvous_key_secret is not None:
        vols.append({"name": "rendezvous-key", "secret": {
            "secretName": p.rendezvous_key_secret, "defaultMode": 0o440,
            "items": [{"key": KEY_ITEM, "path": KEY_ITEM}]}})
    return vols


def _motor_container(p: ManifestParams, task: str, name: str,
                     command: list[str]) -> dict[str, Any]:
    return {"name": name, "image": p.image, "imagePullPolicy": "IfNotPresent",
            "command": command, "env": _motor_env(p, task),
            "terminationMessagePolicy": "FallbackToLogsOnError",
            "volumeMounts": _motor_mounts(p)}


def _motor_task(p: ManifestParams, task: str) -> dict[str, Any]:
    """The coordinator's or the controller's task: one pod, no NPU."""
    config = f"{MOTOR_MOUNT}/{COORDINATOR_FILE if task == 'coordinator' else CONTROLLER_FILE}"
    daemon = COORDINATOR_DAEMON if task == "coordinator" else CONTROLLER_DAEMON
    main = _motor_container(p, task, task, ["tini", "--", "ascend-node", "pd-boot",
                                      "--motor-config", config, "--", daemon])
    # MindIE-Motor resolves the relative paths of its configuration (logs, DIGS files)
    # against its working directory, its install directory in its own boot.sh.
    main["workingDir"] = DEFAULT_MIES_INSTALL_PATH
    spec = pod_head(p.run_as_user, None, None)
    if task == "coordinator":
        main["ports"] = [{"name": "predict", "containerPort": COORDINATOR_PREDICT_PORT,
                          "protocol": "TCP"}]
        main["readinessProbe"] = {"tcpSocket": {"port": COORDINATOR_PREDICT_PORT},
                                  "periodSeconds": 5, "timeoutSeconds": 5,
                                  "failureThreshold": 3}
    else:
        main["ports"] = [{"name": "http", "containerPort": CONTROLLER_PORT, "protocol": "TCP"},
                         {"name": "alarm", "containerPort": CONTROLLER_ALARM_PORT,
                          "protocol": "TCP"}]
        writer = _motor_container(p, task, "pd-table", ["tini", "--", "ascend-node", "pd-table",
                                                  "--controller-config", config, "--watch"])
        writer["restartPolicy"] = "Always"  # a native sidecar (Kubernetes >= 1.29)
        spec["initContainers"] = [writer]
    spec["containers"] = [main]
    spec["volumes"] = _motor_volumes(p)
    if p.rendezvous == "kube":
        spec["serviceAccountName"] = service_account_name(p.name)
    return {"name": task, "replicas": 1, "policies": _policies(),
            "template": {"metadata": {"labels": pod_labels(MOTOR_NAME, p.name, task, p.run_id)},
                         "spec": spec}}
