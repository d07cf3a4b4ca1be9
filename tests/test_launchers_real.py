"""The real launchers consume what `boot` hands over: msrun (MindSpore) and torchrun (torch).

Two pods, each in its own network namespace with its own IP, hostname, /etc/hosts and
PID namespace (tests/netns_bed.py), share one directory. Each runs the real
`ascend-node boot --launcher msrun -- JOB` (resp. `--launcher torch -- torchrun JOB`):
discovery with the fake NPU tools, the rendezvous, the rank table, then exec into the
real launcher from PyPI, which runs a real collective on the CPU across both pods
(tests/launcher_jobs/). Asserted: the collective's result on every rank; every worker's
rank is the rank the table gives its device; a job failing on one node ends both nodes
non-zero; a node that never comes ends the other with the agent's exit 4 before any
launcher starts; and the agent's own checks before exec on the real programs.

Needs root (namespaces) and the launchers' venvs that `scripts/ci-setup-launchers`
installs (cached per version); elsewhere every test skips and says why.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Union

import pytest

from ascend_node.handoff.launchers import MSRUN_EXIT_ALLOWANCE, MSRUN_MIN_CLUSTER_TIMEOUT
from ascend_node.sim.cluster import NodeResult, SimNode
from tests.cluster_helpers import codes, explain, make_nodes, run
from tests.launcher_envs import mindspore_venv, torch_venv
from tests.netns_bed import SUBNET, Netns, wrap

pytestmark = [pytest.mark.launchers, pytest.mark.netns, pytest.mark.multiprocess]

JOBS = Path(__file__).resolve().parent / "launcher_jobs"


def _need(venv: Union[Path, str]) -> Path:
    if os.geteuid() != 0:
        pytest.skip("the real-launcher pods need root (network, mount, PID namespaces)")
    for tool in ("ip", "unshare"):
        if shutil.which(tool) is None:
            pytest.skip(f"`{tool}` is not installed")
    if isinstance(venv, str):
        pytest.skip(venv)
    return venv


@pytest.fixture(scope="module")
def ms_venv() -> Path:
    return _need(mindspore_venv())


@pytest.fixture(scope="module")
def torch_env() -> Path:
    return _need(torch_venv())


@dataclass
class Job:
    nodes: list[SimNode]
    addresses: list[str]
    out: Path
    shared: Path

    def records(self) -> list[dict[str, Any]]:
        return [json.loads(p.read_text()) for p in sorted(self.out.glob("*.json"))]

    def env_of(self, node: SimNode) -> dict[str, str]:
        """What the agent added to the launcher's environment (its env.json)."""
        doc = json.loads((node.state_dir / "env.json").read_text())
        return {str(k): str(v) for k, v in doc["env"].items()}

    def table(self) -> dict[str, Any]:
        return json.loads((self.shared / "ranktable-L.json").read_text())

    def table_ranks(self) -> dict[tuple[str, str], int]:
        """(container_ip, device_id) -> rank_id, as the table says."""
        return {(s["container_ip"], d["device_id"]): int(d["rank_id"])
                for s in self.table()["server_list"] for d in s["device"]}


def make_job(tmp: Path, netns: Netns, venv: Path, launcher: str, command: list[str], *,
             nodes: int = 2, devices: int = 2, timeout: float = 60, first: int = 10,
             hostname_resolves: bool = True, **env: str) -> Job:
    """`nodes` pods booting into `launcher`; `python` and the launcher from `venv`."""
    sims = make_nodes(tmp, nodes, devices=devices, timeout=timeout, run_id="L")
    out = tmp / "out"
    out.mkdir()
    addresses = [f"{SUBNET}.{first + i}" for i in range(nodes)]
    for node, address in zip(sims, addresses):
        name = netns.pod(address)
        host = f"node-{node.index}"
        hosts = ("127.0.0.1 localhost\n" + f"{address} {host}\n" if hostname_resolves
                 else f"127.0.0.1 localhost {host}\n")
        node.env.update({
            "K8S_POD_IP": address, "K8S_HOST_IP": address, "JOB_OUT": str(out),
            "PATH": f"{venv / 'bin'}{os.pathsep}{node.env.get('PATH', os.defpath)}", **env,
        })
        cwd = node.state_dir.parent
        cwd.mkdir(parents=True, exist_ok=True)
        agent = [sys.executable, "-m", "ascend_node", "boot", "--launcher", launcher,
                 "--", *command]
        node.argv = wrap(name, host, hosts, cwd, agent)
    return Job(sims, addresses, out, tmp / "shared")


def output(node: SimNode) -> str:
    """Everything the launcher and its workers printed on `node` (its logs and stdout)."""
    cwd = node.state_dir.parent
    return "".join(p.read_text(errors="replace")
                   for p in [*sorted(cwd.glob("*.log")), cwd / "stdout.txt"] if p.exists())


