"""Redaction: secrets in events are replaced before they are stored; the workspace is not."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pilot_harness import call, make_repo, run_in_process, write_script, write_workflow

from brain.sim.config import SimConfig
from brain.sim.server import running_sim
from pilot import events as ev
from pilot.errors import WorkflowError
from pilot.redact import (
    Redactor,
    compile_pattern,
    redact_event,
    redact_for_storage,
    redact_text,
)
from pilot.store.event_store import EventStore
from pilot.workflow import parse_workflow_text

GITHUB = "ghp_" + "a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8"
OPENAI = "sk-proj-" + "Zq9Xw8Vu7Ts6Rq5Po4Nm3Lk2Ji1Hg0Fe"
PEM = (
    "-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEAx1f2\nq9Zk+/abc=\n"
    "-----END RSA PRIVATE KEY-----"
)


@pytest.mark.parametrize(
    ("text", "name"),
    [
        (f"token {OPENAI} here", "api_key"),
        (f"export GH={GITHUB}", "github_token"),
        ("github_pat_11ABCDEFG0123456789_abcdefghijklmnopqrstuvwxyz", "github_pat"),
        ("slack xoxb-123456789012-abcdefGHIJKL", "slack_token"),
        ("aws AKIAIOSFODNN7EXAMPLE key", "aws_access_key_id"),
        (f"key:\n{PEM}\nafter", "private_key"),
        ("Authorization: Bearer abcdef0123456789.xyz-_", "bearer"),
        ("password=hunter2hunter", "assignment"),
        ('{"api_key": "s3cr3t-value"}', "assignment"),
        ("DB_PASSWORD: 'correct horse'", "assignment"),
        # The vendors' documented shapes: GitLab, Google, Hugging Face, Stripe.
        ("GITLAB=glpat-z_sxgtrfAxKr8q1TPY8Y", "gitlab_token"),
        ("routable glpat-Ab3dE_fGh1jK-LmN0pQrStU.01.0w1xyz2ab", "gitlab_token"),
        ("deploy gldt-AbCdEfGhIjKlMnOpQrSt and more", "gitlab_token"),
        ("maps AIzaSyD-9tSrke72I6e0qOZVOtU5oBRBmBPUfhI", "google_api_key"),
        ("HF_TOKEN=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", "huggingface_token"),
        ("org 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", "huggingface_token"),
        ("stripe sk_live_4eC39HqLyjWDarjtT1zdp7dc", "stripe_key"),
        ("stripe sk_test_4eC39HqLyjWDarjtT1zdp7dc", "stripe_key"),
        ("restricted rk_live_51HabcdEFGHijklMNOP", "stripe_key"),
        ("restricted rk_test_51HabcdEFGHijklMNOP", "stripe_key"),
        ("webhook whsec_abcdefghijklmnopqrstuvwxyz012345", "stripe_key"),
        ("url postgresql+psycopg://app:hunter2hunter@db:5432/x", "url_password"),
        ("url redis://:hunter2hunter@cache/0", "url_password"),
    ],
)
def test_default_patterns_replace_common_secret_shapes(text: str, name: str) -> None:
    out = redact_text(text)
    assert f"[REDACTED:{name}]" in out, out
    for secret in (OPENAI, GITHUB, "AKIAIOSFODNN7EXAMPLE", "MIIEowIBAAKCAQEAx1f2", "hunter2hunter"):
        assert secret not in out
    for secret in ("z_sxgtrfAxKr8q1TPY8Y", "9tSrke72I6e0qOZVOtU5", "OwAJiecAHjIxfihVLEjB"):
        assert secret not in out
    for secret in ("4eC39HqLyjWDarjtT1zdp7dc", "51HabcdEFGHijklMNOP", "Ab3dE_fGh1jK", "lmnopqrst"):
        assert secret not in out


def test_a_url_keeps_its_user_and_host_and_loses_only_the_password() -> None:
    assert (
        redact_text("postgresql+psycopg://u:SECRET@db:5432/x")
        == "postgresql+psycopg://u:[REDACTED:url_password]@db:5432/x"
    )
    for plain in ("http://example.com:8080/a@b", "https://user@host/x", "git@github.com:o/r"):
        assert redact_text(plain) == plain


def test_masked_urls_show_stars_for_the_password_only() -> None:
    from pilot.redact import mask_url_credentials

    text = "--db postgresql+psycopg://u:SECRET@db:5432/x and https://a:b@c/d"
    assert mask_url_credentials(text) == (
        "--db postgresql+psycopg://u:***@db:5432/x and https://a:***@c/d"
    )
    assert mask_url_credentials("sqlite:////tmp/x.db") == "sqlite:////tmp/x.db"


def test_a_path_named_like_a_keyword_keeps_the_words_after_it() -> None:
    """An error about the file ``/etc/passwd`` is not an assignment of a password."""
    for text in (
        "refused '/etc/passwd': paths must be inside the workspace",
        "open C:\\secret: access denied",
        "cat ~/.config/token: no such file",
    ):
        assert redact_text(text) == text, redact_text(text)
    assert redact_text("db.password: hunter2hunter") == "db.password: [REDACTED:assignment]"


def test_assignments_and_bearer_keep_their_name_and_lose_only_the_value() -> None:
    assert redact_text("password=hunter2hunter rest") == "password=[REDACTED:assignment] rest"
    assert redact_text("Bearer abcdef0123456789abcd") == "Bearer [REDACTED:bearer]"


def test_quoted_values_go_whole_also_inside_json_text() -> None:
    assert redact_text("DB_PASSWORD: 'correct horse'") == "DB_PASSWORD: '[REDACTED:assignment]'"
    arguments = json.dumps({"path": ".env", "content": 'password="two words"\nDEBUG=1'})
    out = redact_text(arguments)
    assert "two words" not in out
    assert json.loads(out)["content"] == 'password="[REDACTED:assignment]"\nDEBUG=1'


def test_ordinary_text_is_left_alone() -> None:
    for text in (
        "def password_strength(pw): return len(pw)",
        "the token count is 42",
        "token = get_token()",
        "sk-short",
        "ask-for-help",
        "Committed adf2f2f on marathon/run-39372cbf",
    ):
        assert redact_text(text) == text


def test_a_cut_private_key_block_is_redacted_to_the_end_of_its_base64() -> None:
    text = '{"content": "-----BEGIN OPENSSH PRIVATE KEY-----\\nb3BlbnNzaC1rZXk=\\nAAAA", "x": 1}'
    out = redact_text(text)
    assert "b3BlbnNzaC1rZXk" not in out
    assert json.loads(out)["x"] == 1, "JSON text stays JSON"


def test_workflow_patterns_are_added_and_may_name_the_secret_group() -> None:
    redactor = Redactor([r"ACME-\d{6}", r"customer=(?P<secret>\w+)"])
    assert redactor.text("id ACME-123456") == "id [REDACTED:redact[0]]"
    assert redactor.text("customer=bob ok") == "customer=[REDACTED:redact[1]] ok"


def test_bad_workflow_patterns_are_refused_with_the_reason() -> None:
    with pytest.raises(ValueError, match="not a valid regular expression"):
        compile_pattern("(unclosed")
    with pytest.raises(ValueError, match="matches the empty string"):
        compile_pattern("x*")


def test_every_string_field_of_an_event_is_redacted_recursively() -> None:
    message = ev.AssistantMessage(
        step=1,
        content=f"use {GITHUB}",
        reasoning="the password=hunter2hunter is in .env",
        tool_calls=[
            ev.ToolCall(
                id="c1",
                name="write_file",
                arguments=json.dumps({"path": ".env", "content": f"KEY={OPENAI}\n"}),
            )
        ],
    )
    out = redact_event(message)
    assert out.type == "assistant_message" and out.step == 1
    assert GITHUB not in out.content and "hunter2hunter" not in out.reasoning
    assert OPENAI not in out.tool_calls[0].arguments
    assert json.loads(out.tool_calls[0].arguments)["path"] == ".env"
    assert message.content == f"use {GITHUB}", "the original is not changed"
    started = ev.RunStarted(
        workflow="w",
        params={"token": "x", "nested": [{"k": f"Bearer {OPENAI}"}]},
        workspace="/w",
        branch="b",
        endpoint="e",
        system="s",
        phases=["p"],
        owner="o",
    )
    assert OPENAI not in json.dumps(redact_event(started).params)


def test_an_event_without_secrets_is_returned_as_is() -> None:
    finished = ev.ToolFinished(call_id="c", name="read_file", output="plain text")
    assert redact_event(finished) is finished
    stored, payload = redact_for_storage(finished, (), ev.event_to_json)
    assert stored is finished and payload == ev.event_to_json(finished)


# Pieces that make secrets, near-secrets and the JSON escapes between them.
_FRAGMENTS = [
    "token", "TOKEN", "api_key", "Api-Key", "password", "pwd", "secret", "=", ":", " ", "\n",
    "\t", '"', "'", "\\", "\x0b", "\x1f", "hunter2hunter", "ghp_", "sk-", "proj-", "xoxb-",
    "AKIA", "Bearer ", "-----BEGIN RSA PRIVATE KEY-----", "a1B2c3D4e5F6g7H8i9J0", "x", "_", "-",
    "\u00e9", "ordinary words ", "\u212a", "\u017f", "\x85", "\u2028", "\u3000",
    "glpat-", "gldt-", "AIza", "hf_", "api_org_", "sk_live_", "rk_test_", "whsec_",
    "AbCdEfGhIjKlMnOpQrStUvWxYz0123456789", ".", "://", "postgresql://", "u", "@", "/",
]  # fmt: skip
"""``\u212a`` (Kelvin sign) and ``\u017f`` (long s) match ``k`` and ``s`` under ``(?i)``; the
others are spaces to Python's ``\\s`` that JSON leaves as they are."""


