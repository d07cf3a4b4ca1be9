#!/usr/bin/env python3
"""A Kubernetes control plane on loopback: the real API server and Volcano, fake nodes (issue 37).

What runs (binaries from scripts/kube-bed-build, built from the Go module proxy, cached per
version):

  * etcd v3.5.10 on a fresh data directory,
  * kube-apiserver v1.30.2 with TLS, client certificates, service-account signing keys,
    `--authorization-mode=Node,RBAC` and the default admission plugins plus NodeRestriction
    (as kubeadm enables it),
  * kube-controller-manager v1.30.2 (service accounts and their root CA, garbage collection,
    endpoints, the PV binder, node lifecycle: the not-ready taint goes when a node is Ready),
  * Volcano v1.10.0: vc-webhook-manager behind the chart's own Mutating/Validating webhook
    configurations (installer/helm/chart/volcano/templates/webhooks.yaml, with a loopback URL
    in place of the in-cluster Service), vc-controller-manager, and vc-scheduler with the
    chart's default volcano-scheduler.conf (priority, gang, conformance; overcommit, drf,
    predicates, capacity, nodeorder, binpack); Volcano's CRDs and the queue `default`,
  * N Node objects advertising `huawei.com/Ascend910` (8, or 16 with --a3, labelled
    accelerator-type=module-a3-16-super-pod as the --a3 manifests select), Ready, their
    Leases in kube-node-lease renewed every 10 s by a small heartbeat process (what a kubelet
    does; the node lifecycle controller taints a node whose lease goes stale).

Nothing runs a pod bound to a fake node: it stays Pending until a node agent runs it. With
`--kubelet`, one real node more, `kube-bed-kubelet-0`: kubelet v1.30.2 over containerd, runc
and a bridge CNI, with a fake Ascend device plugin (scripts/kube_kubelet.py; needs root and
Debian's containerd, runc and containernetworking-plugins). Everything listens on 127.0.0.1,
on ports picked free at `up`. State lives in
one run directory (default /tmp/ascend-node-kube-bed, or $KUBE_BED_DIR):

  state.json        ports, nodes, pids, timings          admin.kubeconfig  cluster-admin
  pki/              CA, server, client and node certs    logs/<name>.log   one per process
  nodes/<node>.kubeconfig   system:node:<node> (group system:nodes), for a node agent

    scripts/kube-bed up [--nodes 4] [--a3] [--run-dir DIR]   # prints the kubeconfig path
        [--kubelet [--kubelet-image IMAGE]...]               # + the real node
    scripts/kube-bed status [--run-dir DIR]
    scripts/kube-bed down [--run-dir DIR]

`up` on a running bed with the same nodes reuses it; `down` stops every process it started
(process groups, by recorded pid and start time) and leaves no mount or network namespace
(the fake nodes make none; the real node's are cleaned, scripts/kube_kubelet.py). Exit
codes: 0 ok, 2 usage (also: `up` with other --nodes/--a3/--kubelet than the running bed's,
which is left as it is), 3 no Go toolchain (nothing to build with),
1 anything else (the failing process's log tail on stderr).
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any, Optional

sys.path.insert(0, str(Path(__file__).resolve().parent))
import kube_kubelet
from kube_api import (
    ApiError,
    Credentials,
    Kube,
    document_name,
    document_path,
    split_documents,
)

SCRIPTS = Path(__file__).resolve().parent
BUILD = SCRIPTS / "kube-bed-build"
DEFAULT_RUN_DIR = Path(os.environ.get("KUBE_BED_DIR", "/tmp/ascend-node-kube-bed"))
NPU_RESOURCE = "huawei.com/Ascend910"
# jobspec/skeleton.py's ACCELERATOR_TYPE_LABEL and A3_SUPER_POD_TYPES[16] (MindCluster's values).
A3_LABEL = ("accelerator-type", "module-a3-16-super-pod")
K8S_VERSION = "v1.30.2"
SERVICE_CIDR = "10.96.0.0/16"
LEASE_SECONDS = 40
HEARTBEAT_S = 10.0
# The order processes start in; `down` stops them in reverse.
PROCESSES = ("etcd", "kube-apiserver", "kube-controller-manager", "vc-webhook-manager",
             "vc-controller-manager", "vc-scheduler", "heartbeat")
# Volcano's chart default (values.yaml custom.enabled_admissions) = the webhook-manager's.
ENABLED_ADMISSIONS = ("/jobs/mutate", "/jobs/validate", "/podgroups/mutate", "/pods/validate",
                      "/pods/mutate", "/queues/mutate", "/queues/validate")
VOLCANO_NAMESPACE = "volcano-system"
# `up --kubelet`: the real node's processes (scripts/kube_kubelet.py), stopped first by `down`.
NODE_PROCESSES = ("containerd", "kubelet", "deviceplugin")


class BedError(Exception):
    """`up` could not bring the bed up; the message names what and where its log is."""


class BedInUse(Exception):
    """`up` with other nodes than the running bed's: it is left running, untouched."""


# --------------------------------------------------------------------------------------------
# Certificates (openssl; the standard library cannot sign)


