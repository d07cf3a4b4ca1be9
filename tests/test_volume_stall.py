"""When the shared volume itself fails: the deadline holds and the cause is named (issue 29).

Fast and on a local disk: a real FIFO (whose open blocks in the kernel like a call to an NFS
server that froze) for the watch itself, and real agent processes whose calls on the shared
directory freeze or fail with EIO while a flag file exists (`tests/frozen_volume.py`). The
same contracts on a real NFS server that freezes are in `tests/test_nfs_faults.py`.
"""

from __future__ import annotations

import errno
import json
import os
import sys
import threading
import time
from pathlib import Path

import pytest

from ascend_node.discover.mounts import Mount
from ascend_node.rendezvous import store, volume_call
from ascend_node.rendezvous.volume_call import (
    VolumeIOError,
    VolumeUnanswered,
    call,
    nfs_server,
    run_watched,
    server_note,
)
from tests.cluster_helpers import codes, explain, make_nodes, run

FAKE = Path(__file__).with_name("frozen_volume.py")
SLACK = 10.0  # the bound: no pod outlives --timeout + 10 s


@pytest.fixture()
def fifo(tmp_path: Path):  # type: ignore[no-untyped-def]
    path = tmp_path / "volume-fifo"
    os.mkfifo(path)
    yield path
    # Release a worker still blocked in open() (a test's abandoned thread).
    try:
        fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK)
        os.close(fd)
    except OSError:
        pass
    volume_call._abandoned.clear()


def _block_on(path: Path) -> None:
    with call("read", path):
        os.close(os.open(path, os.O_RDONLY))  # blocks in the kernel until a writer comes


