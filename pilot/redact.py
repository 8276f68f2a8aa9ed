"""Redaction: keep secrets out of the stored events (and so out of `pilot show`, reports, logs).

Events hold what tools printed, what the model wrote and what checks said; any of those can
carry a token that was lying in a file or an environment. Before an event is appended, every
string in it (recursively: tool output, message content, call arguments, params, reasons) has
each match of the default patterns below, and of the workflow's own ``redact:`` regexes,
replaced by ``[REDACTED:<name>]``.

This module only rewrites event copies. It never touches the workspace, and the running loop
keeps the original event (the model and the tools go on with the real text); only what is
stored and shown is redacted. A pattern may name the part to hide with a ``secret`` group
(``(?P<secret>...)``); otherwise the whole match is replaced.
"""

from __future__ import annotations

import functools
import re
import types
import typing
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from pydantic import BaseModel

_SECRET_KEYWORD = (
    r"(?:password|passwd|pwd|secret|api[_-]?key|apikey|access[_-]?key"
    r"|auth[_-]?token|access[_-]?token|token)\b[\"']?\s*[=:]"
)
# The name is matched from its keyword on: a name's prefix (``MY_`` in ``MY_TOKEN=``) is never
# replaced, and matching it (``\b[A-Za-z0-9_.-]*`` before the keyword) made the engine retry
# the keyword at every letter of every word, half of a step's CPU on ordinary text.
_SECRET_NAME = r"(?i)" + _SECRET_KEYWORD + r"\s*"

