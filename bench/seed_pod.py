"""The seed: what the agent replaces, as docs/design.md describes it (standard library only).

Every pod runs against ONE shared JSON file on the volume: read it, append itself, write it
back (no lock, no temp file), then poll it every 5 s until it lists every node, and write
the table, `master` and `world_size`. Two pods that start together often both read the file
before either wrote it, so one of them loses its entry; the original then waits forever. This
stand-in re-adds its entry at each poll when it finds it missing (the kindest reading of the
seed, so that a benchmark ends): a lost entry then costs one more 5 s poll, not a hang.

    python bench/seed_pod.py        (environment as for `ascend-node ranktable`)
"""

import json
import os
import subprocess
import sys
import time

POLL = 5.0


def device_ip(tool: str, dev: int) -> str:
    out = subprocess.run([tool, "-i", str(dev), "-ip", "-g"], capture_output=True, text=True,
                         timeout=10, check=True).stdout
    return next(line.split(":", 1)[1].strip() for line in out.splitlines()
                if line.startswith("ipaddr:"))


def read(path: str) -> dict:
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return {"server_list": []}


def main() -> int:
    env = os.environ
    masters, workers = int(env["VC_MASTER_NUM"]), int(env["VC_WORKER_NUM"])
    task = int(env["VC_TASK_INDEX"])
    index = task if env["ROLE"].lower() == "master" else masters + task
    nodes = masters + workers
    devices = [int(d) for d in env["ASCEND_VISIBLE_DEVICES"].split(",")]
    tool = env["ASCEND_NODE_HCCN_TOOL"]
    ips = [device_ip(tool, d) for d in devices]  # one after the other, as the seed does
    me = {"server_id": env.get("K8S_HOST_IP", ""), "container_ip": env["K8S_POD_IP"],
          "index": index, "device": [{"device_id": str(d), "device_ip": ip}
                                     for d, ip in zip(devices, ips)]}
    path = os.path.join(env["ASCEND_NODE_SHARED_DIR"], f"seed-{env['ASCEND_NODE_RUN_ID']}.json")
    while True:
        table = read(path)
        if not any(s.get("index") == index for s in table["server_list"]):
            table["server_list"].append(me)  # read-modify-write: the lost-update race
            with open(path, "w") as f:
                json.dump(table, f)
        if len(table["server_list"]) >= nodes:
            break
        time.sleep(POLL)
    servers = sorted(table["server_list"], key=lambda s: s["index"])
    state = env["ASCEND_NODE_STATE_DIR"]
    os.makedirs(state, exist_ok=True)
    with open(os.path.join(state, "ranktable.json"), "w") as f:
        json.dump({"version": "1.0", "server_count": str(nodes), "status": "completed",
                   "server_list": servers}, f)
    with open(os.path.join(state, "master"), "w") as f:
        f.write(servers[0]["container_ip"])
    with open(os.path.join(state, "world_size"), "w") as f:
        f.write(str(sum(len(s["device"]) for s in servers)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
