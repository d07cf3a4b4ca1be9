"""`ascend-node launch` streams every pod's log (issue 39, deliverable 3), on the real control
plane with the pods really running (the node agent: tests/kube_agent_bed.py): the training
Job `launch` renders, scheduled by Volcano, each pod's `ascend-node boot` meeting its peer on
the claim and exec'ing the training command (under a stand-in `msrun` that runs it, on the
claim's PATH: the image has no MindSpore), whose output must reach launch's stdout whole.

Each line a pod prints is `a<attempt> step <i>`: per pod and attempt, the steps launch
printed must be 1..N exactly once, in order — across a RestartJob too."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Iterator

import pytest

from ascend_node.launch.platform_env import job_name
from tests.kube_agent_bed import MODEL_PATH, SIM_DIR, AgentBed, open_agent
from tests.kube_bed import Bed

pytestmark = [pytest.mark.kube, pytest.mark.containers]

IMAGE = "localhost/ascend-node-mindie:test"
STEPS = 120
# msrun's own flags (--worker_num=8 ...) and then the training command: run it
FAKE_MSRUN = """#!/bin/sh
# msrun, faked for the kube bed: skips msrun's own --flags and runs the training command
while [ $# -gt 0 ]; do case "$1" in --*) shift;; *) break;; esac; done
exec "$@"
"""
FAKE_PYTHON = f"""#!/bin/sh
# the image's python with an empty mindspore package (boot checks msrun's python finds it)
PYTHONPATH={MODEL_PATH}/{SIM_DIR}/site exec python3 "$@"
"""
# each pod: its attempt number from the claim; STEPS lines in two bursts; the worker's
# first attempt then exits 4 when `fail_once` is set
COMMAND = (
    'f=' + MODEL_PATH + '/' + SIM_DIR + '/tries-$HOSTNAME; n=$(( $(cat $f 2>/dev/null '
    '|| echo 0) + 1 )); echo $n > $f; '
    'for i in $(seq 1 {half}); do echo "a$n step $i"; done; sleep 3; '
    'for i in $(seq {next} {steps}); do echo "a$n step $i"; done; '
    '{fail}exit 0')
FAIL_ONCE = 'case "$HOSTNAME" in *worker*) [ $n = 1 ] && sleep 2 && exit 4;; esac; '


@pytest.fixture(scope="module")
def agent(kube_bed: Bed) -> Iterator[AgentBed]:
    yield from open_agent(kube_bed)


def launch(agent: AgentBed, ns: str, run: str, fail_once: bool) -> tuple[int, str, str]:
    claim = agent.claim(ns, "model")
    bin_dir = claim / SIM_DIR / "bin"
    for name, text in (("msrun", FAKE_MSRUN), ("python", FAKE_PYTHON)):
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    (claim / SIM_DIR / "site" / "mindspore").mkdir(parents=True)
    (claim / SIM_DIR / "site" / "mindspore" / "__init__.py").write_text("")
    command = COMMAND.format(half=STEPS // 2, next=STEPS // 2 + 1, steps=STEPS,
                             fail=FAIL_ONCE if fail_once else "")
    clean = {k: v for k, v in os.environ.items()
             if not k.startswith(("KFJ_", "KUBERNETES_", "ASCEND_NODE_"))}
    env = {"KFJ_RUN_ID": run, "KFJ_TASK_NAME": "train", "KFJ_NAMESPACE": ns,
           "KFJ_TASK_IMAGES": IMAGE, "KUBECONFIG": str(agent.kube_bed.run / "admin.kubeconfig")}
    done = subprocess.run(
        [sys.executable, "-m", "ascend_node", "launch", "--num_worker", "2", "--pvc", "model",
         "--command", command, "--timeout", "420"], capture_output=True, text=True,
        env={**clean, **env}, timeout=600)
    return done.returncode, done.stdout, done.stderr


def steps(out: str) -> dict[tuple[str, int], list[int]]:
    """(pod prefix, attempt) -> the step numbers launch printed, in the order printed."""
    got: dict[tuple[str, int], list[int]] = {}
    for line in out.splitlines():
        m = re.fullmatch(r"(\[\w+ \d+\]) a(\d+) step (\d+)", line)
        if m:
            got.setdefault((m.group(1), int(m.group(2))), []).append(int(m.group(3)))
    return got


def explain(agent: AgentBed, out: str, err: str) -> str:
    return f"--- stdout:\n{out[-3000:]}\n--- stderr:\n{err[-3000:]}\n--- agent:\n" \
           f"{agent.log_tail(40)}"


def test_a_completed_job_has_every_pods_lines_once_in_order(agent: AgentBed) -> None:
    ns = agent.kube_bed.namespace("ll-done")
    try:
        code, out, err = launch(agent, ns, "run-logs", fail_once=False)
        assert code == 0, explain(agent, out, err)
        name = job_name("train", "run-logs")
        assert out.splitlines()[-1] == f"job {ns}/{name} Completed", explain(agent, out, err)
        got = steps(out)
        want = list(range(1, STEPS + 1))
        assert got == {("[master 0]", 1): want, ("[worker 0]", 1): want}, \
            explain(agent, out, err)
        # launch's own lines are on stderr, the pods' on stdout
        assert "job phase Running" in err and "step" not in err
    finally:
        agent.purge(ns)


def test_a_restart_on_4_follows_the_new_pods_and_loses_no_line(agent: AgentBed) -> None:
    ns = agent.kube_bed.namespace("ll-four")
    try:
        code, out, err = launch(agent, ns, "run-logs4", fail_once=True)
        assert code == 0, explain(agent, out, err)
        got = steps(out)
        want = list(range(1, STEPS + 1))
        # the worker's first attempt ran to its exit 4: all of it; the master's first
        # attempt was stopped by the restart: what it printed, once and in order
        assert got[("[worker 0]", 1)] == want, explain(agent, out, err)
        first = got.get(("[master 0]", 1), [])
        assert first == list(range(1, len(first) + 1)), explain(agent, out, err)
        assert got[("[worker 0]", 2)] == want and got[("[master 0]", 2)] == want, \
            explain(agent, out, err)
        assert set(got) <= {(p, a) for p in ("[master 0]", "[worker 0]") for a in (1, 2)}
    finally:
        agent.purge(ns)
