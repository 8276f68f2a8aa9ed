"""vLLM's error statuses and bodies, as the openai client and plain HTTP see them."""

from __future__ import annotations

import asyncio

import httpx
import openai
import pytest

from brain.sim.config import SimConfig, Timing
from brain.sim.server import running_sim
from brain.sim.tokenizer import count_chat

MESSAGES = [{"role": "user", "content": "hello there"}]


def test_unknown_model_is_404_not_found_error():
    with running_sim(SimConfig(model="real")) as sim:
        client = openai.OpenAI(base_url=sim.openai_base_url, api_key="x", max_retries=0)
        with pytest.raises(openai.NotFoundError) as caught:
            client.chat.completions.create(model="other", messages=MESSAGES)
        assert caught.value.status_code == 404
        assert caught.value.body["message"] == (
            "The model `other` does not exist. Valid aliases: real."
        )  # vllm/entrypoints/serve/engine/serving.py:78 (0.33)
        assert caught.value.body["type"] == "NotFoundError"


def test_unknown_model_in_the_026_flavour_names_no_aliases():
    with running_sim(SimConfig(model="real", vllm_version="0.26")) as sim:
        response = httpx.post(
            sim.openai_base_url + "/chat/completions", json={"model": "x", "messages": MESSAGES}
        )
    assert response.json()["error"]["message"] == "The model `x` does not exist."


def test_prompt_plus_max_tokens_over_the_window_is_clamped_in_033():
    """0.33 serves it with max_tokens cut to the room left (``get_max_tokens``); the answer
    ends with finish_reason length when the model had more to say."""
    prompt = count_chat(MESSAGES)
    window = prompt + 5
    with running_sim(SimConfig(model="m", max_model_len=window)) as sim:
        client = openai.OpenAI(base_url=sim.openai_base_url, api_key="x", max_retries=0)
        answer = client.chat.completions.create(model="m", messages=MESSAGES, max_tokens=window)
        assert answer.usage.prompt_tokens == prompt
        assert answer.usage.completion_tokens == 5
        assert answer.choices[0].finish_reason == "length"


def test_context_overflow_in_the_026_flavour_is_its_400():
    with running_sim(SimConfig(model="m", max_model_len=64, vllm_version="0.26")) as sim:
        client = openai.OpenAI(base_url=sim.openai_base_url, api_key="x", max_retries=0)
        prompt = count_chat(MESSAGES)
        with pytest.raises(openai.BadRequestError) as caught:
            client.chat.completions.create(model="m", messages=MESSAGES, max_tokens=60)
        reported = 64 - 60 + 1  # vLLM reports a lower bound: it stops tokenizing there
        assert prompt > reported - 1
        assert caught.value.body == {
            "message": (
                "This model's maximum context length is 64 tokens. However, you requested 60 "
                f"output tokens and your prompt contains at least {reported} input tokens, for a "
                f"total of at least {reported + 60} tokens. Please reduce the length of the input "
                "prompt or the number of requested output tokens. "
                f"(parameter=input_tokens, value={reported})"
            ),
            "type": "BadRequestError",
            "param": "input_tokens",
            "code": 400,
        }
        ok = client.chat.completions.create(model="m", messages=MESSAGES, max_tokens=64 - prompt)
        assert ok.choices[0].finish_reason in ("stop", "length")


def test_a_prompt_over_the_window_alone_is_033s_400():
    with running_sim(SimConfig(model="m", max_model_len=64)) as sim:
        client = openai.OpenAI(base_url=sim.openai_base_url, api_key="x", max_retries=0)
        with pytest.raises(openai.BadRequestError) as caught:
            client.chat.completions.create(
                model="m", messages=[{"role": "user", "content": "x" * 400}]
            )
    assert caught.value.body == {
        "message": (
            "This model's maximum context length is 64 tokens. However, your prompt contains at "
            "least 65 input tokens, which exceeds this limit even without any output tokens. "
            "Please reduce the length of the input prompt. (parameter=input_tokens, value=65)"
        ),
        "type": "BadRequestError",
        "param": "input_tokens",
        "code": 400,
    }


def test_malformed_request_is_400_bad_request_not_422():
    with running_sim(SimConfig(model="m")) as sim:
        response = httpx.post(
            sim.openai_base_url + "/chat/completions", json={"model": "m", "messages": "nope"}
        )
        assert response.status_code == 400
        error = response.json()["error"]
        assert error["type"] == "Bad Request" and error["code"] == 400
        assert "validation error" in error["message"]
        client = openai.OpenAI(base_url=sim.openai_base_url, api_key="x", max_retries=0)
        with pytest.raises(openai.BadRequestError):
            client.chat.completions.create(model="m", messages=[{"role": "robot", "content": "x"}])


def test_api_key_guards_only_v1_paths():
    with running_sim(SimConfig(model="m", api_keys=["secret"])) as sim:
        bad = openai.OpenAI(base_url=sim.openai_base_url, api_key="wrong", max_retries=0)
        with pytest.raises(openai.AuthenticationError) as caught:
            bad.models.list()
        assert caught.value.status_code == 401
        raw = httpx.get(sim.openai_base_url + "/models")
        assert raw.status_code == 401 and raw.json() == {"error": "Unauthorized"}
        for path in ("/health", "/metrics", "/version"):
            assert httpx.get(sim.base_url + path).status_code == 200, path
        good = openai.OpenAI(base_url=sim.openai_base_url, api_key="secret", max_retries=0)
        assert good.models.list().data[0].id == "m"


def test_full_queue_is_503_busy():
    config = SimConfig(model="m", max_num_seqs=1, max_queue=0, timing=Timing(ttft=0.5))

    async def main(base_url: str) -> list[BaseException | object]:
        async with openai.AsyncOpenAI(base_url=base_url, api_key="x", max_retries=0) as client:
            first = asyncio.create_task(
                client.chat.completions.create(model="m", messages=MESSAGES)
            )
            await asyncio.sleep(0.15)
            second = client.chat.completions.create(model="m", messages=MESSAGES)
            return await asyncio.gather(first, second, return_exceptions=True)

    with running_sim(config) as sim:
        first, second = asyncio.run(main(sim.openai_base_url))
    assert not isinstance(first, BaseException)
    assert isinstance(second, openai.InternalServerError) and second.status_code == 503
    assert second.body == {
        "message": (
            "The engine is currently busy and cannot accept new requests. "
            "Please try again later or on a different instance."
        ),
        "type": "Service Unavailable",
        "param": None,
        "code": 503,
    }


def test_n_two_is_served_and_n_zero_refused_as_vllm_does():
    with running_sim(SimConfig(model="m")) as sim:
        client = openai.OpenAI(base_url=sim.openai_base_url, api_key="x", max_retries=0)
        answer = client.chat.completions.create(model="m", messages=MESSAGES, n=2, max_tokens=8)
        assert [c.index for c in answer.choices] == [0, 1]
        assert answer.usage.completion_tokens == 2 * 8
        with pytest.raises(openai.BadRequestError) as caught:
            client.chat.completions.create(model="m", messages=MESSAGES, n=0)
        assert caught.value.body["message"] == "n must be at least 1, got 0."
        assert caught.value.body["param"] is None
