"""The tool contract: what a tool is, what it returns, and the context it runs in.

Everything the pilot codes against lives here (``Tool``, ``ToolResult``, ``ToolContext``,
``ToolError``). The registry (``tools.registry``) is re-exported for convenience. This module
must not import ``pilot`` or ``brain`` and must not run anything at import time.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Literal, Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict

if TYPE_CHECKING:
    from tools.workspace import Workspace

ERROR_PREFIX = "Error: "

SandboxMode = Literal["auto", "bwrap", "none"]


class ToolError(Exception):
    """Raised inside a tool for an expected failure; ``invoke`` turns it into an error result.

    The message is shown to the model as is (after "Error: "), so it should say what went
    wrong and what to do instead.
    """


class Artifact(BaseModel):
    """A file a tool kept next to its result, e.g. the full output of a long command.

    One class for the tool's result and the run's record: ``pilot.events.ToolFinished``
    stores these as the tool returned them.
    """

    model_config = ConfigDict(frozen=True)

    name: str
    path: str  # absolute path of the file kept
    size: int = 0
    media_type: str = "text/plain"


class ToolResult(BaseModel):
    """What a tool call returns to the model (``output``) and to the run record (the rest)."""

    model_config = ConfigDict(frozen=False)

    output: str
    is_error: bool = False
    truncated: bool = False
    artifacts: list[Artifact] = []

    @classmethod
    def ok(cls, output: str, **kw: object) -> ToolResult:
        """A successful result."""
        return cls(output=output, **kw)  # type: ignore[arg-type]

    @classmethod
    def error(cls, message: str, **kw: object) -> ToolResult:
        """An error result; the output always starts with "Error: " (the pilot relies on it)."""
        if not message.startswith(ERROR_PREFIX):
            message = ERROR_PREFIX + message
        return cls(output=message, is_error=True, **kw)  # type: ignore[arg-type]


@dataclass
class ToolContext:
    """Everything a tool may use besides its arguments; built by the pilot per call."""

    workspace: Workspace
    artifacts_dir: Path
    settings: dict[str, dict] = field(default_factory=dict)
    env_allowlist: Sequence[str] = ()
    sandbox: SandboxMode = "auto"
    work_branch: str | None = None
    call_id: str | None = None
    base_commit: str | None = None  # the commit the run started from (git_diff since_start)
    run_id: str | None = None  # with call_id, the idempotency key commands get (MARATHON_CALL_ID)
    hidden: Sequence[Path] = ()
    """The pilot's own state (database, checkpoints, artifacts): not mounted in the sandbox."""
    time_left: float | None = None
    """Seconds the run's wall-time limit leaves as the call starts (None: no limit): a tool
    that waits on a command (run) waits no longer."""

    def tool_settings(self, tool_name: str) -> dict:
        """The workflow's settings for one tool (empty when none were given)."""
        value = self.settings.get(tool_name) or {}
        return value if isinstance(value, dict) else {}

    def artifact_path(self, prefix: str, suffix: str = ".log") -> Path:
        """Where to keep an artifact: named by the call id when known, so a re-run overwrites.

        Creates ``artifacts_dir`` on demand.
        """
        stem = self.call_id or uuid.uuid4().hex[:12]
        stem = re.sub(r"[^A-Za-z0-9._-]+", "_", stem)[:80] or "call"
        self.artifacts_dir.mkdir(parents=True, exist_ok=True)
        return self.artifacts_dir / f"{prefix}-{stem}{suffix}"


@runtime_checkable
class Tool(Protocol):
    """A tool: a name, a description written for a model, an argument model, and ``run``.

    ``mutates`` says whether the tool may change the workspace; the pilot snapshots the
    workspace after mutating tools and may re-run non-mutating ones freely on resume.

    A tool may also set ``blocks = False`` (read with ``tool_blocks``) when it does no I/O
    and little work: it then runs on the pilot's event loop. Every other tool runs in a
    worker thread, so a slow disk or a long command never stalls the other runs.

    A mutating tool may set ``known_writes = True`` (read with ``tool_known_writes``) when it
    changes only paths it resolved with ``for_write=True``.
    """

    name: str
    description: str
    args_model: type[BaseModel]
    mutates: bool

    def run(self, args: BaseModel, ctx: ToolContext) -> ToolResult: ...


def tool_known_writes(tool: Tool) -> bool:
    """Whether every path ``tool`` may change is one it resolved with
    ``Workspace.resolve(..., for_write=True)`` (``known_writes = True``; the file tools): then
    the pilot's snapshot after it hashes those paths only, not the whole tree."""
    return bool(getattr(tool, "known_writes", False))


def tool_blocks(tool: Tool) -> bool:
    """Whether ``tool`` may block (file or process I/O): true unless it says otherwise. A
    thread hop costs more CPU than a call that blocks on nothing (bench/README.md)."""
    return bool(getattr(tool, "blocks", True))


class ToolArgs(BaseModel):
    """Base for argument models: unknown arguments are refused so the model learns the names."""

    model_config = ConfigDict(extra="forbid")


def cut(text: str, limit: int, note: str = "") -> tuple[str, bool]:
    """``text`` cut to at most ``limit`` characters, with a note saying it was cut."""
    if len(text) <= limit:
        return text, False
    return text[:limit] + f"\n... [output cut at {limit} characters{note}]", True
