"""What `boot` takes out of the server's environment, and what it found there (pure).

- **Proxies.** MindIE's multi-node guide (`rank_table_file_configuration.md`) says to
  unset `http_proxy` / `https_proxy`: the gloo connection and MindIE's inter-node HTTP go
  through a proxy inherited from the image and fail ("GLOO connection refused", MindIE-LLM
  `docs/zh/faq/faq.md`). `boot` removes them (both spellings, and `all_proxy`) for a
  multi-node MindIE server; training launchers keep them, with a note (their traffic is
  not HTTP, but a job's downloads may need the proxy).
- **A rank table from elsewhere.** An image whose environment already sets
  `RANK_TABLE_FILE` / `RANKTABLEFILE` to another file: the server gets this job's table
  instead, and the note names both. `/etc/hccl_rootinfo.json` mounted by the container
  runtime from the host (GPUStack's runtime PR #27: an old v1.0 table there broke a newer
  chip with EI0014): the agent cannot unmount it, so it says what it found and that the
  server was given RANK_TABLE_FILE.

Every change and note is printed with `--verbose` and recorded in `env.json`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

PROXY_VARS = ("http_proxy", "https_proxy", "all_proxy", "HTTP_PROXY", "HTTPS_PROXY",
              "ALL_PROXY")
RANK_TABLE_VARS = ("RANK_TABLE_FILE", "RANKTABLEFILE")
HCCL_ROOTINFO = "/etc/hccl_rootinfo.json"


@dataclass(frozen=True)
class EnvChanges:
    unset: tuple[str, ...] = ()
    notes: tuple[str, ...] = field(default=())


def proxy_changes(environ: Mapping[str, str], launcher: str, node_count: int) -> EnvChanges:
    present = tuple(n for n in PROXY_VARS if environ.get(n, "").strip())
    if not present:
        return EnvChanges()
    names = ", ".join(present)
    if launcher == "mindie" and node_count > 1:
        return EnvChanges(present, (
            f"unset {names} for the server: MindIE's multi-node guide asks for no proxy "
            "(gloo and MindIE's inter-node HTTP would go through it and fail)",))
    return EnvChanges((), (f"kept {names} in the server's environment (launcher "
                           f"{launcher}); unset them if its inter-node traffic must not use "
                           "a proxy",))


def rank_table_notes(environ: Mapping[str, str], ours: Optional[str]) -> tuple[str, ...]:
    """The image's own RANK_TABLE_FILE / RANKTABLEFILE when it is not this job's table.
    `ours` None: the server gets no table (one node: MindIE wants none)."""
    out = []
    for name in RANK_TABLE_VARS:
        theirs = environ.get(name, "").strip()
        if theirs and theirs != ours:
            used = f"this job's table {ours}" if ours else "none (one node: unset)"
            out.append(f"the image's environment sets {name}={theirs}; the server gets "
                       f"{used} instead")
    return tuple(out)


def describe_rootinfo(text: Optional[str], ours: Optional[str]) -> Optional[str]:
    """A note on a mounted /etc/hccl_rootinfo.json (None when absent): its version and
    servers as far as it parses, and what the server was given."""
    if text is None:
        return None
    what = "unreadable as JSON"
    try:
        doc = json.loads(text)
        if isinstance(doc, dict):
            servers = doc.get("server_list")
            count = len(servers) if isinstance(servers, list) else "no"
            what = f"version {doc.get('version', '?')!s:.16}, {count} server(s)"
    except ValueError:
        pass
    given = f"RANK_TABLE_FILE={ours}" if ours else "no rank table (one node)"
    return (f"{HCCL_ROOTINFO} is present ({what}), mounted from the host by the container "
            f"runtime; the agent cannot remove it and gives the server {given} (an old "
            "table there has broken HCCL with EI0014: remove the mount from the runtime's "
            "configuration if HCCL reads it)")


def rootinfo_note(path: Path, ours: Optional[str]) -> Optional[str]:
    """`describe_rootinfo` of the file at `path` (the door: reads at most 1 MB of it)."""
    try:
        text: Optional[str] = path.read_text(errors="replace")[:1_000_000]
    except FileNotFoundError:
        text = None
    except OSError as exc:
        text = f"(unreadable: {exc.strerror})"
    return describe_rootinfo(text, ours)


__all__ = ["HCCL_ROOTINFO", "PROXY_VARS", "EnvChanges", "describe_rootinfo",
           "proxy_changes", "rank_table_notes", "rootinfo_note"]
