"""A CliRunner that keeps stdout and stderr apart on every click version."""

from __future__ import annotations

from typing import Any

from typer.testing import CliRunner


def cli_runner() -> Any:
    """Click 8.2+ always separates the streams; click 8.1 (what Python 3.9 gets with
    typer) mixes them unless asked not to."""
    try:
        return CliRunner(mix_stderr=False)  # type: ignore[call-arg]
    except TypeError:
        return CliRunner()
