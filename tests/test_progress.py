"""Runaway and stuck detection (pilot.agent.progress), on transcripts shaped like real runs."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pilot import events as ev
from pilot.agent.progress import (
    CallObs,
    FeedbackObs,
    ProgressLimits,
    ProgressTracker,
    TurnObs,
    Verdict,
    observations_from_events,
)
from pilot.tactics.feedback import QUESTION_REPLY, detect_question, empty_turn_action

PYTEST_FAIL = (
    "FAILED tests/test_util.py::test_parse - KeyError: 'name'\n1 failed, 12 passed in 0.4s"
)


def args(**kw: object) -> str:
    return json.dumps(kw)


def turn_with_call(
    tracker: ProgressTracker,
    name: str,
    arguments: str,
    result: str,
    *,
    mutated: bool = False,
    snapshot: str | None = None,
) -> Verdict:
    """One model turn with one call, as the loop would feed it."""
    assert tracker.observe_turn("", had_calls=True).action == "ok"
    return tracker.observe_call(name, arguments, result, mutated, snapshot)


# -- repetition --------------------------------------------------------------------------------


def test_same_failing_test_run_three_times_is_nudged_then_stuck() -> None:
    tracker = ProgressTracker()
    command = args(command="pytest -q tests/test_util.py")
    assert turn_with_call(tracker, "run", command, PYTEST_FAIL).action == "ok"
    assert turn_with_call(tracker, "run", command, PYTEST_FAIL).action == "ok"
    nudge = turn_with_call(tracker, "run", command, PYTEST_FAIL)
    assert (nudge.action, nudge.kind) == ("nudge", "repeat")
    assert "3 times in a row" in nudge.message and "pytest -q" in nudge.message
    stuck = turn_with_call(tracker, "run", command, PYTEST_FAIL)
    assert (stuck.action, stuck.kind) == ("stuck", "repeat")
    assert "after being told" in stuck.message


def test_a_long_read_again_is_a_repetition_though_its_kept_page_is_new_each_time() -> None:
    """A result cut for the window keeps its whole text in a file named by its call: the
    1.5B's re-reads of one long module (toolz/itertoolz.py, 14 in a row on the GPU) differed
    only there, and the loop guard never fired."""
    tracker = ProgressTracker()
    read = args(path="toolz/_signatures.py")

    def page(step: int) -> str:
        return (
            '     1\t"""Internal module.\n[... lines 30-717 of 784 not shown. The full output '
            f"is kept as .marathon/outputs/text-{step}-0.txt: read the hidden part with "
            f'read_file (path=".marathon/outputs/text-{step}-0.txt", offset=30)]\n'
            "   784\t    return None"
        )

    assert turn_with_call(tracker, "read_file", read, page(2)).action == "ok"
    assert turn_with_call(tracker, "read_file", read, page(3)).action == "ok"
    nudge = turn_with_call(tracker, "read_file", read, page(4))
    assert (nudge.action, nudge.kind) == ("nudge", "repeat")


def test_same_call_with_a_different_result_is_not_a_repetition() -> None:
    tracker = ProgressTracker()
    command = args(command="pytest -q")
    for i in range(6):
        out = f"{6 - i} failed, {i} passed"
        verdict = turn_with_call(tracker, "run", command, out, mutated=True, snapshot=f"s{i}")
        assert verdict.action == "ok"


def test_argument_key_order_does_not_hide_a_repetition() -> None:
    tracker = ProgressTracker()
    texts = [
        '{"path": "a.py", "offset": 1}',
        '{"offset":1,"path":"a.py"}',
        '{ "path":"a.py","offset":1 }',
    ]
    verdicts = [turn_with_call(tracker, "read_file", t, "1: import os") for t in texts]
    assert verdicts[-1].action == "nudge"


def test_a_heeded_nudge_earns_another_nudge_before_stuck() -> None:
    tracker = ProgressTracker(limits=ProgressLimits(max_nudges=2))
    read = args(path="src/util.py")
    for _ in range(2):
        turn_with_call(tracker, "read_file", read, "def parse(): ...")
    assert turn_with_call(tracker, "read_file", read, "def parse(): ...").action == "nudge"
    # The model changes course: an edit that changes the workspace.
    edit = args(path="src/util.py", old="parse", new="parse_config")
    assert (
        turn_with_call(tracker, "edit_file", edit, "edited", mutated=True, snapshot="s1").action
        == "ok"
    )
    for _ in range(2):
        turn_with_call(tracker, "read_file", read, "def parse_config(): ...")
    assert turn_with_call(tracker, "read_file", read, "def parse_config(): ...").action == "nudge"
    tracker.observe_turn("", had_calls=True)
    tracker.observe_call("edit_file", args(path="b.py"), "edited", True, "s2")
    for _ in range(2):
        turn_with_call(tracker, "read_file", read, "x")
    third = turn_with_call(tracker, "read_file", read, "x")
    assert third.action == "stuck" and "already nudged 2 times" in third.message


