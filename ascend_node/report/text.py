"""The timeline as terminal text (pure): one row per node (or group), one character per
time cell, the phase holding most of the cell drawn by its glyph, then the words.

    node      0 s       10 s      20 s      30 s      40 s
    0 m0    ..sDDR~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~+oPPIECX   exec 44 s

Plain ASCII, no colour: it survives `kubectl logs`,
a ticket and a copy-paste.
"""

from __future__ import annotations

import math
from typing import Optional

from ascend_node.report.timeline import LABEL_KEY, STYLE, STYLES, Row, Timeline, fmt_s

WIDTH = 60  # time cells


def nice_step(span: float, cells: int, min_cells: int = 10) -> float:
    """A round tick step (1, 2, 5 x 10^k seconds) at least `min_cells` cells apart."""
    raw = span * min_cells / cells
    power = 10 ** math.floor(math.log10(raw)) if raw > 0 else 1.0
    for m in (1, 2, 5, 10):
        if m * power >= raw:
            return m * power
    return 10 * power


def tick_label(value: float, step: float) -> str:
    if step >= 1:
        return f"{value:.0f} s"
    digits = max(0, -math.floor(math.log10(step)))
    return f"{value:.{digits}f} s"


def row_cells(row: Row, span: float, width: int) -> str:
    """Each cell shows the phase covering most of it; a failed end is `!`."""
    cells = []
    size = span / width
    for c in range(width):
        lo, hi = c * size, (c + 1) * size
        best, cover = " ", 0.0
        for bar in row.bars:
            if bar.phase == "exec":
                continue
            got = min(hi, bar.end) - max(lo, bar.start)
            if got > cover:
                best, cover = STYLE[bar.phase].glyph, got
        cells.append(best)
    for bar in row.bars:
        if bar.phase == "exec":
            cells[_cell(bar.start, span, width)] = STYLE["exec"].glyph
    if row.outcome.startswith("exit") and row.end is not None:
        cells[_cell(row.end, span, width)] = "!"
    if not row.bars and row.published is not None:
        cells[_cell(row.published, span, width)] = "|"
    return "".join(cells)


def _cell(t: float, span: float, width: int) -> int:
    return min(width - 1, max(0, int(t / span * width)))


def render_text(tl: Timeline, width: int = WIDTH, label_width: Optional[int] = None) -> str:
    labels = [r.label for r in tl.rows]
    lw = label_width or max([len("node"), *(len(x) for x in labels)]) + 1
    lines = [_headline(tl), *tl.cause]
    step = nice_step(tl.span, width)
    axis = [" "] * (width + 12)
    k = 0
    while k * step <= tl.span + 1e-9:
        at = _cell(k * step, tl.span, width) if k else 0
        text = tick_label(k * step, step)
        if all(ch == " " for ch in axis[max(0, at - 1):at + len(text)]):
            axis[at:at + len(text)] = list(text)
        k += 1
    lines.append(f"{'node':<{lw}} {''.join(axis).rstrip()}")
    drawn = set()
    for row in tl.rows:
        end = f"{row.outcome} {fmt_s(row.end)}" if row.end is not None else row.outcome
        cells = row_cells(row, tl.span, width)
        drawn |= set(cells)
        lines.append(f"{row.label:<{lw}} {cells}  {end}".rstrip())
    # The key to what is drawn (a phase shorter than a cell has no glyph to explain).
    legend = [f"{s.glyph} {s.label}" for s in STYLES if s.glyph in drawn]
    legend += [f"{g} {what}" for g, what in (("!", "failed"), ("|", "published, no summary"))
               if g in drawn]
    if legend:
        lines.append("  ".join(legend))
    lines.append(label_key(tl))
    lines.extend(tl.words)
    for why in tl.ignored:
        lines.append(f"ignored: {why}")
    return "\n".join(lines)


def label_key(tl: Timeline) -> str:
    """What a row's label means (text and HTML say it alike)."""
    grouped = (f"; `a-b >c`: nodes a to b, drawn as node c ({tl.grouped} a row)"
               if tl.grouped > 1 else "")
    return LABEL_KEY + grouped


def attempt_words(attempt_id: Optional[str]) -> str:
    """`attempt 1767225600-abcd1234`, or what the nodes filed under `none` are: ones that
    met no attempt (never "attempt 'none'", which reads as an attempt of that name)."""
    return f"attempt {attempt_id}" if attempt_id else "no attempt (nodes that met none)"


def _headline(tl: Timeline) -> str:
    arrived = tl.node_count - len(tl.missing)
    group = f"; {tl.grouped} nodes a row, drawn as the slowest" if tl.grouped > 1 else ""
    return (f"run {tl.run_id}, {attempt_words(tl.attempt_id)}: {arrived} of "
            f"{tl.node_count} nodes left a trace, {fmt_s(tl.span)} from the first start"
            f"{group} (volume clock)")
