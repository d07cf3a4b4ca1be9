"""Contract of ascend_node.discover.identity: Volcano environment -> who this node is, or exit 1.

Every rejection names the variable and the value at fault (docs/design.md, "The chain", step 1).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Optional

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ascend_node.discover.identity import (
    check_run_id,
    fallback_incarnation,
    node_name,
    read_identity,
    run_id_from_volcano_hosts,
)
from ascend_node.errors import ConfigError

BASE = {"VC_MASTER_NUM": "1", "VC_WORKER_NUM": "3", "K8S_POD_IP": "10.0.0.5",
        "POD_UID": "6f1c0e42-9a4b-4a67-8d3e-0c2a1b7e9f10"}


def env(**over: str) -> dict[str, str]:
    out = dict(BASE)
    for key, value in over.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = value
    return out


def no_route() -> Optional[str]:
    return None


# ------------------------------------------------------------------ good input


@pytest.mark.parametrize(
    ("environ", "role", "task", "index", "count", "name"),
    [
        (env(ROLE="master", VC_TASK_INDEX="0"), "master", 0, 0, 4, "master 0 (node 0)"),
        (env(ROLE="worker", VC_TASK_INDEX="0"), "worker", 0, 1, 4, "worker 0 (node 1)"),
        (env(ROLE="Worker", VC_TASK_INDEX="2"), "worker", 2, 3, 4, "worker 2 (node 3)"),
        (env(ROLE=" WORKER ", VK_TASK_INDEX="1"), "worker", 1, 2, 4, "worker 1 (node 2)"),
        # Worker-only job: no master task, so Volcano sets no VC_MASTER_NUM.
        (env(ROLE="worker", VC_MASTER_NUM=None, VC_TASK_INDEX="2"), "worker", 2, 2, 3,
         "worker 2 (node 2)"),
        (env(ROLE="master", VC_MASTER_NUM="2", VC_WORKER_NUM=None, VC_TASK_INDEX="1"),
         "master", 1, 1, 2, "master 1 (node 1)"),
    ],
)
def test_global_index_offsets_workers_by_the_master_count(
    environ: dict[str, str], role: str, task: int, index: int, count: int, name: str
) -> None:
    ident = read_identity(environ)
    assert (ident.role, ident.task_index, ident.global_index, ident.node_count, ident.name) \
        == (role, task, index, count, name)


def test_sources_say_where_each_value_came_from() -> None:
    ident = read_identity(env(ROLE="worker", VC_MASTER_NUM=None, VK_TASK_INDEX="0",
                              K8S_POD_IP=None, POD_IP="10.0.0.7"))
    assert dict(ident.sources) == {
        "role": "ROLE", "master_count": "default (0)", "worker_count": "VC_WORKER_NUM",
        "task_index": "VK_TASK_INDEX", "pod_ip": "POD_IP",
        "host_ip": "pod IP (K8S_HOST_IP unset)", "incarnation": "POD_UID",
        "job_version": "not set", "job_instance": "not set",
    }
    assert (ident.pod_ip, ident.host_ip) == ("10.0.0.7", "10.0.0.7")


@pytest.mark.parametrize(("raw", "expect"), [("", None), (" 3 ", 3), ("0", 0)])
def test_job_version_from_the_downward_api(raw: str, expect: object) -> None:
    ident = read_identity(env(ROLE="worker", VC_TASK_INDEX="0", ASCEND_NODE_JOB_VERSION=raw))
    assert ident.job_version == expect


@pytest.mark.parametrize("raw", ["-1", "v2", "1.5", "9" * 12])
def test_bad_job_version_is_named(raw: str) -> None:
    with pytest.raises(ConfigError) as err:
        read_identity(env(ROLE="worker", VC_TASK_INDEX="0", ASCEND_NODE_JOB_VERSION=raw))
    assert err.value.cause == f"ASCEND_NODE_JOB_VERSION={raw!r} is not a non-negative integer"


_GROUP = "job-42-3f1c0a5e-7d7e-4f43-9c1b-2f5b4c0e8a11"  # `<job>-<job uid>`


@pytest.mark.parametrize(("raw", "expect"), [("", None), (f" {_GROUP} ", _GROUP)])
def test_job_instance_from_the_downward_api(raw: str, expect: object) -> None:
    ident = read_identity(env(ROLE="worker", VC_TASK_INDEX="0", ASCEND_NODE_JOB_INSTANCE=raw))
    assert ident.job_instance == expect


@pytest.mark.parametrize("raw", ["Job-42", "job 42", "-job", "job-", "j" * 254])
def test_bad_job_instance_is_named(raw: str) -> None:
    with pytest.raises(ConfigError) as err:
        read_identity(env(ROLE="worker", VC_TASK_INDEX="0", ASCEND_NODE_JOB_INSTANCE=raw))
    assert err.value.cause.startswith(f"ASCEND_NODE_JOB_INSTANCE={raw[:300]!r} is not a pod "
                                      "group name")
    assert "scheduling.k8s.io/group-name" in err.value.hint


def test_vc_task_index_wins_over_vk() -> None:
    ident = read_identity(env(ROLE="worker", VC_TASK_INDEX="2", VK_TASK_INDEX="0"))
    assert (ident.task_index, ident.sources["task_index"]) == (2, "VC_TASK_INDEX")


@pytest.mark.parametrize(
    ("over", "route", "pod_ip", "host_ip", "pod_src", "host_src"),
    [
        ({"K8S_POD_IP": "10.0.0.5", "POD_IP": "10.9.9.9", "K8S_HOST_IP": "192.168.1.2"},
         "10.1.1.1", "10.0.0.5", "192.168.1.2", "K8S_POD_IP", "K8S_HOST_IP"),
        ({"K8S_POD_IP": None, "POD_IP": "10.9.9.9"}, "10.1.1.1", "10.9.9.9", "10.9.9.9",
         "POD_IP", "pod IP (K8S_HOST_IP unset)"),
        ({"K8S_POD_IP": " ", "POD_IP": None}, "10.1.1.1", "10.1.1.1", "10.1.1.1",
         "default-route interface", "pod IP (K8S_HOST_IP unset)"),
        ({"K8S_POD_IP": "fd00::5", "K8S_HOST_IP": "fd00::1"}, None, "fd00::5", "fd00::1",
         "K8S_POD_IP", "K8S_HOST_IP"),
    ],
)
def test_pod_ip_and_host_ip_precedence(
    over: dict[str, Any], route: Optional[str], pod_ip: str, host_ip: str, pod_src: str,
    host_src: str,
) -> None:
    ident = read_identity(env(ROLE="master", VC_TASK_INDEX="0", **over), lambda: route)
    assert (ident.pod_ip, ident.host_ip) == (pod_ip, host_ip)
    assert (ident.sources["pod_ip"], ident.sources["host_ip"]) == (pod_src, host_src)


def test_incarnation_from_pod_uid_else_fallback() -> None:
    ident = read_identity(env(ROLE="master", VC_TASK_INDEX="0"))
    assert ident.incarnation == BASE["POD_UID"]
    seen: list[str] = []

    def fallback(pod_ip: str) -> str:
        seen.append(pod_ip)
        return "ns-abc"

    ident = read_identity(env(ROLE="master", VC_TASK_INDEX="0", POD_UID=None), no_route, fallback)
    assert (ident.incarnation, seen) == ("ns-abc", ["10.0.0.5"])
    assert ident.sources["incarnation"].startswith("fallback")


def test_fallback_incarnation_survives_restart_and_changes_with_the_pod() -> None:
    a = fallback_incarnation("10.0.0.5", "job-worker-0", "boot-1", "net:[4026532281]")
    assert a == fallback_incarnation("10.0.0.5", "job-worker-0", "boot-1", "net:[4026532281]")
    assert a.startswith("ns-") and len(a) == 23
    # Re-created pod: new sandbox (netns) or new IP; a reboot reuses inode numbers.
    assert a != fallback_incarnation("10.0.0.5", "job-worker-0", "boot-1", "net:[4026532999]")
    assert a != fallback_incarnation("10.0.0.6", "job-worker-0", "boot-1", "net:[4026532281]")
    assert a != fallback_incarnation("10.0.0.5", "job-worker-0", "boot-2", "net:[4026532281]")
    assert fallback_incarnation("10.0.0.5", "h", "b", "") == ""


def test_node_name() -> None:
    assert [node_name(i, 2) for i in range(4)] == [
        "master 0 (node 0)", "master 1 (node 1)", "worker 0 (node 2)", "worker 1 (node 3)"]


# ------------------------------------------------------------------ bad input


@pytest.mark.parametrize(
    ("over", "cause"),
    [
        ({}, "ROLE is not set"),
        ({"ROLE": "boss", "VC_TASK_INDEX": "0"}, "ROLE='boss' is not one of master, worker"),
        ({"ROLE": "worker", "VC_WORKER_NUM": None, "VC_TASK_INDEX": "0"},
         "VC_WORKER_NUM is not set"),
        ({"ROLE": "master", "VC_MASTER_NUM": "", "VC_TASK_INDEX": "0"},
         "VC_MASTER_NUM is not set"),
        ({"ROLE": "worker", "VC_WORKER_NUM": "two", "VC_TASK_INDEX": "0"},
         "VC_WORKER_NUM='two' is not a non-negative integer"),
        ({"ROLE": "worker", "VC_WORKER_NUM": "-1", "VC_TASK_INDEX": "0"},
         "VC_WORKER_NUM='-1' is not a non-negative integer"),
        ({"ROLE": "worker", "VC_MASTER_NUM": "1.5", "VC_TASK_INDEX": "0"},
         "VC_MASTER_NUM='1.5' is not a non-negative integer"),
        ({"ROLE": "worker", "VC_MASTER_NUM": "0", "VC_WORKER_NUM": "0", "VC_TASK_INDEX": "0"},
         "VC_MASTER_NUM=0 and VC_WORKER_NUM=0: the job has no nodes"),
        ({"ROLE": "worker", "VC_MASTER_NUM": None, "VC_WORKER_NUM": "0", "VC_TASK_INDEX": "0"},
         "VC_MASTER_NUM=(unset) and VC_WORKER_NUM=0: the job has no nodes"),
        ({"ROLE": "worker"}, "VC_TASK_INDEX (or VK_TASK_INDEX) is not set"),
        ({"ROLE": "worker", "VC_TASK_INDEX": "x1"},
         "VC_TASK_INDEX='x1' is not a non-negative integer"),
        ({"ROLE": "worker", "VC_TASK_INDEX": "\u0661"},  # int() would accept it
         "VC_TASK_INDEX='\u0661' is not a non-negative integer"),
        ({"ROLE": "worker", "VK_TASK_INDEX": "-2"},
         "VK_TASK_INDEX='-2' is not a non-negative integer"),
        ({"ROLE": "worker", "VC_TASK_INDEX": "3"},
         "VC_TASK_INDEX=3 is out of range for ROLE=worker with VC_WORKER_NUM=3"),
        ({"ROLE": "master", "VC_TASK_INDEX": "1"},
         "VC_TASK_INDEX=1 is out of range for ROLE=master with VC_MASTER_NUM=1"),
        ({"ROLE": "master", "VC_TASK_INDEX": "0", "K8S_POD_IP": "127.0.0.1"},
         "K8S_POD_IP='127.0.0.1' is unusable: loopback address"),
        ({"ROLE": "master", "VC_TASK_INDEX": "0", "K8S_POD_IP": "0.0.0.0"},
         "K8S_POD_IP='0.0.0.0' is unusable: unspecified address"),
        ({"ROLE": "master", "VC_TASK_INDEX": "0", "K8S_POD_IP": "pod-0.svc"},
         "K8S_POD_IP='pod-0.svc' is unusable: not an IPv4/IPv6 address"),
        ({"ROLE": "master", "VC_TASK_INDEX": "0", "K8S_POD_IP": None, "POD_IP": "::"},
         "POD_IP='::' is unusable: unspecified address"),
        ({"ROLE": "master", "VC_TASK_INDEX": "0", "K8S_HOST_IP": "::1"},
         "K8S_HOST_IP='::1' is unusable: loopback address"),
        ({"ROLE": "master", "VC_TASK_INDEX": "0", "K8S_POD_IP": None},
         "no pod IP: K8S_POD_IP and POD_IP are unset and no interface holds a default route"),
        ({"ROLE": "master", "VC_TASK_INDEX": "0", "POD_UID": "a/b"},
         "POD_UID='a/b' contains characters outside [A-Za-z0-9_.:-]"),
        ({"ROLE": "master", "VC_TASK_INDEX": "0", "POD_UID": None},
         "POD_UID is not set and no fallback incarnation could be derived"),
    ],
)
def test_bad_environment_names_the_variable_and_value(over: dict[str, Any], cause: str) -> None:
    with pytest.raises(ConfigError) as err:
        read_identity(env(**over), no_route)
    assert err.value.cause == cause
    assert err.value.exit_code == 1
    assert err.value.hint


def test_unusable_default_route_address_is_named() -> None:
    with pytest.raises(ConfigError) as err:
        read_identity(env(ROLE="master", VC_TASK_INDEX="0", K8S_POD_IP=None),
                      lambda: "169.254.0.9")
    assert err.value.cause == (
        "default-route interface address '169.254.0.9' is unusable: link-local address")


# ------------------------------------------------------------------ run id


@pytest.mark.parametrize("value", ["job-1", "mindie-2x8.v3", "A", "a" * 128, "7_b"])
def test_check_run_id_accepts_safe_names(value: str) -> None:
    assert check_run_id(value, "--run-id") == value


@pytest.mark.parametrize(
    "value",
    ["", "a/b", "/abs", "a\\b", "..", "a..b", "x/../y", ".hidden", "-x", "_x", "a b", " a",
     "a\n", "a\t", "a\x00", "é", "job:1", "a*", "a" * 129],
)
def test_check_run_id_rejects_unsafe_names(value: str) -> None:
    with pytest.raises(ConfigError) as err:
        check_run_id(value, "environment ASCEND_NODE_RUN_ID")
    assert err.value.cause == (
        f"run id {value!r} (from environment ASCEND_NODE_RUN_ID) is not a safe file-name part")


@pytest.mark.parametrize(
    ("environ", "expected"),
    [
        ({"VC_WORKER_HOSTS": "llm-worker-0.llm,llm-worker-1.llm"}, "llm"),
        ({"VC_MASTER_HOSTS": "job-a-master-0.job-a", "VC_WORKER_HOSTS": "x-worker-0.x"},
         "job-a"),
        ({"VC_WORKER_HOSTS": "noservice"}, None),
        ({"VC_WORKER_HOSTS": "a-worker-0.../x"}, None),
        ({}, None),
    ],
)
def test_run_id_from_volcano_hosts(environ: dict[str, str], expected: Optional[str]) -> None:
    assert run_id_from_volcano_hosts(environ) == expected


# ------------------------------------------------------------------ default route


@pytest.mark.parametrize(("answers", "expected"), [
    (["10.244.1.9", "fd00::5"], "10.244.1.9"),  # IPv4 first
    ([None, "fd00::5"], "fd00::5"),  # IPv6-only pod
    (["", "fd00::5"], "fd00::5"),
    (["169.254.0.9", "fd00::5"], "fd00::5"),  # a usable family wins over an unusable one
    (["169.254.0.9", None], "169.254.0.9"),  # else the unusable one, for identity to name
    ([None, "fe80::1"], "fe80::1"),
    ([None, None], None),  # no default route in either family
    ([], None),
])
def test_pick_default_ip(answers: list[Optional[str]], expected: Optional[str]) -> None:
    from ascend_node.discover.hostinfo import pick_default_ip

    assert pick_default_ip(answers) == expected


def test_pick_default_ip_does_not_ask_ipv6_when_ipv4_is_usable() -> None:
    from ascend_node.discover.hostinfo import pick_default_ip

    asked: list[str] = []

    def answers() -> Iterator[Optional[str]]:
        for value in ("10.0.0.5", "fd00::5"):
            asked.append(value)
            yield value

    assert pick_default_ip(answers()) == "10.0.0.5" and asked == ["10.0.0.5"]


def test_route_source_is_the_kernels_choice_and_none_without_a_route() -> None:
    import socket

    from ascend_node.discover.hostinfo import route_source

    # Loopback always has a route: the kernel's answer for 127.0.0.2 is a loopback source.
    assert route_source(socket.AF_INET, "127.0.0.2") == "127.0.0.1"
    # Not an address of this family: the OSError becomes "no answer", never a crash.
    assert route_source(socket.AF_INET, "2001:db8::1") is None


# ------------------------------------------------------------------ never crash

KEYS = ("ROLE", "VC_TASK_INDEX", "VK_TASK_INDEX", "VC_MASTER_NUM", "VC_WORKER_NUM",
        "K8S_POD_IP", "POD_IP", "K8S_HOST_IP", "POD_UID")
VALUES = st.one_of(
    st.text(max_size=20),
    st.sampled_from(["master", "WORKER", "0", "1", "3", "-1", "10.0.0.1", "::1", "fe80::1",
                     "0.0.0.0", "1e3", " 2 ", "999999", "\u0661"]),
    st.integers(-5, 10).map(str),
    st.ip_addresses().map(str),
)


@settings(max_examples=400, deadline=None)
@given(st.dictionaries(st.sampled_from(KEYS), VALUES), st.one_of(st.none(), VALUES))
def test_read_identity_returns_or_raises_config_error(
    environ: dict[str, str], route: Optional[str]
) -> None:
    try:
        ident = read_identity(environ, lambda: route, lambda ip: "ns-x")
    except ConfigError as exc:
        assert exc.cause and "\n" not in exc.cause.replace("\\n", "")
        return
    assert 0 <= ident.global_index < ident.node_count
    assert ident.role in ("master", "worker")


@settings(max_examples=400, deadline=None)
@given(st.text(max_size=140))
def test_accepted_run_ids_are_safe_path_parts(value: str) -> None:
    try:
        assert check_run_id(value, "x") == value
    except ConfigError:
        return
    assert "/" not in value and "\\" not in value and ".." not in value
    assert not any(c.isspace() for c in value) and value.isascii()
    assert not value.startswith((".", "-"))
