"""Commands are registered lazily (issue 30): a command imports the one `cli/` module that
defines it, `--help` still lists every command in its group and order, and a command the
map of homes does not name still runs.

Each case runs in a fresh interpreter: in this process other tests have imported every
command module already, which would hide an eager import.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from ascend_node.cli.app import COMMAND_HOMES, COMMAND_MODULES

pytestmark = pytest.mark.multiprocess

_PROBE = """
import json, sys
from ascend_node.cli import main
try:
    main(sys.argv[1:])
except SystemExit as end:
    code = end.code
else:
    code = 0
loaded = sorted(m.rpartition(".")[2] for m in sys.modules if m.startswith("ascend_node.cli."))
print(json.dumps({"code": code, "loaded": loaded}), file=sys.stderr)
"""


def _run(*args: str, prelude: str = "") -> tuple[dict, str]:
    done = subprocess.run([sys.executable, "-c", prelude + _PROBE, *args],
                          capture_output=True, text=True, timeout=120)
    return json.loads(done.stderr.strip().splitlines()[-1]), done.stdout


@pytest.mark.parametrize("name", sorted(COMMAND_HOMES))
def test_a_command_loads_its_own_module_only(name: str) -> None:
    got, out = _run(name, "--help")
    assert got["code"] == 0 and f"ascend-node {name}" in out
    # cli/job_options: the Job options `manifest` and `launch` share, declared once
    shared = {"job_options"} if COMMAND_HOMES[name] in ("offline_cmds", "launch_cmds") else set()
    assert got["loaded"] == sorted({"app", "options", COMMAND_HOMES[name], *shared}), got


def test_the_root_help_lists_every_command() -> None:
    got, out = _run("--help")
    assert got["code"] == 0
    assert set(COMMAND_MODULES) <= set(got["loaded"])
    listed = [line.split()[0] for line in out.splitlines()
              if line.startswith("  ") and line.split()[0] in COMMAND_HOMES]
    assert sorted(listed) == sorted(COMMAND_HOMES)
    # within a group, in the order the modules define them (pod_cmds: discover first)
    assert listed.index("discover") < listed.index("ranktable") < listed.index("status")


def test_the_help_is_the_same_whichever_module_was_imported_first() -> None:
    _, plain = _run("--help")
    _, offline_first = _run("--help", prelude="import ascend_node.cli.offline_cmds\n")
    assert offline_first == plain


def test_the_map_names_the_module_that_defines_each_command() -> None:
    import typer

    from ascend_node.cli import app

    root = typer.main.get_command(app)
    defined = {name: cmd.callback.__module__.rpartition(".")[2]
               for name, cmd in root.commands.items()}  # type: ignore[attr-defined]
    assert defined == COMMAND_HOMES, (
        "a command was added or moved: name its module in cli.app.COMMAND_HOMES")


def test_a_command_missing_from_the_map_still_runs() -> None:
    got, out = _run("version", prelude="import sys, ascend_node.cli.app\n"
                    "del sys.modules['ascend_node.cli.app'].COMMAND_HOMES['version']\n")
    assert got["code"] == 0 and out.strip()
    assert set(COMMAND_MODULES) <= set(got["loaded"])


def test_a_mistyped_command_is_a_usage_error() -> None:
    got, _ = _run("discoverr")
    assert got["code"] == 2


def test_the_listing_summarises_each_command_as_its_own_help_does() -> None:
    """`--help` reads each summary from the registration, not from the built command:
    the two agree for every command, on the click this interpreter has."""
    import typer

    from ascend_node.cli import app
    from ascend_node.cli.app import Commands

    full = typer.main.get_command(app).commands  # type: ignore[attr-defined]
    lean = Commands(name="ascend-node")
    summaries = dict(lean._summaries())
    assert list(summaries) == list(full)
    for name, cmd in full.items():
        assert summaries[name].get_short_help_str(limit=500) == cmd.get_short_help_str(limit=500)
        assert (summaries[name].hidden, getattr(summaries[name], "rich_help_panel", None)) == (
            cmd.hidden, getattr(cmd, "rich_help_panel", None))
