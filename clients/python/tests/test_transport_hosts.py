"""clients/testdata/transport_hosts.json: what a request through the transport calls (its
provider and model), read from its URL and body; the Go and TypeScript transports read the
same file."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from policyd_client._request_target import HOSTS, MAX_BODY_BYTES, model_of, operation_of, provider_of

VECTORS: dict[str, Any] = json.loads(
    (Path(__file__).resolve().parents[2] / "testdata" / "transport_hosts.json").read_text()
)


def test_the_host_table_is_the_shared_one() -> None:
    want = dict(VECTORS["hosts"])
    # A host suffix (".openai.azure.com") is the table's "*." entry.
    want.update({"*" + suffix: p for suffix, p in VECTORS.get("host_suffixes", {}).items()})
    assert HOSTS == want


@pytest.mark.parametrize("case", [pytest.param(c, id=c.get("id") or c["url"]) for c in VECTORS["cases"]])
def test_what_a_request_calls(case: dict[str, Any]) -> None:
    url = urlsplit(case["url"])
    body = case["body"].encode()
    if case.get("body_too_large"):
        body = body[:-1] + b" " * (MAX_BODY_BYTES + 1) + body[-1:]  # still JSON, but not read
    assert provider_of(url.hostname or "", url.path) == case["provider"]
    assert model_of(body, url.path) == case["model"]


@pytest.mark.parametrize(
    "path, operation",
    [
        ("/v1/chat/completions", "chat"),
        ("/openai/deployments/prod/chat/completions", "chat"),
        ("/v1/completions", "completion"),
        ("/v1/responses", "responses"),
        ("/v1/embeddings", "embeddings"),
        ("/v1/messages", "messages"),
        ("/v1/messages/count_tokens", "messages.count_tokens"),
        ("/v1beta/models/gemini-2.5-flash:generateContent", "generate_content"),
        ("/v1beta/models/gemini-2.5-flash:streamGenerateContent", "generate_content"),
        ("/v1beta/models/gemini-2.5-flash:frobnicate", ""),
        ("/v1/files", ""),  # not a model call: its method decides whether it may be repeated
        ("/v1/batches", ""),
    ],
)
def test_the_operation_a_path_names(path: str, operation: str) -> None:
    assert operation_of(path) == operation
