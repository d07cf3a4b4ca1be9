#!/usr/bin/env python3
"""A container test bed: podman, a registry-free MindIE-like base image, the three images.

The project's images are only proven if they run, so this builds them the way a platform
engineer would (images/README.md) and runs them with podman, offline:

  * podman configured for these machines (images/README.md §5, "podman settings"): runc, the
    hard nofile limit as the default ulimit, cgroupfs under our own memory cgroup, file
    events, and every byte of state (storage, runroot, tmp, volumes, network configs)
    under ONE work directory. Nothing is written to /var/lib/containers.
  * a base image built without any registry: `mmdebstrap` from the mirror the machine's
    apt already uses, piped into `podman import`. It stands in for a MindIE/CANN base:
    python3 + pip, bash, tini, the vendor layout under /usr/local/Ascend (set_env.sh
    scripts, MindIE's real config.json at its default path, a fake mindieservice_daemon
    at its real path) and an atb_llm wheel in /opt/package. No vendor *tool* is in an
    image, as in a real MindIE image: the fake hccn_tool and npu-smi (answering from a
    directory mounted per container) sit on each pod's fake node (`write_node_root`) at
    the host paths the manifest mounts (ascend_node/jobspec/mounts.py), so a pod reaches
    them only through those mounts and a mount the manifest drops fails a test. The fakes
    are the simulation's own (ascend_node/sim/fake_tools.py), in real output formats.
    Its tag is a hash of every input, so a work directory that already holds it (a second
    test run, a second session on the same machine) skips the ~45 s build.
  * the mindie, training and init images, built from that base with the exact commands
    of images/README.md and an offline wheelhouse (scripts/wheelhouse).

Usable as a module (tests/test_containers.py, bench/bench_containers.py) and as a command:

    scripts/container_bed.py build [--work DIR]     # base + the three images, print names
    scripts/container_bed.py commands [--work DIR]  # the podman commands of a 2-pod job
    scripts/container_bed.py teardown [--work DIR]  # containers, networks, processes
    scripts/container_bed.py purge [--work DIR]     # teardown, then delete the work dir
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

DEFAULT_WORK = Path(os.environ.get("ASCEND_NODE_CONTAINERS_WORK",
                                   "/var/tmp/ascend-node-containers"))
PACKAGES = ("podman", "runc", "netavark", "aardvark-dns", "iptables", "mmdebstrap")
SUITE = "bookworm"
BASE_PACKAGES = ("python3", "python3-pip", "tini", "iproute2", "procps", "ca-certificates")
BASE_REPO = "localhost/ascend-node-test-base"
LABEL = "ascend-node-test-bed"  # on every container and network we create
SUBNET_PREFIX = "10.233."  # every job network is 10.233.<n>.0/24
MINDIE_ROOT = "/usr/local/Ascend/mindie/latest/mindie-service"
DAEMON_PATH = MINDIE_ROOT + "/bin/mindieservice_daemon"
CONFIG_PATH = MINDIE_ROOT + "/conf/config.json"
HCCN_TOOL_PATH = "/usr/local/Ascend/driver/tools/hccn_tool"  # on the node, never an image
SIM_DATA_MOUNT = "/etc/ascend-sim"  # the per-container answers of the fake tools
SET_ENV_SCRIPTS = ("ascend-toolkit/set_env.sh", "nnal/atb/set_env.sh", "mindie/set_env.sh",
                   "atb-models/set_env.sh")
ATB_VERSION = "1.0.0"
BUILD_TIMEOUT_S = 900


class BedError(RuntimeError):
    """A one-line reason the bed cannot run (tests skip or fail with it)."""


def missing_tools() -> list[str]:
    """The commands this bed needs that are not installed."""
    need = {"podman": "podman", "runc": "runc", "mmdebstrap": "mmdebstrap",
            "iptables": "iptables"}
    return [pkg for cmd, pkg in need.items() if shutil.which(cmd) is None]


def apt_mirror(sources_dir: Path = Path("/etc/apt")) -> str:
    """The Debian mirror this machine's apt already uses (never a hard-coded host)."""
    candidates = sorted((sources_dir / "sources.list.d").glob("*.sources"))
    for path in candidates:
        text = path.read_text(encoding="utf-8", errors="replace")
        for stanza in re.split(r"\n\s*\n", text):
            uris = re.search(r"^URIs:\s*(\S+)", stanza, re.M)
            suites = re.search(r"^Suites:\s*(.+)$", stanza, re.M)
            if uris and suites and SUITE in suites.group(1).split():
                return uris.group(1)
    legacy = sources_dir / "sources.list"
    if legacy.is_file():
        for line in legacy.read_text(encoding="utf-8", errors="replace").splitlines():
            parts = line.split()
            if len(parts) >= 3 and parts[0] == "deb" and parts[2] == SUITE:
                return parts[1] if not parts[1].startswith("[") else parts[2]
    raise BedError(f"no apt source for Debian {SUITE} in {sources_dir} "
                   "(the base image is built from the mirror apt uses)")


