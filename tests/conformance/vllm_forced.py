"""Read model outputs back with an installed vLLM's own parser, as its chat route does for a
non-streamed answer (run by the optional conformance test in a Python that has vLLM;
``VLLM_TARGET_DEVICE=cpu`` lets it import without a GPU).

Input on stdin: a JSON list of ``{"id", "parser", "body", "text", "engine_finish"}``: the
server's ``--tool-call-parser``, the chat request, what the model wrote and the engine's finish
reason. Output, written to the file named by ``argv[1]`` (vLLM logs the parser's own failures
on the standard streams): ``{id: {"constraint", "content", "calls", "finish_reason",
"stream": {"content", "calls", "finish_reason"}}}``, from

1. ``ParserManager.get_parser`` (auto tools on, as the sim serves) and the parser's
   ``adjust_request``: which constraint a forced choice gets (a structural tag or a JSON schema);
2. ``Parser.parse`` on the text, then ``assemble_chat_message_fields`` (content and calls) and
   ``resolve_finish_reason`` with the engine's reason, as ``chat_completion_full_generator`` does;
3. streamed: ``ChatStreamProcessor.step`` on the text in pieces of 4 characters, the engine's
   reason on the last, with a fresh parser, as ``chat_completion_stream_generator`` does; the
   deltas are summed up (content, each call's name and argument pieces, the last reason).

Nothing of the sim is imported: this file only runs vLLM.
"""

import json
import os
import sys
from typing import Any

os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")


class _Tokenizer:
    """The parsers only need a tokenizer to exist for a non-streamed read."""

    def get_vocab(self) -> dict[str, int]:
        return {}


def _streamed(processor_cls: Any, parser_cls: Any, request: Any, case: dict[str, Any]) -> Any:
    parser = parser_cls(_Tokenizer(), request.tools, chat_template_kwargs={}, model_config=None)
    processor = processor_cls(request, parser, enable_auto_tools=True, parser_cls=parser_cls)
    text = case["text"]
    pieces = [text[i : i + 4] for i in range(0, len(text), 4)] or [""]
    content, calls, finish = "", {}, None
    for number, piece in enumerate(pieces):
        last = number == len(pieces) - 1
        delta, reason = processor.step(piece, [1], case["engine_finish"] if last else None, [0])
        finish = reason or finish
        if delta is None:
            continue
        content += delta.content or ""
        for call in delta.tool_calls or []:
            name, args = calls.get(call.index, ["", ""])
            function = call.function
            calls[call.index] = [
                name or (function.name if function else None) or "",
                args + ((function.arguments if function else None) or ""),
            ]
    return {"content": content, "calls": [calls[i] for i in sorted(calls)], "finish_reason": finish}


def main() -> int:
    from vllm.entrypoints.openai.chat_completion.message_assembly import (
        assemble_chat_message_fields,
    )
    from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionRequest
    from vllm.entrypoints.openai.chat_completion.stream_processor import ChatStreamProcessor
    from vllm.entrypoints.serve.utils.tool_calls_utils import resolve_finish_reason
    from vllm.parser.parser_manager import ParserManager

    out: dict[str, Any] = {}
    for case in json.load(sys.stdin):
        cls = ParserManager.get_parser(tool_parser_name=case["parser"], enable_auto_tools=True)
        request = ChatCompletionRequest(**case["body"])
        parser = cls(_Tokenizer(), request.tools, chat_template_kwargs={}, model_config=None)
        adjusted = parser.adjust_request(request.model_copy(deep=True))
        constraint = adjusted.structured_outputs
        reasoning, content, calls = parser.parse(case["text"], request, enable_auto_tools=True)
        fields = assemble_chat_message_fields(
            request, reasoning, content, calls, enable_auto_tools=True, parser_cls=cls
        )
        out[case["id"]] = {
            "constraint": (
                "structural_tag"
                if constraint is not None and constraint.structural_tag
                else "json"
                if constraint is not None and constraint.json is not None
                else None
            ),
            "content": fields.content,
            "calls": [[c.function.name, c.function.arguments] for c in fields.tool_calls],
            "finish_reason": resolve_finish_reason(
                case["engine_finish"], request, bool(fields.tool_calls)
            ),
            "stream": _streamed(ChatStreamProcessor, cls, request, case),
        }
    with open(sys.argv[1], "w", encoding="utf-8") as handle:
        json.dump(out, handle)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