DEFAULT_PATTERNS: tuple[tuple[str, str], ...] = (
    # OpenAI / Anthropic style keys: sk-..., sk-proj-..., sk-ant-...
    ("api_key", r"\bsk-(?:[A-Za-z0-9]+-)?[A-Za-z0-9_\-]{20,}"),
    # GitHub tokens: classic (ghp_, gho_, ghu_, ghs_, ghr_) and fine-grained PATs.
    ("github_token", r"\bgh[pousr]_[A-Za-z0-9]{30,}"),
    ("github_pat", r"\bgithub_pat_[A-Za-z0-9_]{20,}"),
    # Slack bot / user / app tokens.
    ("slack_token", r"\bxox[abposr]-[A-Za-z0-9-]{10,}"),
    # AWS access key ids (long-term AKIA, temporary ASIA).
    ("aws_access_key_id", r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b"),
    # PEM private keys, whole block (or to the end of the base64 if the block was cut).
    (
        "private_key",
        r"(?s)-----BEGIN [A-Z0-9 ]*PRIVATE KEY-----"
        r"(?:.*?-----END [A-Z0-9 ]*PRIVATE KEY-----|(?:[A-Za-z0-9+/=\s:,-]|\\n)*)",
    ),
    # HTTP Authorization: Bearer <token>
    ("bearer", r"(?i)\bbearer\s+(?P<secret>[A-Za-z0-9._~+/=\-]{12,})"),
    # password="...", api_key: '...' (quoted: the whole quoted value goes, spaces included)
    # (also as escaped quotes inside JSON text, like tool-call arguments: password=\"...\")
    ("assignment", _SECRET_NAME + r"\\?\"(?P<secret>[^\"\\\n\[]{4,})\\?\""),
    ("assignment", _SECRET_NAME + r"'(?P<secret>[^'\\\n\[]{4,})'"),
    # password=..., SECRET_TOKEN=... unquoted (the name stays, the value goes; not a call)
    ("assignment", _SECRET_NAME + r"(?P<secret>[^\s\"',;&\[(]{4,})(?=[\s\"',;&]|$)"),
)
"""Common secret shapes, each with the name its placeholder shows (a name may repeat)."""

HINTS: dict[str, tuple[str, ...]] = {
    "api_key": ("sk-",),
    "github_token": ("ghp_", "gho_", "ghu_", "ghs_", "ghr_"),
    "github_pat": ("github_pat_",),
    "slack_token": ("xox",),
    "aws_access_key_id": ("akia", "asia"),
    "private_key": ("private key",),
    "bearer": ("bearer",),
}
"""Lower-case substrings a text must contain for a rule to be tried: a cheap test that keeps
redaction off the per-step hot path (the regexes are tried only where they could match)."""

REQUIRED_CHARACTERS: dict[str, str] = {
    "api_key": "-",
    "github_token": "_",
    "github_pat": "_",
    "slack_token": "-",
    "private_key": "-",
}
"""A character every match of a rule contains, tested before its hints: looking for one
character is a ``memchr``, twenty times faster than looking for a word, and prose has none."""

_KEYWORD_STEMS = ("token", "key", "pass", "pwd", "secret")
"""Every secret keyword of the assignment rules contains one of these."""
# After the stem: pass(word|wd), a quote, spaces, the separator; in JSON text the quote and the
# spaces may come escaped (\" \n \t \r \f), so the gate also works on an event's JSON.
_ASSIGNED_AFTER_STEM = r"(?:word|wd)?(?:\\?[\"'])?(?:\s|\\[ntrf])*[=:]"
_ASSIGNED_BY_STEM = tuple(re.compile(stem + _ASSIGNED_AFTER_STEM) for stem in _KEYWORD_STEMS)


def could_assign_secret(lowered: str) -> bool:
    """Whether a secret's keyword in ``lowered`` is followed by ``=`` or ``:`` (a quote and
    spaces between): the gate of the ``assignment`` rules. The keywords are common words in
    code and prose (``token``, ``key``), an assignment to one is not. One search per stem:
    a pattern that starts with a literal is scanned for in C, from stem to stem, where the
    rules' regexes step through every character of the text (about 6 ns each)."""
    if "=" not in lowered and ":" not in lowered:
        return False
    return any(assigned.search(lowered) for assigned in _ASSIGNED_BY_STEM)


def _hint_pattern(hints: Sequence[str]) -> re.Pattern[str] | None:
    """Several hints with a common start of two characters or more (``ghp_``, ``gho_``...)
    as one search: a single scan for the start instead of one scan per hint."""
    if len(hints) < 2:
        return None
    start = hints[0]
    for hint in hints[1:]:
        while not hint.startswith(start):
            start = start[:-1]
    if len(start) < 2:
        return None
    rests = "|".join(re.escape(hint[len(start) :]) for hint in hints)
    return re.compile(f"{re.escape(start)}(?:{rests})")


GATES: dict[str, Callable[[str], bool]] = {"assignment": could_assign_secret}
"""A test of the lower-cased text a rule must pass to be tried, after its hints."""

E = TypeVar("E", bound=BaseModel)


@dataclass(frozen=True)
class Rule:
    name: str
    pattern: re.Pattern[str]
    hints: tuple[str, ...] = ()
    gate: Callable[[str], bool] | None = None
    required: str = ""
    hints_at_once: re.Pattern[str] | None = field(init=False, repr=False, compare=False)
    """The hints as one regex when they share a start (``_hint_pattern``), else None."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "hints_at_once", _hint_pattern(self.hints))

    def worth_trying(self, lowered: str) -> bool:
        """False when ``lowered`` (the text, lower-cased) lacks the character every match of
        this rule has, or every hint of it."""
        if self.required and self.required not in lowered:
            return False
        if not self.hints:
            return True
        if self.hints_at_once is not None:
            return self.hints_at_once.search(lowered) is not None
        return any(hint in lowered for hint in self.hints)

    def apply(self, text: str) -> str:
        placeholder = f"[REDACTED:{self.name}]"
        if "secret" not in self.pattern.groupindex:
            return self.pattern.sub(placeholder, text)

        def replace(match: re.Match[str]) -> str:
            start, end = match.span("secret")
            if start < 0:
                return placeholder
            whole = match.group(0)
            offset = match.start()
            return whole[: start - offset] + placeholder + whole[end - offset :]

        return self.pattern.sub(replace, text)


def _should_try(rule: Rule, lowered: str, gates: dict[Callable[[str], bool], bool]) -> bool:
    """Whether ``rule``'s regex is worth running on a text (``lowered``: lower-cased): its
    hints, then its gate, whose result ``gates`` keeps for the rules that share it."""
    if not rule.worth_trying(lowered):
        return False
    gate = rule.gate
    if gate is None:
        return True
    if (passed := gates.get(gate)) is None:
        passed = gates[gate] = gate(lowered)
    return passed


class Redactor:
    """The default rules plus a workflow's own patterns (named ``redact[i]``)."""

    def __init__(self, extra: Sequence[str] = (), *, defaults: bool = True) -> None:
        rules = []
        if defaults:
            rules += [
                Rule(
                    name,
                    re.compile(pattern),
                    HINTS.get(name, ()),
                    GATES.get(name),
                    REQUIRED_CHARACTERS.get(name, ""),
                )
                for name, pattern in DEFAULT_PATTERNS
            ]
        rules += [Rule(f"redact[{i}]", compile_pattern(p)) for i, p in enumerate(extra)]
        self.rules: tuple[Rule, ...] = tuple(rules)
        self._unscreened = any(not r.hints and r.gate is None for r in rules)
        """A rule with neither hints nor gate (a workflow's own) may match anything."""
        self._hinted = tuple(r for r in rules if r.hints and r.gate is None)
        gated = [r for r in rules if r.gate is not None]
        self._gates = tuple(dict.fromkeys(r.gate for r in gated if not r.hints and not r.required))
        """The gates of the rules that have nothing else, each once (three rules share one)."""
        self._gated_with_hints = tuple(r for r in gated if r.hints or r.required)

    def may_match(self, text: str) -> bool:
        """Whether any rule could match in ``text`` (which may be an event's JSON): False means
        redacting would change nothing, and an event with no secret (nearly all of them) is
        screened in one pass over its JSON instead of a walk over its fields."""
        if self._unscreened:
            return True
        lowered = text.lower()
        if "\\u00" in lowered:
            return True  # a control character escaped in JSON: leave it to the field walk
        if any(rule.worth_trying(lowered) for rule in self._hinted):
            return True
        if any(gate(lowered) for gate in self._gates):  # type: ignore[misc]
            return True
        gates: dict[Callable[[str], bool], bool] = {}
        return any(_should_try(rule, lowered, gates) for rule in self._gated_with_hints)

    def text(self, value: str) -> str:
        lowered = value.lower()
        gates: dict[Callable[[str], bool], bool] = {}
        for rule in self.rules:
            if not _should_try(rule, lowered, gates):
                continue
            redacted = rule.apply(value)
            if redacted != value:
                value, lowered = redacted, redacted.lower()
                gates.clear()
        return value

    def value(self, value: Any) -> Any:
        """Any JSON-like value (or pydantic model) with every string redacted."""
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, BaseModel):
            return self.model(value)
        if isinstance(value, list):
            return [self.value(v) for v in value]
        if isinstance(value, tuple):
            return tuple(self.value(v) for v in value)
        if isinstance(value, dict):
            return {k: self.value(v) for k, v in value.items()}
        return value

    def model(self, model: E) -> E:
        """A copy of ``model`` with its string fields redacted (the same object if none
        changed). The ``type`` discriminator is left alone."""
        update = {}
        for name in type(model).model_fields:
            if name == "type":
                continue
            current = getattr(model, name)
            redacted = self.value(current)
            if redacted != current:
                update[name] = redacted
        return model.model_copy(update=update) if update else model


