"""The attribute names a trace carries, and the server an endpoint names.

Names under ``gen_ai.*``, ``server.*`` and ``error.type`` are the OpenTelemetry GenAI semantic
conventions' (agent, inference and execute-tool spans; Development status, as of semconv
1.41); the conventions name none for what only Marathon has (phases, checks, steps,
compactions), which go under ``marathon.*``. Kept in one place so that a renamed convention is
changed here and nowhere else.
"""

from __future__ import annotations

from urllib.parse import urlsplit

OPERATION = "gen_ai.operation.name"
PROVIDER = "gen_ai.provider.name"
AGENT_NAME = "gen_ai.agent.name"
CONVERSATION_ID = "gen_ai.conversation.id"
REQUEST_MODEL = "gen_ai.request.model"
REQUEST_MAX_TOKENS = "gen_ai.request.max_tokens"
REQUEST_TEMPERATURE = "gen_ai.request.temperature"
REQUEST_STREAM = "gen_ai.request.stream"
RESPONSE_FINISH_REASONS = "gen_ai.response.finish_reasons"
RESPONSE_TIME_TO_FIRST_CHUNK = "gen_ai.response.time_to_first_chunk"
USAGE_INPUT_TOKENS = "gen_ai.usage.input_tokens"
USAGE_OUTPUT_TOKENS = "gen_ai.usage.output_tokens"
TOOL_NAME = "gen_ai.tool.name"
TOOL_CALL_ID = "gen_ai.tool.call.id"
TOOL_TYPE = "gen_ai.tool.type"
SERVER_ADDRESS = "server.address"
SERVER_PORT = "server.port"
ERROR_TYPE = "error.type"

INVOKE_AGENT = "invoke_agent"
CHAT = "chat"
EXECUTE_TOOL = "execute_tool"

OPENAI = "openai"
"""``gen_ai.provider.name``: the conventions name the API flavour here (vLLM, llama.cpp and the
others serve OpenAI's chat API); ``server.address`` and the model tell which server it was."""

SERVICE_NAME = "marathon"
SCOPE_NAME = "marathon.pilot.trace"


def server_of(endpoint: str | None) -> tuple[str, int] | None:
    """``(server.address, server.port)`` of a base URL such as ``http://10.0.0.5:8000/v1``
    (the scheme's port when the URL names none); None when it names no host."""
    if not endpoint:
        return None
    try:
        parts = urlsplit(endpoint)
        port = parts.port
    except ValueError:
        return None
    if not parts.hostname:
        return None
    if port is None:
        port = 443 if parts.scheme == "https" else 80
    return parts.hostname, port
