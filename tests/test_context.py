"""The context budget and compaction planning (pilot.agent.context).

Pure parts are tested directly; token counting and the "every request fits" property are tested
against the simulated vLLM over real loopback HTTP (its tokenizer is ceil(bytes/4) over a
ChatML-like rendering, and its 400 "maximum context length" check is vLLM's).
"""

from __future__ import annotations

import asyncio
import itertools
import json
from collections.abc import Iterator
from contextlib import asynccontextmanager
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from brain.sim.config import SimConfig
from brain.sim.policy import SimTurn
from brain.sim.server import running_sim
from brain.sim.tokenizer import count_chat
from pilot.agent.compaction import (
    AFTER_FRACTION,
    CHECK_FAILED,
    SUMMARY_HEADER,
    PhaseFacts,
    apply_compaction,
    events_summary,
    is_summary_message,
    plan_compaction,
    recent_allowance,
    summary_chars,
    summary_message,
    summary_request,
)
from pilot.agent.context import (
    Budget,
    ServerCounts,
    TokenCounter,
    estimate_message_tokens,
    message_key,
)
from pilot.agent.result_cut import cut_file_page, cut_tool_output
from pilot.errors import BadRequest, ContextOverflow, ServerUnavailable
from pilot.model.client import OpenAIModelClient
from pilot.model.settings import ClientSettings
from pilot.model.types import ChatRequest, RetryPolicy

MODEL = "sim/context-model"
WINDOW = 8192
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": name,
            "description": f"The {name} tool: does what its name says, inside the workspace.",
            "parameters": {
                "type": "object",
                "properties": {"path": {"type": "string"}, "content": {"type": "string"}},
            },
        },
    }
    for name in ("read_file", "write_file", "run", "finish")
]


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


# -- conversations ----------------------------------------------------------------------------


def call_turn(i: int, name: str, path: str, result: str, text: str = "") -> list[dict[str, Any]]:
    call_id = f"call-{i}"
    arguments = json.dumps({"path": path})
    return [
        {
            "role": "assistant",
            "content": text,
            "tool_calls": [
                {
                    "id": call_id,
                    "type": "function",
                    "function": {"name": name, "arguments": arguments},
                }
            ],
        },
        {"role": "tool", "tool_call_id": call_id, "content": result},
    ]


