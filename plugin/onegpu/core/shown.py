"""Values from an operator's or a publisher's file, shown in an error message at a bounded length.

A hostile or broken file can hold a megabyte-long name or number; the message names it without carrying it.
"""
from __future__ import annotations

import json


def cut(text: str, limit: int = 80) -> str:
    """`text`, or its first `limit - 3` characters and "..." when it is longer than `limit`."""
    return text if len(text) <= limit else text[:limit - 3] + "..."


def as_json(value) -> str:
    """A value as JSON, cut to 80 characters."""
    return cut(json.dumps(value, ensure_ascii=False))
