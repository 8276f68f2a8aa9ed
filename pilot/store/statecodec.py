"""A run's folded state as plain JSON data, and back, building only the state's own classes.

A state checkpoint is read back by a later process; whatever format it is in must not be able
to run code when it is read (pickle can: a planted file would execute inside ``pilot
resume``). This codec writes JSON and, when reading, builds nothing but JSON values and the
classes the state is made of (the dataclasses, named tuples and pydantic models of
``pilot.agent.state``, ``pilot.agent.progress``, ``pilot.events`` and ``pilot.agent.images``);
pydantic models are validated as a stored event is. Anything else is a ``ValueError``.

JSON has no tuples, sets, bytes, dates or non-string keys, so those travel as small tagged
objects (``{"__t": "set", "v": [...]}``); a plain dict that happens to have a ``__t`` key is
tagged too, so it never reads back as something else.
"""

from __future__ import annotations

import binascii
import dataclasses
import functools
from collections import deque
from datetime import datetime
from typing import Any

from pydantic import BaseModel

TAG = "__t"


@functools.cache
def _classes() -> dict[str, type]:
    """The classes a state may hold, by name (built once, on first use)."""
    from pilot import events
    from pilot.agent import images, progress, state

    found: dict[str, type] = {}
    for module in (state, progress, events, images):
        for name, value in vars(module).items():
            if not isinstance(value, type) or value.__module__ != module.__name__:
                continue
            if (
                dataclasses.is_dataclass(value)
                or _is_named_tuple(value)
                or issubclass(value, BaseModel)
            ):
                found[name] = value
    return found


def _is_named_tuple(cls: type) -> bool:
    return issubclass(cls, tuple) and hasattr(cls, "_fields")


def encode(value: Any) -> Any:
    """``value`` as JSON data (raises ``TypeError`` for a type the state never holds)."""
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, list):
        # strings as they are, without a call each (a long run's list of files read)
        return [v if type(v) is str else encode(v) for v in value]
    if isinstance(value, dict):
        if all(type(k) is str for k in value) and TAG not in value:
            return {k: encode(v) for k, v in value.items()}
        return {TAG: "dict", "v": [[encode(k), encode(v)] for k, v in value.items()]}
    cls = type(value)
    name = cls.__name__
    if isinstance(value, BaseModel):
        _known(name, cls)
        return {TAG: "model", "c": name, "v": value.model_dump(mode="json")}
    if dataclasses.is_dataclass(value):
        _known(name, cls)
        fields = {f.name: encode(getattr(value, f.name)) for f in dataclasses.fields(value)}
        return {TAG: "data", "c": name, "v": fields}
    if isinstance(value, tuple):
        if _is_named_tuple(cls):
            _known(name, cls)
            return {TAG: "named", "c": name, "v": [encode(v) for v in value]}
        return {TAG: "tuple", "v": [encode(v) for v in value]}
    if isinstance(value, set | frozenset):
        # Bytes members (the progress tracker's digests, a thousand at a thousand steps) as
        # one base64 text of their concatenation when they are all as long, else each alone.
        raw = [v for v in value if type(v) is bytes]
        others = (
            [] if len(raw) == len(value) else [encode(v) for v in value if type(v) is not bytes]
        )
        out = {TAG: "set", "v": others}
        widths = set(map(len, raw))
        width = len(raw[0]) if raw else 0
        if width and len(widths) == 1:
            out["w"], out["b"] = width, _b64out(b"".join(raw))
        else:
            out["b"] = [_b64out(v) for v in raw]
        return out
    if isinstance(value, bytes):
        return {TAG: "bytes", "v": _b64out(value)}
    if isinstance(value, datetime):
        return {TAG: "datetime", "v": value.isoformat()}
    if isinstance(value, deque):
        return {TAG: "deque", "v": [encode(v) for v in value], "maxlen": value.maxlen}
    raise TypeError(f"a {name} cannot be written to a state checkpoint")


def _b64out(value: bytes) -> str:
    """Standard base64, straight from C (a state holds about a thousand digests)."""
    return binascii.b2a_base64(value, newline=False).decode("ascii")


