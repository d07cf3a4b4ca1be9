"""The timeline as a self-contained HTML page (pure): one inline SVG, no script, no
network fetch, no external font or style sheet. Hovering a bar shows its numbers (an SVG
`<title>`, which every browser shows as a tooltip without JavaScript).

`layout` places every bar in pixels; `render_html` draws exactly that layout, and the
browser test reads a screenshot at the positions `layout` gives (tests/test_report_browser.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from html import escape

from ascend_node.report.text import attempt_words, label_key, nice_step, tick_label
from ascend_node.report.timeline import STYLE, STYLES, Timeline, fmt_s

WIDTH = 1000  # page width in CSS pixels
LABEL_W = 150  # the node labels' column
RIGHT_W = 110  # the outcome column
TOP = 48  # above the first row: headline and axis
ROW_H = 22
BAR_H = 14
EXEC_W = 3  # the exec mark
BACKGROUND = "#ffffff"


@dataclass(frozen=True)
class Rect:
    row: int
    phase: str
    x: float
    y: float
    w: float
    h: float
    title: str


@dataclass(frozen=True)
class Layout:
    width: int
    height: int  # of the SVG
    plot_x: float
    plot_w: float
    rects: tuple[Rect, ...]
    ticks: tuple[tuple[float, str], ...]  # (x, label)

    def x_of(self, seconds: float, span: float) -> float:
        return self.plot_x + seconds / span * self.plot_w


def layout(tl: Timeline, width: int = WIDTH) -> Layout:
    plot_x, plot_w = float(LABEL_W), float(width - LABEL_W - RIGHT_W)
    rects = []
    for i, row in enumerate(tl.rows):
        y = TOP + i * ROW_H + (ROW_H - BAR_H) / 2
        for bar in row.bars:
            x = plot_x + bar.start / tl.span * plot_w
            w = bar.seconds / tl.span * plot_w
            if bar.phase == "exec":
                x, w = x - EXEC_W / 2, float(EXEC_W)
            rects.append(Rect(i, bar.phase, round(x, 2), y, round(max(w, 0.5), 2),
                              float(BAR_H), bar.title))
    step = nice_step(tl.span, int(plot_w // 8), min_cells=12)
    ticks = []
    k = 0
    while k * step <= tl.span + 1e-9:
        ticks.append((round(plot_x + k * step / tl.span * plot_w, 2), tick_label(k * step, step)))
        k += 1
    height = TOP + len(tl.rows) * ROW_H + 8
    return Layout(width, height, plot_x, plot_w, tuple(rects), tuple(ticks))


def render_html(tl: Timeline, width: int = WIDTH) -> str:
    lay = layout(tl, width)
    title = f"ascend-node report: run {tl.run_id}, {attempt_words(tl.attempt_id)}"
    svg = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{lay.width}" '
           f'height="{lay.height}" viewBox="0 0 {lay.width} {lay.height}" '
           f'font-family="DejaVu Sans, sans-serif" font-size="12">',
           f'<rect x="0" y="0" width="{lay.width}" height="{lay.height}" '
           f'fill="{BACKGROUND}"/>',
           f'<text x="8" y="16" font-size="13" font-weight="bold">{escape(title)}</text>']
    axis_y = TOP - 8
    for x, label in lay.ticks:
        svg.append(f'<line x1="{x}" y1="{axis_y}" x2="{x}" y2="{lay.height - 4}" '
                   'stroke="#e6e6e6"/>')
        svg.append(f'<text x="{x + 2}" y="{axis_y}" fill="#555">{escape(label)}</text>')
    if tl.decided is not None:
        # When node 0 wrote the table: everyone waited for it (under the bars).
        x = round(lay.x_of(tl.decided, tl.span), 2)
        svg.append(f'<line class="table-mark" x1="{x}" y1="{axis_y + 4}" x2="{x}" '
                   f'y2="{lay.height - 4}" stroke="#444" stroke-dasharray="3,3">'
                   f'<title>{tl.decision_word} written at {escape(fmt_s(tl.decided))}'
                   '</title></line>')
        svg.append(f'<text x="{x + 2}" y="{TOP - 20}" fill="#444">{tl.decision_word}</text>')
    for i, row in enumerate(tl.rows):
        y = TOP + i * ROW_H + ROW_H / 2 + 4
        svg.append(f'<text class="label" x="8" y="{y}">{escape(row.label)}</text>')
        end = f"{row.outcome} {fmt_s(row.end)}" if row.end is not None else row.outcome
        colour = "#c00" if row.outcome.startswith("exit") else "#333"
        svg.append(f'<text class="outcome" x="{lay.plot_x + lay.plot_w + 8}" y="{y}" '
                   f'fill="{colour}">{escape(end)}</text>')
    for r in lay.rects:
        svg.append(f'<rect class="bar {r.phase}" x="{r.x}" y="{r.y}" width="{r.w}" '
                   f'height="{r.h}" fill="{STYLE[r.phase].colour}">'
                   f'<title>{escape(r.title)}</title></rect>')
    svg.append("</svg>")
    used = {r.phase for r in lay.rects}
    legend = "".join(
        f'<span class="key"><i style="background:{s.colour}"></i>{escape(s.label)}</span>'
        for s in STYLES if s.name in used)
    legend += f'<span class="key">{escape(label_key(tl))}</span>'
    words = "".join(f'<p class="cause">{escape(w)}</p>' for w in tl.cause)
    words += "".join(f"<p>{escape(w)}</p>" for w in tl.words)
    words += "".join(f'<p class="ignored">ignored: {escape(w)}</p>' for w in tl.ignored)
    return (
        "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
        f"<title>{escape(title)}</title><style>"
        f"body{{margin:0;background:{BACKGROUND};font:13px 'DejaVu Sans',sans-serif;"
        "color:#222}"
        "svg{display:block}.bar:hover{stroke:#000;stroke-width:1}"
        "#legend,#words{margin:4px 8px}.key{margin-right:14px;white-space:nowrap}"
        ".key i{display:inline-block;width:12px;height:12px;margin-right:4px;"
        "vertical-align:-2px}.cause,.ignored{color:#a00}p{margin:3px 0}"
        "</style></head><body>\n"
        + "\n".join(svg)
        + f'\n<div id="legend">{legend}</div>\n<div id="words">{words}</div>\n'
        + "</body></html>\n"
    )
