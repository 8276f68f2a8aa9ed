"""Where an OpenAI-compatible server's routes live, from the URL a user gives.

Users give the OpenAI base URL (``http://host:8000/v1``); vLLM's ``/health``, ``/metrics``,
``/tokenize`` and ``/version`` sit at the server's root. One rule for every caller, brain and
pilot alike, so a trailing slash or a missing ``/v1`` means the same everywhere.
"""

from __future__ import annotations


def server_root(base_url: str) -> str:
    """``http://host:8000/v1/`` -> ``http://host:8000``; a URL without ``/v1`` is its own root."""
    return base_url.strip().rstrip("/").removesuffix("/v1")
