"""A torch job for the real-launcher tests: one all_reduce across every worker (gloo, CPU).

torchrun starts it once per local process. Each writes what it saw to
$JOB_OUT/<node ip>-<LOCAL_RANK>.json. With JOB_FAIL_ON=<node ip>, that node's processes
exit 3 after joining the process group, before the collective.
"""

import json
import os
import sys
from datetime import timedelta

import torch
import torch.distributed as dist

dist.init_process_group("gloo", timeout=timedelta(seconds=60))
node = os.environ.get("MIES_CONTAINER_IP", "")
if os.environ.get("JOB_FAIL_ON") == node:
    print(f"job: failing on purpose on {node}", flush=True)
    sys.exit(3)
rank = dist.get_rank()
value = torch.tensor([rank + 1.0])
dist.all_reduce(value)
record = {
    "node": node, "local_rank": os.environ.get("LOCAL_RANK"), "rank_env": os.environ.get("RANK"),
    "rank": rank, "size": dist.get_world_size(), "sum": value.item(),
}
path = os.path.join(os.environ["JOB_OUT"], f"{node}-{record['local_rank']}.json")
with open(path + ".tmp", "w") as handle:
    json.dump(record, handle)
os.replace(path + ".tmp", path)
dist.destroy_process_group()