def _openssl(*args: str) -> None:
    subprocess.run(["openssl", *args], check=True, stdout=subprocess.DEVNULL,
                   stderr=subprocess.PIPE)


def _ec_key_req(key: Path, csr: Path, subject: str) -> None:
    _openssl("req", "-new", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
             "-nodes", "-keyout", str(key), "-out", str(csr), "-subj", subject)


def make_ca(pki: Path) -> None:
    _openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
             "-nodes", "-keyout", str(pki / "ca.key"), "-out", str(pki / "ca.crt"),
             "-days", "3650", "-subj", "/CN=kube-bed-ca")
    # The service-account signing key (RSA: what kubeadm generates).
    _openssl("genpkey", "-algorithm", "RSA", "-pkeyopt", "rsa_keygen_bits:2048",
             "-out", str(pki / "sa.key"))
    _openssl("pkey", "-in", str(pki / "sa.key"), "-pubout", "-out", str(pki / "sa.pub"))


def make_cert(pki: Path, name: str, cn: str, org: Optional[str] = None,
              server_names: tuple[str, ...] = ()) -> None:
    """pki/<name>.crt + .key signed by the bed's CA: a server cert when `server_names`
    (SANs like IP:127.0.0.1) are given, else a client cert whose CN/O are the user/group."""
    subject = f"/CN={cn}" + (f"/O={org}" if org else "")
    csr = pki / f"{name}.csr"
    _ec_key_req(pki / f"{name}.key", csr, subject)
    ext = pki / f"{name}.ext"
    usage = "serverAuth" if server_names else "clientAuth"
    lines = ["basicConstraints=CA:FALSE", "keyUsage=critical,digitalSignature,keyEncipherment",
             f"extendedKeyUsage={usage}"]
    if server_names:
        lines.append("subjectAltName=" + ",".join(server_names))
    ext.write_text("\n".join(lines) + "\n")
    _openssl("x509", "-req", "-in", str(csr), "-CA", str(pki / "ca.crt"),
             "-CAkey", str(pki / "ca.key"), "-set_serial", str(secrets.randbits(63)),
             "-days", "3650", "-extfile", str(ext), "-out", str(pki / f"{name}.crt"))
    csr.unlink()
    ext.unlink()


def write_kubeconfig(path: Path, server: str, pki: Path, name: str) -> None:
    path.write_text(f"""apiVersion: v1
kind: Config
clusters:
- name: kube-bed
  cluster:
    server: {server}
    certificate-authority: {pki / 'ca.crt'}
users:
- name: {name}
  user:
    client-certificate: {pki / (name + '.crt')}
    client-key: {pki / (name + '.key')}
contexts:
- name: kube-bed
  context:
    cluster: kube-bed
    user: {name}
    namespace: default
current-context: kube-bed
""")


# --------------------------------------------------------------------------------------------
# Processes


def _start_time(pid: int) -> Optional[str]:
    """The process's start time in clock ticks (/proc/<pid>/stat field 22): with the pid it
    names one process, so a recycled pid is never taken for ours."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat.rsplit(")", 1)[1].split()[19]


def alive(entry: dict[str, Any]) -> bool:
    return _start_time(entry["pid"]) == str(entry["start"])


def spawn(run: Path, name: str, argv: list[str]) -> dict[str, Any]:
    with open(run / "logs" / f"{name}.log", "ab") as log:
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log,
                                stderr=subprocess.STDOUT, start_new_session=True, cwd=run)
    entry = {"pid": proc.pid, "start": _start_time(proc.pid), "argv": argv}
    pids = _load(run).get("pids", {})
    pids[name] = entry
    _save(run, pids=pids)
    return entry


def stop(entry: dict[str, Any], grace: float = 10.0) -> None:
    """SIGTERM the process group the bed started, then SIGKILL after `grace` seconds."""
    if not alive(entry):
        return
    pid = entry["pid"]
    for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(pid, sig)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            if not alive(entry):
                return
            with contextlib.suppress(ChildProcessError):  # our child if `up` started it: reap
                os.waitpid(pid, os.WNOHANG)
            time.sleep(0.1)


def log_tail(run: Path, name: str, lines: int = 15) -> str:
    try:
        text = (run / "logs" / f"{name}.log").read_text(errors="replace")
    except OSError:
        return ""
    return "\n".join(text.splitlines()[-lines:])


def free_ports(n: int) -> list[int]:
    socks = []
    try:
        for _ in range(n):
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


# --------------------------------------------------------------------------------------------
# State


def _load(run: Path) -> dict[str, Any]:
    try:
        state: dict[str, Any] = json.loads((run / "state.json").read_text())
        return state
    except (OSError, ValueError):
        return {}


def _save(run: Path, **fields: Any) -> None:
    state = _load(run)
    state.update(fields)
    tmp = run / "state.json.tmp"
    tmp.write_text(json.dumps(state, indent=2) + "\n")
    tmp.replace(run / "state.json")


def client(run: Path, user: str = "admin") -> Kube:
    """A client of the bed in `run` as `user` (admin = group system:masters)."""
    state = _load(run)
    pki = run / "pki"
    return Kube(Credentials(state["server"], pki / "ca.crt", pki / f"{user}.crt",
                            pki / f"{user}.key"))


def node_names(count: int) -> list[str]:
    return [f"kube-bed-node-{i}" for i in range(count)]


def running(run: Path) -> bool:
    """Every process of the bed alive and the API server ready."""
    state = _load(run)
    pids = state.get("pids", {})
    names = PROCESSES + (NODE_PROCESSES if state.get("kubelet") else ())
    if not state.get("ready") or any(n not in pids or not alive(pids[n]) for n in names):
        return False
    try:
        return bool(client(run).get("/readyz") == "ok")
    except (ApiError, OSError):
        return False


# --------------------------------------------------------------------------------------------
# up


def build() -> Path:
    """The cache's bin directory (scripts/kube-bed-build prints it; builds on first use)."""
    proc = subprocess.run(["sh", str(BUILD)], stdout=subprocess.PIPE, text=True)
    if proc.returncode == 3:
        raise SystemExit(3)
    if proc.returncode != 0:
        raise BedError(f"scripts/kube-bed-build failed (exit {proc.returncode})")
    return Path(proc.stdout.strip().splitlines()[-1])


