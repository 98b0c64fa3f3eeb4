"""What a request through the transport calls, read from its URL, headers and body
(docs/clients.md, "The transport"): the provider, the model, the operation and an
estimate of its input tokens. Pure functions; clients/testdata/transport_hosts.json
pins the host table and the provider and model rules, as in the Go and TypeScript
clients."""

from __future__ import annotations

import json
import math
import re

__all__ = [
    "INPUT_TOKENS_HEADER",
    "MAX_BODY_BYTES",
    "input_tokens",
    "model_of",
    "operation_of",
    "provider_of",
]

#: The API hosts whose provider the transport knows, exact (lower case) or, with a
#: leading "*.", any subdomain of the rest (not the domain itself).
HOSTS = {
    "api.openai.com": "openai",
    "api.anthropic.com": "anthropic",
    "generativelanguage.googleapis.com": "google",
    "*.openai.azure.com": "azure",
    "api.mistral.ai": "mistral",
    "api.groq.com": "groq",
    "api.deepseek.com": "deepseek",
    "openrouter.ai": "openrouter",
}
_SUFFIXES = tuple((host[1:], provider) for host, provider in HOSTS.items() if host.startswith("*."))

#: The request header that carries the caller's exact count of input tokens; the
#: transport strips it before sending.
INPUT_TOKENS_HEADER = "x-policyd-input-tokens"
#: The largest body the transport reads a model from.
MAX_BODY_BYTES = 8 << 20
# A token is about four bytes of English text: the providers' own rule of thumb.
_BYTES_PER_TOKEN = 4

_GEMINI_MODEL = re.compile(r"(?:^|/)models/([^/:]+):[^/]+$")
# A body whose first byte after (bytes.lstrip's) whitespace opens an object: matched, not copied.
_OBJECT = re.compile(rb"[ \t\n\r\x0b\x0c]*\{")

# The operation a model API's path names: policyd treats model operations as safe to
# repeat whatever the method (clients/testdata/safety.json). The path's end, the longest first.
_OPERATIONS = (
    ("/chat/completions", "chat"),
    ("/messages/count_tokens", "messages.count_tokens"),
    ("/completions", "completion"),
    ("/responses", "responses"),
    ("/embeddings", "embeddings"),
    ("/messages", "messages"),
)
_GEMINI_OPERATIONS = {
    "generateContent": "generate_content",
    "streamGenerateContent": "generate_content",
    "countTokens": "model.count_tokens",
    "embedContent": "embed_content",
    "batchEmbedContents": "embed_content",
}


def provider_of(host: str, path: str) -> str:
    """The provider of a request to host (without its port) and path: the host table, else the
    path (``…/v1/messages…`` is Anthropic's API, ``…/chat/completions…`` and ``…/responses…``
    OpenAI's, as their compatible gateways serve them), else ``"unknown"``."""
    host = host.lower().rstrip(".")
    provider = HOSTS.get(host)
    if provider is not None:
        return provider
    for suffix, provider in _SUFFIXES:
        if host.endswith(suffix) and len(host) > len(suffix):
            return provider
    segments = [s for s in path.split("/") if s]
    for i, s in enumerate(segments):
        following = segments[i + 1] if i + 1 < len(segments) else ""
        if s == "v1" and following == "messages":
            return "anthropic"
        if (s == "chat" and following == "completions") or s == "responses":
            return "openai"
    return "unknown"


def model_of(body: bytes | None, path: str) -> str:
    """The model a request names: its JSON body's top-level string ``model`` (a body that is not
    a JSON object, or larger than MAX_BODY_BYTES, names none), else a Gemini-style path's
    ``models/{model}:{method}``, else ""."""
    if body and len(body) <= MAX_BODY_BYTES and _OBJECT.match(body):
        try:
            doc = json.loads(body)
        except (ValueError, RecursionError):
            doc = None
        if isinstance(doc, dict):
            model = doc.get("model")
            if isinstance(model, str) and model:
                return model
    m = _GEMINI_MODEL.search(path)
    return m.group(1) if m else ""


def operation_of(path: str) -> str:
    """The operation a model API's path names (``chat``, ``messages``, ``generate_content``, ...),
    "" for any other path (its method then decides whether it may be repeated)."""
    path = path.rstrip("/")
    last = path.rsplit("/", 1)[-1]
    if ":" in last:  # Gemini's models/{model}:generateContent
        return _GEMINI_OPERATIONS.get(last.rsplit(":", 1)[1], "")
    return next((operation for suffix, operation in _OPERATIONS if path.endswith(suffix)), "")


def input_tokens(header: str | None, body_bytes: int) -> int:
    """A request's input tokens: the caller's count in the INPUT_TOKENS_HEADER, else
    ceil(body bytes / 4). A header that is not a whole number ≥ 0 raises ValueError."""
    if header is None:
        return math.ceil(body_bytes / _BYTES_PER_TOKEN)
    text = header.strip()
    if not (text.isascii() and text.isdigit()):
        raise ValueError(f"policyd: header {INPUT_TOKENS_HEADER}: want a whole number of tokens >= 0, not {header!r}")
    return int(text)
