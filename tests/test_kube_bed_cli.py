"""scripts/kube-bed as a developer uses it: `up` is idempotent, `down` leaves nothing running,
and a machine without Go is told so (exit 3) rather than given a half-built cache."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import psutil
import pytest

from tests.kube_bed import SCRIPTS

pytestmark = pytest.mark.kube

KUBE_BED = SCRIPTS / "kube-bed"


def kube_bed(*args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(KUBE_BED), *args], capture_output=True, text=True,
                          timeout=timeout)


def processes_of(run: Path) -> list[str]:
    """Every process whose command line names the run directory (each of the bed's does)."""
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        cmdline = " ".join(proc.info["cmdline"] or [])
        if str(run) in cmdline:
            found.append(f"{proc.pid} {cmdline[:80]}")
    return found


def test_up_twice_reuses_the_bed_and_down_leaves_no_process(
        tmp_path: pytest.TempPathFactory) -> None:
    if shutil.which("openssl") is None:
        pytest.skip("openssl not installed: the kube bed signs its certificates with it")
    run = Path(str(tmp_path)) / "bed"
    first = kube_bed("up", "--nodes", "1", "--run-dir", str(run))
    if first.returncode == 3:
        pytest.skip(f"no Go toolchain: {first.stderr.strip()}")
    try:
        assert first.returncode == 0, first.stderr
        assert first.stdout.strip() == str(run / "admin.kubeconfig")
        pids = json.loads((run / "state.json").read_text())["pids"]
        assert len(pids) == 7

        again = kube_bed("up", "--nodes", "1", "--run-dir", str(run), timeout=60)
        assert (again.returncode, again.stdout) == (0, first.stdout)
        assert json.loads((run / "state.json").read_text())["pids"] == pids

        other = kube_bed("up", "--nodes", "2", "--run-dir", str(run), timeout=60)
        assert other.returncode == 2
        assert "--nodes 1" in other.stderr and "down" in other.stderr
        assert json.loads((run / "state.json").read_text())["pids"] == pids  # left running

        status = kube_bed("status", "--run-dir", str(run), timeout=60)
        assert status.returncode == 0 and "ready" in status.stdout.splitlines()[-2]
    finally:
        down = kube_bed("down", "--run-dir", str(run), timeout=120)
    assert down.returncode == 0
    assert processes_of(run) == []
    stopped = kube_bed("status", "--run-dir", str(run), timeout=60)
    assert stopped.returncode == 1 and "NOT ready" in stopped.stdout


def test_without_go_the_build_says_so_with_exit_3(tmp_path: Path) -> None:
    env = {**os.environ, "GO": str(tmp_path / "no-go"), "KUBE_BED_CACHE": str(tmp_path)}
    proc = subprocess.run(["sh", str(SCRIPTS / "kube-bed-build")], env=env,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 3
    assert "no Go toolchain" in proc.stderr
    assert not any(tmp_path.glob("*/.ready"))