def _wait_http(url: str, what: str, run: Path, name: str, entry: dict[str, Any],
               timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not alive(entry):
            raise BedError(f"{name} exited during start-up; {run}/logs/{name}.log:\n"
                           + log_tail(run, name))
        try:
            with urllib.request.urlopen(url, timeout=5) as resp:
                if resp.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.3)
    raise BedError(f"{what} not ready within {timeout:.0f} s; {run}/logs/{name}.log:\n"
                   + log_tail(run, name))


def _wait_api(kube: Kube, what: str, probe: Any, run: Path, names: tuple[str, ...],
              timeout: float = 120.0) -> Any:
    pids = _load(run)["pids"]
    deadline = time.monotonic() + timeout
    last: object = None
    while time.monotonic() < deadline:
        for name in names:
            if not alive(pids[name]):
                raise BedError(f"{name} exited during start-up; {run}/logs/{name}.log:\n"
                               + log_tail(run, name))
        try:
            got = probe()
            if got:
                return got
        except (ApiError, OSError) as e:
            last = e
        time.sleep(0.3)
    tails = "\n".join(f"{run}/logs/{n}.log:\n{log_tail(run, n)}" for n in names)
    raise BedError(f"{what}: not within {timeout:.0f} s (last: {last})\n{tails}")


def webhook_documents(template: str, url: str) -> list[str]:
    """Volcano's chart template of its webhook configurations, rendered as `helm install`
    would with the chart's default values, each clientConfig pointing at `url` (the
    webhook-manager on loopback) instead of the in-cluster Service the chart names.

    The template's only directives: `if .Values.custom.admission_enable` (true by default),
    `if .Values.custom.enabled_admissions | regexMatch "<path>"` (the default list),
    `if .Values.custom.common_labels` and `.webhooks_namespace_selector_expressions` (both
    `~` by default), `.Release.Name` and `.Release.Namespace` (volcano, volcano-system)."""
    out: list[str] = []
    keep: list[bool] = []
    lines = template.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        i += 1
        stripped = line.strip()
        if stripped.startswith("{{-") and stripped.endswith("}}"):
            body = stripped[3:-2].strip()
            if body.startswith("if "):
                cond = body[3:]
                if "admission_enable" in cond:
                    value = True
                elif "regexMatch" in cond:
                    value = cond.split('"')[1] in ENABLED_ADMISSIONS
                else:
                    value = False
                keep.append(value)
            elif body == "end":
                keep.pop()
            elif not body.startswith("toYaml"):
                raise ValueError(f"unexpected directive in webhooks.yaml: {stripped}")
            continue
        if not all(keep):
            continue
        if stripped == "service:":
            indent = len(line) - len(line.lstrip())
            path = ""
            while i < len(lines) and len(lines[i]) - len(lines[i].lstrip()) > indent:
                key, _, field = lines[i].strip().partition(":")
                if key == "path":
                    path = field.strip()
                i += 1
            out.append(" " * indent + f"url: {url}{path}")
            continue
        out.append(line.replace("{{ .Release.Namespace }}", VOLCANO_NAMESPACE)
                   .replace("{{ .Release.Name }}", "volcano"))
    return split_documents("\n".join(out) + "\n")


