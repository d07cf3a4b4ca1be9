"""Every option of every command says what it is for (`--help` is the first manual a user
reads), and no argument shows its Python name (`{file}`) instead of a metavar."""

from __future__ import annotations

import re

import pytest
import typer

from ascend_node.cli import app
from tests.cli_helpers import cli_runner

COMMANDS = typer.main.get_command(app)  # a click group (typer vendors click since 0.2x)

# Help that only names the environment twin and the default says nothing about purpose.
_ONLY_ENV = re.compile(r"^\(env [^)]*\)$")


def _commands() -> list[str]:
    commands = COMMANDS.commands  # type: ignore[attr-defined]
    return sorted(commands)


@pytest.mark.parametrize("name", _commands())
def test_every_option_has_a_description(name: str) -> None:
    command = COMMANDS.commands[name]  # type: ignore[attr-defined]
    missing = []
    for param in command.params:
        text = (getattr(param, "help", None) or "").strip()
        if not text or _ONLY_ENV.match(text):
            missing.append("/".join(param.opts))
    assert missing == [], f"{name}: options without a description: {missing}"


@pytest.mark.parametrize("name", _commands())
def test_help_shows_no_placeholder_metavar(name: str) -> None:
    result = cli_runner().invoke(app, [name, "--help"])
    assert result.exit_code == 0, result.output
    # typer writes a required argument as {NAME}: a parameter's Python name in braces
    # (`{file}`) is the placeholder a metavar replaces.
    assert re.search(r"\{[a-z_]+\}", result.output) is None, result.output


def test_validate_names_its_argument_file() -> None:
    result = cli_runner().invoke(app, ["validate", "--help"])
    usage = result.output.splitlines()[0]
    assert re.fullmatch(r"Usage: ascend-node validate \[OPTIONS\] \{?FILE\}?", usage), usage


def test_the_root_options_have_a_description() -> None:
    missing = ["/".join(p.opts) for p in COMMANDS.params
               if not (getattr(p, "help", None) or "").strip()]
    assert missing == []
