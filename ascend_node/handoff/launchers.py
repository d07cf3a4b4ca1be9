"""What to exec, and with which extra environment, for each supported launcher (pure).

Every launcher reads the same final rank table (v1.0 shape: `server_list[]` with
`container_ip` and `device[]` of `device_id`/`rank_id`), so all nodes derive the same
world from one document instead of each counting on its own:

- `mindie`  — the MindIE daemon on every node (it finds itself in the table by
  `MIES_CONTAINER_IP`); the environment is what `boot` already computed.
- `msrun`   — MindSpore's launcher, one per node, which spawns the per-card workers
  (as a bare `python`, checked before exec) and waits for the other nodes' as long as
  the agent has left (`msrun_cluster_timeout`).
- `ranktable-env` — MindSpore rank-table mode: the user's script starts one process
  per card itself and needs this node's slice of the table (see `ranktable_env_launch`).
- `torch`   — torchrun / torch_npu_run: standard MASTER_ADDR/NODE_RANK variables, plus
  their `PET_*` twins, which torchrun reads as defaults for its own flags, and
  PET_RDZV_CONF so its wait for the other nodes follows the agent's time left.

Which host NIC gloo and HCCL use is decided in `ascend_node.handoff.hostnic`; the real programs
these were checked against are in docs/launchers.md.

Each function returns `Launch(argv, env, check)`: the argv to exec, the variables to add
to the server's environment (on top of the set_env.sh result), and, for msrun, the
interpreter its workers will run, which `boot` checks before exec.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple, Optional

from ascend_node.errors import ClusterInconsistent, ConfigError, UsageError
from ascend_node.handoff.exec import DEFAULT_MINDIE_DAEMON

LAUNCHERS = ("mindie", "msrun", "ranktable-env", "torch")
DEFAULT_MSRUN_PORT = 8118  # msrun's own default
DEFAULT_TORCH_PORT = 29500  # torchrun's own default
# msrun's --cluster_time_out follows the agent's time left, but never below this: every
# worker must import MindSpore (~3 s, several times that on a loaded node) and register
# within it, or even a complete job fails to build its cluster.
MSRUN_MIN_CLUSTER_TIMEOUT = 30
# What msrun spends around that wait when a node's workers never come: MS_TOPO_TIMEOUT
# counts from each worker's init() (after its ~3 s import), and after it the workers retry
# the scheduler for ~17 s before they exit (seen with MindSpore 2.10 on two nodes).
MSRUN_EXIT_ALLOWANCE = 20
# msrun runs its task script with `python` from PATH unless the command starts with one of
# these (mindspore parallel/cluster/process_entity/_utils.py, _generate_cmd_args_list).
MSRUN_OWN_INTERPRETERS = ("python", "python3", "pytest")


# Variables a launcher plan sets only where the user has not: their own value wins.
USER_WINS = ("PET_RDZV_CONF",)


class InterpreterCheck(NamedTuple):
    """`interpreter` (looked up on the server's PATH) must find `module` before exec."""

    interpreter: str
    module: str
    launcher: str


class Launch(NamedTuple):
    """The argv to exec, the extra environment it needs, and what to check before exec."""

    argv: list[str]
    env: dict[str, str]
    check: Optional[InterpreterCheck] = None


@dataclass(frozen=True)
class NodeSlice:
    """This node's place in the rank table."""

    server_index: int  # position in server_list (= node rank in table order)
    server_count: int
    server_id: str
    total_devices: int  # world size: every device of every server
    local_device_ids: tuple[str, ...]  # as written in the table (physical ids)
    local_rank_ids: tuple[str, ...]  # aligned with local_device_ids
    first_rank: int  # smallest rank_id on this server
    master_ip: str  # container_ip of the server holding rank 0
    uniform: bool  # every server has the same device count


def _servers(table: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    servers = table.get("server_list")
    if not isinstance(servers, list) or not servers:
        raise ConfigError(
            "the rank table has no server_list", "build it with `ascend-node ranktable`"
        )
    return servers


def node_slice(table: Mapping[str, Any], container_ip: str) -> NodeSlice:
    """Find this node (by `container_ip`, as MindIE does) and the world around it."""
    servers = _servers(table)
    matches = [i for i, s in enumerate(servers) if s.get("container_ip") == container_ip]
    if not matches:
        known = ", ".join(str(s.get("container_ip")) for s in servers)
        raise ClusterInconsistent(
            f"container_ip {container_ip} is not in the rank table (servers: {known})",
            "the table belongs to another attempt; run `ascend-node clean` and restart the job",
        )
    if len(matches) > 1:
        raise ClusterInconsistent(
            f"container_ip {container_ip} appears on {len(matches)} servers of the rank table",
            "every server needs its own pod IP; check the pods' networking",
        )
    index = matches[0]
    master_ip: Optional[str] = None
    counts: list[int] = []
    for server in servers:
        devices = server.get("device") or []
        counts.append(len(devices))
        if any(str(d.get("rank_id")) == "0" for d in devices):
            master_ip = str(server.get("container_ip") or "")
    if not master_ip:
        raise ClusterInconsistent(
            "no server of the rank table holds rank_id 0", "rebuild the rank table"
        )
    mine = servers[index]
    devices = list(mine.get("device") or [])
    if not devices:
        raise ClusterInconsistent(
            f"server {container_ip} has no devices in the rank table", "check the NPU allocation"
        )
    ranks = [str(d.get("rank_id")) for d in devices]
    try:
        first_rank = min(int(r) for r in ranks)
    except ValueError:
        raise ClusterInconsistent(
            f"server {container_ip} has a non-numeric rank_id in {ranks}", "rebuild the rank table"
        ) from None
    return NodeSlice(
        server_index=index,
        server_count=len(servers),
        server_id=str(mine.get("server_id", "")),
        total_devices=sum(counts),
        local_device_ids=tuple(str(d.get("device_id")) for d in devices),
        local_rank_ids=tuple(ranks),
        first_rank=first_rank,
        master_ip=master_ip,
        uniform=len(set(counts)) == 1,
    )


def _need_command(launcher: str, command: Optional[Sequence[str]], example: str) -> list[str]:
    if not command:
        raise UsageError(
            f"launcher {launcher} needs the training command after `--`",
            f"e.g. ascend-node boot --launcher {launcher} -- {example}",
        )
    return [str(a) for a in command]


def _check_port(port: int) -> int:
    if not 1024 <= port <= 65535:
        raise ConfigError(f"master port {port} is outside 1024-65535", "choose a free TCP port")
    return port


def mindie_launch(mindie_env: Mapping[str, str], command: Optional[Sequence[str]] = None) -> Launch:
    """The MindIE daemon (or `command`) with the env `boot` computed.

    `mindie_env` is RANK_TABLE_FILE, RANKTABLEFILE, MIES_CONTAINER_IP, MASTER_IP,
    WORLD_SIZE (without the two rank-table names on one node); taken as given.
    """
    argv = [str(a) for a in command] if command else [DEFAULT_MINDIE_DAEMON]
    return Launch(argv, {str(k): str(v) for k, v in mindie_env.items()})


def msrun_cluster_timeout(seconds_left: float) -> int:
    """msrun's `--cluster_time_out` for an agent with `seconds_left` of its `--timeout`.

    msrun waits that long (as MS_TOPO_TIMEOUT) for every node's workers to register, 600 s
    by default, whatever the agent's own timeout: a node that passed the rendezvous but
    whose msrun never starts kept the others waiting ten minutes. The time the agent has
    left, less MSRUN_EXIT_ALLOWANCE for msrun's own start and exit, ends them at about the
    agent's deadline; at least MSRUN_MIN_CLUSTER_TIMEOUT seconds, so the workers of a
    healthy job can register even when the rendezvous took nearly all of it.
    """
    whole = int(seconds_left) + (0 if seconds_left == int(seconds_left) else 1)
    return max(MSRUN_MIN_CLUSTER_TIMEOUT, whole - MSRUN_EXIT_ALLOWANCE)


def torch_rdzv_timeout(seconds_left: float) -> int:
    """torchrun's static-rendezvous timeout (`--rdzv_conf timeout=`, 600 s by default,
    torch/distributed/elastic/rendezvous/static_tcp_rendezvous.py), by the same rule as
    msrun's cluster wait: the agent's time left, less the launcher's start and exit."""
    return msrun_cluster_timeout(seconds_left)


def msrun_interpreter(command: Sequence[str]) -> Optional[str]:
    """The interpreter msrun starts the task with: the command's own `python`/`python3`,
    else a bare `python` from PATH; None for `pytest` (a script, not checked)."""
    first = str(command[0]) if command else ""
    if first == "pytest":
        return None
    return first if first in MSRUN_OWN_INTERPRETERS else "python"


# msrun options the agent computes from the table and its time left: a user's copy would
# contradict the world every node derives from the same table.
MSRUN_AGENT_OPTIONS = ("worker_num", "local_worker_num", "master_addr", "master_port",
                       "node_rank", "cluster_time_out", "join")


def check_msrun_args(args: Sequence[str]) -> list[str]:
    """msrun's own options passed through the agent (`--log_dir=…`, `--bind_core=True`, …):
    `--name=value` words, none of the agent's (UsageError naming the first bad one)."""
    out = []
    for arg in args:
        name = arg[2:].partition("=")[0] if arg.startswith("--") else ""
        if not name or "=" not in arg:
            raise UsageError(f"launcher argument {arg!r} is not --name=value",
                             "e.g. --launcher-args='--log_dir=/mnt/model/msrun_log "
                             "--bind_core=True'")
        if name in MSRUN_AGENT_OPTIONS:
            raise UsageError(f"launcher argument {arg!r}: the agent sets msrun's --{name} "
                             "from the rank table", "leave it out (docs/launchers.md)")
        out.append(arg)
    return out


def msrun_launch(
    table: Mapping[str, Any],
    container_ip: str,
    command: Optional[Sequence[str]],
    master_port: int = DEFAULT_MSRUN_PORT,
    cluster_time_out: Optional[int] = None,
    extra: Sequence[str] = (),
) -> Launch:
    """`msrun --worker_num=… --local_worker_num=… --master_addr=… --master_port=…
    [--node_rank=…] [--cluster_time_out=…] --join=True SCRIPT ARGS…`.

    `--node_rank` is the server's table position, which makes msrun give each worker
    the rank the table gives its card; it is left out when device counts differ
    (MindSpore's docs: with uneven workers per node let msrun assign ranks).
    `--join=True` because msrun otherwise returns at once after spawning the workers,
    and after exec its exit would end the container. The command is msrun's
    `task_script` and its arguments, e.g. `train.py --config x.yaml`. `cluster_time_out`
    comes from `msrun_cluster_timeout`. The check names the interpreter msrun will start
    (`msrun_interpreter`), which must find MindSpore.
    """
    user = _need_command("msrun", command, "train.py --config cfg.yaml")
    node = node_slice(table, container_ip)
    argv = [
        "msrun",
        f"--worker_num={node.total_devices}",
        f"--local_worker_num={len(node.local_device_ids)}",
        f"--master_addr={node.master_ip}",
        f"--master_port={_check_port(master_port)}",
    ]
    if node.uniform:
        argv.append(f"--node_rank={node.server_index}")
    if cluster_time_out is not None:
        argv.append(f"--cluster_time_out={cluster_time_out}")
    argv += check_msrun_args(extra)
    argv.append("--join=True")
    interpreter = msrun_interpreter(user)
    check = InterpreterCheck(interpreter, "mindspore", "msrun") if interpreter else None
    return Launch(argv + user, {}, check)


def ranktable_env_launch(
    table: Mapping[str, Any],
    container_ip: str,
    command: Optional[Sequence[str]],
    rank_table_file: str,
) -> Launch:
    """The user's per-node script, with what MindSpore rank-table mode needs per card.

    That mode runs one process per card, each with RANK_TABLE_FILE, RANK_SIZE,
    RANK_ID and DEVICE_ID; the script loops over this node's cards. Exported:

    - RANK_TABLE_FILE: the local table; RANK_SIZE: total devices;
    - RANK_START: smallest rank_id on this server (card k gets RANK_START + k when
      the table is sorted, as ours is);
    - SERVER_INDEX: position in server_list; SERVER_ID: its server_id;
    - LOCAL_DEVICE_IDS / LOCAL_RANK_IDS: comma lists of this server's device_id
      (physical, = DEVICE_ID) and rank_id, aligned; LOCAL_DEVICE_NUM: their count.
    """
    user = _need_command("ranktable-env", command, "bash run_distribute.sh")
    if not rank_table_file:
        raise ConfigError(
            "launcher ranktable-env needs the rank table file path", "pass RANK_TABLE_FILE"
        )
    node = node_slice(table, container_ip)
    env = {
        "RANK_TABLE_FILE": rank_table_file,
        "RANK_SIZE": str(node.total_devices),
        "RANK_START": str(node.first_rank),
        "SERVER_INDEX": str(node.server_index),
        "SERVER_ID": node.server_id,
        "LOCAL_DEVICE_IDS": ",".join(node.local_device_ids),
        "LOCAL_RANK_IDS": ",".join(node.local_rank_ids),
        "LOCAL_DEVICE_NUM": str(len(node.local_device_ids)),
    }
    return Launch(user, env)


def torch_launch(
    table: Mapping[str, Any],
    container_ip: str,
    command: Optional[Sequence[str]],
    master_port: int = DEFAULT_TORCH_PORT,
    rdzv_timeout: Optional[int] = None,
) -> Launch:
    """The user's command (typically `torchrun train.py`) with the torch rendezvous env.

    MASTER_ADDR, MASTER_PORT, WORLD_SIZE (total NPUs), NODE_RANK, NNODES,
    NPROC_PER_NODE, and PET_NNODES/PET_NPROC_PER_NODE/PET_NODE_RANK/PET_MASTER_ADDR/
    PET_MASTER_PORT, which torchrun takes as the defaults of its flags — so a bare
    `torchrun train.py` joins the right world. torchrun needs the same process count
    on every node, hence uneven device counts are refused. `rdzv_timeout` becomes
    PET_RDZV_CONF=timeout=N (torchrun's wait for the other nodes; `boot` keeps a
    PET_RDZV_CONF the user set, see USER_WINS).
    """
    user = _need_command("torch", command, "torchrun train.py")
    node = node_slice(table, container_ip)
    if not node.uniform:
        raise ConfigError(
            "launcher torch needs the same number of devices on every node",
            "give every pod the same NPU count, or use --launcher msrun",
        )
    nproc = len(node.local_device_ids)
    values = {
        "MASTER_ADDR": node.master_ip,
        "MASTER_PORT": str(_check_port(master_port)),
        "NNODES": str(node.server_count),
        "NODE_RANK": str(node.server_index),
        "NPROC_PER_NODE": str(nproc),
    }
    env = dict(values)
    env["WORLD_SIZE"] = str(node.total_devices)
    env.update({f"PET_{k}": v for k, v in values.items()})
    if rdzv_timeout is not None:
        env["PET_RDZV_CONF"] = f"timeout={rdzv_timeout}"
    return Launch(user, env)


def plan_launch(
    launcher: str,
    *,
    table: Optional[Mapping[str, Any]],
    container_ip: str,
    command: Optional[Sequence[str]],
    rank_table_file: str = "",
    mindie_env: Optional[Mapping[str, str]] = None,
    master_port: Optional[int] = None,
    seconds_left: Optional[float] = None,
    launcher_args: Sequence[str] = (),
) -> Launch:
    """Dispatch on the launcher name (one of LAUNCHERS); `table` may be None for mindie.
    `seconds_left` is what remains of the agent's `--timeout` (msrun's cluster timeout)."""
    if launcher_args and launcher != "msrun":
        raise UsageError(f"launcher arguments are msrun's; launcher {launcher} takes its "
                         "options in the command", "give them after --")
    if launcher == "mindie":
        return mindie_launch(mindie_env or {}, command)
    if launcher not in LAUNCHERS:
        raise UsageError(f"unknown launcher {launcher!r}", f"use one of: {', '.join(LAUNCHERS)}")
    if table is None:
        raise ConfigError(f"launcher {launcher} needs the rank table", "run the ranktable step")
    if launcher == "msrun":
        timeout = None if seconds_left is None else msrun_cluster_timeout(seconds_left)
        return msrun_launch(table, container_ip, command, master_port or DEFAULT_MSRUN_PORT,
                            timeout, launcher_args)
    if launcher == "torch":
        wait = None if seconds_left is None else torch_rdzv_timeout(seconds_left)
        return torch_launch(table, container_ip, command, master_port or DEFAULT_TORCH_PORT,
                            wait)
    return ranktable_env_launch(table, container_ip, command, rank_table_file)
