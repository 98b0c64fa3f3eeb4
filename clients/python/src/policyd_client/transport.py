"""The transport: every request of an httpx-based SDK (the OpenAI and Anthropic SDKs) through
policyd, in one line (docs/clients.md, "The transport")::

    from openai import OpenAI
    from policyd_client import Client

    pd = Client()
    llm = OpenAI(http_client=pd.httpx2_client(provider="openai"), max_retries=0)

Each request is one :meth:`Client.call` (or :meth:`AsyncClient.call`): the fleet gate
checks its first attempt, a failure (HTTP status ≥ 400, or a transport error before any
response) is decided by NextDelay (or the fail-open policy) and retried here with the same
buffered body, and a success passes through untouched, streams included, with no RPC.
When policyd says stop, the SDK gets the last response as it came (its body restored) and
raises its own error (``RateLimitError``, ...), or the transport's own exception for a
request that got no response; a request the gate does not send raises the client's
:class:`RetryStopped` (``attempts == 0``, a :class:`FleetGateError` behind it), since
nothing went out. The SDK's own retries must be off (``max_retries=0``): policyd decides.

httpx and httpx2 (whose API is httpx's; the current OpenAI and Anthropic SDKs take an
``httpx2.Client``, older releases an ``httpx.Client``) work alike: the inner transport says
which. Neither is a dependency of the core client: ``policyd-client[httpx]`` or
``policyd-client[httpx2]``.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import AsyncIterator, Iterator, Mapping
from dataclasses import dataclass
from types import ModuleType
from typing import TYPE_CHECKING, Any, NamedTuple, TypedDict

from . import _fleet
from ._core import Deadline, Safety
from ._fleet import RATE_LIMIT_PREFIXES
from ._request_target import INPUT_TOKENS_HEADER, input_tokens, model_of, operation_of, provider_of
from ._usage import UsageScanner, scanner_for
from .errors import RetryStopped

if TYPE_CHECKING:
    import httpx
    import httpx2
    from typing_extensions import Unpack

    from .aio import AsyncClient
    from .client import Client

    _SyncBase = httpx.BaseTransport
    _AsyncBase = httpx.AsyncBaseTransport
else:
    try:  # httpx's base classes when it is installed: an httpx2 client takes the transports as well
        from httpx import AsyncBaseTransport as _AsyncBase
        from httpx import BaseTransport as _SyncBase
    except ImportError:
        _SyncBase = _AsyncBase = object

__all__ = [
    "AsyncPolicydTransport",
    "PolicydTransport",
    "RequestNotReplayable",
    "TransportOptions",
    "httpx2_async_client",
    "httpx2_client",
    "httpx_async_client",
    "httpx_client",
]

#: How much of an error response's body the transport reads for policyd (the failure's body
#: is at most that); the SDK gets all of it.
ERROR_BODY_BYTES = 64 << 10
# The rate-limit headers' prefixes, as the raw header names are matched against them.
_RATE_LIMIT_PREFIXES = tuple(p.encode() for p in RATE_LIMIT_PREFIXES)


class TransportOptions(TypedDict, total=False):
    """The transport's options; each request is a :meth:`Client.call` with them.

    ``provider`` (default: from the host, else the path, else ``"unknown"``), ``model``
    (default: the JSON body's ``model``, else a Gemini-style path's), ``key_id`` (a label of the
    credential, never the key), ``operation`` (default: from the path: ``chat``, ``messages``,
    ``responses``, ...; policyd repeats model calls whatever their method, and other POSTs not),
    ``priority`` (``"interactive"``, or ``"batch"``: shed first when the fleet paces the target),
    ``profile``, ``journal``, ``labels``, ``safety`` as ``call``'s, and ``deadline`` (seconds, or
    a timedelta, for each request and its retries)."""

    provider: str
    model: str
    key_id: str
    operation: str
    priority: _fleet.Priority
    profile: str | None
    journal: bool | None
    labels: Mapping[str, str] | None
    deadline: Deadline | None
    safety: Safety | None


class RequestNotReplayable(Exception):
    """A retry policyd allowed of a request whose body was streamed and cannot be sent again.

    Such requests are sent with ``safety="irreversible"``, so policyd and the fail-open
    policy stop them; this guards a daemon told to retry irreversible operations anyway.
    """

    def __init__(self) -> None:
        super().__init__("the request's body was streamed and cannot be sent again")


@dataclass(frozen=True)
class _Options:
    provider: str = ""
    model: str = ""
    key_id: str = ""
    operation: str = ""
    priority: _fleet.Priority = "interactive"
    profile: str | None = None
    journal: bool | None = None
    labels: Mapping[str, str] | None = None
    deadline: Deadline | None = None
    safety: Safety | None = None

    @classmethod
    def of(cls, options: Mapping[str, Any]) -> _Options:
        unknown = set(options) - set(TransportOptions.__annotations__)
        if unknown:
            raise TypeError(f"policyd: unknown transport option {sorted(unknown)[0]!r}")
        o = cls(**options)
        _fleet.gate_call(o.priority, 0)  # a bad priority fails here, not at the first request
        for name in ("provider", "model", "key_id", "operation"):
            if not isinstance(getattr(o, name), str):
                raise TypeError(f"policyd: transport option {name} must be a string, not {getattr(o, name)!r}")
        return o


class _Request(NamedTuple):
    """What one request calls, and how the transport sends it."""

    provider: str
    model: str
    key_id: str
    operation: str
    tokens: int
    replayable: bool


@functools.lru_cache(maxsize=256)  # an SDK calls a few endpoints
def _endpoint(host: str, path: str) -> tuple[str, str]:
    """The provider and operation of a request to host and path."""
    return provider_of(host, path), operation_of(path)


def _prepare(fl: _Flavour, request: Any, o: _Options) -> _Request:
    """Read what request calls; strip the input-tokens header before it is sent."""
    headers = request.headers
    given = headers.get_list(INPUT_TOKENS_HEADER)  # as get() joins them, without its KeyError when absent
    header = ", ".join(given) if given else None
    if header is not None:
        del headers[INPUT_TOKENS_HEADER]
    try:
        body: bytes | None = request.content  # in memory (an SDK's JSON): replayable
    except fl.hx.RequestNotRead:
        body = None  # streamed: sent once
    size = len(body) if body is not None else int(headers.get("content-length", "0") or 0)
    url = request.url
    path = url.path
    provider, operation = _endpoint(url.host, path)
    return _Request(
        o.provider or provider,
        o.model or model_of(body, path),
        o.key_id,
        o.operation or operation,
        min(input_tokens(header, size), _fleet.MAX_CALL_INPUT_TOKENS),
        body is not None,
    )


def _call_options(request: Any, r: _Request, o: _Options) -> dict[str, Any]:
    return dict(
        provider=r.provider, model=r.model, key_id=r.key_id, operation=r.operation, method=request.method,
        profile=o.profile, journal=o.journal, labels=o.labels, deadline=o.deadline,
        safety=o.safety if r.replayable else "irreversible", priority=o.priority, input_tokens=r.tokens,
    )  # fmt: skip


class _Exchange:
    """One request's attempts: the last failed response (restored for the SDK), and the
    exception that carried it to the client's call."""

    def __init__(self, fl: _Flavour, client: Client | AsyncClient, request: Any, r: _Request) -> None:
        self.fl = fl
        self.client = client
        self.request = request
        self.r = r
        self.sent = 0
        self.last: Any = None  # the last failed response, its body restored
        self.failure: BaseException | None = None
        self.target = client._target(r.provider, r.model, r.key_id)

    def before_send(self) -> None:
        if self.sent and not self.r.replayable:
            raise RequestNotReplayable()
        self.sent += 1

    def received(self, response: Any) -> bool:
        """Hand the response's rate-limit headers over (as observe_rate_limits does); True for a
        success (passed on, its body watched and counted in flight until it ends or is closed:
        the request holds the provider's slot meanwhile, which a lease of the fleet's cap counts;
        and scanned, as the SDK reads it, for the input tokens the provider says it used, and the
        output tokens the call produced: the last count the body said, once it ends)."""
        fleet = self.client._fleet
        if self.target is None or fleet is None:
            return response.status_code < 400  # type: ignore[no-any-return]
        # One pass over the raw headers for the rate limits and the encoding; only those are
        # decoded (as the headers decode them), not every header a provider sends.
        headers = response.headers
        limits: list[tuple[bytes, bytes]] = []
        encodings: list[bytes] = []
        for k, v in headers.raw:
            name = k.lower()
            if name.startswith(_RATE_LIMIT_PREFIXES):
                limits.append((name, v))
            elif name == b"content-encoding":
                encodings.append(v)
        if limits:
            text = headers.encoding
            fleet.observe(self.target, [(k.decode(text), v.decode(text)) for k, v in limits])
        if response.status_code < 400:
            target, estimated = self.target, self.r.tokens
            fleet.flight(target, 1)
            response.stream = self.fl.watch(
                response.stream,
                self.stream_cut,
                functools.partial(fleet.body_ended, target),
                scanner_for(b", ".join(encodings).decode(headers.encoding) if encodings else ""),
                lambda used: fleet.record_usage(target, used, estimated),
            )
            return True
        return False

    def stream_cut(self) -> None:
        """A success's body broke off (a cut stream): the SDK sees the error, nothing is retried;
        the fleet counts it as a failed attempt decided here."""
        fleet = self.client._fleet
        if self.target is not None and fleet is not None:
            fleet.record(self.target, False)
            fleet.failed_locally(self.target)

    def failed(self, response: Any, head: bytes, rest: Any) -> BaseException:
        """Keep the failed response for the SDK (its body: head, then the rest of its stream) and
        return the exception the client's call decides on (httpx's HTTPStatusError)."""
        view = self.fl.error_view(response, head, self.request)
        response.stream = self.fl.replay(head, rest, response.stream)
        self.last = response
        message = f"HTTP {response.status_code} {response.reason_phrase}".strip()
        self.failure = self.fl.hx.HTTPStatusError(message, request=self.request, response=view)
        return self.failure

    def answer(self, stopped: RetryStopped) -> Any:
        """What the SDK gets when policyd stops the request: the last response, or an exception."""
        if self.last is not None and (stopped.error is self.failure or isinstance(stopped.error, RequestNotReplayable)):
            return self.last
        if stopped.attempts == 0:
            raise stopped  # the gate did not send it: the client's own error
        raise stopped.error from stopped  # no response: the transport's exception, as the SDK knows it


