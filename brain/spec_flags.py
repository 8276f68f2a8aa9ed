"""The vLLM flag on a spec field, and what is derived from the fields that carry one.

As vLLM's ``EngineArgs`` builds its parser from its fields, ServerSpec's fields name their own
flags (``Annotated[int | None, Flag("--max-num-seqs")]``): the field is the one place a flag
is written. ``flag_fields(ServerSpec)`` lists them in declaration order, which is the argv
order ``brain.command`` builds; ``owned_flags(ServerSpec)`` is every spelling vLLM accepts for
them, which ``extra_args`` may not repeat. Works on any pydantic model, so it needs nothing
of the spec itself.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from dataclasses import dataclass
from types import UnionType
from typing import Any, Union, get_args, get_origin

from pydantic import BaseModel
from pydantic.fields import FieldInfo


@dataclass(frozen=True, init=False)
class Flag:
    """The vLLM flag a field becomes.

    ``brain.command`` renders the value from its type: a bool is the bare flag (False:
    ``--no-...``), a dict compact JSON (a section such as ``speculative`` is given as the dict
    vLLM reads), a float ``%g``, anything else ``str``. None, "" and the field's default are
    left out (vLLM then applies its own default), unless ``always``.
    """

    name: str
    aliases: tuple[str, ...]
    """Other spellings vLLM's parser accepts (``-tp``), refused in ``extra_args`` too."""
    always: bool
    """Given even when the value is the field's default."""
    serve_only: bool
    """A ``vllm serve`` flag the ``vllm preload`` daemon's argv leaves out (front-end and
    scheduler flags, the load format): the daemon's engine args must match the server's."""
    serve_positional: bool
    """``vllm serve`` takes the value as its positional argument (the model)."""

    def __init__(
        self,
        name: str,
        *aliases: str,
        always: bool = False,
        serve_only: bool = False,
        serve_positional: bool = False,
    ) -> None:
        object.__setattr__(self, "name", name)
        object.__setattr__(self, "aliases", aliases)
        object.__setattr__(self, "always", always)
        object.__setattr__(self, "serve_only", serve_only)
        object.__setattr__(self, "serve_positional", serve_positional)


@dataclass(frozen=True)
class FlagField:
    """One field that becomes a vLLM flag, found by ``flag_fields``."""

    path: str
    """The field, dotted from the model (``distributed.pipeline_parallel_size``)."""
    flag: Flag
    default: Any
    is_bool: bool

    @property
    def negative(self) -> str | None:
        """``--no-<name>`` for a bool: vLLM gives every boolean field argparse's
        BooleanOptionalAction (engine/arg_utils.py, ``_compute_kwargs``)."""
        return "--no-" + self.flag.name.removeprefix("--") if self.is_bool else None

    @property
    def spellings(self) -> tuple[str, ...]:
        """Every way to write the flag on a vLLM command line."""
        negative = (self.negative,) if self.negative else ()
        return (self.flag.name, *self.flag.aliases, *negative)


def _flag_of(info: FieldInfo) -> Flag | None:
    return next((m for m in info.metadata if isinstance(m, Flag)), None)


def _section(annotation: Any) -> type[BaseModel] | None:
    """The section a field holds: ``DistributedSpec`` for ``DistributedSpec | None``."""
    options = get_args(annotation) if get_origin(annotation) in (Union, UnionType) else ()
    for t in (annotation, *options):
        if isinstance(t, type) and issubclass(t, BaseModel):
            return t
    return None


def _walk(model: type[BaseModel], prefix: str) -> Iterator[FlagField]:
    for name, info in model.model_fields.items():
        flag = _flag_of(info)
        if flag is not None:
            annotation = info.annotation
            is_bool = annotation is bool or bool in get_args(annotation)
            default = info.get_default(call_default_factory=True)
            yield FlagField(prefix + name, flag, default, is_bool)
        elif (section := _section(info.annotation)) is not None:
            yield from _walk(section, f"{prefix}{name}.")


@functools.cache
def flag_fields(model: type[BaseModel]) -> tuple[FlagField, ...]:
    """Every field of ``model`` that becomes a vLLM flag, sections included (a section field
    without a flag of its own is looked into), in declaration order."""
    return tuple(_walk(model, ""))


@functools.cache
def owned_flags(model: type[BaseModel]) -> dict[str, str]:
    """Every spelling of a field's flag -> the field: ``extra_args`` may not use them, since a
    second value would make two truths (and vLLM keeps the last one given)."""
    return {spelling: f.path for f in flag_fields(model) for spelling in f.spellings}


def field_value(obj: BaseModel, path: str) -> Any:
    """The value at a dotted field path; None when a section on the way is unset."""
    value: Any = obj
    for part in path.split("."):
        if value is None:
            return None
        value = getattr(value, part)
    return value
