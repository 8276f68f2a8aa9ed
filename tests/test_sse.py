"""The event-stream decoder: what vLLM sends, what the spec allows, in every chunking."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from brain.sse import SSEDecoder


def decode(*chunks: bytes) -> list[bytes]:
    decoder = SSEDecoder()
    return [data for chunk in chunks for data in decoder.feed(chunk)]


def test_vllm_stream_gives_each_data_payload():
    chunk = {"id": "chatcmpl-1", "choices": [{"index": 0, "delta": {"content": "Hi"}}]}
    body = f"data: {json.dumps(chunk)}\n\ndata: [DONE]\n\n".encode()
    assert decode(body) == [json.dumps(chunk).encode(), b"[DONE]"]


@pytest.mark.parametrize("end", [b"\n", b"\r\n", b"\r"])
def test_every_line_ending_of_the_spec(end: bytes):
    body = b"data: one" + end + end + b"data: two" + end + end
    assert decode(body) == [b"one", b"two"]


def test_a_crlf_split_between_reads_is_one_line_end():
    assert decode(b"data: one\r", b"\n\r", b"\ndata: two\r\n\r\n") == [b"one", b"two"]


def test_a_lone_cr_at_the_end_of_a_read_still_ends_the_line():
    assert decode(b"data: one\r", b"\r", b"data: two\r\r") == [b"one", b"two"]


def test_data_lines_join_with_newlines_and_other_fields_are_ignored():
    body = b": keep-alive\nevent: message\nid: 7\nretry: 10\ndata: a\ndata:b\ndata\n\n"
    assert decode(body) == [b"a\nb\n"]


def test_only_one_space_after_the_colon_is_dropped():
    assert decode(b"data:  two spaces\n\n") == [b" two spaces"]


def test_fields_that_only_start_with_data_are_not_data():
    assert decode(b"database: x\ndata: y\n\n") == [b"y"]


def test_blank_lines_without_data_dispatch_nothing():
    assert decode(b"\n\n: comment\n\n\n") == []


def test_an_event_cut_before_its_blank_line_is_never_dispatched():
    decoder = SSEDecoder()
    assert decoder.feed(b'data: {"choices": []}\n') == []
    assert decoder.feed(b'data: {"more"') == []  # the stream ends here: nothing complete


def test_a_leading_bom_is_dropped_even_when_split():
    assert decode(b"\xef", b"\xbb", b"\xbfdata: x\n\n") == [b"x"]
    assert decode(b"data: \xef\xbb\xbfx\n\n") == [b"\xef\xbb\xbfx"]  # only at the very start


LINE_END = st.sampled_from([b"\n", b"\r\n", b"\r"])
PAYLOAD = st.text(
    alphabet=st.characters(blacklist_characters="\r\n", blacklist_categories=("Cs",)),
    max_size=40,
).map(lambda text: text.encode())


@st.composite
def streams(draw: st.DrawFn) -> tuple[bytes, list[bytes]]:
    """A body of events (data lines, comments) and the payloads it must give. One line ending
    per stream, as servers write: mixed, a CR line end then an empty LF line would read as
    one CRLF, which is what the spec says, not what the draw meant."""
    end = draw(LINE_END)
    body, expected = b"", []
    for _ in range(draw(st.integers(0, 6))):
        lines = draw(st.lists(PAYLOAD, min_size=1, max_size=3))
        for line in lines:
            if draw(st.booleans()):
                body += b": comment" + end
            body += b"data: " + line + end
        body += end
        expected.append(b"\n".join(lines))
    return body, expected


@given(streams(), st.data())
@settings(max_examples=300, deadline=None)
def test_any_chunking_gives_the_same_events(stream: tuple[bytes, list[bytes]], data: st.DataObject):
    body, expected = stream
    cuts = sorted(data.draw(st.lists(st.integers(0, len(body)), max_size=12)))
    pieces = [body[a:b] for a, b in zip([0, *cuts], [*cuts, len(body)], strict=True)]
    assert decode(*pieces) == expected
    assert decode(body) == expected
