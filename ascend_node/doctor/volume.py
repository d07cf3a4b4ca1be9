"""Checks of the shared volume itself: what it is, how it is mounted, how fast it shows a file.

The rendezvous is fast on a network filesystem only because every wait opens the
directory it watches before looking for a file in it: on NFS that open revalidates the
directory (close-to-open) and drops the cached negative lookups that would otherwise
hide a peer's file for 30-60 s (`rendezvous/freshness.py`; nfs(5); docs/rendezvous.md).
A mount option that switches close-to-open off (`nocto`) defeats that, and a shared
directory on the container's own overlay is not shared at all; doctor says so before a
job waits on it. The mount table comes from `/proc/self/mountinfo` (proc(5)).
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional

from ascend_node.discover.mounts import PSEUDO_FS_TYPES
from ascend_node.discover.mounts import Mount as Mount
from ascend_node.discover.mounts import mount_of as mount_of
from ascend_node.discover.mounts import parse_mountinfo as parse_mountinfo
from ascend_node.doctor.report import CheckResult, Finding, ok, skip, verdict
from ascend_node.rendezvous import cadence
from ascend_node.rendezvous.freshness import revalidate_dir

NFS_TYPES = frozenset({"nfs", "nfs4"})

PROBE_SLOW = 1.0
"""Seconds: a create-and-see round trip slower than this makes every rendezvous step slow."""


def judge_mount(mount: Mount) -> list[Finding]:
    """What the mount means for the rendezvous (pure; table-tested)."""
    opts = mount.options
    if mount.fs_type in NFS_TYPES:
        if "nocto" in opts:
            return [Finding(
                "warn",
                f"{mount.mount_point} is NFS mounted `nocto`: opening a directory no longer "
                "makes the client revalidate it, so a pod may not see a peer's file for up to "
                f"acdirmax ({opts.get('acdirmax') or '60'} s) at every rendezvous step",
                "remount the shared volume without `nocto` (PV `mountOptions`), or add "
                "`lookupcache=positive`",
            )]
        return []
    if mount.fs_type in PSEUDO_FS_TYPES:
        return [Finding(
            "fail",
            f"{mount.mount_point} is a {mount.fs_type} pseudo-filesystem of the kernel, not a "
            "shared volume: the rendezvous cannot write there",
            "mount the job's shared PVC (the model volume) and point --shared-dir at it",
        )]
    if mount.fs_type == "overlay":
        return [Finding(
            "warn",
            f"{mount.mount_point} is the container's own overlay filesystem: pods on other "
            "hosts cannot see files written there",
            "mount the job's shared PVC (the model volume) and point --shared-dir at it",
        )]
    return []


def _note(mount: Mount) -> str:
    opts = mount.options
    if mount.fs_type in NFS_TYPES:
        cache = opts.get("lookupcache") or "all"
        return (f"NFS v{opts.get('vers', '?')} {mount.source} on {mount.mount_point}, "
                f"lookupcache={cache}, acdirmin={opts.get('acdirmin', '30')}: the rendezvous "
                "revalidates each directory before polling it")
    return f"{mount.fs_type} {mount.source} on {mount.mount_point}"


def check_volume_mount(shared_dir: Optional[Path], mountinfo: str) -> CheckResult:
    if shared_dir is None:
        return skip("volume.mount", "no shared directory configured (--shared-dir)")
    real = os.path.realpath(shared_dir)
    mount = mount_of(real, parse_mountinfo(mountinfo))
    if mount is None:
        return CheckResult("volume.mount", "warn",
                           f"no mount in the mount table holds {real}",
                           "check that /proc is mounted in the container")
    return verdict("volume.mount", judge_mount(mount), _note(mount))


@dataclass(frozen=True)
class Probe:
    seconds: Optional[float]
    error: str = ""


def probe_round_trip(
    shared_dir: Path, timeout: float = 5.0, clock: Callable[[], float] = time.monotonic,
) -> Probe:
    """Create a file in a private subdirectory and time until a fresh open of it by name
    succeeds, the way a rendezvous wait looks for a peer's file; then remove both."""
    # Beside, not inside, `.ascend-node`: doctors on several pods run at once, and none
    # may remove a directory another one is using.
    probe_dir = shared_dir / f".ascend-node-probe-{os.getpid()}-{secrets.token_hex(4)}"
    try:
        probe_dir.mkdir(mode=0o700)
    except OSError as exc:
        return Probe(None, f"cannot create {probe_dir}: {exc.strerror or exc}")
    target = probe_dir / "probe.json"
    try:
        started = clock()
        fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            os.write(fd, b"{}\n")
            os.fsync(fd)
        finally:
            os.close(fd)
        while True:
            revalidate_dir(probe_dir, shared_dir)
            with contextlib.suppress(FileNotFoundError):
                os.close(os.open(target, os.O_RDONLY))
                return Probe(clock() - started)
            if clock() - started >= timeout:
                return Probe(None, f"{target} was not visible after {timeout:g} s")
            time.sleep(0.01)
    except OSError as exc:
        return Probe(None, f"cannot write {target}: {exc.strerror or exc}")
    finally:
        shutil.rmtree(probe_dir, ignore_errors=True)


