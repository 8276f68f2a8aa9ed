"""Profiles (ServerSpecs as commented YAML), presets, and ``key=value`` overrides.

Loading reports every problem with file, line and field, like workflow errors. Nothing here
starts anything; it only turns text into a validated ``ServerSpec``.
"""

from __future__ import annotations

import types
import typing
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

from brain.errors import SpecError, SpecErrors
from brain.spec import ServerSpec, SpecProblem
from brain.yaml_source import parse_yaml, read_yaml_scalar

PROFILES_DIR = Path(__file__).parent / "profiles"
PRESETS_FILE = PROFILES_DIR / "presets.yaml"
_NOT_PROFILES = {"presets"}

Lines = dict[tuple[str | int, ...], int]


# --------------------------------------------------------------------------- discovery


def list_profiles() -> list[str]:
    """Names of the built-in profiles (file stems in brain/profiles, presets excluded)."""
    return sorted(p.stem for p in PROFILES_DIR.glob("*.yaml") if p.stem not in _NOT_PROFILES)


def profile_path(name_or_path: str | Path) -> Path:
    """A built-in profile's file, or the given path if it names an existing file."""
    p = Path(name_or_path)
    if p.suffix in (".yaml", ".yml") or p.exists() or "/" in str(name_or_path):
        if not p.exists():
            raise SpecError(f"profile file {str(p)!r} does not exist.")
        return p
    candidate = PROFILES_DIR / f"{name_or_path}.yaml"
    if candidate.exists() and p.name not in _NOT_PROFILES:
        return candidate
    raise SpecError(
        f"no profile named {str(name_or_path)!r}.",
        hint=f"use one of {', '.join(list_profiles())} or a path to a YAML file",
    )


def load_profile(name_or_path: str | Path) -> ServerSpec:
    """Load and validate a profile by built-in name or file path."""
    path = profile_path(name_or_path)
    return load_spec_text(read_source_text(path, "profile"), source=str(path))


# --------------------------------------------------------------------------- YAML + lines


def read_source_text(path: Path, kind: str) -> str:
    """A profile's (or fleet or presets file's) text; ``SpecError`` saying why it cannot be
    read (a directory, not UTF-8, no permission) instead of a traceback."""
    try:
        return path.read_text(encoding="utf-8")
    except IsADirectoryError:
        raise SpecError(
            f"is a directory; give the {kind} (a YAML file) inside it.", file=str(path)
        ) from None
    except UnicodeDecodeError as exc:
        raise SpecError(
            f"is not UTF-8 text (byte {exc.start}); save the {kind} as UTF-8.", file=str(path)
        ) from None
    except OSError as exc:
        raise SpecError(f"cannot be read: {exc.strerror}.", file=str(path)) from None


def parse_yaml_source(text: str, source: str, kind: str = "profile") -> tuple[Any, Lines]:
    """YAML text -> (data, line of each key path), read once by the shared reader
    (``brain.yaml_source``: YAML 1.2 scalars, so ``no`` stays a string; duplicate keys
    refused); every problem found raises, naming its file and line."""
    doc, problems = parse_yaml(text, source, kind=kind)
    if problems:
        errors = [
            SpecError(
                p.message,
                file=source,
                line=p.line,
                field=".".join(str(x) for x in p.path) or None,
            )
            for p in problems
        ]
        raise errors[0] if len(errors) == 1 else SpecErrors(errors)
    assert doc is not None  # no problems: the text was read
    return doc.data, {path: where.line for path, where in doc.where.items() if path}


def _lookup_line(lines: Lines, path: Sequence[str | int]) -> int | None:
    for n in range(len(path), 0, -1):
        if tuple(path[:n]) in lines:
            return lines[tuple(path[:n])]
    return None


_TYPE_TAGS = {"int", "str", "float", "bool", "none", "dict", "list"}


