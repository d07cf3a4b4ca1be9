"""A shared directory that is not a shared volume is named for what it is.

`--shared-dir /proc` once ended in `cannot create directory /proc/.ascend-node: No such file
or directory`, which reads as a typo. The kernel's pseudo-filesystems (by their type in
/proc/self/mountinfo) and read-only mounts (statvfs ST_RDONLY / EROFS) get a cause that says
so and a hint, on every node, without waiting for the timeout.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from ascend_node.discover.mounts import mount_for, parse_mountinfo, pseudo_filesystem
from ascend_node.doctor.volume import judge_mount
from tests.cluster_helpers import codes, explain, make_nodes, run

MOUNTINFO = "\n".join([
    "22 1 8:1 / / rw,relatime - ext4 /dev/sda1 rw",
    "23 22 0:21 / /proc rw,nosuid,nodev,noexec,relatime - proc proc rw",
    "24 22 0:22 / /sys rw,nosuid,nodev,noexec,relatime - sysfs sysfs rw",
    "25 24 0:23 / /sys/fs/cgroup rw,nosuid - cgroup2 cgroup2 rw",
    "26 22 0:44 / /mnt/model rw,relatime - nfs4 10.0.0.1:/export rw,vers=4.2",
])


@pytest.mark.parametrize(("path", "fs_type"), [
    ("/proc", "proc"), ("/proc/sys/kernel", "proc"), ("/sys", "sysfs"),
    ("/sys/fs/cgroup/x", "cgroup2"), ("/mnt/model", None), ("/mnt/model/proc", None),
    ("/", None), ("/procfs", None),
])
def test_pseudo_filesystem_by_mount_type(path: str, fs_type: str | None) -> None:
    mount = pseudo_filesystem(path, MOUNTINFO)
    assert (mount.fs_type if mount else None) == fs_type


def test_doctor_fails_volume_mount_on_a_pseudo_filesystem() -> None:
    [proc] = [m for m in parse_mountinfo(MOUNTINFO) if m.mount_point == "/proc"]
    [finding] = judge_mount(proc)
    assert finding.status == "fail"
    assert "/proc is a proc pseudo-filesystem of the kernel, not a shared volume" in finding.cause


def test_this_machines_proc_is_found_as_proc() -> None:
    mount = mount_for("/proc/self")
    assert mount is not None and mount.fs_type == "proc"


@pytest.mark.multiprocess
@pytest.mark.parametrize("shared", ["/proc", "/sys"])
def test_every_node_names_the_pseudo_filesystem_at_once(tmp_path: Path, shared: str) -> None:
    """Node 0 fails creating `.ascend-node` there; node 1 checks before it waits: both exit
    1 (not 4: nobody waits for the timeout) with the cause and hint."""
    nodes = make_nodes(tmp_path, 2, devices=2, timeout=60)
    for node in nodes:
        node.env["ASCEND_NODE_SHARED_DIR"] = shared
    results = run(nodes, 90)
    assert codes(results) == [1, 1], explain(results)
    fs_type = {"/proc": "proc", "/sys": "sysfs"}[shared]
    errors = [r.stderr for r in results]
    assert (f"cannot create directory {shared}/.ascend-node: {shared} is a {fs_type} "
            "pseudo-filesystem of the kernel, not a shared volume (") in errors[0], errors[0]
    assert (f"cannot write to {shared}: {shared} is a {fs_type} pseudo-filesystem of the "
            "kernel, not a shared volume") in errors[1], errors[1]
    for err in errors:
        assert ("hint: point --shared-dir (ASCEND_NODE_SHARED_DIR, else MODEL_PATH) at the "
                "mount of the job's shared PVC") in err
