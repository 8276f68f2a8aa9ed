"""Optional confinement of commands with bubblewrap (``bwrap``).

Modes: ``auto`` uses bwrap when it exists and works on this machine (probed once per process,
cached), ``bwrap`` requires it, ``none`` runs commands directly. Inside the sandbox the whole
file system is read-only except the workspace (and any extra paths the caller names), /tmp is
private and empty, the network is cut off (unless the run tool's settings allow it), the
command gets its own PID namespace and dies with Marathon. Well-known credential stores in the
caller's home are hidden. Must not import ``pilot`` or ``brain``; no side effects at import.
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

SANDBOX_HOME = "/tmp"

# Hidden inside the sandbox when they exist (an empty tmpfs or /dev/null is mounted over them).
SECRET_PATHS = (
    ".ssh",
    ".gnupg",
    ".aws",
    ".azure",
    ".config/gcloud",
    ".config/gh",
    ".docker",
    ".kube",
    ".netrc",
    ".git-credentials",
    ".pypirc",
    ".npmrc",
    ".cache/huggingface/token",
)


class SandboxUnavailable(Exception):
    """``sandbox: bwrap`` was asked for but bwrap cannot run here; the message says why."""


@dataclass(frozen=True)
class SandboxStatus:
    available: bool
    reason: str  # why not, or the bwrap path when available


@functools.cache
def bwrap_status() -> SandboxStatus:
    """Whether bwrap works here, found by running a trivial sandboxed command (cached)."""
    exe = shutil.which("bwrap")
    if not exe:
        return SandboxStatus(False, "bwrap is not installed (install the bubblewrap package)")
    probe = [exe, *_base_args(network=False), "--", "/bin/sh", "-c", "exit 0"]
    try:
        proc = subprocess.run(
            probe,
            capture_output=True,
            timeout=15,
            stdin=subprocess.DEVNULL,
            env={"PATH": "/usr/bin:/bin"},
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return SandboxStatus(False, f"bwrap could not be started: {exc}")
    if proc.returncode != 0:
        err = proc.stderr.decode(errors="replace").strip() or f"exit {proc.returncode}"
        return SandboxStatus(False, f"bwrap does not work here: {err}")
    return SandboxStatus(True, exe)


def _base_args(*, network: bool) -> list[str]:
    args = [
        "--ro-bind",
        "/",
        "/",
        "--dev",
        "/dev",
        "--proc",
        "/proc",
        "--tmpfs",
        "/tmp",
        "--unshare-pid",
        "--unshare-ipc",
        "--unshare-uts",
        "--die-with-parent",
        "--new-session",
    ]
    if not network:
        args.append("--unshare-net")
    return args


def wrap(
    argv: Sequence[str],
    *,
    mode: str,
    writable: Sequence[Path],
    cwd: Path,
    network: bool = False,
    home: str | None = None,
    hidden: Sequence[Path] = (),
) -> tuple[list[str], bool]:
    """``argv`` wrapped for the sandbox mode; returns (argv, whether it is sandboxed).

    ``writable`` paths are bound read-write (the workspace first). ``hidden`` paths (the
    pilot's state: its database, checkpoints, artifacts) are not there at all inside: an empty
    folder or an empty file over each that exists. Raises ``SandboxUnavailable`` for mode
    "bwrap" when bwrap cannot run.
    """
    if mode == "none":
        return list(argv), False
    status = bwrap_status()
    if not status.available:
        if mode == "bwrap":
            raise SandboxUnavailable(
                f"the sandbox is set to 'bwrap' but {status.reason}; install bubblewrap or set "
                "sandbox: auto / none in the workflow"
            )
        return list(argv), False
    args = [status.reason, *_base_args(network=network)]
    for secret in _secret_paths(home or os.path.expanduser("~"), writable):
        if secret.is_dir():
            args += ["--tmpfs", str(secret)]
        else:
            args += ["--ro-bind", "/dev/null", str(secret)]
    for path in hidden:
        if path.is_dir():
            args += ["--tmpfs", str(path)]
        elif path.exists():
            args += ["--ro-bind", "/dev/null", str(path)]
    for path in writable:
        args += ["--bind", str(path), str(path)]
    args += ["--chdir", str(cwd), "--"]
    return args + list(argv), True


def _secret_paths(home: str, writable: Sequence[Path]) -> list[Path]:
    out = []
    for rel in SECRET_PATHS:
        path = Path(home) / rel
        try:
            real = Path(os.path.realpath(path))
            if not path.exists() or path.is_symlink():
                continue
        except OSError:
            continue
        if any(real == w or w in real.parents or real in w.parents for w in writable):
            continue
        out.append(real)
    return out