def logs(job: Job, results: list[NodeResult]) -> str:
    """Agent stderr, then what the launcher and its workers printed, for a failure message."""
    parts = [explain(results)]
    for node in job.nodes:
        for log in sorted(node.state_dir.parent.glob("*.log")):
            parts.append(f"--- node {node.index} {log.name}:\n{log.read_text()[-1500:]}")
        parts.append(f"--- node {node.index} stdout:\n"
                     f"{(node.state_dir.parent / 'stdout.txt').read_text()[-1500:]}")
    return "\n".join(parts)


def assert_allreduce_with_table_ranks(job: Job, env_rank: str, card: str, world: int = 4
                                      ) -> None:
    """Both pods exit 0; every worker summed 1..world; the launcher's rank variable
    (`env_rank`), the collective's rank and the table's rank of the worker's card (`card`
    on its node) are one number; a pod whose hostname resolves to its IP on its only NIC
    gets no host-NIC variables."""
    results = run(job.nodes, timeout=120)
    assert codes(results) == [0, 0], logs(job, results)
    records = job.records()
    assert len(records) == world, logs(job, results)
    ranks = job.table_ranks()
    for rec in records:
        assert rec["sum"] == sum(range(1, world + 1)), rec
        assert rec["size"] == world
        assert int(rec[env_rank]) == rec["rank"] == ranks[(rec["node"], rec[card])], rec
    assert sorted(r["rank"] for r in records) == list(range(world))
    for node in job.nodes:
        assert not {"GLOO_SOCKET_IFNAME", "HCCL_IF_IP"} & set(job.env_of(node))


def test_msrun_allreduce_across_two_pods_with_the_tables_ranks(
    tmp_path: Path, netns: Netns, ms_venv: Path,
) -> None:
    job = make_job(tmp_path, netns, ms_venv, "msrun", [str(JOBS / "ms_allreduce.py")])
    # msrun's RANK_ID, the rank init() gave, and the table's rank of the worker's card
    assert_allreduce_with_table_ranks(job, env_rank="rank_id", card="device_id")


def test_torchrun_all_reduce_across_two_pods_with_the_tables_ranks(
    tmp_path: Path, netns: Netns, torch_env: Path,
) -> None:
    job = make_job(tmp_path, netns, torch_env, "torch",
                   ["torchrun", str(JOBS / "torch_allreduce.py")])
    # torchrun's RANK, the process group's rank, and the table's rank of the card at
    # LOCAL_RANK on this node (fake cards are numbered from 0, so LOCAL_RANK = device_id)
    assert_allreduce_with_table_ranks(job, env_rank="rank_env", card="local_rank")


@pytest.mark.parametrize("launcher", ["msrun", "torch"])
def test_a_job_failing_on_one_node_ends_both_nodes_non_zero(
    tmp_path: Path, netns: Netns, launcher: str, request: pytest.FixtureRequest,
) -> None:
    venv = request.getfixturevalue("ms_venv" if launcher == "msrun" else "torch_env")
    command = ([str(JOBS / "ms_allreduce.py")] if launcher == "msrun"
               else ["torchrun", str(JOBS / "torch_allreduce.py")])
    # MindSpore declares a silent worker lost after MS_NODE_TIMEOUT (30 s by default):
    # shorter here, which can only make a job fail, never pass
    job = make_job(tmp_path, netns, venv, launcher, command, JOB_FAIL_ON=f"{SUBNET}.11",
                   MS_NODE_TIMEOUT="10")
    results = run(job.nodes, timeout=120)
    assert all(code != 0 for code in codes(results)), logs(job, results)
    assert job.records() == [], "no rank may finish the collective"
    # the failure is the one asked for, not a launcher that could not even start its job
    # (a torch that cannot import would also end both nodes non-zero)
    assert f"job: failing on purpose on {SUBNET}.11" in output(job.nodes[1]), \
        logs(job, results)
    print(f"{launcher}: exits {codes(results)} after "
          f"{', '.join(f'{r.seconds:.1f}' for r in results)} s")


@pytest.mark.parametrize("launcher", ["msrun", "torch"])
def test_a_hostname_resolving_to_loopback_still_gives_the_right_collective(
    tmp_path: Path, netns: Netns, launcher: str, request: pytest.FixtureRequest,
) -> None:
    """Outside a pod's /etc/hosts the hostname may resolve to 127.0.x: gloo would advertise
    loopback to its peers; the agent points gloo (and HCCL) at the pod's interface."""
    venv = request.getfixturevalue("ms_venv" if launcher == "msrun" else "torch_env")
    command = ([str(JOBS / "ms_allreduce.py")] if launcher == "msrun"
               else ["torchrun", str(JOBS / "torch_allreduce.py")])
    job = make_job(tmp_path, netns, venv, launcher, command, hostname_resolves=False)
    results = run(job.nodes, timeout=90)
    assert codes(results) == [0, 0], logs(job, results)
    assert sorted(r["sum"] for r in job.records()) == [10.0] * 4
    for node, address in zip(job.nodes, job.addresses):
        env = job.env_of(node)
        assert env["HCCL_IF_IP"] == address
        assert env.get("GLOO_SOCKET_IFNAME") == ("eth0" if launcher == "torch" else None)


