"""The platform's requests `manifest` does not render, laid over the Job it renders (pure).

`manifest` renders the Job from its own options; cube-studio also asks for its volumes, node
selector, image pull Secrets and policy, CPU and memory, a working directory and its pipeline
labels (docs/launch.md, "The mapping from the platform's environment"). `overlay` returns a copy
of the rendered Job with those added to every task's pod, refusing what would collide with
what the Job already holds (a volume name, a mount path, a node-selector key, the NPU resource):
a collision is a bad environment value (exit 1) naming the variable, never a Job the API server
refuses or one that silently loses a mount.
"""

from __future__ import annotations

import copy
from typing import Any

from ascend_node.errors import ConfigError
from ascend_node.jobspec.mounts import mount_collision, under
from ascend_node.launch.platform_env import PlatformRequest, Volume

VAR = "KFJ_TASK_VOLUME_MOUNT"


def volume_source(v: Volume) -> dict[str, Any]:
    """The pod volume for one `KFJ_TASK_VOLUME_MOUNT` entry."""
    if v.kind in ("pvc", "pvc-share"):
        return {"name": v.name, "persistentVolumeClaim": {"claimName": v.source}}
    if v.kind == "nfs":
        return {"name": v.name, "nfs": {"server": v.server, "path": v.source}}
    if v.kind == "hostpath":
        return {"name": v.name, "hostPath": {"path": v.source}}
    if v.kind == "configmap":
        return {"name": v.name, "configMap": {"name": v.source}}
    return {"name": v.name, "secret": {"secretName": v.source}}


def volume_mount(v: Volume) -> dict[str, Any]:
    mount: dict[str, Any] = {"name": v.name, "mountPath": v.mount}
    if v.sub_path is not None:
        mount["subPath"] = v.sub_path
    return mount


def _check_volumes(spec: dict[str, Any], container: dict[str, Any],
                   volumes: tuple[Volume, ...]) -> None:
    names = {vol["name"] for vol in spec.get("volumes") or []}
    paths = [m["mountPath"] for m in container.get("volumeMounts") or []]
    for v in volumes:
        if v.name in names:
            raise ConfigError(f"{VAR} mounts volume {v.name!r}, a name the Job already uses",
                              "rename the source (the volume name is derived from it)")
        why = mount_collision(v.mount)
        if why is None:
            for path in paths:
                if under(v.mount, path) or under(path, v.mount):
                    why = f"collides with the Job's own mount {path}"
                    break
        if why is not None:
            raise ConfigError(f"{VAR} mounts {v.mount} {why}",
                              "mount the volume at a directory of its own, e.g. /mnt/data")


def overlay(job: dict[str, Any], req: PlatformRequest) -> dict[str, Any]:
    """A copy of `job` (jobspec.job.render_job's) with what `req` asks beyond manifest's options."""
    out = copy.deepcopy(job)
    meta = out["metadata"]
    meta.setdefault("labels", {})
    for key, value in req.labels.items():
        meta["labels"].setdefault(key, value)
    if req.annotations:
        meta.setdefault("annotations", {}).update(req.annotations)
    for task in out["spec"]["tasks"]:
        template = task["template"]
        labels = template.setdefault("metadata", {}).setdefault("labels", {})
        for key, value in req.labels.items():
            labels.setdefault(key, value)
        spec = template["spec"]
        server = spec["containers"][0]
        _check_volumes(spec, server, req.volumes)
        spec.setdefault("volumes", []).extend(volume_source(v) for v in req.volumes)
        server.setdefault("volumeMounts", []).extend(volume_mount(v) for v in req.volumes)
        if req.node_selector:
            selector = spec.setdefault("nodeSelector", {})
            for key, value in req.node_selector.items():
                if selector.get(key, value) != value:
                    raise ConfigError(
                        f"KFJ_TASK_NODE_SELECTOR gives {key}={value}, but the Job selects "
                        f"{key}={selector[key]}", f"leave {key} out of KFJ_TASK_NODE_SELECTOR")
                selector[key] = value
        if req.pull_secrets:
            spec["imagePullSecrets"] = [{"name": name} for name in req.pull_secrets]
        if req.pull_policy is not None:
            for c in [*spec.get("initContainers", []), *spec["containers"]]:
                c["imagePullPolicy"] = req.pull_policy
        # The user's command runs in --working_dir; a container whose directory the Job
        # sets keeps it (a PD service's coordinator and controller: MindIE-Motor resolves
        # its configuration's relative paths against its install directory).
        if req.working_dir is not None:
            server.setdefault("workingDir", req.working_dir)
        # No empty `resources: {}` on a container that asks for none (a PD service's motor).
        resources = server.setdefault("resources", {}) if req.resources else {}
        for key, value in req.resources.items():
            if key in resources.get("limits", {}):
                raise ConfigError(
                    f"DEFAULT_POD_RESOURCES (or KFJ_TASK_RESOURCE_*) sets {key}, which the Job "
                    "already sets", f"leave {key} out: the Job's value comes from its options")
            resources.setdefault("requests", {})[key] = value
            resources.setdefault("limits", {})[key] = value
    return out