def _now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _micro_now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def node_object(name: str, index: int, a3: bool) -> dict[str, Any]:
    """A Node as a kubelet registers it: labels, capacity/allocatable with the NPUs the
    Ascend device plugin would advertise, Ready, a loopback InternalIP of its own."""
    npus = "16" if a3 else "8"
    labels = {"kubernetes.io/hostname": name, "kubernetes.io/os": "linux",
              "kubernetes.io/arch": "amd64", "beta.kubernetes.io/os": "linux",
              "beta.kubernetes.io/arch": "amd64"}
    if a3:
        labels[A3_LABEL[0]] = A3_LABEL[1]
    # An Atlas 800I A2-sized server (4 x 48-core Kunpeng 920, 1.5 TiB); the figures matter
    # only in that they never limit a job before its NPUs do.
    amounts = {"cpu": "192", "memory": "1536Gi", "pods": "110",
               "ephemeral-storage": "1000Gi", NPU_RESOURCE: npus}
    now = _now()
    conditions = [{"type": t, "status": "False", "reason": f"Kubelet{r}", "message": m,
                   "lastHeartbeatTime": now, "lastTransitionTime": now}
                  for t, r, m in (("MemoryPressure", "HasSufficientMemory", "kube-bed"),
                                  ("DiskPressure", "HasNoDiskPressure", "kube-bed"),
                                  ("PIDPressure", "HasSufficientPID", "kube-bed"))]
    conditions.append({"type": "Ready", "status": "True", "reason": "KubeletReady",
                       "message": "kube-bed fake node", "lastHeartbeatTime": now,
                       "lastTransitionTime": now})
    return {
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "labels": labels},
        "spec": {},
        "status": {
            "capacity": amounts, "allocatable": dict(amounts), "conditions": conditions,
            "addresses": [{"type": "InternalIP", "address": f"127.0.1.{index + 1}"},
                          {"type": "Hostname", "address": name}],
            "nodeInfo": {"kubeletVersion": K8S_VERSION, "kubeProxyVersion": K8S_VERSION,
                         "operatingSystem": "linux", "architecture": "amd64",
                         "containerRuntimeVersion": "kube-bed://0", "osImage": "kube-bed",
                         "kernelVersion": os.uname().release, "machineID": "", "systemUUID": "",
                         "bootID": ""},
        },
    }


def renew_leases(kube: Kube, names: list[str]) -> None:
    for name in names:
        path = f"/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/{name}"
        spec = {"holderIdentity": name, "leaseDurationSeconds": LEASE_SECONDS,
                "renewTime": _micro_now()}
        try:
            kube.merge_patch(path, {"spec": spec})
        except ApiError as e:
            if e.status != 404:
                raise
            node = kube.get(f"/api/v1/nodes/{name}")
            kube.create("/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases", {
                "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                "metadata": {"name": name, "namespace": "kube-node-lease", "ownerReferences": [{
                    "apiVersion": "v1", "kind": "Node", "name": name,
                    "uid": node["metadata"]["uid"]}]},
                "spec": spec})


def heartbeat(run: Path) -> None:
    """Renew every fake node's Lease while the API server runs (the bed's `heartbeat`)."""
    state = _load(run)
    names = state["nodes"]
    kube = client(run)
    # The API server's entry read anew each round: `restart_apiserver` replaces it, and
    # while it is stopped on purpose (`apiserver_stopped`) the heartbeat waits for it.
    while alive(state["pids"]["kube-apiserver"]) or state.get("apiserver_stopped"):
        try:
            renew_leases(kube, names)
        except (ApiError, OSError) as e:
            print(f"{_now()} heartbeat: {e}", flush=True)
        time.sleep(HEARTBEAT_S)
        state = _load(run)


