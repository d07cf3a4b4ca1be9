"""Contract of ascend_node.handoff.launchers: argv and env per launcher, from one rank table."""

from __future__ import annotations

from typing import Any

import pytest

from ascend_node.errors import ClusterInconsistent, ConfigError, UsageError
from ascend_node.handoff.exec import DEFAULT_MINDIE_DAEMON
from ascend_node.handoff.hostnic import NicFacts, interface_of, nic_plan
from ascend_node.handoff.launchers import (
    LAUNCHERS,
    MSRUN_EXIT_ALLOWANCE,
    MSRUN_MIN_CLUSTER_TIMEOUT,
    InterpreterCheck,
    Launch,
    msrun_cluster_timeout,
    msrun_interpreter,
    msrun_launch,
    node_slice,
    plan_launch,
    ranktable_env_launch,
    torch_launch,
)


def table(*counts: int, physical_start: int = 0) -> dict[str, Any]:
    """A v1.0 table like `ranktable` writes: servers in node order, ranks contiguous."""
    servers = []
    rank = 0
    for index, count in enumerate(counts):
        devices = []
        for k in range(count):
            devices.append(
                {
                    "device_id": str(physical_start + k),
                    "device_ip": f"29.{index}.0.{k + 1}",
                    "rank_id": str(rank),
                }
            )
            rank += 1
        servers.append(
            {
                "server_id": f"10.0.0.{index + 1}",
                "container_ip": f"172.16.0.{index + 1}",
                "device": devices,
            }
        )
    return {
        "version": "1.0",
        "status": "completed",
        "server_count": str(len(counts)),
        "server_list": servers,
    }


TWO_BY_EIGHT = table(8, 8)
UNEVEN = table(8, 4, 8)


@pytest.mark.parametrize(
    ("tbl", "ip", "command", "port", "argv"),
    [
        (
            TWO_BY_EIGHT,
            "172.16.0.1",
            ["train.py", "--cfg", "x.yaml"],
            8118,
            "msrun --worker_num=16 --local_worker_num=8 --master_addr=172.16.0.1"
            " --master_port=8118 --node_rank=0 --join=True train.py --cfg x.yaml",
        ),
        (
            TWO_BY_EIGHT,
            "172.16.0.2",
            ["train.py"],
            9000,
            "msrun --worker_num=16 --local_worker_num=8 --master_addr=172.16.0.1"
            " --master_port=9000 --node_rank=1 --join=True train.py",
        ),
        (
            UNEVEN,
            "172.16.0.2",
            ["run_mindformer.py", "--config", "c.yaml"],
            8118,
            # uneven counts: no --node_rank, msrun assigns ranks itself
            "msrun --worker_num=20 --local_worker_num=4 --master_addr=172.16.0.1"
            " --master_port=8118 --join=True run_mindformer.py --config c.yaml",
        ),
        (
            table(1),
            "172.16.0.1",
            ["t.py"],
            8118,
            "msrun --worker_num=1 --local_worker_num=1 --master_addr=172.16.0.1"
            " --master_port=8118 --node_rank=0 --join=True t.py",
        ),
    ],
)
def test_msrun(tbl: dict[str, Any], ip: str, command: list[str], port: int, argv: str) -> None:
    assert msrun_launch(tbl, ip, command, port) == Launch(
        argv.split(), {}, InterpreterCheck("python", "mindspore", "msrun"))


def test_msrun_cluster_time_out_goes_before_join() -> None:
    got = msrun_launch(TWO_BY_EIGHT, "172.16.0.2", ["train.py"], 8118, cluster_time_out=95)
    assert got.argv[-3:] == ["--cluster_time_out=95", "--join=True", "train.py"]


@pytest.mark.parametrize(
    ("seconds_left", "expected"),
    [
        # the agent's --timeout 900, 60 s spent on the rendezvous: msrun's start and exit
        # fit in the rest
        (840.0, 840 - MSRUN_EXIT_ALLOWANCE),
        (95.2, 96 - MSRUN_EXIT_ALLOWANCE),  # whole seconds
        (MSRUN_MIN_CLUSTER_TIMEOUT + MSRUN_EXIT_ALLOWANCE + 0.0, MSRUN_MIN_CLUSTER_TIMEOUT),
        (3.0, MSRUN_MIN_CLUSTER_TIMEOUT),  # the workers of a healthy job must fit
        (-5.0, MSRUN_MIN_CLUSTER_TIMEOUT),  # past the deadline (a slow pre-flight)
    ],
)
def test_msrun_cluster_timeout_follows_the_agents_time_left(
    seconds_left: float, expected: int
) -> None:
    assert msrun_cluster_timeout(seconds_left) == expected


