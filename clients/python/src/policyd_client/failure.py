"""Turn Python exceptions and HTTP responses into policyd ``Failure`` messages.

The mapping is duck-typed: httpx, requests, aiohttp and the OpenAI and
Anthropic SDKs are recognised by the attributes their exceptions and responses
carry (``status_code``, ``status``, ``response``, ``headers``, ``body``,
``code``), so none of them is a dependency of this package. What policyd's
classifier needs is the class names and codes of the whole cause chain (it
knows ``ConnectError``, ``ReadTimeout``, ``ECONNRESET``, ...), the HTTP status,
headers and body, and the messages.
"""

from __future__ import annotations

import errno
import json
import socket
from collections.abc import Callable, Iterable, Mapping
from typing import Any, cast

from ._gen.policyd.v1 import policy_pb2 as pb

__all__ = ["failure_from_exception", "failure_from_response", "FailureMapper"]

#: A function that turns an exception into a Failure; the client's default
#: is :func:`failure_from_exception`.
FailureMapper = Callable[[BaseException], pb.Failure]

# policyd's request limits (bytes): a header value, a cause field and the short
# fields at most 8 KiB, the message 64 KiB, at most 100 headers and 64 causes.
# The body is not limited by the daemon, but only its first 64 KiB are read.
_FIELD_BYTES = 8 << 10
_MESSAGE_BYTES = 64 << 10
_BODY_BYTES = 64 << 10
_HEADER_NAME_BYTES = 256
_MAX_HEADERS = 100
_MAX_CAUSES = 64
# key_id and client_id are labels, not data: the daemon refuses longer ones.
_LABEL_BYTES = 128

# getaddrinfo's negative EAI_* numbers, by value, for socket.gaierror.
_EAI_NAMES = {
    getattr(socket, n): n for n in dir(socket) if n.startswith("EAI_") and isinstance(getattr(socket, n), int)
}


def failure_from_exception(
    exc: BaseException,
    *,
    provider: str = "",
    model: str = "",
    operation: str = "",
    method: str = "",
    phase: int = 0,
) -> pb.Failure:
    """Return the Failure policyd should see for ``exc``.

    ``error_name`` is the exception's class name, ``message`` its text and
    ``causes`` every exception behind it, outermost first: ``__cause__``, else
    ``__context__`` (unless suppressed), plus exceptions an exception wraps
    without chaining (``URLError.reason``, urllib3's ``MaxRetryError.reason``,
    a requests ``ConnectionError``'s first argument). ``error_code`` is the
    first code found along that chain: an ``OSError``'s errno name
    (``ECONNRESET``), a ``socket.gaierror``'s ``EAI_*`` name, or a string
    ``code``/``error_code``/``status`` attribute (task error codes, the
    OpenAI SDK's ``rate_limit_exceeded``, Google's ``RESOURCE_EXHAUSTED``).

    The HTTP part comes from the first exception in the chain that carries
    one: a ``response`` with ``status_code``/``status``, ``headers`` and text
    (httpx, requests, the OpenAI and Anthropic SDKs), or the exception's own
    ``status_code``/``status``/``code`` and ``headers`` (aiohttp,
    ``urllib.error.HTTPError``, whose body is read here). A ``grpc.RpcError``
    gives ``grpc_code``. ``method`` is taken from the failed request when not
    given.
    """
    chain = _chain(exc)
    f = pb.Failure(
        provider=_clip(provider, _FIELD_BYTES),
        model=_clip(model, _FIELD_BYTES),
        operation=_clip(operation, _FIELD_BYTES),
        error_name=_clip(_name_of(exc), _FIELD_BYTES),
        message=_clip(_message_of(exc), _MESSAGE_BYTES),
        phase=cast(pb.Phase, phase),
    )
    for link in chain[1 : _MAX_CAUSES + 1]:
        f.causes.append(
            pb.Cause(
                name=_clip(_name_of(link), _FIELD_BYTES),
                code=_clip(_code_of(link), _FIELD_BYTES),
                message=_clip(_message_of(link), _FIELD_BYTES),
            )
        )
    f.error_code = _clip(next((c for c in map(_code_of, chain) if c), ""), _FIELD_BYTES)

    for link in chain:
        if _fill_http(f, link):
            break
    if not f.error_code:
        f.error_code = body_error_code(f.body)
    for link in chain:
        code = _grpc_code_of(link)
        if code:
            f.grpc_code = code
            break
    if method:
        f.method = _clip(method.upper(), _FIELD_BYTES)
    elif not f.method:
        for link in chain:
            m = _method_of(_safe_getattr(link, "request"))
            if m:
                f.method = m
                break
    return f