def up(run: Path, nodes: int, a3: bool, kubelet: bool = False,
       images: tuple[str, ...] = ()) -> Path:
    kubeconfig = run / "admin.kubeconfig"
    if running(run):
        state = _load(run)
        if (state.get("node_count") == nodes and state.get("a3") == a3
                and bool(state.get("kubelet")) == kubelet):
            return kubeconfig
        raise BedInUse(f"a bed runs in {run} with --nodes {state.get('node_count')}"
                       f"{' --a3' if state.get('a3') else ''}"
                       f"{' --kubelet' if state.get('kubelet') else ''}: "
                       "`scripts/kube-bed down` first")
    down(run)
    t0 = time.monotonic()
    bindir = build()
    cache = bindir.parent
    t_build = time.monotonic()
    if run.exists():
        shutil.rmtree(run)
    pki = run / "pki"
    for d in (pki, run / "logs", run / "nodes", run / "etcd"):
        d.mkdir(parents=True)
    etcd_port, peer_port, api_port, hook_port, vcm_health, vs_health, vs_metrics = \
        free_ports(7)
    server = f"https://127.0.0.1:{api_port}"
    names = node_names(nodes)
    _save(run, server=server, node_count=nodes, a3=a3, nodes=names, cache=str(cache),
          ports={"etcd": etcd_port, "etcd-peer": peer_port, "kube-apiserver": api_port,
                 "vc-webhook-manager": hook_port}, pids={}, ready=False)

    make_ca(pki)
    make_cert(pki, "kube-apiserver", "kube-apiserver", server_names=(
        # 10.237.0.1: the node agent's bridge gateway, where its pods reach this API server
        # (scripts/kube_node_agent.py API_HOST; no kube-proxy routes the ClusterIP)
        "IP:127.0.0.1", "IP:10.96.0.1", "IP:10.237.0.1", "DNS:localhost", "DNS:kubernetes",
        "DNS:kubernetes.default", "DNS:kubernetes.default.svc",
        "DNS:kubernetes.default.svc.cluster.local"))
    make_cert(pki, "vc-webhook-manager", "volcano-admission-service.volcano-system.svc",
              server_names=("IP:127.0.0.1", "DNS:localhost"))
    make_cert(pki, "admin", "kube-bed-admin", "system:masters")
    # What the API server shows a kubelet when it proxies pods/log, exec, port-forward
    # (kubeadm's apiserver-kubelet-client: a client cert in group system:masters).
    make_cert(pki, "kube-apiserver-kubelet-client", "kube-apiserver-kubelet-client",
              "system:masters")
    # kube-controller-manager as kubeadm runs it: its own user, bound by the API server's
    # bootstrap RBAC policy (system:kube-controller-manager).
    make_cert(pki, "kube-controller-manager", "system:kube-controller-manager")
    # Volcano's components as cluster admins (the chart gives each a ClusterRole; the bed does
    # not test Volcano's own RBAC).
    make_cert(pki, "volcano", "kube-bed-volcano", "system:masters")
    for name in names:  # what a node agent authenticates as: Node authorizer + NodeRestriction
        make_cert(pki, f"node-{name}", f"system:node:{name}", "system:nodes")
        write_kubeconfig(run / "nodes" / f"{name}.kubeconfig", server, pki, f"node-{name}")
    for user in ("admin", "kube-controller-manager", "volcano"):
        write_kubeconfig(run / f"{user}.kubeconfig", server, pki, user)
    t_pki = time.monotonic()

    loop = "http://127.0.0.1"
    etcd = spawn(run, "etcd", [
        str(bindir / "etcd"), "--name", "kube-bed", "--data-dir", str(run / "etcd"),
        "--listen-client-urls", f"{loop}:{etcd_port}",
        "--advertise-client-urls", f"{loop}:{etcd_port}",
        "--listen-peer-urls", f"{loop}:{peer_port}",
        "--initial-advertise-peer-urls", f"{loop}:{peer_port}",
        "--initial-cluster", f"kube-bed={loop}:{peer_port}",
        # A test bed's data need not survive a crash; fsync on a loaded shared disk only slows
        # every write (etcd's documented flag for tests).
        "--unsafe-no-fsync", "--log-level", "warn"])
    _wait_http(f"{loop}:{etcd_port}/health", "etcd", run, "etcd", etcd)
    t_etcd = time.monotonic()

    spawn(run, "kube-apiserver", [
        str(bindir / "kube-apiserver"),
        f"--etcd-servers={loop}:{etcd_port}",
        # every interface: the node agent's pods reach it on their bridge's gateway
        # (10.237.0.1), which exists only once the agent made that network
        "--bind-address=0.0.0.0", "--advertise-address=127.0.0.1",
        f"--secure-port={api_port}",
        f"--tls-cert-file={pki / 'kube-apiserver.crt'}",
        f"--tls-private-key-file={pki / 'kube-apiserver.key'}",
        f"--client-ca-file={pki / 'ca.crt'}",
        "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
        f"--service-account-key-file={pki / 'sa.pub'}",
        f"--service-account-signing-key-file={pki / 'sa.key'}",
        f"--service-cluster-ip-range={SERVICE_CIDR}",
        "--authorization-mode=Node,RBAC",
        "--enable-admission-plugins=NodeRestriction",
        "--allow-privileged=true",
        # The `kubernetes` Service's Endpoints would name 127.0.0.1, which Endpoints
        # validation refuses; nothing in the bed routes through that Service.
        "--endpoint-reconciler-type=none",
        # Reaching a node's kubelet (pods/log): its InternalIP, where the node agent's
        # kubelet port listens (scripts/kube_node_logs.py), as the kubelet-client user;
        # the agent's serving certs are the bed's CA's (the real kubelet of --kubelet
        # signs its own, so only without it is the kubelet's certificate verified).
        f"--kubelet-client-certificate={pki / 'kube-apiserver-kubelet-client.crt'}",
        f"--kubelet-client-key={pki / 'kube-apiserver-kubelet-client.key'}",
        "--kubelet-preferred-address-types=InternalIP",
        *([] if kubelet else [f"--kubelet-certificate-authority={pki / 'ca.crt'}"]),
        f"--cert-dir={pki}", "--profiling=false", "--v=1"])
    admin = client(run)
    _wait_api(admin, "kube-apiserver /readyz", lambda: admin.get("/readyz") == "ok", run,
              ("etcd", "kube-apiserver"))
    t_api = time.monotonic()

    spawn(run, "kube-controller-manager", [
        str(bindir / "kube-controller-manager"),
        f"--kubeconfig={run / 'kube-controller-manager.kubeconfig'}",
        f"--authentication-kubeconfig={run / 'kube-controller-manager.kubeconfig'}",
        f"--authorization-kubeconfig={run / 'kube-controller-manager.kubeconfig'}",
        "--bind-address=127.0.0.1", "--secure-port=0", "--leader-elect=false",
        "--use-service-account-credentials=true",  # each controller as its own SA (kubeadm)
        f"--service-account-private-key-file={pki / 'sa.key'}",
        f"--root-ca-file={pki / 'ca.crt'}",
        f"--service-cluster-ip-range={SERVICE_CIDR}", "--v=1"])

    admin.ensure("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace",
                                        "metadata": {"name": VOLCANO_NAMESPACE}})
    crds = []
    for f in sorted((cache / "crd").glob("*.yaml")):
        for doc in split_documents(f.read_text()):
            try:
                admin.create_yaml(document_path(doc), doc)
            except ApiError as e:
                if e.status != 409:
                    raise
            crds.append(document_name(doc))

    def established() -> bool:
        for name in crds:
            crd = admin.get(f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}")
            conds = (crd.get("status") or {}).get("conditions") or []
            if not any(c["type"] == "Established" and c["status"] == "True" for c in conds):
                return False
        return True

    _wait_api(admin, "Volcano's CRDs Established", established, run, ("kube-apiserver",))
    t_crd = time.monotonic()

    volcano_kc = str(run / "volcano.kubeconfig")
    spawn(run, "vc-webhook-manager", [
        str(bindir / "vc-webhook-manager"), f"--kubeconfig={volcano_kc}",
        f"--tls-cert-file={pki / 'vc-webhook-manager.crt'}",
        f"--tls-private-key-file={pki / 'vc-webhook-manager.key'}",
        f"--ca-cert-file={pki / 'ca.crt'}",
        "--listen-address=127.0.0.1", f"--port={hook_port}",
        f"--webhook-url=https://127.0.0.1:{hook_port}",
        f"--enabled-admission={','.join(ENABLED_ADMISSIONS)}",
        "--logtostderr", "--v=2"])
    hooks = webhook_documents((cache / "webhooks.yaml").read_text(),
                              f"https://127.0.0.1:{hook_port}")
    hook_paths = []
    for doc in hooks:
        path = document_path(doc)
        try:
            admin.create_yaml(path, doc)
        except ApiError as e:
            if e.status != 409:
                raise
        hook_paths.append(f"{path}/{document_name(doc)}")

    def webhooks_served() -> bool:
        for path in hook_paths:  # the webhook-manager patches in its CA once it serves them
            if not all(w.get("clientConfig", {}).get("caBundle")
                       for w in admin.get(path)["webhooks"]):
                return False
        with socket.create_connection(("127.0.0.1", hook_port), timeout=2):
            return True

    _wait_api(admin, "vc-webhook-manager serving", webhooks_served, run,
              ("kube-apiserver", "vc-webhook-manager"))
    t_hook = time.monotonic()

    spawn(run, "vc-controller-manager", [
        str(bindir / "vc-controller-manager"), f"--kubeconfig={volcano_kc}",
        "--leader-elect=false", "--enable-healthz=true",
        f"--healthz-address=127.0.0.1:{vcm_health}", "--logtostderr", "--v=2"])
    spawn(run, "vc-scheduler", [
        str(bindir / "vc-scheduler"), f"--kubeconfig={volcano_kc}",
        f"--scheduler-conf={cache / 'volcano-scheduler.conf'}",
        "--leader-elect=false", "--enable-healthz=true",
        f"--healthz-address=127.0.0.1:{vs_health}",
        f"--listen-address=127.0.0.1:{vs_metrics}",
        f"--cache-dump-dir={run}", "--logtostderr", "--v=2"])
    pids = _load(run)["pids"]
    _wait_http(f"{loop}:{vcm_health}/healthz", "vc-controller-manager", run,
               "vc-controller-manager", pids["vc-controller-manager"])
    _wait_http(f"{loop}:{vs_health}/healthz", "vc-scheduler", run, "vc-scheduler",
               pids["vc-scheduler"])
    # Through the queue webhooks: proves the API server reaches the webhook-manager.
    admin.ensure("/apis/scheduling.volcano.sh/v1beta1/queues", {
        "apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "Queue",
        "metadata": {"name": "default"}, "spec": {"weight": 1, "reclaimable": True}})
    t_volcano = time.monotonic()

    for i, name in enumerate(names):
        node = node_object(name, i, a3)
        admin.ensure("/api/v1/nodes", node)
        admin.merge_patch(f"/api/v1/nodes/{name}/status", {"status": node["status"]})
    renew_leases(admin, names)
    spawn(run, "heartbeat", [sys.executable, str(Path(__file__).resolve()), "_heartbeat",
                             "--run-dir", str(run)])

    def nodes_schedulable() -> bool:
        # TaintNodesByCondition taints a new node not-ready; the node lifecycle controller
        # lifts it once it sees the Ready condition and a fresh lease.
        for name in names:
            if admin.get(f"/api/v1/nodes/{name}")["spec"].get("taints"):
                return False
        sa = admin.get("/api/v1/namespaces/default/serviceaccounts")["items"]
        return any(s["metadata"]["name"] == "default" for s in sa)

    _wait_api(admin, "fake nodes untainted and the default ServiceAccount", nodes_schedulable,
              run, ("kube-apiserver", "kube-controller-manager"), timeout=180.0)
    t_nodes = time.monotonic()
    timings = up_kubelet(run, bindir, a3, images) if kubelet else {}
    _save(run, ready=True, timings_s={**timings,
        "build_or_reuse": round(t_build - t0, 2), "pki": round(t_pki - t_build, 2),
        "etcd": round(t_etcd - t_pki, 2), "kube-apiserver": round(t_api - t_etcd, 2),
        "crds": round(t_crd - t_api, 2), "webhook": round(t_hook - t_crd, 2),
        "volcano": round(t_volcano - t_hook, 2), "nodes": round(t_nodes - t_volcano, 2),
        "start_total": round(t_nodes - t_build, 2)})
    return kubeconfig


