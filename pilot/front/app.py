"""The ``pilot`` typer app and what its command modules share: options, the store, errors.

The commands live by job in ``cli_run`` (drive runs), ``cli_inspect`` (read the store),
``cli_queue`` (the queue) and are registered, in the order ``pilot --help`` lists them, by
``pilot.front.cli``; this module imports nothing heavy so that every command can use it.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, Literal, get_args

import typer
from rich.console import Console

from pilot import __version__
from pilot.errors import ConfigurationError, MarathonError, WorkflowError
from pilot.front.cli_errors import UserErrorGroup

app = typer.Typer(
    name="pilot",
    help="Run coding agents for hours against your own model server; resume after any crash.",
    no_args_is_help=True,
    cls=UserErrorGroup,
    context_settings={"help_option_names": ["-h", "--help"]},
    pretty_exceptions_enable=False,
)

Durability = Literal["normal", "full"]
"""``--durability``'s choices, shown in the help and completed: the store's DURABILITIES."""
DB_OPTION = typer.Option(
    None,
    "--db",
    envvar="MARATHON_DB",
    help="SQLAlchemy URL of the store (default: SQLite in "
    "the state directory, $MARATHON_HOME or ~/.local/state/marathon).",
)
ADMISSION_OPTION = typer.Option(
    True,
    "--admission/--no-admission",
    help="Start runs only while their contexts fit the server's KV cache (read from its "
    "/metrics), --parallel being the upper bound.",
)
ENDPOINT_OPTION = typer.Option(
    [],
    "--endpoint",
    metavar="URL",
    help="Use this OpenAI-compatible URL instead of the workflow's; repeat it (or give "
    "a comma-separated list) to route runs over several servers of one model.",
)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"pilot (marathon) {__version__}")
        raise typer.Exit()


@app.callback()
def main(
    version: bool = typer.Option(
        False, "--version", callback=_version, is_eager=True, help="Show the version and exit."
    ),
) -> None:
    """Run coding agents for hours against your own model server; resume after any crash."""
    if not sys.stdout.isatty() and hasattr(sys.stdout, "reconfigure"):
        sys.stdout.reconfigure(line_buffering=True)  # a log file is written as lines come


def _console() -> Console:
    return Console(stderr=False, highlight=False, soft_wrap=True)


def _fail(message: str, code: int = 2) -> typer.Exit:
    from rich.text import Text

    Console(stderr=True, highlight=False, soft_wrap=True).print(
        Text.assemble(("error: ", "bold red"), message)
    )
    return typer.Exit(code)


@contextmanager
def _user_errors() -> Iterator[None]:
    """Our errors become one clean message and an exit code; anything else is a bug."""
    try:
        yield
    except WorkflowError as exc:
        raise _fail(str(exc), 2) from None
    except MarathonError as exc:
        raise _fail(str(exc), 2) from None


def _endpoints(values: list[str]) -> list[str] | None:
    """``--endpoint`` given any number of times, each maybe a comma-separated list; each must
    be an http(s) URL (a ConfigurationError says which is not)."""
    from pilot.run.launch import split_endpoints
    from pilot.workflow.schema import check_endpoint_url

    urls = split_endpoints(values)
    for url in urls:
        try:
            check_endpoint_url(url)
        except ValueError as exc:
            raise ConfigurationError(f"--endpoint: {exc}") from None
    return urls or None


def _notes(console: Console, json_lines: bool) -> Console:
    """Where notes for a person go: stderr in JSON mode, whose stdout is JSON lines only."""
    return Console(stderr=True, highlight=False, soft_wrap=True) if json_lines else console


def _durability_option(default: str | None, what: str) -> Any:
    return typer.Option(
        default,
        "--durability",
        help=f"{' or '.join(get_args(Durability))}: normal survives any process death, "
        f"full also a power cut (fsync). {what}",
    )


def _store(db: str | None, durability: str = "normal", *, create: bool = True):
    """The store, or a ConfigurationError naming what is wrong (see ``pilot.front.cli_errors``)."""
    from pilot.environ import protect_environment
    from pilot.store.opening import open_store

    store = open_store(db, durability, create=create)
    protect_environment()  # before any tool runs: /proc/<pid>/environ shows no secret
    return store
