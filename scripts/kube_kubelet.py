"""A real kubelet node for the kube bed (issue 37, deliverable 3, time-boxed attempt).

`scripts/kube-bed up --kubelet` adds one node that is not faked: kubelet v1.30.2 (built from the
same k8s.io/kubernetes module as the API server, scripts/kube-bed-build) over a bed-private
containerd (Debian's, CRI v1) with runc and the bridge + host-local CNI plugins (Debian's
containernetworking-plugins). No registry is reachable, so the sandbox ("pause") image is a
tiny static Go program of ours (scripts/kube-bed-go/pause) packed by podman from scratch, and
images are imported into containerd's `k8s.io` namespace from OCI archives.

Everything lives under <run>/kubelet/: containerd's root, state and socket, the CNI config and
IPAM state, the kubelet's root dir, config and pod logs. The kubelet listens on 127.0.0.1 only.
What cannot be kept in the run directory, and `down` therefore removes by name: the bridge
`kbed0`, the network namespaces containerd creates under /var/run/netns (those not there at
`up`), /var/log/containers symlinks into our pod logs, and the cgroups the kubelet creates
(`/kubepods` in each v1 hierarchy).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any, Callable

KUBELET_NODE = "kube-bed-kubelet-0"
PAUSE_IMAGE = "localhost/kube-bed/pause:3.9"
BRIDGE = "kbed0"
POD_SUBNET = "10.234.0.0/24"  # the podman bed uses 10.233.<n>.0/24
CNI_BIN = "/usr/lib/cni"
RUNC = "/usr/sbin/runc"
NETNS_DIR = Path("/var/run/netns")
CONTAINER_LOGS = Path("/var/log/containers")
PACKAGES = ("containerd", "runc", "containernetworking-plugins")
# kubelet 1.30 serves the device-plugin registration socket at a fixed path
# (k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1 DevicePluginPath), whatever --root-dir says.
VAR_LIB_KUBELET = Path("/var/lib/kubelet")
DEVICE_PLUGINS = VAR_LIB_KUBELET / "device-plugins"
DEVICE_PLUGIN_SOCKET = "kube-bed-ascend910.sock"  # deviceplugin/main.go's endpoint name


def missing() -> list[str]:
    """What this machine lacks for a real node (Debian package names)."""
    need = {"containerd": shutil.which("containerd"), "runc": os.path.exists(RUNC) or None,
            "containernetworking-plugins": os.path.exists(f"{CNI_BIN}/bridge") or None}
    return [p for p, ok in need.items() if not ok]


def containerd_config(d: Path) -> str:
    """containerd 1.6's config (version 2): every path in the bed's run directory, the CRI
    plugin's sandbox image ours, runc with cgroupfs (the kubelet's cgroupDriver)."""
    cri = 'plugins."io.containerd.grpc.v1.cri"'
    return f"""version = 2
root = "{d}/containerd/root"
state = "{d}/containerd/state"
disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs",
                    "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper",
                    "io.containerd.tracing.processor.v1.otlp"]

[grpc]
  address = "{d}/containerd/containerd.sock"

[ttrpc]
  address = "{d}/containerd/containerd.sock.ttrpc"

[plugins."io.containerd.internal.v1.opt"]
  path = "{d}/containerd/opt"

