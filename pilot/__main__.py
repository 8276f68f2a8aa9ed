"""``python -m pilot`` is the ``pilot`` command."""

from pilot.cli import app

app()