_SPACES = st.text(alphabet=" \t\n\r\x0b\x0c\x1c\x1f\x85\xa0\u2028\u3000", max_size=3)
_ASSIGNMENTS = st.builds(
    lambda *parts: "".join(parts),
    st.sampled_from(["", "MY_", "db."]),
    st.sampled_from(
        [
            "token",
            "TOKEN",
            "api_key",
            "Api-Key",
            "password",
            "pwd",
            "secret",
            "to\u212aen",
            "pa\u017f\u017fword",
        ]
    ),
    st.sampled_from(["", '"', "'"]),
    _SPACES,
    st.sampled_from(["=", ":"]),
    _SPACES,
    st.sampled_from(["", '"', "'", '\\"']),
    st.sampled_from(["hunter2hunter", "two words", "ab", "x" * 30]),
    st.sampled_from(["", '"', "'", " rest", "\n"]),
)
_URL_PART = st.text(alphabet='ab:"\\\t\x0b\x85\u2028 é-', max_size=4)
_URLS = st.builds(
    lambda *parts: "".join(parts),
    st.sampled_from(["postgresql+psycopg", "https", "x", "a.b-c"]),
    st.just("://"),
    _URL_PART,
    st.sampled_from([":", ""]),
    _URL_PART,
    st.sampled_from(["@", ""]),
    st.sampled_from(["host/db", "", "/"]),
)
_TEXTS = st.lists(st.one_of(st.sampled_from(_FRAGMENTS), _ASSIGNMENTS, _URLS), max_size=8).map(
    "".join
)


