"""A kubelet for the container bed: runs a rendered pod template with podman, probes included.

The manifest is only proven where it runs, and no cluster runs here. So this module does
what the kubelet (and Volcano's controller, and the device plugin) would do with each pod
template of the Job that `ascend-node manifest` prints, on top of scripts/container_bed.py:

* **Volcano** (the `env` and `svc` plugins, docs of /work/shared facts copied into
  docs/deploy.md): pod name `<job>-<task>-<index>` as hostname, `VK_TASK_INDEX` /
  `VC_TASK_INDEX`, `VC_<TASK>_NUM` / `VC_<TASK>_HOSTS` for every task, the same as files
  under `/etc/volcano`, the `volcano.sh/job-version` annotation.
* **the device plugin**: `ASCEND_VISIBLE_DEVICES` = the NPUs the *container's* limit asks
  for; a container that requests none gets none (the device plugin allocates per container;
  the kubelet's device manager lets app containers reuse an init container's devices:
  kubernetes pkg/kubelet/cm/devicemanager/manager.go `devicesToReuse`: "devices that can
  be reused as they have been allocated to init containers").
* **the kubelet**: the container's `env` with the downward-API fields it asks for resolved
  (`metadata.uid|name|namespace`, `status.podIP|hostIP`, `metadata.annotations['...']`;
  anything else fails loudly), `command` as the entrypoint and `args`, every volume
  (`persistentVolumeClaim` -> one shared host directory per claim; `hostPath` -> that path
  under the pod's fake *node* root, with `type: File|Directory` checked as the kubelet
  checks it; `emptyDir` -> a fresh directory, `/dev/shm` with `medium: Memory` -> podman's
  shm; `secret` -> its items as files with `defaultMode`; `configMap` -> its keys laid out
  as the kubelet's atomic writer lays them out: the files in a timestamped directory,
  `..data` a symlink to it, each key a symlink through `..data`; `subPath` -> that entry,
  the file itself), `workingDir`, **native sidecars** (init containers with
  `restartPolicy: Always`: a second container in the pod's network namespace, restarted
  when it ends while the main container runs, stopped once the main container has ended;
  the pod's phase is the main container's — started just after the main container, where
  the kubelet starts it just before: nothing in a rendered pod depends on that order), the
  `securityContext` (pod and
  container level: runAsUser/Group, runAsNonRoot, fsGroup, supplementalGroups,
  capabilities, readOnlyRootFilesystem, allowPrivilegeEscalation), `/dev/termination-log`,
  `restartPolicy: Never`, and the **probes on their schedule**: one worker per probe as in
  kubelet pkg/kubelet/prober/worker.go (`doProbe`): nothing before `initialDelaySeconds`;
  startup probes until the container has started, readiness and liveness only after;
  `successThreshold` / `failureThreshold` consecutive results; a liveness or startup failure
  kills the container (`podman stop` with `terminationGracePeriodSeconds`, SIGTERM then
  SIGKILL) and, with `restartPolicy: Never`, the pod ends `Failed`. Readiness starts
  `Failure`; a container without a readiness probe is ready once started; once started,
  the readiness probe runs at once (prober_manager.go `UpdatePodStatus`: "Trigger an
  immediate run of the readinessProbe"). exec probes run with `podman exec`, httpGet against
  the pod IP (https without verification, as the kubelet), tcpSocket by connecting.
  Volcano's `RestartTask` is `restart_task`: the task's pods removed and re-created under
  the same names with new pod IPs and UIDs, the job version unchanged.
  Not imitated: the kubelet's random start-up jitter of a worker (it only applies to a
  freshly started kubelet), scheduling (affinity, nodeSelector: every pod gets its own
  node), image pulls, resource limits other than the NPUs.

`podman kube play` was considered and not used. By the support tables of its own man page
(podman 4.3.1, the Debian 12 podman these machines run) it takes Pods, Deployments, PVCs and
ConfigMaps, not a Volcano Job (its tasks would have to be cut out and renamed by hand, and
nothing injects Volcano's env); its volumes are hostPath, emptyDir and
persistentVolumeClaim (a named volume), no Secret volume; it honours `restartPolicy`,
`env.valueFrom.fieldRef`, `securityContext.runAsUser/runAsGroup` and `livenessProbe` (as a
podman healthcheck), but not `readinessProbe`, `startupProbe`,
`terminationGracePeriodSeconds`, `terminationMessagePath`, `runAsNonRoot` or
`capabilities.add/drop` — and the startup gate and readiness are what has to be proven.

The pure parts — `ProbeSpec`, `ProbeWorker`, `ContainerProbes` and `simulate` (virtual
time) — are unit-tested in tests/test_kubelet_bed.py; `KubeletBed` is the door to podman.
"""

from __future__ import annotations

import dataclasses
import heapq
import http.client
import json
import re
import shlex
import shutil
import socket
import ssl
import subprocess
import threading
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

KINDS = ("startup", "readiness", "liveness")
EXEC_SLACK_S = 5.0  # what `podman exec` itself costs on a loaded 2-core machine


class KubeletError(RuntimeError):
    """The pod cannot run as the kubelet would run it (one line, names the field)."""


