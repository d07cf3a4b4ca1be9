"""An 8-pod MindIE Job rendered with `--rendezvous kube`, on a bed of its own with 8 fake
nodes (the session's bed has 4, and the manifest's anti-affinity puts one pod per node).

The same proof as tests/test_kube_rdzv_jobs.py — no claim in the Job, every pod meets through
the API server under the job's ServiceAccount, one table byte for byte, the daemon serves —
and the time it takes on this machine, printed (docs/benchmarks.md).
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from tests.kube_agent_bed import AgentBed, open_agent
from tests.kube_bed import open_bed
from tests.test_kube_rdzv_jobs import WEIGHTS, KubeRun, check_api_reach, check_tables

pytestmark = [pytest.mark.kube, pytest.mark.containers]


@pytest.fixture(scope="module")
def agent8(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AgentBed]:
    for bed in open_bed(tmp_path_factory, nodes=8):
        yield from open_agent(bed)


def test_an_8_pod_mindie_job_meets_through_the_api(agent8: AgentBed) -> None:
    t0 = time.monotonic()
    with KubeRun(agent8, "kr-mindie-8", "kj", "--kind", "mindie", "--nodes", "8",
                 "--model-dir", WEIGHTS) as run:
        pods = run.wait_ready(8, timeout=600)
        print(f"kr-mindie-8: apply -> {run.timeline.summary()} "
              f"(test start -> all Ready {time.monotonic() - t0:.1f} s)")
        check_api_reach(agent8, pods[0])
        check_tables(agent8, run, pods, 8)
        served = agent8.exec(pods[0], "ascend-node", "status", "--serving")
        assert served.returncode == 0, served.stdout + served.stderr