def test_identical_calls_in_the_turn_of_the_nudge_are_not_yet_stuck() -> None:
    tracker = ProgressTracker()
    tracker.observe_turn("", had_calls=True)
    call = ("read_file", args(path="a.py"), "1: x = 1", False, None)
    verdicts = [tracker.observe_call(*call) for _ in range(5)]
    assert [v.action for v in verdicts] == ["ok", "ok", "nudge", "ok", "ok"]
    assert turn_with_call(tracker, *call[:3]).action == "stuck"


# -- alternation -------------------------------------------------------------------------------


def test_reading_two_files_back_and_forth_is_an_alternation_loop() -> None:
    tracker = ProgressTracker()
    a = ("read_file", args(path="src/util.py"), "def parse(): ...")
    b = ("read_file", args(path="tests/test_util.py"), "def test_parse(): ...")
    verdicts = [turn_with_call(tracker, *(a if i % 2 == 0 else b)) for i in range(6)]
    assert [v.action for v in verdicts[:5]] == ["ok"] * 5
    assert (verdicts[5].action, verdicts[5].kind) == ("nudge", "alternation")
    assert "src/util.py" in verdicts[5].message and "tests/test_util.py" in verdicts[5].message
    assert turn_with_call(tracker, *a).action == "stuck"


def test_edit_and_test_cycle_with_changing_results_is_not_a_loop() -> None:
    tracker = ProgressTracker()
    for i in range(8):
        edit = args(path="src/util.py", old=f"v{i}", new=f"v{i + 1}")
        assert (
            turn_with_call(
                tracker, "edit_file", edit, "edited", mutated=True, snapshot=f"s{i}"
            ).action
            == "ok"
        )
        assert (
            turn_with_call(tracker, "run", args(command="pytest"), f"{8 - i} failed").action == "ok"
        )


# -- no progress -------------------------------------------------------------------------------


def test_rereading_the_same_files_without_changes_is_no_progress() -> None:
    tracker = ProgressTracker()
    calls = [
        ("read_file", args(path="src/util.py"), "def parse(): ..."),
        ("grep", args(pattern="parse"), "src/util.py:1: def parse"),
        ("read_file", args(path="README.md"), "# Util"),
    ]
    verdicts = [turn_with_call(tracker, *calls[i % 3]) for i in range(11)]
    # The first three were new information; then 8 turns brought nothing new.
    assert all(v.action == "ok" for v in verdicts)
    assert tracker.steps_since_progress == 8
    verdict = turn_with_call(tracker, *calls[2])
    # Told 3 steps before the limit (12), that the phase stops at 12.
    assert verdict.action == "nudge" and tracker.steps_since_progress == 9
    assert verdict.kind == "no_progress" and "after 12 such steps" in verdict.message
    grace = [turn_with_call(tracker, *calls[i % 3]).action for i in range(3)]
    # Stuck exactly at the configured count, not three steps after it.
    assert grace == ["ok", "ok", "stuck"] and tracker.steps_since_progress == 12


def test_reading_new_files_is_progress() -> None:
    tracker = ProgressTracker()
    for i in range(40):
        path = f"src/mod{i}.py"
        verdict = turn_with_call(tracker, "read_file", args(path=path), f"# {path}")
        assert verdict.action == "ok"


def test_errors_are_never_new_information() -> None:
    tracker = ProgressTracker(limits=ProgressLimits(no_progress=5))
    verdicts = [
        turn_with_call(tracker, f"tool_{i}", "{}", f"Error: there is no tool named 'tool_{i}'")
        for i in range(5)
    ]
    assert [v.action for v in verdicts] == ["ok", "ok", "nudge", "ok", "stuck"]
    assert verdicts[-1].kind == "no_progress"


def test_text_only_turns_count_as_steps_without_progress() -> None:
    tracker = ProgressTracker(limits=ProgressLimits(no_progress=4))
    verdicts = [
        tracker.observe_turn("I will now look at the code.", had_calls=False) for _ in range(4)
    ]
    assert [v.action for v in verdicts] == ["ok", "nudge", "ok", "stuck"]


