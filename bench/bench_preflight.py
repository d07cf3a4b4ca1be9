"""What the pre-flight adds to a start-up (issue: pre-flight, item 4).

Runs a healthy simulated cluster (default 8 nodes x 8 fake NPUs) through `ascend-node boot
-- /bin/true` — rendezvous, table, pre-flight, exec — with `ASCEND_NODE_PREFLIGHT=off`
and `strict`, alternating, all nodes started at once. Prints, per setting, the median
over runs of the cluster's bootstrap time (first process start to the last exit after
its exec), the median of the back-to-back differences (each strict run follows an off
run, so both see about the same load on a shared machine), and what each node's
preflight.json says the stages cost inside the agent.

    python bench/bench_preflight.py [--nodes 8] [--devices 8] [--repeat 5] [--tool-delay 0]
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ascend_node.sim.cluster import SimSpec, launch, prepare
from ascend_node.sim.fake_tools import FakeDevice, install_tools, write_ascend_root, write_node_data


def node_facts_cost(devices: int, repeat: int = 20) -> tuple[float, float]:
    """(median, max) seconds of one node's node-wide facts (issue 28: `npu-smi info` for
    the holders, /proc/net/tcp{,6} and the port sysctls, the HCCL settings, the version
    files), gathered as a member does, against the fake npu-smi."""
    import os

    from ascend_node.preflight.gather import gather_node

    work = Path(tempfile.mkdtemp(prefix="bench-node-facts-"))
    _hccn, npu_smi = install_tools(work / "bin")
    write_node_data(work / "data", [FakeDevice(i, f"10.20.1.{i}") for i in range(devices)])
    write_ascend_root(work / "Ascend", "8.3.RC2")
    os.environ["ASCEND_NODE_SIM_DATA"] = str(work / "data")
    times = []
    for _ in range(repeat):
        t0 = time.monotonic()
        facts = gather_node(list(range(devices)), str(npu_smi), {}, work / "Ascend", 10, 30)
        times.append(time.monotonic() - t0)
        assert facts.holders == () and facts.cann == "8.3.RC2", facts
    return statistics.median(times), max(times)


def cpu_of_children() -> float:
    use = resource.getrusage(resource.RUSAGE_CHILDREN)
    return use.ru_utime + use.ru_stime


def once(nodes: int, devices: int, policy: str, delay: float
         ) -> tuple[float, float, float, int, float]:
    """(cluster bootstrap seconds, slowest node's wait for its health probes, slowest
    node's reachability stage, pings in the cluster, CPU seconds of all nodes and the
    tools they ran)."""
    work = Path(tempfile.mkdtemp(prefix=f"bench-preflight-{policy}-"))
    shared = work / "shared"
    shared.mkdir()
    spec = SimSpec(nodes=nodes, devices=devices, run_id="bench", timeout=120,
                   tool_delay=delay, command=("boot", "--", "/bin/true"),
                   extra_env={"ASCEND_NODE_PREFLIGHT": policy})
    sim_nodes = prepare(spec, work, shared)
    cpu0 = cpu_of_children()
    t0 = time.monotonic()
    results = launch(sim_nodes, 120)
    wall = time.monotonic() - t0
    cpu = cpu_of_children() - cpu0
    bad = [r for r in results if r.exit_code != 0]
    if bad:
        raise SystemExit(f"{policy}: node {bad[0].index} exited {bad[0].exit_code}: "
                         f"{bad[0].last_error}")
    gather, reach, pings = 0.0, 0.0, 0
    if policy != "off":
        for node in sim_nodes:
            doc = json.loads((node.state_dir / "preflight.json").read_text())
            gather = max(gather, doc["cluster"]["probe_wait_seconds"])
            reach = max(reach, doc["reach"]["seconds"])
            pings = doc["reach"]["pings_in_cluster"]
    return wall, gather, reach, pings, cpu


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=8)
    ap.add_argument("--devices", type=int, default=8)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--tool-delay", type=float, default=0.0,
                    help="seconds every fake hccn_tool call takes")
    args = ap.parse_args()
    walls: dict[str, list[float]] = {"off": [], "strict": []}
    cpus: dict[str, list[float]] = {"off": [], "strict": []}
    reach: list[float] = []
    gather: list[float] = []
    pings = 0
    once(2, 2, "strict", 0.0)  # warm the page cache and byte-code
    for _ in range(args.repeat):
        for policy in ("off", "strict"):
            wall, g, r, p, cpu = once(args.nodes, args.devices, policy, args.tool_delay)
            walls[policy].append(wall)
            cpus[policy].append(cpu)
            if policy == "strict":
                gather.append(g)
                reach.append(r)
                pings = p
    off, on = statistics.median(walls["off"]), statistics.median(walls["strict"])
    print(f"{args.nodes} nodes x {args.devices} NPUs, tool delay {args.tool_delay:g} s, "
          f"{args.repeat} runs each (median):")
    print(f"  bootstrap without pre-flight (off):  {off:.2f} s  "
          f"(min {min(walls['off']):.2f}, max {max(walls['off']):.2f})")
    print(f"  bootstrap with pre-flight (strict):  {on:.2f} s  "
          f"(min {min(walls['strict']):.2f}, max {max(walls['strict']):.2f})")
    pairs = sorted(b - a for a, b in zip(walls["off"], walls["strict"]))
    print(f"  added by the pre-flight:             {statistics.median(pairs):+.2f} s "
          f"(median of the {len(pairs)} back-to-back differences; spread "
          f"{pairs[0]:+.2f} .. {pairs[-1]:+.2f})")
    cpu_off, cpu_on = statistics.median(cpus["off"]), statistics.median(cpus["strict"])
    print(f"  CPU of all nodes and their tools:    off {cpu_off:.2f} s, strict {cpu_on:.2f} s "
          f"({(cpu_on - cpu_off) / args.nodes * 1000:+.0f} ms per node)")
    print(f"  wait for health probes, slowest node: {statistics.median(gather):.2f} s "
          f"({3 * args.devices} hccn_tool calls per node, beside the IP queries)")
    print(f"  reachability stage, slowest node:    {statistics.median(reach):.2f} s "
          f"({pings} pings in the cluster, then the verdict)")
    print(f"  in-agent pre-flight, slowest node:   "
          f"{statistics.median(gather) + statistics.median(reach):.2f} s")
    med, worst = node_facts_cost(args.devices)
    print(f"  node-wide facts (holders, ports, HCCL settings, versions), one node: "
          f"{med * 1000:.0f} ms median, {worst * 1000:.0f} ms max (beside the IP queries)")


if __name__ == "__main__":
    main()
