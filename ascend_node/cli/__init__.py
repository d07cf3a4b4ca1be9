"""The command line: `ascend-node` (also `python -m ascend_node`).

`app` holds the typer app and maps every error to the contract's exit code; the commands
live in `pod_cmds`, `pd_cmds`, `job_cmds` and `offline_cmds`, and are registered when first
needed (`app.Commands`: a pod's command imports its own module only).
"""

from typing import Optional

from ascend_node import pydantic_plugins
from ascend_node.cli.app import app


def main(argv: Optional[list[str]] = None) -> None:
    """Console-script entry point."""
    pydantic_plugins.disable_in_this_process()
    app(args=argv, prog_name="ascend-node")


__all__ = ["app", "main"]
