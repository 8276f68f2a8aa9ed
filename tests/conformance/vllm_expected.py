"""Compute vLLM's own answers for the conformance cases, with an installed vLLM (run by the
optional test in a Python that has vLLM; ``VLLM_TARGET_DEVICE=cpu`` lets it import without a GPU).

Input on stdin: a JSON list of ``{"id", "body", "max_model_len", "prompt_tokens",
"content_type"}``. Output on stdout: a JSON object ``{id: {"status", "error"} | {"status": 200,
"max_tokens"}}``. Each request goes through, in vLLM's order:

1. vLLM's chat route as FastAPI mounts it: its ``ChatCompletionRequest`` model, its
   ``validate_json_request`` dependency and its exception handlers (``init_exception_handler``);
2. ``TokenizeParams`` with the request's limits, its prompt-length check on a prompt of
   ``prompt_tokens`` tokens (the sim's count, so both sides see one prompt), ``get_max_tokens``;
3. ``to_sampling_params`` (``SamplingParams._verify_args``), errors turned into bodies by
   vLLM's ``create_error_response``.

Nothing of the sim is imported: this file only runs vLLM. (No postponed annotations here:
FastAPI must see the route's request model itself.)
"""

import json
import os
import sys
from argparse import Namespace
from typing import Any

os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")


def main() -> int:
    from fastapi import Depends, FastAPI
    from fastapi.testclient import TestClient
    from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionRequest
    from vllm.entrypoints.serve.exception_handling.error_response import create_error_response
    from vllm.entrypoints.serve.exception_handling.register import init_exception_handler
    from vllm.entrypoints.serve.utils.api_utils import get_max_tokens, validate_json_request
    from vllm.renderers.params import TokenizeParams

    app = FastAPI()
    app.state.args = Namespace(log_error_stack=False)
    init_exception_handler(app)
    seen: dict[str, ChatCompletionRequest] = {}

    @app.post("/v1/chat/completions", dependencies=[Depends(validate_json_request)])
    async def chat(request: ChatCompletionRequest) -> dict[str, Any]:
        seen["last"] = request
        return {"ok": True}

    client = TestClient(app)
    out: dict[str, Any] = {}
    for case in json.load(sys.stdin):
        seen.clear()
        headers = {"content-type": case.get("content_type") or "application/json"}
        raw = case.get("raw")
        data = raw.encode() if raw is not None else json.dumps(case["body"]).encode()
        answer = client.post("/v1/chat/completions", content=data, headers=headers)
        if answer.status_code != 200:
            out[case["id"]] = {"status": answer.status_code, "error": answer.json()["error"]}
            continue
        request = seen["last"]
        try:
            if request.max_completion_tokens is not None:
                wanted, param = request.max_completion_tokens, "max_completion_tokens"
            else:
                wanted, param = request.max_tokens, "max_tokens"
            params = TokenizeParams(
                max_total_tokens=case["max_model_len"],
                max_output_tokens=wanted,
                max_total_tokens_param="max_model_len",
                max_output_tokens_param=param,
            )
            params._token_len_check(None, [0] * case["prompt_tokens"])
            max_tokens = get_max_tokens(case["max_model_len"], wanted, case["prompt_tokens"], {})
            request.to_sampling_params(max_tokens, {})
        except Exception as exc:  # vLLM's own errors, answered by its own helper
            body = create_error_response(exc).model_dump()
            out[case["id"]] = {"status": body["error"]["code"], "error": body["error"]}
            continue
        out[case["id"]] = {"status": 200, "max_tokens": max_tokens}
    json.dump(out, sys.stdout)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