def test_plan_launch_gives_each_launchers_wait_the_agents_time_left() -> None:
    msrun = plan_launch("msrun", table=TWO_BY_EIGHT, container_ip="172.16.0.1",
                        command=["t.py"], seconds_left=120.5)
    assert f"--cluster_time_out={121 - MSRUN_EXIT_ALLOWANCE}" in msrun.argv
    torch = plan_launch("torch", table=TWO_BY_EIGHT, container_ip="172.16.0.1",
                        command=["torchrun", "t.py"], seconds_left=120.5)
    assert not any("time" in a for a in torch.argv) and torch.check is None
    assert torch.env["PET_RDZV_CONF"] == f"timeout={121 - MSRUN_EXIT_ALLOWANCE}"


@pytest.mark.parametrize(
    ("command", "interpreter"),
    [
        (["train.py", "--cfg", "x"], "python"),  # msrun prepends a bare `python`
        (["python3", "train.py"], "python3"),  # msrun keeps the user's own
        (["python", "-u", "train.py"], "python"),
        (["/opt/venv/bin/python", "train.py"], "python"),  # a path is a script to msrun
        (["pytest", "tests/"], None),  # pytest: a console script, not checked
    ],
)
def test_msrun_interpreter_is_what_msrun_will_start(
    command: list[str], interpreter: str | None
) -> None:
    assert msrun_interpreter(command) == interpreter
    check = msrun_launch(TWO_BY_EIGHT, "172.16.0.1", command).check
    assert (check.interpreter if check else None) == interpreter


@pytest.mark.parametrize(
    ("tbl", "ip", "expected"),
    [
        (
            TWO_BY_EIGHT,
            "172.16.0.2",
            {
                "RANK_TABLE_FILE": "/run/ascend-node/ranktable.json",
                "RANK_SIZE": "16",
                "RANK_START": "8",
                "SERVER_INDEX": "1",
                "SERVER_ID": "10.0.0.2",
                "LOCAL_DEVICE_IDS": "0,1,2,3,4,5,6,7",
                "LOCAL_RANK_IDS": "8,9,10,11,12,13,14,15",
                "LOCAL_DEVICE_NUM": "8",
            },
        ),
        (
            UNEVEN,
            "172.16.0.3",
            {
                "RANK_TABLE_FILE": "/run/ascend-node/ranktable.json",
                "RANK_SIZE": "20",
                "RANK_START": "12",
                "SERVER_INDEX": "2",
                "SERVER_ID": "10.0.0.3",
                "LOCAL_DEVICE_IDS": "0,1,2,3,4,5,6,7",
                "LOCAL_RANK_IDS": "12,13,14,15,16,17,18,19",
                "LOCAL_DEVICE_NUM": "8",
            },
        ),
        (
            table(2, 2, physical_start=4),
            "172.16.0.1",
            {
                "RANK_TABLE_FILE": "/run/ascend-node/ranktable.json",
                "RANK_SIZE": "4",
                "RANK_START": "0",
                "SERVER_INDEX": "0",
                "SERVER_ID": "10.0.0.1",
                "LOCAL_DEVICE_IDS": "4,5",
                "LOCAL_RANK_IDS": "0,1",
                "LOCAL_DEVICE_NUM": "2",
            },
        ),
    ],
)
def test_ranktable_env(tbl: dict[str, Any], ip: str, expected: dict[str, str]) -> None:
    got = ranktable_env_launch(tbl, ip, ["bash", "run.sh"], "/run/ascend-node/ranktable.json")
    assert got == Launch(["bash", "run.sh"], expected)


