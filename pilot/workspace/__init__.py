"""The workspace wing: the run's own git worktree and what the loop may do to it.

Modules: ``snapshot`` (the run's worktree and work branch, private-ref snapshots, restore,
stale git locks) and ``executor`` (the loop's seams over ``tools.registry`` and git).

It must not touch the user's checkout (HEAD, index, working tree, branches) unless the
workflow says ``workspace.in_place``.
"""
