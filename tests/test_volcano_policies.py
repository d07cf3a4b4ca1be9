"""The rendered Job's policies against a model of Volcano's own matching (tests/volcano_model.py).

What a user relies on: a multi-node instance that breaks — the agent timing out, the server
dying an hour into serving (exit 1, a signal, an OOM kill), a pod lost — is restarted as a
whole, a bounded number of times; an inconsistent cluster (exit 5) is not retried.
"""

from __future__ import annotations

from typing import Any

import pytest

from ascend_node.jobspec.job import MAX_RETRY, ManifestParams, render_job
from tests.volcano_model import JobRun, PodEvent, apply_policies, request_for


def _job(kind: str, **kw: Any) -> dict[str, Any]:
    return render_job(ManifestParams(
        kind=kind, name="job", nodes=3, image="img", pvc="pvc", run_id="r1",  # type: ignore[arg-type]
        command=None if kind == "mindie" else ["run_mindformer.py"], **kw))


# what happened to a pod -> what Volcano does
TABLE = [
    (PodEvent("failed", 4), "RestartJob"),            # the agent's peers timed out
    (PodEvent("failed", 5), "AbortJob"),              # inconsistent cluster: never retried
    (PodEvent("failed", 5, task="worker"), "AbortJob"),
    (PodEvent("failed", 1), "RestartJob"),            # the server crashed after serving began
    (PodEvent("failed", 1, task="worker"), "RestartJob"),
    (PodEvent("failed", 137), "RestartJob"),          # SIGKILL / OOM kill (128 + 9)
    (PodEvent("failed", 143), "RestartJob"),          # SIGTERM (128 + 15)
    (PodEvent("failed", 139), "RestartJob"),          # SIGSEGV
    (PodEvent("failed", 2), "RestartJob"),            # any other failure
    (PodEvent("deleted"), "RestartJob"),              # evicted / node lost
    (PodEvent("running"), "SyncJob"),
    (PodEvent("failed", 1, version=-1), "SyncJob"),   # a pod of a previous attempt
]


@pytest.mark.parametrize("kind", ["mindie", "training"])
@pytest.mark.parametrize("event,action", TABLE)
def test_pod_event_to_job_action(kind: str, event: PodEvent, action: str) -> None:
    assert apply_policies(_job(kind), request_for(event), 0) == action


@pytest.mark.parametrize(("kind", "action"), [("mindie", "RestartJob"), ("training", "SyncJob")])
def test_a_task_that_exited_0(kind: str, action: str) -> None:
    """A server never finishes (every pod of its task exiting 0 is an instance that stopped
    serving: restart); a training task does (Volcano's default: the job completes)."""
    assert apply_policies(_job(kind), request_for(PodEvent("succeeded")), 0) == action


def test_the_order_matters_exit_codes_come_before_pod_failed() -> None:
    """The same policies with `PodFailed` first would restart an inconsistent cluster."""
    job = _job("mindie")
    policies = job["spec"]["policies"]
    job["spec"]["policies"] = [p for p in policies if "event" in p] + [
        p for p in policies if "exitCode" in p]
    assert apply_policies(job, request_for(PodEvent("failed", 5)), 0) == "RestartJob"


def test_a_crash_loop_ends_after_max_retry_starts() -> None:
    """The daemon dying on every start: the job is started MAX_RETRY times, then Failed
    (state/restarting.go: RetryCount >= maxRetry)."""
    run = JobRun(_job("mindie"))
    actions = []
    for _ in range(MAX_RETRY + 2):  # bounded: a policy that ignores the crash loops forever
        if run.phase != "Running":
            break
        actions.append(run.on(PodEvent("failed", 137, version=run.version)))
    assert run.phase == "Failed"
    assert run.starts == MAX_RETRY
    assert actions == ["RestartJob"] * MAX_RETRY


def test_one_crash_then_serving_again() -> None:
    run = JobRun(_job("mindie"))
    assert run.on(PodEvent("failed", 1, task="worker")) == "RestartJob"
    # the killed pods of the old attempt report late: ignored (outdated job version)
    assert run.on(PodEvent("deleted", version=0)) == "SyncJob"
    assert run.on(PodEvent("running", version=1)) == "SyncJob"
    assert (run.phase, run.starts) == ("Running", 2)


def test_exit_5_aborts_at_once_even_after_restarts() -> None:
    run = JobRun(_job("mindie"))
    run.on(PodEvent("failed", 4))
    assert run.on(PodEvent("failed", 5, version=1)) == "AbortJob"
    assert run.phase == "Aborted"


def test_policies_are_what_volcanos_webhook_accepts() -> None:
    """Never event and exitCode in one policy, no exit code 0, no event twice
    (pkg/webhooks/admission/jobs/validate)."""
    policies = _job("mindie")["spec"]["policies"]
    events = [p["event"] for p in policies if "event" in p]
    codes = [p["exitCode"] for p in policies if "exitCode" in p]
    assert all(("event" in p) != ("exitCode" in p) for p in policies)
    assert 0 not in codes and len(set(codes)) == len(codes) and len(set(events)) == len(events)
