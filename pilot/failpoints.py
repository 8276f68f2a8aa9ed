"""Failpoints: deliberate crashes at exact places, for the crash tests and the chaos bench.

Off unless ``MARATHON_FAILPOINT`` is set in the environment, e.g. ``kill_after_seq=7`` (the
process SIGKILLs itself right after event 7 of the run is committed) or
``kill_at=tool_returned:2`` (at the second time the named place is reached). A real SIGKILL,
not an exception: nothing after it runs, exactly as when the OOM killer or a power cut strikes.

Named places (``kill_at``), in the order a run meets them:

- ``startup``: the run's row exists, nothing of its workspace is prepared yet;
- ``worktree_add`` / ``worktree_added``: just before and just after ``git worktree add``;
- ``tool_returned``: a tool (a command) has returned, its result is not committed yet;
- ``result_committed``: a mutating tool's result is committed, its snapshot not yet taken;
- ``snapshot_mid``: inside a snapshot, its tree written, the snapshot ref not yet moved;
- ``snapshot_taken``: the snapshot is taken, its ``workspace_snapshot`` event not committed.

One knob rides along for the same tests: ``checkpoint_every=1`` makes state checkpoints
frequent, so that kills land between checkpoints and resumes start from them.
"""

from __future__ import annotations

import os
import signal

_reached: dict[str, int] = {}
"""How many times each named place was reached in this process (only counted when armed)."""


def _setting(wanted: str) -> str | None:
    spec = os.environ.get("MARATHON_FAILPOINT", "")
    for part in spec.split(","):
        name, _, value = part.partition("=")
        if name.strip() == wanted:
            return value.strip()
    return None


def _int_setting(wanted: str) -> int | None:
    value = _setting(wanted)
    return int(value) if value is not None and value.isdigit() else None


def kill_after_seq_from_env() -> int | None:
    return _int_setting("kill_after_seq")


def checkpoint_every_from_env(default: int) -> int:
    return max(1, _int_setting("checkpoint_every") or default)


def kill_at(place: str) -> None:
    """SIGKILL this process if ``kill_at=<place>[:<n>]`` is armed and this is the n-th time
    (default the first) that ``place`` is reached."""
    if "MARATHON_FAILPOINT" not in os.environ:
        return
    armed = _setting("kill_at")
    if armed is None:
        return
    name, _, nth = armed.partition(":")
    if name != place:
        return
    _reached[place] = _reached.get(place, 0) + 1
    if _reached[place] >= (int(nth) if nth.isdigit() else 1):
        die_now()


def die_now() -> None:
    os.kill(os.getpid(), signal.SIGKILL)
