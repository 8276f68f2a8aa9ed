"""Keep Python's cyclic garbage collector off the heap that lives as long as the process.

A pilot process imports the SDK, pydantic, SQLAlchemy and our event models before its first
step: a few hundred thousand objects that stay until it exits. With the default thresholds
the collector rescans all of them at every full collection, in pauses that every run waits
through, since they all share one event loop (figures in bench/README.md, `bench/parallel.py`).
Freezing the start-up heap moves those objects out of the collector's sight; the higher
young-generation threshold means fewer, larger young collections. vLLM and SGLang freeze
their heaps after start-up for the same reason. Nothing here changes what is freed: objects
without cycles go at once by reference counting, and cycles are still collected.
"""

from __future__ import annotations

import gc

__all__ = ["YOUNG_THRESHOLD", "settle_startup_heap"]

YOUNG_THRESHOLD = 20_000
"""Allocations between young collections (CPython's default is 700 before 3.13)."""
OLDER_THRESHOLDS = (20, 50)
"""Young collections per middle one, middle ones per full one."""


def settle_startup_heap() -> int:
    """Freeze the heap as it is and raise the thresholds; returns the frozen object count.

    Call it when a long-running command has imported what it needs and before its event loop
    starts work (``pilot run``, ``resume``, ``worker``). No collection first: after the
    imports one is a full scan that finds next to nothing, which is worse than keeping it.
    Calling it again freezes what has accumulated since, which is harmless.
    """
    gc.freeze()
    gc.set_threshold(YOUNG_THRESHOLD, *OLDER_THRESHOLDS)
    return gc.get_freeze_count()