@pytest.mark.parametrize(
    ("ip", "port", "node_rank"),
    [("172.16.0.1", 29500, "0"), ("172.16.0.2", 6000, "1")],
)
def test_torch(ip: str, port: int, node_rank: str) -> None:
    got = torch_launch(TWO_BY_EIGHT, ip, ["torchrun", "train.py"], port)
    common = {
        "MASTER_ADDR": "172.16.0.1",
        "MASTER_PORT": str(port),
        "NNODES": "2",
        "NODE_RANK": node_rank,
        "NPROC_PER_NODE": "8",
    }
    expected = {**common, "WORLD_SIZE": "16", **{f"PET_{k}": v for k, v in common.items()}}
    assert got == Launch(["torchrun", "train.py"], expected)


def test_torch_refuses_uneven_device_counts() -> None:
    with pytest.raises(ConfigError, match="same number of devices"):
        torch_launch(UNEVEN, "172.16.0.1", ["torchrun", "t.py"])


def test_master_is_the_server_holding_rank_0_even_if_not_listed_first() -> None:
    tbl = table(2, 2)
    tbl["server_list"].reverse()
    node = node_slice(tbl, "172.16.0.2")
    assert node.master_ip == "172.16.0.1"
    assert node.server_index == 0
    assert node.first_rank == 2


@pytest.mark.parametrize(
    ("command", "argv"),
    [
        (None, [DEFAULT_MINDIE_DAEMON]),
        ([], [DEFAULT_MINDIE_DAEMON]),
        (["my", "server"], ["my", "server"]),
    ],
)
def test_mindie(command: list[str] | None, argv: list[str]) -> None:
    env = {"MIES_CONTAINER_IP": "172.16.0.2", "MASTER_IP": "172.16.0.1", "WORLD_SIZE": "16"}
    got = plan_launch(
        "mindie", table=None, container_ip="172.16.0.2", command=command, mindie_env=env
    )
    assert got == Launch(argv, env)


def test_plan_launch_uses_each_launchers_default_port() -> None:
    msrun = plan_launch("msrun", table=TWO_BY_EIGHT, container_ip="172.16.0.1", command=["t.py"])
    assert "--master_port=8118" in msrun.argv
    torch = plan_launch("torch", table=TWO_BY_EIGHT, container_ip="172.16.0.1", command=["t.py"])
    assert torch.env["MASTER_PORT"] == torch.env["PET_MASTER_PORT"] == "29500"


def test_plan_launch_ranktable_env_passes_the_file() -> None:
    got = plan_launch(
        "ranktable-env",
        table=TWO_BY_EIGHT,
        container_ip="172.16.0.1",
        command=["sh", "run.sh"],
        rank_table_file="/r.json",
    )
    assert got.env["RANK_TABLE_FILE"] == "/r.json"


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"launcher": "mpirun"}, UsageError, "unknown launcher 'mpirun'"),
        ({"launcher": "msrun", "command": []}, UsageError, "needs the training command"),
        ({"launcher": "torch", "command": None}, UsageError, "needs the training command"),
        ({"launcher": "msrun", "table": None}, ConfigError, "needs the rank table"),
        ({"launcher": "ranktable-env"}, ConfigError, "rank table file path"),
        ({"launcher": "msrun", "master_port": 80}, ConfigError, "master port 80"),
        (
            {"launcher": "torch", "container_ip": "172.16.0.9"},
            ClusterInconsistent,
            "container_ip 172.16.0.9 is not in the rank table",
        ),
        ({"launcher": "msrun", "table": {"server_list": []}}, ConfigError, "no server_list"),
    ],
)
def test_errors(kwargs: dict[str, Any], error: type[Exception], message: str) -> None:
    args: dict[str, Any] = {
        "table": TWO_BY_EIGHT,
        "container_ip": "172.16.0.1",
        "command": ["t.py"],
    }
    args.update(kwargs)
    launcher = args.pop("launcher")
    with pytest.raises(error, match=message):
        plan_launch(launcher, **args)


def test_duplicate_container_ip_is_inconsistent() -> None:
    tbl = table(1, 1)
    tbl["server_list"][1]["container_ip"] = "172.16.0.1"
    with pytest.raises(ClusterInconsistent, match="appears on 2 servers"):
        node_slice(tbl, "172.16.0.1")


def test_table_without_rank_0_is_inconsistent() -> None:
    tbl = table(2, 2)
    tbl["server_list"][0]["device"][0]["rank_id"] = "00"
    with pytest.raises(ClusterInconsistent, match="rank_id 0"):
        node_slice(tbl, "172.16.0.2")