def test_a_call_that_never_returns_ends_at_the_deadline_naming_the_call(
        fifo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(volume_call, "STUCK_AFTER", 0.3)
    lines: list[str] = []
    started = time.monotonic()
    with pytest.raises(VolumeUnanswered) as got:
        run_watched(lambda: _block_on(fifo), started + 1.5, fifo.parent, 1.5,
                    progress_every=0.5, on_stall=lines.append, grace=0.2)
    assert time.monotonic() - started < 1.5 + SLACK
    assert got.value.exit_code == 4
    assert f"read of {fifo}" in got.value.cause
    assert "the shared volume has not answered for" in got.value.cause
    assert lines and all("has not answered for" in line and str(fifo) in line
                         for line in lines)
    assert volume_call.abandoned()  # the command must end with os._exit


def test_a_worker_that_returns_hands_back_its_value_or_its_error(fifo: Path) -> None:
    assert run_watched(lambda: 7, time.monotonic() + 30, fifo.parent, 30) == 7

    def fails() -> None:
        raise VolumeIOError("cannot open x: Input/output error", "", "x", errno.EIO)

    with pytest.raises(VolumeIOError):
        run_watched(fails, time.monotonic() + 30, fifo.parent, 30)
    assert not volume_call.abandoned()


@pytest.mark.parametrize(("code", "is_volume"), [
    (errno.EIO, True), (errno.ETIMEDOUT, True), (errno.ESTALE, True),
    (errno.ENOENT, False), (errno.EACCES, False), (errno.ELOOP, False),
])
def test_which_errors_say_the_volume_failed(code: int, is_volume: bool) -> None:
    err = volume_call.io_error(OSError(code, os.strerror(code)), "/shared/x", "open")
    assert (err is not None) == is_volume
    if err is not None:
        assert "/shared/x" in err.cause and errno.errorcode[code] in err.cause


def test_an_io_error_is_never_read_as_a_missing_file(tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "attempt.json"
    path.write_text("{}")

    def eio(*args: object, **kwargs: object) -> int:
        raise OSError(errno.EIO, os.strerror(errno.EIO))

    monkeypatch.setattr(store.os, "open", eio)
    with pytest.raises(VolumeIOError) as got:
        store.read_bytes_nofollow(path)
    assert str(path) in got.value.cause and "EIO" in got.value.cause


MOUNTINFO = (
    "22 1 0:21 / / rw - ext4 /dev/sda1 rw\n"
    "40 22 0:40 / /mnt/shared rw,relatime - nfs4 10.99.0.1:/export "
    "rw,vers=4.2,hard,timeo=600,retrans=2,addr=10.99.0.1\n"
    "41 22 0:41 / /mnt/v6 rw - nfs [fd00::1]:/export rw,vers=3\n"
)


def test_the_message_names_the_nfs_server_from_the_mount_table() -> None:
    assert server_note("/mnt/shared/.ascend-node/r", MOUNTINFO) == ", NFS server 10.99.0.1"
    assert server_note("/var/tmp/x", MOUNTINFO) == ""
    v6 = Mount("/mnt/v6", "nfs", "[fd00::1]:/export", {})
    assert nfs_server(v6) == "fd00::1"


# ---------------------------------------------------------------- real agent processes


def _frozen_nodes(tmp_path: Path, nodes: int, timeout: float, soft: bool = False):  # type: ignore[no-untyped-def]
    flag = tmp_path / "frozen"
    pods = make_nodes(tmp_path, nodes, devices=2, timeout=timeout)
    for pod in pods:
        termlog = pod.state_dir.parent / "termination-log"
        termlog.parent.mkdir(parents=True, exist_ok=True)
        termlog.write_text("")
        pod.env.update({"FROZEN_VOLUME_ROOT": str(tmp_path / "shared"),
                        "FROZEN_VOLUME_FLAG": str(flag),
                        "FROZEN_VOLUME_TERMLOG": str(termlog),
                        "ASCEND_NODE_PROGRESS_INTERVAL": "1"})
        if soft:
            pod.env["FROZEN_VOLUME_ERRNO"] = "EIO"
        pod.argv = [sys.executable, str(FAKE), *pod.argv[3:]]
    return pods, flag


def _at(seconds: float, action) -> threading.Timer:  # type: ignore[no-untyped-def]
    timer = threading.Timer(seconds, action)
    timer.start()
    return timer


def _cause(stderr: str) -> str:
    line = next(x for x in stderr.splitlines() if x.startswith("ascend-node: error: "))
    return line.removeprefix("ascend-node: error: ")


def test_a_volume_that_freezes_past_the_deadline_ends_every_pod_with_4_naming_it(
        tmp_path: Path) -> None:
    pods, flag = _frozen_nodes(tmp_path, 3, timeout=8)
    _at(1.5, flag.touch)  # node 2 never comes; the volume freezes while the others wait
    results = run(pods[:2])
    assert codes(results) == [4, 4], explain(results)
    for pod, result in zip(pods, results):
        assert result.seconds < 8 + SLACK, explain(results)
        cause = _cause(result.stderr)
        assert "the shared volume has not answered" in cause, explain(results)
        assert str(tmp_path / "shared") in cause
        assert "missing" not in cause  # the volume is the cause, not the peers
        # a progress line said so while it lasted
        assert "WARNING" in result.stderr or "has not answered for" in result.stderr
        status = json.loads((pod.state_dir / "status.json").read_text())
        assert (status["state"], status["exit_code"], status["message"]) == (
            "failed", 4, cause)
        termlog = (pod.state_dir.parent / "termination-log").read_text()
        assert termlog == f"ascend-node ranktable: exit 4: {cause}"


def test_a_freeze_shorter_than_the_time_left_ends_in_a_normal_rendezvous(
        tmp_path: Path) -> None:
    pods, flag = _frozen_nodes(tmp_path, 2, timeout=60)
    hit = tmp_path / "hit"
    for pod in pods:
        pod.env["FROZEN_VOLUME_HIT"] = str(hit)
    flag.touch()  # frozen from the pods' start (their first look at the shared directory)

    def thaw_once_it_was_met_for_a_while() -> None:  # not at a fixed time from the test's
        end = time.monotonic() + 120                 # start: on a loaded machine the pods'
        while not hit.exists() and time.monotonic() < end:  # imports alone can take 9 s
            time.sleep(0.05)
        time.sleep(9.0)  # long enough for the pods to say the volume has not answered
        flag.unlink()

    threading.Thread(target=thaw_once_it_was_met_for_a_while, daemon=True).start()
    results = run(pods)
    assert codes(results) == [0, 0], explain(results)
    assert any("the shared volume has not answered for" in r.stderr for r in results), (
        explain(results))


def test_a_soft_mount_outage_is_named_and_retried_then_the_job_completes(
        tmp_path: Path) -> None:
    pods, flag = _frozen_nodes(tmp_path, 2, timeout=60, soft=True)
    hit = tmp_path / "hit"
    for pod in pods:
        pod.env["FROZEN_VOLUME_HIT"] = str(hit)
    flag.touch()

    def end_the_outage_once_it_was_met() -> None:  # not at a fixed time: pods start late
        end = time.monotonic() + 120          # on a loaded machine
        while not hit.exists() and time.monotonic() < end:
            time.sleep(0.05)
        time.sleep(1.0)  # the pods' first retries fail too
        flag.unlink()

    threading.Thread(target=end_the_outage_once_it_was_met, daemon=True).start()
    results = run(pods)
    assert codes(results) == [0, 0], explain(results)
    assert any("Input/output error" in r.stderr and "retrying" in r.stderr
               for r in results), explain(results)


def test_a_soft_mount_failing_until_the_deadline_is_exit_4_naming_the_io_error(
        tmp_path: Path) -> None:
    pods, flag = _frozen_nodes(tmp_path, 3, timeout=6, soft=True)
    _at(1.0, flag.touch)
    results = run(pods[:2])
    assert codes(results) == [4, 4], explain(results)
    for result in results:
        assert result.seconds < 6 + SLACK
        cause = _cause(result.stderr)
        assert "I/O error" in cause and "Input/output error" in cause, cause
        assert str(tmp_path / "shared") in cause


def test_doctor_reports_a_volume_that_does_not_answer_instead_of_hanging(
        tmp_path: Path) -> None:
    import subprocess

    from ascend_node.doctor.runner import VOLUME_ANSWER

    shared, flag = tmp_path / "shared", tmp_path / "frozen"
    shared.mkdir()
    flag.touch()
    env = {**os.environ, "FROZEN_VOLUME_ROOT": str(shared), "FROZEN_VOLUME_FLAG": str(flag),
           "ASCEND_NODE_SHARED_DIR": str(shared), "ASCEND_NODE_STATE_DIR": str(tmp_path / "s")}
    started = time.monotonic()
    done = subprocess.run([sys.executable, str(FAKE), "doctor", "--json"], env=env,
                          capture_output=True, text=True, timeout=VOLUME_ANSWER + 60)
    assert time.monotonic() - started < VOLUME_ANSWER + SLACK + 5
    checks = {c["id"]: c for c in json.loads(done.stdout)["checks"]}
    assert checks["volume.answer"]["status"] == "fail"
    assert str(shared) in checks["volume.answer"]["message"]
    assert "did not answer" in checks["volume.answer"]["message"]
