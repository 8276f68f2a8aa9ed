"""The agent wing: one run's durable engine, from folded events to the next act.

Modules: ``loop`` (``AgentLoop``: each ``advance()`` does the one next thing the state calls
for, through its seams), ``state`` (``RunState = fold(events)``, pure; the one place a run's
totals are counted), ``context`` (the window budget and compaction planning), ``progress``
(loops, no progress, idling: what the loop watches for), ``images`` (how an image in the
conversation travels to the server).

It must not do I/O but through the seams the loop is given (event sink, model client, tool
executor, workspace), nor keep any state that is not folded from events: a resume continues
exactly where a dead process stopped. How a small model's imperfect answers are read is not
decided here but asked of ``pilot.tactics``.
"""
