"""Issue 27: the report's words say what happened, cause first (pure, hand-made jobs).

An aborted attempt is an abort, not a table; the first failure in time and the nodes that
never came lead, the rest is grouped as `simulate` groups it (node numbers in number
order); a node that never arrived has its row; no time is negative after a restart; the
row labels are explained; exec is not drawn in the red of failures.
"""

from __future__ import annotations

import colorsys
import re
from pathlib import Path

from ascend_node.report.collect import Collected
from ascend_node.report.html import render_html
from ascend_node.report.text import render_text
from ascend_node.report.timeline import STYLE, build_timeline
from tests.report_cases import ATTEMPT, RUN, T0, node

WHERE = Path("/shared/.ascend-node/job-a/timeline") / ATTEMPT
OWN = "device 2 has no usable RoCE IP (no address)"


def aborted_by_node_11() -> Collected:
    """12 nodes; node 11 fails on its own at once (exit 1), node 0 aborts at 3 s and
    every other node ends with the abort (exit 5)."""
    nodes = [node(i, count=12, table_at=None if i == 11 else 3.0 + 0.01 * i, boot=False,
                  failed=(1, OWN) if i == 11 else (5, f"attempt was aborted: worker 10 "
                                                       f"(node 11) failed: {OWN}"))
             for i in range(12)]
    return Collected(RUN, ATTEMPT, WHERE, tuple(nodes), (), 12, {}, T0 + 3.0, T0 + 0.2,
                     "abort")


def one_absent_of_16() -> Collected:
    """16 nodes, node 5 never starts; the 15 others time out (exit 4) at 60 s."""
    nodes = [node(i, count=16, table_at=60.0, boot=False,
                  failed=(4, "timed out after 60 s waiting for peers: 1 of 16 missing: "
                             "worker 4 (node 5)"))
             for i in range(16) if i != 5]
    return Collected(RUN, ATTEMPT, WHERE, tuple(nodes), (), 16, {}, None, T0 + 0.2)


def _words(text: str) -> list[str]:
    return [ln for ln in text.splitlines() if not re.match(r"^\d", ln)]


def test_an_aborted_attempt_is_called_an_abort_never_a_table() -> None:
    tl = build_timeline(aborted_by_node_11())
    text = render_text(tl)
    assert "table: written" not in text and "table at" not in text
    assert any(w.startswith("abort: written ") and w.endswith("(no table)")
               for w in _words(text)), text
    assert ">abort</text>" in render_html(tl) and ">table</text>" not in render_html(tl)


def test_nothing_decided_says_so() -> None:
    text = render_text(build_timeline(one_absent_of_16()))
    assert "nothing decided: no table and no abort" in text
    assert "table: written" not in text


def test_the_first_failure_in_time_leads_and_the_rest_is_grouped_in_number_order() -> None:
    lines = render_text(build_timeline(aborted_by_node_11())).splitlines()
    assert lines[1] == f"first failure: worker 10 (node 11) at 0.61 s, exit 1: {OWN}", lines
    grouped = [ln for ln in lines if ln.startswith("then ")]
    assert grouped == ["then nodes 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10: exit 5: attempt was "
                       f"aborted: worker 10 (node 11) failed: {OWN}"]
    assert not any("failed with exit" in ln for ln in lines)


def test_who_never_came_leads_before_the_timeouts_it_caused() -> None:
    lines = render_text(build_timeline(one_absent_of_16())).splitlines()
    assert lines[1] == "never arrived (1): worker 4 (node 5)"
    assert lines[2].startswith("first failure: ") and "exit 4" in lines[2]
    assert sum(ln.startswith("then ") for ln in lines) == 1  # 14 alike: one line


def test_a_node_that_never_arrived_has_its_row() -> None:
    tl = build_timeline(one_absent_of_16())
    rows = [ln for ln in render_text(tl).splitlines() if re.match(r"^\d", ln)]
    assert [r.split()[0] for r in rows] == [str(i) for i in range(16)]
    assert rows[5].startswith("5 w4") and rows[5].endswith("never arrived")
    assert rows[5].split()[1:3] == ["w4", "never"]  # nothing drawn
    assert '>5 w4</text>' in render_html(tl)