def compile_pattern(pattern: str) -> re.Pattern[str]:
    """A workflow's redaction regex; ValueError (with the reason) when it does not compile or
    matches the empty string (which would redact between every character)."""
    try:
        compiled = re.compile(pattern)
    except re.error as exc:
        raise ValueError(f"not a valid regular expression: {exc}") from None
    if compiled.fullmatch(""):
        raise ValueError(f"the pattern {pattern!r} matches the empty string; make it specific")
    return compiled


@functools.lru_cache(maxsize=32)
def redactor_for(patterns: tuple[str, ...] = ()) -> Redactor:
    return Redactor(patterns)


def redact_event(event: E, patterns: Iterable[str] = ()) -> E:
    """``event`` with secrets replaced by ``[REDACTED:<name>]`` (the defaults and ``patterns``)."""
    return redactor_for(tuple(patterns)).model(event)


_TEXTLESS = (int, float, bool, type(None))


def _textless(annotation: Any) -> bool:
    if annotation in _TEXTLESS:
        return True
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        return all(_textless(member) for member in typing.get_args(annotation))
    return False


@functools.cache
def _holds_text(cls: type[BaseModel]) -> bool:
    """Whether a field of ``cls`` (but its type tag and time) can hold a string: an event
    made only of numbers and flags (a ``model_request``) cannot carry a secret."""
    return not all(
        _textless(info.annotation)
        for name, info in cls.model_fields.items()
        if name not in ("type", "at")
    )


def redact_for_storage(
    event: E, patterns: Iterable[str], to_json: Callable[[E], str]
) -> tuple[E, str]:
    """The event as it is stored (``event`` itself when it holds no secret) and its JSON: the
    JSON is screened first, and only an event a rule could match is walked and redacted."""
    redactor = redactor_for(tuple(patterns))
    payload = to_json(event)
    if not _holds_text(type(event)) or not redactor.may_match(payload):
        return event, payload
    stored = redactor.model(event)
    return stored, payload if stored is event else to_json(stored)


def redact_text(text: str, patterns: Iterable[str] = ()) -> str:
    return redactor_for(tuple(patterns)).text(text)