def own_cgroup() -> str:
    """Our memory cgroup (v1) or unified cgroup (v2), '' when we sit at the root."""
    lines = Path("/proc/self/cgroup").read_text().splitlines()
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if "memory" in controllers.split(","):
            return path.rstrip("/")
    for line in lines:
        if line.startswith("0::"):
            return line[3:].rstrip("/")
    return ""


@dataclass
class Pod:
    """One `podman run`: a pod of the job, as Kubernetes + Volcano would start it."""

    name: str
    image: str
    env: dict[str, str]
    mounts: list[tuple[str, str, str]] = field(default_factory=list)  # (host, inner, opts)
    ip: Optional[str] = None
    network: Optional[str] = None
    args: list[str] = field(default_factory=list)
    entrypoint: Optional[list[str]] = None
    stop_timeout: int = 10


class Bed:
    """podman with all state under `work`; images built once per work directory."""

    def __init__(self, work: Path = DEFAULT_WORK) -> None:
        self.work = work.resolve()
        self.conf = self.work / "etc"
        self.images: dict[str, str] = {}
        self.timings: dict[str, float] = {}
        self._cgroup = own_cgroup()
        self._lock: Optional[object] = None

    def lock(self, timeout: float = 900) -> None:
        """Hold the work directory for this process (until it exits): a second test
        session or benchmark on the same machine waits here instead of removing our
        containers and networks, which carry the same names and label."""
        import fcntl

        self.work.mkdir(parents=True, exist_ok=True)
        handle = open(self.work / "lock", "w")  # noqa: SIM115 - held until exit
        end = time.monotonic() + timeout
        while True:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > end:
                    handle.close()
                    raise BedError(f"{self.work} is in use by another session for over "
                                   f"{timeout:g} s (set ASCEND_NODE_CONTAINERS_WORK to "
                                   "use another directory)") from None
                time.sleep(1)
        self._lock = handle

    # ---- podman -------------------------------------------------------------------
    @property
    def env(self) -> dict[str, str]:
        env = dict(os.environ)
        env["CONTAINERS_CONF"] = str(self.conf / "containers.conf")
        env["CONTAINERS_STORAGE_CONF"] = str(self.conf / "storage.conf")
        env["CONTAINERS_REGISTRIES_CONF"] = str(self.conf / "registries.conf")
        env["TMPDIR"] = str(self.work / "tmp")
        return env

    def configure(self) -> None:
        """Write the podman configuration (idempotent)."""
        for sub in ("etc", "storage", "run", "tmp", "volumes", "networks", "ctx", "pods"):
            (self.work / sub).mkdir(parents=True, exist_ok=True)
        hard = _hard_nofile()
        (self.conf / "containers.conf").write_text(
            "[containers]\n"
            f'default_ulimits = ["nofile={hard}:{hard}", "nproc=16384:16384"]\n'
            "[engine]\n"
            'runtime = "runc"\n'
            'cgroup_manager = "cgroupfs"\n'
            'events_logger = "file"\n'
            f'events_logfile_path = "{self.work}/run/events.log"\n'
            f'tmp_dir = "{self.work}/run/libpod"\n'
            f'volume_path = "{self.work}/volumes"\n'
            f'static_dir = "{self.work}/storage/libpod"\n'
            "[network]\n"
            f'network_config_dir = "{self.work}/networks"\n',
            encoding="utf-8")
        (self.conf / "storage.conf").write_text(
            "[storage]\n"
            'driver = "overlay"\n'
            f'graphroot = "{self.work}/storage"\n'
            f'runroot = "{self.work}/run/storage"\n',
            encoding="utf-8")
        (self.conf / "registries.conf").write_text(
            "# no registry: every image is built or imported locally\n"
            "unqualified-search-registries = []\n", encoding="utf-8")

    def podman(self, *args: str, timeout: float = 120, check: bool = True
               ) -> subprocess.CompletedProcess[str]:
        try:
            done = subprocess.run(["podman", *args], env=self.env, capture_output=True,
                                  timeout=timeout, text=True, stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired as exc:
            raise BedError(f"podman {' '.join(args[:3])} did not finish within "
                           f"{timeout:g} s") from exc
        if check and done.returncode != 0:
            raise BedError(f"podman {' '.join(args)} exited {done.returncode}: "
                           f"{_tail(done.stderr)}")
        return done

    def cgroup_args(self, name: str) -> list[str]:
        """Keep containers inside our own cgroup (and out of /libpod_parent)."""
        if not self._cgroup:
            return []
        return [f"--cgroup-parent={self._cgroup}/{name}"]

    # ---- images -------------------------------------------------------------------
    def base_inputs(self) -> dict[str, bytes]:
        """Every file of the vendor layer, by path in the image; the cache key hashes these."""
        from ascend_node.sim.fake_tools import FAKE_DAEMON_SCRIPT, FAKE_SET_ENV_SCRIPT
        from tests.wheel_builder import build_wheel

        config = (ROOT / "ascend_node" / "sim" / "data" / "mindie-config.json").read_bytes()
        wheel_dir = self.work / "tmp" / "atb"
        shutil.rmtree(wheel_dir, ignore_errors=True)
        wheel = build_wheel(wheel_dir, version=ATB_VERSION, mark="image")
        files = {
            DAEMON_PATH: FAKE_DAEMON_SCRIPT.encode(),
            CONFIG_PATH: config,
            f"/opt/package/{wheel.name}": _stable_zip(wheel),
        }
        for rel in SET_ENV_SCRIPTS:
            files[f"/usr/local/Ascend/{rel}"] = FAKE_SET_ENV_SCRIPT.encode()
        return files

    def base_key(self, mirror: str, files: Mapping[str, bytes]) -> str:
        h = hashlib.sha256()
        h.update(json.dumps([SUITE, mirror, BASE_PACKAGES, sorted(files)]).encode())
        for path in sorted(files):
            h.update(path.encode() + b"\0" + hashlib.sha256(files[path]).digest())
        return h.hexdigest()[:12]

    def build_base(self, fresh: bool = False) -> str:
        """The MindIE-like base image; reused when the work dir already holds this key
        (unless `fresh`)."""
        mirror = apt_mirror()
        files = self.base_inputs()
        image = f"{BASE_REPO}:{self.base_key(mirror, files)}"
        exists = self.podman("image", "exists", image, check=False).returncode == 0
        if exists and fresh:
            self.podman("rmi", "-f", image, check=False)
        elif exists:
            self.timings["base_build_s"] = 0.0
            return image
        overlay = self.work / "tmp" / "vendor"
        shutil.rmtree(overlay, ignore_errors=True)
        for path, data in files.items():
            target = overlay / path.lstrip("/")
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(data)
            executable = path == DAEMON_PATH
            target.chmod(0o755 if executable else 0o644)
        (overlay / SIM_DATA_MOUNT.lstrip("/")).mkdir(parents=True, exist_ok=True)
        t0 = time.monotonic()
        strap = [
            "mmdebstrap", "--variant=minbase", "--quiet",
            f"--include={','.join(BASE_PACKAGES)}",
            f"--customize-hook=sync-in {overlay} /",
            # MindIE bases ship their own CPython, which pip may install into; Debian's
            # marks its python as externally managed, which would refuse the atb_llm wheel.
            '--customize-hook=rm -f "$1"/usr/lib/python3*/EXTERNALLY-MANAGED',
            '--customize-hook=rm -rf "$1"/var/lib/apt/lists/* "$1"/var/cache/apt/*',
            SUITE, "-", mirror,
        ]
        tar = self.work / "tmp" / "base.tar"
        with open(tar, "wb") as out:
            done = subprocess.run(strap, stdout=out, stderr=subprocess.PIPE, text=False,
                                  timeout=BUILD_TIMEOUT_S, env=self.env)
        if done.returncode != 0:
            raise BedError(f"mmdebstrap exited {done.returncode}: "
                           f"{_tail(done.stderr.decode(errors='replace'))}")
        changes = [f"ENV ASCEND_NODE_SIM_DATA={SIM_DATA_MOUNT}",
                   "ENV ASCEND_NODE_SIM_PYTHON=python3",
                   "ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
                   'CMD ["bash"]']
        argv = ["import"]
        for change in changes:
            argv += ["--change", change]
        self.podman(*argv, str(tar), image, timeout=300)
        tar.unlink()
        self._drop_stale_bases(image)
        self.timings["base_build_s"] = time.monotonic() - t0
        return image

    def _drop_stale_bases(self, keep: str) -> None:
        """Base images of older inputs: the work dir keeps one (~250 MB)."""
        tags = self.podman("images", "--format", "{{.Repository}}:{{.Tag}}",
                           BASE_REPO, check=False).stdout.split()
        stale = [t for t in tags if t != keep]
        if stale:
            self.podman("rmi", "-f", *stale, check=False)

    def python_target(self, image: str) -> tuple[str, str]:
        """(machine, X.Y) of the image's python3: what the wheelhouse must hold."""
        out = self.podman("run", "--rm", *self.cgroup_args("probe"), "--entrypoint",
                          "python3", image, "-c",
                          "import platform,sys; print(platform.machine(), "
                          "'%d.%d' % sys.version_info[:2])").stdout.split()
        return out[0], out[1]

    def wheelhouse(self, image: str) -> Path:
        """scripts/wheelhouse for the base image's interpreter (needs the package index
        once; pip's cache serves later runs)."""
        arch, python = self.python_target(image)
        out = self.work / "ctx" / "wheelhouse"
        shutil.rmtree(out, ignore_errors=True)
        t0 = time.monotonic()
        done = subprocess.run(
            [sys.executable, str(ROOT / "scripts" / "wheelhouse"), "--out", str(out),
             "--platform", arch, "--python", python],
            capture_output=True, text=True, timeout=BUILD_TIMEOUT_S)
        if done.returncode != 0:
            raise BedError(f"scripts/wheelhouse exited {done.returncode}: "
                           f"{_tail(done.stderr or done.stdout)}")
        self.timings["wheelhouse_s"] = time.monotonic() - t0
        return out

    def build_argv(self, kind: str, base: str, tag: str) -> list[str]:
        """The build command of images/README.md ("Try it with podman"), minus the
        machine's cgroup parent (`build_image` adds it)."""
        argv = ["build", "-f", str(ROOT / "images" / f"{kind}.Dockerfile"),
                "--build-arg", f"BASE_IMAGE={base}"]
        if kind != "init":
            argv += ["--build-arg", "TINI_FROM=base"]
        return [*argv, "-t", tag, str(self.work / "ctx")]

    def build_image(self, kind: str, base: str, no_cache: bool = False) -> str:
        tag = f"localhost/ascend-node-{kind}:test"
        argv = self.build_argv(kind, base, tag)
        extra = self.cgroup_args(f"build-{kind}-{os.getpid()}")
        if no_cache:
            extra.append("--no-cache")
        t0 = time.monotonic()
        self.podman(*argv[:-1], *extra, argv[-1], timeout=BUILD_TIMEOUT_S)
        self.timings[f"build_{kind}_s"] = time.monotonic() - t0
        self.images[kind] = tag
        return tag

    def build_images(self, fresh: bool = False) -> dict[str, str]:
        """Base (cached unless `fresh`), wheelhouse, then mindie / training / init."""
        self.configure()
        base = self.build_base(fresh)
        self.wheelhouse(base)
        self.images = {"base": base}
        for kind in ("mindie", "training", "init"):
            self.build_image(kind, base, no_cache=fresh)
        self.prune()
        return self.images

    def prune(self) -> None:
        """Untagged images left by rebuilding the project images (each run's agent
        wheel differs) would otherwise pile up in the work dir."""
        self.podman("image", "prune", "-f", check=False, timeout=300)

    def image_size(self, image: str) -> int:
        out = self.podman("image", "inspect", "--format", "{{.Size}}", image).stdout
        return int(out.strip())

    # ---- pods ---------------------------------------------------------------------
    def network(self, name: str, subnet: str) -> str:
        self.podman("network", "rm", "-f", name, check=False)
        self.podman("network", "create", "--label", LABEL, "--subnet", subnet, name)
        return name

    def run_argv(self, pod: Pod) -> list[str]:
        """The `podman run` of one pod (images/README.md shows the same)."""
        argv = ["run", "-d", "--name", pod.name, "--hostname", pod.name, "--label", LABEL,
                f"--stop-timeout={pod.stop_timeout}", *self.cgroup_args(pod.name)]
        if pod.network:
            argv += ["--network", pod.network]
        if pod.ip:
            argv += ["--ip", pod.ip]
        for host, inner, opts in pod.mounts:
            argv += ["-v", f"{host}:{inner}" + (f":{opts}" if opts else "")]
        for key, value in pod.env.items():
            argv += ["-e", f"{key}={value}"]
        if pod.entrypoint is not None:
            argv += ["--entrypoint", json.dumps(pod.entrypoint)]
        return [*argv, pod.image, *pod.args]

    def run(self, pod: Pod) -> str:
        return self.podman(*self.run_argv(pod), timeout=60).stdout.strip()

    def inspect(self, name: str) -> dict[str, object]:
        out = self.podman("inspect", "--type", "container", name).stdout
        return json.loads(out)[0]  # type: ignore[no-any-return]

    def state(self, name: str) -> dict[str, object]:
        return self.inspect(name)["State"]  # type: ignore[return-value]

    def wait(self, name: str, timeout: float) -> int:
        code = self.podman("wait", name, timeout=timeout).stdout.strip()
        return int(code.splitlines()[-1])

    def logs(self, name: str) -> str:
        done = self.podman("logs", name, check=False)
        return done.stdout + done.stderr

    def exec(self, name: str, *argv: str, timeout: float = 60
             ) -> subprocess.CompletedProcess[str]:
        return self.podman("exec", name, *argv, timeout=timeout, check=False)

    def remove(self, *names: str) -> None:
        if names:
            self.podman("rm", "-f", "-t", "0", *names, check=False, timeout=120)

    def teardown(self) -> None:
        """Remove every container and network we created; no podman process stays."""
        if shutil.which("podman") is None or not (self.conf / "containers.conf").is_file():
            return
        ids = self.podman("ps", "-aq", "--filter", f"label={LABEL}", check=False).stdout
        self.remove(*ids.split())
        nets = self.podman("network", "ls", "-q", "--filter", f"label={LABEL}",
                           check=False).stdout.split()
        for net in nets:
            self.podman("network", "rm", "-f", net, check=False)
        self.podman("volume", "prune", "-f", check=False)

    def leftovers(self) -> list[str]:
        """What teardown should have removed: our containers and networks, podman or
        conmon processes of this work dir, firewall rules naming our subnets."""
        found = []
        if (self.conf / "containers.conf").is_file():
            ids = self.podman("ps", "-aq", "--filter", f"label={LABEL}", check=False).stdout
            found += [f"container {c}" for c in ids.split()]
            nets = self.podman("network", "ls", "-q", "--filter", f"label={LABEL}",
                               check=False).stdout
            found += [f"network {n}" for n in nets.split()]
        for proc in Path("/proc").iterdir():
            if not proc.name.isdigit() or int(proc.name) == os.getpid():
                continue
            try:
                cmd = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode()
            except OSError:
                continue
            if str(self.work) in cmd and ("conmon" in cmd or "podman" in cmd):
                found.append(f"process {proc.name}: {cmd[:120]}")
        if shutil.which("iptables-save"):
            rules = subprocess.run(["iptables-save"], capture_output=True, text=True,
                                   timeout=30, check=False).stdout
            found += [f"iptables: {ln}" for ln in rules.splitlines() if SUBNET_PREFIX in ln]
        return found


# `/etc/ascend_install.info` as the driver's installer writes it (key=value lines); npu-smi
# reads it, nothing of ours parses it.
ASCEND_INSTALL_INFO = ("UserName=HwHiAiUser\nUserGroup=HwHiAiUser\nDriver_Install_Type=full\n"
                       "Driver_Install_Path_Param=/usr/local/Ascend\n"
                       "Driver_Install_Path=/usr/local/Ascend\nDriver_Install_Mode=normal\n")


def write_node_root(node: Path, hccn_conf: str) -> None:
    """A fake NPU node's host files under `node`, at the paths the manifest mounts
    (`jobspec.mounts.HOST_MOUNTS`): the driver directory with the fake hccn_tool, the fake
    npu-smi, npu-smi's /usr/local/dcmi and /etc/ascend_install.info, /etc/hccn.conf. The
    only place the bed's pods get a vendor tool from."""
    from ascend_node.jobspec.mounts import DCMI_DIR, HCCN_CONF, INSTALL_INFO, NPU_SMI
    from ascend_node.sim.fake_tools import HCCN_TOOL_SCRIPT, NPU_SMI_SCRIPT

    for path, text in ((HCCN_TOOL_PATH, HCCN_TOOL_SCRIPT), (NPU_SMI, NPU_SMI_SCRIPT),
                       (INSTALL_INFO, ASCEND_INSTALL_INFO), (HCCN_CONF, hccn_conf)):
        target = node / path.lstrip("/")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)
        target.chmod(0o755 if path in (HCCN_TOOL_PATH, NPU_SMI) else 0o644)
    (node / DCMI_DIR.lstrip("/")).mkdir(parents=True, exist_ok=True)


