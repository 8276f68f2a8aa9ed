"""The bench wing: ``brain bench``, a load generator and meter for any OpenAI-compatible endpoint.

Modules: ``generator`` (configs, prompts, the sender and the drivers for load points and
depths), ``replay`` (recorded agent runs replayed, prefix caches and all), ``report`` and
``replay_report`` (tables, Markdown, JSON), ``plot`` (the PNG), ``output`` (the ending both
share) and ``cli`` / ``replay_cli`` (the command).

It must not start or stop servers: it measures whatever answers at the URL it is given.
"""
