"""A MindSpore job for the real-launcher tests: one AllReduce across every worker (CPU).

msrun starts it once per worker (MS_ROLE=MS_WORKER) and, on the master node, once as its
scheduler (MS_ROLE=MS_SCHED), whose init() serves the cluster and does not return to us.
Each worker writes what it saw to $JOB_OUT/<node ip>-<DEVICE_ID>.json. With
JOB_FAIL_ON=<node ip>, that node's workers exit 3 after init(), before the collective.
"""

import json
import os
import sys

import mindspore as ms
import numpy as np
from mindspore import Tensor, ops
from mindspore.communication import get_group_size, get_rank, init

ms.set_device("CPU")
init()
node = os.environ.get("MIES_CONTAINER_IP", "")
if os.environ.get("JOB_FAIL_ON") == node:
    print(f"job: failing on purpose on {node}", flush=True)
    sys.exit(3)
rank = get_rank()
total = ops.AllReduce()(Tensor(np.array([rank + 1.0], np.float32))).asnumpy().tolist()
record = {
    "node": node, "device_id": os.environ.get("DEVICE_ID"), "rank_id": os.environ.get("RANK_ID"),
    "rank": rank, "size": get_group_size(), "sum": total[0],
}
path = os.path.join(os.environ["JOB_OUT"], f"{node}-{record['device_id']}.json")
with open(path + ".tmp", "w") as handle:
    json.dump(record, handle)
os.replace(path + ".tmp", path)