# --------------------------------------------------------------------------------------------
# up --kubelet: one real node (docs/kube-bed.md "A real kubelet: what happened")


def up_kubelet(run: Path, bindir: Path, a3: bool, images: tuple[str, ...]) -> dict[str, float]:
    """Start containerd, kubelet v1.30.2 and the fake Ascend device plugin for the node
    `kube-bed-kubelet-0`, which the kubelet registers itself (the bed neither creates nor
    heartbeats it); return once it is Ready, untainted, with its NPUs allocatable."""
    kk = kube_kubelet
    t0 = time.monotonic()
    missing = kk.missing()
    if missing:
        raise BedError(f"--kubelet needs {', '.join(missing)}: "
                       f"apt-get install -y {' '.join(kk.PACKAGES)}")
    bridge = Path(f"/sys/class/net/{kk.BRIDGE}")
    if bridge.exists() or (kk.DEVICE_PLUGINS / "kubelet.sock").exists():
        # One kubelet per machine: the device-plugin directory, the bridge, the pod subnet and
        # the kubepods cgroups are the machine's.
        raise BedError(f"another kube bed's kubelet runs on this machine (bridge {kk.BRIDGE} "
                       f"or {kk.DEVICE_PLUGINS}/kubelet.sock exists): `scripts/kube-bed down "
                       "--run-dir <its run dir>` first")
    proc = subprocess.run(["sh", str(BUILD), "kubelet"], stdout=subprocess.PIPE, text=True)
    if proc.returncode != 0:
        raise BedError(f"scripts/kube-bed-build kubelet failed (exit {proc.returncode})")
    node_dir = Path(proc.stdout.strip().splitlines()[-1])
    t_build = time.monotonic()
    state = _load(run)
    pki, name, d = run / "pki", kk.KUBELET_NODE, run / "kubelet"
    make_cert(pki, f"node-{name}", f"system:node:{name}", "system:nodes")
    kubeconfig = run / "nodes" / f"{name}.kubeconfig"
    write_kubeconfig(kubeconfig, state["server"], pki, f"node-{name}")
    port, healthz = free_ports(2)
    kk.write_configs(d, pki / "ca.crt", port, healthz)
    npus = 16 if a3 else 8
    # Saved before anything starts, so that `down` after a failure knows what to clean.
    _save(run, kubelet={"node": name, "port": port, "healthz": healthz, "npus": npus,
                        "netns_before": kk.netns_names(),
                        "var_lib_kubelet_existed": kk.VAR_LIB_KUBELET.exists(),
                        "var_log_containers_existed": kk.CONTAINER_LOGS.exists()})
    containerd = spawn(run, "containerd", kk.containerd_argv(d))
    if not kk.wait_socket(d, lambda: alive(containerd)):
        raise BedError(f"containerd did not serve; logs/containerd.log:\n"
                       f"{log_tail(run, 'containerd')}")
    t_containerd = time.monotonic()
    for image in (str(node_dir / "pause.oci.tar"), *images):
        err = kk.import_image(d, image)
        if err:
            raise BedError(err)
    t_images = time.monotonic()
    argv = kk.kubelet_argv(node_dir / "bin", d, kubeconfig)
    if a3:
        argv.append(f"--node-labels={A3_LABEL[0]}={A3_LABEL[1]}")
    spawn(run, "kubelet", argv)
    spawn(run, "deviceplugin", [str(node_dir / "bin" / "deviceplugin"),
                                "--dir", str(kk.DEVICE_PLUGINS), "--count", str(npus)])
    admin = client(run)

    def node_ready() -> bool:
        node = admin.get(f"/api/v1/nodes/{name}")
        conds = node["status"].get("conditions", [])
        return (any(c["type"] == "Ready" and c["status"] == "True" for c in conds)
                and not node["spec"].get("taints")
                and node["status"].get("allocatable", {}).get(NPU_RESOURCE) == str(npus))

    _wait_api(admin, f"{name} Ready with {npus} NPUs", node_ready, run,
              ("containerd", "kubelet", "deviceplugin"), timeout=180.0)
    t_ready = time.monotonic()
    return {"kubelet_build_or_reuse": round(t_build - t0, 2),
            "containerd": round(t_containerd - t_build, 2),
            "images": round(t_images - t_containerd, 2),
            "kubelet_ready": round(t_ready - t_images, 2)}