def test_failed_check_output_is_new_information() -> None:
    tracker = ProgressTracker(limits=ProgressLimits(no_progress=4))
    for _ in range(3):
        tracker.observe_turn("thinking", had_calls=False)
    assert tracker.observe(FeedbackObs("Check failed: 1 failed")).action == "ok"
    assert tracker.steps_since_progress == 0
    tracker.observe(FeedbackObs("Check failed: 1 failed"))  # the same again: nothing new
    assert tracker.observe_turn("hm", had_calls=False).action == "ok"


def test_mutating_call_that_changes_nothing_is_not_progress() -> None:
    tracker = ProgressTracker(snapshot="s0", limits=ProgressLimits(no_progress=3, repeat=9))
    write = args(path="a.py", content="x = 1\n")
    first = turn_with_call(tracker, "write_file", write, "wrote a.py", mutated=True, snapshot="s1")
    assert first.action == "ok" and tracker.steps_since_progress == 0
    verdicts = [
        turn_with_call(tracker, "write_file", write, "wrote a.py", mutated=True, snapshot="s1")
        for _ in range(3)
    ]
    assert verdicts[-1].kind == "no_progress"


# -- rebuilding from events --------------------------------------------------------------------


def events_for(calls: list[tuple[str, str, str, str | None]]) -> list[ev.Event]:
    events: list[ev.Event] = [ev.PhaseStarted(index=0, name="fix", prompt="Phase 1/1: fix")]
    for step, (name, arguments, output, snapshot) in enumerate(calls, start=1):
        call = ev.ToolCall(id=f"c{step}", name=name, arguments=arguments)
        events.append(ev.AssistantMessage(step=step, content="", tool_calls=[call]))
        events.append(ev.ToolStarted(call_id=call.id, name=name, mutates=snapshot is not None))
        events.append(ev.ToolFinished(call_id=call.id, name=name, output=output, snapshot=snapshot))
    return events


def test_tracker_rebuilt_from_events_gives_the_same_verdicts() -> None:
    read = ("read_file", args(path="a.py"), "1: x = 1", None)
    edit = ("edit_file", args(path="a.py", new="y"), "edited", "s1")
    history = [edit, read, read]
    live = ProgressTracker()
    for name, arguments, output, snapshot in history:
        live.observe_turn("", had_calls=True)
        live.observe_call(name, arguments, output, snapshot is not None, snapshot)
    events = [
        ev.PhaseStarted(index=0, name="old", prompt="p"),
        *events_for([read] * 2),
        *events_for(history),
    ]
    rebuilt = ProgressTracker.from_history(observations_from_events(events))
    assert rebuilt.step == live.step and rebuilt.snapshot == "s1"
    next_live = turn_with_call(live, *read[:3])
    next_rebuilt = turn_with_call(rebuilt, *read[:3])
    assert next_live == next_rebuilt and next_live.action == "nudge"


def test_failed_check_becomes_feedback_on_replay() -> None:
    events = [
        ev.PhaseStarted(index=0, name="fix", prompt="p"),
        ev.CheckFinished(
            phase=0, attempt=1, command="pytest", exit_code=1, passed=False, output="1 failed"
        ),
        ev.CheckFinished(
            phase=0, attempt=2, command="pytest", exit_code=0, passed=True, output="ok"
        ),
    ]
    assert observations_from_events(events) == [FeedbackObs("1 failed")]


observation = st.one_of(
    st.builds(
        CallObs,
        name=st.sampled_from(["read_file", "run", "grep"]),
        arguments=st.sampled_from(["{}", '{"path": "a"}', '{"path": "b"}']),
        result=st.sampled_from(["one", "two", "Error: no"]),
        mutated=st.booleans(),
        snapshot=st.sampled_from([None, "s1", "s2"]),
    ),
    st.builds(TurnObs, content=st.sampled_from(["", "text"]), had_calls=st.booleans()),
    st.builds(FeedbackObs, text=st.sampled_from(["f1", "f2"])),
)


@given(st.lists(observation, max_size=80))
def test_replay_is_a_pure_fold(observations: list) -> None:
    live = ProgressTracker(limits=ProgressLimits(repeat=2, alternation=2, no_progress=4))
    verdicts = [live.observe(o) for o in observations]
    again = ProgressTracker(limits=live.limits)
    assert [again.observe(o) for o in observations] == verdicts
    rebuilt = ProgressTracker.from_history(observations, live.limits)
    assert (rebuilt.step, rebuilt.nudges, rebuilt.steps_since_progress) == (
        live.step,
        live.nudges,
        live.steps_since_progress,
    )
    # Once stuck, it stays stuck unless progress is made: never a nudge loop without end.
    assert sum(v.action == "nudge" for v in verdicts) <= live.limits.max_nudges


