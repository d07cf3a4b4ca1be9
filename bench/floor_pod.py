"""The floor: the least a correct pod can do for the same exchange (standard library only).

Same inputs as the agent (Volcano's environment, the same fake `hccn_tool`, the same
shared directory), same exchange: discover every device's IP concurrently, publish one
file atomically, node 0 waits for all N and writes the table, everyone waits for the table
and keeps a copy. Same poll interval (0.2 s) and the same NFS rule (open the directory
before looking for a file in it), so on NFS the floor is fair too. No validation, no
restarts, no twin detection, no verdicts, no progress: that is what makes it a floor.

    python bench/floor_pod.py        (environment as for `ascend-node ranktable`)
"""

import contextlib
import json
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

POLL = 0.2


def write_atomic(path: str, data: bytes) -> None:
    tmp = f"{path}.tmp.{os.getpid()}"
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.rename(tmp, path)


def look(directory: str) -> None:
    with contextlib.suppress(OSError):
        os.close(os.open(directory, os.O_RDONLY | os.O_DIRECTORY))


def device_ip(tool: str, dev: int) -> str:
    out = subprocess.run([tool, "-i", str(dev), "-ip", "-g"], capture_output=True, text=True,
                         timeout=10, check=True).stdout
    return next(line.split(":", 1)[1].strip() for line in out.splitlines()
                if line.startswith("ipaddr:"))


def main() -> int:
    env = os.environ
    masters, workers = int(env["VC_MASTER_NUM"]), int(env["VC_WORKER_NUM"])
    task = int(env["VC_TASK_INDEX"])
    index = task if env["ROLE"].lower() == "master" else masters + task
    nodes = masters + workers
    devices = [int(d) for d in env["ASCEND_VISIBLE_DEVICES"].split(",")]
    tool = env["ASCEND_NODE_HCCN_TOOL"]
    with ThreadPoolExecutor(len(devices)) as pool:
        ips = list(pool.map(lambda d: device_ip(tool, d), devices))
    shared, run = env["ASCEND_NODE_SHARED_DIR"], env["ASCEND_NODE_RUN_ID"]
    room = os.path.join(shared, f"floor-{run}")
    os.makedirs(room, exist_ok=True)
    me = {"index": index, "pod_ip": env["K8S_POD_IP"], "host_ip": env.get("K8S_HOST_IP", ""),
          "devices": [[d, ip] for d, ip in zip(devices, ips)]}
    write_atomic(os.path.join(room, f"node-{index}.json"), json.dumps(me).encode())
    table_path = os.path.join(room, "table.json")
    if index == 0:
        members: dict[int, dict] = {}
        while len(members) < nodes:
            look(room)
            for i in range(nodes):
                if i not in members:
                    try:
                        with open(os.path.join(room, f"node-{i}.json"), "rb") as f:
                            members[i] = json.loads(f.read())
                    except (OSError, ValueError):
                        pass
            if len(members) < nodes:
                time.sleep(POLL)
        rank, servers = 0, []
        for i in range(nodes):
            m = members[i]
            devs = []
            for d, ip in m["devices"]:
                devs.append({"device_id": str(d), "device_ip": ip, "rank_id": str(rank)})
                rank += 1
            servers.append({"server_id": m["host_ip"], "container_ip": m["pod_ip"],
                            "device": devs})
        table = {"version": "1.0", "server_count": str(nodes), "status": "completed",
                 "server_list": servers}
        text = json.dumps(table, indent=2).encode()
        write_atomic(table_path, text)
    else:
        while True:
            look(room)
            try:
                with open(table_path, "rb") as f:
                    text = f.read()
                json.loads(text)
                break
            except (OSError, ValueError):
                time.sleep(POLL)
    state = env["ASCEND_NODE_STATE_DIR"]
    os.makedirs(state, exist_ok=True)
    write_atomic(os.path.join(state, "ranktable.json"), text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