def node_mounts(node: Path) -> list[tuple[str, str, str]]:
    """`write_node_root`'s files as the manifest mounts them (read-only hostPaths)."""
    from ascend_node.jobspec.mounts import HOST_MOUNTS

    return [(str(node / path.lstrip("/")), path, "ro") for _, path, _ in HOST_MOUNTS]


class Job:
    """A Volcano job of `nodes` pods on its own bridge network and one shared volume.

    Every pod gets what Volcano's env/svc plugins and the downward API give it (ROLE,
    VC_TASK_INDEX, VC_MASTER_NUM, VC_WORKER_NUM, POD_UID, K8S_POD_IP, K8S_HOST_IP, the
    job version), 4 fake NPUs whose answers sit in a directory mounted at the fake
    tools' data path, the node's vendor files mounted where the manifest mounts them
    (`write_node_root`), and a file mounted at /dev/termination-log (kubelet's).
    Host-side paths: work/pods/<job>/{shared,<pod>/{hccn,out,termination-log}}.
    """

    def __init__(self, bed: Bed, name: str, image: str, nodes: int, subnet: int,
                 devices: int = 4, timeout: float = 60, version: int = 1) -> None:
        self.bed, self.name, self.image, self.nodes = bed, name, image, nodes
        self.subnet, self.devices, self.timeout, self.version = subnet, devices, timeout, version
        self.generation = 0  # bumped by a job restart: new pod UIDs and addresses
        self.dir = bed.work / "pods" / name
        self.shared = self.dir / "shared"
        self.network = f"ascend-node-{name}"
        self.uids: dict[int, str] = {}
        self.extra_env: dict[str, str] = {}

    def create(self) -> Job:
        shutil.rmtree(self.dir, ignore_errors=True)
        self.shared.mkdir(parents=True)
        # MODEL_PATH (/model) is the weight directory too: MindIE refuses to start without
        # the model's config.json in it, and so does `boot` (docs/mindie-config.md).
        from ascend_node.sim.fake_tools import SIM_MODEL_CONFIG

        (self.shared / "config.json").write_text(SIM_MODEL_CONFIG)
        self.bed.network(self.network, f"{SUBNET_PREFIX}{self.subnet}.0/24")
        return self

    def pod_name(self, index: int) -> str:
        role = "master-0" if index == 0 else f"worker-{index - 1}"
        return f"{self.name}-{role}"

    def ip(self, index: int) -> str:
        return f"{SUBNET_PREFIX}{self.subnet}.{10 + 20 * self.generation + index}"

    def host_dir(self, index: int) -> Path:
        return self.dir / self.pod_name(index)

    def pod(self, index: int, image: Optional[str] = None, drop: Sequence[str] = (),
            args: Sequence[str] = (), entrypoint: Optional[list[str]] = None) -> Pod:
        """The pod spec (writes its fake-NPU answers and termination-log file)."""
        import uuid

        from ascend_node.sim.cluster import device_ip, host_ip
        from ascend_node.sim.fake_tools import FakeDevice, write_node_data

        here = self.host_dir(index)
        (here / "out").mkdir(parents=True, exist_ok=True)
        write_node_data(here / "hccn", [FakeDevice(d, device_ip(index, d))
                                        for d in range(self.devices)])
        (here / "termination-log").write_text("")
        uid = self.uids.setdefault(index, str(uuid.uuid4()))
        env = {
            "ROLE": "master" if index == 0 else "worker",
            "VC_TASK_INDEX": str(0 if index == 0 else index - 1),
            "VC_MASTER_NUM": "1", "VC_WORKER_NUM": str(self.nodes - 1),
            "POD_UID": uid, "K8S_POD_IP": self.ip(index), "K8S_HOST_IP": host_ip(index),
            "ASCEND_NODE_JOB_VERSION": str(self.version),
            "MODEL_PATH": "/model", "ASCEND_NODE_RUN_ID": self.name,
            # The image ships MindIE's config.json (httpsEnabled true) and no certificates.
            "ASCEND_NODE_HTTPS": "0",
            "ASCEND_NODE_TIMEOUT": f"{self.timeout:g}",
            "ASCEND_NODE_PROGRESS_INTERVAL": "2",
            "ASCEND_VISIBLE_DEVICES": ",".join(str(d) for d in range(self.devices)),
            "ASCEND_NODE_SIM_REPORT": "/pod/daemon-report.txt",
            "ASCEND_NODE_SIM_SERVE": "1",
            "PYTHONUNBUFFERED": "1",
        }
        env.update(self.extra_env)
        for key in drop:
            env.pop(key, None)
        write_node_root(here / "node", "".join(
            f"address_{d}={device_ip(index, d)}\nnetmask_{d}=255.255.255.0\n"
            for d in range(self.devices)))
        mounts = [(str(self.shared), "/model", ""),
                  *node_mounts(here / "node"),
                  (str(here / "hccn"), SIM_DATA_MOUNT, "ro"),
                  (str(here / "out"), "/pod", ""),
                  (str(here / "termination-log"), "/dev/termination-log", "")]
        return Pod(self.pod_name(index), image or self.image, env, mounts, self.ip(index),
                   self.network, list(args), entrypoint)

    def report(self, index: int) -> Optional[tuple[int, dict[str, str]]]:
        """(pid, environment) the fake daemon recorded in this pod, None before it ran."""
        path = self.host_dir(index) / "out" / "daemon-report.txt"
        if not path.is_file():
            return None
        lines = path.read_text().splitlines()
        env = dict(line.split("=", 1) for line in lines[1:] if "=" in line)
        return int(lines[0].split("=", 1)[1]), env

    def wait_reports(self, indexes: Iterable[int], timeout: float) -> float:
        """Block until every pod's daemon has reported; the monotonic time it happened.

        Fails fast, naming the pod, when a container exits instead."""
        pending = set(indexes)
        end = time.monotonic() + timeout
        while pending:
            for index in sorted(pending):
                if self.report(index) is not None:
                    pending.discard(index)
                    continue
                state = self.bed.state(self.pod_name(index))
                if state.get("Status") == "exited":
                    raise BedError(f"{self.pod_name(index)} exited {state.get('ExitCode')} "
                                   f"before its daemon started: "
                                   f"{_tail(self.bed.logs(self.pod_name(index)), 4)}")
            if not pending:
                break
            if time.monotonic() > end:
                raise BedError(f"no daemon report within {timeout:g} s from "
                               f"{', '.join(self.pod_name(i) for i in sorted(pending))}")
            time.sleep(0.2)
        return time.monotonic()

    def remove(self) -> None:
        self.bed.remove(*(self.pod_name(i) for i in range(self.nodes)))
        self.bed.podman("network", "rm", "-f", self.network, check=False)


