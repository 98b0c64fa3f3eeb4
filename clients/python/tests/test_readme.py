"""The README's Python examples run as written.

Each ```python block runs unchanged in its own interpreter. Only the
environment differs from a real deployment, and only through the variables the
libraries already read: POLICYD_ADDR (policyd_client), OPENAI_BASE_URL and
ANTHROPIC_BASE_URL (the SDKs), and HTTP_PROXY, which sends the plain-HTTP fetch
of http://example.com/ to the local server (NO_PROXY keeps 127.0.0.1 direct).
The local server fails first, so each example goes through a retry.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from harness import TOKEN, Certs, Daemon, FakeServer, Reply

README = Path(__file__).resolve().parents[1] / "README.md"

CHAT = (
    '{"id": "c1", "object": "chat.completion", "created": 1, "model": "gpt-4o", "choices": [{"index": 0, '
    '"message": {"role": "assistant", "content": "hi from the fake model"}, "finish_reason": "stop"}]}'
)
MESSAGE = (
    '{"id": "m1", "type": "message", "role": "assistant", "model": "claude-sonnet-4-5", "stop_reason": "end_turn", '
    '"content": [{"type": "text", "text": "hello from the fake claude"}], "usage": {"input_tokens": 1, "output_tokens": 1}}'
)


def blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)


def example_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.lower().endswith("_proxy") and not k.startswith("POLICYD_")}


def test_readme_has_the_examples() -> None:
    assert len(blocks()) == 7


def test_readme_opens_with_the_transport(daemon: Daemon, server: FakeServer) -> None:
    """The first example: both SDKs through the transport, each request failing once (a 429 with
    retry-after, an overloaded 529), retried by the transport, not by the SDKs (max_retries=0)."""
    server.script("/v1/chat/completions", Reply(429, headers={"retry-after": "1"}, body="{}"), Reply(200, body=CHAT))
    server.script(
        "/v1/messages",
        Reply(529, headers={"retry-after": "1"}, body='{"type": "error", "error": {"type": "overloaded_error"}}'),
        Reply(200, body=MESSAGE),
    )
    env = example_env()
    env.update(POLICYD_ADDR=daemon.addr, OPENAI_BASE_URL=server.url("/v1"), OPENAI_API_KEY="test-key",
               ANTHROPIC_BASE_URL=server.url(""), ANTHROPIC_API_KEY="test-key")  # fmt: skip
    assert "pd.httpx2_client(provider=" in blocks()[0]
    run = subprocess.run([sys.executable, "-c", blocks()[0]], env=env, capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    assert "hi from the fake model" in run.stdout and "hello from the fake claude" in run.stdout
    assert server.count("/v1/chat/completions") == 2 and server.count("/v1/messages") == 2


@pytest.mark.parametrize(
    "index, expect",
    [
        (1, "hi from the fake model"),
        (2, "<h1>Example"),
        (3, "hello from the fake claude"),
        (5, "fake chat"),
        (6, '"policyd.decided_by": "policyd"'),  # the decision on the span the console exporter prints
    ],
)
def test_readme_example_runs(index: int, expect: str, daemon: Daemon, server: FakeServer) -> None:
    server.script("/v1/chat/completions", Reply(429, headers={"retry-after": "1"}, body="{}"), Reply(200, body=CHAT))
    server.script("http://example.com/", Reply(503), Reply(200, body="<h1>Example Domain</h1>"))
    server.script(
        "http://example.com/v1/chat/completions",
        Reply(429, headers={"retry-after": "1"}),
        Reply(200, headers={"x-ratelimit-limit-requests": "600"}, body="fake chat"),
    )
    server.script(
        "/v1/messages",
        Reply(529, headers={"retry-after": "1"}, body='{"type": "error", "error": {"type": "overloaded_error"}}'),
        Reply(200, body=MESSAGE),
    )
    env = example_env()
    env.update(
        POLICYD_ADDR=daemon.addr,
        OPENAI_BASE_URL=server.url("/v1"),
        OPENAI_API_KEY="test-key",
        ANTHROPIC_BASE_URL=server.url(""),
        ANTHROPIC_API_KEY="test-key",
        HTTP_PROXY=server.url(""),
        NO_PROXY="127.0.0.1,localhost",
        no_proxy="127.0.0.1,localhost",
    )
    code = blocks()[index]
    run = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    assert expect in run.stdout
    paths = ("/v1/chat/completions", "http://example.com/", "/v1/messages", "http://example.com/v1/chat/completions")
    hits = sum(server.count(p) for p in paths)
    assert hits == 2  # one failure, one retry


def test_readme_auth_example_runs(tls_daemon: Daemon, certs: Certs, server: FakeServer) -> None:
    """The Authentication and TLS example, against a daemon with tokens and TLS: with POLICYD_TOKEN
    it fetches through a retry; without it, it exits naming POLICYD_TOKEN after one attempt."""
    env = example_env()
    env.update(
        POLICYD_ADDR=tls_daemon.addr,
        POLICYD_TLS_CA=certs.ca,
        HTTP_PROXY=server.url(""),
        NO_PROXY="127.0.0.1,localhost",
        no_proxy="127.0.0.1,localhost",
    )
    code = blocks()[4]
    server.script("http://example.com/", Reply(503), Reply(200, body="<h1>Example Domain</h1>"))
    run = subprocess.run([sys.executable, "-c", code], env={**env, "POLICYD_TOKEN": TOKEN},
                         capture_output=True, text=True, timeout=60)  # fmt: skip
    assert run.returncode == 0, run.stderr
    assert "<h1>Example" in run.stdout and server.count("http://example.com/") == 2

    server.script("http://example.com/", Reply(503), Reply(200, body="<h1>Example Domain</h1>"))
    run = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert run.returncode == 1
    assert "UNAUTHENTICATED" in run.stderr and "set POLICYD_TOKEN" in run.stderr
    assert server.count("http://example.com/") == 1
    assert TOKEN not in run.stderr + tls_daemon.logs()
