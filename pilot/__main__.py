"""``python -m pilot`` is the ``pilot`` command."""

from pilot.front.cli import app

app()
