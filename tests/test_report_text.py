"""`ascend-node report` as text: golden files of jobs whose story is known.

The cases (tests/report_cases.py) are summaries as nodes write them; the expected text
is in tests/golden/report/. After an intended change of the rendering, rewrite them with
`ASCEND_NODE_UPDATE_GOLDEN=1 pytest tests/test_report_text.py` and read the diff.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from ascend_node.report.text import render_text
from ascend_node.report.timeline import build_timeline
from tests.report_cases import large_job, slow_discovery

GOLDEN = Path(__file__).parent / "golden" / "report"


def check_golden(name: str, text: str) -> None:
    path = GOLDEN / name
    if os.environ.get("ASCEND_NODE_UPDATE_GOLDEN") == "1":
        path.write_text(text + "\n", encoding="utf-8")
    assert text + "\n" == path.read_text(encoding="utf-8"), f"differs from {path}"


def test_a_slow_discovery_is_named_with_its_tool_calls():
    text = render_text(build_timeline(slow_discovery()))
    check_golden("slow_discovery.txt", text)
    assert ("last arrival: worker 2 (node 3) published 4.80 s after master 0 (node 0): its "
            "discovery took 4.71 s (others: 0.06 s): 8 x hccn_tool -ip at 4.70 s each") in text
    assert ("critical path: worker 2 (node 3) from 2.15 s: discovery 4.71 s -> published at "
            "7.36 s -> table at 7.51 s -> worker 2 (node 3): pre-flight 0.64 s -> exec at "
            "9.11 s") in text
    rows = text.splitlines()[2:6]
    assert [r.split()[0] for r in rows] == ["0", "1", "2", "3"]
    # Node 3's row is the one with a long discovery; node 2's shows its container start.
    assert rows[3].count("D") > 20 and "D" not in rows[0]
    assert rows[2].split()[2].startswith("....")


def test_a_large_job_is_grouped_and_names_the_late_start_the_failure_and_the_absent():
    text = render_text(build_timeline(large_job()))
    check_golden("large_job.txt", text)
    lines = text.splitlines()
    rows = [ln for ln in lines if ln[:1].isdigit()]
    assert len(rows) <= 40 and "2 nodes a row" in lines[0]
    assert any(r.startswith("12-13 >12") and "exit 4" in r for r in rows)  # the failed one
    assert "its agent started 30.0 s after the first node's" in text
    assert "never arrived (2): worker 7 (node 9), worker 48 (node 50)" in text


@pytest.mark.parametrize("width", [20, 60, 200])
def test_every_row_is_as_wide_as_asked_and_the_outcome_lines_up(width):
    text = render_text(build_timeline(slow_discovery()), width=width)
    rows = text.splitlines()[2:6]
    for r in rows:  # label column "0 m0 " + a space, then `width` cells, two spaces
        assert r[6 + width:6 + width + 2] == "  " and r[6 + width + 2:].startswith("exec ")
        assert r[6 + width - 1] in "X "  # the exec mark is inside the axis
