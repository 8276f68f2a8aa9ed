"""The front wing: what a person types and sees.

Modules: ``cli`` (the ``pilot`` typer app), ``cli_errors`` (one ``error:`` line naming the
fix, exit 2), ``ui`` (the live view, the timeline, JSON lines), ``outcome`` (the lines printed
when a run stops), ``report_cli`` (``pilot report`` and ``pilot gc``), ``replay_export`` (a
stored run's requests as a ``brain bench --replay`` file).

It must not import the store's ORM nor the model client at import time: ``pilot --help``,
``pilot runs`` and ``pilot show`` pay only for what they use.
"""
