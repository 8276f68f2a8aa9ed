"""The task suite: real open-source code, hidden checks, Marathon against a plain loop."""