def conversation(turns: int, result_chars: int = 900) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "You are a careful coding agent. Use the tools."},
        {"role": "user", "content": "Phase 1/1: refactor\n\nRename util.parse to parse_config."},
    ]
    for i in range(turns):
        name = "write_file" if i % 4 == 3 else "read_file"
        body = f"# module {i}\n" + ("def f(x):\n    return x + 1\n" * (result_chars // 28))
        messages += call_turn(i, name, f"src/mod{i}.py", body, text=f"Looking at module {i}.")
    return messages


class SummaryPolicy:
    """Answers the summary request with a structured summary, anything else with a short text."""

    def respond(self, request: Any) -> SimTurn:
        first = request.messages[0].text if request.messages else ""
        if first.startswith("You write the working notes"):
            return SimTurn(
                content="## Goal\n- Rename parse.\n## Progress\n- Read modules.\n"
                "## Decisions\n- None.\n## Files\n- read: src/mod1.py\n## Open problems\n- None.\n"
                "## Next step\n- Edit src/mod2.py."
            )
        return SimTurn(content="ok")


@asynccontextmanager
async def sim_client(**config: Any) -> Iterator[OpenAIModelClient]:
    settings_: dict[str, Any] = {"model": MODEL, "max_model_len": WINDOW}
    settings_.update(config)
    with running_sim(SimConfig(**settings_), policy=SummaryPolicy()) as running:
        client = OpenAIModelClient(
            running.openai_base_url,
            ClientSettings(request_timeout=10.0, idle_timeout=5.0, server_wait=5.0),
            retry=RetryPolicy(initial_backoff=0.05, max_backoff=0.25, jitter=0.02),
        )
        try:
            yield client
        finally:
            await client.aclose()


class CountingCalls:
    """Wraps a count_tokens callable and counts the calls (each one is a /tokenize request)."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.calls = 0

    async def __call__(self, model: str, messages: Any, tools: Any) -> int | None:
        self.calls += 1
        return await self.inner(model, messages, tools)


# -- token counting against the sim ------------------------------------------------------------


@pytest.mark.anyio
async def test_counting_one_more_message_costs_one_tokenize_call() -> None:
    async with sim_client() as client:
        calls = CountingCalls(client.count_tokens)
        counter = TokenCounter(calls, MODEL)
        messages = conversation(10)
        await counter.count(messages[:-1], TOOLS)
        before = calls.calls
        await counter.count(messages, TOOLS)
        assert calls.calls - before == 1
        await counter.count(messages, TOOLS)
        assert calls.calls - before == 1  # all cached now
        assert counter.uses_server is True


async def sim_tokenizer(model: str, messages: Any, tools: Any) -> int:
    """The sim's own tokenizer, the same function behind its /tokenize (no HTTP needed)."""
    return count_chat(messages, tools)


_text = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=300)


@given(
    texts=st.lists(_text, min_size=1, max_size=8),
    arguments=st.lists(st.dictionaries(st.text(max_size=8), _text, max_size=3), max_size=3),
)
@settings(max_examples=60, deadline=None)
def test_upper_bound_is_never_below_the_real_count(
    texts: list[str], arguments: list[dict[str, str]]
) -> None:
    messages: list[dict[str, Any]] = [{"role": "user", "content": t} for t in texts]
    for i, args in enumerate(arguments):
        call = {"id": f"c{i}", "type": "function"}
        call["function"] = {"name": "write_file", "arguments": json.dumps(args)}
        messages.append({"role": "assistant", "content": None, "tool_calls": [call]})
        messages.append({"role": "tool", "tool_call_id": f"c{i}", "content": texts[0]})

    async def check() -> None:
        counter = TokenCounter(sim_tokenizer, MODEL)
        bound = await counter.upper_bound(messages, TOOLS)
        assert bound is not None
        assert bound >= count_chat(messages, TOOLS)

    asyncio.run(check())


FIXED_COST_CALLS = 3
"""Two probes (an empty request is never sent: vLLM refuses it), the tool schemas with a probe."""


@pytest.mark.anyio
async def test_far_from_the_limit_a_new_step_costs_no_tokenize_call() -> None:
    async with sim_client() as client:
        calls = CountingCalls(client.count_tokens)
        counter = TokenCounter(calls, MODEL)
        messages = conversation(10)
        first = await counter.upper_bound(messages[:-2], TOOLS)
        assert calls.calls == FIXED_COST_CALLS  # the fixed overhead and the tool schemas, once
        second = await counter.upper_bound(messages, TOOLS)
        assert calls.calls == FIXED_COST_CALLS
        assert first is not None and second is not None and second > first
        assert second >= await client.count_tokens(MODEL, messages, TOOLS)


def test_a_step_with_the_same_tool_list_does_not_hash_its_schemas_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import pilot.agent.context as context_module

    hashed: list[Any] = []
    real = context_module.message_key

    def counting(message: Any) -> str:
        if "tools" in message:
            hashed.append(message)
        return real(message)

    monkeypatch.setattr(context_module, "message_key", counting)
    tools = [dict(tool) for tool in TOOLS]  # one list, sent with every request (the registry's)

    async def check() -> None:
        for counts in (sim_tokenizer, None):  # exact counts, and the estimate without a server
            hashed.clear()

            async def no_server(model: str, messages: Any, tools: Any) -> int | None:
                return None

            counter = TokenCounter(counts or no_server, MODEL)
            messages = conversation(4)
            first = await counter.upper_bound(messages, tools)
            for _ in range(3):
                assert await counter.upper_bound(messages, tools) == first
            await counter.count(messages, tools)
            assert len(hashed) == 1
            other = [*tools]  # another list (equal content): looked up by its hash, once
            same = await counter.upper_bound(messages, tools)
            assert await counter.upper_bound(messages, other) == same
            assert len(hashed) == 2

    asyncio.run(check())


@pytest.mark.anyio
async def test_runs_sharing_server_counts_ask_the_fixed_costs_once() -> None:
    async with sim_client() as client:
        calls = CountingCalls(client.count_tokens)
        shared = ServerCounts()
        counters = [TokenCounter(calls, MODEL, shared=shared) for _ in range(16)]
        messages = conversation(4)
        bounds = await asyncio.gather(*(c.upper_bound(messages, TOOLS) for c in counters))
        assert calls.calls == FIXED_COST_CALLS  # overhead and tool schemas, for all sixteen
        assert len(set(bounds)) == 1 and bounds[0] is not None
        assert all(c.uses_server is True for c in counters)
        alone = TokenCounter(calls, MODEL)  # a counter that shares nothing asks for itself
        assert await alone.upper_bound(messages, TOOLS) == bounds[0]
        assert calls.calls == 2 * FIXED_COST_CALLS
        other_tools = await counters[0].upper_bound(messages, TOOLS[:1])
        assert calls.calls == 2 * FIXED_COST_CALLS + 1 and other_tools is not None


@pytest.mark.anyio
async def test_a_server_refusing_an_empty_request_still_gives_exact_fixed_costs() -> None:
    """vLLM answers 400 "Cannot apply chat template to an empty conversation" to an empty
    /tokenize (recorded from 0.26; the sim does the same): the fixed costs come from probes,
    exactly, so counts stay exact instead of falling back to estimates."""
    async with sim_client() as client:
        with pytest.raises(BadRequest, match="empty conversation"):
            await client.count_tokens(MODEL, [], None)
        counter = TokenCounter(client.count_tokens, MODEL)
        assert await counter.overhead() == count_chat([], None)
        result = await counter.count(conversation(3), TOOLS)
        assert result.exact
        assert result.tools == count_chat([], TOOLS) - count_chat([], None)


@pytest.mark.anyio
async def test_a_failed_shared_count_is_asked_again_by_the_next_run() -> None:
    attempts = []

    async def flaky(model: str, messages: Any, tools: Any) -> int:
        attempts.append(1)
        if len(attempts) == 1:
            raise ServerUnavailable("http://127.0.0.1:1/v1", "the server went away")
        return count_chat(messages, tools)

    shared = ServerCounts()
    with pytest.raises(ServerUnavailable):
        await TokenCounter(flaky, MODEL, shared=shared).overhead()
    assert await TokenCounter(flaky, MODEL, shared=shared).overhead() == count_chat([], None)
    assert len(attempts) == 3  # the failed ask, then the two probes


@pytest.mark.anyio
async def test_messages_counted_exactly_add_their_exact_count_to_the_bound() -> None:
    counter = TokenCounter(sim_tokenizer, MODEL)
    messages = conversation(6)
    loose = await counter.upper_bound(messages, TOOLS)
    exact = await counter.count(messages, TOOLS)
    tight = await counter.upper_bound(messages, TOOLS)
    assert loose is not None and tight is not None
    assert exact.total <= tight < loose


@pytest.mark.anyio
async def test_a_message_with_an_image_has_no_cheap_bound() -> None:
    counter = TokenCounter(sim_tokenizer, MODEL)
    image = {"type": "image_url", "image_url": {"url": "file:///media/shot.png"}}
    messages = [{"role": "user", "content": [{"type": "text", "text": "look"}, image]}]
    assert await counter.upper_bound(messages, TOOLS) is None


@pytest.mark.anyio
async def test_per_message_sum_is_within_a_token_per_message_of_the_whole_request() -> None:
    async with sim_client() as client:
        counter = TokenCounter(client.count_tokens, MODEL)
        messages = conversation(40, result_chars=700)
        for n in (2, 11, 41, len(messages)):
            ours = await counter.count(messages[:n], TOOLS)
            whole = await client.count_tokens(MODEL, messages[:n], TOOLS)
            assert whole == count_chat(messages[:n], TOOLS)
            assert ours.exact
            # Per-message ceil() rounding: at most one token per message (+1 for the tools).
            assert abs(ours.total - whole) <= n + 1, (n, ours.total, whole)


@pytest.mark.anyio
async def test_counter_without_tokenize_estimates_and_stops_asking() -> None:
    calls = 0

    async def no_tokenize(model: str, messages: Any, tools: Any) -> int | None:
        nonlocal calls
        calls += 1
        return None

    counter = TokenCounter(no_tokenize, MODEL)
    messages = conversation(5)
    first = await counter.count(messages, TOOLS)
    await counter.count(messages + conversation(1)[2:], TOOLS)
    assert calls == 1
    assert not first.exact and counter.uses_server is False
    # The estimate leans high against a bytes/4 tokenizer for ASCII text.
    assert first.total >= count_chat(messages, TOOLS)
    assert first.per_message == tuple(estimate_message_tokens(m) for m in messages)


@pytest.mark.anyio
async def test_message_the_template_refuses_alone_is_estimated() -> None:
    async def strict(model: str, messages: Any, tools: Any) -> int | None:
        if messages and messages[0]["role"] == "tool":
            raise BadRequest("Conversation roles must alternate user/assistant")
        return count_chat(messages, tools)

    counter = TokenCounter(strict, MODEL)
    messages = conversation(2)
    result = await counter.count(messages)
    assert not result.exact
    assert result.per_message[3] == estimate_message_tokens(messages[3])
    assert result.per_message[2] == count_chat([messages[2]]) - count_chat([])


def test_message_key_ignores_key_order() -> None:
    a = {"role": "user", "content": "hi"}
    b = {"content": "hi", "role": "user"}
    assert message_key(a) == message_key(b)
    assert message_key(a) != message_key({"role": "user", "content": "hi!"})


# -- the budget --------------------------------------------------------------------------------


def test_request_max_tokens_shrinks_to_the_room_then_requires_compaction() -> None:
    budget = Budget(max_model_len=8192, max_tokens_wanted=2048, margin=256)
    assert budget.request_max_tokens(1000) == 2048
    assert budget.request_max_tokens(7000) == 8192 - 256 - 7000
    assert budget.needs_compaction(7000)
    with pytest.raises(ContextOverflow):
        budget.request_max_tokens(7800)


def test_compaction_threshold_is_a_fraction_of_the_window() -> None:
    budget = Budget(max_model_len=10000, max_tokens_wanted=512, margin=100, compact_at=0.5)
    assert not budget.needs_compaction(4999)
    assert budget.needs_compaction(5000)
    with pytest.raises(ValueError):
        Budget(max_model_len=10000, max_tokens_wanted=512, compact_at=1.5)
    with pytest.raises(ValueError):
        Budget(max_model_len=300, max_tokens_wanted=512, margin=256)


@given(
    window=st.integers(1024, 200_000),
    wanted=st.integers(1, 16384),
    margin=st.integers(0, 512),
    prompt=st.integers(0, 200_000),
)
def test_prompt_plus_max_tokens_never_exceeds_window_minus_margin(
    window: int, wanted: int, margin: int, prompt: int
) -> None:
    budget = Budget(max_model_len=window, max_tokens_wanted=wanted, margin=margin)
    try:
        max_tokens = budget.request_max_tokens(prompt)
    except ContextOverflow:
        assert budget.needs_compaction(prompt)
        return
    assert budget.floor <= max_tokens <= wanted
    assert prompt + max_tokens <= window - margin


# -- compaction planning -----------------------------------------------------------------------


def test_plan_keeps_system_prompt_phase_prompt_and_recent_turns() -> None:
    messages = conversation(20)
    counts = [estimate_message_tokens(m) for m in messages]
    plan = plan_compaction(messages, counts, keep_recent_tokens=2000, phase_start=1)
    assert plan is not None
    assert plan.pinned == (0, 1)
    assert messages[plan.replaced_to]["role"] == "assistant"
    assert sum(counts[plan.replaced_to :]) <= 2000
    after = plan.apply(messages, "## Goal\n- x")
    assert after[0] == messages[0] and after[1] == messages[1]
    assert is_summary_message(after[2])
    assert after[3:] == messages[plan.replaced_to :]
    assert plan.new_index(1) == 1 and plan.new_index(plan.replaced_to) == 3
    assert plan.new_index(5) is None
    assert after == apply_compaction(messages, plan.pinned, plan.replaced_to, "## Goal\n- x")


def test_plan_for_a_later_phase_summarises_earlier_phases_too() -> None:
    messages = conversation(6)
    phase_start = len(messages)
    messages.append({"role": "user", "content": "Phase 2/2: test\n\nRun the tests."})
    messages += conversation(8)[2:]
    counts = [estimate_message_tokens(m) for m in messages]
    plan = plan_compaction(messages, counts, keep_recent_tokens=800, phase_start=phase_start)
    assert plan is not None
    assert plan.pinned == (0, phase_start)
    assert 1 in plan.replaced  # the first phase's prompt is summarised
    assert plan.apply(messages, "s")[1]["content"].startswith("Phase 2/2")


def test_nothing_to_compact_in_a_short_conversation() -> None:
    messages = conversation(0)
    assert plan_compaction(messages, [10, 10], keep_recent_tokens=0, phase_start=1) is None


def test_harder_compaction_keeps_fewer_turns() -> None:
    messages = conversation(30)
    counts = [estimate_message_tokens(m) for m in messages]
    kept = []
    for harder in range(4):
        plan = plan_compaction(
            messages, counts, keep_recent_tokens=6000, phase_start=1, harder=harder
        )
        assert plan is not None
        kept.append(len(messages) - plan.replaced_to)
    assert kept == sorted(kept, reverse=True)
    assert kept[0] > kept[1] > kept[2]
    assert kept[3] == 2  # only the last turn: the call and its result


def test_results_of_a_call_answered_late_stay_with_their_call() -> None:
    messages = conversation(3)
    late = call_turn(99, "run", "x", "tests passed")
    messages += [late[0], {"role": "user", "content": "a check ran"}, late[1]]
    counts = [1] * len(messages)
    plan = plan_compaction(messages, counts, keep_recent_tokens=2, phase_start=1)
    assert plan is not None
    assert plan.replaced_to == len(messages) - 3  # not at the user message in between


@st.composite
def conversations(draw: st.DrawFn) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = [{"role": "system", "content": "sys"}]
    messages.append({"role": "user", "content": "task"})
    for i in range(draw(st.integers(0, 30))):
        kind = draw(st.sampled_from(["calls", "calls", "text", "user"]))
        if kind == "user":
            messages.append({"role": "user", "content": "u" * draw(st.integers(0, 300))})
        elif kind == "text":
            messages.append({"role": "assistant", "content": "a" * draw(st.integers(0, 300))})
        else:
            n = draw(st.integers(1, 3))
            ids = [f"c{i}-{k}" for k in range(n)]
            messages.append(
                {
                    "role": "assistant",
                    "content": "",
                    "tool_calls": [
                        {"id": c, "type": "function", "function": {"name": "t", "arguments": "{}"}}
                        for c in ids
                    ],
                }
            )
            for c in ids:
                if draw(st.booleans()) and draw(st.booleans()):
                    messages.append({"role": "user", "content": "nudge"})
                messages.append({"role": "tool", "tool_call_id": c, "content": "r" * 50})
    return messages


def assert_no_orphans(messages: list[dict[str, Any]]) -> None:
    open_calls: set[str] = set()
    for message in messages:
        for call in message.get("tool_calls") or ():
            open_calls.add(call["id"])
        if message["role"] == "tool":
            assert message["tool_call_id"] in open_calls, "tool result without its call"


@settings(max_examples=300, deadline=None)
@given(messages=conversations(), keep=st.integers(0, 3000), harder=st.integers(0, 4))
def test_compaction_never_orphans_a_tool_result(
    messages: list[dict[str, Any]], keep: int, harder: int
) -> None:
    counts = [estimate_message_tokens(m) for m in messages]
    plan = plan_compaction(messages, counts, keep_recent_tokens=keep, phase_start=1, harder=harder)
    if plan is None:
        return
    after = plan.apply(messages, "summary")
    assert_no_orphans(after)
    assert after[0] == messages[0] and after[1] == messages[1]
    assert len(after) == len(messages) - len(plan.replaced) + 1
    assert plan.tokens_replaced + plan.tokens_kept == sum(counts)


# -- a long run against the sim ----------------------------------------------------------------


@pytest.mark.anyio
async def test_long_run_compacts_several_times_and_every_request_fits_the_window() -> None:
    budget = Budget(max_model_len=WINDOW, max_tokens_wanted=1024, margin=64, compact_at=0.7)
    async with sim_client() as client:
        counter = TokenCounter(client.count_tokens, MODEL)
        messages = conversation(0)
        phase_start: int | None = 1
        compactions = 0
        steps_at: list[int] = []
        facts = PhaseFacts(goal="Rename util.parse to parse_config.")
        limit = summary_chars(WINDOW)
        for step in range(32):
            count = await counter.count(messages, TOOLS)
            if budget.needs_compaction(count.total):
                fixed = count.total - sum(count.per_message) + sum(count.per_message[:2])
                plan = plan_compaction(
                    messages,
                    count.per_message,
                    keep_recent_tokens=recent_allowance(
                        WINDOW, budget.keep_recent_tokens(), fixed, limit
                    ),
                    phase_start=phase_start,
                )
                assert plan is not None
                summary = events_summary(plan.replaced_messages(messages), facts, max_chars=limit)
                messages = plan.apply(messages, summary)
                phase_start = plan.new_index(phase_start) if phase_start is not None else None
                compactions += 1
                steps_at.append(step)
                count = await counter.count(messages, TOOLS)
                assert count.total <= AFTER_FRACTION * WINDOW + 400  # one kept turn at most over
                assert_no_orphans(messages)
            max_tokens = budget.request_max_tokens(count.total)
            # The server's own check: the real whole-request count plus max_tokens must fit.
            assert count_chat(messages, TOOLS) + max_tokens <= WINDOW
            await client.complete(
                ChatRequest(model=MODEL, messages=messages, tools=TOOLS, max_tokens=max_tokens)
            )
            size = 1200 + (step * 397) % 2400
            body = "\n".join(f"line {k}: value = compute({k})" for k in range(size // 30))
            messages += call_turn(step, "read_file", f"src/m{step}.py", body)
        assert compactions >= 3
        # each turn here is up to 1200 tokens of a 8192 window: still no two compactions in a row
        assert all(b - a >= 2 for a, b in itertools.pairwise(steps_at)), steps_at
        assert phase_start == 1 and messages[1]["content"].startswith("Phase 1/1")


@pytest.mark.anyio
async def test_overflow_from_the_server_is_the_typed_error_compaction_answers() -> None:
    async with sim_client(max_model_len=1024) as client:
        messages = conversation(6)
        with pytest.raises(ContextOverflow):
            await client.complete(
                ChatRequest(model=MODEL, messages=messages, tools=TOOLS, max_tokens=256)
            )


# -- summaries ---------------------------------------------------------------------------------


def test_summary_request_carries_calls_results_and_the_format() -> None:
    messages = conversation(4)[2:]
    request = summary_request(messages, task="Rename util.parse")
    assert [m["role"] for m in request] == ["system", "user"]
    user = request[1]["content"]
    assert "-> called read_file" in user and "src/mod0.py" in user
    assert "[result of write_file]" in user
    for heading in ("## Goal", "## Progress", "## Decisions", "## Files", "## Open problems"):
        assert heading in user
    assert user.index("<log>") < user.index("## Goal")  # format after the log
    assert "Rename util.parse" in user


def test_summary_request_fits_its_input_budget() -> None:
    messages = conversation(200, result_chars=3000)[2:]
    request = summary_request(messages, max_input_tokens=3000)
    assert count_chat(request) <= 3000 + 600  # the instructions themselves
    assert "messages omitted" in request[1]["content"]
    assert "src/mod0.py" in request[1]["content"] and "src/mod199.py" in request[1]["content"]


def test_summary_message_is_labelled_and_recognised() -> None:
    message = summary_message("## Goal\n- x", 12)
    assert message["role"] == "user"
    assert message["content"].startswith(SUMMARY_HEADER)
    assert "12 earlier messages" in message["content"]
    assert is_summary_message(message)
    assert not is_summary_message({"role": "user", "content": "hello"})


def test_an_events_summary_lists_edits_commands_checks_and_reads_and_no_claim() -> None:
    messages = [summary_message("## Edits\n- write_file src/old.py: wrote src/old.py", 5)]
    messages += call_turn(1, "read_file", "src/a.py", "def a(): ...", text="All tests pass now!")
    messages += call_turn(2, "edit_file", "src/b.py", "Error: old_text not found in src/b.py")
    messages += call_turn(3, "write_file", "src/c.py", "wrote src/c.py (3 lines)")
    messages += [
        {
            "role": "assistant",
            "content": "I verified that all test cases are passing.",
            "tool_calls": [
                {
                    "id": "r1",
                    "type": "function",
                    "function": {"name": "run", "arguments": '{"command": "pytest -q"}'},
                },
                {
                    "id": "f1",
                    "type": "function",
                    "function": {"name": "finish", "arguments": '{"summary": "all tests pass"}'},
                },
            ],
        },
        {
            "role": "tool",
            "tool_call_id": "r1",
            "content": "exit code: 1\n...\nFAILED test_a.py::test_x - assert 1 == 2\n1 failed",
        },
        {"role": "tool", "tool_call_id": "f1", "content": "Finish recorded."},
        {
            "role": "user",
            "content": f"{CHECK_FAILED} `pytest -q` (exit code 1). The phase is not done until "
            "it passes; 2 attempt(s) left.\n\nE   assert 1 == 2\n1 failed in 0.12s",
        },
    ]
    facts = PhaseFacts(
        goal="Fix the failing test.",
        check="pytest -q",
        baseline=(False, 1, "FAILED test_a.py::test_x\n1 failed"),
        failed_try="the check (pytest -q) failed: 1 failed",
    )
    mutating = ["edit_file", "write_file", "run", "git_commit"]  # as the registry says
    messages += call_turn(5, "git_commit", "", "[main 1a2b3c] wip")
    text = events_summary(messages, facts, mutating_tools=mutating)
    assert "- git_commit: [main 1a2b3c] wip" in text.split("## Other calls")[1]
    assert "pass" not in text.replace("passed", "").lower().replace("has not passed", ""), text
    assert "verified" not in text and "all tests" not in text  # the model's words are not kept
    assert "- Fix the failing test." in text
    assert "`pytest -q` FAILED (exit code 1): FAILED test_a.py::test_x | 1 failed" in text
    assert "still failing" in text
    assert "- write_file src/old.py: wrote src/old.py" in text  # carried from the older one
    assert "- edit_file src/b.py: REFUSED, nothing changed: old_text not found" in text
    assert "- write_file src/c.py: wrote src/c.py (3 lines)" in text
    assert (
        "- `pytest -q`: exit code 1: ... | FAILED test_a.py::test_x - assert 1 == 2 | 1 fa" in text
    )
    assert "- `pytest -q` failed (exit code 1): E   assert 1 == 2 | 1 failed in 0.12s" in text
    assert "## Files read\n- src/a.py" in text
    assert len(events_summary(messages * 200, facts, max_chars=4000)) <= 4000


def test_an_events_summary_with_no_edit_says_so_and_a_passed_check_is_said_only_when_run() -> None:
    messages = call_turn(1, "read_file", "src/a.py", "def a(): ...")
    facts = PhaseFacts(goal="Fix it.", check="make test", baseline=(True, 0, "ok"))
    text = events_summary(messages, facts)
    assert "## Edits\n- none: no file was changed in these turns." in text
    assert "`make test` passed." in text and "has not run again in this phase" in text
    ran = PhaseFacts(goal="Fix it.", check="make test", check_passed=True, edited=True)
    assert "Its latest run passed; files were changed after it." in events_summary(messages, ran)
    assert "no check command" in events_summary(messages, PhaseFacts(goal="Survey."))


def test_the_fold_check_message_is_what_the_summary_reads() -> None:
    from pilot.agent.state import CHECK_FAILED_PREFIX, check_failed_message

    assert CHECK_FAILED == CHECK_FAILED_PREFIX
    message = check_failed_message("pytest", 2, False, "boom", 1)
    text = events_summary([{"role": "user", "content": message}], PhaseFacts(goal="g"))
    assert "- `pytest` failed (exit code 2): boom" in text


def test_repeated_events_summaries_stay_bounded_and_keep_the_latest() -> None:
    summary = "start"
    for i in range(60):
        messages = [
            summary_message(summary, 3),
            *call_turn(i, "write_file", f"f{i}.py", f"wrote f{i}.py"),
        ]
        summary = events_summary(messages, PhaseFacts(goal="g"), max_chars=1500)
        assert len(summary) <= 1500
    assert "f59.py" in summary and "f0.py" not in summary
    assert "earlier left out" in summary


def test_the_recent_allowance_leaves_the_prompt_under_the_after_fraction() -> None:
    assert recent_allowance(10000, 3000, 1000, 1200) == 4000 - 1000 - (400 + 64)
    assert recent_allowance(10000, 1000, 1000, 1200) == 1000  # never above the budget's
    assert recent_allowance(10000, 3000, 5000, 1200) == 0  # the last turn alone
    assert summary_chars(6000) == 1800 and summary_chars(2000) == 600
    assert summary_chars(200000) == 4000


# -- tool output -------------------------------------------------------------------------------


def test_short_output_is_left_alone() -> None:
    assert cut_tool_output("all good\n", 100) == ("all good\n", False)


def test_long_output_keeps_head_and_tail_and_says_how_to_page() -> None:
    text = "".join(f"line {i}: some test output here\n" for i in range(1, 2001))
    cut, truncated = cut_tool_output(text, 500, artifact="artifacts/run-call-7.log")
    assert truncated
    assert cut.startswith("line 1:")
    assert cut.rstrip().endswith("line 2000: some test output here")
    assert len(cut.encode()) / 3 <= 500
    note = next(line for line in cut.splitlines() if line.startswith("[..."))
    first_hidden = int(note.split("lines ")[1].split("-")[0])
    assert f"line {first_hidden - 1}:" in cut and f"line {first_hidden}:" not in cut
    assert f'read_file (path="artifacts/run-call-7.log", offset={first_hidden}' in note


def test_one_giant_line_is_cut_by_characters() -> None:
    text = json.dumps({"data": ["x" * 50] * 2000})
    cut, truncated = cut_tool_output(text, 300)
    assert truncated
    assert "characters in the middle not shown" in cut
    assert "not kept" in cut
    assert len(cut.encode()) / 3 <= 300


@pytest.mark.anyio
async def test_the_identity_cache_is_bounded_and_an_evicted_message_still_counts_the_same(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import pilot.agent.context as context

    monkeypatch.setattr(context, "IDENTITY_CACHE", 8)
    calls = CountingCalls(sim_tokenizer)
    counter = TokenCounter(calls, MODEL)
    messages = conversation(10)  # 22 messages
    first = await counter.count(messages, TOOLS)
    asked = calls.calls
    assert len(counter._by_identity) <= 8 and len(counter._bounds) <= 8
    again = await counter.count(messages, TOOLS)
    assert again.total == first.total and calls.calls == asked  # by content key, no new calls


def test_an_edit_is_summarised_with_where_it_changed_the_file_and_a_check_after_it() -> None:
    from pilot.agent.seams import CheckOutcome
    from pilot.tactics.small_models import SmallModelTactics

    diff = (
        "Replaced function LRUCache.popitem in cache.py.\n--- a/cache.py\n+++ b/cache.py\n"
        "@@ -30,5 +30,6 @@\n     def popitem(self):\n         key = next(iter(self.order))\n"
        "-        return (key, self.data[key])\n+        del self.order[key]\n"
        "+        return (key, self.data.pop(key))"
    )
    feedback = SmallModelTactics().after_edit_feedback(
        "pytest -q", CheckOutcome(exit_code=1, timed_out=False, output="E  KeyError\n1 failed")
    )
    messages = [
        *call_turn(1, "replace_definition", "cache.py", diff),
        {"role": "user", "content": feedback},
    ]
    text = events_summary(messages, PhaseFacts(goal="g"), mutating_tools=["replace_definition"])
    assert (
        "- replace_definition cache.py: Replaced function LRUCache.popitem in cache.py. (at line "
        "30, in popitem, `return (key, self.data[key])` -> `del self.order[key]`)"
    ) in text, text
    assert "- `pytest -q` failed after an edit (exit code 1): E  KeyError | 1 failed" in text


def test_a_cut_python_page_names_the_definitions_past_it_by_line_and_class() -> None:
    source = (
        "class Version:\n"
        + "".join(f"    x{i} = {i}\n" for i in range(300))
        + "    def bump_minor(self):\n        return 1\n\n"
        + "    async def bump_patch(self):\n        pass\n\ndef top():\n    pass\n"
    )
    numbered = "".join(f"{n:6d}\t{line}\n" for n, line in enumerate(source.splitlines(), 1))
    page, cut = cut_file_page(numbered, 800, "src/semver/version.py")
    assert cut and page.startswith("     1\tclass Version:")
    assert "offset=LINE: Version.bump_minor: 302, Version.bump_patch: 305, top: 308.]" in page, page
    text, _ = cut_file_page(numbered, 800, "notes.txt")
    assert "Definitions further on" not in text, "only a Python file is outlined"
