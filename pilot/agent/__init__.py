"""The agent wing: one run's durable engine, from folded events to the next act.

Modules: ``loop`` (``AgentLoop``: each ``advance()`` does the one next thing the state calls
for, the life of one step), ``seams`` (what the loop is given: the event sink, the tools, the
workspace, the ``Tactics`` it asks), ``state`` (``RunState = fold(events)``, pure; the one
place a run's totals are counted), ``phase_start`` (a phase's opening prompt), ``calls``
(refusals and results of calls), ``checks`` (a phase's check, recorded once), ``endings``
(how a phase or a run ends, and the exceptions that stop one), ``window`` (the request kept
in the window; compaction as an act), ``context`` (counting and the budget), ``compaction``
(which turns a summary replaces), ``progress`` (loops, no progress, idling), ``images`` and
``media`` (how an image travels to the server), ``stopping`` (a stop reaching a wait).

It must not do I/O but through the seams the loop is given, nor keep any state that is not
folded from events: a resume continues exactly where a dead process stopped. How a small
model's imperfect answers are read is not decided here but asked of the ``Tactics`` seam;
the agent imports nothing of ``pilot.tactics`` (an import rule).
"""
