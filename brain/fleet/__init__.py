"""The fleet wing: several replicas of one server, one per GPU or GPU group.

Modules: ``plan`` (replicas, their GPUs, ports and memory shares, and fleet files; pure),
``run`` (start and watch the replicas' supervisors) and ``cli`` (the fleet side of
``brain up/down/ps/status``).

It must not launch vLLM itself: each replica is a supervised server like any other.
"""
