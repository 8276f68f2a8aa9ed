r"""Redaction: keep secrets out of the stored events (and so out of `pilot show`, reports, logs).

Events hold what tools printed, what the model wrote and what checks said; any of those can
carry a token that was lying in a file or an environment. Before an event is appended, every
string in it (recursively: tool output, message content, call arguments, params, reasons) has
each match of the default patterns below, and of the workflow's own ``redact:`` regexes,
replaced by ``[REDACTED:<name>]``.

This module only rewrites event copies. It never touches the workspace, and the running loop
keeps the original event (the model and the tools go on with the real text); only what is
stored and shown is redacted. A pattern may name the part to hide with a ``secret`` group
(``(?P<secret>...)``); otherwise the whole match is replaced.

Nearly every event holds no secret, so each is first screened: its JSON goes through one RE2
automaton made of every default rule's fixed part (``SCREENS``), and only an event it flags is
walked field by field with the rules themselves (Python ``re``: the rules need lookahead and
Unicode ``\s``, which RE2 lacks).
"""

from __future__ import annotations

import functools
import os
import re
import types
import typing
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel

_SECRET_KEYWORD = (
    r"(?:password|passwd|pwd|passphrase|secret|api[_-]?key|apikey|access[_-]?key"
    r"|auth[_-]?token|access[_-]?token|token)\b[\"']?\s*[=:]"
)
# The name is matched from its keyword on: a name's prefix (``MY_`` in ``MY_TOKEN=``) is never
# replaced, and matching it (``\b[A-Za-z0-9_.-]*`` before the keyword) makes the engine retry
# the keyword at every letter of every word of ordinary text.
_SECRET_NAME = r"(?i)(?<![/\\])" + _SECRET_KEYWORD + r"\s*"
"""A keyword right after a path separator is a file name (``/etc/passwd: ...``), not a name
given a value."""

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
    # GitLab tokens: personal/project/group (glpat-), OAuth app secrets, deploy, runner, CI
    # build, trigger, feed, incoming mail, agent, SCIM, feature-flag client tokens; the newer
    # routable form carries dots (glpat-<base64url>.01.<suffix>).
    (
        "gitlab_token",
        r"\bgl(?:pat|oas|dt|rt|cbt|ptt|ft|imt|agent|soat|ffct)-[A-Za-z0-9_\-.]{20,}",
    ),
    # Google API keys: AIza and 35 more characters of [0-9A-Za-z_-].
    ("google_api_key", r"\bAIza[0-9A-Za-z_\-]{35}"),
    # Hugging Face user access tokens (hf_ and 34 letters; digits accepted too) and the older
    # organization tokens (api_org_).
    ("huggingface_token", r"\b(?:hf_[A-Za-z0-9]{30,}|api_org_[A-Za-z0-9]{30,})"),
    # Stripe secret and restricted keys, live and test mode (publishable pk_ keys are public),
    # and webhook signing secrets.
    ("stripe_key", r"\b(?:(?:sk|rk)_(?:live|test)_[0-9A-Za-z]{10,}|whsec_[0-9A-Za-z]{20,})"),
    # Slack incoming-webhook and workflow URLs: the path is the credential.
    (
        "slack_webhook",
        r"\bhttps://hooks\.slack\.com/(?:services|workflows|triggers)/[A-Za-z0-9_/\-]{10,}",
    ),
    # JSON Web Tokens (a CI job's CI_JOB_JWT, an OIDC id token): header.payload.signature.
    ("jwt", r"\beyJ[A-Za-z0-9_\-]{8,}\.eyJ[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]{8,}"),
    # The password in a URL: scheme://user:PASSWORD@host (the user and host stay).
    ("url_password", r"\b[A-Za-z][A-Za-z0-9+.\-]*://[^/\s:@]*:(?P<secret>[^/\s@]+)@"),
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