def _clean_loc(loc: Sequence[str | int]) -> list[str | int]:
    """Drop pydantic's union/type tags (e.g. 'list[union[int,str]]', 'literal['all']')."""
    out: list[str | int] = []
    for part in loc:
        if isinstance(part, str) and (
            "[" in part or part in _TYPE_TAGS or part.startswith("function-")
        ):
            continue
        out.append(part)
    return out


def validation_to_spec_error(
    err: ValidationError, *, source: str | None, lines: Lines | None = None
) -> SpecErrors:
    """Turn pydantic's errors into SpecErrors naming file, line and field, one per field."""
    lines = lines or {}
    found: list[SpecError] = []
    seen: set[str] = set()
    for e in err.errors():
        ctx_err = (e.get("ctx") or {}).get("error")
        if isinstance(ctx_err, SpecProblem):
            for field, msg, hint in ctx_err.problems:
                path = [int(x) if x.isdigit() else x for x in field.split(".")]
                found.append(
                    SpecError(
                        msg,
                        file=source,
                        line=_lookup_line(lines, path),
                        field=field,
                        hint=hint,
                    )
                )
            continue
        loc = _clean_loc(e["loc"])
        field = ".".join(str(x) for x in loc) or "(spec)"
        if field in seen:
            continue
        seen.add(field)
        hint = None
        msg = e["msg"]
        if e["type"] == "extra_forbidden":
            msg = "unknown field."
            hint = f"valid fields here: {', '.join(_valid_keys_at(loc[:-1]))}"
        elif e["type"] == "missing":
            msg = "required field is missing."
        found.append(
            SpecError(msg, file=source, line=_lookup_line(lines, loc), field=field, hint=hint)
        )
    return SpecErrors(found or [SpecError(str(err), file=source)])


def load_spec_text(text: str, *, source: str = "<string>") -> ServerSpec:
    """Validate YAML text as a ServerSpec; errors carry ``source`` and line numbers."""
    data, lines = parse_yaml_source(text, source)
    if not isinstance(data, dict):
        raise SpecError(
            "a profile must be a YAML mapping of fields.",
            file=source,
            line=1,
            hint="start from a built-in one, e.g. brain/profiles/sim.yaml (name, model, ...)",
        )
    try:
        return ServerSpec.model_validate(data)
    except ValidationError as e:
        raise validation_to_spec_error(e, source=source, lines=lines) from None


# --------------------------------------------------------------------------- overrides


def _model_at(path: Sequence[str | int]) -> type[BaseModel] | None:
    """The pydantic model at a dotted path, or None if the path ends in a free-form dict."""
    model: type[BaseModel] = ServerSpec
    for part in path:
        if not isinstance(part, str) or part not in model.model_fields:
            return None
        sub = _submodel(model.model_fields[part].annotation)
        if sub is None:
            return None
        model = sub
    return model


def _submodel(annotation: Any) -> type[BaseModel] | None:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        for arg in typing.get_args(annotation):
            sub = _submodel(arg)
            if sub is not None:
                return sub
    return None


def _valid_keys_at(path: Sequence[str | int]) -> list[str]:
    model = _model_at(path)
    return sorted(model.model_fields) if model else []


def _free_dict_value_type(annotation: Any) -> Any:
    """For ``dict[str, V]`` (optionally ``| None``) return V, else None."""
    if typing.get_origin(annotation) is dict:
        return typing.get_args(annotation)[1]
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        for a in typing.get_args(annotation):
            v = _free_dict_value_type(a)
            if v is not None:
                return v
    return None


def _wants_plain_string(annotation: Any) -> bool:
    """True for ``str`` / ``str | None`` fields, where YAML typing would turn '123' into 123."""
    origin = typing.get_origin(annotation)
    if origin is None:
        return annotation is str
    if origin not in (typing.Union, types.UnionType):
        return False
    args = set(typing.get_args(annotation))
    return str in args and args <= {str, type(None)}


