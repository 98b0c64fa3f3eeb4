"""What a success used, read from a response's body chunk by chunk as the SDK reads it
(docs/clients.md, "The transport", item 3): the FIRST ``"prompt_tokens":`` or ``"input_tokens":``
count (the input), and the LAST ``"completion_tokens":`` or ``"output_tokens":`` count (the
output: Anthropic's stream says it twice, a small count in ``message_start`` and the final one in
``message_delta`` at its end). A JSON usage object or the SSE event that carries one
(Anthropic's ``message_start`` and ``message_delta``, OpenAI's last chunk with
``stream_options.include_usage``, its Responses API's ``response.completed``); a key, the
whitespace after it or its number split across two chunks is still found.
``"input_tokens_details"``, ``"output_tokens_details"`` and ``"cache_read_input_tokens"`` are
other keys: the quotes around the key are part of the match.
"""

from __future__ import annotations

import re
import zlib

__all__ = ["UsageScanner", "scanner_for"]

# Every key ends so: one fast search a chunk finds the candidates, whose starts are checked.
_KEY_END = b'_tokens"'
_INPUT_STARTS = (b'"prompt', b'"input')
_OUTPUT_STARTS = (b'"completion', b'"output')
# The bytes a chunk carries over to the next: the longest key less its last byte.
_CARRY = len(b'"completion_tokens"') - 1
_SPACE = frozenset(b" \t\r\n")  # JSON's whitespace
_COLON = ord(":")
_DIGITS = frozenset(b"0123456789")
# More digits than any count: the number is taken as huge (the table clamps it).
_MAX_DIGITS = 19

# What follows a key when its count is whole in the chunk: read with one match, not byte by byte.
_COUNT = re.compile(rb"[ \t\r\n]*:[ \t\r\n]*([0-9]+)")

_SEEK, _KEY, _COLON_SEEN, _NUMBER, _DONE = range(5)


def scanner_for(content_encoding: str) -> UsageScanner | None:
    """A scanner of a body of that content-encoding (the header's value, "" for none): a body as
    it came, or gzip's or deflate's (what httpx asks for by default) decoded for the scan; None
    for another encoding (not scanned)."""
    encoding = content_encoding.strip().lower()
    if encoding in ("", "identity"):
        return UsageScanner()
    if encoding in ("gzip", "x-gzip", "deflate"):
        return UsageScanner(zlib.decompressobj(zlib.MAX_WBITS | 32))  # a gzip or zlib header
    return None


class UsageScanner:
    """Feed it a body's chunks in order: :meth:`feed` returns the input count once, when the
    number that follows the first input key is complete (a byte after it read), else None;
    :attr:`output` is the last output count read so far (None: none), the call's once the body
    has ended. ``decoder``: a zlib decompressor of an encoded body (the SDK's library decodes its
    own copy), None for a body as it came; a body it cannot decode says nothing more."""

    __slots__ = ("_carry", "_decoder", "_digits", "_found", "_output_key", "_state", "output")

    def __init__(self, decoder: zlib._Decompress | None = None) -> None:
        self._carry = b""
        self._decoder = decoder
        self._digits = b""
        self._state = _SEEK
        self._output_key = False  # the key being read counts output tokens
        self._found = False  # the input count was returned
        self.output: int | None = None

    @property
    def done(self) -> bool:
        """The body cannot be read: nothing more to scan."""
        return self._state == _DONE

    def feed(self, chunk: bytes) -> int | None:
        if self._state == _DONE:
            return None
        if self._decoder is not None:
            try:
                chunk = self._decoder.decompress(chunk)
            except zlib.error:  # not what its content-encoding says: the SDK will say so
                self._state = _DONE
                return None
        buf = self._carry + chunk if self._carry else chunk
        self._carry = b""
        found = None
        i, n = 0, len(buf)
        while i < n:
            state = self._state
            if state == _SEEK:
                j = buf.find(_KEY_END, i)
                if j < 0:
                    self._carry = buf[max(i, n - _CARRY) :]
                    return found
                start, i = i, j + len(_KEY_END)
                if buf.endswith(_INPUT_STARTS, start, j):
                    output_key = False
                elif buf.endswith(_OUTPUT_STARTS, start, j):
                    output_key = True
                else:
                    continue  # another key (total_tokens, cache_read_input_tokens, ...)
                m = _COUNT.match(buf, i)
                if m is not None and m.end() < n:  # the whole count, a byte after it: read at once
                    i = m.end()
                    found = self._take(output_key, int(m.group(1)[:_MAX_DIGITS]), found)
                    continue
                self._state, self._output_key = _KEY, output_key  # read on byte by byte
            elif state == _NUMBER:
                j = i
                while j < n and buf[j] in _DIGITS:
                    j += 1
                self._digits = (self._digits + buf[i:j])[:_MAX_DIGITS]
                if j == n:
                    return found  # the number may go on in the next chunk
                count, self._digits, self._state, i = int(self._digits), b"", _SEEK, j
                found = self._take(self._output_key, count, found)
            else:
                c = buf[i]
                if c in _SPACE:
                    i += 1
                elif state == _KEY and c == _COLON:
                    self._state = _COLON_SEEN
                    i += 1
                elif state == _COLON_SEEN and c in _DIGITS:
                    self._state = _NUMBER
                else:  # the key of something else (a string, null, an object): the next one
                    self._state = _SEEK
        return found

    def _take(self, output_key: bool, count: int, found: int | None) -> int | None:
        """A count read: the output so far, or the input count to return (the first one only)."""
        if output_key:
            self.output = count
        elif not self._found:
            self._found = True
            return count
        return found