class PolicydTransport(_SyncBase):
    """An httpx (or httpx2) transport that sends each request as one :meth:`Client.call`
    through ``inner`` (default: ``httpx.HTTPTransport()``; pass ``httpx2.HTTPTransport()`` for
    an httpx2 client). Options: :class:`TransportOptions`."""

    def __init__(self, client: Client, *, inner: Any = None, **options: Unpack[TransportOptions]) -> None:
        from .client import Client

        if not isinstance(client, Client):
            raise TypeError(f"policyd: PolicydTransport needs a policyd_client.Client, not {type(client).__name__}")
        if inner is None:
            inner = _module("httpx").HTTPTransport()
        self._fl = _flavour_of(inner, asynchronous=False)
        self._client = client
        self._inner = inner
        self._options = _Options.of(options)

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        r = _prepare(self._fl, request, self._options)
        x = _Exchange(self._fl, self._client, request, r)

        def attempt() -> Any:
            x.before_send()
            if x.last is not None:
                x.last.close()  # retried: the previous failure's connection goes back to the pool
                x.last = None
            response = self._inner.handle_request(request)
            if x.received(response):
                return response
            try:
                head, rest = _read_head(response.stream)
            except BaseException:
                response.close()
                raise
            raise x.failed(response, head, rest)

        try:
            return self._client.call(attempt, **_call_options(request, r, self._options))  # type: ignore[no-any-return]
        except RetryStopped as stopped:
            return x.answer(stopped)  # type: ignore[no-any-return]
        except BaseException:
            if x.last is not None:
                x.last.close()
            raise

    def close(self) -> None:
        self._inner.close()