# ---- pure: probes ------------------------------------------------------------------

@dataclass(frozen=True)
class ProbeSpec:
    """One probe of a container, with Kubernetes' defaults for what it leaves out."""

    kind: str
    handler: Mapping[str, Any]
    initial_delay: int = 0
    period: int = 10
    timeout: int = 1
    success_threshold: int = 1
    failure_threshold: int = 3

    @classmethod
    def of(cls, container: Mapping[str, Any]) -> list[ProbeSpec]:
        out = []
        for kind in KINDS:
            raw = container.get(f"{kind}Probe")
            if raw is None:
                continue
            handlers = [k for k in ("exec", "httpGet", "tcpSocket", "grpc") if k in raw]
            if len(handlers) != 1 or handlers[0] == "grpc":
                raise KubeletError(f"{kind}Probe needs one of exec, httpGet, tcpSocket: {raw}")
            out.append(cls(kind, {handlers[0]: raw[handlers[0]]},
                           int(raw.get("initialDelaySeconds", 0)),
                           int(raw.get("periodSeconds", 10)),
                           int(raw.get("timeoutSeconds", 1)),
                           int(raw.get("successThreshold", 1)),
                           int(raw.get("failureThreshold", 3))))
        return out


class ProbeWorker:
    """The kubelet's per-probe worker (worker.go `doProbe`), without the clock or the I/O."""

    def __init__(self, spec: ProbeSpec) -> None:
        self.spec = spec
        # worker.go newWorker: readiness starts Failure, liveness Success, startup Unknown.
        self.result: Optional[bool] = {"readiness": False, "liveness": True}.get(spec.kind)
        self.last: Optional[bool] = None
        self.run = 0
        self.on_hold = False

    def wants(self, started: bool, running_for: float) -> bool:
        """Whether this tick probes at all."""
        if self.on_hold or running_for < self.spec.initial_delay:
            return False
        return not started if self.spec.kind == "startup" else started

    def record(self, ok: bool) -> bool:
        """One result; True when the container must be killed (liveness/startup failed)."""
        if self.last == ok:
            self.run += 1
        else:
            self.last, self.run = ok, 1
        threshold = self.spec.success_threshold if ok else self.spec.failure_threshold
        if self.run < threshold:
            return False
        self.result = ok
        if not ok and self.spec.kind in ("liveness", "startup"):
            self.on_hold, self.run = True, 0
            return True
        return False


class ContainerProbes:
    """Started / ready / killed for one container, from its workers."""

    def __init__(self, specs: Sequence[ProbeSpec]) -> None:
        self.workers = {s.kind: ProbeWorker(s) for s in specs}
        self.killed_by: Optional[str] = None

    @property
    def started(self) -> bool:
        w = self.workers.get("startup")
        return w is None or w.result is True

    @property
    def ready(self) -> bool:
        if self.killed_by is not None or not self.started:
            return False
        w = self.workers.get("readiness")
        return w is None or w.result is True

    def record(self, kind: str, ok: bool) -> tuple[bool, bool]:
        """(kill now, just started) after one result of `kind`."""
        was = self.started
        kill = self.workers[kind].record(ok)
        if kill and self.killed_by is None:
            self.killed_by = kind
        return kill, (not was and self.started)


def simulate(specs: Sequence[ProbeSpec], answer: Callable[[str, float], bool],
             until: float) -> list[tuple[float, str]]:
    """The probes of one container in virtual time (each probe answers at once).

    `answer(kind, t)` is the probe's outcome at time t (container started at 0). Returns
    the events: (t, "probe <kind> ok|fail"), (t, "started"), (t, "ready"), (t, "unready"),
    (t, "killed by <kind>"). The same workers as the real runner; only the clock differs.
    """
    state = ContainerProbes(specs)
    events: list[tuple[float, str]] = []
    # (time, tie-break, kind, manual): a worker's ticker keeps its period; a manual run
    # (the readiness run right after start) is one extra probe, as in the kubelet.
    due: list[tuple[float, int, str, bool]] = [(0.0, i, s.kind, False)
                                              for i, s in enumerate(specs)]
    heapq.heapify(due)
    order = {s.kind: i for i, s in enumerate(specs)}
    ready = False
    while due:
        t, _, kind, manual = heapq.heappop(due)
        if t > until:
            break
        worker = state.workers[kind]
        if not manual:
            heapq.heappush(due, (t + worker.spec.period, order[kind], kind, False))
        if not worker.wants(state.started, t):
            continue
        ok = answer(kind, t)
        events.append((t, f"probe {kind} {'ok' if ok else 'fail'}"))
        kill, started = state.record(kind, ok)
        if started:
            events.append((t, "started"))
            if "readiness" in state.workers:
                heapq.heappush(due, (t, -1, "readiness", True))
        if kill:
            events.append((t, f"killed by {kind}"))
            if ready:
                events.append((t, "unready"))
            return events
        if state.ready != ready:
            ready = state.ready
            events.append((t, "ready" if ready else "unready"))
    return events


# ---- pure: the pod as the kubelet and Volcano see it ------------------------------

