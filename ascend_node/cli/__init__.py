"""The command line: `ascend-node` (also `python -m ascend_node`).

`app` holds the typer app and maps every error to the contract's exit code; the commands
are registered by importing their modules, in the order `--help` lists them.
"""

from typing import Optional

# The order of registration is the order of `--help`.
# isort: off
from ascend_node.cli import pod_cmds  # noqa: F401
from ascend_node.cli import pd_cmds  # noqa: F401
from ascend_node.cli import job_cmds  # noqa: F401
from ascend_node.cli import offline_cmds  # noqa: F401
# isort: on
from ascend_node.cli.app import app


def main(argv: Optional[list[str]] = None) -> None:
    """Console-script entry point."""
    app(args=argv, prog_name="ascend-node")


__all__ = ["app", "main"]
