"""Which pods' logs launch opens and when a log has an end (`log_follow.pod_log`), by cases:
the first app container's state as the kubelet reports it."""

from __future__ import annotations

from typing import Any, Optional

import pytest

from ascend_node.launch.log_follow import PodLog, pod_log


def pod(phase: str, *states: tuple[str, str], uid: str = "u1") -> dict[str, Any]:
    return {"metadata": {"uid": uid, "name": "j-worker-0"},
            "spec": {"containers": [{"name": "training"}, {"name": "side"}]},
            "status": {"phase": phase, "containerStatuses": [
                {"name": name, "state": {state: {}}} for name, state in states]}}


@pytest.mark.parametrize(("obj", "want"), [
    (pod("Pending"), (False, False)),
    (pod("Pending", ("training", "waiting")), (False, False)),
    (pod("Running", ("training", "running")), (True, False)),
    (pod("Running", ("training", "terminated"), ("side", "running")), (True, True)),
    (pod("Succeeded", ("training", "terminated")), (True, True)),
    (pod("Failed", ("training", "terminated")), (True, True)),
    # the sidecar's state says nothing of the log launch follows
    (pod("Running", ("side", "terminated"), ("training", "running")), (True, False)),
    # failed before its container ran (an init container, admission): ended, nothing to read
    (pod("Failed", ("training", "waiting")), (False, True)),
    (pod("Failed"), (False, True)),
])
def test_started_and_ended(obj: dict[str, Any], want: tuple[bool, bool]) -> None:
    state = pod_log(obj)
    assert state is not None
    assert (state.started, state.ended) == want
    assert (state.uid, state.name, state.container) == ("u1", "j-worker-0", "training")


@pytest.mark.parametrize("obj", [
    {"metadata": {"name": "x"}, "spec": {"containers": [{"name": "c"}]}},
    {"metadata": {"uid": "u", "name": "x"}, "spec": {"containers": []}},
    {},
])
def test_nothing_to_follow(obj: dict[str, Any]) -> None:
    got: Optional[PodLog] = pod_log(obj)
    assert got is None