@dataclass
class PodPlan:
    """Everything `podman run` needs for one pod of the Job."""

    name: str
    task: str
    index: int
    ip: str
    host_ip: str
    uid: str
    container: Mapping[str, Any]
    spec: Mapping[str, Any]
    env: dict[str, str] = field(default_factory=dict)


_FIELD = re.compile(r"^metadata\.annotations\['([^']+)'\]$")


def resolve_env(container: Mapping[str, Any], pod: PodPlan, namespace: str,
                annotations: Mapping[str, str]) -> dict[str, str]:
    """The container's env as the kubelet gives it: values, and the downward-API fields."""
    fields = {"metadata.uid": pod.uid, "metadata.name": pod.name,
              "metadata.namespace": namespace, "status.podIP": pod.ip,
              "status.hostIP": pod.host_ip, "spec.nodeName": f"node-{pod.host_ip}"}
    out: dict[str, str] = {}
    for item in container.get("env", []):
        name = item["name"]
        if "value" in item:
            out[name] = _expand(str(item["value"]), out)
            continue
        ref = item.get("valueFrom", {}).get("fieldRef", {}).get("fieldPath")
        if ref is None:
            raise KubeletError(f"env {name}: only value and fieldRef are resolved here: {item}")
        match = _FIELD.match(ref)
        if match:
            out[name] = annotations.get(match.group(1), "")
        elif ref in fields:
            out[name] = fields[ref]
        else:
            raise KubeletError(f"env {name}: fieldRef {ref!r} is not one the kubelet resolves "
                               "for a container")
    return out


def _expand(value: str, env: Mapping[str, str]) -> str:
    """`$(VAR)` references to earlier variables, as the kubelet expands them."""
    return re.sub(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)",
                  lambda m: env.get(m.group(1), m.group(0)), value)


def volcano_env(job: str, tasks: Mapping[str, int], task: str, index: int) -> dict[str, str]:
    """What Volcano's env and svc plugins add to every container of the job."""
    env = {"VK_TASK_INDEX": str(index), "VC_TASK_INDEX": str(index)}
    for name, replicas in tasks.items():
        key = name.upper().replace("-", "_")
        env[f"VC_{key}_NUM"] = str(replicas)
        env[f"VC_{key}_HOSTS"] = ",".join(f"{job}-{name}-{i}.{job}" for i in range(replicas))
    return env


def npu_count(container: Mapping[str, Any], resource_prefix: str = "huawei.com/Ascend") -> int:
    limits = container.get("resources", {}).get("limits", {})
    return sum(int(v) for k, v in limits.items() if k.startswith(resource_prefix))


_SEC_KEYS = {"runAsUser", "runAsGroup", "runAsNonRoot", "fsGroup", "supplementalGroups",
             "capabilities", "readOnlyRootFilesystem", "allowPrivilegeEscalation",
             "fsGroupChangePolicy", "seccompProfile"}


def http_get_probe(get: Mapping[str, Any], host: str, port: int, timeout: float
                   ) -> tuple[bool, str]:
    """One `httpGet` probe as the kubelet's prober runs it: success for a status in
    [200, 400), HTTPS without verifying the certificate (kubernetes pkg/probe/http)."""
    conn: http.client.HTTPConnection
    if get.get("scheme", "HTTP").upper() == "HTTPS":
        ctx = ssl.create_default_context()
        ctx.check_hostname, ctx.verify_mode = False, ssl.CERT_NONE
        conn = http.client.HTTPSConnection(host, port, timeout=timeout, context=ctx)
    else:
        conn = http.client.HTTPConnection(host, port, timeout=timeout)
    try:
        headers = {h["name"]: h["value"] for h in get.get("httpHeaders", [])}
        conn.request("GET", get.get("path", "/"), headers=headers)
        status = conn.getresponse().status
        return 200 <= status < 400, f"HTTP {status}"
    except (OSError, http.client.HTTPException) as exc:
        return False, f"{type(exc).__name__}: {exc}"
    finally:
        conn.close()


def security_args(pod_sc: Mapping[str, Any], c_sc: Mapping[str, Any]) -> tuple[list[str], Any]:
    """podman flags for the pod's and the container's securityContext (the container's
    wins), and the fsGroup (volumes get that group)."""
    unknown = (set(pod_sc) | set(c_sc)) - _SEC_KEYS
    if unknown:
        raise KubeletError(f"securityContext {sorted(unknown)} not imitated by the bed")
    merged = {**pod_sc, **c_sc}
    args: list[str] = []
    user, group = merged.get("runAsUser"), merged.get("runAsGroup")
    if merged.get("runAsNonRoot") and (user is None or int(user) == 0):
        raise KubeletError("runAsNonRoot with runAsUser 0 or unset: the kubelet refuses "
                           "to start the container (the image runs as root)")
    if user is not None:
        args += ["--user", f"{int(user)}:{int(group) if group is not None else 0}"]
    fs_group = pod_sc.get("fsGroup")
    for g in [*pod_sc.get("supplementalGroups", []), *([fs_group] if fs_group else [])]:
        args += ["--group-add", str(int(g))]
    for cap in merged.get("capabilities", {}).get("add", []):
        args += ["--cap-add", str(cap)]
    for cap in merged.get("capabilities", {}).get("drop", []):
        args += ["--cap-drop", str(cap)]
    if merged.get("readOnlyRootFilesystem"):
        args.append("--read-only")
    if merged.get("allowPrivilegeEscalation") is False:
        args += ["--security-opt", "no-new-privileges"]
    return args, fs_group


