"""Every exception the brain raises, as one documented tree.

Callers catch the level they care about: ``BrainError`` for "the server side failed",
``SpecError`` for "the configuration is wrong, here is where and how to fix it", and so on.
This module holds no logic beyond formatting; diagnosis lives in ``brain.diagnose``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any


class BrainError(Exception):
    """Base of every error the brain raises on purpose."""


class SpecError(BrainError):
    """A server spec (profile file, override or built spec) is invalid.

    Carries where the problem is (``file``, ``line``, ``field``) and how to fix it (``hint``),
    so the CLI can print ``profile.yaml:12: speculative.model: ...`` like workflow errors.
    """

    def __init__(
        self,
        message: str,
        *,
        file: str | None = None,
        line: int | None = None,
        field: str | None = None,
        hint: str | None = None,
    ) -> None:
        self.message = message
        self.file = file
        self.line = line
        self.field = field
        self.hint = hint
        super().__init__(self._render())

    def _render(self) -> str:
        where = ""
        if self.file:
            where = self.file + (f":{self.line}" if self.line else "") + ": "
        elif self.line:
            where = f"line {self.line}: "
        field = f"{self.field}: " if self.field else ""
        text = f"{where}{field}{self.message}"
        if self.hint:
            text += f" Fix: {self.hint}"
        return text


class SpecErrors(SpecError):
    """Several spec problems at once (a profile with three mistakes reports all three)."""

    def __init__(self, errors: Sequence[SpecError]) -> None:
        self.errors = list(errors)
        first = self.errors[0]
        super().__init__(
            first.message, file=first.file, line=first.line, field=first.field, hint=first.hint
        )
        self.args = ("\n".join(str(e) for e in self.errors),)

    def __str__(self) -> str:
        return "\n".join(str(e) for e in self.errors)


@dataclass(frozen=True)
class Diagnosis:
    """Why the server failed (``cause`` is a stable id), the log lines that prove it, the fix:
    a ``LaunchError``'s explanation, as ``brain.diagnose`` finds it (kept here, beside the
    error that carries it, so the errors import nothing of the diagnosis)."""

    cause: str
    summary: str
    evidence: list[str]
    remedy: str
    fatal: bool = True
    details: dict[str, Any] = field(default_factory=dict)

    def render(self) -> str:
        lines = [f"{self.summary} [{self.cause}]"]
        lines += [f"  > {e.strip()}" for e in self.evidence]
        lines.append(f"  fix: {self.remedy}")
        return "\n".join(lines)


class LaunchError(BrainError):
    """The server failed to start; ``diagnosis`` says why and what to change (may be None)."""

    def __init__(self, message: str, diagnosis: Diagnosis | None = None) -> None:
        self.diagnosis = diagnosis
        text = message
        if diagnosis is not None:
            text += f"\n{diagnosis.render()}"
        super().__init__(text)


class NotReady(BrainError):
    """The server did not become ready within its load timeout (and showed no fatal line)."""


class PortInUse(BrainError):
    """The port the spec asks for is already bound; ``holder`` names who holds it if known."""

    def __init__(self, host: str, port: int, holder: str | None = None) -> None:
        self.host = host
        self.port = port
        self.holder = holder
        who = f" by {holder}" if holder else ""
        super().__init__(
            f"{host}:{port} is already in use{who}. Stop that server or set port=<free port>."
        )


class FleetNotRunning(BrainError):
    """No replica of the named fleet is running (the pilot asked for its endpoints)."""

    def __init__(self, name: str, detail: str = "") -> None:
        self.name = name
        text = f"no replica of fleet {name!r} is running"
        text += f" ({detail})" if detail else ""
        super().__init__(
            f"{text}. Start it: brain up PROFILE --replicas N --set name={name} "
            f"(or brain up --fleet FILE), then check brain ps."
        )


class NoNvidiaGpu(BrainError):
    """Neither NVML nor nvidia-smi could report an NVIDIA GPU on this machine."""


class PreloadMismatch(BrainError):
    """The weight-cache daemon holds weights for a different configuration.

    ``fields`` are vLLM's ``WeightCacheKey`` field names that differ (e.g. ``tp_size``).
    """

    def __init__(self, fields: Sequence[str], message: str | None = None) -> None:
        self.fields = list(fields)
        super().__init__(
            message
            or (
                "the weight-cache daemon was started with different engine args; "
                f"mismatched fields: {', '.join(self.fields) or '(unknown)'}. "
                "Restart the daemon with the server's spec (brain preload) or align the spec."
            )
        )
