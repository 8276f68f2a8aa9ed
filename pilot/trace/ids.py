"""Trace and span ids derived from what is stored, never drawn at random.

A run's trace id comes from its run id and each span's id from the run id and the key of the
event that opened it (its seq), so exporting the same run twice, or again after a resume,
gives the same ids to the same spans and a collector or viewer sees one trace, not copies.
"""

from __future__ import annotations

import hashlib

RUN_KEY = "run"
"""The key of the run's own span (every other span's key is the seq of its first event)."""


def _digest(*parts: str) -> bytes:
    return hashlib.sha256("\x1f".join(("marathon-trace", *parts)).encode()).digest()


def _nonzero(value: int, *parts: str) -> int:
    """OpenTelemetry reads an all-zero id as "no id": hash once more in that (2^-64) case."""
    while value == 0:
        parts = (*parts, "again")
        value = int.from_bytes(_digest(*parts)[:8], "big")
    return value


def trace_id(run_id: str) -> int:
    """The run's 128-bit trace id."""
    return _nonzero(int.from_bytes(_digest(run_id)[:16], "big"), run_id)


def span_id(run_id: str, key: str) -> int:
    """The 64-bit id of the span ``key`` (``RUN_KEY`` or an event's seq as text) of a run."""
    return _nonzero(int.from_bytes(_digest(run_id, key)[:8], "big"), run_id, key)


def hex_trace_id(run_id: str) -> str:
    """The trace id as viewers show it and search for it (32 hex digits)."""
    return f"{trace_id(run_id):032x}"
