"""Render a rank table to text: the same table gives the same bytes on every node."""

from __future__ import annotations

import json
from collections.abc import Mapping
from json.encoder import encode_basestring_ascii as _quote
from typing import Any


def render_rank_table(table: Mapping[str, Any]) -> str:
    """Canonical text of a table: every node renders equal tables to identical bytes.

    The text is exactly ``json.dumps(table, indent=2, ensure_ascii=True) + "\n"``: insertion
    order is kept (no key sorting) so the file reads in the order the HCCL docs show, and
    ``ensure_ascii`` keeps the bytes independent of the locale. The stdlib encoder falls back
    to pure Python when indenting, which costs most of the time for thousands of servers, so
    the common shapes (dicts with string keys, lists, scalars) are rendered here with the C
    string escaper; anything else goes to ``json.dumps`` itself.
    """
    try:
        return _render(table, "") + "\n"
    except (_Unrenderable, RecursionError):
        return json.dumps(table, indent=2, ensure_ascii=True) + "\n"


class _Unrenderable(Exception):
    """A value the fast path does not mirror exactly; json.dumps decides instead."""


def _render(value: object, indent: str) -> str:
    if isinstance(value, str):
        return _quote(value)
    if isinstance(value, dict):
        if not value:
            return "{}"
        inner = indent + "  "
        parts = []
        for key, item in value.items():
            if not isinstance(key, str):
                raise _Unrenderable
            parts.append(f"{inner}{_quote(key)}: {_render(item, inner)}")
        return "{\n" + ",\n".join(parts) + "\n" + indent + "}"
    if isinstance(value, (list, tuple)):
        if not value:
            return "[]"
        inner = indent + "  "
        return (
            "[\n" + ",\n".join(inner + _render(item, inner) for item in value) + "\n" + indent + "]"
        )
    if value is None or isinstance(value, (bool, int, float)):
        return json.dumps(value)
    raise _Unrenderable
