"""The tactics wing: what the pilot does for models that do not call tools cleanly.

Modules: ``repair`` (calls written imperfectly, repaired deterministically; the specific
answer to a turn with no runnable call), ``text_turns`` (a model that writes its calls as
text sees its history as text), ``locate`` (the functions a failing test run points at).

It decides; it never acts: no event is written and no tool is run here. The agent loop asks
and records what it does with the answer, so resume and the event format do not depend on
which tactic was used.
"""
