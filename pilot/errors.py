"""The pilot's exception tree: every error the pilot raises on purpose lives here.

Callers catch the level they care about (``MarathonError`` for "any of ours",
``ModelError`` for "the model server misbehaved", ``WorkflowError`` for "the file is
wrong"). Each message says what is wrong *and* what to do about it, because these
errors are read by a person in the morning, not by a debugger. This module only
defines classes; low-level errors (HTTP, YAML, pydantic) are mapped into them where
they happen (model client, workflow loader, store). It must not import anything of
ours, so that every other module can import it.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

__all__ = [
    "AmbiguousRunId",
    "BadRequest",
    "ConfigurationError",
    "ContextOverflow",
    "LeaseHeld",
    "MarathonError",
    "ModelError",
    "ModelNotFound",
    "RunError",
    "RunNotFound",
    "ServerUnavailable",
    "StreamInterrupted",
    "WorkflowError",
    "WorkflowErrors",
]


class MarathonError(Exception):
    """Base of every error the pilot raises deliberately.

    Anything else escaping the pilot is a bug; the CLI prints these as one clean
    message and an exit code, and everything else with a traceback.
    """


# --------------------------------------------------------------------------- config


class ConfigurationError(MarathonError):
    """The user's setup is wrong (flags, environment, server choice); retrying won't help.

    The runner stops the run with this message instead of retrying.
    """


class ForcedCallsRefused(ConfigurationError):
    """The server answers a forced tool choice with the same error while it is healthy: it
    cannot constrain its output (``pilot.model.errors.deterministic_500``). Under
    ``model.tool_calls: auto`` the pilot stops forcing that model; pinned, the run stops."""


class ServerToolsOff(ConfigurationError):
    """The server refuses to let the model choose tools: vLLM started without
    ``--enable-auto-tool-choice --tool-call-parser``. Under ``model.tool_calls: auto`` the pilot
    moves the model to text mode (no tools sent); pinned, the run stops with the flags to add."""


class WorkflowError(MarathonError):
    """One problem in a workflow file (or in the params given for it), with its location.

    Printed like a compiler diagnostic so editors and terminals can jump to it:
    ``workflows/x.yaml:12:5: phases[1].check: <what is wrong and how to fix it>``.
    Any of ``file``, ``line``, ``column`` and ``field`` may be ``None`` when unknown
    (for example a ``--param`` that names no parameter has no line of its own).
    ``line`` and ``column`` are 1-based, as editors count.
    """

    def __init__(
        self,
        message: str,
        *,
        file: str | None = None,
        line: int | None = None,
        column: int | None = None,
        field: str | None = None,
    ) -> None:
        self.message = message
        self.file = file
        self.line = line
        self.column = column
        self.field = field
        super().__init__(self.__str__())

    @property
    def location(self) -> str:
        """``file:line:column`` with the unknown parts left out (may be empty)."""
        parts: list[str] = [self.file] if self.file else []
        if self.line is not None:
            parts.append(str(self.line))
            if self.column is not None:
                parts.append(str(self.column))
        return ":".join(parts)

    @property
    def errors(self) -> list[WorkflowError]:
        """All problems this exception stands for (just itself; see ``WorkflowErrors``)."""
        return [self]

    def __str__(self) -> str:
        prefix = self.location
        head = f"{prefix}: " if prefix else ""
        if self.field:
            head += f"{self.field}: "
        return head + self.message


class WorkflowErrors(WorkflowError):
    """Several problems found in one pass, so the user can fix them all at once.

    It *is* a ``WorkflowError`` (catching that is enough), located at the first
    problem; ``errors`` lists every one, sorted by position in the file. ``str()``
    prints a count line followed by one diagnostic per line.
    """

    def __init__(self, errors: Sequence[WorkflowError]) -> None:
        if not errors:
            raise ValueError("WorkflowErrors needs at least one error")
        self._errors = sorted(errors, key=lambda e: (e.file or "", e.line or 0, e.column or 0))
        first = self._errors[0]
        super().__init__(
            first.message, file=first.file, line=first.line, column=first.column, field=first.field
        )

    @property
    def errors(self) -> list[WorkflowError]:
        return list(self._errors)

    def __str__(self) -> str:
        errors = getattr(self, "_errors", None)
        if not errors:  # during __init__, before the list is set
            return super().__str__()
        if len(errors) == 1:
            return str(errors[0])
        where = f" in {errors[0].file}" if errors[0].file else ""
        lines = [f"{len(errors)} problems{where}:"]
        lines += [f"  {e}" for e in errors]
        return "\n".join(lines)


# --------------------------------------------------------------------------- model server


class ModelError(MarathonError):
    """The model server could not give a usable answer (the model client raises these)."""


class ServerUnavailable(ModelError):
    """No answer from the server (refused, reset, 5xx, 503 busy) for longer than allowed.

    Raised only after the workflow's ``model.server_wait`` ran out; until then the
    client retries and the run records ``server_unavailable`` events. ``waited`` is
    how many seconds were spent waiting.
    """

    def __init__(self, endpoint: str, reason: str, *, waited: float | None = None) -> None:
        self.endpoint = endpoint
        self.reason = reason
        self.waited = waited
        waited_text = f" after waiting {waited:.0f}s" if waited is not None else ""
        super().__init__(
            f"model server at {endpoint} is unavailable{waited_text}: {reason}. "
            "Check it with `brain status` (or start it with `brain up`), then `pilot resume` "
            "the run; raise model.server_wait to wait longer by itself."
        )


class ContextOverflow(ModelError):
    """The request did not fit the served context window (vLLM 400 "maximum context length").

    The loop answers this by compacting the conversation and retrying; it only
    reaches the user when compaction cannot make the request fit.
    """

    def __init__(
        self,
        message: str,
        *,
        max_model_len: int | None = None,
        prompt_tokens: int | None = None,
        max_tokens: int | None = None,
    ) -> None:
        self.max_model_len = max_model_len
        self.prompt_tokens = prompt_tokens
        self.max_tokens = max_tokens
        super().__init__(
            f"request does not fit the model's context: {message}. Lower model.max_tokens, "
            "shorten the system prompt, or serve the model with a larger max_model_len."
        )


class ModelNotFound(ModelError, ConfigurationError):
    """The server does not serve the requested model name (vLLM 404); a setup mistake.

    ``served`` lists the names the server does serve, so the message can say which
    one to put in ``model.name`` (or use ``auto``).
    """

    def __init__(self, model: str, served: list[str], *, endpoint: str | None = None) -> None:
        self.model = model
        self.served = list(served)
        self.endpoint = endpoint
        where = f" at {endpoint}" if endpoint else ""
        names = ", ".join(repr(s) for s in self.served) or "none"
        super().__init__(
            f"the server{where} does not serve model {model!r} (it serves: {names}). "
            "Set model.name to one of those, or to auto to use the first."
        )


class BadRequest(ModelError):
    """The server rejected the request as malformed (HTTP 400 other than context overflow).

    Deterministic: retrying the same request would fail the same way, so it is never
    retried (a 400 retried for hours is a known failure of other harnesses).
    """

    def __init__(self, message: str, *, status: int = 400, body: str | None = None) -> None:
        self.status = status
        self.body = body
        super().__init__(f"the server rejected the request (HTTP {status}): {message}")


class StreamInterrupted(ModelError):
    """A streamed answer stopped before its end (connection cut, or idle past idle_timeout).

    The client retries the request; the partial answer is discarded, never shown to
    the model as if complete.
    """

    def __init__(self, reason: str, *, received_chars: int = 0) -> None:
        self.reason = reason
        self.received_chars = received_chars
        super().__init__(
            f"the answer stream was interrupted after {received_chars} characters: {reason}"
        )


# --------------------------------------------------------------------------- runs


class RunError(MarathonError):
    """A problem finding or claiming a run in the store."""


class LeaseHeld(RunError):
    """Another live process is executing this run; two writers would corrupt its history."""

    def __init__(self, run_id: str, owner: str, expires_at: datetime) -> None:
        self.run_id = run_id
        self.owner = owner
        self.expires_at = expires_at
        super().__init__(
            f"run {run_id} is being executed by {owner} (lease until "
            f"{expires_at.isoformat(timespec='seconds')}). Wait for it to finish or pause it "
            "(Ctrl-C in its terminal); a lease left by a dead process can be taken over "
            "once it expires."
        )


class RunNotFound(RunError):
    """No run has this id (or id prefix) in the store."""

    def __init__(self, run_id: str, *, store: str | None = None) -> None:
        self.run_id = run_id
        self.store = store
        where = f" in {store}" if store else ""
        super().__init__(f"no run {run_id!r}{where}; `pilot runs` lists the runs there are.")


class AmbiguousRunId(RunError):
    """A run id prefix matches several runs; the user must type more of it."""

    def __init__(self, prefix: str, candidates: Sequence[str]) -> None:
        self.prefix = prefix
        self.candidates = list(candidates)
        shown = ", ".join(self.candidates[:10]) + (" ..." if len(self.candidates) > 10 else "")
        super().__init__(
            f"run id {prefix!r} matches {len(self.candidates)} runs ({shown}); "
            "give more characters of the id."
        )
