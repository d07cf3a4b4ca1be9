"""`ascend-node report` as an operator runs it, on summaries left on a volume."""

from __future__ import annotations

import json

from ascend_node.atomic import atomic_write_bytes
from ascend_node.cli import app
from tests.cli_helpers import cli_runner
from tests.report_cases import ATTEMPT, RUN, slow_discovery

runner = cli_runner()


def volume(tmp_path):
    directory = tmp_path / ".ascend-node" / RUN / "timeline" / ATTEMPT
    directory.mkdir(parents=True)
    for s in slow_discovery().summaries:
        atomic_write_bytes(directory / f"node-{s.global_index}.json",
                           s.model_dump_json().encode())
    return tmp_path


def report(*args: str):
    return runner.invoke(app, ["report", *args])


def test_the_text_json_and_html_tell_the_same_story(tmp_path):
    shared = volume(tmp_path)
    base = ["--shared-dir", str(shared), "--run-id", RUN, "--attempt", ATTEMPT]
    text = report(*base, "--html", str(tmp_path / "start.html"))
    assert text.exit_code == 0, text.stderr
    assert "last arrival: worker 2 (node 3) published 4.80 s after master 0 (node 0)" \
        in text.stdout
    page = (tmp_path / "start.html").read_text()
    assert "last arrival: worker 2 (node 3) published 4.80 s after master 0 (node 0)" in page
    doc = json.loads(report(*base, "--json").stdout)
    # Without attempt.json (a copied volume) the attempt with summaries is found.
    assert json.loads(report(*base[:4], "--json").stdout)["attempt_id"] == ATTEMPT
    assert doc["schema_version"] == 1 and doc["node_count"] == 4
    assert doc["words"][0] in text.stdout
    assert [r["label"] for r in doc["rows"]] == ["0 m0", "1 w0", "2 w1", "3 w2"]
    assert [s["global_index"] for s in doc["summaries"]] == [0, 1, 2, 3]


def test_an_attempt_without_summaries_names_the_ones_that_have_them(tmp_path):
    shared = volume(tmp_path)
    done = report("--shared-dir", str(shared), "--run-id", RUN, "--attempt", "1-old")
    assert done.exit_code == 1
    assert f"error: no node summaries for run '{RUN}', attempt '1-old'" in done.stderr
    assert f"hint: attempts with summaries: {ATTEMPT} (--attempt)" in done.stderr


def test_bad_arguments_are_one_line_each(tmp_path):
    shared = volume(tmp_path)
    base = ["--shared-dir", str(shared), "--run-id", RUN, "--attempt", ATTEMPT]
    unwritable = report(*base, "--html", str(tmp_path / "nope" / "x.html"))
    assert unwritable.exit_code == 1
    assert f"error: cannot write --html {tmp_path / 'nope' / 'x.html'}" in unwritable.stderr
    assert report(*base, "--width", "5").exit_code == 2
    missing = report("--shared-dir", str(tmp_path / "absent"), "--run-id", RUN)
    assert missing.exit_code == 1 and "does not exist" in missing.stderr
    for done in (unwritable, missing):
        assert "Traceback" not in done.stderr
