"""`manifest --a3` run for real: on a control plane whose nodes are Atlas A3 super-pod servers.

The bed's `up --a3` nodes advertise 16 `huawei.com/Ascend910` each and carry MindCluster's
`accelerator-type=module-a3-16-super-pod` label, which the rendered Job's nodeSelector asks
for; the node agent gives each such node an npu-smi that answers its super pod and each
device's SDID (scripts/kube_node_agent.py `a3_seat`), as an A3 server's does. A bed of its own
(the session's bed has 8-NPU nodes without the label, where an `--a3` Job never schedules),
so this module starts a second control plane with 2 nodes and its own node agent.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from tests.kube_agent_bed import AgentBed, open_agent
from tests.kube_bed import open_bed
from tests.test_kube_jobs import JobRun, check_job

pytestmark = [pytest.mark.kube, pytest.mark.containers]


@pytest.fixture(scope="module")
def a3_agent(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AgentBed]:
    beds = open_bed(tmp_path_factory, nodes=2, a3=True)
    bed = next(beds)
    try:
        yield from open_agent(bed)
    finally:
        beds.close()


def test_an_a3_job_is_placed_on_super_pod_nodes_and_builds_rank_table_v1_2(
        a3_agent: AgentBed) -> None:
    """Applied as printed: Volcano places both pods on the labelled nodes (16 NPUs each, one
    pod per node), every pod reads its super pod from the node's npu-smi and holds the same
    rank table v1.2 (one super pod, both servers, 32 devices), the fake daemon serves and
    both pods turn Ready after the load."""
    agent = a3_agent
    with JobRun(agent, "kv-a3", "aj", "--kind", "mindie", "--nodes", "2", "--a3") as run:
        pods = run.wait_ready(2, timeout=300)
        print(f"kv-a3: apply -> {run.timeline.summary()}")
        check_job(agent, run, pods, 16)
        for pod in pods:
            node = agent.kube.get(f"/api/v1/nodes/{pod['spec']['nodeName']}")
            assert node["metadata"]["labels"]["accelerator-type"] == "module-a3-16-super-pod"
            (c,) = pod["spec"]["containers"]
            assert c["resources"]["limits"]["huawei.com/Ascend910"] == "16"
        env = run.daemon_env("aj-master-0")
        table = json.loads(agent.exec(pods[0], "cat", env["RANK_TABLE_FILE"]).stdout)
        assert table["version"] == "1.2", table
        (super_pod,) = table["super_pod_list"]
        assert super_pod["super_pod_id"] == "0"
        assert len(super_pod["server_list"]) == 2
        assert sum(len(s["device"]) for s in table["server_list"]) == 32
        for pod in pods:
            logs = agent.containers.podman("logs", agent.container(pod), check=False)
            assert "rendered for Atlas A3" not in logs.stdout + logs.stderr
        served = agent.exec(pods[0], "ascend-node", "status", "--serving")
        assert served.returncode == 0, served.stdout + served.stderr