def failure_from_response(
    response: Any,
    *,
    provider: str = "",
    model: str = "",
    operation: str = "",
    method: str = "",
) -> pb.Failure:
    """Return the Failure for an HTTP response that was not an exception.

    ``response`` is duck-typed: an ``httpx.Response``, a ``requests.Response``,
    an ``http.client.HTTPResponse`` (what ``urllib.request.urlopen`` returns;
    its body is read) or an aiohttp response whose body was read. Status,
    headers, body and method are copied; ``message`` is ``"HTTP <status>
    <reason>"``.
    """
    f = pb.Failure(
        provider=_clip(provider, _FIELD_BYTES),
        model=_clip(model, _FIELD_BYTES),
        operation=_clip(operation, _FIELD_BYTES),
    )
    _fill_from_response(f, response)
    reason = _safe_getattr(response, "reason_phrase") or _safe_getattr(response, "reason") or ""
    f.message = _clip(f"HTTP {f.http_status} {reason}".strip(), _MESSAGE_BYTES)
    if method:
        f.method = _clip(method.upper(), _FIELD_BYTES)
    return f


# ---- the chain


def _chain(exc: BaseException) -> list[BaseException]:
    """Return exc and every exception behind it, outermost first, each once."""
    seen: set[int] = set()
    out: list[BaseException] = []
    todo: list[BaseException] = [exc]
    while todo and len(out) <= _MAX_CAUSES:
        e = todo.pop(0)
        if id(e) in seen:
            continue
        seen.add(id(e))
        out.append(e)
        nxt: list[BaseException] = []
        if e.__cause__ is not None:
            nxt.append(e.__cause__)
        elif e.__context__ is not None and not e.__suppress_context__:
            nxt.append(e.__context__)
        reason = _safe_getattr(e, "reason")
        if isinstance(reason, BaseException):
            nxt.append(reason)
        nxt.extend(a for a in getattr(e, "args", ()) if isinstance(a, BaseException))
        # Depth first along the main chain keeps "outermost first".
        todo[:0] = nxt
    return out


def _name_of(e: BaseException) -> str:
    return type(e).__name__


def _message_of(e: BaseException) -> str:
    try:
        s = str(e)
    except Exception:  # a broken __str__ must not break the mapping
        s = ""
    return s or type(e).__name__


def body_error_code(body: str) -> str:
    """Return the provider's machine code in a JSON error body, as the SDKs read it, or "".

    ``error.code`` (``insufficient_quota``, ``rate_limit_exceeded``), else
    ``error.status`` (``RESOURCE_EXHAUSTED``), when a string: the journal keeps
    it, so post-mortems tell an exhausted quota from a rate limit. Every client
    reads the same two fields (error_mapping.json).
    """
    body = body.strip()
    if not body.startswith("{"):
        return ""
    try:
        err = json.loads(body).get("error")
    except (ValueError, RecursionError):
        return ""
    if not isinstance(err, dict):
        return ""
    for key in ("code", "status"):
        v = err.get(key)
        if isinstance(v, str) and v and _looks_like_code(v):
            return v
    return ""


def _code_of(e: BaseException) -> str:
    """Return a machine code for one exception, or ""."""
    if isinstance(e, socket.gaierror) and isinstance(e.errno, int):
        return _EAI_NAMES.get(e.errno, "")
    if isinstance(e, OSError) and isinstance(e.errno, int):
        return errno.errorcode.get(e.errno, "")
    for attr in ("error_code", "code", "status"):
        v = _safe_getattr(e, attr)
        if isinstance(v, str) and _looks_like_code(v):
            return v
    return ""


def _looks_like_code(s: str) -> bool:
    return 0 < len(s) <= 128 and not any(c.isspace() for c in s)


def _grpc_code_of(e: BaseException) -> int:
    """Return a grpc.RpcError's status code number, or 0."""
    code = _safe_getattr(e, "code")
    if not callable(code) or not callable(_safe_getattr(e, "details")):
        return 0
    try:
        value = code().value
    except Exception:
        return 0
    n = value[0] if isinstance(value, tuple) and value else value
    return n if isinstance(n, int) and 0 < n <= 16 else 0


# ---- HTTP


def _fill_http(f: pb.Failure, e: BaseException) -> bool:
    """Copy the HTTP status, headers and body e carries into f; say whether it had any."""
    response = _safe_getattr(e, "response")
    if response is not None and _status_of(response):
        _fill_from_response(f, response)
        own = _own_status(e)
        if own and not f.http_status:
            f.http_status = own
        if not f.body:
            f.body = _body_attr(e)
        return True
    status = _own_status(e)
    if not status:
        return False
    f.http_status = status
    _fill_headers(f, _safe_getattr(e, "headers"))
    body = ""
    if callable(_safe_getattr(e, "read")) and _safe_getattr(e, "fp") is not None:
        body = _read_body(e)  # urllib.error.HTTPError is its own response
    f.body = body or _body_attr(e)
    return True


