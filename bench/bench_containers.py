"""Real containers (issue 11, item 3): image build time, the agent's layer, 4-pod start.

Prints, with the podman test bed (scripts/container_bed.py, all state in one work dir):

  * build times: the registry-free base image (mmdebstrap -> podman import), the offline
    wheelhouse, and each of the three images built without the layer cache;
  * the size the agent adds: `podman image inspect` size of each image minus the base's;
  * the time from the first `podman run` of a 4-pod MindIE job to the last pod's daemon
    started (its report written), median of --repeat runs, each on a fresh network and
    shared volume with new pod UIDs.

    python bench/bench_containers.py [--repeat 3] [--fresh-base] [--work DIR]

Root and podman/mmdebstrap needed (scripts/ci-setup-containers installs them).
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("container_bed",
                                               ROOT / "scripts" / "container_bed.py")
assert _spec is not None and _spec.loader is not None
cb = importlib.util.module_from_spec(_spec)
sys.modules["container_bed"] = cb
_spec.loader.exec_module(cb)


def start_four(bed: Any, run: int) -> tuple[float, float]:
    """(seconds from the first `podman run` to the last daemon report, of which in
    `podman run` itself)."""
    job = cb.Job(bed, f"bench{run}", bed.images["mindie"], 4, subnet=200 + run,
                 timeout=120).create()
    try:
        pods = [job.pod(i) for i in range(4)]
        t0 = time.monotonic()
        for pod in pods:
            bed.run(pod)
        launched = time.monotonic() - t0
        last = job.wait_reports(range(4), 180)
        return last - t0, launched
    finally:
        job.remove()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--fresh-base", action="store_true",
                    help="rebuild the base image even if the work dir holds it")
    ap.add_argument("--work", type=Path, default=cb.DEFAULT_WORK)
    args = ap.parse_args()
    missing = cb.missing_tools()
    if missing:
        raise SystemExit(f"bench_containers: not installed: {' '.join(missing)}")
    bed = cb.Bed(args.work)
    bed.lock()
    bed.configure()
    bed.teardown()
    try:
        bed.build_images(fresh=args.fresh_base)
        t = bed.timings
        base_note = "" if args.fresh_base or t["base_build_s"] else " (cached; --fresh-base)"
        print(f"base image (mmdebstrap | podman import): {t['base_build_s']:6.1f} s{base_note}")
        print(f"wheelhouse (scripts/wheelhouse):         {t['wheelhouse_s']:6.1f} s")
        base_size = bed.image_size(bed.images["base"])
        print(f"base image size:                         {base_size / 1e6:6.1f} MB")
        for kind in ("mindie", "training", "init"):
            bed.build_image(kind, bed.images["base"], no_cache=True)
            added = bed.image_size(bed.images[kind]) - base_size
            print(f"{kind:8} image build (--no-cache):       {t[f'build_{kind}_s']:6.1f} s, "
                  f"agent layer {added / 1e6:5.1f} MB")
        runs = [start_four(bed, i) for i in range(args.repeat)]
        firsts = [r[0] for r in runs]
        print(f"4-pod MindIE job, podman run -> last daemon started: median "
              f"{statistics.median(firsts):.1f} s, min {min(firsts):.1f} s, "
              f"max {max(firsts):.1f} s ({args.repeat} runs; the 4 `podman run` calls "
              f"took {statistics.median(r[1] for r in runs):.1f} s)")
    finally:
        bed.teardown()
        left = bed.leftovers()
        if left:
            print(f"left after teardown: {left}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
