"""Fake MindIE-Motor coordinator and controller: real processes, as the real ones behave.

`simulate --pd`, the PD service tests and the container bed run these where a real service
runs `mindie_motor_coordinator` and `mindie_motor_controller` (MindIE-Motor's commands, which
need a MindIE image; the controller's is a Python shim that execs its `bin/ms_controller`,
python/mindie_motor/controller/controller_run.py). What they do is what a test can observe
of the real ones (facts with file:line in docs/pd.md and the facts file it cites;
MindIE-Motor @5dfb024e, mindie_motor/src/):

coordinator — `fake_motor coordinator [PREDICT_IP [MANAGE_IP]]`: reads its
`ms_coordinator.json` (`MINDIE_MS_COORDINATOR_CONFIG_FILE_PATH`) for `http_config`'s ports;
argv[1] and argv[2] replace `predict_ip` and `manage_ip` (coordinator/main.cpp 22-45); refuses
a `digs_scheduler_config.deploy_mode` it does not know; listens (plain http) on both; answers
`GET /v2/health/ready` (200) and `GET /v1/coordinator_info` (what it was told), and records
every `POST /v1/instances/refresh` (the controller's; the coordinator never reads the table).

controller — `fake_motor controller`: refuses to start without
`MINDIE_MS_CONTROLLER_CONFIG_FILE_PATH`, or with ClusterD's `MINDX_TASK_ID` and
`MINDX_SERVER_IP` both set (the real one would then ask ClusterD: Controller.cpp 164-170).
Every `rank_table_detecting_seconds` (ASCEND_NODE_SIM_MOTOR_PERIOD overrides, for tests) it
re-reads the global rank table at `GLOBAL_RANK_TABLE_FILE_PATH` (the env wins over the
config's `global_rank_table_file_path`: ControllerConfig.cpp 1204-1213), applies the path
check (Util.cpp 170-280: length, `..`, characters, not a symlink, mode <= 0640 and its own
uid unless `MINDIE_CHECK_INPUTFILES_PERMISSION=0`) and the loader's rules
(`pd.motor_rules`). A table that fails is logged and ignored, the last good one kept, as the
real loader skips the cycle. From an accepted table it computes the nodes keyed by
`server_ip + mgmt_port` (RankTableLoader.cpp 43-64, 177-277), logs each change as
`scale-in` / `scale-out` lines (NodeStatus.cpp 643-692), and tells every coordinator of
group "0" through `POST /v1/instances/refresh` on `mindie_ms_coordinator_port`.

Both append what they saw to ASCEND_NODE_SIM_MOTOR_STATE (JSONL), when set: the
controller one line per accepted change or refused table (its groups, P, D and undecided
instance counts, nodes, scale-in and scale-out), the coordinator one per refresh. Not faked: TLS
(every `*_tls_enable` is ignored, plain http), the servers' role assignment (`/v1/role/*`),
the alarm ports. Standard library plus `ascend_node.pd` (pure); runs under the image's
python3.
"""

from __future__ import annotations

import json
import os
import stat
import sys
import threading
import time
import urllib.request
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Callable, Optional

from ascend_node.pd.handover import coordinator_problems
from ascend_node.pd.motor_rules import (
    InstanceFlags,
    check_global_table,
    check_table_path,
    flags_from_controller_config,
    role_of,
)

PERIOD_ENV = "ASCEND_NODE_SIM_MOTOR_PERIOD"
ADDRESSES_ENV = "ASCEND_NODE_SIM_MOTOR_ADDRESSES"
STATE_ENV = "ASCEND_NODE_SIM_MOTOR_STATE"
CONTROLLER_CONFIG_ENV = "MINDIE_MS_CONTROLLER_CONFIG_FILE_PATH"
COORDINATOR_CONFIG_ENV = "MINDIE_MS_COORDINATOR_CONFIG_FILE_PATH"
TABLE_ENV = "GLOBAL_RANK_TABLE_FILE_PATH"
TABLE_KEY = "global_rank_table_file_path"
CHECK_PERMISSION_ENV = "MINDIE_CHECK_INPUTFILES_PERMISSION"
CLUSTERD_ENV = ("MINDX_TASK_ID", "MINDX_SERVER_IP")
REFRESH = "/v1/instances/refresh"
DEFAULT_PERIOD = 5.0  # rank_table_detecting_seconds' default
DEFAULT_CONTROL_PORT = 1026  # mindie_server_control_port
DEFAULT_COORDINATOR_PORT = 1026  # mindie_ms_coordinator_port
DEFAULT_DIST_PORT = 10000  # initial_dist_server_port


