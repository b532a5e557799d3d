"""The serve adapter's limits in the adapter tests (LIMITS) and a completion request body (completion_body)."""
from __future__ import annotations

import json

from onegpu.serve.adapter import AdapterLimits

LIMITS = AdapterLimits(header_timeout_s=0.5, idle_timeout_s=5, body_timeout_s=1, upstream_timeout_s=5)


def completion_body(stream=False, **extra) -> bytes:
    # Deliberately odd formatting: a re-serialising proxy would change these bytes.
    doc = json.dumps({"model": "fake-org/fake-model", "prompt": "caf\u00e9 \u2713", "stream": stream, **extra},
                     indent=3, ensure_ascii=True)
    return doc.encode() + b"\n"
