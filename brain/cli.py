"""The ``brain`` command line: one typer app; each command lives with the module that owns it."""

from __future__ import annotations

import typer

from brain import __version__

app = typer.Typer(
    name="brain",
    help="Run and watch the vLLM model server: launch, readiness, diagnosis, restarts, metrics.",
    no_args_is_help=True,
    context_settings={"help_option_names": ["-h", "--help"]},
)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"brain (marathon) {__version__}")
        raise typer.Exit()


@app.callback()
def main(
    version: bool = typer.Option(
        False, "--version", callback=_version, is_eager=True, help="Show the version and exit."
    ),
) -> None:
    """Run and watch the vLLM model server."""


def _register() -> None:
    """Each command lives with the module that owns it."""
    from brain.bench.cli import register as register_bench
    from brain.cli_server import register as register_server
    from brain.sim.cli import sim_command
    from brain.tune.cli import register as register_tune

    register_server(app)
    register_bench(app)
    register_tune(app)
    app.command("sim", help="Serve the simulated vLLM server (no GPU needed).")(sim_command)


_register()
