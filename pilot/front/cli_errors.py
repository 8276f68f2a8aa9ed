"""What a user gets wrong, said as what is wrong and what to do: one place for the CLI.

The ``pilot`` app's commands run inside :class:`UserErrorGroup`, which turns the exceptions a
bad flag, URL, environment or file raises (ours, the OS's) into one ``error:`` line and exit
code 2; anything else is a bug and keeps its traceback. Opening the store goes through
:func:`pilot.store.opening.open_store`, which knows the URL and so can say which part of it is
wrong.
"""

from __future__ import annotations

from typing import Any

import click
import typer
from typer.core import TyperGroup

from pilot.errors import MarathonError


def describe(exc: BaseException) -> str | None:
    """The one-line message for an exception a user can cause, or None for a bug."""
    if isinstance(exc, MarathonError):
        return str(exc)
    from pilot.store.opening import state_dir_problem  # the store is imported on errors only

    if isinstance(exc, (FileExistsError, NotADirectoryError)) and (problem := state_dir_problem()):
        return problem
    if isinstance(exc, (PermissionError, FileExistsError, NotADirectoryError, IsADirectoryError)):
        name = exc.filename or ""
        return f"cannot use {name}: {exc.strerror}; check that path (and MARATHON_HOME)"
    if isinstance(exc, UnicodeDecodeError):
        return f"a file is not UTF-8 text ({exc.reason}); give a text file"
    return None


def fail(message: str, code: int = 2) -> typer.Exit:
    """Print ``error: message`` on stderr; the caller raises the returned Exit."""
    from rich.console import Console
    from rich.text import Text

    Console(stderr=True, highlight=False, soft_wrap=True).print(
        Text.assemble(("error: ", "bold red"), message)
    )
    return typer.Exit(code)


class UserErrorGroup(TyperGroup):
    """The app's group: every command's user errors end as one message and exit code 2."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except (click.exceptions.Exit, click.ClickException, click.Abort):
            raise
        except Exception as exc:
            message = describe(exc)
            if message is None:
                raise
            raise fail(message, 2) from None
