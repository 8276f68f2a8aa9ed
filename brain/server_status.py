"""What ``brain status`` says about a server, as data: health, vLLM version, served models and
context, requests running and waiting, KV cache use and speculative decoding's acceptance
over a short window of ``/metrics``. A llama.cpp ``llama-server`` is told by its ``/props``:
its slots (``--parallel``), each slot's window, the busy ones (``/slots``) and its
``llamacpp:`` metrics (``--metrics``).

``status_facts`` asks the server (any OpenAI-compatible one: the brain need not have started
it); ``status_rows`` turns the facts into the table people read, and ``--json`` prints the
facts themselves. No printing here.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import httpx


def _get(url: str, api_key: str | None = None) -> Any:
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    try:
        r = httpx.get(url, headers=headers, timeout=5.0)
    except httpx.HTTPError as exc:
        return exc
    return r


def status_facts(base: str, api_key: str | None, interval: float) -> dict[str, Any]:
    """Health, version, models and the metrics of the server at ``base`` (its root URL), as
    plain data: ``brain status`` prints it as a table, or as JSON with ``--json``."""
    from brain.metrics import fetch_metrics, spec_decode_delta

    health = _get(f"{base}/health")
    code = getattr(health, "status_code", None)
    facts: dict[str, Any] = {
        "health": "ok" if code == 200 else ("http_error" if code else "unreachable"),
        "health_status": code,
        "health_error": None if code else (str(health) or type(health).__name__),
    }
    if code != 200:
        if code is not None:
            kind = health.headers.get("content-type", "").split(";", 1)[0].strip()
            facts["health_content_type"] = kind or None
        return facts
    version = _get(f"{base}/version")
    models = _get(f"{base}/v1/models", api_key)
    if getattr(version, "status_code", 0) == 200:
        facts["vllm_version"] = version.json().get("version")
    models_code = getattr(models, "status_code", 0)
    if models_code == 200:
        facts["models"] = [
            {
                "id": m.get("id"),
                # llama-server's cards: the slot's window in meta.n_ctx
                "max_model_len": m.get("max_model_len") or (m.get("meta") or {}).get("n_ctx"),
            }
            for m in models.json().get("data") or []
        ]
    elif models_code == 401:
        facts["models_error"] = "the server wants an API key (--api-key or OPENAI_API_KEY)"
    if "vllm_version" not in facts and _llama_cpp_facts(base, api_key, facts):
        return facts
    try:
        before = asyncio.run(fetch_metrics(base))
        time.sleep(interval)
        after = asyncio.run(fetch_metrics(base))
    except Exception as exc:
        facts["metrics_error"] = str(exc)
        return facts
    facts["requests_running"] = after.requests_running or 0
    facts["requests_waiting"] = after.requests_waiting or 0
    facts["kv_cache_usage"] = after.kv_cache_usage
    facts["interval_s"] = interval

    def spec_facts(sd: Any) -> dict[str, float] | None:
        if sd is None:
            return None
        return {
            "acceptance_rate": sd.acceptance_rate,
            "mean_acceptance_length": sd.mean_acceptance_length,
            "drafts": sd.drafts,
        }

    window = spec_decode_delta(before, after)
    facts["speculative"] = after.spec_drafts is not None or window is not None
    facts["speculative_window"] = spec_facts(window)
    facts["speculative_since_start"] = (
        spec_facts(spec_decode_delta(type(after)(), after))
        if after.spec_drafts is not None
        else None
    )
    return facts


def _json_of(response: Any) -> Any:
    try:
        return response.json()
    except ValueError:
        return None


def _llama_cpp_facts(base: str, api_key: str | None, facts: dict[str, Any]) -> bool:
    """llama-server's slots and metrics into ``facts``; False when ``/props`` says the server
    is not llama-server (tools/server: ``total_slots``, ``default_generation_settings.n_ctx``,
    ``/slots`` and ``/metrics`` answering 501 when turned off)."""
    from brain.metrics import parse_prometheus_text

    props = _get(f"{base}/props", api_key)
    body = _json_of(props) if getattr(props, "status_code", 0) == 200 else None
    if not isinstance(body, dict) or "total_slots" not in body:
        return False
    facts["server"] = "llama.cpp"
    facts["slots"] = body.get("total_slots")
    facts["slot_n_ctx"] = (body.get("default_generation_settings") or {}).get("n_ctx")
    slots = _get(f"{base}/slots", api_key)
    listed = _json_of(slots) if getattr(slots, "status_code", 0) == 200 else None
    if isinstance(listed, list):
        facts["slots_busy"] = sum(1 for slot in listed if slot.get("is_processing"))
    else:
        facts["slots_busy"] = None
    metrics = _get(f"{base}/metrics", api_key)
    if getattr(metrics, "status_code", 0) != 200:
        facts["metrics_error"] = "off (start llama-server with --metrics)"
        return True
    try:
        samples = parse_prometheus_text(metrics.text)
    except ValueError as exc:
        facts["metrics_error"] = str(exc)
        return True

    def value(name: str) -> float:
        return samples.get((f"llamacpp:{name}", frozenset()), 0.0)

    facts["requests_running"] = value("requests_processing")
    facts["requests_waiting"] = value("requests_deferred")
    facts["prompt_tokens"] = value("prompt_tokens_total")
    facts["generated_tokens"] = value("tokens_predicted_total")
    return True


def _llama_cpp_rows(facts: dict[str, Any]) -> list[tuple[str, str]]:
    busy = facts.get("slots_busy")
    rows = [
        (
            "slots",
            f"{facts['slots']} x {facts['slot_n_ctx']} tokens (the window is one slot's)"
            + (f", {busy} busy" if busy is not None else ", /slots off (--slots)"),
        )
    ]
    if "metrics_error" in facts:
        return [*rows, ("metrics", facts["metrics_error"])]
    return [
        *rows,
        (
            "requests",
            f"processing {facts['requests_running']:g}, deferred {facts['requests_waiting']:g}",
        ),
        (
            "tokens",
            f"prompt {facts['prompt_tokens']:g}, generated {facts['generated_tokens']:g} "
            "(since start)",
        ),
    ]


def unhealthy_reason(facts: dict[str, Any], base: str) -> str | None:
    """One line saying why the server at ``base`` is not serving, from :func:`status_facts`'
    data; None when its /health is 200. ``brain status`` prints it and exits 1."""
    code = facts["health_status"]
    if code == 200:
        return None
    if code is None:
        return (
            f"nothing answers at {base} ({facts['health_error']}): check the host and port, "
            "and that the server is running (brain ps lists the brain's servers)"
        )
    if code == 503:
        return (
            f"the server at {base} answers /health with HTTP 503: its engine is dead or not "
            "loaded yet (brain logs shows which)"
        )
    page = f" ({facts['health_content_type']})" if facts.get("health_content_type") else ""
    if code == 404:
        return (
            f"no vLLM server at {base}: GET /health answered HTTP 404{page}; check the host "
            "and port (vLLM answers /health at its root)"
        )
    return f"the server at {base} answers /health with HTTP {code}{page}: it is not serving"


def status_rows(facts: dict[str, Any]) -> list[tuple[str, str]]:
    """The table rows of ``brain status`` for :func:`status_facts`' data."""
    code = facts["health_status"]
    rows = [
        (
            "health",
            "ok (200)"
            if code == 200
            else (f"HTTP {code}" if code else f"unreachable ({facts['health_error']})"),
        )
    ]
    if code != 200:
        return rows
    if "vllm_version" in facts:
        rows.append(("vLLM version", str(facts["vllm_version"])))
    for m in facts.get("models", []):
        rows.append(("model", f"{m['id']}  max_model_len {m['max_model_len']}"))
    if "models_error" in facts:
        rows.append(("model", facts["models_error"]))
    if facts.get("server") == "llama.cpp":
        return rows + _llama_cpp_rows(facts)
    if "metrics_error" in facts:
        rows.append(("metrics", f"unavailable ({facts['metrics_error']})"))
        return rows
    rows.append(
        (
            "requests",
            f"running {facts['requests_running']:g}, waiting {facts['requests_waiting']:g}",
        )
    )
    if facts["kv_cache_usage"] is not None:
        rows.append(("KV cache use", f"{facts['kv_cache_usage'] * 100:.1f}%"))
    interval = facts["interval_s"]
    window, life = facts["speculative_window"], facts["speculative_since_start"]
    if window is not None:
        rows.append(
            (
                "speculative",
                f"acceptance rate {window['acceptance_rate'] * 100:.1f}%, mean acceptance length "
                f"{window['mean_acceptance_length']:.2f} (over {interval:g} s, "
                f"{window['drafts']:g} drafts)",
            )
        )
    elif facts["speculative"]:
        # Traffic ended before the window: the counters since the server started still say
        # how speculation went.
        since = (
            f"; since start: acceptance rate {life['acceptance_rate'] * 100:.1f}%, mean "
            f"acceptance length {life['mean_acceptance_length']:.2f} ({life['drafts']:g} drafts)"
            if life is not None
            else ""
        )
        rows.append(("speculative", f"on; no drafts in the last {interval:g} s{since}"))
    else:
        rows.append(("speculative", "off (no spec_decode metrics)"))
    return rows
