"""How the agent's commands are confined in this run, said once, at its start.

``sandbox: auto`` runs commands unconfined where bubblewrap does not work. That must never be
silent: an unconfined command can write the state directory and the workspace's ``.git`` and
read the whole file system (SECURITY.md). So the run's ``run_started`` records the choice in
words, the live view and ``pilot show`` print it, and the report carries it; a workflow that
wants no sandbox says ``sandbox: none``.
"""

from __future__ import annotations

from tools.sandbox import bwrap_status

UNCONFINED = "none"
"""How every unconfined choice begins (``is_unconfined``)."""


def confinement(mode: str) -> str:
    """``bwrap``, or ``none`` with why: the workflow chose it, or ``auto`` found no
    working bubblewrap (and why not)."""
    if mode == "none":
        return f"{UNCONFINED} (the workflow chose sandbox: none)"
    status = bwrap_status()
    if status.available:
        return "bwrap"
    if mode == "bwrap":  # every command will be refused with the reason
        return f"bwrap, which cannot run here: {status.reason}"
    return (
        f"{UNCONFINED}: sandbox: auto and {status.reason}; the agent's commands run "
        "unconfined (install bubblewrap, or write sandbox: none to choose this)"
    )


def is_unconfined(described: str) -> bool:
    """A ``confinement`` text that says the commands run without the sandbox."""
    return described.startswith(UNCONFINED)
