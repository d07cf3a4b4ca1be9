#!/usr/bin/env python3
"""The kube bed's node agent: what a kubelet does for the bed's fake nodes, with podman.

scripts/kube_bed.py runs the real control plane and fake Node objects; nothing ran the pods
Volcano binds to them. This agent is that node side (issue 37, deliverable 3), as close to
a kubelet as the API lets a stand-in be:

* **who it is**: one process for every fake node, but each node's work goes through that
  node's own client (`pki/node-<node>.{crt,key}`: user `system:node:<node>`, group
  `system:nodes`), so the API server's Node authorizer and `NodeRestriction` limit it to the
  pods bound to that node and the ConfigMaps, Secrets, claims and tokens they reference,
  exactly as they limit a kubelet.
* **what it runs**: a watch on `pods?fieldSelector=spec.nodeName=<node>` per node; each new
  pod gets a sandbox (an infra container holding the pod's network and UTS namespaces, as
  the kubelet's pause container does) on the bed's one podman bridge network, the pod IP
  from the node's own /24 (a per-node podCIDR) so that every pod reaches every other; then
  its init containers in order (each to completion; `restartPolicy: Always` ones are native
  sidecars, started and kept), then the app containers, with the pod spec as the API server
  stored it: env (`value` with `$(VAR)` expansion, `fieldRef`, `resourceFieldRef`,
  `configMapKeyRef` and `secretKeyRef` read from the API, `envFrom`), `command`/`args`,
  `workingDir`, volumes (`persistentVolumeClaim` through its bound PV: a `hostPath` PV is that
  host directory, an `nfs` PV a directory per server:path under the agent's work dir;
  `hostPath` under the node's own root directory, its `type` checked as the kubelet checks
  it; `emptyDir`; `configMap`, `secret` and `downwardAPI` written as the kubelet's atomic
  writer lays them out; `projected` with a real bound service-account token from the
  TokenRequest API), `securityContext` (tests/kubelet_bed.py `security_args`), the
  termination message file, and the probes on their schedule (tests/kubelet_bed.py's
  `ProbeSpec`/`ContainerProbes`, the kubelet's worker.go state machine).
* **the device plugin**: a container gets NPUs only if it requests the node's NPU resource;
  ASCEND_VISIBLE_DEVICES is its allocation; an NPU allocated to an active pod is never
  handed to another, and is free once the pod is no longer active — its phase Succeeded or
  Failed, or deleted with no container running — as the kubelet's device manager frees it
  (`UpdateAllocatedDevices` keeps only `activePods`), not once podman has removed its
  containers, which a loaded machine made seconds later: Volcano had already bound the
  re-created pods there; an init container's devices are reused by the pod's app containers
  (kubernetes pkg/kubelet/cm/devicemanager/manager.go `devicesToReuse`). A pod that cannot
  be given its devices fails with `UnexpectedAdmissionError`, as the kubelet's admission
  fails it.
* **the node's host files**: `<work>/kube-nodes/<node>/root` stands for the node's `/`: the
  driver directory with the fake hccn_tool and its answers, /etc/hccn.conf, the fake
  npu-smi, /usr/local/dcmi, /etc/ascend_install.info. A container sees them only through a
  `hostPath` volume its manifest declares.
* **what it reports**: `pods/<name>/status` (phase, podIP(s), hostIP(s), startTime, the
  PodReadyToStartContainers/Initialized/ContainersReady/Ready conditions, container and init
  container statuses with started/ready, exit codes, reasons and termination messages with
  `FallbackToLogsOnError`).
* **deletion**: a pod with `deletionTimestamp` has its containers stopped with its
  `deletionGracePeriodSeconds` (SIGTERM, then SIGKILL), its final status written, and is
  then deleted with `gracePeriodSeconds: 0` and its UID as precondition — what the kubelet's
  status manager does once a pod's containers are gone. A pod deleted outright (force) has
  its containers removed at once.

Not a kubelet: no image pulls (the images are local), no resource limits but the NPUs, no
container restarts (the manifests use `restartPolicy: Never`; anything else is refused with
the pod failed and the reason in its status), no DNS server (hostname/subdomain set, and
/etc/hosts holds the pod's own name as the kubelet writes it; the manifests need no peer
names), no Service routing (so KUBERNETES_SERVICE_HOST/PORT name the API server on the
bridge's gateway, not the `kubernetes` Service's ClusterIP: `service_env`), no eviction.

    scripts/kube_node_agent.py --run-dir RUN [--work DIR] [--sim-env K=V ...]
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import functools
import json
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.parse
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional

ROOT = Path(__file__).resolve().parent.parent
for _p in (ROOT, ROOT / "scripts"):
    if str(_p) not in sys.path:
        sys.path.insert(0, str(_p))

import container_bed as cb  # noqa: E402
import kube_bed  # noqa: E402
from kube_api import ApiError, Kube  # noqa: E402
from kube_node_logs import LogRequestError, NodeLogs, release_address  # noqa: E402

from tests.kubelet_bed import (  # noqa: E402
    ContainerProbes,
    KubeletError,
    ProbeSpec,
    http_get_probe,
    security_args,
)

NETWORK = "ascend-node-kube-bed"
NETWORK_PREFIX = "10.237."  # node i's pods: 10.237.<i>.2-254 (its podCIDR)
LABEL = "ascend-node-kube-agent"
# The bridge's gateway: the host itself, seen from every pod. The bed's kube-apiserver listens
# there too (scripts/kube_bed.py, its certificate names this IP), so a pod reaches the API
# server at this address instead of the `kubernetes` Service's ClusterIP (no kube-proxy here).
API_HOST = f"{NETWORK_PREFIX}0.1"


def service_env(host: str, port: int) -> dict[str, str]:
    """The `kubernetes` Service's variables as the kubelet writes them into every container
    (pkg/kubelet/envvars/envvars.go FromServices: `<SVC>_SERVICE_HOST`, `_SERVICE_PORT`,
    `_SERVICE_PORT_<PORTNAME>`, the docker-link style `_PORT*`), but naming the address a pod
    of this bed can reach: the API server on the bridge's gateway, not the ClusterIP a
    kube-proxy would route (docs/kube-node-agent.md, "Not a kubelet")."""
    url = f"tcp://{host}:{port}"
    return {"KUBERNETES_SERVICE_HOST": host, "KUBERNETES_SERVICE_PORT": str(port),
            "KUBERNETES_SERVICE_PORT_HTTPS": str(port), "KUBERNETES_PORT": url,
            f"KUBERNETES_PORT_{port}_TCP": url, f"KUBERNETES_PORT_{port}_TCP_PROTO": "tcp",
            f"KUBERNETES_PORT_{port}_TCP_PORT": str(port),
            f"KUBERNETES_PORT_{port}_TCP_ADDR": host}
NPU_PREFIX = "huawei.com/Ascend"
CONFIG_RETRY_S = 10.0  # the kubelet's pod worker back-off after a sync error (kubelet.go)
TERMINATION_MESSAGE_MAX = 4096  # kubelet: MaxContainerTerminationMessageLength
FALLBACK_LOG_BYTES = 2048  # MaxContainerTerminationMessageLogLength
FALLBACK_LOG_LINES = 80  # MaxContainerTerminationMessageLogLines
EXEC_SLACK_S = 5.0
STATUS_RETRY_S = 2.0  # a status the API server did not take: written again after this


class PodError(Exception):
    """The pod cannot run here; `reason` as the kubelet would put it in the status."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


def now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


# ---- pure: env --------------------------------------------------------------------

_ANNOTATION = re.compile(r"^metadata\.(annotations|labels)\['([^']+)'\]$")