def down_kubelet(run: Path, state: dict[str, Any]) -> None:
    """Stop the real node so that nothing is left: its pods deleted through the API while the
    kubelet runs (it tears their sandboxes down: CNI DEL, network namespace, mounts), then
    the device plugin and the kubelet, every remaining container task, containerd, and what
    they leave outside the run directory (kube_kubelet.cleanup)."""
    pids = state.get("pids", {})
    name = state["kubelet"].get("node", kube_kubelet.KUBELET_NODE)
    d = run / "kubelet"
    if all(n in pids and alive(pids[n]) for n in ("kube-apiserver", "kubelet", "containerd")):
        with contextlib.suppress(ApiError, OSError, TimeoutError):
            admin = client(run)
            sel = f"?fieldSelector=spec.nodeName%3D{name}"
            for pod in admin.get(f"/api/v1/pods{sel}")["items"]:
                meta = pod["metadata"]
                with contextlib.suppress(ApiError):
                    admin.request("DELETE", f"/api/v1/namespaces/{meta['namespace']}/pods/"
                                  f"{meta['name']}", b'{"gracePeriodSeconds": 1}')
            admin.wait_for(f"the pods on {name} gone",
                           lambda: not admin.get(f"/api/v1/pods{sel}")["items"], timeout=60)
    for proc in ("deviceplugin", "kubelet"):
        if proc in pids:
            stop(pids[proc])
    done: list[str] = []
    if "containerd" in pids:
        if alive(pids["containerd"]):
            done += kube_kubelet.stop_containers(d)
        stop(pids["containerd"])
    done += kube_kubelet.cleanup(d, state["kubelet"])
    with open(run / "logs" / "kubelet-cleanup.log", "a") as log:
        log.write(f"{_now()} down: {'; '.join(done) or 'nothing left'}\n")