class Refused(Exception):
    """Why a fake will not start: one line, exit 1 (as the real binaries log and exit)."""


@dataclass(frozen=True)
class MotorNode:
    """One node as the controller keys it: an instance (centralized) or a DP chunk."""

    id: str  # server_ip:mgmt_port
    group: str
    role: Optional[str]  # prefill / decode, None when the controller's role manager decides
    server_ip: str
    mgmt_port: int
    devices: int
    servers: int = 1  # the servers it spans: a centralized instance's, its node_machine_num


# --- pure ----------------------------------------------------------------------------------

def table_path_of(environ: Mapping[str, str], config: Mapping[str, Any]) -> Optional[str]:
    """Where the controller reads the table: the env wins over the config key."""
    value = environ.get(TABLE_ENV, "").strip()
    if value:
        return value
    key = config.get(TABLE_KEY)
    return key if isinstance(key, str) and key else None


def address_map(environ: Mapping[str, str]) -> dict[str, str]:
    """`simulate --pd`'s pods share one network namespace and their pod IPs are addresses
    nothing routes (the agent refuses a loopback pod IP): ASCEND_NODE_SIM_MOTOR_ADDRESSES
    (`POD_IP=LOOPBACK,...`) says where the fakes really listen and connect. Unset (a
    container, a guest of the NFS bed), every address is itself."""
    out = {}
    for part in environ.get(ADDRESSES_ENV, "").split(","):
        pod, sep, real = part.strip().partition("=")
        if sep and pod and real:
            out[pod] = real
    return out


def controller_refusal(environ: Mapping[str, str]) -> Optional[str]:
    """Why the fake controller will not start in this environment, or None."""
    if not environ.get(CONTROLLER_CONFIG_ENV, "").strip():
        return f"{CONTROLLER_CONFIG_ENV} is not set: the controller has no configuration"
    if all(environ.get(name) for name in CLUSTERD_ENV):
        return ("MINDX_TASK_ID and MINDX_SERVER_IP are set: the controller would ask "
                "ClusterD for the table (this fake speaks no ClusterD); unset them")
    return None


def period_of(environ: Mapping[str, str], config: Mapping[str, Any]) -> float:
    """Seconds between two reads: the override, else rank_table_detecting_seconds."""
    raw = environ.get(PERIOD_ENV, "").strip()
    value = float(raw or config.get("rank_table_detecting_seconds", DEFAULT_PERIOD))
    if not value > 0:
        raise Refused(f"a table-reading period of {value:g} s is not positive")
    return value


def file_problem(path: str, info: Optional[os.stat_result], uid: int,
                 relaxed: bool) -> Optional[str]:
    """The controller's path and file check (Util.cpp 170-280); `info` is the path's lstat,
    None when it does not exist."""
    why = check_table_path(path)
    if why is not None:
        return why
    if info is None:
        return "the file does not exist"
    if stat.S_ISLNK(info.st_mode):
        return "the file is a symlink"
    if not stat.S_ISREG(info.st_mode):
        return "not a regular file"
    mode = info.st_mode & 0o777
    limit = 0o777 if relaxed else 0o640
    if mode & ~limit:
        return f"mode {mode:04o} is above {limit:04o}"
    if not relaxed and info.st_uid != uid:
        return f"owned by uid {info.st_uid}, not the controller's {uid}"
    return None


def _chunk(config: Mapping[str, Any], role: Optional[str]) -> int:
    multi = config.get("multi_node_infer_config", {})
    node = multi.get("p_node_config" if role == "prefill" else "d_node_config", {})
    size = int(node.get("tp_size", 1)) * int(node.get("cp_size", 1))
    return max(size, 1)


def _port(server: Mapping[str, Any], default: int) -> int:
    value = server.get("mgmt_port")
    return int(value) if isinstance(value, str) else default


def _machine_role(servers: int, config: Mapping[str, Any]) -> Optional[str]:
    """Both centralized: the role by node_machine_num when P's and D's differ
    (NodeScheduler.cpp 282-320, UNCONFIRMED); else the role manager's (None here)."""
    multi = config.get("multi_node_infer_config", {})
    p = multi.get("p_node_config", {}).get("node_machine_num")
    d = multi.get("d_node_config", {}).get("node_machine_num")
    if p == d:
        return None
    return "prefill" if servers == p else "decode" if servers == d else None


