"""Issue 27: one option type per kind of value, refusing what means nothing (exit 2, one
line naming the flag and the value, a hint with a value that works), and a `--help`
that tells the truth: commands grouped by who runs them, choices named, no cut summary."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from ascend_node.cli import app
from tests.cli_helpers import cli_runner

runner = cli_runner()


@pytest.mark.parametrize(("args", "cause"), [
    (["status", "--wait", "--wait-timeout", "-1"],
     "--wait-timeout -1 is not a finite number of seconds > 0"),
    (["status", "--wait-timeout", "inf"],
     "--wait-timeout inf is not a finite number of seconds > 0"),
    (["doctor", "--peer-wait", "nan"], "--peer-wait nan is not a finite number of seconds > 0"),
    (["ranktable", "--timeout", "0"], "--timeout 0 is not a finite number of seconds > 0"),
    (["boot", "--timeout", "1e999"], "--timeout 1e999 is not a finite number of seconds > 0"),
    (["report", "--attempt", "../../etc"], "--attempt '../../etc' is not an attempt id"),
    (["report", "--attempt", "a/b"], "--attempt 'a/b' is not an attempt id"),
    (["manifest", "--npus-per-node", "0"], "--npus-per-node 0 is out of range"),
    # issue 36: click said only "'1e9' is not a valid int."
    (["manifest", "--timeout", "1e9"], "--timeout '1e9' is not an integer"),
    (["manifest", "--nodes", "2.0"], "--nodes '2.0' is not an integer"),
    (["manifest", "--run-as-user", "0x10"], "--run-as-user '0x10' is not an integer"),
    (["manifest", "--kind", "mindie-pd", "--prefill-pods", "two"],
     "--prefill-pods 'two' is not an integer"),
    (["boot", "--master-port", "80.5"], "--master-port '80.5' is not an integer"),
    (["validate", "x.json", "--owner-uid", "-1"], "--owner-uid -1 is out of range"),
])
def test_a_meaningless_value_is_a_usage_error_naming_the_flag(args: list[str], cause: str
                                                              ) -> None:
    done = runner.invoke(app, args, env={"ASCEND_NODE_DEBUG": ""})
    assert done.exit_code == 2, (done.stdout, done.stderr)
    lines = done.stderr.splitlines()
    assert lines[0] == f"ascend-node: error: {cause}", done.stderr
    assert len(lines) == 2 and lines[1].startswith("  hint: ")
    assert "--help" not in lines[1]  # a value that works, not a pointer to a help without one
    assert done.stdout == ""


def test_a_master_file_in_a_missing_directory_is_named_and_not_created(tmp_path: Path
                                                                       ) -> None:
    from ascend_node.sim.fake_tools import write_node_data
    from tests.cluster_helpers import make_nodes

    node = make_nodes(tmp_path, 1, devices=1, timeout=60)[0]
    write_node_data(node.data_dir, node.devices)
    missing = tmp_path / "no" / "such" / "dir"
    env = {**node.env, "ASCEND_NODE_MASTER_FILE": str(missing / "master")}
    done = subprocess.run(node.argv, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 1, done.stderr
    # Named before the rendezvous (handoff.placement), with where the path came from.
    assert (f"ascend-node: error: cannot write {missing / 'master'} (environment "
            f"ASCEND_NODE_MASTER_FILE): directory {missing} does not exist") in done.stderr
    assert "joining run" not in done.stderr
    assert not (tmp_path / "no").exists()


def _help(*args: str) -> str:
    done = runner.invoke(app, [*args, "--help"])
    assert done.exit_code == 0, done.stderr
    return str(done.stdout)


def test_help_groups_the_commands_by_who_runs_them() -> None:
    text = _help()
    heads = [ln for ln in text.splitlines() if ln and not ln.startswith(" ") and ln.endswith(":")]
    assert heads[-3:] == ["In the pod (the container's command, its probes):",
                          "For the operator (against a running or finished job):",
                          "Offline (no job needed):"], heads
    sections = text.split("In the pod")[1]
    pod, rest = sections.split("For the operator")
    operator, offline = rest.split("Offline")
    for name in ("discover", "ranktable", "boot", "env", "status"):
        assert f"\n  {name} " in pod
    for name in ("validate", "doctor", "report", "clean"):
        assert f"\n  {name} " in operator
    for name in ("simulate", "manifest", "version"):
        assert f"\n  {name} " in offline
    assert "\nCommands:" not in text  # every command is in a group
    listed = text.split("In the pod")[1]
    assert "..." not in listed and "\u2026" not in listed  # no summary is cut


@pytest.mark.parametrize(("command", "shown"), [
    ("manifest", "--kind mindie|mindie-pd|training"), ("validate", "--for mindie|hccl"),
    ("boot", "--launcher mindie|msrun|ranktable-env|torch"), ("env", "--format sh|json"),
    ("ranktable", "--preflight strict|warn|off"), ("status", "--wait-timeout SECONDS"),
])
def test_help_names_the_choices_not_their_python_type(command: str, shown: str) -> None:
    text = _help(command)
    assert shown in text, text


def test_help_shows_the_command_after_the_double_dash() -> None:
    for command in ("boot", "manifest"):
        usage = _help(command).splitlines()[0]
        assert usage == f"Usage: ascend-node {command} [OPTIONS] [-- CMD [ARGS]...]", usage


def test_the_run_id_help_names_the_volcano_fallback() -> None:
    text = " ".join(_help("ranktable").split())
    assert "else the Volcano job name" in text


def test_help_stays_as_fast_as_before_no_rich() -> None:
    done = subprocess.run([sys.executable, "-X", "importtime", "-m", "ascend_node", "--help"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0
    assert "rich" not in {ln.rsplit("|", 1)[1].strip().split(".")[0]
                          for ln in done.stderr.splitlines() if ln.startswith("import time:")}


# Issue 36, item 2: a command that takes another program's command after `--` (`boot`,
# `pd-boot`, `manifest`) parses every word before `--` as its own. A typo was the server's
# command: `manifest --pcv model-pvc` rendered `args: ["--pcv", "model-pvc"]` (every pod
# then exits 127 after the rendezvous); `boot --launcer msrun` ran the whole rendezvous.
@pytest.mark.parametrize(("args", "typed", "nearest"), [
    (["manifest", "--pcv", "model-pvc"], "--pcv", "--pvc"),
    (["boot", "--launcer", "msrun"], "--launcer", "--launcher"),
    (["boot", "--shared-dir", "/tmp", "--run-idd", "r1", "--", "python", "x.py"],
     "--run-idd", "--run-id"),
    (["pd-boot", "--motor-confg", "m.json", "--", "mindie_motor_controller"],
     "--motor-confg", "--motor-config"),
])
def test_an_unknown_option_before_the_double_dash_is_2_naming_the_nearest(
        args: list[str], typed: str, nearest: str) -> None:
    done = runner.invoke(app, args, env={"ASCEND_NODE_DEBUG": ""})
    assert done.exit_code == 2, (done.stdout, done.stderr)
    assert done.stdout == ""
    error = [ln for ln in done.stderr.splitlines() if ln.startswith("Error: ")]
    # click's own words, as for `ranktable --bogus`: the option typed, then the nearest
    assert len(error) == 1 and error[0].startswith(f"Error: No such option: {typed} "), error
    assert nearest in error[0].split(typed, 1)[1], error
    assert "rank table source" not in done.stderr  # refused before any rendezvous


@pytest.mark.parametrize(("args", "word"), [
    (["boot", "msrun", "--", "train.py"], "'msrun'"),
    (["manifest", "--kind", "training", "python", "train.py"], "'python train.py'"),
    (["pd-boot", "mindie_motor_coordinator"], "'mindie_motor_coordinator'"),
])
def test_a_stray_word_before_the_double_dash_is_2_with_the_hint_to_move_it(
        args: list[str], word: str) -> None:
    done = runner.invoke(app, args, env={"ASCEND_NODE_DEBUG": ""})
    assert done.exit_code == 2, (done.stdout, done.stderr)
    assert done.stdout == ""
    (error,) = [ln for ln in done.stderr.splitlines() if ln.startswith("Error: ")]
    assert f"Unexpected word{'s' if ' ' in word else ''} {word} before '--'" in error, error
    assert f"-- {word[1:-1]}" in error  # where it belongs


def test_every_word_after_the_double_dash_is_the_servers_untouched() -> None:
    import json

    done = runner.invoke(app, ["manifest", "--kind", "training", "--json", "--", "python",
                               "--pcv", "x", "--help", "--", "-v"])
    assert done.exit_code == 0, done.stderr
    (container,) = json.loads(done.stdout)["spec"]["tasks"][0]["template"]["spec"][
        "containers"]
    assert container["args"] == ["python", "--pcv", "x", "--help", "--", "-v"]


def test_every_command_taking_a_command_after_the_double_dash_follows_one_rule() -> None:
    """Found by their usage line (`-- CMD`), not by a list kept by hand: each is a
    `ServerCommand`, and no command passes an unknown option on (ignore_unknown_options)."""
    import typer.main

    from ascend_node.cli.app import ServerCommand

    group: Any = typer.main.get_command(app)
    takers = set()
    for name, command in group.commands.items():
        assert not command.context_settings.get("ignore_unknown_options"), name
        if "-- CMD" in (command.options_metavar or ""):
            takers.add(name)
            assert isinstance(command, ServerCommand), name
        else:
            assert not isinstance(command, ServerCommand), name
    assert takers == {"boot", "pd-boot", "manifest", "launch"}


def _value_options() -> list[tuple[str, str]]:
    """(command, option) for every option of every command that takes a value."""
    import typer.main

    from ascend_node.cli.app import value_options

    group: Any = typer.main.get_command(app)
    return sorted((name, flag) for name, command in group.commands.items()
                  for flag in value_options(command) if flag.startswith("--"))


# Issue 36, item 7: `--devices ''` used npu-smi's list, `--shared-dir ''` and `--state-dir ''`
# became the current directory, `--hccn-tool ''` the default, `--run-id ''` was 2. One rule
# (cli.app.empty_option): an option given an empty or blank value is exit 2 naming it.
@pytest.mark.parametrize(("command", "flag"), _value_options())
def test_every_option_given_an_empty_value_is_2_naming_it(command: str, flag: str) -> None:
    for args, shown in (([flag, ""], "''"), ([f"{flag}= "], "' '")):
        done = runner.invoke(app, [command, *args], env={"ASCEND_NODE_DEBUG": ""})
        assert done.exit_code == 2, (command, args, done.stdout, done.stderr)
        assert done.stdout == ""
        cause = "empty" if shown == "''" else "blank"
        assert done.stderr.splitlines() == [
            f"ascend-node: error: {flag} {shown} is {cause}",
            f"  hint: give {flag} a value, or leave it out for its default (an empty "
            "environment variable counts as unset)"], done.stderr


def test_the_value_options_table_holds_the_ones_the_issue_named() -> None:
    table = set(_value_options())
    for pair in (("discover", "--devices"), ("ranktable", "--shared-dir"),
                 ("boot", "--state-dir"), ("boot", "--hccn-tool"), ("status", "--state-dir"),
                 ("ranktable", "--run-id"), ("manifest", "--pvc"), ("simulate", "--table-out")):
        assert pair in table


@pytest.mark.parametrize(("words", "found"), [
    (["--devices", ""], ("--devices", "")),
    (["--devices="], ("--devices", "")),
    (["--json", "--devices", "\t"], ("--devices", "\t")),
    (["--run-id", "--devices", "x"], None),  # `--devices` is --run-id's value here
    (["--run-id", "", "--devices", ""], ("--run-id", "")),
    (["--", "--devices", ""], None),  # the server's words
    (["--json", ""], None),  # a flag takes no value: the '' is click's to refuse
    (["--devices", "0-3"], None),
    (["--devices"], None),  # click says it needs a value
])
def test_empty_option_reads_the_words_as_click_does(words: list[str],
                                                    found: Any) -> None:
    from ascend_node.cli.app import empty_option

    assert empty_option(frozenset({"--devices", "--run-id"}), words) == found


def test_an_integer_option_names_what_it_takes() -> None:
    done = runner.invoke(app, ["manifest", "--timeout", "1e9"], env={"ASCEND_NODE_DEBUG": ""})
    assert done.stderr.splitlines() == [
        "ascend-node: error: --timeout '1e9' is not an integer",
        "  hint: --timeout takes an integer, in digits, e.g. --timeout 900"]


def test_every_integer_option_of_manifest_and_validate_is_one_type() -> None:
    """No int option left to click's bare "is not a valid int." (simulate's and report's
    keep click's IntRange, whose refusal names the range)."""
    import typer.main

    group: Any = typer.main.get_command(app)
    for name in ("manifest", "validate", "boot"):
        for p in group.commands[name].params:
            if type(p.type).__name__ in ("IntParamType", "IntRange"):
                raise AssertionError(f"{name} {p.opts[0]} is click's int")
