"""The scanner of a success's body for what the call used (docs/clients.md, "The transport",
item 3): the first "prompt_tokens" or "input_tokens" count and the last "completion_tokens" or
"output_tokens" count, found as the body is read in chunks."""

from __future__ import annotations

import gzip
import zlib

import pytest

from policyd_client._usage import UsageScanner, scanner_for

OPENAI = (
    b'{"id":"chatcmpl-1","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant",'
    b'"content":"hi"}}],"usage":{"prompt_tokens":1234,"completion_tokens":2,"total_tokens":1236,'
    b'"prompt_tokens_details":{"cached_tokens":0}}}'
)
ANTHROPIC_STREAM = (
    b'event: message_start\ndata: {"type":"message_start","message":{"id":"msg_1","usage":'
    b'{"cache_creation_input_tokens":7,"input_tokens":  987,"output_tokens":1}}}\n\n'
    b'event: content_block_delta\ndata: {"type":"content_block_delta","index":0,"delta":{"text":"ok"}}\n\n'
    b'event: message_delta\ndata: {"type":"message_delta","usage":{"output_tokens":5,"input_tokens":3}}\n\n'
)
OPENAI_STREAM = (
    b'data: {"choices":[{"index":0,"delta":{"content":"input_tokens"}}]}\n\n'
    b'data: {"choices":[],"usage":{"prompt_tokens":55,"completion_tokens":4}}\n\n'
    b"data: [DONE]\n\n"
)


def scan(chunks: list[bytes], encoding: str = "") -> list[int]:
    """The counts a scanner of a body of that content-encoding returns over chunks, in order."""
    return scan_both(chunks, encoding)[0]


def scan_both(chunks: list[bytes], encoding: str = "") -> tuple[list[int], int | None]:
    """The input counts a scanner returns over chunks, and the output count it holds at the end."""
    s = scanner_for(encoding)
    assert s is not None
    return [n for c in chunks if (n := s.feed(c)) is not None], s.output


def splits(body: bytes) -> list[list[bytes]]:
    """body in two chunks at every boundary, and byte by byte."""
    return [[body[:i], body[i:]] for i in range(len(body) + 1)] + [[body[i : i + 1] for i in range(len(body))]]


@pytest.mark.parametrize(
    ("body", "want"),
    [
        pytest.param(OPENAI, 1234, id="openai-json"),
        pytest.param(b'{"usage":{"input_tokens":42,"output_tokens":9}}', 42, id="anthropic-json"),
        pytest.param(ANTHROPIC_STREAM, 987, id="anthropic-sse-message-start"),
        pytest.param(OPENAI_STREAM, 55, id="openai-sse-include-usage"),
    ],
)
def test_the_first_count_is_found_wherever_the_chunks_split(body: bytes, want: int) -> None:
    for chunks in splits(body):
        assert scan(chunks) == [want], [c[:40] for c in chunks]


@pytest.mark.parametrize(
    "body",
    [
        b'{"input_tokens" : \n\t 77 }',
        b'{"prompt_tokens":\r\n77,"x":1}',
        b'{"input_tokens":77}',
    ],
)
def test_json_whitespace_around_the_colon(body: bytes) -> None:
    for chunks in splits(body):
        assert scan(chunks) == [77]


def test_other_keys_that_end_in_input_tokens_are_not_counted() -> None:
    body = (
        b'{"input_tokens_details":{"cached_tokens":100},"cache_read_input_tokens":200,'
        b'"prompt_tokens_details":{"cached_tokens":300},"input_tokens":5}'
    )
    for chunks in splits(body):
        assert scan(chunks) == [5]


def test_a_key_without_a_count_is_passed_over() -> None:
    assert scan([b'{"input_tokens":null,"text":"\\"prompt_tokens\\": x","prompt_tokens":8}']) == [8]


@pytest.mark.parametrize(
    "body",
    [
        pytest.param(b'{"usage":{"output_tokens":3,"completion_tokens":4}}', id="no-input-count"),
        pytest.param(b"", id="empty"),
        pytest.param(b'{"usage":{"prompt_tokens":', id="cut-before-the-count"),
        pytest.param(b'{"usage":{"prompt_tok', id="cut-in-the-key"),
        pytest.param(b'{"usage":{"prompt_tokens":12', id="cut-in-the-number"),
    ],
)
def test_no_count_or_a_body_cut_before_it_says_nothing(body: bytes) -> None:
    for chunks in splits(body):
        assert scan(chunks) == []


def test_the_input_count_is_returned_once() -> None:
    s = UsageScanner()
    assert s.feed(b'{"prompt_tokens":10,') == 10
    assert s.feed(b'"input_tokens":20}') is None


@pytest.mark.parametrize(
    ("body", "want"),
    [
        pytest.param(OPENAI, 2, id="openai-json"),
        pytest.param(b'{"usage":{"input_tokens":42,"output_tokens":9}}', 9, id="anthropic-json"),
        # message_start says 1, message_delta the final 5: the last is the call's.
        pytest.param(ANTHROPIC_STREAM, 5, id="anthropic-sse-the-last-count"),
        pytest.param(OPENAI_STREAM, 4, id="openai-sse-include-usage"),
        pytest.param(
            b'event: response.completed\ndata: {"type":"response.completed","response":{"usage":{"input_tokens":36,'
            b'"input_tokens_details":{"cached_tokens":0},"output_tokens":87,"output_tokens_details":'
            b'{"reasoning_tokens":0},"total_tokens":123}}}\n\n',
            87,
            id="openai-responses-sse-completed",
        ),
        pytest.param(b'{"usage":{"output_tokens":3,"completion_tokens":4}}', 4, id="no-input-count"),
        pytest.param(b'{"usage":{"input_tokens":3}}', None, id="no-output-count"),
        pytest.param(b'{"usage":{"input_tokens":3,"output_tokens":12', None, id="cut-in-the-output-number"),
    ],
)
def test_the_last_output_count_is_held_wherever_the_chunks_split(body: bytes, want: int | None) -> None:
    for chunks in splits(body):
        assert scan_both(chunks)[1] == want, [c[:40] for c in chunks]


def test_a_number_longer_than_any_count_is_huge_not_an_error() -> None:
    assert scan([b'{"input_tokens":' + b"9" * 40, b"}"]) == [int("9" * 19)]


@pytest.mark.parametrize(
    ("encoding", "body"), [("gzip", gzip.compress(OPENAI)), ("deflate", zlib.compress(OPENAI)), ("identity", OPENAI)]
)
def test_an_encoded_body_is_decoded_for_the_scan(encoding: str, body: bytes) -> None:
    for chunks in ([body], [body[i : i + 7] for i in range(0, len(body), 7)]):
        assert scan(chunks, encoding) == [1234]
    if encoding != "identity":  # a body that is not what its header says: nothing, and no error
        assert scan([b'not compressed: {"input_tokens":5}'], encoding) == []


def test_an_encoding_it_cannot_decode_is_not_scanned() -> None:
    assert scanner_for("br") is None and scanner_for("gzip, br") is None
