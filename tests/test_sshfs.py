"""The rendezvous on a real network filesystem: sshfs, one mount per node, caches ON.

An OpenSSH server on 127.0.0.1:<free port> (its own host key and config under tmp, key
auth with a generated key, `-D` in the foreground) serves one export directory; every
simulated pod mounts it with its own `sshfs` process, with sshfs's attribute and
directory caches on (`cache_timeout=20,dcache_timeout=20`, the defaults written out),
so each pod sees the others' files through a cache, as pods on NFS do.

What a pod sees through such a cache (measured in `test_a_rewrite_seen_through_*`):
the first read after another mount replaced a file can stop at the *old* size (the
kernel still holds the old length), i.e. return a prefix of the new document. The
store must refuse that prefix, never act on it.

Skips, with the reason, where the machine cannot do this: not root, no /dev/fuse, or
sshd/sshfs/ssh-keygen missing (`scripts/ci-setup-sshfs` installs them).
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Callable

import pytest

from ascend_node.atomic import atomic_write_bytes
from ascend_node.rendezvous.models import AttemptDoc
from ascend_node.rendezvous.store import Invalid, Valid, read_doc
from tests.cluster_helpers import codes, explain, make_nodes, run, table_of

pytestmark = [pytest.mark.sshfs, pytest.mark.multiprocess]

SSHD = "/usr/sbin/sshd"
CACHE_OPTS = "cache=yes,dir_cache=yes,cache_timeout=20,dcache_timeout=20"


def _why_not() -> str:
    if os.geteuid() != 0:
        return "sshfs tests need root (FUSE mounts and an sshd running as root)"
    if not os.path.exists("/dev/fuse"):
        return "/dev/fuse does not exist (no FUSE in this sandbox)"
    missing = [b for b in ("sshfs", "ssh-keygen", "fusermount3") if shutil.which(b) is None]
    if not os.access(SSHD, os.X_OK):
        missing.insert(0, SSHD)
    if missing:
        return (f"missing {', '.join(missing)} (run scripts/ci-setup-sshfs: Debian packages "
                "openssh-server, sshfs, fuse3)")
    return ""


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class SshfsServer:
    """One sshd on loopback serving `export`; `mount()` adds one sshfs mount per caller."""

    def __init__(self, base: Path) -> None:
        self.base = base
        base.mkdir(parents=True, exist_ok=True)
        self.export = base / "export"
        self.export.mkdir()
        self.port = _free_port()
        self.mounts: list[Path] = []
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        b = self.base
        for name in ("hostkey", "userkey"):
            subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(b / name)],
                           check=True, timeout=30)
        (b / "authorized_keys").write_bytes((b / "userkey.pub").read_bytes())
        (b / "authorized_keys").chmod(0o600)
        (b / "sshd_config").write_text(
            f"ListenAddress 127.0.0.1\nPort {self.port}\nHostKey {b / 'hostkey'}\n"
            f"AuthorizedKeysFile {b / 'authorized_keys'}\nPermitRootLogin prohibit-password\n"
            "PasswordAuthentication no\nKbdInteractiveAuthentication no\nUsePAM no\n"
            "StrictModes no\nPidFile none\nSubsystem sftp internal-sftp\nLogLevel ERROR\n"
            "MaxStartups 64\nMaxSessions 64\n"
        )
        Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)  # privilege separation dir
        log = open(b / "sshd.log", "wb")  # noqa: SIM115
        self.proc = subprocess.Popen([SSHD, "-D", "-e", "-f", str(b / "sshd_config")],
                                     stdout=log, stderr=log, stdin=subprocess.DEVNULL)
        end = time.monotonic() + 10
        while time.monotonic() < end:
            if self.proc.poll() is not None:
                raise RuntimeError(f"sshd exited: {(b / 'sshd.log').read_text()[-500:]}")
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.5).close()
                return
            except OSError:
                time.sleep(0.05)
        raise RuntimeError("sshd did not listen within 10 s")

    def mount(self, mountpoint: Path) -> Path:
        mountpoint.mkdir(parents=True, exist_ok=True)
        opts = (f"IdentityFile={self.base / 'userkey'},StrictHostKeyChecking=no,"
                f"UserKnownHostsFile=/dev/null,BatchMode=yes,port={self.port},{CACHE_OPTS}")
        done = subprocess.run(
            ["sshfs", "-o", opts, f"root@127.0.0.1:{self.export}", str(mountpoint)],
            capture_output=True, timeout=30,
        )
        if done.returncode != 0:
            raise RuntimeError(f"sshfs mount failed: {done.stderr.decode(errors='replace')}")
        self.mounts.append(mountpoint)
        return mountpoint

    def unmount_all(self) -> None:
        for mp in reversed(self.mounts):
            done = subprocess.run(["fusermount3", "-u", str(mp)], capture_output=True,
                                  timeout=30)
            if done.returncode != 0:
                subprocess.run(["umount", "-l", str(mp)], capture_output=True, timeout=30)
        self.mounts.clear()

    def stop(self) -> None:
        self.unmount_all()
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


@pytest.fixture
def sshfs(tmp_path: Path) -> Iterator[SshfsServer]:
    reason = _why_not()
    if reason:
        pytest.skip(reason)
    server = SshfsServer(tmp_path / "sshd")
    try:
        server.start()
    except (RuntimeError, OSError, subprocess.SubprocessError) as exc:
        server.stop()
        pytest.skip(f"cannot start sshd on loopback: {exc}")
    try:
        yield server
    finally:
        server.stop()


def _mounted_nodes(tmp: Path, server: SshfsServer, count: int, **kw: Any) -> list[Any]:
    """Nodes whose shared dir is each its own sshfs mount of the one export."""
    nodes = make_nodes(tmp, count, **kw)
    for node in nodes:
        mp = server.mount(tmp / "mnt" / f"node-{node.index}")
        node.env["ASCEND_NODE_SHARED_DIR"] = str(mp)
    return nodes


def _lag(server: SshfsServer, results: list[Any], run_id: str = "t") -> float:
    """Seconds from the last member's publication to the last node holding the table.

    Publication time: the newest slot's mtime on the export (a local filesystem, ns
    precision). Holding time: each node's status.json `updated_at` when it was done.
    """
    root = server.export / ".ascend-node" / run_id
    attempt = json.loads((root / "attempt.json").read_text())["attempt_id"]
    slots = list((root / "attempts" / attempt).glob("node-*.json"))
    published = max(p.stat().st_mtime for p in slots)
    done = max(json.loads((r.state_dir / "status.json").read_text())["updated_at"]
               for r in results)
    return done - published


def _assert_agree(server: SshfsServer, nodes: list[Any], results: list[Any]) -> bytes:
    assert codes(results) == [0] * len(nodes), explain(results)
    tables = {table_of(r) for r in results}
    assert len(tables) == 1, "nodes hold different tables"
    text = tables.pop()
    assert (server.export / "ranktable-t.json").read_bytes() == text
    servers = json.loads(text)["server_list"]
    assert [s["container_ip"] for s in servers] == [n.env["K8S_POD_IP"] for n in nodes]
    ranks = [int(d["rank_id"]) for s in servers for d in s["device"]]
    assert ranks == list(range(len(nodes) * 2))
    return text


def test_six_nodes_on_separate_cached_mounts_agree_and_lose_no_entry(
    tmp_path: Path, sshfs: SshfsServer, record_property: Callable[[str, object], None],
) -> None:
    nodes = _mounted_nodes(tmp_path, sshfs, 6, devices=2, timeout=40)
    for node, delay in zip(nodes, (0.3, 0.0, 0.2, 0.1, 0.4, 1.5)):
        node.start_delay = delay  # worker 4 (node 5) arrives last, well after the others
    results = run(nodes)
    _assert_agree(sshfs, nodes, results)
    lag = _lag(sshfs, results)
    record_property("sshfs_lag_seconds", round(lag, 3))
    print(f"sshfs: last publication -> last node holding the table: {lag:.3f} s")
    # The contract: about one poll interval (0.25 s), not sshfs's 20 s cache timeout.
    assert lag < 2.0, f"lag {lag:.2f} s: the protocol waits on a cached view"


def test_a_rewrite_seen_through_another_mount_is_old_new_or_refused(
    tmp_path: Path, sshfs: SshfsServer,
) -> None:
    """Never a third thing: a stale-length prefix of the new file must fail validation."""
    a = sshfs.mount(tmp_path / "mnt-a")
    b = sshfs.mount(tmp_path / "mnt-b")

    def doc(n: int, reason: str) -> AttemptDoc:
        return AttemptDoc(run_id="t", attempt_id=f"a{n}", opened_by="u", node_count=2,
                          master_count=1, reason=reason)

    refused = 0
    for n in range(20):
        old, new = doc(n, "x"), doc(n + 1, "y" * (20 + n * 7))
        atomic_write_bytes(a / "attempt.json", old.model_dump_json().encode(), 0o644)
        first = read_doc(b / "attempt.json", AttemptDoc, "t")  # warms b's cache
        assert isinstance(first, Valid) and first.doc == old
        atomic_write_bytes(a / "attempt.json", new.model_dump_json().encode(), 0o644)
        end = time.monotonic() + 25
        while True:
            got = read_doc(b / "attempt.json", AttemptDoc, "t")
            if isinstance(got, Valid):
                assert got.doc in (old, new)
                if got.doc == new:
                    break
            else:
                assert isinstance(got, Invalid) and "not valid JSON" in got.reason, got
                refused += 1
            assert time.monotonic() < end, "the new document never became visible"
            time.sleep(0.02)
    print(f"sshfs: {refused} of 20 first reads after a rewrite were stale-length prefixes")


def test_container_and_job_restart_on_cached_mounts(tmp_path: Path, sshfs: SshfsServer) -> None:
    """Rewritten attempt.json and re-published slots seen through warm caches."""
    import uuid

    nodes = _mounted_nodes(tmp_path, sshfs, 3, devices=2, timeout=30)
    first = _assert_agree(sshfs, nodes, run(nodes))
    again = run([nodes[2]])  # container restart: same POD_UID, same data
    assert codes(again) == [0], explain(again)
    assert table_of(again[0]) == first
    for node in nodes:  # job restart: new pods, new addresses; caches are still warm
        node.env["POD_UID"] = str(uuid.uuid4())
        node.env["K8S_POD_IP"] = f"10.210.0.{node.index + 1}"
        for d in node.devices:
            d.ip = f"10.77.{node.index}.{d.device_id + 1}"
    nodes[0].start_delay = 0.5
    second = _assert_agree(sshfs, nodes, run(nodes))
    assert second != first