def nodes_of(table: Mapping[str, Any], config: Mapping[str, Any],
             flags: InstanceFlags) -> dict[str, MotorNode]:
    """The nodes an accepted table gives the controller, by id (`server_ip:mgmt_port`).

    Multi-node mode: each group >= 2 is an instance; centralized, one node at the server
    holding the smallest rank_id; distributed, one node per `tp*cp` devices of each server,
    its management port `initial_dist_server_port + 4k + 1`. Single-node mode: each server
    of group "2" is a node."""
    control = int(config.get("mindie_server_control_port", DEFAULT_CONTROL_PORT))
    base = int(config.get("initial_dist_server_port", DEFAULT_DIST_PORT))
    out: dict[str, MotorNode] = {}

    def add(node: MotorNode) -> None:
        out[node.id] = node

    for group in table["server_group_list"]:
        gid = str(group["group_id"])
        servers = group.get("server_list", [])
        if not flags.multi_node:
            if gid == "2":
                for server in servers:
                    port = _port(server, control)
                    add(MotorNode(f"{server['server_ip']}:{port}", gid, None,
                                  server["server_ip"], port, len(server.get("device", []))))
            continue
        if int(gid) < 2 or not servers:
            continue
        deploy = group.get("deploy_server")
        role, distributed = role_of(deploy, flags) if deploy is not None else (None, False)
        if role is None and not distributed:
            role = _machine_role(len(servers), config)
        if not distributed:
            master = min(servers, key=lambda s: min(int(d["rank_id"]) for d in s["device"]))
            port = _port(master, control)
            add(MotorNode(f"{master['server_ip']}:{port}", gid, role, master["server_ip"],
                          port, sum(len(s["device"]) for s in servers), len(servers)))
            continue
        size = _chunk(config, role)
        for server in servers:
            for k in range(len(server["device"]) // size):
                port = base + 4 * k + 1
                add(MotorNode(f"{server['server_ip']}:{port}", gid, role,
                              server["server_ip"], port, size))
    return out


def instance_counts(nodes: Mapping[str, MotorNode]) -> dict[str, int]:
    """P, D and undecided instances (groups) among the nodes: undecided, an instance whose
    role neither its `deploy_server` nor `node_machine_num` gives (the real controller's
    role manager would pick it; this fake does not)."""
    groups: dict[str, set[str]] = {"prefill": set(), "decode": set(), "undecided": set()}
    for node in nodes.values():
        groups[node.role or "undecided"].add(node.group)
    return {role: len(found) for role, found in groups.items()}


def changes(before: Mapping[str, MotorNode], after: Mapping[str, MotorNode]
            ) -> tuple[list[str], list[str]]:
    """(scale-in, scale-out): ids gone, ids new; a node whose devices changed is both."""
    gone = sorted(i for i in before if i not in after or before[i] != after[i])
    new = sorted(i for i in after if i not in before or before[i] != after[i])
    return gone, new


def coordinators_of(table: Mapping[str, Any]) -> list[str]:
    """The coordinators' addresses: group "0"'s `server_ip`s."""
    for group in table["server_group_list"]:
        if str(group.get("group_id")) == "0":
            return [s["server_ip"] for s in group.get("server_list", [])]
    return []


def refresh_body(nodes: Mapping[str, MotorNode]) -> dict[str, Any]:
    """What the fake controller posts to the coordinators (the fake's own shape: the real
    message's fields are not in the facts file)."""
    return {"instances": [asdict(node) for node in sorted(nodes.values(), key=lambda n: n.id)]}


def listen_addresses(argv: Sequence[str], config: Mapping[str, Any]
                     ) -> list[tuple[str, int]]:
    """The coordinator's (ip, port) pairs: predict then management; argv[1]/argv[2]
    replace the config's IPs (coordinator/main.cpp 22-45)."""
    http = config.get("http_config")
    if not isinstance(http, Mapping):
        raise Refused("ms_coordinator.json has no http_config object")
    try:
        predict = (argv[1] if len(argv) > 1 else str(http["predict_ip"]),
                   int(http["predict_port"]))
        manage = (argv[2] if len(argv) > 2 else str(http["manage_ip"]),
                  int(http["manage_port"]))
    except (KeyError, ValueError) as exc:
        raise Refused(f"ms_coordinator.json http_config: {exc}") from exc
    return [predict] if predict == manage else [predict, manage]


# --- the processes -------------------------------------------------------------------------

def _say(who: str, message: str) -> None:
    print(f"fake {who}: {message}", flush=True)


def _record(environ: Mapping[str, str], line: Mapping[str, Any]) -> None:
    path = environ.get(STATE_ENV, "").strip()
    if path:
        with open(path, "a", encoding="utf-8") as out:
            out.write(json.dumps({"time": round(time.time(), 3), **line}) + "\n")


def _read_config(environ: Mapping[str, str], name: str) -> Mapping[str, Any]:
    path = environ.get(name, "").strip()
    if not path:
        raise Refused(f"{name} is not set")
    try:
        config = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise Refused(f"cannot read {path}: {exc}") from exc
    if not isinstance(config, dict):
        raise Refused(f"{path} is not a JSON object")
    return config


def run_coordinator(argv: Sequence[str], environ: Mapping[str, str]) -> int:
    config = _read_config(environ, COORDINATOR_CONFIG_ENV)
    problems = coordinator_problems(config)
    if problems:
        raise Refused(str(problems[0]))
    addresses = listen_addresses(argv, config)
    real = address_map(environ)
    told: dict[str, Any] = {"instances": [], "refreshes": 0}
    lock = threading.Lock()

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_GET(self) -> None:
            if self.path == "/v2/health/ready":
                self._send(200, {"message": "ready"})
            elif self.path == "/v1/coordinator_info":
                with lock:
                    self._send(200, dict(told))
            else:
                self._send(404, {"message": f"{self.path}: not served by the fake"})

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length)
            if self.path != REFRESH:
                self._send(404, {"message": f"{self.path}: not served by the fake"})
                return
            try:
                doc = json.loads(body)
                instances = doc["instances"]
            except (ValueError, KeyError, TypeError):
                self._send(400, {"message": "not a refresh"})
                return
            with lock:
                told["instances"] = instances
                told["refreshes"] += 1
            _say("coordinator", f"refresh from {self.client_address[0]}: "
                 f"{len(instances)} instance node(s)")
            _record(environ, {"event": "refresh", "from": self.client_address[0],
                              "instances": instances})
            self._send(200, {"message": "ok"})

        def _send(self, code: int, body: Mapping[str, Any]) -> None:
            data = json.dumps(body).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    servers = []
    for host, port in addresses:
        try:
            httpd = ThreadingHTTPServer((real.get(host, host), port), Handler)
        except OSError as exc:
            raise Refused(f"cannot listen on {host}:{port}: {exc.strerror}") from exc
        httpd.daemon_threads = True
        servers.append(httpd)
    for httpd in servers:
        threading.Thread(target=httpd.serve_forever, daemon=True).start()
    _say("coordinator", "listening on " + ", ".join(f"{h}:{p}" for h, p in addresses))
    _record(environ, {"event": "listening", "addresses": [f"{h}:{p}" for h, p in addresses]})
    while True:
        time.sleep(3600)