class AsyncPolicydTransport(_AsyncBase):
    """The asyncio transport: each request is one :meth:`AsyncClient.call` through ``inner``
    (default: ``httpx.AsyncHTTPTransport()``; ``httpx2.AsyncHTTPTransport()`` for httpx2).
    Cancelling the task that awaits a request stops a wait at once."""

    def __init__(self, client: AsyncClient, *, inner: Any = None, **options: Unpack[TransportOptions]) -> None:
        from .aio import AsyncClient

        if not isinstance(client, AsyncClient):
            raise TypeError(
                f"policyd: AsyncPolicydTransport needs a policyd_client.AsyncClient, not {type(client).__name__}"
            )
        if inner is None:
            inner = _module("httpx").AsyncHTTPTransport()
        self._fl = _flavour_of(inner, asynchronous=True)
        self._client = client
        self._inner = inner
        self._options = _Options.of(options)

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        r = _prepare(self._fl, request, self._options)
        x = _Exchange(self._fl, self._client, request, r)

        async def attempt() -> Any:
            x.before_send()
            if x.last is not None:
                await x.last.aclose()
                x.last = None
            response = await self._inner.handle_async_request(request)
            if x.received(response):
                return response
            try:
                head, rest = await _aread_head(response.stream)
            except BaseException:
                await response.aclose()
                raise
            raise x.failed(response, head, rest)

        try:
            response: httpx.Response = await self._client.call(attempt, **_call_options(request, r, self._options))
            return response
        except RetryStopped as stopped:
            return x.answer(stopped)  # type: ignore[no-any-return]
        except BaseException:
            if x.last is not None:
                await x.last.aclose()
            raise

    async def aclose(self) -> None:
        await self._inner.aclose()


