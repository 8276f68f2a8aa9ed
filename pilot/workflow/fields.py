"""What every section of the workflow schema shares: its constants, its duration values, its
name checks and its strict base model (``pilot.workflow.schema`` puts the sections together).
"""

from __future__ import annotations

import re
from typing import Annotated, Any

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    WithJsonSchema,
)

#: The workflow file format this code reads. Bumped only with a migration, so files
#: written for an older release keep loading (configuration drift breaks overnight runs).
FORMAT_VERSION = 1

#: Where the brain serves by default; used when the model section names neither an
#: endpoint nor a profile.
DEFAULT_ENDPOINT = "http://127.0.0.1:8000/v1"

#: Top-level keys starting with this are ignored: the place for YAML anchors
#: (``x-limits: &small {max_steps: 10}``), as Docker Compose does it.
EXTENSION_PREFIX = "x-"

PARAM_TYPES = ("string", "integer", "number", "boolean", "path", "choice", "list")

#: A location inside the workflow data: keys and list indexes, like pydantic's ``loc``.
Loc = tuple[str | int, ...]

_SLUG = re.compile(r"^[a-z0-9][a-z0-9_-]{0,63}$")
IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_ENV_NAME = re.compile(r"^[A-Za-z_*?\[][A-Za-z0-9_*?\[\]!]*$")  # a name or an fnmatch glob
_DURATION_PART = re.compile(r"(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)", re.IGNORECASE)
_DURATION_UNITS = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400}
# Names of dict methods: a param with one of these names would be shadowed in
# templates (`params.items` is the method), so such names are refused.
_DICT_METHODS = frozenset(n for n in dir(dict) if not n.startswith("_"))


def parse_duration(value: Any) -> Any:
    """Turn ``90``, ``"90s"``, ``"30m"``, ``"8h"``, ``"1h30m"``, ``"2d"`` into seconds.

    Accepting units matters because wall-time limits are written in hours and
    timeouts in seconds; plain numbers are seconds. Anything else is left for
    pydantic to reject with a readable message.
    """
    if isinstance(value, bool):
        raise ValueError(f"expected a duration like 90, '90s', '30m' or '8h', got {value!r}")
    if isinstance(value, int | float):
        return value
    if isinstance(value, str):
        text = value.strip().replace(" ", "")
        if re.fullmatch(r"\d+(\.\d+)?", text):
            return float(text)
        if text and re.fullmatch(r"(?:\d+(?:\.\d+)?(?:ms|s|m|h|d))+", text, re.IGNORECASE):
            return sum(
                float(n) * _DURATION_UNITS[u.lower()] for n, u in _DURATION_PART.findall(text)
            )
        raise ValueError(
            f"expected a duration like 90, '90s', '30m', '8h' or '1h30m', got {value!r}"
        )
    return value


_DURATION_SCHEMA = {
    "anyOf": [
        {"type": "number", "exclusiveMinimum": 0},
        {"type": "string", "pattern": r"^\s*(\d+(\.\d+)?\s*(ms|s|m|h|d)?\s*)+$"},
    ],
    "description": "seconds, or a duration with units: '90s', '30m', '8h', '1h30m', '2d'",
}

#: Seconds, written as a number or with units; always > 0.
Duration = Annotated[
    float,
    BeforeValidator(parse_duration),
    Field(gt=0),
    WithJsonSchema(_DURATION_SCHEMA),
]


def _check_param_name(name: str) -> str:
    if not IDENT.match(name):
        raise ValueError(
            f"param name {name!r} must be an identifier (letters, digits, '_'; "
            "not starting with a digit) so templates can say params.NAME"
        )
    if name in _DICT_METHODS:
        raise ValueError(
            f"param name {name!r} would be shadowed by the dict method of that name "
            "in templates; rename it"
        )
    return name


def _check_env_entry(name: str) -> str:
    if not _ENV_NAME.match(name):
        raise ValueError(
            f"{name!r} is not an environment variable name or glob (like HOME or PYTHON*)"
        )
    return name


def _check_redact_pattern(pattern: str) -> str:
    from pilot.redact import compile_pattern

    compile_pattern(pattern)
    return pattern


ParamName = Annotated[str, AfterValidator(_check_param_name)]
EnvEntry = Annotated[str, AfterValidator(_check_env_entry)]
RedactPattern = Annotated[str, AfterValidator(_check_redact_pattern)]


def check_slug(value: str, what: str) -> str:
    if not _SLUG.match(value):
        raise ValueError(
            f"{what} {value!r} must be a short slug: lowercase letters, digits, '-' or '_', "
            "starting with a letter or digit (like 'refactor-repo')"
        )
    return value


class Strict(BaseModel):
    """Base for every section: unknown keys are errors, values are not coerced silently."""

    model_config = ConfigDict(extra="forbid", frozen=True, str_strip_whitespace=False)
