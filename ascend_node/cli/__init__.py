"""The command line: `ascend-node` (also `python -m ascend_node`).

`app` holds the typer app and maps every error to the contract's exit code; the commands
live in `pod_cmds`, `pd_cmds`, `job_cmds` and `offline_cmds`, and are registered when first
needed (`app.Commands`: a pod's command imports its own module only).
"""

from typing import Optional

from ascend_node import pydantic_plugins
from ascend_node.cli.app import POD_COMMANDS, Commands, app, end_now


def main(argv: Optional[list[str]] = None) -> None:
    """Console-script entry point (and `python -m ascend_node`). With the process's own
    arguments (`argv` None) a pod's command ends without the interpreter's teardown
    (`app.end_now`); called with `argv` (a test, a harness that goes on afterwards) it
    ends as click does, by `SystemExit`."""
    pydantic_plugins.disable_in_this_process()
    try:
        app(args=argv, prog_name="ascend-node")
    except SystemExit as exc:
        if argv is None and Commands.invoked in POD_COMMANDS:
            end_now(exc.code)
        raise


__all__ = ["app", "main"]
