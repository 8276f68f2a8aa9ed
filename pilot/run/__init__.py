"""The run wing: a run started, resumed, queued and ended in one process.

Modules: ``runner`` (``Runner`` and ``RunSession``: the lease, the one ``emit`` path, held
events and their transaction, checkpoints, a cancel heard), ``outcomes`` (how a sitting ends: the
outcome, its exit code, a database that takes no writes), ``launch`` (a workflow file or stored
run to a driven run; dry runs), ``queue`` (matrix runs and queue workers), ``admission``
(KV-aware admission against the servers' ``/metrics``), ``notify`` (the end-of-run command),
``claims`` (a checkpoint's claims checked against the events), ``confinement`` (the sandbox
choice in words), ``cancel_bell`` (``pilot cancel`` heard at once), ``cancel``
(``request_cancel``), ``session_stop`` (one sitting's stop).

It must not decide what a step does (that is ``pilot.agent``'s) nor print anything (that is
``pilot.front``'s): it wires the store, the model clients, the tools and the loop together.
"""