# ---- the clients


def httpx_client(
    client: Client, *, inner: httpx.BaseTransport | None = None, **options: Unpack[TransportOptions]
) -> httpx.Client:
    """An ``httpx.Client`` whose requests go through policyd (:class:`PolicydTransport` over
    ``inner``, default ``httpx.HTTPTransport()``), following redirects as the SDKs' own do:
    ``OpenAI(http_client=httpx_client(pd, provider="openai"), max_retries=0)``."""
    hx = _module("httpx")
    transport = PolicydTransport(client, inner=inner or hx.HTTPTransport(), **options)
    return hx.Client(transport=transport, follow_redirects=True)  # type: ignore[no-any-return]


def httpx_async_client(
    client: AsyncClient, *, inner: httpx.AsyncBaseTransport | None = None, **options: Unpack[TransportOptions]
) -> httpx.AsyncClient:
    """An ``httpx.AsyncClient`` whose requests go through policyd (:class:`AsyncPolicydTransport`)."""
    hx = _module("httpx")
    transport = AsyncPolicydTransport(client, inner=inner or hx.AsyncHTTPTransport(), **options)
    return hx.AsyncClient(transport=transport, follow_redirects=True)  # type: ignore[no-any-return]


def httpx2_client(
    client: Client, *, inner: httpx2.BaseTransport | None = None, **options: Unpack[TransportOptions]
) -> httpx2.Client:
    """An ``httpx2.Client`` whose requests go through policyd (the current OpenAI and Anthropic
    SDKs take one): ``Anthropic(http_client=httpx2_client(pd, provider="anthropic"), max_retries=0)``."""
    hx = _module("httpx2")
    transport = PolicydTransport(client, inner=inner or hx.HTTPTransport(), **options)
    return hx.Client(transport=transport, follow_redirects=True)  # type: ignore[no-any-return]


def httpx2_async_client(
    client: AsyncClient, *, inner: httpx2.AsyncBaseTransport | None = None, **options: Unpack[TransportOptions]
) -> httpx2.AsyncClient:
    """An ``httpx2.AsyncClient`` whose requests go through policyd (:class:`AsyncPolicydTransport`)."""
    hx = _module("httpx2")
    transport = AsyncPolicydTransport(client, inner=inner or hx.AsyncHTTPTransport(), **options)
    return hx.AsyncClient(transport=transport, follow_redirects=True)  # type: ignore[no-any-return]


# ---- httpx and httpx2


def _module(name: str) -> ModuleType:
    try:
        return __import__(name)
    except ImportError:
        raise ImportError(f"policyd: the transport needs {name}: pip install 'policyd-client[{name}]'") from None


def _flavour_of(inner: Any, *, asynchronous: bool) -> _Flavour:
    """The library of the inner transport (httpx or httpx2), checked for the right kind."""
    for name in ("httpx2", "httpx"):
        hx = sys.modules.get(name)
        if hx is None:
            continue
        want, other = hx.BaseTransport, hx.AsyncBaseTransport
        if asynchronous:
            want, other = other, want
        if isinstance(inner, want):
            return _flavour(hx)
        if isinstance(inner, other):
            kind = "an async" if asynchronous else "a sync"
            raise TypeError(f"policyd: inner must be {kind} {name} transport, not {type(inner).__name__}")
    raise TypeError(f"policyd: inner must be an httpx or httpx2 transport, not {type(inner).__name__}")


_FLAVOURS: dict[str, _Flavour] = {}


def _flavour(hx: ModuleType) -> _Flavour:
    fl = _FLAVOURS.get(hx.__name__)
    if fl is None:
        fl = _FLAVOURS[hx.__name__] = _Flavour(hx)
    return fl


