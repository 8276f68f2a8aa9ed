"""The report wing: the morning report, built only from recorded facts.

Modules: ``build`` (the facts of each run, from its stored events, and the Markdown text),
``html`` (one self-contained page: inline CSS and SVG, no scripts) and ``cli``
(``pilot report`` and ``pilot gc``).

It must not change anything: a report reads the store and the work branches, never writes.
"""