def _check_key(key: str) -> tuple[list[str], Any]:
    """Validate a dotted key against the spec's shape; return its parts and leaf annotation."""
    parts = key.split(".")
    model: type[BaseModel] = ServerSpec
    for i, part in enumerate(parts):
        if part not in model.model_fields:
            prefix = ".".join(parts[:i])
            valid = ", ".join(
                (f"{prefix}." if prefix else "") + k for k in sorted(model.model_fields)
            )
            raise SpecError(f"unknown key {key!r}.", field=key, hint=f"valid keys: {valid}")
        annotation = model.model_fields[part].annotation
        if i == len(parts) - 1:
            return parts, annotation
        sub = _submodel(annotation)
        if sub is None:
            value_type = _free_dict_value_type(annotation)
            if value_type is not None:
                # env.FOO, speculative.extra.k, limit_mm_per_prompt.image
                return parts, value_type
            raise SpecError(f"{'.'.join(parts[: i + 1])} has no sub-keys.", field=key)
        model = sub
    raise AssertionError("unreachable")


def _set_dotted(data: dict[str, Any], parts: Sequence[str], value: Any) -> None:
    cur = data
    for part in parts[:-1]:
        nxt = cur.get(part)
        if not isinstance(nxt, dict):
            nxt = {}
            cur[part] = nxt
        cur = nxt
    cur[parts[-1]] = value


def _apply(spec: ServerSpec, items: Iterable[tuple[str, Any, str]], source: str) -> ServerSpec:
    data = spec.model_dump(mode="python", exclude_unset=False)
    for key, value, _raw in items:
        parts, _ = _check_key(key)
        _set_dotted(data, parts, value)
    try:
        return ServerSpec.model_validate(data)
    except ValidationError as e:
        raise validation_to_spec_error(e, source=source) from None


def parse_override(item: str) -> tuple[str, Any]:
    """``"key=value"`` -> (key, YAML-typed value); string fields keep the raw text."""
    if "=" not in item:
        raise SpecError(f"override {item!r} is not key=value.", hint="e.g. max_model_len=16384")
    key, raw = item.split("=", 1)
    key = key.strip()
    _, annotation = _check_key(key)
    if _wants_plain_string(annotation) and raw.strip() not in ("null", "~", ""):
        return key, raw
    try:
        return key, read_yaml_scalar(raw) if raw.strip() else None
    except ValueError as e:
        raise SpecError(f"value {raw!r} is not valid YAML: {e}", field=key) from None


def apply_overrides(spec: ServerSpec, overrides: Sequence[str]) -> ServerSpec:
    """Apply ``--set``-style overrides (dotted keys, YAML-typed values) and re-validate.

    ``["max_model_len=16384", "speculative.num_speculative_tokens=4", "docker.shm_size=8g"]``.
    Errors name the key and list the valid keys at that level.
    """
    items = []
    for item in overrides:
        key, value = parse_override(item)
        items.append((key, value, item))
    return _apply(spec, items, source="--set " + " ".join(overrides) if overrides else "--set")


def load_presets() -> dict[str, dict[str, Any]]:
    """The preset table from brain/profiles/presets.yaml: name -> {description, overrides}."""
    data, _ = parse_yaml_source(
        read_source_text(PRESETS_FILE, "presets file"), str(PRESETS_FILE), "presets file"
    )
    return dict(data or {})


def list_presets() -> dict[str, str]:
    """Preset name -> one-line description."""
    return {name: str(p.get("description", "")) for name, p in load_presets().items()}


def apply_preset(spec: ServerSpec, preset_name: str) -> ServerSpec:
    """Apply a VRAM/throughput/latency preset; speculative keys are skipped when speculation
    is off (a preset must not switch it on)."""
    presets = load_presets()
    if preset_name not in presets:
        raise SpecError(
            f"no preset named {preset_name!r}.", hint=f"use one of {', '.join(sorted(presets))}"
        )
    overrides: Mapping[str, Any] = presets[preset_name].get("overrides") or {}
    items = [
        (k, v, f"{k}={v}")
        for k, v in overrides.items()
        if not (k.startswith("speculative.") and spec.speculative is None)
    ]
    return _apply(spec, items, source=f"preset {preset_name} ({PRESETS_FILE})")