def _space_in_text_or_json() -> str:
    r"""One character of the rules' ``\s`` (Python's: Unicode whitespace; RE2's ``\s`` is ASCII
    only) as it stands in a text or in its JSON: itself, or one of JSON's four escapes for
    spaces (JSON writes the other control characters as ``\u00XX``, flagged on their own)."""
    spaces = "".join(f"\\x{{{c:x}}}" for c in range(0x3001) if chr(c).isspace())
    return rf"(?:[{spaces}]|\\[ntrf])"


SCREENS: dict[str, str] = {
    "api_key": r"sk-[A-Za-z0-9_\-]{20}",
    "github_token": r"gh[pousr]_[A-Za-z0-9]{30}",
    "github_pat": r"github_pat_[A-Za-z0-9_]{20}",
    "slack_token": r"xox[abposr]-[A-Za-z0-9\-]{10}",
    "aws_access_key_id": r"(?:AKIA|ASIA)[0-9A-Z]{16}",
    "gitlab_token": r"gl[a-z]{2,6}-[A-Za-z0-9_\-.]{20}",
    "google_api_key": r"AIza[0-9A-Za-z_\-]{35}",
    "huggingface_token": r"(?:hf|api_org)_[A-Za-z0-9]{30}",
    "stripe_key": r"(?:sk_live|sk_test|rk_live|rk_test|whsec)_[0-9A-Za-z]{10}",
    "slack_webhook": r"hooks\.slack\.com/",
    "jwt": r"eyJ[A-Za-z0-9_\-]{8}",
    # JSON escapes a quote or a backslash in the user or the password with a backslash, never
    # a slash, an at sign or a space.
    "url_password": r"://[^/@\s]*@",
    "private_key": r"-----BEGIN [A-Z0-9 ]*PRIVATE KEY-----",
    "bearer": r"(?i:bearer)",
    # Every keyword of the assignment rules ends in one of these; then a quote (escaped in
    # JSON), spaces, and the separator.
    "assignment": r"(?i:password|passwd|pwd|phrase|secret|key|token)(?:\\?[\"'])?"
    + _space_in_text_or_json()
    + "*[=:]",
}
r"""For each default rule, an RE2 pattern that matches wherever the rule does, both in a text
and in that text written as JSON (so an event is screened on its JSON, with no walk over its
fields): the rule's fixed part, less what JSON escaping can change (a ``\b`` after an escaped
newline, the spaces between ``bearer`` and its token)."""

_JSON_ESCAPED_CONTROL = r"\\u00"
"""A control character escaped in JSON may stand where a rule wants a space: an event with one
goes to the field walk, which sees the real character."""


@functools.cache
def _compile_screen(pattern: str) -> Any:
    """An RE2 pattern over UTF-8 bytes, compiled once (the assignment rules share theirs). RE2
    runs all its alternatives as one automaton in a single pass over the text, where Python's
    ``re`` tries each alternative at each position (figures in bench/README.md)."""
    import re2  # google-re2

    return re2.compile(pattern.encode())


E = TypeVar("E", bound=BaseModel)


@dataclass(frozen=True)
class Rule:
    """One redaction rule. The default rules' regexes are compiled the first time an event
    their screen flags needs them: nearly every event passes the screen, and compiling all
    of them cost each process's first event (a resume's) about 1.5 ms."""

    name: str
    source: str | re.Pattern[str]
    """The regex, or a pattern already compiled (a workflow's own, checked as it loads)."""
    screen: str | None = None
    """An RE2 pattern that matches wherever ``pattern`` does (``SCREENS``), or None."""

    @functools.cached_property
    def pattern(self) -> re.Pattern[str]:
        return self.source if isinstance(self.source, re.Pattern) else re.compile(self.source)

    @functools.cached_property
    def compiled_screen(self) -> Any:
        return _compile_screen(self.screen) if self.screen is not None else None

    def worth_trying(self, encoded: bytes) -> bool:
        """False when the rule cannot match the text whose UTF-8 is ``encoded``."""
        return self.compiled_screen is None or self.compiled_screen.search(encoded) is not None

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


