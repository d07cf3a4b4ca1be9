"""`<state-dir>/preflight.json`: what the pre-flight found in this container.

Written by `preflight.record`, read by `status` — which must start fast (no pydantic), so
this module needs nothing but `json`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Optional

PREFLIGHT_JSON = "preflight.json"


def read_preflight(state_dir: Path) -> Optional[dict[str, Any]]:
    """The last pre-flight's findings, or None when none ran (or the file is damaged)."""
    try:
        doc = json.loads((state_dir / PREFLIGHT_JSON).read_text())
    except (OSError, ValueError):
        return None
    return doc if isinstance(doc, dict) else None