def test_the_row_labels_are_explained() -> None:
    text = render_text(build_timeline(one_absent_of_16()))
    assert "rows: node index, then m<k> = master k, w<k> = worker k" in text


def test_no_time_is_negative_after_a_restart() -> None:
    """The table and the slots were written by an earlier start of the attempt, 5 s before
    these nodes (restarted) started and found it."""
    nodes = [node(i, start=5.0, table_at=5.0) for i in range(4)]
    restarted = [n.model_copy(update={"published": T0 + 0.1 * n.global_index})
                 for n in nodes]
    tl = build_timeline(Collected(RUN, ATTEMPT, WHERE, tuple(restarted), (), 4, {},
                                  T0 + 0.5, T0, "table"))
    text = render_text(tl)
    assert re.search(r"-\d", text) is None, text
    assert all(b.start >= 0 for r in tl.rows for b in r.bars)
    assert "table: written at 0.50 s, before the last arrival published" not in text
    assert "table: written 0.20 s after the last arrival, at 0.50 s" in text


def test_exec_is_not_drawn_in_the_red_of_failures() -> None:
    rgb = [int(STYLE["exec"].colour[k:k + 2], 16) / 255 for k in (1, 3, 5)]
    hue = colorsys.rgb_to_hsv(*rgb)[0] * 360
    assert 30 < hue < 330, STYLE["exec"].colour


def test_no_node_that_came_is_the_last_arrival_while_one_never_did() -> None:
    """Issue 36: with node 5 absent, the report named worker 14 "last arrival" and drew
    the critical path through it; the job waited on node 5."""
    text = render_text(build_timeline(one_absent_of_16()))
    words = _words(text)
    (head,) = [w for w in words if w.startswith("last arrival: ")]
    assert head.startswith("last arrival: none: worker 4 (node 5) never arrived; of those "
                           "that did, worker 14 (node 15) published last"), head
    (path,) = [w for w in words if w.startswith("critical path: ")]
    assert path.startswith("critical path: through worker 4 (node 5), which never arrived")


def test_an_abort_after_a_node_never_came_is_not_timed_from_the_last_arrival() -> None:
    from ascend_node.report.timeline import decision_line

    assert decision_line("abort", T0 + 9.0, T0, T0 + 4.0, all_arrived=False) == (
        "abort: written 5.00 s after the last node that arrived, at 9.00 s (no table)")
    assert decision_line("table", T0 + 9.0, T0, T0 + 4.0) == (
        "table: written 5.00 s after the last arrival, at 9.00 s")


def test_nodes_that_met_no_attempt_are_not_called_attempt_none() -> None:
    """Issue 36: `report` printed `attempt 'none'` (the directory name) as if an attempt
    had that name."""
    nodes = [node(i, count=2, boot=False, failed=(1, OWN)) for i in range(2)]
    got = Collected(RUN, None, WHERE.parent / "none", tuple(nodes), (), 2, {}, None, None)
    tl = build_timeline(got)
    assert render_text(tl).splitlines()[0].startswith(
        "run job-a, no attempt (nodes that met none): 2 of 2 nodes left a trace")
    assert "attempt none" not in render_html(tl) and "attempt 'none'" not in render_text(tl)


def test_no_summaries_without_an_attempt_says_so(tmp_path: Path) -> None:
    from ascend_node.errors import ConfigError
    from ascend_node.report.collect import collect

    (tmp_path / ".ascend-node" / "job-a").mkdir(parents=True)
    try:
        collect(tmp_path, "job-a")
    except ConfigError as exc:
        assert exc.cause.startswith("no node summaries for run 'job-a', no attempt opened "
                                    "(and no node left a summary outside one) in "), exc.cause
        assert "'none'" not in exc.cause
    else:
        raise AssertionError("collect found summaries in an empty run")