def _rules_only(text: str) -> str:
    """``text`` redacted by every default rule with no screen in front of them."""
    for rule in Redactor().rules:
        text = rule.apply(text)
    return text


@settings(max_examples=600, deadline=None)
@given(output=_TEXTS, content=_TEXTS)
def test_the_json_screen_never_lets_a_secret_through(output: str, content: str) -> None:
    """The stored event is screened on its JSON before any field walk: wherever the walk would
    redact something, the screen must say it may (and the stored result is the walk's)."""
    arguments = json.dumps({"content": content})
    event = ev.AssistantMessage(
        step=1,
        content=output,
        tool_calls=[ev.ToolCall(id="c", name="write_file", arguments=arguments)],
    )
    walked = redact_event(event)
    stored, payload = redact_for_storage(event, (), ev.event_to_json)
    for text in (output, arguments):  # the screens never hide a match of the rules themselves
        assert redact_text(text) == _rules_only(text), text
    if walked is not event:
        assert Redactor().may_match(ev.event_to_json(event))
    assert stored == walked and payload == ev.event_to_json(walked)


def test_the_screens_fold_case_and_see_spaces_as_the_rules_do() -> None:
    """The screens are RE2, the rules Python ``re``: a keyword written with any character that
    Python's ``(?i)`` takes for its letter, or followed by any of Python's ``\\s``, must still
    pass its screen, or a secret written so would be stored unredacted."""
    import re

    import re2

    from pilot.redact import SCREENS

    characters = [chr(c) for c in range(0x110000) if not 0xD800 <= c <= 0xDFFF]
    cased = [c for c in characters if c.lower() != c or c.upper() != c]
    screens = {name: re2.compile(SCREENS[name].encode()) for name in ("assignment", "bearer")}
    words = {"assignment": ("password", "passwd", "pwd", "secret", "key", "token")}
    words["bearer"] = ("bearer",)
    for name, screen in screens.items():
        for word in words[name]:
            for i, letter in enumerate(word):
                same = [c for c in cased if re.fullmatch(f"(?i){letter}", c)]
                for c in same:
                    text = f"{word[:i]}{c}{word[i + 1 :]}=x"
                    assert screen.search(text.encode()), (name, text)
    assert len({c for c in cased if re.fullmatch("(?i)k", c)}) == 3  # k, K, Kelvin sign
    for c in characters:
        if re.fullmatch(r"\s", c):
            assert screens["assignment"].search(f"token{c}=x".encode()), hex(ord(c))


