"""The controller's configuration file (ms_controller.json), as far as the table needs it.

Its P/D flags and instance sizes decide which `deploy_server` values and device counts
the controller accepts (`motor_rules.flags_from_controller_config` reads them from the
parsed document; this module reads the file and turns what cannot be read into a usage
error naming the flag)."""

from __future__ import annotations

import json
from pathlib import Path

from ascend_node.errors import UsageError
from ascend_node.pd.motor_rules import InstanceFlags, flags_from_controller_config


def read_flags(path: Path) -> InstanceFlags:
    """The P/D flags of an ms_controller.json; a file that cannot say them is a usage error."""
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise UsageError(f"--controller-config {path}: {exc.strerror}",
                         "give the ms_controller.json the controller runs with") from exc
    except (UnicodeDecodeError, ValueError) as exc:
        raise UsageError(f"--controller-config {path} is not JSON: {exc}",
                         "give the ms_controller.json the controller runs with") from exc
    if not isinstance(config, dict):
        raise UsageError(f"--controller-config {path} is not a JSON object",
                         "give the ms_controller.json the controller runs with")
    try:
        return flags_from_controller_config(config)
    except ValueError as exc:
        raise UsageError(f"--controller-config {path}: {exc}",
                         "fix the controller's config; its shipped file has the shapes") from exc

