"""The report wing: the morning report, built only from recorded facts.

Modules: ``facts`` (the report as plain data, and the table cells both renderings show),
``build`` (those facts from the store, the one fold of ``pilot.agent.state`` and git),
``markdown`` (the text) and ``html`` (one self-contained page: inline CSS and SVG, no scripts);
the commands are ``pilot.front.report_cli``'s. The renderings import only ``facts``.

It must not change anything: a report reads the store and the work branches, never writes.
"""