class _Flavour:
    """What the transport builds with one library's classes: the streams it puts in a response
    (a response's stream must be an instance of that library's SyncByteStream or AsyncByteStream)."""

    def __init__(self, hx: ModuleType) -> None:
        self.hx = hx

        class Watched(hx.SyncByteStream, hx.AsyncByteStream):  # type: ignore[misc, name-defined]
            """A success's body as it comes; an error while reading it is reported, then raised.
            ``ended`` is called once: at its end, when it breaks off, or when it is closed, with
            the last output count it read (None: none, or it broke off). ``scan`` reads each chunk
            as it passes (None: not scanned); ``on_usage`` gets the input count it finds, once."""

            def __init__(self, inner: Any, on_cut: Any, ended: Any, scan: Any = None, on_usage: Any = None) -> None:
                self._inner, self._on_cut, self._ended_cb = inner, on_cut, ended
                self._scan, self._on_usage = scan, on_usage
                self._ended = False

            def _end(self, cut: bool = False) -> None:
                if not self._ended:
                    self._ended = True
                    s = self._scan
                    self._ended_cb(None if cut or s is None else s.output)

            def _seen(self, scan: UsageScanner, chunk: bytes) -> UsageScanner | None:
                """Shows chunk to scan; None once scan is done (it reads no more)."""
                used = scan.feed(chunk)
                if used is not None:
                    self._on_usage(used)
                return None if scan.done else scan

            def _cut(self) -> None:
                self._end(cut=True)
                self._on_cut()

            def __iter__(self) -> Iterator[bytes]:
                scan = self._scan  # None once it is done: it reads no more (its output stays)
                try:
                    for chunk in self._inner:
                        if scan is not None:
                            scan = self._seen(scan, chunk)
                        yield chunk
                except Exception:
                    self._cut()
                    raise
                self._end()

            async def __aiter__(self) -> AsyncIterator[bytes]:
                scan = self._scan
                try:
                    async for chunk in self._inner:
                        if scan is not None:
                            scan = self._seen(scan, chunk)
                        yield chunk
                except Exception:
                    self._cut()
                    raise
                self._end()

            def close(self) -> None:
                self._end()
                self._inner.close()

            async def aclose(self) -> None:
                self._end()
                await self._inner.aclose()

        class Replayed(hx.SyncByteStream, hx.AsyncByteStream):  # type: ignore[misc, name-defined]
            """A failure's body: the head the transport read, then the rest of its stream."""

            def __init__(self, head: bytes, rest: Any, inner: Any) -> None:
                self._head, self._rest, self._inner = head, rest, inner

            def __iter__(self) -> Iterator[bytes]:
                if self._head:
                    yield self._head
                if self._rest is not None:
                    yield from self._rest

            async def __aiter__(self) -> AsyncIterator[bytes]:
                if self._head:
                    yield self._head
                if self._rest is not None:
                    async for chunk in self._rest:
                        yield chunk

            def close(self) -> None:
                self._inner.close()

            async def aclose(self) -> None:
                await self._inner.aclose()

        self.watch = Watched
        self.replay = Replayed

    def error_view(self, response: Any, head: bytes, request: Any) -> Any:
        """The failed response as policyd's failure reads it: status, headers, the body's head."""
        hx = self.hx
        try:
            return hx.Response(response.status_code, headers=response.headers, content=head, request=request)
        except Exception:  # a compressed body cut at ERROR_BODY_BYTES does not decode
            headers = [(k, v) for k, v in response.headers.multi_items() if k.lower() != "content-encoding"]
            return hx.Response(response.status_code, headers=headers, content=b"", request=request)


def _read_head(stream: Any) -> tuple[bytes, Iterator[bytes] | None]:
    """Read a failure's body up to ERROR_BODY_BYTES: (what was read, the rest or None at its end)."""
    it = iter(stream)
    chunks: list[bytes] = []
    n = 0
    for chunk in it:
        chunks.append(chunk)
        n += len(chunk)
        if n >= ERROR_BODY_BYTES:
            return b"".join(chunks), it
    return b"".join(chunks), None


async def _aread_head(stream: Any) -> tuple[bytes, AsyncIterator[bytes] | None]:
    it = stream.__aiter__()
    chunks: list[bytes] = []
    n = 0
    async for chunk in it:
        chunks.append(chunk)
        n += len(chunk)
        if n >= ERROR_BODY_BYTES:
            return b"".join(chunks), it
    return b"".join(chunks), None