def post_refresh(address: str, port: int, body: Mapping[str, Any], timeout: float = 2.0
                 ) -> Optional[str]:
    """POST the refresh; None on 200, else why not."""
    host = f"[{address}]" if ":" in address else address
    request = urllib.request.Request(f"http://{host}:{port}{REFRESH}",
                                     data=json.dumps(body).encode(), method="POST",
                                     headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as answer:
            return None if answer.status == 200 else f"HTTP {answer.status}"
    except OSError as exc:
        return str(exc)


class Controller:
    """One table read at a time (`look`), the last accepted nodes kept between reads."""

    def __init__(self, environ: Mapping[str, str], config: Mapping[str, Any],
                 post: Callable[[str, int, Mapping[str, Any]], Optional[str]] = post_refresh
                 ) -> None:
        self.environ = environ
        self.config = config
        self.flags = flags_from_controller_config(config)
        self.path = table_path_of(environ, config)
        self.relaxed = environ.get(CHECK_PERMISSION_ENV, "").strip() == "0"
        self.port = int(config.get("mindie_ms_coordinator_port", DEFAULT_COORDINATOR_PORT))
        self.post = post
        self.real = address_map(environ)
        self.nodes: Optional[dict[str, MotorNode]] = None
        self.told: dict[str, bool] = {}  # coordinator -> told of the current nodes
        self.last_problem: Optional[str] = None

    def look(self) -> None:
        table, problem = self._read()
        if table is None:
            if problem != self.last_problem:
                _say("controller", f"rank table ignored: {problem}")
                _record(self.environ, {"event": "ignored", "problem": problem})
            self.last_problem = problem
            return
        self.last_problem = None
        nodes = nodes_of(table, self.config, self.flags)
        before = self.nodes or {}
        gone, new = changes(before, nodes)
        coordinators = coordinators_of(table)
        if self.nodes is None or gone or new:
            for node_id in gone:
                _say("controller", f"scale-in: node {node_id} (group "
                     f"{before[node_id].group}) removed")
            for node_id in new:
                _say("controller", f"scale-out: node {node_id} (group {nodes[node_id].group}, "
                     f"{nodes[node_id].role or 'role undecided'}) added")
            counts = instance_counts(nodes)
            _record(self.environ, {
                "event": "accepted", "path": self.path,
                "groups": [str(g["group_id"]) for g in table["server_group_list"]],
                "prefill": counts["prefill"], "decode": counts["decode"],
                "undecided": counts["undecided"],
                "nodes": sorted(nodes), "scale_in": gone, "scale_out": new,
                "coordinators": coordinators})
            self.told = {}
        self.nodes = nodes
        for address in coordinators:
            if self.told.get(address):
                continue
            why = self.post(self.real.get(address, address), self.port, refresh_body(nodes))
            self.told[address] = why is None
            if why is not None:
                _say("controller", f"refresh of coordinator {address}:{self.port} failed: "
                     f"{why}")

    def _read(self) -> tuple[Optional[Mapping[str, Any]], Optional[str]]:
        if self.path is None:
            return None, f"no table path: {TABLE_ENV} and {TABLE_KEY} are unset"
        try:
            info: Optional[os.stat_result] = os.lstat(self.path)
        except FileNotFoundError:
            info = None
        except OSError as exc:
            return None, f"{self.path}: {exc.strerror}"
        why = file_problem(self.path, info, os.getuid(), self.relaxed)
        if why is not None:
            return None, f"{self.path}: {why}"
        try:
            fd = os.open(self.path, os.O_RDONLY | os.O_NOFOLLOW)
            with os.fdopen(fd, "rb") as handle:
                doc = json.loads(handle.read())
        except (OSError, ValueError) as exc:
            return None, f"{self.path}: cannot load: {exc}"
        problems = check_global_table(doc, self.flags)
        if problems:
            more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
            return None, f"{self.path}: {problems[0].path}: {problems[0].message}{more}"
        return doc, None


def run_controller(environ: Mapping[str, str]) -> int:
    why = controller_refusal(environ)
    if why is not None:
        raise Refused(why)
    config = _read_config(environ, CONTROLLER_CONFIG_ENV)
    try:
        controller = Controller(environ, config)
    except ValueError as exc:
        raise Refused(f"ms_controller.json: {exc}") from exc
    try:
        period = period_of(environ, config)
    except ValueError as exc:
        raise Refused(f"{PERIOD_ENV}: {exc}") from exc
    _say("controller", f"reading {controller.path} every {period:g} s")
    while True:
        controller.look()
        time.sleep(period)


COMMANDS = ("coordinator", "controller")


def main(argv: Sequence[str]) -> int:
    """`fake_motor coordinator [IP [IP]]` / `fake_motor controller`."""
    if len(argv) < 2 or argv[1] not in COMMANDS:
        print("usage: python -m ascend_node.sim.fake_motor coordinator|controller [args]",
              file=sys.stderr)
        return 2
    environ = dict(os.environ)
    try:
        if argv[1] == "coordinator":
            return run_coordinator(argv[1:], environ)
        return run_controller(environ)
    except Refused as exc:
        print(f"fake {argv[1]}: {exc}", file=sys.stderr)
        return 1


FAKE_SCRIPT = """#!/bin/sh
# Fake MindIE-Motor {role} (ascend-node simulation): ascend_node/sim/fake_motor.py
exec "${{ASCEND_NODE_SIM_PYTHON:-python3}}" -m ascend_node.sim.fake_motor {role} "$@"
"""
SCRIPT_NAMES = {"coordinator": "mindie_motor_coordinator",
                "controller": "mindie_motor_controller"}
"""The commands a PD service's pods exec, as `manifest --kind mindie-pd` renders them
(`manifest_pd.COORDINATOR_DAEMON`, `CONTROLLER_DAEMON`): the fakes answer to the same names,
so a simulation runs what a rendered pod runs (tests/test_fake_motor.py holds them equal)."""


def install_motor_fakes(bin_dir: Path) -> dict[str, Path]:
    """`mindie_motor_coordinator` and `mindie_motor_controller` scripts in `bin_dir`, by
    role; each execs this module (same pid) under ASCEND_NODE_SIM_PYTHON, else python3."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    out = {}
    for role, name in SCRIPT_NAMES.items():
        path = bin_dir / name
        path.write_text(FAKE_SCRIPT.format(role=role))
        path.chmod(0o755)
        out[role] = path
    return out


if __name__ == "__main__":
    sys.exit(main(sys.argv))
