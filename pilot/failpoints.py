"""Failpoints: deliberate crashes at exact places, for the crash tests and the chaos bench.

Off unless ``MARATHON_FAILPOINT`` is set in the environment, e.g. ``kill_after_seq=7`` (the
process SIGKILLs itself right after event 7 of the run is committed). A real SIGKILL, not an
exception: nothing after it runs, exactly as when the OOM killer or a power cut strikes.
One knob rides along for the same tests: ``checkpoint_every=1`` makes state checkpoints
frequent, so that kills land between checkpoints and resumes start from them.
"""

from __future__ import annotations

import os
import signal


def _setting(wanted: str) -> int | None:
    spec = os.environ.get("MARATHON_FAILPOINT", "")
    for part in spec.split(","):
        name, _, value = part.partition("=")
        if name.strip() == wanted and value.strip().isdigit():
            return int(value)
    return None


def kill_after_seq_from_env() -> int | None:
    return _setting("kill_after_seq")


def checkpoint_every_from_env(default: int) -> int:
    return max(1, _setting("checkpoint_every") or default)


def die_now() -> None:
    os.kill(os.getpid(), signal.SIGKILL)
