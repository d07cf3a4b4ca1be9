"""doctor's shared-volume checks: the mount (type, options that defeat the protocol) and a
create-and-see probe. Mount lines follow proc(5)'s mountinfo format, with NFS options as
the Linux client prints them (nfs_show_mount_options: `lookupcache=pos`, `nocto`, and
`ac*` only when not the default)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from ascend_node.doctor import volume

NFS42 = ("412 380 0:61 / /mnt/model rw,relatime shared:210 - nfs4 10.0.0.1:/export "
         "rw,vers=4.2,rsize=1048576,wsize=1048576,namlen=255,hard,proto=tcp,timeo=600,"
         "retrans=2,sec=sys,clientaddr=10.0.0.2,local_lock=none,addr=10.0.0.1")
NFS3_NOCTO = ("413 380 0:62 / /mnt/model rw,relatime - nfs 10.0.0.1:/srv/nfs/export "
              "rw,vers=3,rsize=1048576,wsize=1048576,namlen=255,acdirmax=120,hard,nocto,"
              "proto=tcp,timeo=600,retrans=2,sec=sys,mountaddr=10.0.0.1,mountvers=3,"
              "mountport=20048,mountproto=udp,local_lock=none,addr=10.0.0.1")
NFS_POSITIVE = ("414 380 0:63 / /mnt/model rw,relatime - nfs4 10.0.0.1:/export "
                "rw,vers=4.2,lookupcache=pos,hard,proto=tcp,sec=sys,addr=10.0.0.1")
SSHFS = ("415 380 0:64 / /mnt/model rw,nosuid,nodev,relatime - fuse.sshfs "
         "root@10.0.0.1:/export rw,user_id=0,group_id=0")
OVERLAY = ("300 290 0:50 / / rw,relatime - overlay overlay rw,lowerdir=/l,upperdir=/u,"
           "workdir=/w")
ROOT = "22 1 8:1 / / rw,relatime - ext4 /dev/sda1 rw"
SPACE = r"416 380 0:65 / /mnt/my\040model rw - ceph 10.0.0.9:6789:/ rw,name=admin"


def test_parse_mountinfo_reads_type_source_and_merged_options():
    (mount,) = volume.parse_mountinfo(NFS3_NOCTO)
    assert mount.mount_point == "/mnt/model" and mount.fs_type == "nfs"
    assert mount.source == "10.0.0.1:/srv/nfs/export"
    assert mount.options["vers"] == "3" and "nocto" in mount.options
    assert mount.options["relatime"] is None  # per-mount options are kept too


def test_parse_mountinfo_unescapes_and_skips_garbage():
    mounts = volume.parse_mountinfo("\n".join(["garbage", SPACE, "1 2 3 - x", ""]))
    assert [m.mount_point for m in mounts] == ["/mnt/my model"]


@pytest.mark.parametrize(("path", "expect"), [
    ("/mnt/model", "/mnt/model"),
    ("/mnt/model/deep/dir", "/mnt/model"),
    ("/mnt/modelx", "/"),           # a prefix of the name is not a parent directory
    ("/etc", "/"),
])
def test_mount_of_is_the_longest_parent_mount(path, expect):
    mounts = volume.parse_mountinfo("\n".join([ROOT, NFS42]))
    found = volume.mount_of(path, mounts)
    assert found is not None and found.mount_point == expect


def test_mount_of_takes_the_last_of_stacked_mounts():
    found = volume.mount_of("/mnt/model", volume.parse_mountinfo("\n".join([NFS42, SSHFS])))
    assert found is not None and found.fs_type == "fuse.sshfs"


@pytest.mark.parametrize(("line", "status", "words"), [
    (NFS42, "ok", "NFS v4.2 10.0.0.1:/export on /mnt/model, lookupcache=all, acdirmin=30"),
    (NFS_POSITIVE, "ok", "lookupcache=pos"),
    (NFS3_NOCTO, "warn", "`nocto`"),
    (SSHFS, "ok", "fuse.sshfs root@10.0.0.1:/export on /mnt/model"),
    (SPACE, "ok", "ceph"),
])
def test_check_volume_mount(line, status, words, tmp_path, monkeypatch):
    mount = volume.parse_mountinfo(line)[0]
    monkeypatch.setattr(volume.os.path, "realpath", lambda p: mount.mount_point)
    got = volume.check_volume_mount(tmp_path, "\n".join([ROOT, line]))
    assert got.status == status, got
    assert words in got.message
    if status == "warn":
        assert "acdirmax (120 s)" in got.message and "without `nocto`" in got.remedy


def test_a_shared_dir_on_the_containers_overlay_is_not_shared(tmp_path, monkeypatch):
    monkeypatch.setattr(volume.os.path, "realpath", lambda p: "/models")
    got = volume.check_volume_mount(tmp_path, OVERLAY)
    assert got.status == "warn" and "overlay" in got.message and "PVC" in got.remedy


def test_no_mount_table_is_a_warning_not_a_crash(tmp_path):
    got = volume.check_volume_mount(tmp_path, "")
    assert got.status == "warn" and str(tmp_path) in got.message


def test_probe_measures_and_leaves_nothing_behind(tmp_path):
    probe = volume.probe_round_trip(tmp_path)
    assert probe.seconds is not None and 0 <= probe.seconds < 1, probe
    assert list(tmp_path.iterdir()) == []
    result = volume.check_volume_probe(tmp_path, probe)
    assert result.status == "ok" and "round trip" in result.message


def test_probe_keeps_an_existing_state_dir(tmp_path):
    (tmp_path / ".ascend-node" / "run").mkdir(parents=True)
    assert volume.probe_round_trip(tmp_path).seconds is not None
    assert [p.name for p in tmp_path.iterdir()] == [".ascend-node"]
    assert [p.name for p in (tmp_path / ".ascend-node").iterdir()] == ["run"]


def test_probe_on_an_unwritable_volume_fails_with_the_path(tmp_path):
    (tmp_path / "ro").mkdir()
    (tmp_path / "ro").chmod(0o500)
    if os.access(tmp_path / "ro", os.W_OK):  # root writes anyway: make mkdir fail instead
        (tmp_path / "ro").chmod(0o700)
        probe = volume.probe_round_trip(tmp_path / "ro" / "not-a-dir-file")
    else:
        probe = volume.probe_round_trip(tmp_path / "ro")
    assert probe.seconds is None and ".ascend-node-probe-" in probe.error
    result = volume.check_volume_probe(tmp_path, probe)
    assert result.status == "fail" and "read-write" in result.remedy


def test_slow_probe_warns():
    got = volume.check_volume_probe(Path("/mnt/model"), volume.Probe(2.5))
    assert got.status == "warn" and "2500 ms" in got.message


@pytest.mark.parametrize(("nodes", "poll", "status", "words"), [
    (None, 0.2, "skip", "unknown"),  # nothing to estimate: a skip, not an ok (issue 27)
    (4, 0.2, "ok", "N = 4"),
    (1024, 0.2, "ok", "N = 1024"),
    (4096, 0.2, "warn", "N = 4096"),   # over COST_WARN once calm: say so, with the remedy
    (4096, 2.0, "ok", "N = 4096"),     # a slower poll spaces the glances
])
def test_check_poll_cost_reports_the_load_at_this_jobs_size(nodes, poll, status, words):
    got = volume.check_poll_cost(nodes, poll)
    assert got.id == "volume.cost" and got.status == status
    assert words in got.message
    if nodes:
        calm = volume.cadence.job_rpcs_per_second(nodes, poll)
        assert f"~{calm:,.0f} RPC/s while its pods wait" in got.message
        assert (got.status == "warn") == (calm > volume.COST_WARN)
        assert got.status == "ok" or "ASCEND_NODE_POLL_INTERVAL" in got.remedy


def test_the_load_grows_linearly_with_the_waiting_pods():
    per_pod = volume.cadence.follower_rpcs_per_second(0.2, calm=True)
    one = volume.cadence.job_rpcs_per_second(1, 0.2)
    assert volume.cadence.job_rpcs_per_second(1025, 0.2) == pytest.approx(one + 1024 * per_pod)
    assert per_pod <= 5.0  # the bound a calm follower is held to (docs/rendezvous.md)


# ---------------------------------------------------------------------- volume.writers


def _owner(mode: int, uid: int = 1000) -> volume.DirOwner:
    return volume.DirOwner(Path("/models"), mode, uid)


@pytest.mark.parametrize(("owners", "key_id", "status", "words"), [
    ([_owner(0o755)], None, "ok", "only this pod's uid can write"),
    ([_owner(0o1777)], None, "warn", "/models is writable by every uid (mode 1777)"),
    ([_owner(0o2775)], None, "warn", "/models is writable by its group (mode 2775)"),
    ([_owner(0o755, uid=0)], None, "warn",
     "/models is owned by uid 0, this pod runs as uid 1000"),
    ([_owner(0o1777)], "0123456789abcdef", "ok", "rendezvous key id 0123456789abcdef"),
])
def test_volume_writers_warns_without_a_key_when_other_uids_can_write(owners, key_id, status,
                                                                      words):
    got = volume.check_volume_writers(owners, key_id, my_uid=1000)
    assert got.status == status and words in got.message, got
    if status == "warn":
        assert "rendezvous key" in got.remedy


def test_dir_owners_reads_the_shared_dir_and_the_run_dirs_that_exist(tmp_path):
    run = tmp_path / ".ascend-node" / "r"
    run.mkdir(parents=True)
    run.chmod(0o777)
    owners = volume.dir_owners(tmp_path, run)
    assert [o.path for o in owners] == [tmp_path, tmp_path / ".ascend-node", run]
    got = volume.check_volume_writers(owners, None, os.geteuid())
    assert got.status == "warn" and f"{run} is writable by every uid" in got.message
