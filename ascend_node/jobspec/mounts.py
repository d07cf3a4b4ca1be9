"""The host files a rendered pod mounts, and the container paths no option may mount over.

Two facts the manifest renders from one place (pure, no I/O):

* **The node's vendor tools** (`HOST_MOUNTS`). A pod gets no Ascend tool from its image: the
  driver's `hccn_tool` (under `/usr/local/Ascend/driver`), `npu-smi` and what it needs are
  the host's, installed with the driver. The agent needs `hccn_tool` for the device IPs and
  `npu-smi` for the super pod (rank table v1.2 on Atlas A3), the busy-NPU pre-flight and
  doctor's `npu.processes`. The host paths are those Ascend's own container instructions
  bind into MindIE/CANN containers beside the driver directory: `-v
  /usr/local/bin/npu-smi:/usr/local/bin/npu-smi`, `-v /usr/local/dcmi:/usr/local/dcmi`, `-v
  /etc/ascend_install.info:/etc/ascend_install.info` (vllm-project/vllm-ascend's
  installation and tutorial pages, the MindIE `nerdctl run` examples, and the same list in
  the default mounts of MindCluster's Ascend Docker Runtime, gitee.com/ascend/mind-cluster
  component/ascend-docker-runtime): `npu-smi` is a host binary that loads `libdcmi.so`
  from `/usr/local/dcmi` and reads the install record `/etc/ascend_install.info`. Each is
  mounted read-only with a hostPath `type`, so a node without it fails the pod at mount
  time, visibly.
* **Paths a path option may not take** (`check_mount_path`). A PVC mounted at `/dev/shm`
  gives the pod two volumeMounts at one path, which the API server rejects; one at `/etc`
  or `/usr` hides the image's system. Any path equal to a rendered mount, inside one or
  holding one, or equal to (or holding) a system directory, is refused by `manifest`.
"""

from __future__ import annotations

from typing import Optional

from ascend_node.errors import UsageError

# (volume name, host path = container path, hostPath type, what it is)
DRIVER_DIR = "/usr/local/Ascend/driver"
HCCN_CONF = "/etc/hccn.conf"
NPU_SMI = "/usr/local/bin/npu-smi"
DCMI_DIR = "/usr/local/dcmi"
INSTALL_INFO = "/etc/ascend_install.info"
HOST_MOUNTS: tuple[tuple[str, str, str], ...] = (
    ("ascend-driver", DRIVER_DIR, "Directory"),     # hccn_tool under tools/, the libraries
    ("hccn-conf", HCCN_CONF, "File"),               # the fallback device IPs
    ("npu-smi", NPU_SMI, "File"),                   # super pod, busy NPUs
    ("ascend-dcmi", DCMI_DIR, "Directory"),         # npu-smi's libdcmi.so
    ("ascend-install-info", INSTALL_INFO, "File"),  # the driver's install record
)

STATE_MOUNT = "/run/ascend-node"  # the agent's default state dir (statedir.DEFAULT_STATE_DIR)
AGENT_ETC = "/etc/ascend-node"    # the rendezvous key's and the PD configuration's mounts
SHM = "/dev/shm"

# Every path the rendered pods mount (or the runtime does) besides the path options: a
# path option equal to one, inside one or holding one is refused, whether or not this
# particular Job renders it (a path that works only without --https is a trap).
RESERVED_MOUNTS: tuple[tuple[str, str], ...] = (
    (SHM, "its shared memory (a memory emptyDir)"),
    (STATE_MOUNT, "the agent's state dir"),
    (AGENT_ETC, "the agent's Secret and ConfigMap files"),
    ("/etc/volcano", "Volcano's svc plugin ConfigMap"),
    *((path, f"the host's {path} (hostPath)") for _, path, _ in HOST_MOUNTS),
)

# Directories of the image's own system: a volume at (or above) one hides what every
# process of the pod needs. Pseudo-filesystems (/proc, /sys, /dev) also refuse anything
# below them: the runtime mounts them itself.
SYSTEM_DIRS = ("/", "/bin", "/boot", "/dev", "/etc", "/lib", "/lib32", "/lib64", "/libx32",
               "/opt", "/proc", "/root", "/run", "/sbin", "/sys", "/tmp", "/usr",
               "/usr/bin", "/usr/lib", "/usr/local", "/usr/local/bin", "/usr/local/lib",
               "/usr/sbin", "/var", "/var/run", "/var/tmp")
PSEUDO_FS = ("/proc", "/sys", "/dev")
# Trees of the image that a volume anywhere inside would break: CANN, MindIE and its
# configuration (the driver below it is the host's, mounted).
IMAGE_TREES = ("/usr/local/Ascend",)


def under(path: str, mount: str) -> bool:
    """`path` is `mount` or inside it (both absolute, no `..`)."""
    path, mount = path.rstrip("/") or "/", mount.rstrip("/") or "/"
    return path == mount or mount == "/" or path.startswith(mount + "/")


def mount_collision(path: str) -> Optional[str]:
    """Why `path` cannot be a volume's mountPath in a rendered pod, or None."""
    clean = path.rstrip("/") or "/"
    if clean in SYSTEM_DIRS:
        return "is a system directory of the image"
    for mount, what in RESERVED_MOUNTS:
        if under(clean, mount) or under(mount, clean):
            where = ("is" if clean == mount else
                     f"is inside {mount}," if under(clean, mount) else f"holds {mount},")
            return f"{where} where the pod mounts {what}"
    for top in PSEUDO_FS:
        if under(clean, top):
            return f"is under {top}, which the container runtime mounts itself"
    for tree in IMAGE_TREES:
        if under(clean, tree):
            return f"is inside {tree}, the image's CANN/MindIE install"
    for system in SYSTEM_DIRS:
        if under(system, clean):
            return f"holds {system}, a system directory of the image"
    return None


def check_mount_path(flag: str, path: str, example: str) -> None:
    """UsageError (exit 2) naming `flag`, the value and what it collides with."""
    why = mount_collision(path)
    if why is not None:
        raise UsageError(f"{flag} {path} {why}: the pod cannot mount a volume there",
                         f"give {flag} a directory of its own, e.g. {example} "
                         "(docs/deploy.md, \"Paths a volume cannot take\")")
