"""Contract of ascend_node.atomic: all or nothing, right mode and owner, no temp left."""

from __future__ import annotations

import errno
import json
import os
import stat
import threading
from pathlib import Path

import pytest

from ascend_node import atomic
from ascend_node.atomic import atomic_write_bytes, atomic_write_text


def _entries(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir())


@pytest.mark.parametrize("mode", [0o640, 0o600, 0o440, 0o644])
def test_new_file_has_exact_content_and_mode_despite_umask(tmp_path: Path, mode: int) -> None:
    target = tmp_path / "table.json"
    old_umask = os.umask(0o077)
    try:
        atomic_write_bytes(target, b'{"a": 1}\n', mode=mode)
    finally:
        os.umask(old_umask)
    st = target.lstat()
    assert stat.S_ISREG(st.st_mode)
    assert stat.S_IMODE(st.st_mode) == mode
    assert target.read_bytes() == b'{"a": 1}\n'
    assert _entries(tmp_path) == ["table.json"]


def test_default_mode_is_0640_and_owner_is_the_running_user(tmp_path: Path) -> None:
    target = tmp_path / "x"
    atomic_write_text(target, "hello\n")
    st = target.stat()
    assert stat.S_IMODE(st.st_mode) == 0o640
    assert (st.st_uid, st.st_gid) == (os.getuid(), os.getgid())
    assert target.read_text() == "hello\n"


def test_replaces_existing_file_and_a_symlink_becomes_a_regular_file(tmp_path: Path) -> None:
    elsewhere = tmp_path / "configmap-data.json"
    elsewhere.write_text("original")
    link = tmp_path / "config.json"
    link.symlink_to(elsewhere)
    atomic_write_text(link, "patched")
    assert not link.is_symlink()
    assert link.read_text() == "patched"
    assert elsewhere.read_text() == "original", "the link target must not be written through"

    atomic_write_text(link, "again")
    assert link.read_text() == "again"


def test_text_is_utf8_by_default(tmp_path: Path) -> None:
    target = tmp_path / "t"
    atomic_write_text(target, "模型\n")
    assert target.read_bytes() == "模型\n".encode()


@pytest.mark.skipif(os.geteuid() != 0, reason="changing a file's owner needs root")
def test_owner_is_set_before_the_file_appears(tmp_path: Path) -> None:
    target = tmp_path / "ranktable.json"
    atomic_write_bytes(target, b"{}", mode=0o640, uid=12345, gid=23456)
    st = target.stat()
    assert (st.st_uid, st.st_gid) == (12345, 23456)
    assert stat.S_IMODE(st.st_mode) == 0o640


def test_own_uid_is_accepted_without_privileges(tmp_path: Path) -> None:
    target = tmp_path / "f"
    atomic_write_bytes(target, b"x", uid=os.getuid(), gid=os.getgid())
    assert target.stat().st_uid == os.getuid()


