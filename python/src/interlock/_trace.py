"""W3C trace context: continue a work item's trace on its outcome."""

from __future__ import annotations

import os
import re

HEADER = "traceparent"
_TP = re.compile(r"00-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})")


def new() -> str:
    return f"00-{os.urandom(16).hex()}-{os.urandom(8).hex()}-01"


def child(tp: str | None) -> str:
    """A new span of ``tp``'s trace; a new trace when ``tp`` is not valid."""
    m = _TP.fullmatch(tp or "")
    if m is None or m.group(1) == "0" * 32 or m.group(2) == "0" * 16:
        return new()
    return f"00-{m.group(1)}-{os.urandom(8).hex()}-{m.group(3)}"
