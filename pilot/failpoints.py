"""Failpoints: deliberate crashes at exact places, for the crash tests and the chaos bench.

Off unless ``MARATHON_FAILPOINT`` is set in the environment, e.g. ``kill_after_seq=7`` (the
process SIGKILLs itself right after event 7 of the run is committed). A real SIGKILL, not an
exception: nothing after it runs, exactly as when the OOM killer or a power cut strikes.
"""

from __future__ import annotations

import os
import signal


def kill_after_seq_from_env() -> int | None:
    spec = os.environ.get("MARATHON_FAILPOINT", "")
    for part in spec.split(","):
        name, _, value = part.partition("=")
        if name.strip() == "kill_after_seq" and value.strip().isdigit():
            return int(value)
    return None


def die_now() -> None:
    os.kill(os.getpid(), signal.SIGKILL)
