"""Bounds on what rendering a workflow template may cost: its output's size and its time.

Templates come from files users download and share, and ``pilot validate`` renders every one
of them: ``{{ 'x' * 10**9 }}`` or two nested ``range(100000)`` loops must be refused in a
moment, not hang the command. Jinja's sandbox keeps a template away from Python's internals
but not from the CPU or the memory, so:
- the operators that can make a huge value (``*``, ``**``, ``%``) and every call and filter
  are checked before they run: a result or an argument over ``MAX_OUTPUT`` is refused (Jinja
  folds no constant expression over an operator it intercepts, so this holds at compile time
  too);
- the output is produced piece by piece and refused once it grows over ``MAX_OUTPUT`` or the
  rendering takes over ``MAX_SECONDS`` (checked at every piece and in every loop over
  ``range``, which may print nothing).
"""

from __future__ import annotations

import contextvars
import functools
import time
from collections.abc import Callable, Mapping
from typing import Any

import jinja2
from jinja2.exceptions import SecurityError
from jinja2.sandbox import SandboxedEnvironment, safe_range

MAX_OUTPUT = 4 * 1024 * 1024
"""Characters a template may render to (a prompt or a command; a params file is at most
1 MB)."""
MAX_SECONDS = 2.0
"""Seconds a template may take to render."""
MAX_EXPONENT = 4096


class TemplateTooCostly(SecurityError):
    """A template would render past ``MAX_OUTPUT`` or ``MAX_SECONDS``."""


_deadline: contextvars.ContextVar[float | None] = contextvars.ContextVar(
    "template_deadline", default=None
)


def _check_time() -> None:
    deadline = _deadline.get()
    if deadline is not None and time.monotonic() > deadline:
        raise TemplateTooCostly(f"it takes over {MAX_SECONDS:g} s to render")


class _TimedRange:
    """``range`` in a template: a loop over it that prints nothing still meets the deadline
    (the output's pieces are where the time is otherwise checked)."""

    def __init__(self, *args: int) -> None:
        self.values = safe_range(*args)

    def __len__(self) -> int:
        return len(self.values)

    def __iter__(self) -> Any:
        for count, value in enumerate(self.values):
            if count % 1024 == 0:
                _check_time()
            yield value


def _size(value: Any) -> int | None:
    return len(value) if isinstance(value, str | bytes | list | tuple) else None


def _too_big(value: Any) -> bool:
    """An int argument big enough to make a string or list over the limit (a width, a
    repeat count)."""
    return type(value) is int and abs(value) > MAX_OUTPUT


class LimitedEnvironment(SandboxedEnvironment):
    """The sandbox, with the size of what operators, calls and filters make bounded."""

    intercepted_binops = frozenset({"*", "**", "%"})

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        self.globals["range"] = _TimedRange

    def call_binop(self, context: Any, operator: str, left: Any, right: Any) -> Any:
        if operator == "*":
            for sequence, count in ((left, right), (right, left)):
                size = _size(sequence)
                if size is not None and type(count) is int and size * count > MAX_OUTPUT:
                    raise TemplateTooCostly(
                        f"'*' would make {size * count} items (the limit is {MAX_OUTPUT})"
                    )
        elif operator == "**":
            if type(right) is int and right > MAX_EXPONENT and left not in (0, 1, -1):
                raise TemplateTooCostly(f"'**' with exponent {right} (the limit is {MAX_EXPONENT})")
        elif operator == "%" and isinstance(left, str):
            values = right if isinstance(right, tuple) else (right,)
            if any(_too_big(v) for v in values):
                raise TemplateTooCostly(f"'%' with a number over {MAX_OUTPUT}")
        return super().call_binop(context, operator, left, right)

    def call(self, __context: Any, __obj: Any, *args: Any, **kwargs: Any) -> Any:
        if any(_too_big(v) for v in (*args, *kwargs.values())):
            raise TemplateTooCostly(f"a call with a number over {MAX_OUTPUT}")
        return super().call(__context, __obj, *args, **kwargs)


def bounded_filters(filters: dict[str, Callable[..., Any]]) -> None:
    """Every filter in ``filters`` refusing a number argument over the limit
    (``'x' | center(10**9)``); Jinja's own markers (``pass_context``, ...) kept."""
    for name, function in list(filters.items()):
        filters[name] = _bounded(function)


def _bounded(function: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(function)
    def checked(*args: Any, **kwargs: Any) -> Any:
        if any(_too_big(v) for v in (*args[1:], *kwargs.values())):
            raise TemplateTooCostly(f"a filter with a number over {MAX_OUTPUT}")
        return function(*args, **kwargs)

    return checked


def render_bounded(template: jinja2.Template, context: Mapping[str, Any]) -> str:
    """``template`` rendered, piece by piece, refused past ``MAX_OUTPUT`` or ``MAX_SECONDS``."""
    token = _deadline.set(time.monotonic() + MAX_SECONDS)
    pieces: list[str] = []
    size = 0
    try:
        for piece in template.generate(context):
            size += len(piece)
            if size > MAX_OUTPUT:
                raise TemplateTooCostly(f"it renders to over {MAX_OUTPUT} characters")
            _check_time()
            pieces.append(piece)
    finally:
        _deadline.reset(token)
    return "".join(pieces)
