"""`ascend-node launch --kind mindie` against real pods (issue 39, deliverable 4), on the real
control plane with the node agent running the pods in podman (tests/kube_agent_bed.py): the
MindIE Job `launch` renders, scheduled by Volcano, each pod's `ascend-node boot` meeting its
peer on the model claim and exec'ing the fake MindIE daemon, whose readiness probe makes the
pod Ready only once the daemon serves.

tests/test_kube_launch.py proves the `--until serving` verdict with pod states the test writes;
here the states are the ones real pods reach: launch exits 0 only once the daemons serve, and
leaves the Job running (serving is the state the pipeline step waits for, not an end). A
pipeline stop (SIGTERM) while the pods are still loading deletes the Job and its pods."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest

from ascend_node.launch.platform_env import job_name
from tests.kube_agent_bed import MODEL_PATH, AgentBed, open_agent
from tests.kube_bed import Bed

pytestmark = [pytest.mark.kube, pytest.mark.containers]

IMAGE = "localhost/ascend-node-mindie:test"


@pytest.fixture(scope="module")
def agent(kube_bed: Bed) -> Iterator[AgentBed]:
    yield from open_agent(kube_bed)


def start(agent: AgentBed, ns: str, run: str) -> subprocess.Popen[str]:
    """`launch --kind mindie --nodes 2` as the pipeline step runs it: the platform's KFJ_*
    environment, the model claim by its name (`--until serving` is the kind's default)."""
    agent.claim(ns, "model")
    clean = {k: v for k, v in os.environ.items()
             if not k.startswith(("KFJ_", "KUBERNETES_", "ASCEND_NODE_"))}
    env = {"KFJ_RUN_ID": run, "KFJ_TASK_NAME": "serve", "KFJ_NAMESPACE": ns,
           "KFJ_TASK_IMAGES": IMAGE, "KUBECONFIG": str(agent.kube_bed.run / "admin.kubeconfig")}
    return subprocess.Popen(
        [sys.executable, "-m", "ascend_node", "launch", "--kind", "mindie", "--nodes", "2",
         "--pvc", "model", "--model-path", MODEL_PATH, "--timeout", "360"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env={**clean, **env})


def ready(pod: dict[str, Any]) -> bool:
    return any(c["type"] == "Ready" and c["status"] == "True"
               for c in pod.get("status", {}).get("conditions", []))


def explain(agent: AgentBed, out: str, err: str) -> str:
    return f"--- stdout:\n{out[-3000:]}\n--- stderr:\n{err[-3000:]}\n--- agent:\n" \
           f"{agent.log_tail(40)}"


def finish(proc: subprocess.Popen[str], timeout: float = 480) -> tuple[str, str]:
    try:
        return proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        raise AssertionError(f"launch still running after {timeout} s\n{out[-2000:]}\n"
                             f"{err[-2000:]}") from None


def test_mindie_until_serving_exits_0_with_the_daemons_serving_and_the_job_left_running(
        agent: AgentBed) -> None:
    ns = agent.kube_bed.namespace("lm-serve")
    try:
        proc = start(agent, ns, "run-serve")
        out, err = finish(proc)
        assert proc.returncode == 0, explain(agent, out, err)
        name = job_name("serve", "run-serve")
        assert out.splitlines()[-1] == f"job {ns}/{name} serving: 2/2 pods Ready", \
            explain(agent, out, err)
        # the log streams still open at the verdict are closed without a word (once, a
        # reader thread's traceback per pod: kube/client.py LogStream.read)
        assert "Traceback" not in err, explain(agent, out, err)
        # every pod's log reached launch's stdout with its task and index in front
        for prefix in ("[master 0] ", "[worker 0] "):
            assert any(line.startswith(prefix) for line in out.splitlines()), \
                explain(agent, out, err)
        # serving is no end: the Job and both pods stay, Ready, and MindIE's management
        # port answers (as tests/test_kube_jobs.py asks it) after launch has gone
        job = agent.kube.get(agent.kube_bed.jobs_path(ns, name))
        assert job["status"]["state"]["phase"] == "Running", job["status"]
        pods = sorted(agent.kube_bed.pods(ns), key=lambda p: p["metadata"]["name"])
        assert [p["metadata"]["name"] for p in pods] == [f"{name}-master-0",
                                                         f"{name}-worker-0"]
        assert all(ready(p) for p in pods), explain(agent, out, err)
        served = agent.exec(pods[0], "ascend-node", "status", "--serving")
        assert served.returncode == 0, served.stdout + served.stderr
    finally:
        agent.purge(ns)


def test_sigterm_while_the_pods_load_deletes_the_job_and_its_pods(agent: AgentBed) -> None:
    ns = agent.kube_bed.namespace("lm-term")
    proc = None
    try:
        proc = start(agent, ns, "run-term")
        name = job_name("serve", "run-term")

        def running_not_ready() -> bool:
            assert proc.poll() is None, "launch ended before its pods ran"
            pods = agent.kube_bed.pods(ns)
            assert not any(ready(p) for p in pods), "a pod Ready before the stop"
            return len(pods) == 2 and all(
                p.get("status", {}).get("phase") == "Running" for p in pods)

        agent.kube_bed.wait(f"pods of {ns} Running", running_not_ready, 300)
        proc.send_signal(signal.SIGTERM)
        out, err = finish(proc, 120)
        assert proc.returncode == 143, explain(agent, out, err)
        assert f"deleted job {name}" in err, explain(agent, out, err)
        assert "Traceback" not in err, explain(agent, out, err)
        assert not agent.kube.get(agent.kube_bed.jobs_path(ns))["items"]
        # the pods go too: Volcano deletes them with their Job, the agent confirms each
        agent.kube_bed.wait(f"pods of {ns} gone", lambda: not agent.kube_bed.pods(ns), 120)
    finally:
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.communicate()
        agent.purge(ns)
