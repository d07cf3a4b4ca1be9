"""Faults: SIGKILL at chosen and random points, full and read-only volumes, skewed clocks.

Invariants checked after every fault (`check_volume`, `check_tables`):
- no file under its final name on the shared volume is torn: each parses as JSON
  (temp files `.<name>.tmp-*` left by a killed writer are never read by anyone);
- no node uses a wrong table: every node that exits 0 holds the same bytes as every
  other, its own entry carries its pod IP, and the shared table (when present) is that;
- every node ends with a documented exit code (0, 1, 4, 5, 143).

Killing at an exact point needs no hook in the agent: the killed process gets a
`sitecustomize.py` on its PYTHONPATH that wraps `os.write` / `os.replace` / `os.link` and sends
SIGKILL to itself in the middle of writing, or just before or after renaming, one named
file. That is a real SIGKILL at that instant; the restart (same POD_UID = a container
restart) runs without it.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import pytest

from ascend_node.sim.cluster import SimNode
from ascend_node.sim.fake_tools import write_node_data
from tests.cluster_helpers import make_nodes

pytestmark = pytest.mark.multiprocess

DOCUMENTED = {0, 1, 4, 5, 143}

KILL_HOOK = r'''
"""Test hook (tests/test_faults.py): SIGKILL this process at one point of one write."""
import os
import signal

_spec = os.environ.get("ASCEND_NODE_TEST_KILL", "")
if _spec:
    _name, _, _phase = _spec.rpartition(":")
    _write, _replace = os.write, os.replace

    def _die():
        open(os.environ["ASCEND_NODE_TEST_KILL_MARK"], "w").close()
        os.kill(os.getpid(), signal.SIGKILL)

    def _writes_temp_of(fd):
        try:
            base = os.path.basename(os.readlink("/proc/self/fd/%d" % fd))
        except OSError:
            return False
        return base.startswith("." + _name + ".tmp-")

    def write(fd, data):
        if _phase == "mid-write" and _writes_temp_of(fd):
            view = memoryview(data)
            _write(fd, view[: max(1, len(view) // 2)])
            _die()
        return _write(fd, data)

    def replace(src, dst, *args, **kwargs):
        if os.path.basename(os.fspath(dst)) != _name:
            return _replace(src, dst, *args, **kwargs)
        if _phase == "before-replace":
            _die()
        _replace(src, dst, *args, **kwargs)
        if _phase == "after-replace":
            _die()
        return None

    _link = os.link

    def link(src, dst, *args, **kwargs):
        # A slot's first publication links the finished temp file to its name (an
        # exclusive create): the same moment as a replace, so the same kill points.
        if os.path.basename(os.fspath(dst)) != _name:
            return _link(src, dst, *args, **kwargs)
        if _phase == "before-replace":
            _die()
        _link(src, dst, *args, **kwargs)
        if _phase == "after-replace":
            _die()
        return None

    os.write = write
    os.replace = replace
    os.link = link
'''


# ------------------------------------------------------------------ running nodes


@dataclass
class Proc:
    node: SimNode
    popen: subprocess.Popen[bytes]
    err_path: Path
    started: float

    def wait(self, timeout: float = 60) -> int:
        try:
            return self.popen.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.popen.kill()
            self.popen.wait()
            raise

    @property
    def stderr(self) -> str:
        return self.err_path.read_text(errors="replace")


def start(node: SimNode, tag: str = "run", env: Optional[dict[str, str]] = None) -> Proc:
    write_node_data(node.data_dir, node.devices)
    node.state_dir.parent.mkdir(parents=True, exist_ok=True)
    err_path = node.state_dir.parent / f"stderr-{tag}.txt"
    with open(err_path, "wb") as err, open(node.state_dir.parent / f"out-{tag}.txt", "wb") as out:
        popen = subprocess.Popen(node.argv, env={**node.env, **(env or {})}, stdout=out,
                                 stderr=err, stdin=subprocess.DEVNULL)
    return Proc(node, popen, err_path, time.monotonic())


def hook_env(tmp: Path, target: str, phase: str) -> dict[str, str]:
    hook_dir = tmp / "hook"
    hook_dir.mkdir(exist_ok=True)
    (hook_dir / "sitecustomize.py").write_text(KILL_HOOK)
    return {"PYTHONPATH": os.pathsep.join(filter(None, [str(hook_dir),
                                                        os.environ.get("PYTHONPATH")])),
            "ASCEND_NODE_TEST_KILL": f"{target}:{phase}",
            "ASCEND_NODE_TEST_KILL_MARK": str(tmp / "hook" / "killed")}


@pytest.fixture
def cleanup() -> Iterator[list[Proc]]:
    """Every started process is ended (by its own pid) when the test ends, pass or fail."""
    procs: list[Proc] = []
    yield procs
    for p in procs:
        if p.popen.poll() is None:
            p.popen.kill()
            p.popen.wait()


# ------------------------------------------------------------------ invariants


def check_volume(shared: Path) -> list[Path]:
    """Every final-name file parses as JSON; returns the temp files left behind."""
    temps = []
    for path in sorted(shared.rglob("*")):
        if path.is_dir() or path.name == "filler":  # the test's own filler
            continue
        if path.name.startswith(".") and ".tmp-" in path.name:
            temps.append(path)
            continue
        text = path.read_text()
        try:
            json.loads(text)
        except ValueError as exc:
            raise AssertionError(f"torn file under its final name: {path}: {exc}") from exc
    return temps


def check_tables(shared: Path, nodes: list[SimNode], codes: dict[int, int]) -> Optional[bytes]:
    assert set(codes.values()) <= DOCUMENTED, codes
    tables = {}
    for node in nodes:
        local = node.state_dir / "ranktable.json"
        if codes[node.index] != 0:
            continue
        text = local.read_bytes()
        entry = json.loads(text)["server_list"][node.index]
        assert entry["container_ip"] == node.env["K8S_POD_IP"]
        tables[node.index] = text
    if not tables:
        return None
    assert len(set(tables.values())) == 1, f"nodes hold different tables: {sorted(tables)}"
    text = next(iter(tables.values()))
    shared_table = shared / "ranktable-t.json"
    if shared_table.exists():
        assert shared_table.read_bytes() == text
    return text


def explain(procs: list[Proc]) -> str:
    return "\n".join(f"node {p.node.index} exit {p.popen.returncode}: {p.stderr[-1200:]}"
                     for p in procs)


# ------------------------------------------------------------------ SIGKILL at exact points


KILL_POINTS = [
    # (victim, file, phase, do the others finish without the victim's restart?)
    (0, "attempt.json", "mid-write", False),
    (0, "node-0.json", "before-replace", False),
    (0, "outcome.json", "mid-write", False),
    (0, "outcome.json", "after-replace", True),     # outcome out, shared table not yet
    (0, "ranktable-t.json", "before-replace", True),  # shared table written, not renamed
    (1, "node-1.json", "mid-write", False),
    (1, "node-1.json", "after-replace", False),
    (1, "ranktable.json", "mid-write", True),       # the follower's local copy
]


@pytest.mark.parametrize(("victim", "target", "phase", "others_finish"), KILL_POINTS,
                         ids=[f"node{v}-{t}-{p}" for v, t, p, _ in KILL_POINTS])
def test_sigkill_at_a_write_then_container_restart_ends_with_one_table(
    tmp_path: Path, cleanup: list[Proc], victim: int, target: str, phase: str,
    others_finish: bool,
) -> None:
    nodes = make_nodes(tmp_path, 3, devices=2, timeout=30)
    shared = tmp_path / "shared"
    procs = {n.index: start(n, env=hook_env(tmp_path, target, phase) if n.index == victim
                            else None) for n in nodes}
    cleanup.extend(procs.values())
    assert procs[victim].wait(30) == -signal.SIGKILL, procs[victim].stderr
    assert (tmp_path / "hook" / "killed").exists(), "the hook never fired"
    temps = check_volume(shared)
    if phase == "mid-write" and target != "ranktable.json":
        assert any(t.name.startswith(f".{target}.tmp-") for t in temps), temps
    others = [p for i, p in procs.items() if i != victim]
    if others_finish:
        # The others need nothing more from the killed node: they finish on their own,
        # from the outcome document, and the shared path never holds a partial table.
        assert [p.wait(30) for p in others] == [0, 0], explain(others)
        if victim == 0:
            assert not (shared / "ranktable-t.json").exists()
    again = start(nodes[victim], "restart")
    cleanup.append(again)
    codes = {victim: again.wait(30)}
    codes.update({p.node.index: p.wait(30) for p in others})
    assert sorted(codes.items()) == [(0, 0), (1, 0), (2, 0)], explain([again, *others])
    table = check_tables(shared, nodes, codes)
    assert table is not None and (shared / "ranktable-t.json").read_bytes() == table
    check_volume(shared)


def test_random_sigkills_and_restarts_keep_the_invariants(
    tmp_path: Path, cleanup: list[Proc],
) -> None:
    """Kill a random node at a random time, up to twice, restart it each time."""
    rng = random.Random(int(os.environ.get("ASCEND_NODE_FAULT_SEED", "0")) or None)
    for trial in range(4):
        tmp = tmp_path / f"trial-{trial}"
        nodes = make_nodes(tmp, 3, devices=2, timeout=30)
        victim = rng.choice([0, 0, 1, 2])  # the assembler twice as often
        procs = {n.index: start(n) for n in nodes}
        cleanup.extend(procs.values())
        for kill in range(rng.choice([1, 2])):
            time.sleep(rng.uniform(0.1, 1.2))
            current = procs[victim]
            if current.popen.poll() is None:
                current.popen.send_signal(signal.SIGKILL)
                # The node may finish between poll() and the signal: a node that ended
                # on its own (0) is restarted like a killed one.
                assert current.wait(10) in (0, -signal.SIGKILL), explain([current])
            check_volume(tmp / "shared")
            procs[victim] = start(nodes[victim], f"restart-{kill}")
            cleanup.append(procs[victim])
        codes = {i: p.wait(30) for i, p in procs.items()}
        assert list(codes.values()) == [0, 0, 0], (
            f"trial {trial}, victim {victim}: " + explain(list(procs.values())))
        assert check_tables(tmp / "shared", nodes, codes) is not None
        check_volume(tmp / "shared")


# ------------------------------------------------------------------ full / read-only volume


@pytest.fixture
def small_tmpfs(tmp_path: Path) -> Iterator[Path]:
    """A 64 KiB tmpfs as the shared volume (root only); unmounted even on failure."""
    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs as the shared volume needs root")
    mp = tmp_path / "shared"
    mp.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k,mode=0755", "tmpfs",
                           str(mp)], capture_output=True, text=True, timeout=20)
    if done.returncode != 0:
        pytest.skip(f"mount -t tmpfs failed: {done.stderr.strip()}")
    try:
        yield mp
    finally:
        subprocess.run(["umount", "-l", str(mp)], capture_output=True, timeout=20)


def _fill(volume: Path, leave_pages: int) -> None:
    """Fill the tmpfs, then free `leave_pages` pages of 4 KiB."""
    filler = volume / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        while True:
            os.write(fd, b"\0" * 4096)
    except OSError:
        pass
    finally:
        os.close(fd)
    size = filler.stat().st_size
    os.truncate(filler, max(0, size - leave_pages * 4096))


def _run_all(nodes: list[SimNode], cleanup: list[Proc]) -> dict[int, Proc]:
    procs = {n.index: start(n) for n in nodes}
    cleanup.extend(procs.values())
    for p in procs.values():
        p.wait(60)
    return procs


def test_full_volume_fails_node0_with_1_and_peers_with_4_naming_it(
    tmp_path: Path, small_tmpfs: Path, cleanup: list[Proc],
) -> None:
    nodes = make_nodes(tmp_path, 2, devices=2, timeout=3)
    _fill(small_tmpfs, 0)
    procs = _run_all(nodes, cleanup)
    codes = {i: p.popen.returncode for i, p in procs.items()}
    assert codes == {0: 1, 1: 4}, explain(list(procs.values()))
    err0 = procs[0].stderr
    assert f"cannot write {small_tmpfs}/.ascend-node/t/attempt.json: No space left on device" \
        in err0, err0
    assert "hint: the shared volume is full; free space on the PVC" in err0
    assert "master 0 (node 0) never opened the rendezvous" in procs[1].stderr
    check_tables(small_tmpfs, nodes, codes)
    assert check_volume(small_tmpfs) == []  # the failed write left no temp behind


def test_volume_filling_up_mid_rendezvous_never_yields_a_table(
    tmp_path: Path, small_tmpfs: Path, cleanup: list[Proc],
) -> None:
    """Room for some documents but not all: whoever hits ENOSPC exits 1 saying so,
    the others time out (4) naming who is missing; nobody holds a table."""
    nodes = make_nodes(tmp_path, 3, devices=2, timeout=4)
    _fill(small_tmpfs, 3)
    procs = _run_all(nodes, cleanup)
    codes = {i: p.popen.returncode for i, p in procs.items()}
    assert set(codes.values()) <= {1, 4} and 1 in codes.values(), explain(list(procs.values()))
    for i, p in procs.items():
        if codes[i] == 1:
            assert "No space left on device" in p.stderr
            assert "hint: the shared volume is full" in p.stderr
        else:
            assert "missing:" in p.stderr
        assert not (p.node.state_dir / "ranktable.json").exists()
    assert not (small_tmpfs / "ranktable-t.json").exists()
    check_volume(small_tmpfs)


def test_read_only_volume_fails_with_1_naming_it(
    tmp_path: Path, small_tmpfs: Path, cleanup: list[Proc],
) -> None:
    subprocess.run(["mount", "-o", "remount,ro", str(small_tmpfs)], check=True, timeout=20)
    nodes = make_nodes(tmp_path, 2, devices=2, timeout=3)
    procs = _run_all(nodes, cleanup)
    codes = {i: p.popen.returncode for i, p in procs.items()}
    assert codes == {0: 1, 1: 1}, explain(list(procs.values()))
    assert (f"cannot create directory {small_tmpfs}/.ascend-node: Read-only file system"
            in procs[0].stderr), procs[0].stderr
    assert f"cannot write to {small_tmpfs}: Read-only file system" in procs[1].stderr
    assert "hint: the shared volume is mounted read-only; mount the PVC read-write" \
        in procs[0].stderr


def test_container_restarts_on_a_volume_turned_read_only_get_the_same_table(
    tmp_path: Path, small_tmpfs: Path, cleanup: list[Proc],
) -> None:
    """Once a run is complete, a restart only reads: it works on a read-only volume."""
    nodes = make_nodes(tmp_path, 2, devices=2, timeout=10)
    first = _run_all(nodes, cleanup)
    assert [p.popen.returncode for p in first.values()] == [0, 0], explain(list(first.values()))
    table = check_tables(small_tmpfs, nodes, {0: 0, 1: 0})
    subprocess.run(["mount", "-o", "remount,ro", str(small_tmpfs)], check=True, timeout=20)
    for node in nodes:
        for child in node.state_dir.iterdir():
            child.unlink()  # emptyDir state lost with the container
    again = _run_all(nodes, cleanup)
    assert [p.popen.returncode for p in again.values()] == [0, 0], explain(list(again.values()))
    assert check_tables(small_tmpfs, nodes, {0: 0, 1: 0}) == table


# ------------------------------------------------------------------ skewed clocks


def test_clocks_hours_apart_do_not_matter(tmp_path: Path, cleanup: list[Proc]) -> None:
    """Each node under libfaketime with its own offset (wall and monotonic clocks)."""
    faketime = shutil.which("faketime")
    if faketime is None:
        pytest.skip("faketime is not installed (Debian package faketime)")
    offsets = ["-7h", "+0", "+5h", "-26h"]
    nodes = make_nodes(tmp_path, 4, devices=2, timeout=30)
    for node, offset in zip(nodes, offsets):
        node.argv = [faketime, "-f", offset, *node.argv]
    procs = _run_all(nodes, cleanup)
    codes = {i: p.popen.returncode for i, p in procs.items()}
    assert list(codes.values()) == [0, 0, 0, 0], explain(list(procs.values()))
    assert check_tables(tmp_path / "shared", nodes, codes) is not None
    # The clocks really were skewed: the status files' wall times are hours apart.
    stamps = [json.loads((n.state_dir / "status.json").read_text())["updated_at"]
              for n in nodes]
    assert max(stamps) - min(stamps) > 30 * 3600
    # A restart of node 0 under yet another clock reuses the attempt (no wall-clock aging).
    before = (tmp_path / "shared" / ".ascend-node" / "t" / "attempt.json").read_bytes()
    nodes[0].argv[2] = "+40h"
    again = _run_all([nodes[0]], cleanup)
    assert again[0].popen.returncode == 0, again[0].stderr
    assert (tmp_path / "shared" / ".ascend-node" / "t" / "attempt.json").read_bytes() == before


# ------------------------------------------------------------------ no usable volume at all


@pytest.mark.parametrize(("case", "cause", "hint"), [
    ("missing", "shared directory {shared}/nope (from environment ASCEND_NODE_SHARED_DIR) "
     "does not exist or is not a directory", "mount the job's shared PVC there, or fix "
     "--shared-dir"),
    ("a file", "shared directory {shared}/file (from environment ASCEND_NODE_SHARED_DIR) "
     "does not exist or is not a directory", "mount the job's shared PVC there, or fix "
     "--shared-dir"),
    ("unset", "no shared directory: --shared-dir, ASCEND_NODE_SHARED_DIR and MODEL_PATH are "
     "unset", "mount the job's shared PVC and point --shared-dir (or MODEL_PATH) at it, or "
     "meet through the Kubernetes API instead: --rendezvous kube (ASCEND_NODE_RENDEZVOUS)"),
    ("no run id", "no run id: --run-id, ASCEND_NODE_RUN_ID, KUBEFLOW_RUN_ID and KFJ_RUN_ID "
     "are unset", "set ASCEND_NODE_RUN_ID to a name shared by all pods of this job"),
])
def test_no_usable_shared_dir_or_run_id_exits_1_at_once(
    tmp_path: Path, case: str, cause: str, hint: str,
) -> None:
    node = make_nodes(tmp_path, 1, devices=1, timeout=30)[0]
    shared = tmp_path / "shared"
    (shared / "file").write_text("x")
    if case == "missing":
        node.env["ASCEND_NODE_SHARED_DIR"] = str(shared / "nope")
    elif case == "a file":
        node.env["ASCEND_NODE_SHARED_DIR"] = str(shared / "file")
    elif case == "unset":
        del node.env["ASCEND_NODE_SHARED_DIR"]
    else:
        del node.env["ASCEND_NODE_RUN_ID"]
    proc = start(node)
    assert proc.wait(30) == 1, proc.stderr
    assert proc.stderr.splitlines()[-2:] == [
        f"ascend-node: error: {cause.format(shared=shared)}", f"  hint: {hint}"]