def field_value(pod: Mapping[str, Any], path: str) -> str:
    """A downward-API `fieldRef` as the kubelet resolves it for env (podIP etc. from the
    status it is about to report)."""
    meta, spec, status = pod["metadata"], pod["spec"], pod.get("status", {})
    m = _ANNOTATION.match(path)
    if m:
        return str(meta.get(m.group(1), {}).get(m.group(2), ""))
    simple = {
        "metadata.name": meta.get("name"), "metadata.namespace": meta.get("namespace"),
        "metadata.uid": meta.get("uid"), "spec.nodeName": spec.get("nodeName"),
        "spec.serviceAccountName": spec.get("serviceAccountName"),
        "status.hostIP": status.get("hostIP"), "status.podIP": status.get("podIP"),
        "status.hostIPs": ",".join(i["ip"] for i in status.get("hostIPs", [])),
        "status.podIPs": ",".join(i["ip"] for i in status.get("podIPs", [])),
    }
    if path not in simple:
        raise PodError("CreateContainerConfigError", f"fieldRef {path!r} is not supported")
    return str(simple[path] or "")


def expand(value: str, env: Mapping[str, str]) -> str:
    """`$(VAR)` of earlier variables; `$$(VAR)` stays literal `$(VAR)` (kubelet expansion)."""
    def sub(m: re.Match[str]) -> str:
        if m.group(0).startswith("$$"):
            return m.group(0)[1:]
        return env.get(m.group(1), m.group(0))
    return re.sub(r"\$?\$\(([A-Za-z_][A-Za-z0-9_.-]*)\)", sub, value)


def resolve_env(container: Mapping[str, Any], pod: Mapping[str, Any],
                config_map: Callable[[str], Optional[Mapping[str, str]]],
                secret: Callable[[str], Optional[Mapping[str, str]]]) -> dict[str, str]:
    """The container's environment as the kubelet builds it (envFrom first, then env)."""
    out: dict[str, str] = {}
    for src in container.get("envFrom", []):
        ref = src.get("configMapRef") or src.get("secretRef")
        kind = "ConfigMap" if "configMapRef" in src else "Secret"
        data = (config_map if kind == "ConfigMap" else secret)(ref["name"])
        if data is None:
            if ref.get("optional"):
                continue
            raise PodError("CreateContainerConfigError",
                           f"{kind.lower()} {ref['name']!r} not found")
        for k, v in data.items():
            out[src.get("prefix", "") + k] = v
    for item in container.get("env", []):
        name = item["name"]
        if "valueFrom" not in item:
            out[name] = expand(str(item.get("value", "")), out)
            continue
        frm = item["valueFrom"]
        if "fieldRef" in frm:
            out[name] = field_value(pod, frm["fieldRef"]["fieldPath"])
        elif "resourceFieldRef" in frm:
            res = frm["resourceFieldRef"]["resource"]
            kind, _, what = res.partition(".")
            out[name] = str(container.get("resources", {}).get(kind, {}).get(what, "0"))
        elif "configMapKeyRef" in frm or "secretKeyRef" in frm:
            is_cm = "configMapKeyRef" in frm
            ref = frm["configMapKeyRef" if is_cm else "secretKeyRef"]
            data = (config_map if is_cm else secret)(ref["name"])
            kind = "configmap" if is_cm else "secret"
            if data is None or ref["key"] not in data:
                if ref.get("optional"):
                    continue
                what = (f"{kind} {ref['name']!r} not found" if data is None else
                        f"couldn't find key {ref['key']} in {kind} {ref['name']!r}")
                raise PodError("CreateContainerConfigError", what)
            out[name] = data[ref["key"]]
        else:
            raise PodError("CreateContainerConfigError", f"env {name}: {frm} not supported")
    return out


# ---- pure: the device plugin ------------------------------------------------------

def npu_request(container: Mapping[str, Any], resource: str) -> int:
    limits = container.get("resources", {}).get("limits", {})
    return int(limits.get(resource, 0))


class Devices:
    """One node's NPUs: which pod holds which (the device plugin plus the kubelet's
    device manager). Allocation follows devicemanager's `devicesToReuse`: an init
    container's devices go on to the next init containers and to the app containers; a
    device another live pod holds is never handed out."""

    def __init__(self, count: int) -> None:
        self.count = count
        self.held: dict[str, set[int]] = {}  # pod uid -> devices
        self.lock = threading.Lock()

    def allocate(self, uid: str, inits: Sequence[int], apps: Sequence[int]
                 ) -> tuple[list[list[int]], list[list[int]]]:
        """Devices for each init and each app container of one pod (requests in order)."""
        with self.lock:
            taken = set().union(*self.held.values()) if self.held else set()
            free = [d for d in range(self.count) if d not in taken]
            mine: set[int] = set()
            reuse: list[int] = []

            def take(n: int, pool_first: list[int]) -> list[int]:
                got = pool_first[:n]
                rest = [d for d in free if d not in mine and d not in got][:n - len(got)]
                if len(got) + len(rest) < n:
                    raise PodError("UnexpectedAdmissionError",
                                   f"Allocate failed due to requested number of devices "
                                   f"unavailable for {NPU_PREFIX}: requested {n}, "
                                   f"available {len(free) - len(mine)}")
                return sorted([*got, *rest])

            init_out, app_out = [], []
            for n in inits:
                got = take(n, sorted(reuse)) if n else []
                mine.update(got)
                reuse = sorted(set(reuse) | set(got))
                init_out.append(got)
            for n in apps:
                got = take(n, list(reuse)) if n else []
                mine.update(got)
                reuse = [d for d in reuse if d not in got]
                app_out.append(got)
            if mine:
                self.held[uid] = mine
            return init_out, app_out

    def release(self, uid: str) -> None:
        with self.lock:
            self.held.pop(uid, None)


# ---- pure: the status ------------------------------------------------------------

@dataclass
class CState:
    """One container as the status reports it."""

    name: str
    image: str
    cid: str = ""
    started_at: Optional[str] = None
    finished_at: Optional[str] = None
    exit_code: Optional[int] = None
    reason: str = ""
    message: str = ""
    waiting: str = "ContainerCreating"
    waiting_message: str = ""
    ready: bool = False
    started: bool = False

    def status(self) -> dict[str, Any]:
        out: dict[str, Any] = {"name": self.name, "image": self.image,
                               "imageID": self.image, "ready": self.ready,
                               "restartCount": 0, "started": self.started}
        if self.cid:
            out["containerID"] = f"podman://{self.cid}"
        if self.exit_code is not None:
            term: dict[str, Any] = {"exitCode": self.exit_code, "reason": self.reason,
                                    "startedAt": self.started_at,
                                    "finishedAt": self.finished_at}
            if self.message:
                term["message"] = self.message
            if self.cid:
                term["containerID"] = f"podman://{self.cid}"
            out["state"] = {"terminated": term}
        elif self.started_at is not None:
            out["state"] = {"running": {"startedAt": self.started_at}}
        else:
            wait: dict[str, Any] = {"reason": self.waiting}
            if self.waiting_message:
                wait["message"] = self.waiting_message
            out["state"] = {"waiting": wait}
        return out


def phase_of(inits: Sequence[CState], apps: Sequence[CState], failed: bool) -> str:
    """restartPolicy Never: Failed once an init container or any app container failed and
    all app containers ended, Succeeded when all ended 0, Running once one runs."""
    if failed or any(c.exit_code not in (None, 0) for c in inits):
        return "Failed"
    if apps and all(c.exit_code is not None for c in apps):
        return "Succeeded" if all(c.exit_code == 0 for c in apps) else "Failed"
    if any(c.started_at is not None for c in apps):
        return "Running"
    return "Pending"