def _known(name: str, cls: type) -> None:
    if _classes().get(name) is not cls:
        raise TypeError(f"{cls.__module__}.{name} is not a class of the run state")


def decode(data: Any) -> Any:
    """What ``encode`` wrote, rebuilt; ``ValueError`` for anything it would not have written."""
    if data is None or isinstance(data, bool | int | float | str):
        return data
    if isinstance(data, list):
        return [v if type(v) is str else decode(v) for v in data]
    if not isinstance(data, dict):
        raise ValueError(f"unexpected {type(data).__name__} in a state checkpoint")
    tag = data.get(TAG)
    if tag is None:
        return {k: decode(v) for k, v in data.items()}
    items = data.get("v")
    match tag:
        case "dict":
            return {_hashable(decode(k)): decode(v) for k, v in _pairs(items)}
        case "tuple":
            return tuple(decode(v) for v in _list(items))
        case "set":
            members = {_hashable(decode(v)) for v in _list(items)}
            width = data.get("w")
            if width is None:
                members.update(_b64(v) for v in _list(data["b"]))
                return members
            joined = _b64(data["b"])
            if type(width) is not int or width < 1 or len(joined) % width:
                raise ValueError("a set's bytes must be whole members of its width")
            members.update(joined[i : i + width] for i in range(0, len(joined), width))
            return members
        case "bytes":
            return _b64(items)
        case "datetime":
            return datetime.fromisoformat(_str(items))
        case "deque":
            maxlen = data.get("maxlen")
            if maxlen is not None and (type(maxlen) is not int or maxlen < 0):
                raise ValueError("a deque's maxlen must be a whole number")
            return deque((decode(v) for v in _list(items)), maxlen=maxlen)
        case "model":
            cls = _class(data, lambda c: issubclass(c, BaseModel))
            return cls.model_validate(items)  # type: ignore[attr-defined]
        case "named":
            cls = _class(data, _is_named_tuple)
            return cls(*(decode(v) for v in _list(items)))
        case "data":
            cls = _class(data, dataclasses.is_dataclass)
            if not isinstance(items, dict):
                raise ValueError("a dataclass's fields must be an object")
            names = {f.name for f in dataclasses.fields(cls)}
            if set(items) != names:
                raise ValueError(f"{cls.__name__} fields differ: {sorted(set(items) ^ names)}")
            instance = object.__new__(cls)
            for name, value in items.items():
                object.__setattr__(instance, name, decode(value))
            return instance
    raise ValueError(f"unknown tag {tag!r} in a state checkpoint")


def _class(data: dict[str, Any], kind: Any) -> type:
    cls = _classes().get(data.get("c"))  # type: ignore[arg-type]
    if cls is None or not kind(cls):
        raise ValueError(f"{data.get('c')!r} is not a class of the run state")
    return cls


def _list(items: Any) -> list[Any]:
    if not isinstance(items, list):
        raise ValueError("expected a list in a state checkpoint")
    return items


def _pairs(items: Any) -> list[tuple[Any, Any]]:
    pairs = _list(items)
    if not all(isinstance(p, list) and len(p) == 2 for p in pairs):
        raise ValueError("expected [key, value] pairs in a state checkpoint")
    return [(k, v) for k, v in pairs]


def _str(items: Any) -> str:
    if not isinstance(items, str):
        raise ValueError("expected a string in a state checkpoint")
    return items


def _b64(items: Any) -> bytes:
    """Strict base64 (only the alphabet and its padding), checked in C: a state holds about
    a thousand digests, and ``b64decode(validate=True)`` runs a regular expression on each."""
    try:
        return binascii.a2b_base64(_str(items), strict_mode=True)
    except binascii.Error as exc:
        raise ValueError(f"bad base64 in a state checkpoint: {exc}") from None


def _hashable(value: Any) -> Any:
    try:
        hash(value)
    except TypeError:
        raise ValueError("a set member or dict key must be hashable") from None
    return value
