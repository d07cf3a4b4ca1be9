"""The images, built and run as a platform engineer would: real OCI containers with podman.

Every test is a real multi-container run on a bridge network (own network namespace and
address per pod) with one host directory as the shared volume, Volcano's environment per
pod, and only the vendor tools faked (hccn_tool, npu-smi, the MindIE daemon, the
launchers), in their real output formats. The test bed (scripts/container_bed.py) keeps
all podman state under one work directory and builds the images once per session (the
base image once per work directory). Root only: podman with runc and bridge networks.
Elsewhere, or without podman / mmdebstrap (scripts/ci-setup-containers installs them),
every test skips and says why.
"""

from __future__ import annotations

import importlib.util
import itertools
import json
import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Any

import pytest

from ascend_node.jobspec.job import ENTRYPOINT, STATUS_COMMAND

pytestmark = [pytest.mark.containers]

ROOT = Path(__file__).resolve().parents[1]


def _load_bed() -> ModuleType:
    spec = importlib.util.spec_from_file_location("container_bed",
                                                  ROOT / "scripts" / "container_bed.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["container_bed"] = module
    spec.loader.exec_module(module)
    return module


cb = _load_bed()
SUBNETS = itertools.count(61)  # 10.233.<n>.0/24, one per job of this module
STOP_TIMEOUT_S = 10


@pytest.fixture(scope="module")
def bed() -> Iterator[Any]:
    if os.geteuid() != 0:
        pytest.skip("containers need root (podman with runc, bridge networks, cgroups)")
    missing = cb.missing_tools()
    if missing:
        pytest.skip(f"not installed: {' '.join(missing)} (scripts/ci-setup-containers "
                    "installs them as root)")
    the_bed = cb.Bed()
    try:
        the_bed.lock()
    except cb.BedError as exc:
        pytest.skip(str(exc))
    the_bed.configure()
    the_bed.teardown()  # what an interrupted earlier run left behind
    try:
        base = the_bed.build_base()
        the_bed.wheelhouse(base)
    except cb.BedError as exc:
        # No mirror or no package index: the environment cannot build, the code is fine.
        pytest.skip(f"cannot build the base image or the wheelhouse: {exc}")
    try:
        the_bed.images = {"base": base}
        for kind in ("mindie", "training", "init"):
            the_bed.build_image(kind, base)  # a failure here is the images' own
        the_bed.prune()
        yield the_bed
    finally:
        the_bed.teardown()
        left = the_bed.leftovers()
        assert not left, f"left after teardown: {left}"


def _job(bed: Any, name: str, kind: str, nodes: int, **kw: Any) -> Any:
    return cb.Job(bed, name, bed.images[kind], nodes, next(SUBNETS), **kw).create()


def _status(bed: Any, pod: str) -> tuple[int, dict[str, Any]]:
    done = bed.exec(pod, "ascend-node", "status", "--json")
    return done.returncode, json.loads(done.stdout) if done.stdout.strip() else {}


def _wait_in_progress(bed: Any, pod: str, timeout: float = 60) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        _, doc = _status(bed, pod)
        if doc.get("state") == "in_progress" and doc["status"]["phase"] != "identity":
            return
        time.sleep(0.3)
    raise AssertionError(f"{pod} never reported 'in_progress': {bed.logs(pod)}")


def _cat(bed: Any, pod: str, path: str) -> str:
    done = bed.exec(pod, "cat", path)
    assert done.returncode == 0, f"{pod}: cat {path}: {done.stderr}"
    return str(done.stdout)


def _attempt(bed: Any, pod: str) -> str:
    """The rendezvous attempt whose table this pod holds (its status file)."""
    return str(json.loads(_cat(bed, pod, "/run/ascend-node/status.json"))["attempt_id"])


# ---- the 4-pod MindIE job (shared by the probe and restart tests) ------------------------

NO_POD_IP = 2  # this pod gets no K8S_POD_IP and finds its address on its own interface


def _mindie_pod(job: Any, index: int) -> Any:
    return job.pod(index, drop=("K8S_POD_IP",) if index == NO_POD_IP else ())


@pytest.fixture(scope="module")
def mindie_job(bed: Any) -> Iterator[SimpleNamespace]:
    """Pods 0-2 start; the probe runs while pod 3 is missing; then pod 3 comes."""
    job = _job(bed, "mi", "mindie", 4, timeout=90)
    try:
        for index in range(3):
            bed.run(_mindie_pod(job, index))
        first = job.pod_name(0)
        _wait_in_progress(bed, first)
        waiting = bed.exec(first, *STATUS_COMMAND)  # the bootstrap probe
        bed.run(_mindie_pod(job, 3))
        job.wait_reports(range(4), 120)
        done = bed.exec(first, *STATUS_COMMAND)
        yield SimpleNamespace(job=job, waiting=waiting, done=done)
    finally:
        job.remove()


def test_four_pods_exec_the_daemon_with_the_table(bed: Any, mindie_job: Any) -> None:
    job = mindie_job.job
    tables, namespaces = set(), set()
    for index in range(4):
        pod = job.pod_name(index)
        pid, env = job.report(index)
        agent = json.loads(_cat(bed, pod, "/run/ascend-node/status.json"))
        assert pid == agent["pid"], f"{pod}: the daemon must be the agent's process (exec)"
        assert bed.state(pod)["Status"] == "running", f"{pod}: the daemon must keep serving"
        assert _cat(bed, pod, f"/proc/{pid}/comm").strip() == "sleep"  # the fake serving
        namespaces.add(bed.exec(pod, "readlink", "/proc/1/ns/net").stdout.strip())
        assert "PPid:\t1\n" in _cat(bed, pod, f"/proc/{pid}/status"), f"{pod}: not under PID 1"
        assert _cat(bed, pod, "/proc/1/comm").strip() == "tini"
        assert "Daemon start success!" in bed.logs(pod)
        assert env["MIES_CONTAINER_IP"] == job.ip(index), pod
        assert env["MASTER_IP"] == job.ip(0)
        assert env["WORLD_SIZE"] == "16"
        assert env["RANK_TABLE_FILE"] == "/run/ascend-node/ranktable.json"
        # Every vendor set_env.sh was sourced, in CANN, ATB, MindIE, ATB-Models order.
        libs = [p for p in env["LD_LIBRARY_PATH"].split(":") if p]
        assert libs == [f"/usr/local/Ascend/{d}/latest/lib64" for d in
                        ("atb-models", "mindie", "nnal/atb", "ascend-toolkit")], libs
        config = json.loads(_cat(bed, pod, cb.CONFIG_PATH))
        assert config["ServerConfig"]["ipAddress"] == job.ip(index)
        assert config["BackendConfig"]["multiNodesInferEnabled"] is True
        assert config["BackendConfig"]["npuDeviceIds"] == [[0, 1, 2, 3]]
        valid = bed.exec(pod, "ascend-node", "validate", "--for", "mindie",
                         env["RANK_TABLE_FILE"])
        assert valid.returncode == 0, f"{pod}: {valid.stdout}{valid.stderr}"
        tables.add(_cat(bed, pod, env["RANK_TABLE_FILE"]))
    assert len(namespaces) == 4, "each pod must have its own network namespace"
    for kind in ("mindie", "training"):  # what the rendered Job's `command` repeats
        entry = bed.podman("image", "inspect", "--format", "{{json .Config.Entrypoint}}",
                           bed.images[kind]).stdout
        assert json.loads(entry) == ENTRYPOINT, kind
    assert len(tables) == 1, "every pod must hold the same table"
    table = json.loads(tables.pop())
    assert [s["container_ip"] for s in table["server_list"]] == [job.ip(i) for i in range(4)]
    logs = bed.logs(job.pod_name(NO_POD_IP))
    assert f"pod IP {job.ip(NO_POD_IP)}" in logs


def test_readiness_probe_says_in_progress_then_done(mindie_job: Any) -> None:
    waiting, done = mindie_job.waiting, mindie_job.done
    assert waiting.returncode == 3, waiting.stdout + waiting.stderr
    assert waiting.stdout.startswith("in_progress:"), waiting.stdout
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.startswith("done:"), done.stdout


@pytest.mark.parametrize("kind", ["mindie", "training"])
def test_the_agent_ships_compiled_in_each_image(bed: Any, kind: str) -> None:
    """Every module of the agent has its bytecode in the image itself (a fresh container,
    -B: nothing written): a pod starts from a fresh writable layer, and without it every
    start compiles the package — ~0.67 s of a pod's CPU instead of ~0.2 s
    (docs/benchmarks.md)."""
    script = ("import importlib.util, pathlib, ascend_node\n"
              "root = pathlib.Path(ascend_node.__file__).parent\n"
              "sources = sorted(root.rglob('*.py'))\n"
              "missing = [str(p) for p in sources\n"
              "           if not pathlib.Path(importlib.util.cache_from_source(str(p))).exists()]\n"
              "print(len(sources), missing)\n")
    done = bed.podman("run", "--rm", "--network=none", "--entrypoint", "python3",
                      bed.images[kind], "-B", "-c", script)
    count, missing = done.stdout.split(" ", 1)
    assert int(count) > 50, done.stdout
    assert missing.strip() == "[]", f"{kind}: modules without bytecode: {missing}"


def test_kubernetes_container_restart_gets_the_same_table_back(
    bed: Any, mindie_job: Any,
) -> None:
    """rm + run with the same name, volume and env: a fresh writable layer."""
    job, index = mindie_job.job, 1
    pod = job.pod_name(index)
    before = _cat(bed, pod, "/run/ascend-node/ranktable.json")
    attempt = _attempt(bed, pod)
    report = job.host_dir(index) / "out" / "daemon-report.txt"
    report.unlink()
    bed.remove(pod)
    bed.run(_mindie_pod(job, index))
    job.wait_reports([index], 90)
    assert _cat(bed, pod, "/run/ascend-node/ranktable.json") == before
    assert _attempt(bed, pod) == attempt
    logs = bed.logs(pod)
    assert "opened attempt" not in logs
    assert "atb_llm 1.0.0: no record of an earlier install" in logs  # fresh layer
    mark = bed.exec(pod, "python3", "-c", "import atb_llm; print(atb_llm.MARK)")
    assert mark.stdout.strip() == "image", mark.stderr
    assert "Daemon start success!" in logs
    assert job.report(index)[1]["MIES_CONTAINER_IP"] == job.ip(index)


def test_job_restart_builds_a_new_table(bed: Any, mindie_job: Any) -> None:
    """Volcano RestartJob: every pod re-created, new UIDs and IPs, a higher job version."""
    job = mindie_job.job
    old = json.loads(_cat(bed, job.pod_name(0), "/run/ascend-node/ranktable.json"))
    old_attempt = _attempt(bed, job.pod_name(0))
    old_ips = [job.ip(i) for i in range(4)]
    job.remove()
    job.bed.network(job.network, f"{cb.SUBNET_PREFIX}{job.subnet}.0/24")
    job.generation += 1
    job.version += 1
    job.uids.clear()
    for index in range(4):
        (job.host_dir(index) / "out" / "daemon-report.txt").unlink()
        bed.run(_mindie_pod(job, index))
    job.wait_reports(range(4), 120)
    new_ips = [job.ip(i) for i in range(4)]
    assert set(new_ips).isdisjoint(old_ips)
    tables = {_cat(bed, job.pod_name(i), "/run/ascend-node/ranktable.json") for i in range(4)}
    assert len(tables) == 1
    table = json.loads(tables.pop())
    assert [s["container_ip"] for s in table["server_list"]] == new_ips
    assert table != old
    attempts = {_attempt(bed, job.pod_name(i)) for i in range(4)}
    assert len(attempts) == 1 and old_attempt not in attempts, (old_attempt, attempts)
    for index in range(4):
        assert job.report(index)[1]["MIES_CONTAINER_IP"] == new_ips[index]


def test_externally_managed_python_still_gets_atb_llm(bed: Any) -> None:
    """A base whose python3 is PEP 668 "externally managed" (Debian 12's own marker put
    back): pip would refuse the wheel unless the agent opts out for that one install."""
    job = _job(bed, "pep668", "mindie", 1, timeout=60)
    marker = ("printf '[externally-managed]\\nError=managed by the distribution\\n' > "
              "$(python3 -c 'import sysconfig; print(sysconfig.get_path(\"stdlib\"))')"
              "/EXTERNALLY-MANAGED")
    try:
        spec = job.pod(0, entrypoint=["bash", "-c",
                                      f"{marker} && exec tini -- ascend-node boot --"])
        bed.run(spec)
        job.wait_reports([0], 60)
        pod = job.pod_name(0)
        check = bed.exec(pod, "python3", "-m", "pip", "install", "--no-index", "atb_llm")
        assert "externally-managed-environment" in check.stderr, "the marker is not in place"
        mark = bed.exec(pod, "python3", "-c", "import atb_llm; print(atb_llm.MARK)")
        assert mark.stdout.strip() == "image", bed.logs(pod)
    finally:
        job.remove()


# ---- failures ----------------------------------------------------------------------------


def test_missing_pod_exits_4_naming_it_in_the_termination_log(bed: Any) -> None:
    job = _job(bed, "miss", "mindie", 4, timeout=8)
    try:
        started = [0, 1, 2]
        for index in started:
            bed.run(job.pod(index))
        for index in started:
            pod = job.pod_name(index)
            assert bed.wait(pod, 60) == 4, bed.logs(pod)
            assert "1 of 4 missing: worker 2 (node 3)" in bed.logs(pod)
            cause = (job.host_dir(index) / "termination-log").read_text()
            assert cause.startswith("ascend-node boot: exit 4: "), cause
            assert "worker 2 (node 3)" in cause and "\n" not in cause.rstrip("\n")
            assert job.report(index) is None, "no daemon may start without the table"
    finally:
        job.remove()


def test_podman_stop_while_waiting_exits_143_with_nothing_half_written(
    bed: Any, tmp_path: Path,
) -> None:
    job = _job(bed, "stop", "mindie", 2, timeout=300)
    try:
        pod = job.pod_name(0)
        bed.run(job.pod(0))
        _wait_in_progress(bed, pod)
        t0 = time.monotonic()
        bed.podman("stop", pod, timeout=STOP_TIMEOUT_S + 30)
        elapsed = time.monotonic() - t0
        state = bed.state(pod)
        assert state["ExitCode"] == 143, bed.logs(pod)
        assert elapsed < STOP_TIMEOUT_S, f"stop took {elapsed:.1f} s (SIGKILL after timeout?)"
        bed.podman("cp", f"{pod}:/run/ascend-node", str(tmp_path / "state"))
        files = [p for p in tmp_path.rglob("*") if p.is_file()]
        files += [p for p in job.shared.rglob("*") if p.is_file()]
        for path in files:
            assert ".tmp" not in path.name, f"half-written file left: {path}"
            if path.suffix == ".json":
                json.loads(path.read_text())  # whole documents only
        assert not (tmp_path / "state" / "ranktable.json").exists()
        assert not list(job.shared.glob("ranktable-*.json"))
        status = json.loads((tmp_path / "state" / "status.json").read_text())
        assert status["state"] == "failed" and status["exit_code"] == 143, status
        assert job.report(0) is None
        cause = (job.host_dir(0) / "termination-log").read_text()
        assert cause.startswith("ascend-node boot: exit 143: terminated by signal 15"), cause
    finally:
        job.remove()


# ---- the init-container variant and the training image ------------------------------------


def test_init_container_writes_the_files_a_plain_server_starts_from(bed: Any) -> None:
    """init image -> per-pod emptyDir -> the server container sources it and execs."""
    job = _job(bed, "init", "init", 2, timeout=60)
    try:
        inits = []
        for index in range(2):
            spec = job.pod(index)
            empty_dir = job.host_dir(index) / "emptydir"
            empty_dir.mkdir()
            spec.name += "-init"
            spec.mounts.append((str(empty_dir), "/run/ascend-node", ""))
            bed.run(spec)
            inits.append(spec.name)
        for name in inits:
            assert bed.wait(name, 90) == 0, bed.logs(name)
        bed.remove(*inits)  # the pod's address passes to its app container
        daemon = f"source /run/ascend-node/source_mul_env.sh && exec {cb.DAEMON_PATH}"
        for index in range(2):
            spec = job.pod(index, image=bed.images["mindie"], entrypoint=["bash", "-c", daemon])
            spec.env = {k: spec.env[k] for k in ("ASCEND_NODE_SIM_REPORT", "ASCEND_NODE_SIM_SERVE")}
            spec.mounts.append((str(job.host_dir(index) / "emptydir"), "/run/ascend-node", ""))
            bed.run(spec)
        job.wait_reports(range(2), 60)
        for index in range(2):
            _, env = job.report(index)
            assert env["MIES_CONTAINER_IP"] == job.ip(index)
            assert env["MASTER_IP"] == job.ip(0)
            assert env["WORLD_SIZE"] == "8"
            assert env["RANK_TABLE_FILE"] == "/run/ascend-node/ranktable.json"
    finally:
        job.remove()


RECORDER = """#!/bin/sh
# Fake {name}: records how it was started, then exits like a finished training run.
{{ echo "pid=$$"; echo "argv=$*"; env; }} > /pod/launcher-report.txt.tmp
mv /pod/launcher-report.txt.tmp /pod/launcher-report.txt
"""


@pytest.mark.parametrize("launcher", ["torch", "msrun"])
def test_training_image_starts_the_launcher_with_the_world(bed: Any, launcher: str) -> None:
    job = _job(bed, f"tr-{launcher}", "training", 2, timeout=60)
    bin_dir = job.dir / "launchers"
    bin_dir.mkdir()
    for name in ("torchrun", "msrun"):
        (bin_dir / name).write_text(RECORDER.format(name=name))
        (bin_dir / name).chmod(0o755)
    # msrun's workers run `python` from PATH, which the agent checks finds MindSpore before
    # exec: a `python` and an empty mindspore package stand in for the image's (the real
    # msrun is tests/test_launchers_real.py)
    (bin_dir / "python").write_text('#!/bin/sh\nexec python3 "$@"\n')
    (bin_dir / "python").chmod(0o755)
    (bin_dir / "site" / "mindspore").mkdir(parents=True)
    (bin_dir / "site" / "mindspore" / "__init__.py").write_text("")
    try:
        for index in range(2):
            if launcher == "torch":  # the pod's command, as a Job would give it
                spec = job.pod(index, entrypoint=[*ENTRYPOINT[:-1], "--launcher", "torch",
                                                  "--"],
                               args=["torchrun", "train.py", "--lr", "0.1"])
            else:  # the image's ENTRYPOINT; the launcher from the environment
                spec = job.pod(index, args=["train.py", "--config", "c.yaml"])
                spec.env["ASCEND_NODE_LAUNCHER"] = "msrun"
            spec.env["PATH"] = "/opt/launchers:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin"
            spec.env["PYTHONPATH"] = "/opt/launchers/site"
            spec.mounts.append((str(bin_dir), "/opt/launchers", "ro"))
            bed.run(spec)
        for index in range(2):
            pod = job.pod_name(index)
            assert bed.wait(pod, 90) == 0, bed.logs(pod)
            lines = (job.host_dir(index) / "out" / "launcher-report.txt").read_text()
            env = dict(ln.split("=", 1) for ln in lines.splitlines() if "=" in ln)
            args = env["argv"].split()
            if launcher == "torch":
                assert args == ["train.py", "--lr", "0.1"]
                assert env["MASTER_ADDR"] == job.ip(0) and env["MASTER_PORT"] == "29500"
                assert env["WORLD_SIZE"] == "8" and env["NNODES"] == "2"
                assert env["NODE_RANK"] == env["PET_NODE_RANK"] == str(index)
                assert env["NPROC_PER_NODE"] == "4"
            else:
                # msrun's cluster wait: the agent's time left (timeout 60 s) less 20, >= 30
                waits = [a for a in args if a.startswith("--cluster_time_out=")]
                assert len(waits) == 1 and 30 <= int(waits[0].split("=")[1]) <= 40, args
                args.remove(waits[0])
                assert args == ["--worker_num=8", "--local_worker_num=4",
                                f"--master_addr={job.ip(0)}", "--master_port=8118",
                                f"--node_rank={index}", "--join=True",
                                "train.py", "--config", "c.yaml"]
            assert env["RANK_TABLE_FILE"] == "/run/ascend-node/ranktable.json"
            assert env["MIES_CONTAINER_IP"] == job.ip(index)
    finally:
        job.remove()