def test_missing_directory_raises_file_not_found(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        atomic_write_bytes(tmp_path / "no-such-dir" / "f", b"x")


def test_target_is_a_directory_raises_and_leaves_no_temp(tmp_path: Path) -> None:
    (tmp_path / "d").mkdir()
    with pytest.raises(OSError) as info:
        atomic_write_bytes(tmp_path / "d", b"x")
    assert info.value.errno in (errno.EISDIR, errno.ENOTEMPTY, errno.EEXIST)
    assert _entries(tmp_path) == ["d"]


@pytest.mark.parametrize(
    ("failing", "exc"),
    [
        ("write", OSError(errno.ENOSPC, "No space left on device")),
        ("fsync", OSError(errno.EIO, "Input/output error")),
        ("fchmod", PermissionError(errno.EPERM, "Operation not permitted")),
        ("fchown", PermissionError(errno.EPERM, "Operation not permitted")),
        ("replace", OSError(errno.EXDEV, "Invalid cross-device link")),
    ],
)
def test_any_failure_keeps_the_old_file_and_removes_the_temp(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, failing: str, exc: OSError
) -> None:
    target = tmp_path / "status.json"
    target.write_bytes(b"old")

    def boom(*args: object, **kwargs: object) -> None:
        raise exc

    monkeypatch.setattr(atomic.os, failing, boom)
    with pytest.raises(type(exc)) as info:
        atomic_write_bytes(target, b"new" * 1000, uid=os.getuid())
    monkeypatch.undo()
    assert info.value.errno == exc.errno, "the OSError passes through unchanged"
    assert target.read_bytes() == b"old"
    assert _entries(tmp_path) == ["status.json"]


def test_interrupt_during_write_removes_the_temp(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def interrupted(fd: int, data: object) -> int:
        raise KeyboardInterrupt

    monkeypatch.setattr(atomic.os, "write", interrupted)
    with pytest.raises(KeyboardInterrupt):
        atomic_write_bytes(tmp_path / "f", b"x")
    monkeypatch.undo()
    assert _entries(tmp_path) == []


def test_short_writes_are_completed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    real_write = os.write

    def one_byte_at_a_time(fd: int, data: bytes) -> int:
        return real_write(fd, bytes(data[:1]))

    monkeypatch.setattr(atomic.os, "write", one_byte_at_a_time)
    atomic_write_bytes(tmp_path / "f", b"abcdef")
    monkeypatch.undo()
    assert (tmp_path / "f").read_bytes() == b"abcdef"


def test_directory_fsync_unsupported_is_tolerated(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real_fsync = os.fsync
    calls: list[int] = []

    def fsync(fd: int) -> None:
        calls.append(fd)
        if stat.S_ISDIR(os.fstat(fd).st_mode):
            raise OSError(errno.EINVAL, "Invalid argument")
        real_fsync(fd)

    monkeypatch.setattr(atomic.os, "fsync", fsync)
    atomic_write_bytes(tmp_path / "f", b"x")
    assert len(calls) == 2, "the file and its directory are both fsynced"
    assert (tmp_path / "f").read_bytes() == b"x"


@pytest.mark.parametrize(("durable", "flushes"), [(True, 2), (False, 0)])
def test_only_a_durable_write_flushes_but_every_write_is_whole_with_its_mode(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, durable: bool, flushes: int
) -> None:
    calls: list[int] = []
    real_fsync = os.fsync
    monkeypatch.setattr(atomic.os, "fsync", lambda fd: (calls.append(fd), real_fsync(fd)))
    (tmp_path / "status.json").write_bytes(b"old")
    atomic_write_bytes(tmp_path / "status.json", b"new", mode=0o644, durable=durable)
    assert len(calls) == flushes
    assert (tmp_path / "status.json").read_bytes() == b"new"
    assert stat.S_IMODE((tmp_path / "status.json").stat().st_mode) == 0o644
    assert _entries(tmp_path) == ["status.json"]


def test_the_files_rewritten_on_every_start_are_not_flushed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """status.json, the pre-flight's verdict and the pod's own table outputs (local table,
    master and world-size files, env script, env.json) are written anew by every start
    before anything reads them (a crash loses nothing a restart does not write again):
    none is flushed. What other pods and later starts read — the rendezvous documents,
    the shared table — is."""
    from ascend_node.handoff.outputs import write_table_outputs
    from ascend_node.preflight.record import write_preflight
    from ascend_node.rendezvous.models import ProgressDoc
    from ascend_node.rendezvous.store import write_doc
    from ascend_node.statedir import StatusDoc, write_status

    flushed: list[str] = []
    real_fsync = os.fsync

    def fsync(fd: int) -> None:
        if not stat.S_ISDIR(os.fstat(fd).st_mode):
            flushed.append(os.readlink(f"/proc/self/fd/{fd}"))
        real_fsync(fd)

    monkeypatch.setattr(atomic.os, "fsync", fsync)
    write_status(tmp_path, StatusDoc(state="in_progress", phase="rendezvous", command="ranktable"))
    write_preflight(tmp_path, {"verdict": "ok"})
    table = {"version": "1.0", "status": "completed", "server_count": "1", "server_list": [
        {"server_id": "10.0.0.1", "container_ip": "10.0.0.1", "device": [
            {"device_id": "0", "device_ip": "192.168.1.1", "rank_id": "0"}]}]}
    env = write_table_outputs(tmp_path, json.dumps(table), table, "10.0.0.1",
                              tmp_path / "master", tmp_path / "world_size", None)
    assert env["RANK_TABLE_FILE"] == str(tmp_path / "ranktable.json")
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "env.json", "master", "preflight.json", "ranktable.json", "source_mul_env.sh",
        "status.json", "world_size"]
    assert flushed == []
    shared = tmp_path / "shared"
    shared.mkdir()
    write_doc(shared / "run" / "progress.json",
              ProgressDoc(run_id="r", attempt_id="a1", node_count=2, present=(0,), missing=(1,)),
              shared)
    assert [Path(p).name.split(".tmp-")[0].lstrip(".") for p in flushed] == ["progress.json"]


def test_bad_mode_is_rejected_before_touching_disk(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="0o10000"):
        atomic_write_bytes(tmp_path / "f", b"x", mode=0o10000)
    assert _entries(tmp_path) == []


def test_concurrent_writers_never_expose_a_torn_file(tmp_path: Path) -> None:
    target = tmp_path / "shared.json"
    payloads = [bytes([65 + i]) * 200_000 for i in range(4)]
    atomic_write_bytes(target, payloads[0])
    seen: set[bytes] = set()
    stop = threading.Event()

    def reader() -> None:
        while not stop.is_set():
            seen.add(target.read_bytes())

    def writer(payload: bytes) -> None:
        for _ in range(20):
            atomic_write_bytes(target, payload)

    r = threading.Thread(target=reader)
    r.start()
    writers = [threading.Thread(target=writer, args=(p,)) for p in payloads]
    for w in writers:
        w.start()
    for w in writers:
        w.join()
    stop.set()
    r.join()
    assert seen <= set(payloads), "a reader saw a partial or mixed file"
    assert _entries(tmp_path) == ["shared.json"]