# -- questions ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "content",
    [
        "I found two call sites of `parse`. Should I rename both of them?",
        "The tests pass now.\n\nDo you want me to also update the README?",
        "Would you like me to proceed with the refactor of the config module.",
        "I can either inline the helper or keep it. Which approach do you prefer?",
        "Before continuing, please confirm that deleting `legacy/` is fine.",
        "I have made the change. Let me know if you want the docstrings updated as well.",
        "Shall I proceed?",
        "There are 3 failing tests unrelated to this change.\nIs it ok if I skip them?",
        "**Question:** what should the default timeout be? Could you clarify the requirement?",
        "How should I handle the missing `name` key — raise or default to None?",
    ],
)
def test_questions_to_the_user_are_recognised(content: str) -> None:
    question = detect_question(content)
    assert question is not None
    assert question in content or question.rstrip("?.") in content


@pytest.mark.parametrize(
    "content",
    [
        "",
        "   ",
        "I will now read `src/util.py` to find where parse is defined.",
        "Why does the test fail? Because the fixture returns None. I will fix the fixture.",
        "The regex `^a?b$` matches both cases, so the check is correct.",
        "Here is the fix:\n```python\nvalue = a if a is not None else b  # why? see issue\n"
        "print('Should I stop?')\n```\nApplying it now.",
        "```\nDo you want me to continue? [y/N]\n```",
        "See https://example.com/search?q=parse for the upstream discussion.",
        "Next I'll check whether the parser handles empty input?",
        "> Should I use a dataclass here?\nYes: a dataclass is simpler. Writing it now.",
        "Done. All 13 tests pass and the function is renamed.",
        "What does `parse` return for an empty string? It returns {}. Good.",
    ],
)
def test_statements_and_code_are_not_questions(content: str) -> None:
    assert detect_question(content) is None


def test_question_reply_says_nobody_answers_and_to_note_the_assumption() -> None:
    assert "Nobody will answer" in QUESTION_REPLY
    assert "assumption" in QUESTION_REPLY and "best judgment" in QUESTION_REPLY


# -- empty turns -------------------------------------------------------------------------------


def test_empty_turns_are_retried_then_nudged_then_no_progress() -> None:
    assert [empty_turn_action(n) for n in (1, 2, 3, 4)] == [
        "retry",
        "nudge",
        "no_progress",
        "no_progress",
    ]
    assert empty_turn_action(2, retries=2) == "retry"


def test_tracker_counts_consecutive_empty_turns() -> None:
    tracker = ProgressTracker()
    tracker.observe_turn("", had_calls=False)
    tracker.observe_turn(None, had_calls=False)
    assert tracker.consecutive_empty == 2
    tracker.observe_turn("", had_calls=True)
    assert tracker.consecutive_empty == 0


def test_a_test_run_failing_the_same_way_again_is_a_repeat_whatever_its_timing() -> None:
    tracker = ProgressTracker()
    verdicts = [
        turn_with_call(
            tracker, "run", args(command="pytest -q"), f"exit code: 1\n1 failed in 0.{i}2s"
        )
        for i in range(3)
    ]
    assert [v.action for v in verdicts] == ["ok", "ok", "nudge"]
    assert verdicts[-1].kind == "repeat"


def test_durations_are_blanked_as_the_python_pattern_would_on_ascii_text() -> None:
    import re

    from pilot.agent.progress import DURATION_PATTERN, _untimed

    assert _untimed("1 failed in 0.12s") == _untimed("1 failed in 0.14s")
    assert _untimed("took 250 ms, then 3 seconds") == "took <duration>, then <duration>"
    for text in [
        "mod_00001.py: 12 lines",
        "x1s 2s3 ms 4.5 secs",
        "ok (0.001s) 10ms10ms 7 sec.",
        "12\n34 s 56\ts",
    ]:
        assert _untimed(text) == re.sub(DURATION_PATTERN, "<duration>", text, flags=re.ASCII)


def test_each_repeat_samples_hotter_up_to_one() -> None:
    from pilot.agent.progress import ProgressTracker
    from pilot.tactics.feedback import hotter

    tracker = ProgressTracker()
    assert tracker.repeats == 0
    for expected in (1, 2, 3):
        tracker.observe_call("edit_file", '{"path": "a"}', "Error: same", False, None)
        assert tracker.repeats == expected
    assert [hotter(0.2, n) for n in (0, 1, 2, 3, 4)] == [None, None, 0.55, 0.9, 1.0]
    assert hotter(None, 3) is None, "the server's default temperature is left alone"
    assert hotter(1.0, 3) is None
    tracker.observe_call("read_file", '{"path": "a"}', "text", False, None)
    assert tracker.repeats == 1