def test_a_keyword_with_a_long_s_or_a_kelvin_sign_is_still_redacted() -> None:
    """Python's ``(?i)`` matches ``s`` to ``\u017f`` and ``k`` to ``\u212a``: the rules redact
    these assignments, so the screen must let them through to the rules."""
    for text in ("pa\u017f\u017fword=hunter2hunter", "api_\u212aey: hunter2hunter"):
        event = ev.ToolFinished(call_id="c", name="read_file", output=text)
        _stored, payload = redact_for_storage(event, (), ev.event_to_json)
        assert "hunter2hunter" not in payload and "[REDACTED:assignment]" in payload


def test_the_redact_field_is_validated_with_file_and_line() -> None:
    text = (
        "name: w\nworkspace: {path: /tmp}\ntools: [read_file, finish]\n"
        "redact:\n  - 'ok-\\d+'\n  - '(broken'\n"
        "phases:\n  - {name: p, prompt: do it}\n"
    )
    with pytest.raises(WorkflowError) as info:
        parse_workflow_text(text, "w.yaml", {}, tool_names=["read_file", "finish"])
    problems = getattr(info.value, "errors", None) or [info.value]
    assert any(p.line == 6 and "regular expression" in str(p) for p in problems), problems


def test_a_run_stores_redacted_events_and_leaves_the_workspace_alone(tmp_path: Path) -> None:
    secret_file = f"API_KEY={OPENAI}\nTICKET=ACME-424242\n"
    repo = make_repo(tmp_path / "repo", {"config.env": secret_file, "app.py": "VALUE = 1\n"})
    script = write_script(
        tmp_path / "s.yaml",
        "redact-run",
        [
            {"tool_calls": [call("read_file", path="config.env")]},
            {"tool_calls": [call("write_file", path="out.txt", content=f"copy {GITHUB}\n")]},
            {"tool_calls": [call("finish", summary="done")]},
        ],
    )
    with running_sim(SimConfig(model="m", max_model_len=32768, policy=f"script:{script}")) as sim:
        workflow = write_workflow(
            tmp_path / "wf.yaml",
            key="redact-run",
            endpoint=sim.openai_base_url,
            phases=[{"name": "work", "prompt": "p"}],
        )
        text = workflow.read_text() + "redact:\n  - 'ACME-\\d+'\n"
        workflow.write_text(text)
        outcome = run_in_process(workflow, repo, tmp_path / "m.db")
    assert outcome.status == "succeeded", outcome.reason
    store = EventStore(f"sqlite:///{tmp_path / 'm.db'}")
    stored = "\n".join(
        p for (p,) in store.engine.connect().exec_driver_sql("SELECT payload FROM events")
    )
    for secret in (OPENAI, GITHUB, "ACME-424242"):
        assert secret not in stored
    assert "[REDACTED:redact[0]]" in stored and "[REDACTED:github_token]" in stored
    work = Path(outcome.state.started.workspace)
    assert (work / "config.env").read_text() == secret_file, "the workspace is untouched"
    assert (work / "out.txt").read_text() == f"copy {GITHUB}\n", "the tool got the real text"


def test_only_events_made_of_numbers_and_flags_skip_the_screen() -> None:
    from pilot.redact import _holds_text

    assert not _holds_text(ev.ModelRequest) and not _holds_text(ev.ServerBack)
    for cls in (ev.ToolStarted, ev.ToolFinished, ev.AssistantMessage, ev.RunFinished):
        assert _holds_text(cls), cls  # a str, a list of calls, a Literal status: screened
    request = ev.ModelRequest(step=1, messages=3, prompt_tokens=40)
    assert redact_for_storage(request, (), ev.event_to_json)[0] is request


def test_a_kept_file_is_redacted_in_place_even_when_it_is_not_utf8(tmp_path: Path) -> None:
    """A long command's full output is redacted as its events are; bytes that are not UTF-8
    (random data printed by a command) are kept as they were."""
    from pilot.redact import redact_file

    noise = bytes(range(128, 256)) * 4
    body = noise + f"\nkey {GITHUB}\n".encode() + (b"x" * 100 + b"\n") * 30000 + noise
    path = tmp_path / "run-call.log"
    path.write_bytes(body + PEM.encode() + b"\n")
    assert redact_file(path)
    data = path.read_bytes()
    assert GITHUB.encode() not in data and b"MIIEowIBAAKCAQEAx1f2" not in data
    assert data.startswith(noise) and b"[REDACTED:github_token]" in data
    assert b"[REDACTED:private_key]" in data
    plain = tmp_path / "plain.log"
    plain.write_bytes(noise + b"nothing here\n")
    assert not redact_file(plain) and plain.read_bytes() == noise + b"nothing here\n"
