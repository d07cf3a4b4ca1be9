"""What `ascend-node report` and `simulate --report` do, apart from the command line."""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path
from typing import Any, Optional

from ascend_node.errors import ConfigError
from ascend_node.report.collect import Collected, collect
from ascend_node.report.html import render_html
from ascend_node.report.text import render_text
from ascend_node.report.timeline import Timeline, build_timeline


def run_report(shared_dir: Path, run_id: str, attempt: Optional[str] = None,
               html: Optional[Path] = None, width: int = 60) -> tuple[dict[str, Any], str]:
    """(the `--json` document, the text timeline); writes `html` when given."""
    return render_report(collect(shared_dir, run_id, attempt), html, width)


def render_report(got: Collected, html: Optional[Path] = None, width: int = 60
                  ) -> tuple[dict[str, Any], str]:
    """What `run_report` does with what was collected (from the volume, or from the API:
    `report.kube_collect`)."""
    tl = build_timeline(got)
    if html is not None:
        write_page(html, render_html(tl))
    doc = {**timeline_json(tl),
           "summaries": [s.model_dump(mode="json") for s in got.summaries]}
    return doc, render_text(tl, width)


def write_page(path: Path, page: str) -> None:
    from ascend_node.atomic import atomic_write_text

    try:
        atomic_write_text(path, page, mode=0o644)
    except OSError as exc:
        raise ConfigError(f"cannot write --html {path}: {exc.strerror or exc}",
                          "choose a path in an existing, writable directory") from exc


def timeline_json(tl: Timeline) -> dict[str, Any]:
    doc = asdict(tl)
    doc["rows"] = [{**r, "bars": [{**b, "start": round(b["start"], 3),
                                   "end": round(b["end"], 3)} for b in r["bars"]]}
                   for r in doc["rows"]]
    return doc


def sim_timeline(shared_dir: Path, run_id: str) -> tuple[Optional[dict[str, Any]], str]:
    """`simulate --report`: the timeline of the simulated job, or why there is none
    (the simulation's verdict and exit code stay its own)."""
    from ascend_node.errors import AscendNodeError

    try:
        doc, text = run_report(shared_dir, run_id)
    except AscendNodeError as exc:
        return None, f"no timeline: {exc.cause}"
    return doc, text