def _hard_nofile() -> int:
    import resource

    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    return hard if hard != resource.RLIM_INFINITY else 1048576


def _stable_zip(path: Path) -> bytes:
    """The wheel's bytes with its zip timestamps zeroed: the same wheel, the same key."""
    import io
    import zipfile

    out = io.BytesIO()
    with zipfile.ZipFile(path) as src, zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as dst:
        for info in src.infolist():
            fixed = zipfile.ZipInfo(info.filename, date_time=(1980, 1, 1, 0, 0, 0))
            fixed.external_attr = info.external_attr
            dst.writestr(fixed, src.read(info.filename))
    return out.getvalue()


def _tail(text: str, lines: int = 3) -> str:
    kept = [ln.strip() for ln in text.splitlines() if ln.strip()]
    return " | ".join(kept[-lines:]) or "(no output)"


def command_line(argv: Sequence[str]) -> str:
    import shlex

    return shlex.join(["podman", *argv])


def print_commands(bed: Bed, nodes: int = 2) -> None:
    """The exact build and run commands of a `nodes`-pod MindIE job, as the tests issue
    them (minus --cgroup-parent, a quirk of our CI machines); writes the pods' files."""
    bed.configure()
    mirror = apt_mirror()
    base = f"{BASE_REPO}:{bed.base_key(mirror, bed.base_inputs())}"
    print("# build (base image: scripts/container_bed.py build; wheelhouse for its python)")
    print(f"scripts/wheelhouse --out {bed.work}/ctx/wheelhouse --platform x86_64 --python 3.11")
    for kind in ("mindie", "training", "init"):
        print(command_line(bed.build_argv(kind, base, f"localhost/ascend-node-{kind}:test")))
    job = Job(bed, "demo", "localhost/ascend-node-mindie:test", nodes, subnet=99)
    shutil.rmtree(job.dir, ignore_errors=True)
    job.shared.mkdir(parents=True)
    print(f"# run a {nodes}-pod job")
    print(command_line(["network", "create", "--label", LABEL, "--subnet",
                        f"{SUBNET_PREFIX}{job.subnet}.0/24", job.network]))
    for index in range(nodes):
        argv = bed.run_argv(job.pod(index))
        print(command_line([a for a in argv if not a.startswith("--cgroup-parent")]))
    print(command_line(["exec", job.pod_name(0), "ascend-node", "status"]))
    print(command_line(["logs", job.pod_name(nodes - 1)]))
    print(command_line(["rm", "-f", *(job.pod_name(i) for i in range(nodes))]) + " && "
          + command_line(["network", "rm", job.network]))


def main(argv: Optional[Sequence[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("action", choices=("build", "commands", "teardown", "purge"))
    ap.add_argument("--work", type=Path, default=DEFAULT_WORK,
                    help=f"the one directory holding all state (default {DEFAULT_WORK})")
    args = ap.parse_args(argv)
    bed = Bed(args.work)
    try:
        bed.lock()
        if args.action == "build":
            missing = missing_tools()
            if missing:
                raise BedError(f"not installed: {' '.join(missing)} "
                               f"(apt-get install {' '.join(PACKAGES)})")
            images = bed.build_images()
            for kind, tag in images.items():
                print(f"{kind}: {tag}")
            print(json.dumps({k: round(v, 1) for k, v in bed.timings.items()}))
        elif args.action == "commands":
            print_commands(bed)
        else:
            bed.teardown()
            if args.action == "purge":
                shutil.rmtree(bed.work, ignore_errors=True)
    except BedError as exc:
        print(f"container_bed: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