class Redactor:
    """The default rules plus a workflow's own patterns (named ``redact[i]``)."""

    def __init__(self, extra: Sequence[str] = (), *, defaults: bool = True) -> None:
        rules = []
        if defaults:
            rules += [Rule(name, pattern, SCREENS[name]) for name, pattern in DEFAULT_PATTERNS]
        rules += [Rule(f"redact[{i}]", compile_pattern(p)) for i, p in enumerate(extra)]
        self.rules: tuple[Rule, ...] = tuple(rules)
        self._unscreened = any(r.screen is None for r in rules)
        """A rule with no screen (a workflow's own) may match anything."""
        screens = dict.fromkeys(r.screen for r in rules if r.screen is not None)
        self._screen = _compile_screen(
            "|".join([*(f"(?:{screen})" for screen in screens), _JSON_ESCAPED_CONTROL])
        )
        """Every rule's screen in one pattern (the assignment rules share theirs)."""

    def may_match(self, text: str) -> bool:
        """Whether any rule could match in ``text`` (which may be an event's JSON): False means
        redacting would change nothing."""
        return self._unscreened or self._screen.search(text.encode()) is not None

    def may_match_bytes(self, data: bytes) -> bool:
        """``may_match`` for bytes (UTF-8 or not, as a file holds them)."""
        return self._unscreened or self._screen.search(data) is not None

    def text(self, value: str) -> str:
        encoded = value.encode()
        if not self._unscreened and self._screen.search(encoded) is None:
            return value
        for rule in self.rules:
            if not rule.worth_trying(encoded):
                continue
            redacted = rule.apply(value)
            if redacted != value:
                value, encoded = redacted, redacted.encode()
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


_URL_PASSWORD = re.compile(dict(DEFAULT_PATTERNS)["url_password"])


def mask_url_credentials(text: str) -> str:
    """``text`` with the password of every ``scheme://user:password@host`` in it shown as
    ``***`` (the user and the host stay, so the URL is still recognisable): for what Marathon
    prints, such as a database URL in a resume line or a log."""
    return _URL_PASSWORD.sub(lambda m: m.group(0)[: m.start("secret") - m.start()] + "***@", text)


_CHUNK = 1 << 20
_PEM_BEGIN = re.compile(rb"-----BEGIN [A-Z0-9 ]*PRIVATE KEY-----")
_PEM_END = re.compile(rb"-----END [A-Z0-9 ]*PRIVATE KEY-----")


def _chunks(file: Any) -> Iterable[bytes]:
    """The file in pieces of about a MiB, each ending at a line's end, and never inside a
    private key block (a block is kept whole, so its rule sees both ends)."""
    pending = b""
    while True:
        data = file.read(_CHUNK)
        if not data:
            if pending:
                yield pending
            return
        pending += data
        cut = pending.rfind(b"\n") + 1
        if cut == 0:
            continue
        begins = list(_PEM_BEGIN.finditer(pending, 0, cut))
        if begins and not _PEM_END.search(pending, begins[-1].end()) and len(pending) < 64 * _CHUNK:
            continue  # an open private key block: read on to its end
        yield pending[:cut]
        pending = pending[cut:]


def redact_file(path: Path, patterns: Iterable[str] = ()) -> bool:
    """Redact a text file Marathon keeps (a long command's full output) in place, as events are
    redacted; read and written in pieces, so a large output never sits in memory. Returns
    whether anything was replaced (the file is then swapped in whole, mode 0600)."""
    redactor = redactor_for(tuple(patterns))
    changed = False
    temporary = path.with_name(f".{path.name}.redacting")
    flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW
    with path.open("rb") as source, os.fdopen(os.open(temporary, flags, 0o600), "wb") as target:
        for chunk in _chunks(source):
            if redactor.may_match_bytes(chunk):  # on the bytes: the file need not be UTF-8
                text = chunk.decode("utf-8", "surrogateescape")
                redacted = text
                for rule in redactor.rules:
                    if rule.worth_trying(chunk):
                        redacted = rule.apply(redacted)
                if redacted != text:
                    changed = True
                    chunk = redacted.encode("utf-8", "surrogateescape")
            target.write(chunk)
    if changed:
        os.replace(temporary, path)
    else:
        temporary.unlink()
    return changed