# ---- the door: pods in podman --------------------------------------------------------

@dataclass
class PodRun:
    """One pod while it runs: its container's probe state and what happened, timed."""

    plan: PodPlan
    probes: ContainerProbes
    started_at: float = 0.0
    exit_code: Optional[int] = None
    events: list[tuple[float, str]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    wake: dict[str, threading.Event] = field(default_factory=dict)
    ready_since: Optional[float] = None
    first_ready_wall: Optional[float] = None  # time.time() when it first turned Ready
    # every probe run: (kind, started, ended (time.time()), success, what it said)
    probe_log: list[tuple[str, float, float, bool, str]] = field(default_factory=list)
    sidecars: list[str] = field(default_factory=list)  # their containers' names
    inits: list[str] = field(default_factory=list)  # the init containers' names, as run
    init_failed: Optional[str] = None  # the init container whose exit failed the pod
    retired: bool = False  # removed by restart_task: its threads touch nothing any more

    @property
    def name(self) -> str:
        return self.plan.name

    @property
    def phase(self) -> str:
        if self.exit_code is None:
            return "Running"
        return "Succeeded" if self.exit_code == 0 else "Failed"

    @property
    def ready(self) -> bool:
        with self.lock:
            return self.exit_code is None and self.probes.ready

    def note(self, what: str) -> None:
        self.events.append((time.monotonic(), what))

    def first(self, what: str) -> Optional[float]:
        return next((t for t, w in self.events if w == what), None)


class KubeletBed:
    """Runs every pod of a rendered Volcano Job on one bridge network, and probes them."""

    def __init__(self, bed: Any, job_doc: Mapping[str, Any], subnet: int,
                 pvcs: Mapping[str, Path],
                 secrets: Optional[Mapping[str, Mapping[str, str]]] = None,
                 extra_env: Optional[Callable[[PodPlan], Mapping[str, str]]] = None,
                 node_files: Optional[Callable[[Path, PodPlan], None]] = None,
                 job_version: int = 0,
                 config_maps: Optional[Mapping[str, Mapping[str, str]]] = None) -> None:
        self.bed, self.job = bed, job_doc
        self.name = str(job_doc["metadata"]["name"])
        self.namespace = str(job_doc["metadata"].get("namespace", "default"))
        self.subnet = subnet
        self.pvcs, self.secrets = dict(pvcs), dict(secrets or {})
        self.config_maps = dict(config_maps or {})
        self._prepared: dict[tuple[str, str], Path] = {}  # (pod, volume): host side
        self._next_ip = 0  # re-created pods' addresses, after every first one
        self.extra_env = extra_env  # the fakes' own switches per pod, never the Job's
        self.node_files = node_files
        self.job_version = job_version
        self.network = f"ascend-node-kb-{self.name}"
        self.dir = bed.work / "pods" / f"kb-{self.name}"
        self.pods: list[PodRun] = []
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []

    # -- planning (no podman yet) --------------------------------------------------
    def plans(self) -> list[PodPlan]:
        tasks = self.job["spec"]["tasks"]
        out, n = [], 0
        for task in tasks:
            for i in range(int(task.get("replicas", 1))):
                spec = task["template"]["spec"]
                (container,) = spec["containers"]  # one app container per pod template
                prefix = self.bed_prefix()
                out.append(PodPlan(f"{self.name}-{task['name']}-{i}", task["name"], i,
                                   f"{prefix}{10 + n}", f"10.100.{self.subnet}.{10 + n}",
                                   str(uuid.uuid4()), container, spec))
                n += 1
        return out

    def bed_prefix(self) -> str:
        return f"10.233.{self.subnet}."

    @staticmethod
    def sidecars_of(spec: Mapping[str, Any]) -> list[Mapping[str, Any]]:
        """The pod's native sidecars (init containers with restartPolicy: Always)."""
        out = []
        for c in spec.get("initContainers", []):
            policy = c.get("restartPolicy")
            if policy not in (None, "Always"):
                raise KubeletError(f"init container {c.get('name')!r}: restartPolicy "
                                   f"{policy!r} (the API server allows only Always)")
            if policy == "Always":
                out.append(c)
        return out

    @staticmethod
    def inits_of(spec: Mapping[str, Any]) -> list[Mapping[str, Any]]:
        """The pod's regular init containers, in order: each runs to completion before the
        next, and the app container starts only once all exited 0 (restartPolicy Never: a
        failed one fails the pod)."""
        return [c for c in spec.get("initContainers", []) if c.get("restartPolicy") is None]

    def run_argv(self, plan: PodPlan, image_override: Optional[str] = None,
                 sidecar: Optional[Mapping[str, Any]] = None,
                 init: Optional[Mapping[str, Any]] = None) -> list[str]:
        """The `podman run` of one pod (writes its volumes' host side); with `sidecar`,
        of that native sidecar, in the pod's network namespace; with `init`, of that init
        container, holding the pod's address until it exits (nothing else runs then)."""
        spec, c = plan.spec, (sidecar or init or plan.container)
        if spec.get("restartPolicy", "Always") != "Never":
            raise KubeletError(f"{plan.name}: restartPolicy {spec.get('restartPolicy')!r}: "
                               "Volcano's exit-code policies need Never")
        self.sidecars_of(spec)
        here = self.dir / plan.name
        tasks = {t["name"]: int(t.get("replicas", 1)) for t in self.job["spec"]["tasks"]}
        annotations = {"volcano.sh/job-version": str(self.job_version),
                       "volcano.sh/job-retry-count": "0"}
        env = volcano_env(self.name, tasks, plan.task, plan.index)
        env.update(resolve_env(c, plan, self.namespace, annotations))
        # The device plugin: a container gets NPUs only by requesting them (its own
        # resources, never its pod's other containers'); the kubelet's device manager hands
        # an init container's devices on to the app container, so equal requests mean the
        # same devices.
        npus = npu_count(c)
        if npus:
            env.setdefault("ASCEND_VISIBLE_DEVICES", ",".join(str(d) for d in range(npus)))
        if self.extra_env is not None:
            env.update(self.extra_env(plan))
        if sidecar is None and init is None:
            plan.env = env
        sec_args, fs_group = security_args(spec.get("securityContext", {}),
                                           c.get("securityContext", {}))
        name = (self.sidecar_name(plan, sidecar) if sidecar is not None else
                self.sidecar_name(plan, init) if init is not None else plan.name)
        where = (["--hostname", plan.name, "--network", self.network, "--ip", plan.ip]
                 if sidecar is None else ["--network", f"container:{plan.name}"])
        argv = ["run", "-d", "--name", name, *where, "--label", self.bed_label(),
                f"--stop-timeout={int(spec.get('terminationGracePeriodSeconds', 30))}",
                *self.bed.cgroup_args(name), *sec_args]
        if c.get("workingDir"):
            argv += ["--workdir", str(c["workingDir"])]
        volumes = {v["name"]: v for v in spec.get("volumes", [])}
        node = here / "node"
        node.mkdir(parents=True, exist_ok=True)
        if self.node_files is not None:
            self.node_files(node, plan)
        for m in c.get("volumeMounts", []):
            vol = volumes.get(m["name"])
            if vol is None:
                raise KubeletError(f"{plan.name}: volumeMount {m['name']!r} has no volume")
            argv += self._mount(plan, here, node, vol, m, fs_group)
        # Volcano's svc plugin ConfigMap, mounted at /etc/volcano.
        etc_volcano = here / "etc-volcano"
        etc_volcano.mkdir(parents=True, exist_ok=True)
        for name, replicas in tasks.items():
            (etc_volcano / f"{name}.host").write_text(
                "".join(f"{self.name}-{name}-{i}.{self.name}\n" for i in range(replicas)))
        argv += ["-v", f"{etc_volcano}:/etc/volcano:ro"]
        term = here / f"termination-log-{c.get('name', 'main')}"
        term.write_text("")
        term.chmod(0o666)
        argv += ["-v", f"{term}:{c.get('terminationMessagePath', '/dev/termination-log')}"]
        for key, value in env.items():
            argv += ["-e", f"{key}={value}"]
        if "command" in c:
            argv += ["--entrypoint", json.dumps(list(c["command"]))]
        image = c["image"] if init is not None else (image_override or c["image"])
        return [*argv, image, *c.get("args", [])]

    @staticmethod
    def sidecar_name(plan: PodPlan, sidecar: Mapping[str, Any]) -> str:
        return f"{plan.name}--{sidecar['name']}"

    def bed_label(self) -> str:
        from_bed = getattr(self.bed, "LABEL", None)
        return str(from_bed) if from_bed else "ascend-node-test-bed"

    def _mount(self, plan: PodPlan, here: Path, node: Path, vol: Mapping[str, Any],
               m: Mapping[str, Any], fs_group: Any) -> list[str]:
        inner, ro = m["mountPath"], ":ro" if m.get("readOnly") else ""
        sub = str(m.get("subPath", ""))
        if sub.startswith("/") or ".." in sub.split("/"):
            raise KubeletError(f"{plan.name}: subPath {sub!r} must be a relative path "
                               "without '..' (the API server refuses it)")
        if "emptyDir" in vol and vol["emptyDir"].get("medium") == "Memory":
            if sub:
                raise KubeletError(f"{plan.name}: subPath of a memory emptyDir is not imitated")
            if inner == "/dev/shm":
                return ["--shm-size", str(vol["emptyDir"].get("sizeLimit", "1g")).lower()
                        .replace("gi", "g").replace("mi", "m")]
            return ["--tmpfs", f"{inner}:rw,mode=1777"]
        source, ro = self._volume_source(plan, here, node, vol, fs_group, ro)
        if sub:
            # The kubelet mounts that entry of the volume (creating a missing directory in
            # writable volumes; a Secret's key must exist). The file itself, not a symlink.
            source = source / sub
            if "secret" in vol:
                if not source.is_file():
                    raise KubeletError(f"{plan.name}: Secret {vol['secret']['secretName']!r} "
                                       f"has no item {sub!r}")
            elif not source.exists():
                source.mkdir(parents=True)
        return ["-v", f"{source}:{inner}{ro}"]

    def _volume_source(self, plan: PodPlan, here: Path, node: Path, vol: Mapping[str, Any],
                       fs_group: Any, ro: str) -> tuple[Path, str]:
        """The host directory behind a volume (written now for emptyDir and Secret)."""
        if "persistentVolumeClaim" in vol:
            claim = vol["persistentVolumeClaim"]["claimName"]
            if claim not in self.pvcs:
                raise KubeletError(f"{plan.name}: PVC {claim!r} is not bound (the bed has "
                                   f"{sorted(self.pvcs)})")
            return self.pvcs[claim], ro
        if "hostPath" in vol:
            path, kind = vol["hostPath"]["path"], vol["hostPath"].get("type", "")
            host = node / path.lstrip("/")
            if kind == "File" and not host.is_file():
                raise KubeletError(f"{plan.name}: hostPath {path} type File does not exist on "
                                   "the node (the kubelet fails the pod)")
            if kind == "Directory" and not host.is_dir():
                raise KubeletError(f"{plan.name}: hostPath {path} type Directory does not "
                                   "exist on the node (the kubelet fails the pod)")
            if kind == "DirectoryOrCreate":
                host.mkdir(parents=True, exist_ok=True)
            return host, ro
        if "emptyDir" in vol:
            host = here / "emptydir" / vol["name"]
            host.mkdir(parents=True, exist_ok=True)
            host.chmod(0o777)  # the kubelet makes emptyDirs world-writable
            if fs_group is not None:
                shutil.chown(host, group=int(fs_group))
            return host, ro
        key = (plan.name, str(vol["name"]))
        if key in self._prepared:  # a second container of the pod: the same files
            return self._prepared[key], ":ro"
        if "configMap" in vol:
            name = vol["configMap"]["name"]
            if name not in self.config_maps:
                raise KubeletError(f"{plan.name}: ConfigMap {name!r} does not exist (the "
                                   "kubelet keeps the pod in ContainerCreating)")
            if vol["configMap"].get("items"):
                raise KubeletError(f"{plan.name}: configMap items are not imitated")
            host = here / "configmap" / vol["name"]
            shutil.rmtree(host, ignore_errors=True)
            stamp = host / time.strftime("..%Y_%m_%d_%H_%M_%S.000000001")
            stamp.mkdir(parents=True)
            mode = int(vol["configMap"].get("defaultMode", 0o644))
            for item, text in self.config_maps[name].items():
                (stamp / item).write_text(text)
                (stamp / item).chmod(mode)
            (host / "..data").symlink_to(stamp.name)
            for item in self.config_maps[name]:
                (host / item).symlink_to(f"..data/{item}")
            self._prepared[key] = host
            return host, ":ro"
        if "secret" in vol:
            name = vol["secret"]["secretName"]
            if name not in self.secrets:
                raise KubeletError(f"{plan.name}: Secret {name!r} does not exist (the kubelet "
                                   "keeps the pod in ContainerCreating)")
            data = self.secrets[name]
            host = here / "secret" / vol["name"]
            shutil.rmtree(host, ignore_errors=True)
            host.mkdir(parents=True)
            mode = int(vol["secret"].get("defaultMode", 0o644))
            items = vol["secret"].get("items") or [{"key": k, "path": k} for k in data]
            for item in items:
                if item["key"] not in data:
                    raise KubeletError(f"{plan.name}: Secret {name!r} has no key "
                                       f"{item['key']!r}")
                target = host / item["path"]
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_text(data[item["key"]])
                target.chmod(int(item.get("mode", mode)))
                if fs_group is not None:
                    shutil.chown(target, group=int(fs_group))
            self._prepared[key] = host
            return host, ":ro"
        raise KubeletError(f"{plan.name}: volume {vol} is of a kind the bed does not imitate")

    # -- running ------------------------------------------------------------------
    def start(self, image_override: Optional[str] = None) -> list[PodRun]:
        shutil.rmtree(self.dir, ignore_errors=True)
        self.dir.mkdir(parents=True)
        plans = self.plans()
        self._next_ip = len(plans)
        self.bed.network(self.network, f"{self.bed_prefix()}0/24")
        self.pods.extend(self._launch(plans, image_override))
        return self.pods

    def _launch(self, plans: Sequence[PodPlan], image_override: Optional[str]
                ) -> list[PodRun]:
        argvs = [(self.run_argv(p, image_override),
                  [self.run_argv(p, image_override, s) for s in self.sidecars_of(p.spec)],
                  [self.run_argv(p, image_override, init=c) for c in self.inits_of(p.spec)])
                 for p in plans]  # all checks before any run
        runs = []
        for plan, (argv, side_argvs, init_argvs) in zip(plans, argvs):
            run = PodRun(plan, ContainerProbes(ProbeSpec.of(plan.container)))
            for kind in run.probes.workers:
                run.wake[kind] = threading.Event()
            runs.append(run)
            if init_argvs:  # every pod's init containers at once: they may meet each other
                self._spawn(self._init_then_start, run, init_argvs, argv, side_argvs)
            else:
                self._start_main(run, argv, side_argvs)
        return runs

    def _start_main(self, run: PodRun, argv: Sequence[str], side_argvs: Sequence[Sequence[str]]
                    ) -> None:
        """The app container and its sidecars running; then its watchers and probes."""
        self.bed.podman(*argv, timeout=120)
        run.started_at = time.monotonic()
        run.note("running")
        for sidecar, side in zip(self.sidecars_of(run.plan.spec), side_argvs):
            self.bed.podman(*side, timeout=120)
            run.sidecars.append(self.sidecar_name(run.plan, sidecar))
            run.note(f"sidecar {sidecar['name']} running")
        self._spawn(self._watch, run)
        for name in run.sidecars:
            self._spawn(self._watch_sidecar, run, name)
        for kind in run.probes.workers:
            self._spawn(self._worker, run, kind)

    def _init_then_start(self, run: PodRun, init_argvs: Sequence[Sequence[str]],
                         argv: Sequence[str], side_argvs: Sequence[Sequence[str]]) -> None:
        """The kubelet's init phase: each init container to completion, in order; one that
        exits non-zero fails the pod (restartPolicy Never) and nothing else starts."""
        for c, init_argv in zip(self.inits_of(run.plan.spec), init_argvs):
            name = self.sidecar_name(run.plan, c)
            run.inits.append(name)
            self.bed.podman(*init_argv, timeout=120)
            run.note(f"init {c['name']} running")
            code: Optional[int] = None
            while code is None and not self._stop.is_set() and not run.retired:
                done = self.bed.podman("wait", "--interval", "250ms", name, check=False,
                                       timeout=24 * 3600)
                text = done.stdout.strip().splitlines()
                if done.returncode == 0 and text and text[-1].lstrip("-").isdigit():
                    code = int(text[-1])
                else:
                    time.sleep(0.5)
            if code is None:
                return
            run.note(f"init {c['name']} exited {code}")
            if code != 0:
                with run.lock:
                    run.exit_code = code
                    run.init_failed = str(c["name"])
                for ev in run.wake.values():
                    ev.set()
                return
            # its address passes to the next container of the pod
            self.bed.podman("rm", "-f", name, check=False, timeout=60)
        if not self._stop.is_set() and not run.retired:
            self._start_main(run, argv, side_argvs)

    def restart_task(self, task: str) -> list[PodRun]:
        """Volcano's `RestartTask`: the task's pods deleted, then created again under the
        same names, with new pod IPs and UIDs (same nodes, same job version)."""
        old = [r for r in self.pods if r.plan.task == task]
        if not old:
            raise KubeletError(f"no task {task!r} in the Job")
        for run in old:
            run.retired = True
            for ev in run.wake.values():
                ev.set()
        self.bed.remove(*(n for r in old for n in (r.name, *r.sidecars, *r.inits)))
        plans = []
        for run in old:
            for vol in run.plan.spec.get("volumes", []):
                self._prepared.pop((run.name, str(vol["name"])), None)
            shutil.rmtree(self.dir / run.name, ignore_errors=True)
            n = self._next_ip
            self._next_ip += 1
            plans.append(dataclasses.replace(
                run.plan, ip=f"{self.bed_prefix()}{10 + n}", uid=str(uuid.uuid4()), env={}))
        self.pods = [r for r in self.pods if r.plan.task != task]
        new = self._launch(plans, None)
        self.pods.extend(new)
        return new

    def _spawn(self, target: Callable[..., None], *args: Any) -> None:
        t = threading.Thread(target=target, args=args, daemon=True)
        t.start()
        self._threads.append(t)

    def _watch(self, run: PodRun) -> None:
        """`podman wait`: the container's exit ends the pod (restartPolicy Never)."""
        while not self._stop.is_set() and not run.retired:
            done = self.bed.podman("wait", "--interval", "250ms", run.name, check=False,
                                   timeout=24 * 3600)
            text = done.stdout.strip().splitlines()
            if run.retired:
                return
            if done.returncode == 0 and text and text[-1].lstrip("-").isdigit():
                with run.lock:
                    run.exit_code = int(text[-1])
                    run.note(f"exited {run.exit_code}")
                    run.ready_since = None
                for ev in run.wake.values():
                    ev.set()
                if run.sidecars:  # the kubelet ends the sidecars once the main one ended
                    self.bed.podman("stop", "-t", "5", *run.sidecars, check=False, timeout=60)
                return
            time.sleep(0.5)

    def _watch_sidecar(self, run: PodRun, name: str) -> None:
        """restartPolicy Always: a sidecar that ends while the main container runs is
        started again."""
        while not self._stop.is_set() and not run.retired:
            done = self.bed.podman("wait", "--interval", "250ms", name, check=False,
                                   timeout=24 * 3600)
            if self._stop.is_set() or run.retired or run.exit_code is not None:
                return
            text = done.stdout.strip().splitlines()
            if done.returncode == 0 and text and text[-1].lstrip("-").isdigit():
                run.note(f"sidecar {name} exited {text[-1]}: restarted")
                self.bed.podman("start", name, check=False, timeout=60)
            else:
                time.sleep(0.5)

    def _worker(self, run: PodRun, kind: str) -> None:
        worker = run.probes.workers[kind]
        spec = worker.spec
        while not self._stop.is_set() and run.exit_code is None and not run.retired:
            tick = time.monotonic()
            with run.lock:
                wants = worker.wants(run.probes.started, tick - run.started_at)
            if wants:
                began = time.time()
                ok, said = self.probe(run, spec)
                with run.lock:
                    if run.exit_code is not None or run.retired:
                        return
                    run.probe_log.append((kind, began, time.time(), ok, said))
                    run.note(f"probe {kind} {'ok' if ok else 'fail'}: {said}")
                    was_ready = run.probes.ready
                    kill, started = run.probes.record(kind, ok)
                    if started:
                        run.note("started")
                        if "readiness" in run.wake:
                            run.wake["readiness"].set()  # prober_manager's immediate run
                    if run.probes.ready and not was_ready:
                        run.ready_since = time.monotonic()
                        if run.first_ready_wall is None:
                            run.first_ready_wall = time.time()
                        run.note("ready")
                    elif was_ready and not run.probes.ready:
                        run.ready_since = None
                        run.note("unready")
                if kill:
                    run.note(f"killing: {kind} probe failed {spec.failure_threshold} times")
                    self._spawn(self._kill, run)
                    return
            wake = run.wake[kind]
            wake.wait(max(0.0, tick + spec.period - time.monotonic()))
            wake.clear()

    def _kill(self, run: PodRun) -> None:
        if run.retired:
            return
        grace = int(run.plan.spec.get("terminationGracePeriodSeconds", 30))
        self.bed.podman("stop", "-t", str(grace), run.name, check=False, timeout=grace + 60)

    def probe(self, run: PodRun, spec: ProbeSpec) -> tuple[bool, str]:
        """Run one probe as the kubelet would: (success, what it said, one line)."""
        handler = spec.handler
        if "exec" in handler:
            argv = [str(a) for a in handler["exec"]["command"]]
            try:
                done = subprocess.run(["podman", "exec", run.name, *argv], env=self.bed.env,
                                      capture_output=True, text=True,
                                      timeout=spec.timeout + EXEC_SLACK_S,
                                      stdin=subprocess.DEVNULL)
            except subprocess.TimeoutExpired:
                return False, f"{shlex.join(argv)}: timed out after {spec.timeout} s"
            line = (done.stdout.strip().splitlines() or done.stderr.strip().splitlines()
                    or [""])[0]
            return done.returncode == 0, f"exit {done.returncode}: {line[:160]}"
        if "httpGet" in handler:
            get = handler["httpGet"]
            return http_get_probe(get, get.get("host") or run.plan.ip,
                                  self._port(run, get["port"]), spec.timeout)
        if "tcpSocket" in handler:
            port = self._port(run, handler["tcpSocket"]["port"])
            try:
                socket.create_connection((run.plan.ip, port), spec.timeout).close()
                return True, "connected"
            except OSError as exc:
                return False, str(exc)
        raise KubeletError(f"probe handler {handler} is not imitated")

    @staticmethod
    def _port(run: PodRun, port: Any) -> int:
        if isinstance(port, int):
            return port
        for p in run.plan.container.get("ports", []):
            if p.get("name") == port:
                return int(p["containerPort"])
        raise KubeletError(f"{run.name}: named port {port!r} is not a containerPort")

    # -- waiting and cleaning up -------------------------------------------------
    def wait_for(self, predicate: Callable[[], bool], timeout: float, what: str) -> float:
        end = time.monotonic() + timeout
        while not predicate():
            if time.monotonic() > end:
                raise AssertionError(f"not within {timeout:g} s: {what}\n{self.describe()}")
            time.sleep(0.1)
        return time.monotonic()

    def describe(self) -> str:
        """Every pod's phase, readiness and last events (for failure messages)."""
        lines = []
        for run in self.pods:
            lines.append(f"{run.name}: {run.phase} ready={run.ready} exit={run.exit_code}")
            t0 = run.started_at or (run.events[0][0] if run.events else 0.0)
            lines += [f"  +{t - t0:6.1f}s {w}" for t, w in run.events[-12:]]
            if run.exit_code not in (None, 0):
                failed = run.inits[-1] if run.init_failed else run.name
                logs = self.bed.logs(failed).strip().splitlines()[-5:]
                lines += [f"  | {ln}" for ln in logs]
        return "\n".join(lines)

    def stop(self) -> None:
        self._stop.set()
        for run in self.pods:
            for ev in run.wake.values():
                ev.set()
        self.bed.remove(*(n for r in self.pods for n in (r.name, *r.sidecars, *r.inits)))
        self.bed.podman("network", "rm", "-f", self.network, check=False)
        for t in self._threads:
            t.join(timeout=30)


__all__ = ["ContainerProbes", "KubeletBed", "KubeletError", "PodPlan", "PodRun", "ProbeSpec",
           "ProbeWorker", "resolve_env", "security_args", "simulate", "volcano_env"]