def conditions(inits: Sequence[CState], sidecars: Sequence[CState],
               apps: Sequence[CState], phase: str, sandbox: bool,
               old: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """PodReadyToStartContainers, Initialized, ContainersReady, Ready (their reasons as
    pkg/kubelet/status/generate.go words them); PodScheduled and others kept as found."""
    t = now()
    before = {c["type"]: c for c in old}

    def cond(kind: str, ok: bool, reason: str = "", message: str = "") -> dict[str, Any]:
        prev = before.get(kind)
        status = "True" if ok else "False"
        c: dict[str, Any] = {"type": kind, "status": status, "lastProbeTime": None,
                             "lastTransitionTime": (prev["lastTransitionTime"]
                                                    if prev and prev["status"] == status
                                                    else t)}
        if not ok and reason:
            c["reason"] = reason
            if message:
                c["message"] = message
        return c
    initialized = all(c.exit_code == 0 for c in inits) and all(s.started for s in sidecars)
    pending_inits = [c.name for c in inits if c.exit_code != 0]
    terminal = phase in ("Succeeded", "Failed")
    not_ready = [c.name for c in (*sidecars, *apps) if not c.ready]
    ready = not terminal and not not_ready and initialized
    reason = "PodCompleted" if terminal else "ContainersNotReady"
    msg = "" if terminal else f"containers with unready status: [{' '.join(not_ready)}]"
    out = [cond("PodReadyToStartContainers", sandbox and not terminal),
           cond("Initialized", initialized or (terminal and not pending_inits),
                "ContainersNotInitialized",
                f"containers with incomplete status: [{' '.join(pending_inits)}]"),
           cond("ContainersReady", ready, reason, msg), cond("Ready", ready, reason, msg)]
    mine = {c["type"] for c in out}
    return [*out, *(dict(c) for c in old if c["type"] not in mine)]


def termination_message(text: str, logs: str, policy: str, exit_code: int) -> str:
    """The message of a terminated container: its file (at most 4 KiB), or with
    FallbackToLogsOnError and a failure, the tail of its log (80 lines, 2 KiB)."""
    text = text[:TERMINATION_MESSAGE_MAX]
    if text.strip() or policy != "FallbackToLogsOnError" or exit_code == 0:
        return text
    tail = "\n".join(logs.splitlines()[-FALLBACK_LOG_LINES:])
    return tail.encode()[-FALLBACK_LOG_BYTES:].decode(errors="replace")


# ---- the node's host files ----------------------------------------------------------



def write_node_root(root: Path, index: int, npus: int, seat: Any = None) -> None:
    """A fake Ascend node's `/`: the container bed's host files (`cb.write_node_root`: the
    driver directory with the fake hccn_tool, /etc/hccn.conf, the fake npu-smi,
    /usr/local/dcmi, /etc/ascend_install.info, at the paths the manifests' hostPath volumes
    name) and, in the driver directory, the fake tools' answers for this node (sim-data).
    `seat` (a `SuperPodSeat`): an Atlas A3 node, whose npu-smi answers its super pod and
    each device's SDID, as the simulator's A3 nodes do (`sim.cluster`)."""
    from ascend_node.sim.cluster import device_ip, sdid
    from ascend_node.sim.fake_tools import FakeDevice, write_node_data

    cb.write_node_root(root, "".join(f"address_{d}={device_ip(index, d)}\n"
                                     f"netmask_{d}=255.255.255.0\n" for d in range(npus)))
    write_node_data(root / "usr/local/Ascend/driver/sim-data",
                    [FakeDevice(d, device_ip(index, d),
                                sdid=sdid(seat, d) if seat is not None else None)
                     for d in range(npus)], seat)


def a3_seat(node: Mapping[str, Any], index: int, count: int) -> Any:
    """The super-pod seat of a node labelled as an A3 super-pod server (the bed's `up --a3`,
    MindCluster's `accelerator-type` label), else None: every such node of the bed in super
    pod 0, seated by its index."""
    from ascend_node.sim.fake_tools import SuperPodSeat

    labels = node.get("metadata", {}).get("labels") or {}
    if not str(labels.get("accelerator-type", "")).startswith("module-a3-"):
        return None
    return SuperPodSeat(super_pod_id=0, size=count, server_index=index)


def atomic_dir(host: Path, files: Mapping[str, bytes], mode: int,
               group: Optional[int]) -> None:
    """The kubelet's atomic writer layout: files in a timestamped directory, `..data` a
    symlink to it, each top-level entry a symlink through `..data`."""
    shutil.rmtree(host, ignore_errors=True)
    stamp = host / time.strftime("..%Y_%m_%d_%H_%M_%S.000000001")
    stamp.mkdir(parents=True)
    tops = set()
    for rel, data in files.items():
        target = stamp / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
        target.chmod(mode)
        if group is not None:
            os.chown(target, -1, group)
        tops.add(rel.split("/", 1)[0])
    (host / "..data").symlink_to(stamp.name)
    for top in sorted(tops):
        (host / top).symlink_to(f"..data/{top}")
    host.chmod(0o755)


# ---- the door: a pod in podman ---------------------------------------------------------

@dataclass
class Node:
    name: str
    index: int
    kube: Kube
    root: Path
    devices: Devices
    resource: str
    host_ip: str
    ips: set[int] = field(default_factory=set)
    last_ip: int = 1
    lock: threading.Lock = field(default_factory=threading.Lock)

    def take_ip(self) -> str:
        """The next free address after the last one handed out, as CNI's host-local IPAM
        allocates (a re-created pod gets a new address, not the one just freed)."""
        with self.lock:
            order = [*range(self.last_ip + 1, 255), *range(2, self.last_ip + 1)]
            host = next(i for i in order if i not in self.ips)
            self.ips.add(host)
            self.last_ip = host
        return f"{NETWORK_PREFIX}{self.index}.{host}"

    def free_ip(self, ip: str) -> None:
        with self.lock:
            self.ips.discard(int(ip.rsplit(".", 1)[1]))


class PodWorker:
    """One pod from admission to its confirmed deletion."""

    def __init__(self, agent: Agent, node: Node, pod: dict[str, Any]) -> None:
        self.agent, self.node, self.pod = agent, node, pod
        meta = pod["metadata"]
        self.ns, self.name, self.uid = meta["namespace"], meta["name"], meta["uid"]
        self.key = f"{self.ns}/{self.name}"
        self.prefix = f"kb_{self.ns}_{self.name}_{self.uid[:8]}"
        self.dir = agent.work / "kube-pods" / self.uid
        spec = pod["spec"]
        self.init_specs = [c for c in spec.get("initContainers", [])
                           if c.get("restartPolicy") != "Always"]
        self.sidecar_specs = [c for c in spec.get("initContainers", [])
                              if c.get("restartPolicy") == "Always"]
        self.app_specs = list(spec["containers"])
        self.inits = [CState(c["name"], c["image"], waiting="PodInitializing")
                      for c in self.init_specs]
        self.sidecars = [CState(c["name"], c["image"], waiting="PodInitializing")
                         for c in self.sidecar_specs]
        self.apps = [CState(c["name"], c["image"], waiting="PodInitializing"
                            if spec.get("initContainers") else "ContainerCreating")
                     for c in self.app_specs]
        if not spec.get("initContainers"):
            for c in self.apps:
                c.waiting = "ContainerCreating"
        self.ip = ""
        self.sandbox = False
        self.failed: Optional[tuple[str, str]] = None  # (reason, message) of the pod
        self.lock = threading.RLock()
        self.stop = threading.Event()  # deletion began: nothing new starts
        self.gone = threading.Event()  # the pod object is gone: threads end
        self.probes: dict[str, ContainerProbes] = {}
        self.wakes: dict[tuple[str, str], threading.Event] = {}
        self.started_mono: dict[str, float] = {}
        self.start_time = now()
        self._published: Optional[str] = None
        self._prepared: dict[str, Path] = {}
        self.cleanup_lock = threading.Lock()
        self.cleaned = False

    # -- reads from the API, as this node ------------------------------------------
    def _get(self, kind: str, name: str) -> Optional[dict[str, Any]]:
        plural = {"ConfigMap": "configmaps", "Secret": "secrets",
                  "PersistentVolumeClaim": "persistentvolumeclaims"}[kind]
        try:
            return dict(self.node.kube.get(f"/api/v1/namespaces/{self.ns}/{plural}/{name}"))
        except ApiError as e:
            if e.status == 404:
                return None
            raise

    def config_map(self, name: str) -> Optional[dict[str, str]]:
        obj = self._get("ConfigMap", name)
        if obj is None:
            return None
        return {**obj.get("data", {}),
                **{k: base64.b64decode(v).decode() for k, v in obj.get("binaryData", {}).items()}}

    def secret(self, name: str) -> Optional[dict[str, str]]:
        obj = self._get("Secret", name)
        if obj is None:
            return None
        return {k: base64.b64decode(v).decode("utf-8", "replace")
                for k, v in obj.get("data", {}).items()}

    def _secret_bytes(self, name: str) -> Optional[dict[str, bytes]]:
        obj = self._get("Secret", name)
        if obj is None:
            return None
        return {k: base64.b64decode(v) for k, v in obj.get("data", {}).items()}

    # -- the lifecycle ---------------------------------------------------------------
    def run(self) -> None:
        try:
            self._run()
        except PodError as e:
            with self.lock:
                self.failed = (e.reason, str(e))
                for c in [*self.inits, *self.sidecars, *self.apps]:
                    if c.started_at is None and c.exit_code is None:
                        c.waiting, c.waiting_message = e.reason, str(e)
            self.agent.log(f"{self.key}: {e.reason}: {e}")
            self.publish()
        except Exception as e:  # anything else: the pod fails, saying why
            with self.lock:
                self.failed = ("Error", str(e))
            self.agent.log(f"{self.key}: failed: {e}")
            self.publish()

    def _run(self) -> None:
        spec = self.pod["spec"]
        if spec.get("restartPolicy", "Always") != "Never":
            raise PodError("Unsupported", f"restartPolicy {spec.get('restartPolicy')!r}: the "
                           "kube bed's node agent runs restartPolicy Never pods only")
        res = self.node.resource
        init_devs, app_devs = self.node.devices.allocate(
            self.uid, [npu_request(c, res) for c in self.init_specs + self.sidecar_specs],
            [npu_request(c, res) for c in self.app_specs])
        self.devices = {c["name"]: d for c, d in
                        zip([*self.init_specs, *self.sidecar_specs, *self.app_specs],
                            [*init_devs, *app_devs])}
        self.ip = self.node.take_ip()
        self.pod.setdefault("status", {}).update(
            {"podIP": self.ip, "podIPs": [{"ip": self.ip}], "hostIP": self.node.host_ip,
             "hostIPs": [{"ip": self.node.host_ip}]})
        shutil.rmtree(self.dir, ignore_errors=True)
        self.dir.mkdir(parents=True)
        self.write_hosts()
        # all containers' podman arguments before any runs: a missing reference leaves the
        # pod Pending, its containers waiting `CreateContainerConfigError`, and is tried again
        # after the pod worker's back-off, as the kubelet does (kubernetes v1.30.2
        # pkg/kubelet/pod_workers.go: a sync error requeues the pod after `backOffPeriod`,
        # 10 s in kubelet.go) — not a failed pod: Volcano would restart the whole job.
        containers = [*self.inits, *self.sidecars, *self.apps]
        first = [(c.waiting, c.waiting_message) for c in containers]
        while True:
            try:
                argvs = self.prepare()
                break
            except PodError as e:
                if e.reason != "CreateContainerConfigError":
                    raise
                with self.lock:
                    for c in containers:
                        c.waiting, c.waiting_message = e.reason, str(e)
                self.agent.log(f"{self.key}: {e.reason}: {e}; tried again in "
                               f"{CONFIG_RETRY_S:g} s")
                self.publish()
                if self.stop.wait(CONFIG_RETRY_S):
                    return
        with self.lock:
            for c, (waiting, message) in zip(containers, first):
                c.waiting, c.waiting_message = waiting, message
        self.slow_pull()
        if self.stop.is_set():
            return
        self.sandbox_up()
        self.publish()
        for c, st in zip(self.init_specs, self.inits):
            if self.stop.is_set():
                return
            self.start(c, st, argvs[c["name"]], probed=False)
            code = self.wait_container(c, st)
            if code != 0:
                with self.lock:
                    for a in self.apps:
                        a.waiting = "PodInitializing"
                self.publish()
                return
        for c, st in zip(self.sidecar_specs, self.sidecars):
            if self.stop.is_set():
                return
            self.start(c, st, argvs[c["name"]])
            self.spawn(self.watch_sidecar, c, st)
        for c, st in zip(self.app_specs, self.apps):
            if self.stop.is_set():
                return
            self.start(c, st, argvs[c["name"]])
        waits = [self.spawn(self.wait_container, c, st)
                 for c, st in zip(self.app_specs, self.apps)]
        for t in waits:
            t.join()
        if self.sidecar_specs and not self.stop.is_set():
            # the kubelet ends the sidecars once every app container ended
            self.agent.podman("stop", "-t", "5", *(self.cname(c) for c in self.sidecar_specs),
                              check=False, timeout=60)

    def slow_pull(self) -> None:
        """The images are local, so no pull takes time - unless a test says one does:
        `<work>/kube-nodes/slow-pulls/<namespace>_<pod>` holding seconds makes this pod's
        next start wait that long in ContainerCreating (then the file is gone: one slow
        pull), as a node pulling a large image would."""
        mark = self.agent.work / "kube-nodes" / "slow-pulls" / f"{self.ns}_{self.name}"
        try:
            seconds = float(mark.read_text())
            mark.unlink()
        except (OSError, ValueError):
            return
        self.agent.log(f"{self.key}: pulling its image takes {seconds:g} s (slow-pulls)")
        self.stop.wait(seconds)

    def prepare(self) -> dict[str, list[str]]:
        """Every container's `podman run`, retried while the Node authorizer does not yet
        know the pod's references: its graph follows the API from informers, so a pod just
        bound may be refused its ConfigMap, Secret, claim or token for a moment ("no
        relationship found between node ... and this object"); the kubelet's volume
        manager and sync loop retry the same way."""
        deadline = time.monotonic() + 60
        while True:
            try:
                return {c["name"]: self.run_argv(c, kind)
                        for kind, group in (("init", self.init_specs),
                                            ("sidecar", self.sidecar_specs),
                                            ("app", self.app_specs)) for c in group}
            except ApiError as e:
                if e.status != 403 or time.monotonic() > deadline or self.stop.is_set():
                    raise
                self._prepared.clear()
                time.sleep(0.5)

    def spawn(self, target: Callable[..., Any], *args: Any) -> threading.Thread:
        t = threading.Thread(target=target, args=args, daemon=True)
        t.start()
        return t

    def cname(self, c: Mapping[str, Any]) -> str:
        return f"{self.prefix}_{c['name']}"

    def write_hosts(self) -> None:
        """The kubelet's managed /etc/hosts (kubelet_pods.go managedHostsFileContent):
        the pod's own IP with its hostname (and FQDN under a subdomain)."""
        spec = self.pod["spec"]
        hostname = spec.get("hostname") or self.name
        hosts = self.dir / "etc-hosts"
        fqdn = (f"{hostname}.{spec['subdomain']}.{self.ns}.svc.cluster.local"
                if spec.get("subdomain") else "")
        hosts.write_text("# Kubernetes-managed hosts file.\n127.0.0.1\tlocalhost\n"
                         "::1\tlocalhost ip6-localhost ip6-loopback\n"
                         f"{self.ip}\t{fqdn + chr(9) if fqdn else ''}{hostname}\n")
        hosts.chmod(0o644)
        self.hosts = hosts

    def sandbox_up(self) -> None:
        """The infra container: the pod's network namespace (its IP on the bed network)
        and UTS namespace (hostname), which every container of the pod joins."""
        spec = self.pod["spec"]
        hostname = spec.get("hostname") or self.name
        image = self.app_specs[0]["image"]
        self.agent.podman("run", "-d", "--name", f"{self.prefix}_POD", "--label", LABEL,
                          "--label", f"kube-pod={self.key}", "--hostname", hostname,
                          "--network", NETWORK, "--ip", self.ip,
                          *self.agent.bed.cgroup_args(f"{self.prefix}_POD"),
                          "--entrypoint", '["sleep", "infinity"]', image, timeout=120)
        with self.lock:
            self.sandbox = True

    def run_argv(self, c: Mapping[str, Any], kind: str) -> list[str]:
        spec = self.pod["spec"]
        # the Service variables first, the container's own env over them (the kubelet's order)
        env = {**self.agent.service_env,
               **resolve_env(c, self.pod, self.config_map, self.secret)}
        devs = self.devices.get(c["name"], [])
        if devs:
            env["ASCEND_VISIBLE_DEVICES"] = ",".join(str(d) for d in devs)
        for k, v in self.agent.sim_env.items():
            task = self.pod["metadata"].get("annotations", {}).get("volcano.sh/task-spec", "")
            env[k] = v.format(pod=self.name, namespace=self.ns, node=self.node.name, task=task)
        try:
            sec_args, fs_group = security_args(spec.get("securityContext", {}),
                                               c.get("securityContext", {}))
        except KubeletError as e:
            raise PodError("CreateContainerConfigError", str(e)) from None
        name = self.cname(c)
        grace = int(spec.get("terminationGracePeriodSeconds", 30))
        infra = f"container:{self.prefix}_POD"
        argv = ["run", "-d", "--name", name, "--network", infra, "--uts", infra,
                "--label", LABEL, "--label", f"kube-pod={self.key}",
                f"--stop-timeout={grace}", *self.agent.bed.cgroup_args(name), *sec_args,
                "-v", f"{self.hosts}:/etc/hosts:ro"]
        if c.get("workingDir"):
            argv += ["--workdir", str(c["workingDir"])]
        volumes = {v["name"]: v for v in spec.get("volumes", [])}
        for m in c.get("volumeMounts", []):
            vol = volumes.get(m["name"])
            if vol is None:
                raise PodError("CreateContainerConfigError",
                               f"volumeMount {m['name']!r} has no volume")
            argv += self.mount(vol, m, fs_group)
        term = self.dir / f"termination-{c['name']}"
        term.write_text("")
        term.chmod(0o666)
        argv += ["-v", f"{term}:{c.get('terminationMessagePath', '/dev/termination-log')}"]
        for key, value in env.items():
            argv += ["-e", f"{key}={value}"]
        if "command" in c:
            argv += ["--entrypoint", json.dumps([expand(a, env) for a in c["command"]])]
        return [*argv, c["image"], *(expand(a, env) for a in c.get("args", []))]

    def mount(self, vol: Mapping[str, Any], m: Mapping[str, Any], fs_group: Any) -> list[str]:
        inner, ro = m["mountPath"], ":ro" if m.get("readOnly") else ""
        sub = str(m.get("subPath", ""))
        if "emptyDir" in vol and vol["emptyDir"].get("medium") == "Memory":
            if inner == "/dev/shm" and not sub:
                size = str(vol["emptyDir"].get("sizeLimit", "1g")).lower()
                return ["--shm-size", size.replace("gi", "g").replace("mi", "m")]
            return ["--tmpfs", f"{inner}:rw,mode=1777"]
        source, ro = self.volume_source(vol, fs_group, ro)
        if sub:
            source = source / sub
            if not source.exists():
                if any(k in vol for k in ("secret", "configMap", "projected", "downwardAPI")):
                    raise PodError("CreateContainerConfigError",
                                   f"volume {vol['name']!r} has no entry {sub!r}")
                source.mkdir(parents=True)
            source = source.resolve()
        return ["-v", f"{source}:{inner}{ro}"]

    def volume_source(self, vol: Mapping[str, Any], fs_group: Any, ro: str
                      ) -> tuple[Path, str]:
        name = str(vol["name"])
        group = int(fs_group) if fs_group is not None else None
        if "persistentVolumeClaim" in vol:
            claim = vol["persistentVolumeClaim"]["claimName"]
            pvc = self._get("PersistentVolumeClaim", claim)
            if pvc is None or pvc.get("status", {}).get("phase") != "Bound":
                raise PodError("ContainerCreating", f"persistentvolumeclaim {claim!r} not bound")
            pv = self.node.kube.get(f"/api/v1/persistentvolumes/{pvc['spec']['volumeName']}")
            return self.agent.pv_dir(pv), ro or (
                ":ro" if vol["persistentVolumeClaim"].get("readOnly") else "")
        if "hostPath" in vol:
            path, kind = vol["hostPath"]["path"], vol["hostPath"].get("type", "")
            host = self.node.root / path.lstrip("/")
            checks = {"File": host.is_file, "Directory": host.is_dir,
                      "Socket": host.is_socket}
            if kind in checks and not checks[kind]():
                raise PodError("ContainerCreating", f"MountVolume.SetUp failed for volume "
                               f"{name!r}: hostPath type check failed: {path} is not a "
                               f"{kind.lower()}")
            if kind == "DirectoryOrCreate":
                host.mkdir(parents=True, exist_ok=True)
            if kind == "FileOrCreate" and not host.exists():
                host.parent.mkdir(parents=True, exist_ok=True)
                host.touch()
            if not host.exists():
                host.mkdir(parents=True)  # type "" creates a missing directory (docker)
            return host, ro
        if "emptyDir" in vol:
            host = self.dir / "empty-dir" / name
            if not host.exists():
                host.mkdir(parents=True)
                host.chmod(0o777)
                if group is not None:
                    os.chown(host, -1, group)
            return host, ro
        if name in self._prepared:
            return self._prepared[name], ":ro"
        host = self.dir / "volumes" / name
        files: dict[str, bytes]
        if "configMap" in vol or "secret" in vol:
            is_cm = "configMap" in vol
            src = vol["configMap" if is_cm else "secret"]
            ref = src["name"] if is_cm else src["secretName"]
            text = self.config_map(ref) if is_cm else None
            data = ({k: v.encode() for k, v in text.items()} if text is not None else None
                    ) if is_cm else self._secret_bytes(ref)
            if data is None:
                if src.get("optional"):
                    data = {}
                else:
                    raise PodError("ContainerCreating", f"MountVolume.SetUp failed for volume "
                                   f"{name!r}: {'configmap' if is_cm else 'secret'} "
                                   f"{ref!r} not found")
            files = self.items(data or {}, src.get("items"), name)
            mode = int(src.get("defaultMode", 0o644))
        elif "projected" in vol:
            files, mode = {}, int(vol["projected"].get("defaultMode", 0o644))
            for source in vol["projected"]["sources"]:
                files.update(self.projected(source, name))
        elif "downwardAPI" in vol:
            mode = int(vol["downwardAPI"].get("defaultMode", 0o644))
            files = {i["path"]: field_value(self.pod, i["fieldRef"]["fieldPath"]).encode()
                     for i in vol["downwardAPI"]["items"]}
        else:
            raise PodError("ContainerCreating", f"volume {name!r}: {sorted(vol)} is not a "
                           "kind the kube bed's node agent mounts")
        atomic_dir(host, files, mode, group)
        self._prepared[name] = host
        return host, ":ro"

    def items(self, data: Mapping[str, bytes], items: Any, vol: str) -> dict[str, bytes]:
        if not items:
            return dict(data)
        out = {}
        for item in items:
            if item["key"] not in data:
                raise PodError("ContainerCreating", f"MountVolume.SetUp failed for volume "
                               f"{vol!r}: key {item['key']!r} not found")
            out[item["path"]] = data[item["key"]]
        return out

    def projected(self, source: Mapping[str, Any], vol: str) -> dict[str, bytes]:
        if "serviceAccountToken" in source:
            tok = source["serviceAccountToken"]
            sa = self.pod["spec"].get("serviceAccountName", "default")
            req: dict[str, Any] = {"expirationSeconds": int(tok.get("expirationSeconds", 3607)),
                                   "boundObjectRef": {"apiVersion": "v1", "kind": "Pod",
                                                      "name": self.name, "uid": self.uid}}
            if tok.get("audience"):
                req["audiences"] = [tok["audience"]]
            body = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
                    "spec": req}
            got = self.node.kube.create(
                f"/api/v1/namespaces/{self.ns}/serviceaccounts/{sa}/token", body)
            return {tok["path"]: got["status"]["token"].encode()}
        if "configMap" in source:
            src = source["configMap"]
            data = self.config_map(src["name"])
            if data is None:
                if src.get("optional"):
                    return {}
                raise PodError("ContainerCreating", f"configmap {src['name']!r} not found")
            return self.items({k: v.encode() for k, v in data.items()}, src.get("items"), vol)
        if "secret" in source:
            src = source["secret"]
            sdata = self._secret_bytes(src["name"])
            if sdata is None:
                if src.get("optional"):
                    return {}
                raise PodError("ContainerCreating", f"secret {src['name']!r} not found")
            return self.items(sdata, src.get("items"), vol)
        if "downwardAPI" in source:
            return {i["path"]: field_value(self.pod, i["fieldRef"]["fieldPath"]).encode()
                    for i in source["downwardAPI"]["items"]}
        raise PodError("ContainerCreating", f"projected source {sorted(source)} not supported")

    # -- containers ------------------------------------------------------------------
    def start(self, c: Mapping[str, Any], st: CState, argv: list[str],
              probed: bool = True) -> None:
        """Run one container; an app container or sidecar gets its probe workers (an
        init container has none and is never ready)."""
        cid = self.agent.podman(*argv, timeout=120).stdout.strip()
        try:
            specs = ProbeSpec.of(c) if probed else []
        except KubeletError as e:
            raise PodError("CreateContainerConfigError", str(e)) from None
        with self.lock:
            st.cid, st.started_at = cid[:64], now()
            self.started_mono[c["name"]] = time.monotonic()
            self.probes[c["name"]] = ContainerProbes(specs)
            st.started = self.probes[c["name"]].started
            st.ready = probed and self.probes[c["name"]].ready
            for s in specs:
                self.wakes[(c["name"], s.kind)] = threading.Event()
        self.publish()
        for s in specs:
            self.spawn(self.probe_worker, c, st, s.kind)

    def wait_container(self, c: Mapping[str, Any], st: CState) -> int:
        name = self.cname(c)
        while not self.gone.is_set():
            done = self.agent.podman("wait", name, check=False, timeout=24 * 3600)
            lines = done.stdout.strip().splitlines()
            if done.returncode == 0 and lines and lines[-1].lstrip("-").isdigit():
                code = int(lines[-1])
                self.terminated(c, st, code)
                return code
            if self.gone.is_set():
                break
            time.sleep(0.5)
        return -1

    def terminated(self, c: Mapping[str, Any], st: CState, code: int) -> None:
        info = self.agent.podman("inspect", "--type", "container", "--format",
                                 "{{.State.FinishedAt}}|{{.State.OOMKilled}}",
                                 self.cname(c), check=False).stdout.strip()
        oom = info.endswith("|true")
        text = (self.dir / f"termination-{c['name']}").read_text(errors="replace")
        logs = ""
        if not text.strip() and code != 0:
            done = self.agent.podman("logs", self.cname(c), check=False)
            logs = done.stdout + done.stderr
        message = termination_message(text, logs, c.get("terminationMessagePolicy", "File"),
                                      code)
        with self.lock:
            st.exit_code, st.finished_at = code, now()
            st.reason = "OOMKilled" if oom else "Completed" if code == 0 else "Error"
            st.message, st.ready = message, False
            self.agent.log(f"{self.key}/{c['name']}: exited {code} ({st.reason})"
                           + (f": {message.strip()[-300:]}" if message.strip() else ""))
            for ev in [e for (cn, _), e in self.wakes.items() if cn == c["name"]]:
                ev.set()
        self.publish()

    def watch_sidecar(self, c: Mapping[str, Any], st: CState) -> None:
        """restartPolicy Always: a sidecar that ends while the app containers run is
        started again."""
        name = self.cname(c)
        while not self.stop.is_set() and not self.gone.is_set():
            done = self.agent.podman("wait", name, check=False, timeout=24 * 3600)
            if self.stop.is_set() or all(a.exit_code is not None for a in self.apps):
                return
            if done.returncode == 0:
                self.agent.podman("start", name, check=False, timeout=60)
            else:
                time.sleep(0.5)

    def probe_worker(self, c: Mapping[str, Any], st: CState, kind: str) -> None:
        state = self.probes[c["name"]]
        worker = state.workers[kind]
        wake = self.wakes[(c["name"], kind)]
        t0 = self.started_mono[c["name"]]
        while not self.stop.is_set() and st.exit_code is None:
            tick = time.monotonic()
            with self.lock:
                wants = worker.wants(state.started, tick - t0)
            if wants:
                ok, said = self.probe(c, worker.spec)
                with self.lock:
                    if st.exit_code is not None or self.stop.is_set():
                        return
                    kill, started = state.record(kind, ok)
                    st.started, st.ready = state.started, state.ready
                if started and (c["name"], "readiness") in self.wakes:
                    self.wakes[(c["name"], "readiness")].set()  # prober_manager's immediate run
                self.publish()
                if kill:
                    self.agent.log(f"{self.key}/{c['name']}: {kind} probe failed "
                                   f"{worker.spec.failure_threshold} times ({said}): killing")
                    grace = int(self.pod["spec"].get("terminationGracePeriodSeconds", 30))
                    self.agent.podman("stop", "-t", str(grace), self.cname(c), check=False,
                                      timeout=grace + 60)
                    return
            wake.wait(max(0.0, tick + worker.spec.period - time.monotonic()))
            wake.clear()

    def probe(self, c: Mapping[str, Any], spec: ProbeSpec) -> tuple[bool, str]:
        handler = spec.handler
        if "exec" in handler:
            argv = [str(a) for a in handler["exec"]["command"]]
            try:
                done = subprocess.run(["podman", "exec", self.cname(c), *argv],
                                      env=self.agent.bed.env, capture_output=True, text=True,
                                      timeout=spec.timeout + EXEC_SLACK_S,
                                      stdin=subprocess.DEVNULL)
            except subprocess.TimeoutExpired:
                return False, f"{shlex.join(argv)}: timed out after {spec.timeout} s"
            line = (done.stdout.strip().splitlines() or done.stderr.strip().splitlines()
                    or [""])[0]
            return done.returncode == 0, f"exit {done.returncode}: {line[:160]}"
        port = self.port(c, (handler.get("httpGet") or handler["tcpSocket"])["port"])
        if "tcpSocket" in handler:
            try:
                socket.create_connection((self.ip, port), spec.timeout).close()
                return True, "connected"
            except OSError as exc:
                return False, str(exc)
        get = handler["httpGet"]
        return http_get_probe(get, get.get("host") or self.ip, port, spec.timeout)

    @staticmethod
    def port(c: Mapping[str, Any], port: Any) -> int:
        if isinstance(port, int) or str(port).isdigit():
            return int(port)
        for p in c.get("ports", []):
            if p.get("name") == port:
                return int(p["containerPort"])
        raise PodError("Error", f"named port {port!r} is not a containerPort")

    # -- status ----------------------------------------------------------------------
    def status(self) -> dict[str, Any]:
        with self.lock:
            phase = phase_of(self.inits, self.apps, self.failed is not None)
            out: dict[str, Any] = {
                "phase": phase, "startTime": self.start_time,
                "conditions": conditions(self.inits, self.sidecars, self.apps, phase,
                                         self.sandbox,
                                         self.pod.get("status", {}).get("conditions", [])),
                "containerStatuses": [c.status() for c in self.apps],
            }
            if self.init_specs or self.sidecar_specs:
                out["initContainerStatuses"] = [c.status() for c in
                                                [*self.inits, *self.sidecars]]
            if self.ip:
                out.update(podIP=self.ip, podIPs=[{"ip": self.ip}],
                           hostIP=self.node.host_ip, hostIPs=[{"ip": self.node.host_ip}])
            if self.failed is not None and phase == "Failed":
                out["reason"], out["message"] = self.failed
            out["qosClass"] = self.pod.get("status", {}).get("qosClass", "BestEffort")
            return out

    def publish(self) -> None:
        """PATCH pods/<name>/status when the status changed (a merge patch: the lists
        are written whole)."""
        with self.agent.publish_lock(self.uid):
            status = self.status()
            text = json.dumps(status, sort_keys=True)
            if text == self._published or self.gone.is_set():
                return
            try:
                got = self.node.kube.merge_patch(
                    f"/api/v1/namespaces/{self.ns}/pods/{self.name}/status",
                    {"metadata": {"uid": self.uid}, "status": status})
                self._published = text
                self.pod["status"] = got.get("status", status)
                if status.get("phase") in ("Succeeded", "Failed"):
                    self.node.devices.release(self.uid)  # no longer an active pod
            except ApiError as e:
                if e.status not in (404, 409):
                    self.agent.log(f"{self.key}: status not written: {e}")
            except OSError as e:
                # The API server does not answer (restarted, tests/test_kube_rdzv_jobs.py):
                # try again shortly, as the kubelet's status manager syncs again.
                self.agent.log(f"{self.key}: status not written, retried in "
                               f"{STATUS_RETRY_S:g} s: {e}")
                retry = threading.Timer(STATUS_RETRY_S, self.publish)
                retry.daemon = True
                retry.start()

    # -- deletion --------------------------------------------------------------------
    def terminate(self, grace: int) -> None:
        """A graceful deletion: stop (SIGTERM, SIGKILL after `grace`), report, confirm."""
        self.stop.set()
        for ev in self.wakes.values():
            ev.set()
        names = [self.cname(c) for c, st in zip([*self.app_specs, *self.sidecar_specs,
                                                 *self.init_specs],
                                                [*self.apps, *self.sidecars, *self.inits])
                 if st.cid and st.exit_code is None]
        if names:
            self.agent.podman("stop", "-t", str(grace), *names, check=False,
                              timeout=grace + 60)
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline and any(
                    st.cid and st.exit_code is None for st in [*self.apps, *self.inits]):
                time.sleep(0.2)
        with self.lock:
            for st in [*self.apps, *self.sidecars, *self.inits]:
                if st.exit_code is None and st.started_at is not None:
                    st.exit_code, st.finished_at, st.reason = 137, now(), "Error"
                st.ready = False
        self.publish()
        self.node.devices.release(self.uid)  # deleted, no container running: not active
        try:
            self.node.kube.request(
                "DELETE", f"/api/v1/namespaces/{self.ns}/pods/{self.name}",
                json.dumps({"gracePeriodSeconds": 0,
                            "preconditions": {"uid": self.uid}}).encode())
        except ApiError as e:
            if e.status not in (404, 409):
                self.agent.log(f"{self.key}: deletion not confirmed: {e}")
        self.cleanup()

    def cleanup(self) -> None:
        """The pod object is gone: remove its containers, free its IP and devices (once;
        a second caller waits for the first: the IP is free only once podman let go)."""
        with self.cleanup_lock:
            if not self.cleaned:
                self._cleanup()
                self.cleaned = True

    def _cleanup(self) -> None:
        self.node.devices.release(self.uid)  # the pod object is gone: not an active pod
        self.stop.set()
        self.gone.set()
        for ev in self.wakes.values():
            ev.set()
        names = [self.cname(c) for c in [*self.app_specs, *self.sidecar_specs,
                                         *self.init_specs]]
        for group in (names, [f"{self.prefix}_POD"]):  # the sandbox last: the others join it
            done = self.agent.podman("rm", "-f", "-i", "-t", "0", *group, check=False,
                                     timeout=120)
            if done.returncode != 0:
                self.agent.log(f"{self.key}: podman rm: {done.stderr.strip()[-300:]}")
        if self.ip:
            self.node.free_ip(self.ip)
        shutil.rmtree(self.dir, ignore_errors=True)


