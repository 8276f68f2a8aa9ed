"""Running git for the harness, safely, in a workspace the agent controls.

The agent can write anything into ``.git/config`` through the run tool, and git executes
programs named there (fsmonitor, hooks, pagers, external diff, credential helpers, filters).
So every git call made by the tools: ignores the system and global config, overrides those
settings on the command line, and, for the git tools, runs inside the same sandbox as the run
tool (which also contains filters, the one setting that cannot be switched off generically).
Must not import ``pilot`` or ``brain``.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Sequence
from pathlib import Path

from tools.sandbox import SANDBOX_HOME, wrap
from tools.workspace import command_env

SAFE_GIT_CONFIG = (
    "-c",
    "core.fsmonitor=false",
    "-c",
    "core.quotepath=off",
    "-c",
    "core.hooksPath=/dev/null",
    "-c",
    "core.pager=cat",
    "-c",
    "core.untrackedCache=false",
    "-c",
    "core.editor=true",
    "-c",
    "core.askPass=",
    "-c",
    "credential.helper=",
    "-c",
    "commit.gpgsign=false",
    "-c",
    "tag.gpgsign=false",
    "-c",
    "diff.external=",
    "-c",
    "color.ui=false",
)


def git_env(extra: dict[str, str] | None = None, *, home: str | None = None) -> dict[str, str]:
    """A scrubbed environment for git: no system or global config, never a prompt."""
    env = command_env(home=home, tmpdir=home)
    env.update(
        {
            "GIT_CONFIG_NOSYSTEM": "1",
            "GIT_CONFIG_GLOBAL": os.devnull,
            "GIT_TERMINAL_PROMPT": "0",
            "GIT_OPTIONAL_LOCKS": "0",
        }
    )
    env.update(extra or {})
    return env


def run_git(
    root: Path,
    args: Sequence[str],
    *,
    sandbox: str = "none",
    writable: Sequence[Path] = (),
    extra_env: dict[str, str] | None = None,
    timeout: float = 120,
) -> subprocess.CompletedProcess[bytes]:
    """``git <args>`` in ``root`` with the safe configuration; output captured as bytes.

    With ``sandbox`` other than "none", git runs through ``tools.sandbox.wrap`` with ``root``
    and ``writable`` as the only writable paths (raises ``SandboxUnavailable`` for "bwrap"
    when bwrap cannot run).
    """
    argv = ["git", *SAFE_GIT_CONFIG, *args]
    home = None
    if sandbox != "none":
        argv, sandboxed = wrap(argv, mode=sandbox, writable=[root, *writable], cwd=root)
        home = SANDBOX_HOME if sandboxed else None
    return subprocess.run(
        argv,
        cwd=root,
        capture_output=True,
        env=git_env(extra_env, home=home),
        timeout=timeout,
        stdin=subprocess.DEVNULL,
    )
