"""`ascend-node report` given a PD service's run id: one timeline per instance, P first
(ascend_node/report/instances.py), on the volume a `simulate --pd` service left."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from ascend_node.report.instances import pd_instance_runs

pytestmark = pytest.mark.multiprocess


@pytest.fixture(scope="module")
def shared() -> Iterator[Path]:
    from ascend_node.sim.pd_service import PdSpec, simulate_pd

    report = simulate_pd(PdSpec(prefill=2, prefill_pods=1, devices=2, run_id="svc"),
                         keep=True)
    try:
        assert report.ok
        yield report.shared_dir
    finally:
        shutil.rmtree(report.workspace, ignore_errors=True)


def report(shared: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ASCEND_NODE_")}
    return subprocess.run([sys.executable, "-m", "ascend_node", "report", "--shared-dir",
                           str(shared), *args], env=env, capture_output=True, text=True,
                          timeout=120)


def test_the_instances_on_the_volume(shared: Path) -> None:
    assert pd_instance_runs(shared, "svc") == [("prefill-0", "svc-prefill-0"),
                                               ("prefill-1", "svc-prefill-1"),
                                               ("decode-0", "svc-decode-0")]
    assert pd_instance_runs(shared, "svc-prefill-0") is None  # an instance's own run


def test_report_groups_a_pd_service_by_instance(shared: Path) -> None:
    done = report(shared, "--run-id", "svc")
    assert done.returncode == 0, done.stderr
    text = done.stdout
    assert text.startswith("PD service svc: 3 instances on the volume")
    heads = [text.index(f"== {task} (run svc-{task})")
             for task in ("prefill-0", "prefill-1", "decode-0")]
    assert heads == sorted(heads)
    assert "run svc-decode-0, attempt " in text
    doc = json.loads(report(shared, "--run-id", "svc", "--json").stdout)
    assert doc["pd"] is True and list(doc["instances"]) == ["prefill-0", "prefill-1",
                                                            "decode-0"]
    assert doc["instances"]["prefill-1"]["node_count"] == 1


def test_an_instance_run_id_still_draws_it_alone(shared: Path) -> None:
    done = report(shared, "--run-id", "svc-decode-0")
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("run svc-decode-0, attempt ")


@pytest.mark.parametrize("flag", [["--attempt", "1"], ["--html", "page.html"]])
def test_one_run_options_are_refused_for_a_service(shared: Path, flag: list[str]) -> None:
    done = report(shared, "--run-id", "svc", *flag)
    assert done.returncode == 2
    assert f"{flag[0]} draws one run, but svc is a PD service's" in done.stderr
