"""Where this container's outputs go, decided before the rendezvous.

A non-root image (MindIE's run as uid 1001) cannot write `/master`, `/world_size` or the
default state dir `/run/ascend-node`. Found only when the table is written, that failure
comes after the peers have waited for this node and met it: they then wait for nothing.
So every output path is checked up front:

- a path given explicitly (flag or environment) that cannot be written is a ConfigError
  (exit 1, one line naming it) before the rendezvous;
- a default that cannot be written moves to its documented fallback: the state dir to
  `$XDG_RUNTIME_DIR/ascend-node`, else `/tmp/ascend-node-<uid>` (statedir); `/master` and
  `/world_size` to `<state dir>/master` and `<state dir>/world_size`. Each move is logged
  and shows in `--verbose`'s sources (docs/deploy.md, "Non-root").
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Optional

from ascend_node.errors import ConfigError
from ascend_node.settings import OPTIONS, Settings
from ascend_node.statedir import place_state_dir

log = logging.getLogger("ascend_node.placement")

FALLBACK_NAMES = {"master_file": "master", "world_size_file": "world_size"}


def unwritable_file(path: Path) -> Optional[str]:
    """None when `path` can be (re)written atomically (a temp file beside it, renamed);
    else why. A missing directory is a reason, never created: a typo in a path must not
    make directories anywhere (as root, anywhere at all)."""
    if path.is_dir():
        return "is a directory"
    parent = path.parent
    if not parent.is_dir():
        return f"directory {parent} does not exist"
    if not os.access(parent, os.W_OK | os.X_OK):
        return f"{parent} is not writable (Permission denied)"
    return None


def _origin(settings: Settings, name: str) -> str:
    return settings.sources.get(name, "default")


def place_outputs(settings: Settings, environ: Mapping[str, str]) -> Settings:
    """`settings` with the state dir and the master/world-size files moved where they can
    be written; ConfigError for an explicit path that cannot be."""
    sources = dict(settings.sources)
    explicit = _origin(settings, "state_dir") != "default"
    state_dir, note = place_state_dir(settings.state_dir, explicit, environ)
    if note:
        log.info("%s", note)
        sources["state_dir"] = f"fallback ({note})"
    update: dict[str, object] = {"state_dir": state_dir}
    for name, fallback in FALLBACK_NAMES.items():
        path: Path = getattr(settings, name)
        why = unwritable_file(path)
        if why is None:
            continue
        origin = _origin(settings, name)
        if origin != "default":
            flag = next(o.flag for o in OPTIONS if o.name == name)
            raise ConfigError(f"cannot write {path} ({origin}): {why}",
                              f"give {flag} a writable path, or leave it unset to use "
                              f"{state_dir / fallback}")
        moved = state_dir / fallback
        log.info("%s is not writable for uid %d (%s); writing %s instead", path, os.getuid(),
                 why, moved)
        update[name] = moved
        sources[name] = f"fallback ({path} not writable)"
    return settings.model_copy(update={**update, "sources": sources})


__all__ = ["place_outputs", "unwritable_file"]