def test_every_launcher_is_dispatchable() -> None:
    for launcher in LAUNCHERS:
        got = plan_launch(
            launcher,
            table=TWO_BY_EIGHT,
            container_ip="172.16.0.2",
            command=["x"],
            rank_table_file="/r.json",
        )
        assert got.argv[-1] == "x"


POD = "10.231.0.11"
POD_NICS = {"lo": ("127.0.0.1", "::1"), "eth0": (POD,)}
HOST_NICS = {"lo": ("127.0.0.1",), "bond0": ("192.168.5.5",), "eth1": (POD,)}


def facts(resolves: tuple[str, ...], nics: dict[str, tuple[str, ...]] = POD_NICS,
          error: str = "") -> NicFacts:
    return NicFacts("node-1", resolves, error, nics)


@pytest.mark.parametrize(
    ("launcher", "given", "environ", "env", "note"),
    [
        # a pod: the hostname resolves to the pod IP on its only NIC: nothing to set
        ("torch", facts((POD,)), {}, {}, ""),
        ("msrun", facts((POD,)), {}, {}, ""),
        # the hostname resolves to loopback (an image run by hand): gloo and HCCL pinned
        ("torch", facts(("127.0.1.1",)), {},
         {"GLOO_SOCKET_IFNAME": "eth0", "HCCL_IF_IP": POD},
         "hostname node-1 resolves to 127.0.1.1, not the pod IP 10.231.0.11: set "
         "GLOO_SOCKET_IFNAME=eth0, HCCL_IF_IP=10.231.0.11 so the workers use eth0"),
        # msrun's own cluster needs no gloo; HCCL on NPUs does
        ("msrun", facts(("127.0.1.1",)), {}, {"HCCL_IF_IP": POD}, "HCCL_IF_IP=10.231.0.11"),
        # does not resolve at all
        ("torch", facts((), error="[Errno -2] Name or service not known"), {},
         {"GLOO_SOCKET_IFNAME": "eth0", "HCCL_IF_IP": POD},
         "resolves to nothing ([Errno -2] Name or service not known)"),
        # host networking: resolves right, but HCCL would choose among several NICs by name
        ("msrun", facts((POD,), HOST_NICS), {}, {"HCCL_IF_IP": POD},
         "several interfaces (bond0, eth1): set HCCL_IF_IP=10.231.0.11 so the workers use eth1"),
        ("torch", facts((POD,), HOST_NICS), {}, {"HCCL_IF_IP": POD}, "several interfaces"),
        # the user's own choice is never overridden
        ("torch", facts(("127.0.1.1",)), {"GLOO_SOCKET_IFNAME": "net1"},
         {"HCCL_IF_IP": POD}, "HCCL_IF_IP"),
        ("torch", facts(("127.0.1.1",)), {"HCCL_SOCKET_IFNAME": "=eth0"},
         {"GLOO_SOCKET_IFNAME": "eth0"}, "GLOO_SOCKET_IFNAME=eth0"),
        ("torch", facts(("127.0.1.1",)), {"GLOO_SOCKET_IFNAME": "eth0", "HCCL_IF_IP": POD},
         {}, ""),
        # no interface holds the pod IP (NAT, a wrong K8S_POD_IP): nothing to name, a warning
        ("torch", facts(("127.0.1.1",), {"lo": ("127.0.0.1",), "eth0": ("10.9.9.9",)}), {},
         {}, "no interface holds 10.231.0.11: the workers may advertise another address; "
             "set GLOO_SOCKET_IFNAME and HCCL_IF_IP"),
        # launchers that are not pinned
        ("mindie", facts(("127.0.1.1",)), {}, {}, ""),
        ("ranktable-env", facts(("127.0.1.1",)), {}, {}, ""),
    ],
)
def test_nic_plan(launcher: str, given: NicFacts, environ: dict[str, str],
                  env: dict[str, str], note: str) -> None:
    plan = nic_plan(launcher, POD, given, environ)
    assert plan.env == env
    if note:
        assert len(plan.notes) == 1 and note in plan.notes[0], plan.notes
    else:
        assert plan.notes == []


def test_interface_of_picks_the_first_by_name_when_several_hold_the_address() -> None:
    assert interface_of(POD, {"net1": (POD,), "eth0": (POD,)}) == "eth0"
    assert interface_of(POD, {"lo": ("127.0.0.1",)}) == ""
