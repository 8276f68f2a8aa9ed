"""The tactics wing: what the pilot does for models that do not call tools cleanly.

Modules by job: ``arguments`` (a call's arguments repaired deterministically), ``dialects``
(calls written as text in the answer, in the formats models write), ``fitting`` (calls fitted
to the tools' schemas), ``feedback`` (what to say to a turn with no runnable call, how hot to
ask again), ``text_turns`` (a model that writes its calls as text sees its history as text),
``locate`` (the functions a failing test run points at), and ``small_models``
(``SmallModelTactics``: the answers to the agent's ``Tactics`` seam, made of those).

It decides; it never records: no event is written here, and a command runs only through the
runner the loop lends (``code_to_show``). The agent loop asks and records what it does with
the answer, so resume and the event format do not depend on which tactic was used. A run
whose model calls its tools cleanly enters here through one check per answer.
"""
