"""A pod's place in a PD service from Volcano's environment (ascend_node.pd.roles), and the
instance's rendezvous identity it maps onto."""

from __future__ import annotations

import pytest

from ascend_node.discover.identity import read_identity
from ascend_node.errors import ConfigError
from ascend_node.pd.roles import (
    instance_counts,
    instance_environ,
    read_pd_identity,
    task_env_name,
)

# 2 P instances of 2 pods, 1 D instance of 4 pods: what the svc plugin puts in every pod.
JOB = {"VC_COORDINATOR_NUM": "1", "VC_CONTROLLER_NUM": "1", "VC_PREFILL_0_NUM": "2",
       "VC_PREFILL_1_NUM": "2", "VC_DECODE_0_NUM": "4"}


def pod(task: str, index: int, **extra: str) -> dict[str, str]:
    return {**JOB, "ASCEND_NODE_PD_TASK": task, "VC_TASK_INDEX": str(index), **extra}


@pytest.mark.parametrize(("task", "index", "role", "instance", "pods"), [
    ("coordinator", 0, "coordinator", None, 1),
    ("controller", 0, "controller", None, 1),
    ("prefill-0", 1, "prefill", 0, 2),
    ("prefill-1", 0, "prefill", 1, 2),
    ("decode-0", 3, "decode", 0, 4),
])
def test_each_pod_knows_its_role_instance_and_place(task: str, index: int, role: str,
                                                    instance: int | None, pods: int) -> None:
    me = read_pd_identity(pod(task, index))
    assert (me.role, me.instance, me.place, me.task_pods) == (role, instance, index, pods)
    assert me.task == task
    assert me.counts == {"prefill": 2, "decode": 1}
    assert me.is_server == (instance is not None)


@pytest.mark.parametrize(("env", "says"), [
    ({**JOB, "VC_TASK_INDEX": "0"}, "ASCEND_NODE_PD_TASK is not set"),
    (pod("prefill", 0), "ASCEND_NODE_PD_TASK='prefill' names no task"),
    (pod("decode-01", 0), "names no task"),
    (pod("worker", 0), "names no task"),
    (pod("decode-1", 0), "Volcano lists 1 decode task(s)"),
    (pod("decode-0", 4), "VC_TASK_INDEX=4 is outside 0..3 (VC_DECODE_0_NUM=4)"),
    (pod("decode-0", 0, VC_DECODE_0_NUM="four"), "VC_DECODE_0_NUM='four' is not"),
    ({k: v for k, v in pod("prefill-0", 0).items() if k != "VC_TASK_INDEX"},
     "VC_TASK_INDEX is not set"),
    (pod("controller", 0, VC_CONTROLLER_NUM="2"), "a PD service has one controller"),
    ({**pod("prefill-0", 0), "VC_PREFILL_3_NUM": "2"},
     "prefill tasks [0, 1, 3] but not prefill-2"),
])
def test_what_cannot_be_told_is_named(env: dict[str, str], says: str) -> None:
    with pytest.raises(ConfigError) as err:
        read_pd_identity(env)
    assert says in err.value.cause


def test_task_names_as_volcano_spells_their_variables() -> None:
    assert task_env_name("decode-12") == "VC_DECODE_12_NUM"
    assert instance_counts({"VC_MASTER_NUM": "1"}) == {"prefill": 0, "decode": 0}


def test_an_instance_meets_its_peers_as_a_plain_job_does() -> None:
    me = read_pd_identity(pod("decode-0", 3))
    env = instance_environ(me, "svc1")
    assert env["ASCEND_NODE_RUN_ID"] == "svc1-decode-0"
    ident = read_identity({**env, "POD_IP": "172.16.2.13", "POD_UID": "u-3"})
    assert (ident.global_index, ident.node_count, ident.name) == (3, 4, "worker 3 (node 3)")
    with pytest.raises(ValueError, match="the controller has no instance table"):
        instance_environ(read_pd_identity(pod("controller", 0)), "svc1")