def check_volume_probe(shared_dir: Optional[Path], probe: Optional[Probe]) -> CheckResult:
    if shared_dir is None or probe is None:
        return skip("volume.probe", "no shared directory configured (--shared-dir)")
    if probe.seconds is None:
        return CheckResult("volume.probe", "fail", probe.error,
                           "the rendezvous writes there: mount the shared volume read-write "
                           "and check its free space and permissions")
    ms = probe.seconds * 1000
    if probe.seconds > PROBE_SLOW:
        return CheckResult("volume.probe", "warn",
                           f"creating a file and seeing it took {ms:.0f} ms on {shared_dir}",
                           "every rendezvous step costs at least this much; check the "
                           "filesystem server's load and the network to it")
    return ok("volume.probe", f"create-and-see round trip {ms:.1f} ms on {shared_dir}")


COST_WARN = 10_000.0
"""RPC/s: a waiting job that asks the shared volume's server for more than this, once
calm, is a load other tenants of that server will notice."""


def check_poll_cost(node_count: Optional[int], poll_interval: float) -> CheckResult:
    """What the rendezvous will ask of the volume's server at this job's N (the cadence
    and its measured per-poll costs, `rendezvous/cadence.py`): RPCs a second while pods
    wait (calm, and in their first seconds) and RPCs to complete."""
    if node_count is None:
        return skip("volume.cost", "the job's size is unknown (no identity): no estimate")
    calm = cadence.job_rpcs_per_second(node_count, poll_interval)
    fast = cadence.job_rpcs_per_second(node_count, poll_interval, calm=False)
    done = cadence.COMPLETE_RPCS_PER_NODE * node_count
    fast_for = cadence.fast_for(node_count)
    first = (f"{cadence.follower_rpcs_per_second(poll_interval, False, node_count):.0f} "
             f"before; ~{fast:,.0f} RPC/s if all were in their first {fast_for:g} s"
             if fast_for else
             f"from its start: at N >= {cadence.GLANCE_FROM_START_AT} a follower glances "
             f"at once, at most {cadence.peak_follower_rpcs(poll_interval, node_count):.1f}"
             f" RPC/s in any {cadence.LOOK_EVERY:g} s, its join included")
    text = (f"at N = {node_count} and a poll interval of {poll_interval:g} s "
            "(ASCEND_NODE_POLL_INTERVAL) the rendezvous asks "
            f"an NFS server for ~{calm:,.0f} RPC/s while its pods wait "
            f"(~{cadence.follower_rpcs_per_second(poll_interval, True):.1f} per waiting pod "
            f"once calm, {first}) and ~{done:,.0f} RPCs to complete")
    if calm > COST_WARN:
        return CheckResult("volume.cost", "warn", text,
                           "a raised ASCEND_NODE_POLL_INTERVAL (over 0.5 s) spaces every waiting "
                           "pod's glances; or give the rendezvous a volume of its own")
    return ok("volume.cost", text)


@dataclass(frozen=True)
class DirOwner:
    path: Path
    mode: int
    uid: int


def dir_owners(shared_dir: Path, run_root: Optional[Path]) -> list[DirOwner]:
    """The shared directory and, when they exist, `.ascend-node` and the run's own
    directory: whoever can write one of them can plant rendezvous documents."""
    out = []
    candidates = [shared_dir, shared_dir / ".ascend-node"]
    if run_root is not None:
        candidates.append(run_root)
    for path in candidates:
        try:
            st = os.lstat(path)
        except OSError:
            continue
        out.append(DirOwner(path, st.st_mode & 0o7777, st.st_uid))
    return out


def check_volume_writers(owners: Sequence[DirOwner], key_id: Optional[str],
                         my_uid: int) -> CheckResult:
    """Who else can write the run's documents, and whether the job has a key.

    Without a key a document is checked (shape, cross-checks with the slots), not
    authenticated: another writer of the volume can plant a table some pods would
    take (docs/rendezvous.md, threat model). Pure; table-tested."""
    if key_id is not None:
        return ok("volume.writers", f"rendezvous key id {key_id}: documents on the shared "
                                    "volume are signed and checked")
    others = []
    for d in owners:
        if d.mode & 0o002:
            others.append(f"{d.path} is writable by every uid (mode {d.mode:04o})")
        elif d.mode & 0o020:
            others.append(f"{d.path} is writable by its group (mode {d.mode:04o})")
        if d.uid != my_uid and d.mode & 0o200:
            others.append(f"{d.path} is owned by uid {d.uid}, this pod runs as uid {my_uid}")
    if not others:
        return ok("volume.writers", "no rendezvous key: documents are checked, not "
                                    "authenticated; only this pod's uid can write the "
                                    "shared directory (root without root_squash aside)")
    return CheckResult(
        "volume.writers", "warn",
        "no rendezvous key, and other uids can write the rendezvous: "
        + "; ".join(others[:3]) + (f" and {len(others) - 3} more" if len(others) > 3 else ""),
        "give the job a rendezvous key (`ascend-node manifest --rendezvous-key` renders a "
        "Secret; ASCEND_NODE_RENDEZVOUS_KEY or --rendezvous-key-file), or make the "
        "shared directory writable by the job's uid only",
    )
