"""What `ascend-node launch` itself costs (issue 39): from its start to the Job created, and from
the Job's end (the last pod reported Succeeded) to its exit.

Starts a kube bed (scripts/kube_bed.py), then per repeat, in a fresh namespace: runs
`ascend-node launch --num_worker 2` (a training Job through the API rendezvous, so launch also
creates the job's ServiceAccount, Role and RoleBinding), plays the fake nodes' kubelets
(tests/test_kube_policies.py's `Kubelets`: Running, then Succeeded), and times from
launch's own stderr lines, read as they come. Then `down`.

    python bench/bench_launch.py [--repeat 3]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from ascend_node.launch.platform_env import job_name  # noqa: E402
from tests.kube_bed import Bed, load_scripts  # noqa: E402
from tests.test_kube_policies import Kubelets  # noqa: E402


def once(bed: Bed, i: int) -> tuple[float, float]:
    ns = bed.namespace(f"bench-launch-{i}")
    name = job_name("train", f"run-{i}")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KFJ_", "KUBERNETES_"))}
    env.update({"KFJ_RUN_ID": f"run-{i}", "KFJ_TASK_NAME": "train", "KFJ_NAMESPACE": ns,
                "KFJ_TASK_IMAGES": "registry/mf:1",
                "KUBECONFIG": str(bed.run / "admin.kubeconfig")})
    start = time.monotonic()
    proc = subprocess.Popen([sys.executable, "-m", "ascend_node", "launch", "--num_worker", "2",
                             "--command", "python3 t.py", "--timeout", "300"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    created: list[float] = []

    def read() -> None:
        assert proc.stderr is not None
        for line in proc.stderr:
            if "created job" in line:
                created.append(time.monotonic())

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    nodes = Kubelets(bed, ns)
    ended_at = None
    while proc.poll() is None:
        pods = [p for p in bed.pods(ns) if p["spec"].get("nodeName")]
        if len(pods) == 2 and ended_at is None:
            for pod in pods:
                nodes.report(pod, "Running")
            time.sleep(1)
            for pod in pods:
                nodes.report(pod, "Succeeded", 0)
            ended_at = time.monotonic()
        time.sleep(0.05)
    proc.wait()
    exited = time.monotonic()
    reader.join(5)
    assert proc.returncode == 0 and created and ended_at, (proc.returncode, name)
    bed.purge(ns)
    return created[0] - start, exited - ended_at


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    api, script = load_scripts()
    with tempfile.TemporaryDirectory(prefix="bench-launch-") as tmp:
        run = Path(tmp)
        script.up(run, 4, False)
        try:
            bed = Bed(run, script.client(run), api, script.node_names(4))
            results = [once(bed, i) for i in range(args.repeat)]
        finally:
            script.down(run)
    to_created = [r[0] for r in results]
    to_exit = [r[1] for r in results]
    print(f"launch start -> Job created: median {statistics.median(to_created):.2f} s "
          f"(min {min(to_created):.2f}, max {max(to_created):.2f}), n={len(results)}")
    print(f"last pod Succeeded -> launch exited: median {statistics.median(to_exit):.2f} s "
          f"(min {min(to_exit):.2f}, max {max(to_exit):.2f}), n={len(results)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
