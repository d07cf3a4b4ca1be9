"""The report's HTML page in a real headless Chromium: loaded from a file, screenshot
read back pixel by pixel where the layout puts each bar, the DOM dumped for its words.

Needs Debian's chromium (scripts/ci-setup-browser, root); skips and says so elsewhere.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from ascend_node.report.html import BACKGROUND, layout, render_html
from ascend_node.report.timeline import STYLE, Timeline, build_timeline
from tests.png_reader import read_png
from tests.report_cases import large_job, slow_discovery

pytestmark = pytest.mark.browser

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
if CHROMIUM is None:
    pytestmark = [pytest.mark.browser, pytest.mark.skip(
        reason="chromium is not installed (run scripts/ci-setup-browser as root)")]

FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--hide-scrollbars", "--force-device-scale-factor=1",
         "--force-color-profile=srgb"]


def chromium(tmp_path: Path, page: Path, *args: str) -> subprocess.CompletedProcess[str]:
    profile = tmp_path / "profile"
    profile.mkdir(exist_ok=True)
    return subprocess.run([str(CHROMIUM), *FLAGS, f"--user-data-dir={profile}", *args,
                           page.as_uri()], capture_output=True, text=True, timeout=120)


def rgb(colour: str) -> tuple[int, int, int]:
    return int(colour[1:3], 16), int(colour[3:5], 16), int(colour[5:7], 16)


def close(a: tuple[int, int, int], b: tuple[int, int, int], tolerance: int = 10) -> bool:
    return all(abs(x - y) <= tolerance for x, y in zip(a, b))


def screenshot(tmp_path: Path, tl: Timeline) -> tuple[object, object]:
    page = tmp_path / "report.html"
    page.write_text(render_html(tl), encoding="utf-8")
    lay = layout(tl)
    shot = tmp_path / "shot.png"
    done = chromium(tmp_path, page, f"--screenshot={shot}",
                    f"--window-size={lay.width},{lay.height + 200}")
    assert shot.is_file(), done.stderr[-2000:]
    image = read_png(shot.read_bytes())
    assert (image.width, image.height) == (lay.width, lay.height + 200)
    return image, lay


@pytest.mark.parametrize("case", [slow_discovery, large_job], ids=["4 nodes", "64 nodes"])
def test_every_bar_is_drawn_in_its_phase_colour_where_the_layout_puts_it(tmp_path, case):
    tl = build_timeline(case())
    image, lay = screenshot(tmp_path, tl)
    checked = set()
    for rect in lay.rects:
        if rect.w < 6 or rect.phase == "exec":
            continue
        x, y = int(rect.x + rect.w / 2), int(rect.y + rect.h / 2)
        got = image.pixel(x, y)
        assert close(got, rgb(STYLE[rect.phase].colour)), (rect.row, rect.phase, x, y, got)
        checked.add(rect.phase)
        # Just above and below the bar: the page, not the bar (rows are apart).
        for edge in (int(rect.y) - 2, int(rect.y + rect.h) + 2):
            assert not close(image.pixel(x, edge), rgb(STYLE[rect.phase].colour))
    assert {"startup", "wait", "preflight"} <= checked
    if case is slow_discovery:
        assert {"discovery", "container"} <= checked
    # Left of the plot, on a row's height but off its label: page background.
    assert close(image.pixel(int(lay.plot_x) - 4, int(lay.rects[0].y + 3)), rgb(BACKGROUND))


def test_the_page_shows_the_labels_the_words_and_a_hover_text_for_every_bar(tmp_path):
    tl = build_timeline(slow_discovery())
    page = tmp_path / "report.html"
    html = render_html(tl)
    page.write_text(html, encoding="utf-8")
    # Self-contained: no script, no fetch of anything (the SVG namespace is a name only).
    assert "<script" not in html and "src=" not in html and "href" not in html
    assert html.count("http") == html.count('xmlns="http://www.w3.org/2000/svg"')
    dom = chromium(tmp_path, page, "--dump-dom").stdout
    for label in ("0 m0", "1 w0", "2 w1", "3 w2", "exec 9.11 s"):
        assert f">{label}</text>" in dom
    assert "last arrival: worker 2 (node 3) published 4.80 s after master 0 (node 0)" in dom
    assert ("<title>worker 2 (node 3): discovery 4.71 s (from 2.55 s to 7.26 s); "
            "8 x hccn_tool -ip at 4.70 s each</title>") in dom
    # The page's title, each bar's, and the table's mark.
    assert dom.count("<title>") == 2 + len(layout(tl).rects)
    assert "<title>table written at 7.51 s</title>" in dom


def test_a_large_job_page_names_the_failure_and_the_absent_nodes(tmp_path):
    tl = build_timeline(large_job())
    page = tmp_path / "report.html"
    page.write_text(render_html(tl), encoding="utf-8")
    dom = chromium(tmp_path, page, "--dump-dom").stdout
    assert dom.count('class="label"') == len(tl.rows) <= 40
    assert ">12-13 &gt;12</text>" in dom and ">exit 4 31.0 s</text>" in dom
    assert "never arrived (2): worker 7 (node 9), worker 48 (node 50)" in dom
    assert "first failure: worker 10 (node 12) at 31.0 s, exit 4: timed out after 60 s" in dom