@pytest.mark.parametrize("launcher", ["msrun", "torch"])
def test_a_node_that_never_comes_ends_the_other_with_4_before_any_launcher(
    tmp_path: Path, netns: Netns, launcher: str, request: pytest.FixtureRequest,
) -> None:
    venv = request.getfixturevalue("ms_venv" if launcher == "msrun" else "torch_env")
    command = ([str(JOBS / "ms_allreduce.py")] if launcher == "msrun"
               else ["torchrun", str(JOBS / "torch_allreduce.py")])
    job = make_job(tmp_path, netns, venv, launcher, command, timeout=8)
    results = run(job.nodes[:1], timeout=60)
    assert codes(results) == [4], logs(job, results)
    assert "timed out after 8 s waiting for peers: 1 of 2 missing: worker 0 (node 1)" \
        in results[0].stderr
    cwd = job.nodes[0].state_dir.parent
    assert "exec " not in results[0].stderr
    assert not list(cwd.glob("*.log")) and job.records() == [], "no launcher may have started"


def test_msrun_on_a_node_whose_python_lacks_mindspore_ends_both_within_the_agents_timeout(
    tmp_path: Path, netns: Netns, ms_venv: Path,
) -> None:
    """Node 1's image puts an interpreter without MindSpore first on PATH: its agent stops
    before exec with 127 naming PATH; node 0's msrun, which waits for node 1's workers,
    gives up after the agent's time left instead of msrun's default 600 s."""
    timeout = 50
    job = make_job(tmp_path, netns, ms_venv, "msrun", [str(JOBS / "ms_allreduce.py")],
                   timeout=timeout)
    bare = Path(sys.executable).parent  # the agent's own venv: a `python` without MindSpore
    node1 = job.nodes[1].env
    node1["PATH"] = f"{bare}{os.pathsep}{node1['PATH']}"
    results = run(job.nodes, timeout=240)
    assert results[1].exit_code == 127, logs(job, results)
    assert (f"msrun starts its workers with `python` from PATH, and {bare / 'python'} cannot "
            f"import mindspore (PATH={bare}{os.pathsep}") in results[1].stderr
    assert results[0].exit_code != 0, logs(job, results)
    exec_line = next(ln for ln in results[0].stderr.splitlines() if " exec msrun " in ln)
    waited = int(exec_line.split("--cluster_time_out=", 1)[1].split()[0])
    assert MSRUN_MIN_CLUSTER_TIMEOUT <= waited <= timeout - MSRUN_EXIT_ALLOWANCE, exec_line
    print(f"node 0: --cluster_time_out={waited}, ended after {results[0].seconds:.1f} s "
          f"(agent timeout {timeout} s; msrun's default wait is 600 s)")
    # around the wait: the workers' import (3 s, far more on a loaded machine) and ~17 s
    # of retries before they exit; the old 600 s default would run into run()'s kill
    assert results[0].seconds < waited + 150, "msrun must give up on its own"


def test_torchrun_on_a_node_without_torchrun_ends_the_other_within_the_agents_timeout(
    tmp_path: Path, netns: Netns, torch_env: Path,
) -> None:
    """Node 1's image has no torchrun: its agent exits 127; node 0's torchrun, waiting in
    its static rendezvous (600 s by default), gives up after the agent's time left."""
    timeout = 50
    job = make_job(tmp_path, netns, torch_env, "torch",
                   ["torchrun", str(JOBS / "torch_allreduce.py")], timeout=timeout)
    job.nodes[1].env["PATH"] = os.defpath
    results = run(job.nodes, timeout=240)
    assert results[1].exit_code == 127, logs(job, results)
    assert "exec torchrun failed: not found on PATH=" in results[1].stderr
    assert results[0].exit_code != 0, logs(job, results)
    env = job.env_of(job.nodes[0])
    waited = int(env["PET_RDZV_CONF"].removeprefix("timeout="))
    assert MSRUN_MIN_CLUSTER_TIMEOUT <= waited <= timeout - MSRUN_EXIT_ALLOWANCE, env
    print(f"node 0: PET_RDZV_CONF=timeout={waited}, ended after {results[0].seconds:.1f} s "
          f"(agent timeout {timeout} s; torchrun's default wait is 600 s)")
    assert results[0].seconds < waited + 150, "torchrun must give up on its own"
    # and it gave up in its rendezvous, waiting for node 1 (a torch that cannot even
    # import would also end node 0 non-zero, quickly)
    assert "waiting for clients. 1/2 clients joined" in results[0].stderr, \
        results[0].stderr[-2000:]
