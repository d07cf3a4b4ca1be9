"""Discovery time against device count, concurrent vs sequential `hccn_tool` queries.

Why: every pod start pays for discovery before it can join the rendezvous, and each
`hccn_tool -i N -ip -g` call talks to the driver. With 16 NPUs (A3) and a slow tool, a
sequential loop costs 16 x the per-call time; the bounded pool in `devices.query_ips`
should make it about one call's time.

The fake tool is a real executable sh script that sleeps (0.2 s by default) and then
prints the real output format, so the measured path is the production one: argv list,
`tools.run_tool` with a timeout, a process per device, parsing and validation.

Usage: .venv/bin/python bench/bench_discovery.py [--delay 0.2] [--repeat 3]
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ascend_node.discover.devices import check_device_ips, enumerate_devices, query_ips

FAKE_HCCN_TOOL = """#!/bin/sh
# Fake hccn_tool for the discovery benchmark: `hccn_tool -i <id> -ip -g`.
sleep {delay}
echo "ipaddr:10.20.0.$2"
echo "netmask:255.255.255.0"
"""

COUNTS = (1, 8, 16)
MODES = (("sequential", 1), ("concurrent", 16))


def discover_once(tool: str, count: int, max_workers: int) -> float:
    """Seconds for enumerate + query + validate of `count` devices."""
    started = time.perf_counter()
    ids = enumerate_devices(f"0-{count - 1}", {}, "npu-smi", tool_timeout=10.0)
    devices, raw = query_ips(ids.ids, tool, 10.0, hccn_conf=None, max_workers=max_workers)
    check_device_ips(devices, raw)
    elapsed = time.perf_counter() - started
    assert [d.ip for d in devices] == [f"10.20.0.{i}" for i in range(count)]
    return elapsed


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--delay", type=float, default=0.2, help="seconds per tool call")
    parser.add_argument("--repeat", type=int, default=3, help="runs per cell (median shown)")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="bench-discovery-") as tmp:
        tool = Path(tmp) / "hccn_tool"
        tool.write_text(FAKE_HCCN_TOOL.format(delay=args.delay))
        tool.chmod(0o755)
        discover_once(str(tool), 1, 1)  # warm-up: imports, page cache
        rows = []
        for count in COUNTS:
            cell = {}
            for name, workers in MODES:
                runs = [discover_once(str(tool), count, workers) for _ in range(args.repeat)]
                cell[name] = statistics.median(runs)
            rows.append((count, cell["sequential"], cell["concurrent"]))

    print(f"# discovery benchmark: fake hccn_tool sleeping {args.delay:g} s per call, "
          f"median of {args.repeat} runs")
    print(f"# Python {platform.python_version()}, {platform.machine()}, "
          f"{os.cpu_count()} CPUs")
    print("| devices | sequential (max_workers=1) | concurrent (max_workers=16) | speed-up |")
    print("|--------:|---------------------------:|----------------------------:|---------:|")
    for count, seq, conc in rows:
        print(f"| {count:>7} | {seq:>24.3f} s | {conc:>25.3f} s | {seq / conc:>7.1f}x |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