def _own_status(e: Any) -> int:
    """Return the HTTP status an exception states itself (status_code, status, or an int code)."""
    for attr in ("status_code", "status", "code", "http_status"):
        v = _safe_getattr(e, attr)
        if isinstance(v, int) and not isinstance(v, bool) and 100 <= v <= 999:
            return v
    return 0


def _status_of(response: Any) -> int:
    for attr in ("status_code", "status"):
        v = _safe_getattr(response, attr)
        if isinstance(v, int) and not isinstance(v, bool) and 100 <= v <= 999:
            return v
    return 0


def _fill_from_response(f: pb.Failure, response: Any) -> None:
    f.http_status = _status_of(response)
    _fill_headers(f, _safe_getattr(response, "headers"))
    f.body = _response_text(response)
    f.error_code = body_error_code(f.body)
    m = _method_of(_safe_getattr(response, "request"))
    if m:
        f.method = m


def _fill_headers(f: pb.Failure, headers: Any) -> None:
    items: Iterable[tuple[Any, Any]]
    if headers is None:
        return
    try:
        if hasattr(headers, "multi_items"):  # httpx: keep repeated headers
            items = list(headers.multi_items())
        elif hasattr(headers, "items"):
            items = list(headers.items())
        else:
            items = list(headers)
    except Exception:
        return
    merged: dict[str, str] = {}
    for k, v in items:
        name = _text(k).strip().lower()
        if not name or len(name.encode()) > _HEADER_NAME_BYTES:
            continue
        value = _text(v)
        merged[name] = f"{merged[name]}, {value}" if name in merged else value
    for name, value in list(merged.items())[:_MAX_HEADERS]:
        f.headers[name] = _clip(value, _FIELD_BYTES)


def _response_text(response: Any) -> str:
    """Return a response's body text without failing on unread or streamed bodies."""
    for attr in ("text", "content", "_body"):
        try:
            v = getattr(response, attr)
        except Exception:  # httpx.ResponseNotRead and friends
            continue
        if callable(v):  # aiohttp's text() is a coroutine function: not usable here
            continue
        if isinstance(v, (bytes, bytearray)):
            return _clip(bytes(v[:_BODY_BYTES]).decode("utf-8", "replace"), _BODY_BYTES)
        if isinstance(v, str):
            return _clip(v, _BODY_BYTES)
    if callable(_safe_getattr(response, "read")) and _safe_getattr(response, "fp") is not None:
        return _read_body(response)  # http.client.HTTPResponse
    return ""


def _read_body(r: Any) -> str:
    try:
        data = r.read(_BODY_BYTES)
    except Exception:
        return ""
    if isinstance(data, (bytes, bytearray)):
        return bytes(data).decode("utf-8", "replace")
    return ""


def _body_attr(e: Any) -> str:
    """Return an SDK exception's parsed ``body`` as JSON text, or ""."""
    body = _safe_getattr(e, "body")
    if body is None:
        return ""
    if isinstance(body, (bytes, bytearray)):
        return _clip(bytes(body[:_BODY_BYTES]).decode("utf-8", "replace"), _BODY_BYTES)
    if isinstance(body, str):
        return _clip(body, _BODY_BYTES)
    if isinstance(body, (Mapping, list)):
        try:
            return _clip(json.dumps(body, default=str), _BODY_BYTES)
        except (TypeError, ValueError):
            return ""
    return ""


def _method_of(request: Any) -> str:
    if request is None:
        return ""
    m = _safe_getattr(request, "method")
    if isinstance(m, bytes):
        m = m.decode("ascii", "replace")
    if callable(m):  # urllib.request.Request.get_method
        try:
            m = m()
        except Exception:
            return ""
    return m.upper() if isinstance(m, str) and 0 < len(m) <= 32 else ""


# ---- helpers


def _safe_getattr(obj: Any, name: str) -> Any:
    """getattr that treats a raising property (httpx's .request) as absent."""
    try:
        return getattr(obj, name, None)
    except Exception:
        return None


def _text(v: Any) -> str:
    if isinstance(v, bytes):
        return v.decode("latin-1")
    return str(v)


def clip_label(s: str) -> str:
    """Return a key id or client id cut to the daemon's 128-byte label limit."""
    return _clip(s, _LABEL_BYTES)


def _clip(s: str, limit: int) -> str:
    """Return s cut to at most limit UTF-8 bytes, on a character boundary."""
    b = s.encode("utf-8", "replace")
    if len(b) <= limit:
        return s
    return b[:limit].decode("utf-8", "ignore")