# --------------------------------------------------------------------------------------------
# The API server alone: stopped and started again (an API server restart, as a cluster's
# control-plane upgrade or a crash does it, while the rest of the bed runs on)


def stop_apiserver(run: Path) -> None:
    """Stop the bed's kube-apiserver only (SIGTERM, then SIGKILL): every client, the
    controllers, Volcano, the node agent and the pods' agents, loses it; etcd keeps the
    state. The heartbeat waits for it to come back."""
    _save(run, apiserver_stopped=True)
    stop(_load(run)["pids"]["kube-apiserver"])


def start_apiserver(run: Path, timeout: float = 120.0) -> None:
    """Start the kube-apiserver `stop_apiserver` stopped, with the same command line (same
    port, certificates and etcd), and return once /readyz answers ok."""
    state = _load(run)
    entry = state["pids"]["kube-apiserver"]
    if not alive(entry):
        spawn(run, "kube-apiserver", list(entry["argv"]))
    admin = client(run)
    try:
        _wait_api(admin, "kube-apiserver /readyz after its restart",
                  lambda: admin.get("/readyz") == "ok", run, ("etcd", "kube-apiserver"),
                  timeout)
    finally:
        _save(run, apiserver_stopped=False)


def restart_apiserver(run: Path, down_s: float = 0.0) -> None:
    """The API server stopped, left down `down_s` seconds, started again (ready)."""
    stop_apiserver(run)
    time.sleep(down_s)
    start_apiserver(run)


# --------------------------------------------------------------------------------------------
# down, status


def down(run: Path) -> None:
    state = _load(run)
    pids = state.get("pids", {})
    if "kubelet" in state:
        down_kubelet(run, state)
    for name in reversed(PROCESSES):
        if name in pids:
            stop(pids[name])
    if pids:
        _save(run, ready=False)


def status(run: Path) -> int:
    state = _load(run)
    pids = state.get("pids", {})
    if not pids:
        print(f"no kube bed in {run}")
        return 1
    up_all = True
    for name in PROCESSES + (NODE_PROCESSES if state.get("kubelet") else ()):
        entry = pids.get(name)
        ok = bool(entry) and alive(entry)
        up_all &= ok
        print(f"{name:24} {'running' if ok else 'stopped'}"
              + (f" pid {entry['pid']}" if entry else ""))
    ready = up_all and running(run)
    print(f"server {state.get('server')}  nodes {state.get('node_count')}"
          f"{' (a3)' if state.get('a3') else ''}  {'ready' if ready else 'NOT ready'}")
    print(f"kubeconfig {run / 'admin.kubeconfig'}")
    return 0 if ready else 1


def main(argv: Optional[list[str]] = None) -> int:
    ap = argparse.ArgumentParser(prog="kube-bed", description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    for name in ("up", "down", "status", "_heartbeat"):
        p = sub.add_parser(name)
        p.add_argument("--run-dir", type=Path, default=DEFAULT_RUN_DIR)
        if name == "up":
            p.add_argument("--nodes", type=int, default=4)
            p.add_argument("--a3", action="store_true")
            p.add_argument("--kubelet", action="store_true",
                           help=f"also run a real kubelet node, {kube_kubelet.KUBELET_NODE}")
            p.add_argument("--kubelet-image", action="append", default=[],
                           help="an image for the kubelet's containerd: a podman reference "
                                "(from the container bed's store) or an OCI archive")
    args = ap.parse_args(argv)
    run = args.run_dir.resolve()
    if args.cmd == "up":
        if not 1 <= args.nodes <= 64:
            ap.error(f"--nodes {args.nodes}: between 1 and 64")
        try:
            print(up(run, args.nodes, args.a3, args.kubelet, tuple(args.kubelet_image)))
        except BedInUse as e:
            print(f"kube-bed up: {e}", file=sys.stderr)
            return 2
        except BedError as e:
            down(run)  # nothing half-up left running; the logs stay in the run directory
            print(f"kube-bed up: {e}", file=sys.stderr)
            return 1
        return 0
    if args.cmd == "down":
        down(run)
        return 0
    if args.cmd == "_heartbeat":
        heartbeat(run)
        return 0
    return status(run)


if __name__ == "__main__":
    sys.exit(main())