[{cri}]
  sandbox_image = "{PAUSE_IMAGE}"
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  enable_selinux = false
  # This VM's root lacks CAP_SYS_RESOURCE: no process may lower its oom_score_adj, and the
  # kubelet asks -998 for every sandbox (runc then fails: "can't get final child's PID from
  # pipe: EOF"). containerd's option for exactly this (meant for rootless/userns) clamps
  # each OOMScoreAdj to containerd's own.
  restrict_oom_score_adj = true
  [{cri}.containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [{cri}.containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [{cri}.containerd.runtimes.runc.options]
        SystemdCgroup = false
        BinaryName = "{RUNC}"
  [{cri}.cni]
    bin_dir = "{CNI_BIN}"
    conf_dir = "{d}/cni/net.d"
    max_conf_num = 1
"""


def cni_config(d: Path) -> str:
    return json.dumps({
        "cniVersion": "1.0.0", "name": "kube-bed",
        "plugins": [{"type": "bridge", "bridge": BRIDGE, "isGateway": True, "ipMasq": False,
                     "hairpinMode": True,
                     "ipam": {"type": "host-local", "ranges": [[{"subnet": POD_SUBNET}]],
                              "dataDir": str(d / "cni" / "ipam")}}]}, indent=1)


def kubelet_config(d: Path, ca: Path, port: int, healthz: int) -> str:
    """A KubeletConfiguration (v1beta1) for a loopback-only test node on cgroup v1."""
    return f"""apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: 127.0.0.1
port: {port}
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: {healthz}
cgroupDriver: cgroupfs
failSwapOn: false
containerRuntimeEndpoint: unix://{d}/containerd/containerd.sock
authentication:
  anonymous:
    enabled: false
  webhook:
    enabled: false
  x509:
    clientCAFile: {ca}
authorization:
  mode: AlwaysAllow
clusterDomain: cluster.local
resolvConf: /etc/resolv.conf
makeIPTablesUtilChains: false
podLogsDir: {d}/pod-logs
volumePluginDir: {d}/volume-plugins
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard:
  memory.available: 50Mi
  nodefs.available: 1%
  imagefs.available: 1%
  nodefs.inodesFree: 1%
serializeImagePulls: false
"""


def write_configs(d: Path, ca: Path, port: int, healthz: int) -> None:
    for sub in ("containerd", "cni/net.d", "cni/ipam", "root", "pod-logs", "volume-plugins"):
        (d / sub).mkdir(parents=True, exist_ok=True)
    (d / "containerd.toml").write_text(containerd_config(d))
    (d / "cni" / "net.d" / "10-kube-bed.conflist").write_text(cni_config(d))
    (d / "kubelet.yaml").write_text(kubelet_config(d, ca, port, healthz))


def ctr(d: Path, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["ctr", "--address", str(d / "containerd" / "containerd.sock"),
                           "-n", "k8s.io", *args], capture_output=True, text=True,
                          timeout=timeout, stdin=subprocess.DEVNULL)


def wait_socket(d: Path, alive: Callable[[], bool], timeout: float = 60) -> bool:
    sock = d / "containerd" / "containerd.sock"
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and alive():
        if sock.exists() and ctr(d, "version", timeout=10).returncode == 0:
            return True
        time.sleep(0.5)
    return False


def netns_names() -> list[str]:
    try:
        return sorted(p.name for p in NETNS_DIR.iterdir())
    except OSError:
        return []


def kubelet_argv(bindir: Path, d: Path, kubeconfig: Path) -> list[str]:
    return [str(bindir / "kubelet"), f"--config={d / 'kubelet.yaml'}",
            f"--kubeconfig={kubeconfig}", f"--root-dir={d / 'root'}",
            f"--cert-dir={d / 'root' / 'pki'}", f"--hostname-override={KUBELET_NODE}",
            "--v=2"]


def containerd_argv(d: Path) -> list[str]:
    return ["containerd", "--config", str(d / "containerd.toml")]


# --------------------------------------------------------------------------------------------
# clean-up: what the kubelet, containerd and CNI leave outside the run directory


def _mounts_under(root: Path) -> list[str]:
    out = []
    with contextlib.suppress(OSError):
        for line in Path("/proc/self/mounts").read_text().splitlines():
            target = line.split()[1].replace("\\040", " ")
            if target == str(root) or target.startswith(f"{root}/"):
                out.append(target)
    return out


def _shims(d: Path) -> list[int]:
    """containerd-shim-runc-v2 processes started for our containerd (its socket in argv)."""
    sock = str(d / "containerd" / "containerd.sock")
    pids = []
    for p in Path("/proc").iterdir():
        if not p.name.isdigit():
            continue
        try:
            argv = (p / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if argv and argv[0].endswith(b"containerd-shim-runc-v2") and sock.encode() in argv:
            pids.append(int(p.name))
    return pids


def cleanup(d: Path, state: dict[str, Any]) -> list[str]:
    """After kubelet and containerd are stopped: kill our shims (and so their containers),
    unmount what is mounted under `d` (deepest first), remove the network namespaces that
    appeared since `up`, the bridge, the /var/log/containers links into `d`, the kubelet's
    cgroups. Returns what it did, for the log."""
    done = []
    for pid in _shims(d):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, 9)
            done.append(f"killed shim {pid}")
    time.sleep(0.5)
    for target in sorted(_mounts_under(d), key=len, reverse=True):
        if subprocess.run(["umount", target], capture_output=True).returncode != 0:
            subprocess.run(["umount", "-l", target], capture_output=True)
        done.append(f"umount {target}")
    before = set(state.get("netns_before", []))
    for name in netns_names():
        if name.startswith("cni-") and name not in before:
            path = NETNS_DIR / name
            subprocess.run(["umount", str(path)], capture_output=True)
            with contextlib.suppress(OSError):
                path.unlink()
            done.append(f"netns {name}")
    for sock in (DEVICE_PLUGINS / DEVICE_PLUGIN_SOCKET, DEVICE_PLUGINS / "kubelet.sock",
                 DEVICE_PLUGINS / "kubelet_internal_checkpoint"):
        with contextlib.suppress(OSError):
            sock.unlink()
    if not state.get("var_lib_kubelet_existed", True):
        shutil.rmtree(VAR_LIB_KUBELET, ignore_errors=True)
    if Path(f"/sys/class/net/{BRIDGE}").exists():
        subprocess.run(["ip", "link", "del", BRIDGE], capture_output=True)
        done.append(f"link {BRIDGE}")
    with contextlib.suppress(OSError):
        for link in CONTAINER_LOGS.iterdir():
            with contextlib.suppress(OSError):
                if link.is_symlink() and os.readlink(link).startswith(f"{d}/"):
                    link.unlink()
    if not state.get("var_log_containers_existed", True):
        with contextlib.suppress(OSError):
            CONTAINER_LOGS.rmdir()  # only when empty: another kubelet's links stay
    for hierarchy in Path("/sys/fs/cgroup").iterdir():
        top = hierarchy / "kubepods"
        if top.is_dir():
            # rmdir leaves first; a cgroup with a live task stays (and is reported).
            for sub in sorted((p for p in top.rglob("*") if p.is_dir()),
                              key=lambda p: len(p.parts), reverse=True):
                with contextlib.suppress(OSError):
                    sub.rmdir()
            try:
                top.rmdir()
            except OSError as e:
                done.append(f"cgroup {top} left: {e}")
    return done


# --------------------------------------------------------------------------------------------
# images


def podman_env() -> dict[str, str]:
    """podman pointed at the container bed's store (scripts/container_bed.py), where our
    images are built, when it has one; else podman's defaults."""
    env = dict(os.environ)
    work = Path(os.environ.get("ASCEND_NODE_CONTAINERS_WORK", "/var/tmp/ascend-node-containers"))
    if (work / "etc" / "storage.conf").exists():
        env["CONTAINERS_STORAGE_CONF"] = str(work / "etc" / "storage.conf")
        env["CONTAINERS_CONF"] = str(work / "etc" / "containers.conf")
    return env


def import_image(d: Path, image: str) -> str:
    """Import `image` into containerd's k8s.io namespace: an OCI archive path, or a podman
    image reference (saved from the container bed's store). Returns '' or the error."""
    archive = Path(image)
    tmp = None
    if not archive.is_file():
        tmp = d / "import.oci.tar"
        done = subprocess.run(["podman", "save", "--format", "oci-archive", "-o", str(tmp),
                               image], env=podman_env(), capture_output=True, text=True,
                              timeout=600, stdin=subprocess.DEVNULL)
        if done.returncode != 0:
            return f"podman save {image}: {done.stderr.strip()[-300:]}"
        archive = tmp
    try:
        done = ctr(d, "images", "import", str(archive), timeout=600)
        return "" if done.returncode == 0 else f"ctr import {image}: {done.stderr.strip()[-300:]}"
    finally:
        if tmp is not None:
            with contextlib.suppress(OSError):
                tmp.unlink()


# --------------------------------------------------------------------------------------------
# stop


def stop_containers(d: Path) -> list[str]:
    """Kill every task of our containerd (the kubelet is already stopped, so nothing restarts
    them) and delete them, so their shims exit and their rootfs mounts go."""
    done = []
    tasks = ctr(d, "tasks", "ls", "-q", timeout=30)
    ids = tasks.stdout.split() if tasks.returncode == 0 else []
    for cid in ids:
        ctr(d, "tasks", "kill", "-s", "SIGKILL", cid, timeout=30)
    for cid in ids:
        for _ in range(20):
            if ctr(d, "tasks", "delete", cid, timeout=30).returncode == 0:
                done.append(f"task {cid[:12]}")
                break
            time.sleep(0.5)
    return done
