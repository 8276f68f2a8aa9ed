"""`pilot cancel` heard at once: the run's owner is told by a signal, not left to a poll.

A cancel is written to the store (the run's status ``cancelling``), where the run reads it when
it renews its lease (every 20 s). A process that drives runs from the command line installs a
handler for ``CANCEL_SIGNAL`` and says so in its lease owner id (``host:pid:nonce:bell``), so
``pilot cancel`` on the same host sends it that signal and the run reads its status at once,
then stops at its next safe point. An owner that did not say so is never signalled (the
signal's default action would kill it); an owner on another host hears it at its next renewal.
"""

from __future__ import annotations

import os
import signal
import socket

CANCEL_SIGNAL = signal.SIGUSR1
BELL = "bell"
"""The last part of the lease owner id of a process that hears ``CANCEL_SIGNAL``."""


def with_bell(owner: str) -> str:
    """``owner`` (``host:pid:nonce``) marked as one that hears the cancel signal."""
    return f"{owner}:{BELL}"


def ring(owner: str | None) -> bool:
    """Signal the lease owner ``owner`` that a run of its was asked to cancel; whether it was
    told (False: not on this host, not one that hears it, or gone)."""
    if not owner:
        return False
    parts = owner.split(":")
    if len(parts) < 4 or parts[-1] != BELL or parts[0] != socket.gethostname():
        return False
    if not parts[1].isdigit():
        return False
    try:
        os.kill(int(parts[1]), CANCEL_SIGNAL)
    except OSError:  # gone, or not ours
        return False
    return True