class Agent:
    """Every fake node of one kube bed, each through its own identity."""

    def __init__(self, run: Path, work: Path, sim_env: Mapping[str, str]) -> None:
        self.run, self.work = run, work
        self.bed = cb.Bed(work)
        self.bed.configure()
        self.sim_env = dict(sim_env)
        self.workers: dict[str, PodWorker] = {}  # by uid
        self.lock = threading.Lock()
        self._publish_locks: dict[str, threading.Lock] = {}
        self.stopping = threading.Event()
        state = json.loads((run / "state.json").read_text())
        self.service_env = service_env(API_HOST, int(state["ports"]["kube-apiserver"]))
        self.nodes: list[Node] = []
        for i, name in enumerate(state["nodes"]):
            kube = kube_bed.client(run, f"node-{name}")
            obj = kube.get(f"/api/v1/nodes/{name}")
            npu = [k for k in obj["status"]["capacity"] if k.startswith(NPU_PREFIX)]
            resource = npu[0] if npu else f"{NPU_PREFIX}910"
            count = int(obj["status"]["capacity"].get(resource, 0))
            # The kubelet sets its node's addresses (kubelet_node_status.go setNodeAddress)
            # from the host's interfaces; a fake node's "host" is its podCIDR's .1, which
            # is not loopback (the agent in every pod refuses a loopback K8S_HOST_IP).
            host_ip = f"{NETWORK_PREFIX}{i}.1"
            kube.merge_patch(f"/api/v1/nodes/{name}/status", {"status": {"addresses": [
                {"type": "InternalIP", "address": host_ip},
                {"type": "Hostname", "address": name}]}})
            root = work / "kube-nodes" / name / "root"
            shutil.rmtree(root, ignore_errors=True)
            write_node_root(root, i, count, a3_seat(obj, i, len(state["nodes"])))
            self.nodes.append(Node(name, i, kube, root, Devices(count), resource, host_ip))

    def log(self, line: str) -> None:
        print(f"{time.strftime('%H:%M:%S')} {line}", flush=True)

    def podman(self, *args: str, timeout: float = 120, check: bool = True
               ) -> subprocess.CompletedProcess[str]:
        return self.bed.podman(*args, timeout=timeout, check=check)

    def publish_lock(self, uid: str) -> threading.Lock:
        with self.lock:
            return self._publish_locks.setdefault(uid, threading.Lock())

    def pv_dir(self, pv: Mapping[str, Any]) -> Path:
        """A PV's data on this one machine: a hostPath PV is that directory; an NFS PV a
        directory per server and export under the work dir (every fake node sees the
        same one, as every node mounts the same export)."""
        spec = pv["spec"]
        if "hostPath" in spec:
            path = Path(str(spec["hostPath"]["path"]))
            path.mkdir(parents=True, exist_ok=True)
            return path
        if "nfs" in spec:
            path = self.work / "kube-pvs" / str(spec["nfs"]["server"]) / str(
                spec["nfs"]["path"]).strip("/")
            path.mkdir(parents=True, exist_ok=True)
            return path
        raise PodError("ContainerCreating", f"PersistentVolume {pv['metadata']['name']!r}: "
                       "only hostPath and nfs volumes are mounted by the kube bed")

    def setup(self) -> None:
        """A clean slate: what a previous agent left is removed, the network made."""
        # The nodes' addresses an agent killed before its exit put on `lo` (the log
        # endpoint's /32s, kube_node_logs.hold_address): left there, podman refuses the
        # bed's subnet as "already used on the host" (seen with the first agent killed
        # after its grace on a loaded machine). Only a /32 on `lo` is deleted.
        for node in self.nodes:
            release_address(node.host_ip)
        self.teardown()
        self.podman("network", "create", "--label", LABEL, "--subnet",
                    f"{NETWORK_PREFIX}0.0/16", NETWORK)

    def teardown(self) -> None:
        ids = self.podman("ps", "-aq", "--filter", f"label={LABEL}", check=False).stdout
        if ids.split():
            self.podman("rm", "-f", "-i", "-t", "0", *ids.split(), check=False, timeout=300)
        self.podman("network", "rm", "-f", NETWORK, check=False)
        shutil.rmtree(self.work / "kube-pods", ignore_errors=True)

    # -- watching ------------------------------------------------------------------
    def watch_node(self, node: Node) -> None:
        selector = urllib.parse.quote(f"spec.nodeName={node.name}")
        base = f"/api/v1/pods?fieldSelector={selector}"
        while not self.stopping.is_set():
            try:
                listed = node.kube.get(base)
                seen = set()
                for pod in listed["items"]:
                    seen.add(pod["metadata"]["uid"])
                    self.observe(node, "MODIFIED", pod)
                with self.lock:
                    mine = [w for w in self.workers.values() if w.node is node]
                for w in mine:
                    if w.uid not in seen:
                        self.observe(node, "DELETED", w.pod)
                rv = listed["metadata"]["resourceVersion"]
                self.stream(node, f"{base}&resourceVersion={rv}&allowWatchBookmarks=true")
            except Exception as e:  # a watch breaks: list again
                if not self.stopping.is_set():
                    self.log(f"{node.name}: watch: {type(e).__name__}: {e}")
                    time.sleep(1)

    def stream(self, node: Node, path: str) -> None:
        for event in node.kube.watch(path, seconds=300):
            if self.stopping.is_set():
                return
            if event["type"] == "ERROR":
                return  # e.g. 410 Gone: list again
            if event["type"] in ("ADDED", "MODIFIED", "DELETED"):
                self.observe(node, event["type"], event["object"])

    def observe(self, node: Node, kind: str, pod: dict[str, Any]) -> None:
        uid = pod["metadata"]["uid"]
        with self.lock:
            worker = self.workers.get(uid)
            if worker is None and kind != "DELETED":
                if pod.get("status", {}).get("phase") in ("Succeeded", "Failed") and \
                        pod["metadata"].get("deletionTimestamp"):
                    worker = None  # a terminal pod from before us: just confirm below
                else:
                    worker = PodWorker(self, node, pod)
                    self.workers[uid] = worker
                    self.log(f"{worker.key}: admitted on {node.name}")
                    threading.Thread(target=worker.run, daemon=True).start()
        if kind == "DELETED":
            if worker is not None:
                self.log(f"{worker.key}: gone: removing its containers")
                with self.lock:
                    self.workers.pop(uid, None)
                threading.Thread(target=worker.cleanup, daemon=True).start()
            return
        if worker is None:
            with contextlib.suppress(ApiError):
                node.kube.request("DELETE", f"/api/v1/namespaces/{pod['metadata']['namespace']}"
                                  f"/pods/{pod['metadata']['name']}",
                                  json.dumps({"gracePeriodSeconds": 0,
                                              "preconditions": {"uid": uid}}).encode())
            return
        if pod["metadata"].get("deletionTimestamp") and not worker.stop.is_set():
            grace = int(pod["metadata"].get("deletionGracePeriodSeconds", 30))
            self.log(f"{worker.key}: deletion asked, grace {grace} s")
            worker.stop.set()
            threading.Thread(target=self._terminate, args=(worker, grace), daemon=True).start()

    def _terminate(self, worker: PodWorker, grace: int) -> None:
        worker.terminate(grace)
        with self.lock:
            self.workers.pop(worker.uid, None)

    def serve(self) -> None:
        self.setup()
        logs = self.serve_logs()
        for node in self.nodes:
            threading.Thread(target=self.watch_node, args=(node,), daemon=True).start()
        self.log(f"serving {', '.join(n.name for n in self.nodes)}")
        self.stopping.wait()
        logs.stop()
        self.teardown()

    # -- the kubelet port: containerLogs (scripts/kube_node_logs.py) -------------------
    def serve_logs(self) -> NodeLogs:
        """Each node's containerLogs endpoint on its InternalIP, its port advertised."""
        logs = NodeLogs()
        for node in self.nodes:
            port = logs.start(self.run, node.name, node.host_ip, node.kube.merge_patch,
                              functools.partial(self.container_of, node),
                              self.bed.env)
            self.log(f"{node.name}: containerLogs on https://{node.host_ip}:{port}")
        return logs

    def container_of(self, node: Node, ns: str, pod: str, container: str) -> Optional[str]:
        """The podman name of a container of a pod of this node, as the kubelet finds it by
        the pod's name (a pod being deleted only when no newer one of that name runs)."""
        with self.lock:
            workers = [w for w in self.workers.values()
                       if w.node is node and w.ns == ns and w.name == pod and not w.cleaned]
        workers.sort(key=lambda w: w.stop.is_set())
        for w in workers:
            for spec, st in zip([*w.app_specs, *w.sidecar_specs, *w.init_specs],
                                [*w.apps, *w.sidecars, *w.inits]):
                if spec["name"] != container:
                    continue
                if not st.cid:
                    raise LogRequestError(400, f'container "{container}" in pod "{pod}" is '
                                               f"waiting to start: {st.waiting}")
                return w.cname(spec)
        return None


def main(argv: Optional[Sequence[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--run-dir", type=Path, default=Path(os.environ.get(
        "KUBE_BED_DIR", "/tmp/ascend-node-kube-bed")))
    ap.add_argument("--work", type=Path, default=cb.DEFAULT_WORK,
                    help="the container bed's work directory (podman state, images)")
    ap.add_argument("--sim-env", action="append", default=[], metavar="KEY=VALUE",
                    help="env the fake vendor stack reads, added to every container "
                         "({pod}, {namespace}, {node}, {task} filled in)")
    args = ap.parse_args(argv)
    sim = dict(item.split("=", 1) for item in args.sim_env)
    agent = Agent(args.run_dir.resolve(), args.work.resolve(), sim)
    signal.signal(signal.SIGTERM, lambda *_: agent.stopping.set())
    signal.signal(signal.SIGINT, lambda *_: agent.stopping.set())
    agent.serve()
    return 0


if __name__ == "__main__":
    sys.exit(main())
